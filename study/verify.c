// verify.c: see verify.h.
#include "verify.h"
#include "../core/check.h"
#include "../plan/budget.h"
#include "compare.h"
#include "identical.h"
#include "locate.h"
#include "../run/allowed.h"
#include "../run/config.h"
#include "../data/data.h"
#include "../run/flags.h"
#include "../run/lock.h"
#include "launch.h"
#include "../run/outfile.h"
#include "../run/settings.h"
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
           "  largest per-step relative difference and the first step over --tol (default %g;\n"
           "  %g for --precision bf16 runs, whose rank counts round apart: docs/precision.md),\n"
           "  and plots both curves and the difference into DIR/loss.png.\n"
           "  An earlier verify's results in DIR are replaced; a DIR that is a training run is refused.\n"
           "  --reference-steps S: the 1-rank run trains only the first S steps (a cheaper check)\n"
           "  and draws no samples.\n"
           "  Training flags are passed to both runs (see train/train --help; --samples-per-class 0\n"
           "  skips their sample grids; --grad-accum too). verify starts its own ranks with mpirun: run\n"
           "  it without mpirun. These go to the N-rank run only:\n ",
           COMPARE_LOSS_TOL, COMPARE_BF16_LOSS_TOL);
    for (int i = 0, n = 0; i < SETTINGS; i++) // the rows marked LAYOUT
        if (settings[i].rules & LAYOUT) printf("%s %s", n++ ? "," : "", settings[i].flag);
    printf(".\n"
           "  With --exact the runs must also be the same bit for bit: every logged loss and every\n"
           "  value of the model, EMA and optimizer files (\"identical: 0 of N values differ\").\n"
           "  Then, every time, every tensor of one step: the 1-rank run's final weights on a fresh\n"
           "  batch, dumped on N ranks and on one (probe --dump-tape into DIR/tape-N.safetensors and\n"
           "  DIR/tape-1.safetensors; packs over data groups: on one group's ranks), each tensor and\n"
           "  its gradient compared by ||a - b|| / ||b|| over the tensor (at most %g forward, %g for\n"
           "  gradients; %g and %g under --precision bf16; bit for bit under --exact). It prints\n"
           "  the worst tensor and, when one is beyond, `train locate`'s first divergence. Exit 0\n"
           "  when the curves and every tensor agree, 1 otherwise.\n",
           PROBE_OUT_TOL, PROBE_GRAD_TOL, PROBE_BF16_OUT_TOL, PROBE_BF16_GRAD_TOL);
}

// --sp-attention auto: the mesh the N-rank run in dir picked, from its config.json, as the flags
// of the rows --sp, --sp-attention and --ulysses-degree
static void add_picked_mesh(Command *cmd, const char *dir) {
    static const char *const keys[] = {"sp", "sp_attention", "ulysses_degree"};
    char path[4200], err[1024], value[64];
    TrainConfig tc;
    train_config_defaults(&tc);
    json_t *root = settings_load(dir, path, sizeof path, err, sizeof err);
    if (root) settings_read(&tc, root, path, err, sizeof err);
    json_decref(root);
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const Setting *s = setting_by_key(keys[k]);
        setting_text(s, &tc, value, sizeof value);
        command_add(cmd, s->flag, value, NULL);
    }
}

// The rows of the training flags whose images a probe batch takes (--make-batch), and the probe
// flags of a dump but those (a dump is one micro-batch: no --grad-accum either)
static bool batch_row(const Setting *s) { return !strcmp(s->key, "data") || !strcmp(s->key, "max_tokens"); }
static bool not_batch_row(const Setting *s) { return !batch_row(s); }
static bool not_dump_row(const Setting *s) { return batch_row(s) || !strcmp(s->key, "grad_accum"); }

// Adds to cmd the training flags (each with its value) that `command` (FOR_TRAIN, FOR_PROBE)
// takes too, but the rows `skip` names (NULL: none) and, without with_layout, the rows marked
// LAYOUT; with mesh_dir, --sp-attention auto becomes the mesh the run in mesh_dir picked
static void add_flags(Command *cmd, char **flags, int n, unsigned command,
                      bool (*skip)(const Setting *), bool with_layout, const char *mesh_dir) {
    for (int i = 0; i < n; i++) {
        const Setting *s = setting_by_flag(flags[i], FOR_TRAIN); // each a training flag (parsed)
        const char *value = s && s->arg && i + 1 < n ? flags[++i] : NULL;
        if (!s || !(s->commands & command) || (skip && skip(s)) ||
            (!with_layout && (s->rules & LAYOUT)))
            continue;
        if (mesh_dir && !strcmp(s->key, "sp_attention") && value && !strcmp(value, "auto"))
            add_picked_mesh(cmd, mesh_dir);
        else
            command_add(cmd, s->flag, value, NULL);
    }
}

// Runs this program (self) on `ranks` ranks with the training flags, without the layout flags
// when with_layout is false, then --steps steps (if given: a shortened reference,
// whose samples would show a half-trained model, so it draws none) and --out dir.
static int train_run(const char *self, int ranks, char **flags, int n_flags, bool with_layout,
                     const char *steps, const char *dir) {
    Command cmd;
    command_start(&cmd, ranks, self);
    add_flags(&cmd, flags, n_flags, FOR_TRAIN, NULL, with_layout, NULL);
    if (steps) // the last of a flag given twice wins
        command_add(&cmd, "--steps", steps, "--samples-per-class", "0", NULL);
    command_add(&cmd, "--out", dir, NULL);
    return command_run(&cmd, NULL);
}

// The training flags (pass) are checked here, and what the runs check before they start, so
// earlier results are kept on an error; *tc: what they set. False when --help was printed.
static bool check_flags(char **pass, int np, int ranks, int ref_steps, TrainConfig *out) {
    TrainConfig tc;
    if (!train_config_parse(&tc, np, pass, 0)) return false;
    *out = tc;
    run_check(&tc, FOR_TRAIN, ranks);
    if (ref_steps > tc.steps)
        usage_error("--reference-steps %d is more than the %d steps of the run it checks; pass at "
                    "most --steps", ref_steps, tc.steps);
    Data data;
    char err[1024];
    if (!dry_run_missing("--data", data_procedural(tc.data) ? NULL : tc.data, true)) {
        if (data_open(&data, tc.data, tc.model.input_size, dit_frames(&tc.model), tc.model.in_channels, tc.model.num_classes,
                      err, sizeof err))
            usage_error("--data: %s", err);
        data_close(&data);
    }
    if (tc.parallel.layout != SP_AUTO) budget_train_check(&tc, ranks, ranks, NULL, 0); // auto: its run checks its pick
    TrainConfig plain; // the reference: one rank, without the layout flags
    train_config_defaults(&plain);
    for (int i = 0; i < SETTINGS; i++)
        if (settings[i].rules & LAYOUT) setting_copy(&settings[i], &tc, &plain);
    run_check(&tc, FOR_TRAIN, 1);
    budget_train_check(&tc, 1, 1, NULL, 0);
    return true;
}

// The first line of log that starts with "error", in buf ("" if none)
static const char *first_error(const char *log, char *buf, size_t len) {
    FILE *f = fopen(log, "r");
    buf[0] = 0;
    while (f && fgets(buf, (int)len, f) && strncmp(buf, "error", 5)) buf[0] = 0;
    if (f) fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

// The tape check: one step of the 1-rank run's final weights on a fresh probe batch, dumped
// (probe --dump-tape) on N ranks with the layout and bug flags (the mesh its run in dir_n picked
// for auto) and on one without, and every tensor compared (locate.h): ||a - b|| / ||b|| within
// PROBE_OUT_TOL forward, PROBE_GRAD_TOL for gradients (PROBE_BF16_* under --precision bf16);
// under --exact, bit for bit. Prints one line
// (and locate's verdict when they part); 0 every tensor agrees, 1 one does not, 2 no dump was made.
static int tape_check(char *self, int ranks, const char *out, char **pass, int np, const char *dir_n,
                      const char *dir_1, bool exact) {
    char ckpt[4200], batch[4200], dump[2][4200], res[4200], verdict[1024], path[4200], err[1024], images[16],
        log[4200];
    // the N-rank run's mesh: a batch its data groups split; packs dump in one data group (its
    // sequence group's ranks), as probe --dump-tape runs them
    TrainConfig tc;
    train_config_defaults(&tc);
    json_t *root = settings_load(dir_n, path, sizeof path, err, sizeof err);
    if (root) settings_read(&tc, root, path, err, sizeof err);
    json_decref(root);
    int sp = tc.parallel.sp > 0 && tc.parallel.sp < ranks ? tc.parallel.sp : ranks, dp = ranks / sp;
    int dump_ranks = tc.max_tokens && dp > 1 ? sp : ranks, B = dump_ranks < ranks ? 6 : (6 + dp - 1) / dp * dp;
    snprintf(images, sizeof images, "%d", B);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir_1);
    snprintf(batch, sizeof batch, "%s/tape-batch.safetensors", out);
    snprintf(res, sizeof res, "%s/tape-probe.safetensors", out);
    snprintf(log, sizeof log, "%s/tape.log", out); // the probes' output
    remove(log);
    char rule[96] = "bit for bit";
    OurBounds ours = our_bounds(tc.parallel.bf16);
    double tol = ours.out, grad_tol = ours.grad;
    if (!exact) snprintf(rule, sizeof rule, "||a - b|| / ||b|| within %.0e forward, %.0e gradients", tol, grad_tol);
    printf("== one step, every tensor: %d ranks against 1 rank (%s%s)\n", dump_ranks, rule,
           dump_ranks < ranks ? "; packs: one data group" : "");
    fflush(stdout);
    Command cmd;
    command_start(&cmd, 1, self);
    command_add(&cmd, "probe", "--ckpt", ckpt, "--make-batch", images, "--out", batch, NULL);
    add_flags(&cmd, pass, np, FOR_PROBE, not_batch_row, false, NULL); // the run's images: a folder, packs
    remove(batch);
    if (command_run(&cmd, log))
        return fprintf(stderr, "error: tape check: could not write a probe batch (%s); see %s\n",
                       first_error(log, err, sizeof err), log), 2;
    for (int side = 0; side < 2; side++) { // N ranks with the layout, then one without
        snprintf(dump[side], sizeof dump[side], "%s/tape-%d.safetensors", out, side ? 1 : dump_ranks);
        remove(dump[side]), remove(res);
        command_start(&cmd, side ? 1 : dump_ranks, self);
        command_add(&cmd, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res, "--dump-tape", dump[side], NULL);
        add_flags(&cmd, pass, np, FOR_PROBE, not_dump_row, !side, side ? NULL : dir_n);
        if (command_run(&cmd, log))
            return fprintf(stderr, "error: tape check: the %d-rank probe failed (%s); see %s\n", side ? 1 : dump_ranks,
                           first_error(log, err, sizeof err), log), 2;
    }
    remove(res);
    TapeSummary t;
    int rc = locate_dumps(dump[0], dump[1], tol, grad_tol, verdict, sizeof verdict, &t);
    if (rc < 0) return fprintf(stderr, "error: tape check: %s\n", verdict), 2;
    if (t.exact && !t.over) printf("tape: all %d tensors identical -> the step AGREES\n", t.tensors);
    else if (t.exact)
        printf("tape: %d of %d tensors differ; worst %s: relative error %.1e -> the step DIFFERS\n",
               t.over, t.tensors, t.worst, t.worst_err);
    else if (t.over)
        printf("tape: %d of %d tensors beyond tolerance; worst %s: %.1e, tolerance %.0e -> the step "
               "DIFFERS\n", t.over, t.tensors, t.worst, t.worst_err, t.worst_tol);
    else
        printf("tape: all %d tensors within tolerance; worst %s: %.1e, tolerance %.0e -> the step AGREES\n",
               t.tensors, t.worst, t.worst_err, t.worst_tol);
    if (rc == 1) printf("locate (%s against %s): %s\n", dump[0], dump[1], verdict);
    return rc;
}

// Trains with `ranks` ranks into out/ranks-N and then with one rank (without --inject-bug; only
// ref_steps steps when not 0) into out/ranks-1, and compares them; self is this program.
static int run_both(char *self, int ranks, const char *out, char **pass, int np,
                    int ref_steps, double tol, bool exact) {
    char dir_n[4096], dir_1[4096], plot[4096], sbuf[16], label[64];
    snprintf(dir_n, sizeof dir_n, "%s/ranks-%d", out, ranks);
    snprintf(dir_1, sizeof dir_1, "%s/ranks-1", out);
    snprintf(plot, sizeof plot, "%s/loss.png", out);
    snprintf(sbuf, sizeof sbuf, "%d", ref_steps);
    snprintf(label, sizeof label, "%d ranks", ranks);
    if (run_folder_clear(dir_n) + run_folder_clear(dir_1) + (remove(plot) == 0))
        printf("== replacing the earlier results in %s/ranks-*\n", out);
    printf("== %d ranks -> %s\n", ranks, dir_n);
    fflush(stdout);
    if (train_run(self, ranks, pass, np, true, NULL, dir_n))
        return fprintf(stderr, "error: the %d-rank run failed\n", ranks), 2;
    // the single-rank reference: the same flags and seed, no layout flags, no injected bug
    printf("== 1 rank -> %s\n", dir_1);
    fflush(stdout);
    if (train_run(self, 1, pass, np, false, ref_steps ? sbuf : NULL, dir_1))
        return fprintf(stderr, "error: the 1-rank run failed\n"), 2;
    printf("== comparing %d ranks against 1 rank\n", ranks);
    int rc = compare_runs(dir_n, dir_1, tol, plot, label, "1 rank");
    if (exact) {
        printf("== --exact: %d ranks against 1 rank, bit for bit\n", ranks);
        rc = runs_identical(dir_n, dir_1) ? 1 : rc;
    }
    // a step that cannot be dumped leaves the runs unchecked (2) unless their curves already part
    int tape = tape_check(self, ranks, out, pass, np, dir_n, dir_1, exact);
    return rc == 2 || (tape == 2 && rc == 0) ? 2 : rc || tape;
}

int verify_main(int argc, char **argv) {
    int ranks = 0, ref_steps = 0, np = 0;
    double tol = -1; // not given
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
    TrainConfig tc;
    if (!check_flags(pass, np, ranks, ref_steps, &tc)) return free(pass), 0;
    run_folder_lock("--out", out, false); // a job writing it now refuses this one at once
    out_runs_folder_check("--out", out, "verify");
    char self[4096];
    if (!launch_self(self, sizeof self))
        return fprintf(stderr, "error: cannot find the train program itself\n"), free(pass), 2;
    bool exact = tc.parallel.exact; // as the runs' flags set them
    if (tol < 0) tol = our_bounds(tc.parallel.bf16).loss;
    if (exact && ref_steps)
        usage_error("verify --exact compares the final checkpoints of both runs; drop --reference-steps");
    if (dry_run) {
        printf("dry run: verify would train %d ranks and 1 rank into %s/ranks-%d and %s/ranks-1 and "
               "compare them%s\ndry run: every flag checked; nothing trained or written\n", ranks,
               out, ranks, out, exact ? " bit for bit" : "");
        return free(pass), 0;
    }
    run_folder_lock("--out", out, true);
    int rc = run_both(self, ranks, out, pass, np, ref_steps, tol, exact);
    free(pass);
    return rc;
}
