// main.c: the `train` program: training (default), probe, sample, compare, verify and bugs
// subcommands; with no arguments at all, a short usage.
#include "../core/blas.h"
#include "../parallel/comm.h"
#include "compare.h"
#include "locate.h"
#include "probe.h"
#include "sample.h"
#include "train.h"
#include "verify.h"
#include "bugs.h"
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

// `train/train` alone: what to run first, instead of an 8000-step run nobody asked for
static void usage(const Comm *c) {
    print0(c, "usage: mpirun -np N train/train [flags]   train a DiT, its sequence split over N ranks\n"
              "       train/train --help                 every flag (probe, sample, compare, verify and\n"
              "                                          bugs take --help too)\n"
              "try:   make demo                          2 ranks against 1 rank, with pictures (minutes)\n"
              "       train/train --steps 1000 --out runs/first\n"
              "       train/train verify --ranks 2 --steps 300 --out runs/check\n");
}

int main(int argc, char **argv) {
    // compare, verify and bugs run outside MPI (verify and bugs start mpirun themselves)
    if (argc > 1 && !strcmp(argv[1], "compare")) return compare_main(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "verify")) return verify_main(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "locate")) return locate_main(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "bugs")) return bugs_main(argc - 2, argv + 2);
    Comm c;
    comm_init(&c, &argc, &argv);
    blas_setup(); // OpenBLAS's kernels for this CPU, before any GEMM
    openblas_set_num_threads(default_threads(&c)); // OpenMP's too (train: --threads)
    int rc = 0;
    if (argc == 1) usage(&c);
    else if (!strcmp(argv[1], "probe")) rc = probe_main(argc - 2, argv + 2, &c);
    else if (!strcmp(argv[1], "sample")) rc = sample_main(argc - 2, argv + 2, &c);
    else rc = train_main(argc - 1, argv + 1, &c);
    comm_finalize();
    return rc;
}
