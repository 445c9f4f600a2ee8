// main.c: the `train` program: training (default), probe, sample, plan, compare, verify, bugs and locate
// subcommands; with no arguments at all, a short usage.
#include "../core/blas.h"
#include "../core/cpu.h"
#include "../run/flags.h"
#include "../parallel/transport/comm.h"
#include "../study/compare.h"
#include "../study/locate.h"
#include "../plan/plan.h"
#include "../study/probe.h"
#include "sample.h"
#include "train.h"
#include "../study/verify.h"
#include "../study/bugs.h"
#include <cblas.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
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
              "       train/train --help                 every flag (probe, sample, plan, compare,\n"
              "                                          verify, bugs and locate take --help too)\n"
              "try:   make demo                          2 ranks against 1 rank, with pictures (minutes)\n"
              "       train/train --steps 1000 --out runs/first\n"
              "       train/train verify --ranks 2 --steps 300 --out runs/check\n");
}

// this process's rank when a launcher started it (mpirun, or srun with PMIx, which put the rank in
// the environment), else NULL
static const char *launcher_rank(void) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    return rank ? rank : getenv("PMIX_RANK");
}

// compare, locate, verify and bugs run outside MPI: verify and bugs start mpirun themselves, which Open
// MPI refuses inside mpirun, and ranks that each ran one compare would all write its plot. Started
// by a launcher (mpirun, or srun with PMIx, which put the rank in the environment), they stop
// with exit code 2 and a sentence from the first rank. -1 when argv names none of them.
static int outside_mpi(int argc, char **argv) {
    static const struct { const char *name, *what; int (*run)(int, char **); } cmds[] = {
        {"compare", "is a single process, not an MPI job", compare_main},
        {"locate", "is a single process, not an MPI job", locate_main},
        {"verify", "starts its own ranks with mpirun, which cannot run inside mpirun", verify_main},
        {"bugs", "starts its own ranks with mpirun, which cannot run inside mpirun", bugs_main}};
    for (size_t i = 0; argc > 1 && i < sizeof cmds / sizeof *cmds; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        const char *rank = launcher_rank();
        if (!rank) return cmds[i].run(argc - 2, argv + 2);
        if (!strcmp(rank, "0")) { // one write, which mpirun's own messages cannot split
            char line[4096];
            size_t n = (size_t)snprintf(line, sizeof line, "error: train/train %s %s: run it "
                                        "without mpirun, as train/train", cmds[i].name, cmds[i].what);
            for (int k = 1; k < argc && n < sizeof line; k++)
                n += (size_t)snprintf(line + n, sizeof line - n, " %s", argv[k]);
            fprintf(stderr, "%s\n", line);
        }
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    // a DIT_CPU_WIDTH this CPU cannot run, a DIT_RING_BLOCKING that is not 0 or 1, or a
    // DIT_CHECK_COLLECTIVES or DIT_COLLECTIVE_TIMEOUT out of range, stops every
    // subcommand before it starts ranks or runs a kernel; under mpirun the first rank says so
    collective_flags_take(&argc, argv); // into the environment, checked next
    const char *bad = cpu_setup();
    if (!bad) bad = comm_env_error();
    if (!bad) bad = check_collectives_env_error();
    if (bad) {
        const char *rank = launcher_rank();
        if (!rank || !strcmp(rank, "0")) fprintf(stderr, "error: %s\n", bad);
        return 2;
    }
    dry_run_take(&argc, argv); // every command takes --dry-run
    int rc = outside_mpi(argc, argv);
    if (rc >= 0) return rc;
    Comm c;
    comm_init(&c, &argc, &argv);
    blas_setup(); // OpenBLAS's kernels for this CPU, before any GEMM
    comm_agree_cpu(&c); // every rank runs the same vector width and tiles
    openblas_set_num_threads(default_threads(&c)); // OpenMP's too (train: --threads)
    rc = 0;
    if (argc == 1) usage(&c);
    else if (!strcmp(argv[1], "probe")) rc = probe_main(argc - 2, argv + 2, &c);
    else if (!strcmp(argv[1], "sample")) rc = sample_main(argc - 2, argv + 2, &c);
    else if (!strcmp(argv[1], "plan")) rc = plan_main(argc - 2, argv + 2, &c);
    else rc = train_main(argc - 1, argv + 1, &c);
    comm_finalize();
    return rc;
}
