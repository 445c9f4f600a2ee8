// device.c: core/device.h for the emulated device: one device whose memory is host memory that
// the host cannot touch. Every allocation is its own mapping, kept PROT_NONE except while an
// emulated kernel, GEMM, copy or fill runs (emulated_device_open / _close), so host code that
// reads or writes device memory directly, which on a GPU would crash or read garbage, crashes
// here too (SIGSEGV) instead of passing. Also the copies of device memory with which each launch
// compares its schedules, and the fibers that run a block's threads (see cuda_runtime.h here).
#include "../../../core/check.h"
#include "../../../core/device.h"
#include "cuda_runtime_api.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_ALLOCS 4096
// each allocation: its mapping (len bytes, bytes of them asked for), and its contents saved
// before a launch and kept after the launch's first schedule (cap bytes each)
static struct { char *p, *saved, *kept; size_t len, bytes, cap; } allocs[MAX_ALLOCS];
static int n_allocs, open_depth;
static bool selected;

static void protect_all(int prot) {
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p) CHECK(!mprotect(allocs[i].p, allocs[i].len, prot), "emulated device: mprotect");
}
void emulated_device_open(void) {
    if (open_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
void emulated_device_close(void) {
    if (--open_depth == 0) protect_all(PROT_NONE);
}

int device_count(void) { return 1; }
size_t device_memory(int index) { return (void)index, (size_t)64 << 30; } // host memory, in fact
void device_select(int index) {
    CHECK(index == 0, "emulated device: there is only device 0, not %d", index);
    selected = true;
}
bool device_in_use(void) { return selected; }
const char *device_name(void) { return "emulated device"; }

void *device_alloc(size_t bytes) {
    size_t page = 4096, len = (bytes + page - 1) / page * page + page;
    int slot = 0;
    while (slot < n_allocs && allocs[slot].p) slot++;
    CHECK(slot < MAX_ALLOCS, "emulated device: more than %d allocations", MAX_ALLOCS);
    char *p = mmap(NULL, len, open_depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "emulated device: cannot map %zu bytes", len);
    allocs[slot].p = p, allocs[slot].len = len, allocs[slot].bytes = bytes;
    if (slot == n_allocs) n_allocs++;
    return p;
}

void device_free(void *ptr) {
    for (int i = 0; ptr && i < n_allocs; i++)
        if (allocs[i].p == ptr) {
            munmap(allocs[i].p, allocs[i].len);
            free(allocs[i].saved);
            free(allocs[i].kept);
            memset(&allocs[i], 0, sizeof allocs[i]);
            return;
        }
    CHECK(!ptr, "emulated device: device_free of %p, which device_alloc did not return", ptr);
}

bool device_pointer(const void *ptr) {
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p && (const char *)ptr >= allocs[i].p && (const char *)ptr < allocs[i].p + allocs[i].len)
            return true;
    return false;
}

void copy_bytes(void *dst, const void *src, size_t bytes) {
    emulated_device_open();
    if (bytes) memmove(dst, src, bytes);
    emulated_device_close();
}

void zero_bytes(void *ptr, size_t bytes) {
    emulated_device_open();
    if (bytes) memset(ptr, 0, bytes);
    emulated_device_close();
}

void device_sync(void) {}

// ---- schedules: device memory saved, kept, restored, compared -----------------------------------

// the value of the environment variable name, a whole number in [lo, hi], else def
static long env_number(const char *name, long lo, long hi, long def) {
    const char *e = getenv(name);
    if (!e) return def;
    char *end;
    long v = strtol(e, &end, 10);
    CHECK(end != e && !*end && v >= lo && v <= hi, "%s=%s: pass a whole number in [%ld, %ld]", name,
          e, lo, hi);
    return v;
}
int emulated_schedules(void) { return (int)env_number("EMULATE_SCHEDULES", 1, 3, 3); }
uint64_t emulated_seed(void) { return (uint64_t)env_number("EMULATE_SEED", 0, LONG_MAX, 1); }

void emulated_memory_save(void) {
    for (int i = 0; i < n_allocs; i++) {
        if (!allocs[i].p) continue;
        if (allocs[i].cap < allocs[i].bytes) {
            allocs[i].cap = allocs[i].bytes;
            allocs[i].saved = xrealloc(allocs[i].saved, allocs[i].cap, 1);
            allocs[i].kept = xrealloc(allocs[i].kept, allocs[i].cap, 1);
        }
        memcpy(allocs[i].saved, allocs[i].p, allocs[i].bytes);
    }
}
void emulated_memory_keep(void) {
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p) memcpy(allocs[i].kept, allocs[i].p, allocs[i].bytes);
}
void emulated_memory_restore(void) {
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p) memcpy(allocs[i].p, allocs[i].saved, allocs[i].bytes);
}
bool emulated_memory_differs(char *where, size_t len) {
    for (int i = 0; i < n_allocs; i++) {
        if (!allocs[i].p || !memcmp(allocs[i].kept, allocs[i].p, allocs[i].bytes)) continue;
        size_t at = 0;
        while (allocs[i].kept[at] == allocs[i].p[at]) at++;
        snprintf(where, len, "first at byte %zu of an allocation of %zu bytes", at, allocs[i].bytes);
        return true;
    }
    return false;
}

// ---- fibers: the callee-saved registers on the stack, then the stack pointer switched -----------
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl emulated_fiber_switch\n"
        "emulated_fiber_switch:\n" // rdi: from, rsi: to
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n");
// the frame it pops: r15 ... rbp, then the return address; above it, a start's entry() finds the
// return address of a call (never used)
enum { FRAME_WORDS = 7, RETURN_WORD = 6, ABOVE_WORDS = 1 };
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl emulated_fiber_switch\n"
        "emulated_fiber_switch:\n" // x0: from, x1: to
        "  sub sp, sp, #160\n"
        "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #160\n"
        "  ret\n");
// the frame it pops: x19 ... x30 (x30 the return address), d8 ... d15
enum { FRAME_WORDS = 20, RETURN_WORD = 11, ABOVE_WORDS = 0 };
#else
#error "the emulated device switches fibers on x86-64 and AArch64 only"
#endif

void *emulated_fiber_start(char *stack_top, void (*entry)(void)) {
    // a frame for emulated_fiber_switch to pop, which returns into entry() with the stack aligned
    // as after a call (entry never returns)
    uintptr_t *sp = (uintptr_t *)((uintptr_t)stack_top & ~(uintptr_t)15) - ABOVE_WORDS - FRAME_WORDS;
    memset(sp, 0, (FRAME_WORDS + ABOVE_WORDS) * sizeof *sp);
    sp[RETURN_WORD] = (uintptr_t)entry;
    return sp;
}
