// bench_gemm.c: the sgemm (dgemm in float64) throughput of this machine through the library's own
// setup (core/blas.c: the kernels chosen for this CPU), for the step benchmark's "fraction of
// GEMM throughput". usage: bench_gemm THREADS [M N K]; prints "gemm THREADS threads MxNxK: X GFLOP/s"
// (best of 10 calls after one warm-up call), then "CPU: " the CPU's model and the vector width and
// tiles the kernels run with (core/cpu.h).
#include "../../core/blas.h"
#include "../../core/cpu.h"
#include "../../core/real.h"
#include "../../core/rng.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 5) {
        fprintf(stderr, "usage: bench_gemm THREADS [M N K]\n");
        return 2;
    }
    int threads = atoi(argv[1]), M = 1024, N = 1024, K = 1024;
    if (argc == 5) M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
    blas_setup();
    openblas_set_num_threads(threads);
    real *a = malloc(sizeof(real) * M * K), *b = malloc(sizeof(real) * K * N), *c = malloc(sizeof(real) * M * N);
    rng_fill_normal(a, (size_t)M * K, 1, 1, 0, 1);
    rng_fill_normal(b, (size_t)K * N, 1, 2, 0, 1);
    double best = 1e9;
    for (int r = 0; r < 11; r++) {
        double t = now();
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c, N);
        t = now() - t;
        if (r && t < best) best = t;
    }
    char cpu[256];
    printf("gemm %d threads %dx%dx%d: %.1f GFLOP/s (%s)\nCPU: %s\n", threads, M, N, K,
           2.0 * M * N * K / best / 1e9, blas_setup(), cpu_text(cpu, sizeof cpu));
    free(a), free(b), free(c);
    return 0;
}
