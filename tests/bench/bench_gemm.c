// bench_gemm.c: the sgemm (dgemm in float64) throughput of this machine through the library's own
// setup (core/blas.c: the kernels chosen for this CPU), for the step benchmark's "fraction of
// GEMM throughput". usage: bench_gemm THREADS [M N K [SETS]]; prints "gemm THREADS threads MxNxK:
// X GFLOP/s" (best of 10 passes after one warm-up pass), then "CPU: " the CPU's model and the
// vector width and tiles the kernels run with (core/cpu.h). A pass is one call; with SETS given, 16
// calls on SETS operand sets in turn, as a training step's layers take theirs (SETS 16: the
// operands then come from further than the cache that one set fits in; SETS 1: the same operands,
// in cache, each call).
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
    if (argc != 2 && argc != 5 && argc != 6) {
        fprintf(stderr, "usage: bench_gemm THREADS [M N K [SETS]]\n");
        return 2;
    }
    int threads = atoi(argv[1]), M = 1024, N = 1024, K = 1024, sets = argc == 6 ? atoi(argv[5]) : 1;
    int calls = argc == 6 ? 16 : 1; // a pass
    if (argc >= 5) M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
    if (threads < 1 || M < 1 || N < 1 || K < 1 || sets < 1) {
        fprintf(stderr, "bench_gemm: THREADS, M, N, K and SETS must be positive integers\n");
        return 2;
    }
    blas_setup();
    openblas_set_num_threads(threads);
    size_t per = (size_t)M * K + (size_t)K * N + (size_t)M * N; // a, b, c of one set
    real *all = malloc(sizeof(real) * per * sets);
    if (!all) {
        fprintf(stderr, "bench_gemm: %d sets of %dx%dx%d do not fit in memory\n", sets, M, N, K);
        return 1;
    }
    rng_fill_normal(all, per * sets, 1, 1, 0, 1);
    double best = 1e9;
    for (int r = 0; r < 11; r++) {
        double t = now();
        for (int i = 0; i < calls; i++) {
            real *a = all + (size_t)(i % sets) * per, *b = a + (size_t)M * K, *c = b + (size_t)K * N;
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c, N);
        }
        t = now() - t;
        if (r && t < best) best = t;
    }
    char cpu[256];
    printf("gemm %d threads %dx%dx%d%s: %.1f GFLOP/s (%s)\nCPU: %s\n", threads, M, N, K,
           argc == 6 ? (sets > 1 ? ", operand sets in turn" : ", the same operands") : "",
           2.0 * M * N * K * calls / best / 1e9, blas_setup(),
           cpu_text(cpu, sizeof cpu));
    free(all);
    return 0;
}
