// device.c: core/device.h for the emulated device: one device whose memory is host memory that
// the host cannot touch. Every allocation is its own mapping, kept PROT_NONE except while an
// emulated kernel, GEMM, copy or fill runs (emulated_device_open / _close), so host code that
// reads or writes device memory directly, which on a GPU would crash or read garbage, crashes
// here too (SIGSEGV) instead of passing.
#include "../../../core/check.h"
#include "../../../core/device.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_ALLOCS 4096
static struct { char *p; size_t len; } allocs[MAX_ALLOCS];
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
    allocs[slot].p = p, allocs[slot].len = len;
    if (slot == n_allocs) n_allocs++;
    return p;
}

void device_free(void *ptr) {
    for (int i = 0; ptr && i < n_allocs; i++)
        if (allocs[i].p == ptr) {
            munmap(allocs[i].p, allocs[i].len);
            allocs[i].p = NULL;
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
