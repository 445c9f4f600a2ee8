// main.c: the `train` program: training (default), probe, compare and verify subcommands.
#include "../core/blas.h"
#include "../parallel/comm.h"
#include "compare.h"
#include "probe.h"
#include "sample.h"
#include "train.h"
#include "verify.h"
#include <cblas.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

// The cores this rank may run on: those of its CPU mask where mpirun bound it (to one core for a
// few ranks), else the machine's cores shared among the ranks on it.
static int default_threads(const Comm *c) {
    cpu_set_t mask;
    long online = sysconf(_SC_NPROCESSORS_ONLN), mine = online;
    if (!sched_getaffinity(0, sizeof mask, &mask)) mine = CPU_COUNT(&mask);
    long n = mine < online ? mine : online / comm_node_size(c);
    return n > 0 ? (int)n : 1;
}

int main(int argc, char **argv) {
    // compare and verify run outside MPI (verify starts mpirun itself)
    if (argc > 1 && !strcmp(argv[1], "compare")) return compare_main(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "verify")) return verify_main(argc - 2, argv + 2);
    Comm c;
    comm_init(&c, &argc, &argv);
    blas_setup(); // OpenBLAS's kernels for this CPU, before any GEMM
    openblas_set_num_threads(default_threads(&c)); // OpenMP's too (train: --threads)
    int rc;
    if (argc > 1 && !strcmp(argv[1], "probe")) rc = probe_main(argc - 2, argv + 2, &c);
    else if (argc > 1 && !strcmp(argv[1], "sample")) rc = sample_main(argc - 2, argv + 2, &c);
    else rc = train_main(argc - 1, argv + 1, &c);
    comm_finalize();
    return rc;
}
