// verify.c: see verify.h.
#include "verify.h"
#include "compare.h"
#include "flags.h"
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void help(void) {
    printf("usage: train/train verify --ranks N [--reference-steps S] [--tol T] [--out DIR] [training flags]\n"
           "  Trains with N ranks (mpirun) and with 1 rank from the same seed, into DIR/ranks-N and\n"
           "  DIR/ranks-1 (default DIR: runs/verify), then compares their loss curves: prints the\n"
           "  largest per-step relative difference and the first step over --tol (default %g),\n"
           "  and plots both curves and the difference into DIR/loss.png. Exit 0 when they agree.\n"
           "  --reference-steps S: the 1-rank run trains only the first S steps (a cheaper check).\n"
           "  Training flags are passed to both runs (see train/train --help), except --inject-bug,\n"
           "  which goes to the N-rank run only.\n", COMPARE_LOSS_TOL);
}

// Runs argv to completion; returns its exit status (or -1 if it could not start).
static int run(char **argv) {
    pid_t pid;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ)) {
        fprintf(stderr, "error: cannot start %s: is Open MPI installed (make deps)?\n", argv[0]);
        return -1;
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int verify_main(int argc, char **argv) {
    int ranks = 0, ref_steps = 0;
    double tol = COMPARE_LOSS_TOL;
    const char *out = "runs/verify";
    char **pass = calloc((size_t)argc + 16, sizeof(char *)); // flags for the training runs
    int np = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(), free(pass), 0;
        else if (!strcmp(argv[i], "--ranks")) ranks = flag_int("--ranks", flag_value(argc, argv, &i), 2, 1024);
        else if (!strcmp(argv[i], "--tol")) tol = flag_double("--tol", flag_value(argc, argv, &i), 0, 1e9);
        else if (!strcmp(argv[i], "--out")) out = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--reference-steps"))
            ref_steps = flag_int("--reference-steps", flag_value(argc, argv, &i), 1, 1 << 30);
        else if (!strcmp(argv[i], "--resume")) usage_error("verify starts fresh runs; --resume does not apply");
        else pass[np++] = argv[i];
    }
    if (!ranks) usage_error("verify needs --ranks N (N >= 2)");
    char self[4096], dir_n[4096], dir_1[4096], nbuf[16], plot[4096], sbuf[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return fprintf(stderr, "error: cannot find the train program itself\n"), 2;
    self[len] = 0;
    snprintf(dir_n, sizeof dir_n, "%s/ranks-%d", out, ranks);
    snprintf(dir_1, sizeof dir_1, "%s/ranks-1", out);
    snprintf(plot, sizeof plot, "%s/loss.png", out);
    snprintf(nbuf, sizeof nbuf, "%d", ranks);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char *cmd[32 + 1024] = {"mpirun", "-np", nbuf};
    int n = 3;
    if (geteuid() == 0) cmd[n++] = "--allow-run-as-root";
    if (ranks > cores) cmd[n++] = "--oversubscribe";
    cmd[n++] = self;
    for (int i = 0; i < np && n < 1000; i++) cmd[n++] = pass[i];
    cmd[n++] = "--out", cmd[n++] = dir_n, cmd[n] = NULL;
    printf("== %d ranks -> %s\n", ranks, dir_n);
    fflush(stdout);
    if (run(cmd)) return fprintf(stderr, "error: the %d-rank run failed\n", ranks), free(pass), 2;
    // the single-rank run: the same flags, the same seed
    char *one[1024 + 8] = {self};
    int m = 1;
    for (int i = 0; i < np && m < 1000; i++) { // the reference carries no injected bug
        if (!strcmp(pass[i], "--inject-bug") && i + 1 < np) i++;
        else one[m++] = pass[i];
    }
    snprintf(sbuf, sizeof sbuf, "%d", ref_steps);
    if (ref_steps) one[m++] = "--steps", one[m++] = sbuf; // the last --steps wins
    one[m++] = "--out", one[m++] = dir_1, one[m] = NULL;
    printf("== 1 rank -> %s\n", dir_1);
    fflush(stdout);
    if (run(one)) return fprintf(stderr, "error: the 1-rank run failed\n"), free(pass), 2;
    char la[64], lb[64];
    snprintf(la, sizeof la, "%d ranks", ranks);
    snprintf(lb, sizeof lb, "1 rank");
    printf("== comparing %d ranks against 1 rank\n", ranks);
    int rc = compare_runs(dir_n, dir_1, tol, plot, la, lb);
    free(pass);
    return rc;
}
