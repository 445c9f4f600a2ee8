// emulate.h: just enough of CUDA to run a kernel file's kernels on the CPU, so that their logic
// (indexing, tiles, barriers) is checked where no GPU exists: every block of a launch runs in
// turn, its threads as POSIX threads meeting at __syncthreads (a barrier), its shared memory one
// buffer. Device numerics (FMA contraction, exp, scheduling) are not emulated: the device run
// (tests/gpu/device_check.sh) checks those. emulate_attention.sh includes the rewritten kernel
// file after this header.
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

typedef void *cudaStream_t;
struct dim3 {
    unsigned x, y;
    dim3(unsigned a = 1, unsigned b = 1) : x(a), y(b) {}
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim;
static pthread_barrier_t block_barrier;
static double shared_memory[1 << 16]; // the running block's
#define __global__
#define __device__
#define __syncthreads() pthread_barrier_wait(&block_barrier)
#define CUDA_CHECK(call) (void)(call)
#define cudaGetLastError() 0
#define CHECK(cond, ...) \
    do { if (!(cond)) { fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1); } } while (0)

// kernel<<<grid, block>>>(...) becomes run_grid(grid, block, [&] { kernel(...); })
template <typename F> static void run_grid(dim3 grid, dim3 block, F kernel) {
    struct Thread { F *kernel; unsigned t, x, y; };
    blockDim = block;
    for (unsigned y = 0; y < grid.y; y++)
        for (unsigned x = 0; x < grid.x; x++) {
            pthread_barrier_init(&block_barrier, NULL, block.x);
            std::vector<pthread_t> ids(block.x);
            std::vector<Thread> threads(block.x);
            for (unsigned t = 0; t < block.x; t++) {
                threads[t] = {&kernel, t, x, y};
                pthread_create(&ids[t], NULL, [](void *p) -> void * {
                    Thread *th = (Thread *)p;
                    threadIdx = dim3(th->t), blockIdx = dim3(th->x, th->y);
                    (*th->kernel)();
                    return NULL;
                }, &threads[t]);
            }
            for (pthread_t id : ids) pthread_join(id, NULL);
            pthread_barrier_destroy(&block_barrier);
        }
}
