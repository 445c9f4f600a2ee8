// cuda_runtime.h for the emulated device (tests/gpu/emulate.sh): just enough of CUDA to run this
// project's kernel files on the CPU, so that their logic (indexing, tiles, barriers, warp
// shuffles) is checked where no GPU exists. Every block of a launch runs in turn. A kernel that
// meets at __syncthreads or shuffles within warps runs its block's threads as fibers (ucontext)
// on this thread: each runs until it waits at a barrier (the block's, or its warp's for a
// shuffle), and a barrier opens when every thread of its block or warp that has not returned
// waits there. Any other kernel runs its threads one after another. Shared memory is one buffer,
// as blocks do not overlap. Device numerics (FMA contraction, exp, tanh) and speed are not
// emulated: the device run (tests/gpu/device_check.sh) checks those.
#pragma once
#include "cuda_runtime_api.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static dim3 threadIdx, blockIdx, blockDim, gridDim;
static double shared_memory[1 << 16]; // dynamic shared memory of the running block
#define __global__
#define __device__
#define __shared__ static

enum { FIBER_STACK = 1 << 17, MAX_THREADS = 1024, BLOCK_SCOPE = -1 };
struct Fiber {
    ucontext_t ctx;
    int state, scope; // state: 0 ready, 1 waiting at the barrier of scope (a warp, or the block), 2 returned
};
static Fiber fibers[MAX_THREADS];
static char *fiber_stacks;
static ucontext_t scheduler;
static unsigned current;
static double warp_slots[MAX_THREADS];
static void (*fiber_entry)(void *);
static void *fiber_arg;

static unsigned linear_thread(void) { return threadIdx.y * blockDim.x + threadIdx.x; }

static void wait_at(int scope) {
    fibers[current].state = 1, fibers[current].scope = scope;
    swapcontext(&fibers[current].ctx, &scheduler);
}
#define __syncthreads() wait_at(BLOCK_SCOPE)

template <typename T> static T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    unsigned t = linear_thread();
    memcpy(&warp_slots[t], &v, sizeof v);
    wait_at((int)(t / 32));
    T other;
    memcpy(&other, &warp_slots[(t & ~31u) | ((t % 32) ^ lane_mask)], sizeof other);
    wait_at((int)(t / 32));
    return other;
}

static void fiber_main(void) {
    fiber_entry(fiber_arg);
    fibers[current].state = 2;
} // returns to the scheduler (uc_link)

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

template <typename F> static void call(void *f) { (*(F *)f)(); }

// kernel<<<grid, block, shared, stream>>>(...) becomes run_grid(grid, block, meets, [&] { kernel(...); })
template <typename F> static void run_grid(dim3 grid, dim3 block, bool meets, F kernel) {
    unsigned n = block.x * block.y;
    if (n > MAX_THREADS) fprintf(stderr, "emulated launch of %u threads a block\n", n), exit(1);
    blockDim = block, gridDim = grid;
    emulated_device_open();
    if (meets && !fiber_stacks) fiber_stacks = (char *)malloc((size_t)MAX_THREADS * FIBER_STACK);
    fiber_entry = call<F>, fiber_arg = &kernel;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = dim3(bx, by);
            if (!meets) {
                for (unsigned t = 0; t < n; t++) threadIdx = dim3(t % block.x, t / block.x), kernel();
                continue;
            }
            for (unsigned t = 0; t < n; t++) {
                getcontext(&fibers[t].ctx);
                fibers[t].ctx.uc_stack.ss_sp = fiber_stacks + (size_t)t * FIBER_STACK;
                fibers[t].ctx.uc_stack.ss_size = FIBER_STACK;
                fibers[t].ctx.uc_link = &scheduler;
                makecontext(&fibers[t].ctx, fiber_main, 0);
                fibers[t].state = 0;
            }
            for (;;) {
                for (unsigned t = 0; t < n; t++)
                    if (fibers[t].state == 0) {
                        current = t, threadIdx = dim3(t % block.x, t / block.x);
                        swapcontext(&scheduler, &fibers[t].ctx);
                    }
                bool done = true;
                for (unsigned t = 0; t < n; t++) done = done && fibers[t].state == 2;
                if (done) break;
                if (!open_barriers(n)) fprintf(stderr, "emulated block: threads wait forever\n"), exit(1);
            }
        }
    emulated_device_close();
}
