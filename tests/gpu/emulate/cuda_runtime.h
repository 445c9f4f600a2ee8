// cuda_runtime.h for the emulated device (tests/gpu/emulate.sh): just enough of CUDA to run this
// project's kernel files on the CPU, so that their logic (indexing, tiles, barriers, warp
// shuffles) is checked where no GPU exists. A kernel that meets at __syncthreads or shuffles
// within warps runs its block's threads as fibers on this thread: each runs until it waits at a
// barrier (the block's, or its warp's for a shuffle), and a barrier opens when every thread of
// its block or warp that has not returned waits there; the runs between two openings are a
// phase. Any other kernel runs each thread to its end, one after another (one phase).
// A GPU runs a block's threads and a grid's blocks in no set order, so each launch runs under
// several schedules (device.c: EMULATE_SCHEDULES, default all three): forward (blocks and threads
// in index order), reverse, and a seeded shuffle (blocks shuffled, and the threads anew in each
// phase), each from the device memory as it was before the launch. Results must be identical
// bit for bit: where they differ, threads race (a missing __syncthreads, two threads writing one
// place), and the program stops saying which kernel and where. Shared memory is one buffer, as
// blocks do not overlap. Device numerics (FMA contraction, exp, tanh) and speed are not
// emulated: the device run (tests/gpu/device_check.sh) checks those.
#pragma once
#include "cuda_runtime_api.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static dim3 threadIdx, blockIdx, blockDim, gridDim;
static double shared_memory[1 << 16]; // dynamic shared memory of the running block
#define __global__
#define __device__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

enum { FIBER_STACK = 1 << 17, MAX_THREADS = 1024, BLOCK_SCOPE = -1 };
struct Fiber {
    void *sp;         // its stack pointer while it is switched out (emulated_fiber_switch)
    int state, scope; // state: 0 ready, 1 waiting at the barrier of scope (a warp, or the block), 2 returned
};
static Fiber fibers[MAX_THREADS];
static char *fiber_stacks;
static void *scheduler_sp;
static unsigned current;
static void (*fiber_entry)(void *);
static void *fiber_arg;

static unsigned linear_thread(void) { return threadIdx.y * blockDim.x + threadIdx.x; }

static void wait_at(int scope) {
    fibers[current].state = 1, fibers[current].scope = scope;
    emulated_fiber_switch(&fibers[current].sp, scheduler_sp);
}
#define __syncthreads() wait_at(BLOCK_SCOPE)

// a kernel's opt-in to more dynamic shared memory than 48 KiB, up to what the device gives a block:
// the emulated device says an H100's 227 KiB (its block buffer has 512), or EMULATE_BLOCK_SHARED
// bytes (a test of the refusal on smaller GPUs)
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin };
static cudaError_t cudaGetDevice(int *dev) { return *dev = 0, cudaSuccess; }
static cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr, int) {
    const char *e = getenv("EMULATE_BLOCK_SHARED");
    *value = e ? atoi(e) : 227 * 1024;
    return cudaSuccess;
}
template <typename F> static cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int bytes) {
    if ((size_t)bytes > sizeof shared_memory) fprintf(stderr, "emulated launch: %d bytes of shared memory\n", bytes), exit(1);
    return cudaSuccess;
}

// ---- warp-collective operations: every lane of the warp meets at its barrier ---------------------
// A warp's lanes put `bytes` each (at most WARP_PART) and each reads all 32 parts in lane order;
// the shuffles, the tensor cores' mma and ldmatrix (kernels/tensorcore.cuh) are made of it. One
// barrier a call: the parts alternate between two buffers, and a lane that writes a buffer again
// (two calls later) has passed the barrier of the call between, which every lane reaches only
// once it has read that buffer.
#define EMULATED_DEVICE 1
enum { WARP_PART = 64 };
alignas(16) static unsigned char warp_parts[2][MAX_THREADS][WARP_PART];
static unsigned warp_calls[MAX_THREADS]; // each thread's calls in its block, for the buffer
// the warp's 32 parts in lane order, WARP_PART bytes apart, once each lane put its own: valid
// until this lane's next call
static const unsigned char *warp_publish(const void *mine, size_t bytes) {
    unsigned t = linear_thread(), first = t & ~31u, u = warp_calls[t]++ & 1;
    memcpy(warp_parts[u][t], mine, bytes);
    wait_at((int)(t / 32));
    return warp_parts[u][first];
}
static void warp_share(const void *mine, size_t bytes, void *all) {
    const unsigned char *parts = warp_publish(mine, bytes);
    for (unsigned l = 0; l < 32; l++) memcpy((char *)all + l * bytes, parts + l * WARP_PART, bytes);
}
static unsigned lane_id(void) { return linear_thread() % 32; }

// v of lane `from` of this warp
template <typename T> static T warp_read(T v, unsigned from) {
    T all[32];
    static_assert(sizeof(T) <= WARP_PART, "a shuffled value fits a lane's part");
    warp_share(&v, sizeof v, all);
    return all[from % 32];
}
template <typename T> static T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    return warp_read(v, lane_id() ^ (unsigned)lane_mask);
}
template <typename T> static T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return warp_read(v, (lane_id() & ~(unsigned)(width - 1)) | ((unsigned)src & (unsigned)(width - 1)));
}
template <typename T> static T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
    unsigned lane = lane_id(), in_seg = lane & (unsigned)(width - 1);
    return warp_read(v, in_seg + delta < (unsigned)width ? lane + delta : lane);
}
#define __syncwarp(...) wait_at((int)(linear_thread() / 32))

// ---- cp.async: copies that land at their wait, or at once -------------------------------------
// Each thread's copies since its last commit form a group as it commits; wait_group N completes
// all but the N newest committed groups (in order), and a thread's end completes the rest. Under
// the forward and reverse schedules a copy lands at its wait: a read of shared memory before
// the wait reads what was there before the copy, as a GPU may. Under the shuffled schedule it
// lands at once, as a GPU may too: a copy into a buffer that other warps still read (a missing
// __syncthreads before the next tile's copies) then changes what they read, and the schedules
// disagree.
static bool cp_async_at_once; // the shuffled schedule's
enum { CP_ASYNC_MAX = 64 };
struct CpAsync {
    void *dst;
    const void *src;
    int bytes, group; // group -1: not yet committed
};
static CpAsync cp_pending[MAX_THREADS][CP_ASYNC_MAX];
static int cp_count[MAX_THREADS], cp_groups[MAX_THREADS];
static void cp_async_copy(void *dst, const void *src, int bytes) {
    unsigned t = linear_thread();
    if (cp_async_at_once) return (void)memcpy(dst, src, (size_t)bytes);
    if (cp_count[t] == CP_ASYNC_MAX) fprintf(stderr, "emulated cp.async: %d copies pending\n", CP_ASYNC_MAX), exit(1);
    cp_pending[t][cp_count[t]++] = CpAsync{dst, src, bytes, -1};
}
static void cp_async_commit_group(void) {
    unsigned t = linear_thread();
    for (int i = 0; i < cp_count[t]; i++)
        if (cp_pending[t][i].group < 0) cp_pending[t][i].group = cp_groups[t];
    cp_groups[t]++;
}
// completes the committed groups older than the n newest (every copy when n < 0: the thread ends)
static void cp_async_wait_group(int n) {
    unsigned t = linear_thread();
    int keep = 0;
    for (int i = 0; i < cp_count[t]; i++) {
        CpAsync *c = &cp_pending[t][i];
        if (n >= 0 && (c->group < 0 || c->group >= cp_groups[t] - n)) cp_pending[t][keep++] = *c;
        else memcpy(c->dst, c->src, (size_t)c->bytes);
    }
    cp_count[t] = keep;
}

static void fiber_main(void) {
    fiber_entry(fiber_arg);
    cp_async_wait_group(-1);
    fibers[current].state = 2;
    emulated_fiber_switch(&fibers[current].sp, scheduler_sp); // never comes back
}

// opens the barriers every live thread of their scope waits at; false when none opens
static bool open_barriers(unsigned n) {
    bool opened = false;
    for (int scope = BLOCK_SCOPE; scope < (int)((n + 31) / 32); scope++) {
        unsigned lo = scope < 0 ? 0 : 32 * scope, hi = scope < 0 ? n : (lo + 32 < n ? lo + 32 : n);
        bool all = true, any = false;
        for (unsigned t = lo; t < hi; t++) {
            if (fibers[t].state == 2) continue;
            any = any || (fibers[t].state == 1 && fibers[t].scope == scope);
            all = all && fibers[t].state == 1 && fibers[t].scope == scope;
        }
        if (!all || !any) continue;
        for (unsigned t = lo; t < hi; t++)
            if (fibers[t].state == 1) fibers[t].state = 0;
        opened = true;
    }
    return opened;
}

// ---- schedules -----------------------------------------------------------------------------------
enum Schedule { FORWARD, REVERSE, SHUFFLE };
static const char *const schedule_names[] = {"forward", "reverse", "shuffled"};
static uint64_t shuffle_state;

static uint64_t splitmix(void) {
    uint64_t z = (shuffle_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// order[0..n) = 0..n-1 in the schedule's order (a fresh permutation at each call when shuffled)
static void schedule_order(Schedule s, unsigned *order, size_t n) {
    for (size_t i = 0; i < n; i++) order[i] = (unsigned)(s == REVERSE ? n - 1 - i : i);
    if (s == SHUFFLE)
        for (size_t i = n; i > 1; i--) { // Fisher-Yates
            size_t j = splitmix() % i;
            unsigned tmp = order[i - 1];
            order[i - 1] = order[j], order[j] = tmp;
        }
}

template <typename F> static void call(void *f) { (*(F *)f)(); }

// the launch's blocks, in the schedule's order
template <typename F> static void run_blocks(Schedule s, dim3 grid, dim3 block, bool meets, F &kernel) {
    static unsigned order[MAX_THREADS];
    unsigned n = block.x * block.y;
    size_t nb = (size_t)grid.x * grid.y;
    unsigned *blocks = (unsigned *)malloc(nb * sizeof(unsigned));
    schedule_order(s, blocks, nb);
    cp_async_at_once = s == SHUFFLE;
    fiber_entry = call<F>, fiber_arg = &kernel;
    for (size_t b = 0; b < nb; b++) {
        blockIdx = dim3(blocks[b] % grid.x, blocks[b] / grid.x);
        if (!meets) {
            schedule_order(s, order, n);
            for (unsigned i = 0; i < n; i++)
                threadIdx = dim3(order[i] % block.x, order[i] / block.x), current = order[i], kernel(), cp_async_wait_group(-1);
            continue;
        }
        for (unsigned t = 0; t < n; t++) {
            fibers[t].sp = emulated_fiber_start(fiber_stacks + (size_t)(t + 1) * FIBER_STACK, fiber_main);
            fibers[t].state = 0, warp_calls[t] = 0;
        }
        for (;;) { // a phase: every ready thread runs until it waits or returns
            schedule_order(s, order, n);
            for (unsigned i = 0; i < n; i++) {
                unsigned t = order[i];
                if (fibers[t].state != 0) continue;
                current = t, threadIdx = dim3(t % block.x, t / block.x);
                emulated_fiber_switch(&scheduler_sp, fibers[t].sp);
            }
            bool done = true;
            for (unsigned t = 0; t < n; t++) done = done && fibers[t].state == 2;
            if (done) break;
            if (!open_barriers(n)) fprintf(stderr, "emulated block: threads wait forever\n"), exit(1);
        }
    }
    free(blocks);
}

// kernel<<<grid, block, shared, stream>>>(...) becomes
// run_grid("kernel", grid, block, meets, [&] { kernel(...); }): the launch under each schedule,
// each from the device memory as it was before it, compared with the forward schedule's
template <typename F>
static void run_grid(const char *name, dim3 grid, dim3 block, bool meets, F kernel) {
    static uint64_t launches;
    unsigned n = block.x * block.y;
    if (n > MAX_THREADS) fprintf(stderr, "emulated launch of %u threads a block\n", n), exit(1);
    blockDim = block, gridDim = grid;
    emulated_device_open();
    if (meets && !fiber_stacks) fiber_stacks = (char *)malloc((size_t)MAX_THREADS * FIBER_STACK);
    int schedules = emulated_schedules();
    shuffle_state = emulated_seed() ^ (launches++ * 0xd1b54a32d192ed03ull);
    if (schedules > 1) emulated_memory_save();
    for (int s = 0; s < schedules; s++) {
        if (s > 0) emulated_memory_restore();
        run_blocks((Schedule)s, grid, block, meets, kernel);
        if (s == 0 && schedules > 1) emulated_memory_keep();
        char where[160];
        if (s > 0 && emulated_memory_differs(where, sizeof where)) {
            fprintf(stderr, "emulated kernel %s (grid %ux%u, block %ux%u): the %s schedule leaves "
                    "device memory different from the forward one (%s): its threads race, e.g. a "
                    "missing __syncthreads\n", name, grid.x, grid.y, block.x, block.y,
                    schedule_names[s], where);
            exit(1);
        }
    }
    emulated_device_close();
}
