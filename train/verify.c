// verify.c: see verify.h.
#include "verify.h"
#include "../core/check.h"
#include "compare.h"
#include "config.h"
#include "data.h"
#include "flags.h"
#include "launch.h"
#include "outfile.h"
#include "train.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(void) {
    printf("usage: train/train verify --ranks N [--reference-steps S] [--tol T] [--out DIR] [training flags]\n"
           "  Trains with N ranks (mpirun) and with 1 rank from the same seed, into DIR/ranks-N and\n"
           "  DIR/ranks-1 (default DIR: runs/verify), then compares their loss curves: prints the\n"
           "  largest per-step relative difference and the first step over --tol (default %g),\n"
           "  and plots both curves and the difference into DIR/loss.png. Exit 0 when they agree.\n"
           "  An earlier verify's results in DIR are replaced; a DIR that is a training run is refused.\n"
           "  --reference-steps S: the 1-rank run trains only the first S steps (a cheaper check)\n"
           "  and draws no samples.\n"
           "  Training flags are passed to both runs (see train/train --help; --samples-per-class 0\n"
           "  skips their sample grids; --grad-accum too), except --inject-bug, --sp,\n"
           "  --sp-attention and --ulysses-degree, which go to the N-rank run only.\n"
           "  It starts its own ranks with mpirun: run it without mpirun.\n",
           COMPARE_LOSS_TOL);
}

// The flags that set the N-rank run's parallel layout and bugs: the 1-rank reference runs
// without them
static bool layout_flag(const char *f) {
    return !strcmp(f, "--inject-bug") || !strcmp(f, "--sp") || !strcmp(f, "--sp-attention") ||
           !strcmp(f, "--ulysses-degree");
}

// Runs lead... (mpirun and its options, then this program) with the training flags, without the
// layout flags when with_layout is false, then --steps steps (if given: a shortened reference,
// whose samples would show a half-trained model, so it draws none) and --out dir.
static int train_run(char **lead, int n_lead, char **flags, int n_flags, bool with_layout,
                     char *steps, char *dir) {
    char **cmd = xcalloc((size_t)(n_lead + n_flags + 7), sizeof *cmd);
    int n = 0;
    for (int i = 0; i < n_lead; i++) cmd[n++] = lead[i];
    for (int i = 0; i < n_flags; i++) {
        if (!with_layout && layout_flag(flags[i]) && i + 1 < n_flags) i++;
        else cmd[n++] = flags[i];
    }
    if (steps) // the last of a flag given twice wins
        cmd[n++] = "--steps", cmd[n++] = steps, cmd[n++] = "--samples-per-class", cmd[n++] = "0";
    cmd[n++] = "--out", cmd[n++] = dir;
    int rc = launch(cmd, NULL);
    free(cmd);
    return rc;
}

// The training flags (pass) are checked here, and what the runs check before they start, so
// earlier results are kept on an error. False when --help was printed.
static bool check_flags(char **pass, int np, int ranks, int ref_steps) {
    TrainConfig tc;
    if (!train_config_parse(&tc, np, pass, 0)) return false;
    if (ref_steps > tc.steps)
        usage_error("--reference-steps %d is more than the %d steps of the run it checks; pass at "
                    "most --steps", ref_steps, tc.steps);
    Data data;
    char err[1024];
    if (data_open(&data, tc.data, tc.model.input_size, tc.model.in_channels, tc.model.num_classes,
                  err, sizeof err))
        usage_error("--data: %s", err);
    data_close(&data);
    train_check(&tc, ranks, ranks);
    int grad_accum = tc.parallel.grad_accum; // not a layout flag: the reference takes it too
    tc.parallel = sp_options_default(); // the reference: one rank, no layout flags
    tc.parallel.grad_accum = grad_accum;
    train_check(&tc, 1, 1);
    return true;
}

// Trains with `ranks` ranks into out/ranks-N and then with one rank (without --inject-bug; only
// ref_steps steps when not 0) into out/ranks-1, and compares them; self is this program.
static int run_both(char *self, int ranks, const char *out, char **pass, int np,
                    int ref_steps, double tol) {
    char dir_n[4096], dir_1[4096], nbuf[16], plot[4096], sbuf[16], label[64];
    snprintf(dir_n, sizeof dir_n, "%s/ranks-%d", out, ranks);
    snprintf(dir_1, sizeof dir_1, "%s/ranks-1", out);
    snprintf(plot, sizeof plot, "%s/loss.png", out);
    snprintf(sbuf, sizeof sbuf, "%d", ref_steps);
    snprintf(label, sizeof label, "%d ranks", ranks);
    char *mpirun[LAUNCH_LEAD];
    int n = launch_lead(mpirun, ranks, self, nbuf, sizeof nbuf);
    if (run_folder_clear(dir_n) + run_folder_clear(dir_1) + (remove(plot) == 0))
        printf("== replacing the earlier results in %s/ranks-*\n", out);
    printf("== %d ranks -> %s\n", ranks, dir_n);
    fflush(stdout);
    if (train_run(mpirun, n, pass, np, true, NULL, dir_n))
        return fprintf(stderr, "error: the %d-rank run failed\n", ranks), 2;
    // the single-rank reference: the same flags and seed, no layout flags, no injected bug
    printf("== 1 rank -> %s\n", dir_1);
    fflush(stdout);
    char *lead[1] = {self};
    if (train_run(lead, 1, pass, np, false, ref_steps ? sbuf : NULL, dir_1))
        return fprintf(stderr, "error: the 1-rank run failed\n"), 2;
    printf("== comparing %d ranks against 1 rank\n", ranks);
    return compare_runs(dir_n, dir_1, tol, plot, label, "1 rank");
}

int verify_main(int argc, char **argv) {
    int ranks = 0, ref_steps = 0, np = 0;
    double tol = COMPARE_LOSS_TOL;
    const char *out = "runs/verify";
    char **pass = xcalloc((size_t)argc + 1, sizeof *pass); // flags for the training runs
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
    if (!check_flags(pass, np, ranks, ref_steps)) return free(pass), 0;
    out_runs_folder_check("--out", out, "verify");
    char self[4096];
    if (!launch_self(self, sizeof self))
        return fprintf(stderr, "error: cannot find the train program itself\n"), free(pass), 2;
    int rc = run_both(self, ranks, out, pass, np, ref_steps, tol);
    free(pass);
    return rc;
}
