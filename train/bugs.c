// bugs.c: see bugs.h.
#include "bugs.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../parallel/sp.h"
#include "canvas.h"
#include "checkpoint.h"
#include "compare.h"
#include "config.h"
#include "data.h"
#include "flags.h"
#include "launch.h"
#include "locate.h"
#include "losslog.h"
#include "outfile.h"
#include "plot.h"
#include "probe.h"
#include "settings.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The runs: DiT-tiny/2 on 22x22 shapes, 121 tokens (which no rank count from 2 to 10 divides, so
// the padding bugs can show), 12 images a step (which 2, 3, 4 and 6 data groups split)
static const char *const base[] = {"--model", "DiT-tiny/2", "--input-size", "22", "--batch", "12",
                                   "--samples-per-class", "0", "--save-every", "0", "--log-every", "1000"};
#define N_BASE (int)(sizeof base / sizeof base[0])
enum { OUT_LEN = 1024, DIR_LEN = OUT_LEN + 64, PATH_LEN_ = DIR_LEN + 64 }; // --out, its folders, files

static TrainConfig shared; // the settings every run of the catalogue gets (settings.h, FOR_BUGS)

static void help(void) {
    printf("usage: train/train bugs [--ranks N] [--steps S] [--out DIR] [flags]\n"
           "  The catalogue of injectable sequence-parallel bugs: for the correct code and for every\n"
           "  bug (--inject-bug), a training run of S steps (default 30) on N ranks (default 4) in the\n"
           "  layout the bug lives in, compared with one rank: the first step whose loss differs by\n"
           "  more than %g, and a probe of the reference run's final weights against one rank's: the\n"
           "  output's and the worst gradient's relative error (tolerances %g and %g).\n"
           "  Writes DIR/bugs.md (the table, also printed) and DIR/bugs.png (each row's loss\n"
           "  difference per step); DIR defaults to runs/bugs, and its earlier results are replaced.\n"
           "  It starts its own ranks with mpirun: run it without mpirun.\n"
           "  A bug with model flags (--qkv-gain, --input-size, --in-context) has a reference of its\n"
           "  own; a bug that hides under some flags (T divisible by the ranks, small attention\n"
           "  logits) has a second, hidden row under them, which must be missed (under --exact it\n"
           "  may be caught: a bit that differs is enough there).\n"
           "  Exit 0 when the correct code agrees, every bug is caught and every hidden row missed, 1\n"
           "  otherwise.\n"
           "  These flags go to every training and probe run:\n",
           COMPARE_LOSS_TOL, PROBE_OUT_TOL, PROBE_GRAD_TOL);
    settings_help(stdout, FOR_BUGS);
}

// A 1-rank reference: the training run, its final weights, the probe batch for them, their probe
// and its tape. The model flags of a bug (--qkv-gain, --input-size, --in-context: flags the probe
// does not take, because the checkpoint holds them) give it a reference of its own.
typedef struct Reference {
    char model[64]; // "" for the base runs
    char dir[DIR_LEN], ckpt[PATH_LEN_], batch[PATH_LEN_], probe[PATH_LEN_], dump[PATH_LEN_];
} Reference;
enum { MAX_REFERENCES = 8 };

typedef struct Row {
    const BugInfo *bug; // NULL: the correct code
    bool hidden;        // the bug under its `hides` flags: expected to be missed
    char layout[64];    // its flags that the probe takes too: "--sp-attention ring", "--sp 2", ...
    const Reference *ref; // the reference of its model flags
    double out_err, grad_err;
    int flagged; // the first step over the tolerance; 0 if none
    bool diverged; // its training stopped at step `flagged` with a loss of NaN or inf
    char refused[256]; // why its flags cannot run with the shared settings ("" if they can)
    LossLog diff; // relative loss difference per step
    char where[192]; // locate's first divergence of the probe's step ("" if none); "-": no dump
} Row;

// Appends word to buf, after a space unless buf is empty
static void add_word(char *buf, size_t len, const char *word) {
    if (word[0]) snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? " " : "", word);
}

// The flags that put row r's bug on its code path over `ranks` ranks: the layout and the bug's
// further flags (its `hides` flags for a hidden row) that the probe takes too, into layout; the
// others (the model's) into model
static void row_flags(const Row *r, int ranks, char *layout, char *model, size_t len) {
    const BugInfo *b = r->bug;
    layout[0] = model[0] = 0;
    if (!b) return;
    if (b->layout == BUG_DATA_PARALLEL) snprintf(layout, len, "--sp %d", ranks % 2 ? 1 : ranks / 2);
    else if (b->layout >= 0 && b->layout != SP_GATHER)
        snprintf(layout, len, "--sp-attention %s", seq_attention_name((SeqAttention)b->layout));
    char words[128], *save = NULL, *dst = layout;
    snprintf(words, sizeof words, "%s", r->hidden ? b->hides : b->flags);
    for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        const Setting *s = w[0] == '-' ? setting_by_flag(w, FOR_TRAIN) : NULL;
        if (s) dst = (s->commands & FOR_PROBE) ? layout : model; // its value follows it
        add_word(dst, len, w);
    }
}

// Runs cmd with the row's layout flags and its bug (r NULL: neither) and the shared settings, its
// output appended to log; the exit status
static int run(Command *cmd, const Row *r, const char *log) {
    if (r) command_add_words(cmd, r->layout);
    if (r && r->bug) command_add(cmd, "--inject-bug", r->bug->name, NULL);
    char *args[32], values[PATH_LEN_];
    int k = settings_args(&shared, FOR_BUGS, args, 32, values, sizeof values);
    CHECK(k >= 0, "the shared settings do not fit in 32 arguments");
    for (int i = 0; i < k; i++) command_add(cmd, args[i], NULL);
    return command_run(cmd, log);
}

// Why row r, with its layout and model flags, cannot run with the shared settings (--exact and
// --in-context), into r->refused; "" if it can
static void refusal(Row *r, const char *model) {
    TrainConfig tc = shared;
    char words[192], *argv[32], *save = NULL;
    int argc = 0;
    snprintf(words, sizeof words, "%s %s", r->layout, model);
    for (char *w = strtok_r(words, " ", &save); w && argc < 32; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    for (int i = 0; i < argc; i++) settings_flag(&tc, FOR_TRAIN, argc, argv, &i);
    tc.parallel.bugs |= r->bug ? r->bug->flag : 0;
    const char *why = sp_context_error(&tc.parallel, tc.model.in_context, r->refused, sizeof r->refused);
    if (!why) r->refused[0] = 0;
}

// A training run on `ranks` ranks of the row (NULL: the reference) with the model of ref into
// dir; its exit status
static int train(const char *self, int ranks, const char *steps, const Row *r, const Reference *ref,
                 const char *dir, const char *log) {
    run_folder_clear(dir);
    Command cmd;
    command_start(&cmd, ranks, self);
    for (int i = 0; i < N_BASE; i++) command_add(&cmd, base[i], NULL);
    command_add(&cmd, "--steps", steps, "--out", dir, NULL);
    command_add_words(&cmd, ref->model);
    return run(&cmd, r, log);
}

// The step at which the training run that wrote log stopped with a loss of NaN or inf; 0 if it
// did not
static int diverged_at(const char *log) {
    FILE *f = fopen(log, "r");
    char line[1024];
    int step = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, " at step ");
        if (strstr(line, "training diverged") && at) step = atoi(at + strlen(" at step "));
    }
    if (f) fclose(f);
    return step;
}

// A probe on `ranks` ranks of the row (NULL: the reference) of ckpt on batch into out, its tape
// into dump (NULL: none); its exit status
static int probe(const char *self, int ranks, const char *ckpt, const char *batch, const Row *r,
                 const char *out, const char *dump, const char *log) {
    remove(out);
    Command cmd;
    command_start(&cmd, ranks, self);
    command_add(&cmd, "probe", "--ckpt", ckpt, "--batch", batch, "--out", out, NULL);
    if (dump) remove(dump), command_add(&cmd, "--dump-tape", dump, NULL);
    return run(&cmd, r, log);
}

// A probe's tape dumps one micro-batch: rows that need --grad-accum are not dumped
static bool dumped(const Row *r) { return !strstr(r->layout, "--grad-accum"); }

// locate's verdict on the row's tape against the reference's, as "NAME (forward)" or "" if none
static void first_divergence(Row *r, const char *dump, const char *ref_dump) {
    char verdict[1024];
    int rc = locate_dumps(dump, ref_dump, 0, verdict, sizeof verdict);
    CHECK(rc >= 0, "%s", verdict);
    r->where[0] = 0;
    const char *name = verdict + strlen("first divergence: "), *open = strchr(verdict, '('), *comma = open ? strchr(open, ',') : NULL;
    if (rc == 1 && open && comma)
        snprintf(r->where, sizeof r->where, "%.*s(%.*s)", (int)(open - name), name, (int)(comma - open - 1), open + 1);
}

// The relative loss difference of run dir against the reference, per step, and its first step
// over the tolerance (0 if none)
static void loss_difference(Row *r, const char dir[DIR_LEN], const char *ref_dir) {
    char path[PATH_LEN_], err[1024];
    LossLog a, b;
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    CHECK(!losslog_read(&a, path, err, sizeof err), "%s", err);
    snprintf(path, sizeof path, "%s/loss.csv", ref_dir);
    CHECK(!losslog_read(&b, path, err, sizeof err), "%s", err);
    LossDiff d = losslog_diff(&a, &b, shared.parallel.exact ? 0 : COMPARE_LOSS_TOL);
    r->flagged = d.first_over < 0 ? 0 : (int)d.step[d.first_over];
    for (int k = 0; k < d.n; k++) // 1e-12: the plot's floor
        losslog_add(&r->diff, d.step[k], d.rel[k] > 1e-12 ? d.rel[k] : 1e-12);
    losslog_diff_free(&d);
    losslog_free(&a), losslog_free(&b);
}

static bool caught(const Row *r) {
    return r->flagged || r->diverged || !(r->out_err <= PROBE_OUT_TOL) ||
           !(r->grad_err <= PROBE_GRAD_TOL) || (r->where[0] && strcmp(r->where, "-"));
}

static void write_table(FILE *f, const Row *rows, int n, int ranks, int steps, bool exact) {
    fprintf(f, "| bug | reproduces | layout on %d ranks | probe: output error | probe: worst gradient "
               "error | flagged by verify at step (of %d) | first divergence (locate, one step) |\n"
               "| --- | --- | --- | --- | --- | --- | --- |\n", ranks, steps);
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        char step[32], name[128], flags[160] = "";
        snprintf(name, sizeof name, "%s%s", r->bug ? r->bug->name : "(correct code)",
                 r->hidden ? ", hidden" : "");
        if (r->refused[0]) {
            fprintf(f, "| %s | %s | %s | - | - | not run | not run: %s |\n", name,
                    r->bug->report ? r->bug->report : "this project's own", r->layout, r->refused);
            continue;
        }
        snprintf(step, sizeof step, r->diverged ? "%d (loss not finite)" : r->flagged ? "%d" : "not flagged",
                 r->flagged);
        add_word(flags, sizeof flags, r->layout[0] ? r->layout : "gather");
        add_word(flags, sizeof flags, r->ref->model);
        fprintf(f, "| %s | %s | %s | %.1e | %.1e | %s | %s |\n", name,
                !r->bug ? "-" : r->bug->report ? r->bug->report : "this project's own",
                flags, r->out_err, r->grad_err, step,
                !strcmp(r->where, "-") ? "- (micro-batches: not dumped)"
                : r->where[0]          ? r->where
                : exact ? "identical" : "none (within tolerance)");
    }
}

// One small panel per row: its relative loss difference from one rank per step (red) and the
// tolerance (grey), under a line that says so
static void write_plot(const Row *rows, int n, int ranks, const char *path) {
    enum { cols = 3, W = 380, H = 250, TOP = 36 };
    const uint8_t white[3] = {255, 255, 255}, ink[3] = {30, 30, 30};
    Canvas cv = canvas_create(cols * W, (n + cols - 1) / cols * H + TOP, white);
    char head[160];
    snprintf(head, sizeof head, "relative loss difference, %d ranks against 1 rank (red), and the "
             "tolerance (grey)", ranks);
    canvas_text(&cv, 12, 10, head, 2, ink);
    for (int i = 0; i < n; i++) {
        const LossLog *d = &rows[i].diff;
        double tx[2] = {d->n ? d->step[0] : 0, d->n ? d->step[d->n - 1] : 1}, ty[2] = {COMPARE_LOSS_TOL, COMPARE_LOSS_TOL};
        PlotSeries s[2] = {{NULL, d->step, d->loss, d->n, {214, 39, 40}},
                           {NULL, tx, ty, 2, {120, 120, 120}}};
        char title[96];
        snprintf(title, sizeof title, rows[i].refused[0] ? "%s%s: not run"
                                      : rows[i].flagged   ? "%s%s: step %d"
                                                          : "%s%s: not flagged",
                 rows[i].bug ? rows[i].bug->name : "correct code", rows[i].hidden ? ", hidden" : "",
                 rows[i].flagged);
        plot_panel(&cv, i % cols * W, i / cols * H + TOP, W, H, title, "step", s, 2, true);
    }
    char err[1024];
    if (canvas_write_png(&cv, path, err, sizeof err)) usage_error("%s", err);
    canvas_free(&cv);
}

int bugs_main(int argc, char **argv) {
    int ranks = 4, steps = 30;
    const char *out = "runs/bugs";
    train_config_defaults(&shared);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(), 0;
        else if (!strcmp(argv[i], "--ranks")) ranks = flag_int("--ranks", flag_value(argc, argv, &i), 2, 64);
        else if (!strcmp(argv[i], "--steps")) steps = flag_int("--steps", flag_value(argc, argv, &i), 2, 100000);
        else if (!strcmp(argv[i], "--out")) out = flag_value(argc, argv, &i);
        else if (!settings_flag(&shared, FOR_BUGS, argc, argv, &i))
            usage_error("bugs: unknown argument '%s'", argv[i]);
    }
    char why[512];
    if (sp_device_error(&shared.parallel, why, sizeof why) || sp_exact_error(&shared.parallel, why, sizeof why))
        usage_error("%s", why); // --tf32 without cuda, --virtual-shards without --exact
    char path[PATH_LEN_], self[4096], nsteps[16];
    if (strlen(out) >= OUT_LEN) usage_error("--out: the path is longer than %d characters", OUT_LEN - 1);
    out_runs_folder_check("--out", out, "bugs");
    if (mkdir(out, 0755) && errno != EEXIST)
        usage_error("--out: cannot create %s: %s", out, strerror(errno));
    if (!launch_self(self, sizeof self)) usage_error("cannot find the train program itself");
    snprintf(nsteps, sizeof nsteps, "%d", steps);

    // the rows: the correct code, then each bug, and after a bug that hides under some flags the
    // bug under them
    int n = 1;
    for (int i = 0; bug_info(i); i++) n += 1 + (bug_info(i)->hides != NULL);
    Row *rows = xcalloc((size_t)n, sizeof *rows);
    for (int i = 0, k = 1; bug_info(i); i++) {
        rows[k++].bug = bug_info(i);
        if (bug_info(i)->hides) rows[k].bug = bug_info(i), rows[k++].hidden = true;
    }
    // the references: one rank, one for each set of model flags, each with the probe batch for
    // its final weights and their probe
    Reference refs[MAX_REFERENCES];
    int n_refs = 0;
    char log[PATH_LEN_], model[64];
    printf("== the references: 1 rank, %d steps, in %s/reference* (each run's output: %s/NAME.log)\n",
           steps, out, out);
    for (int i = 0; i < n; i++) {
        Row *r = &rows[i];
        row_flags(r, ranks, r->layout, model, sizeof model);
        refusal(r, model);
        if (r->refused[0]) continue;
        for (int j = 0; j < n_refs && !r->ref; j++)
            if (!strcmp(refs[j].model, model)) r->ref = &refs[j];
        if (r->ref) continue;
        CHECK(n_refs < MAX_REFERENCES, "the bug table's model flags need more than %d references",
              MAX_REFERENCES);
        Reference *f = &refs[n_refs];
        snprintf(f->model, sizeof f->model, "%s", model);
        char dir[DIR_LEN];
        snprintf(dir, sizeof dir, n_refs ? "%s/reference-%d" : "%s/reference", out, n_refs);
        snprintf(f->dir, sizeof f->dir, "%s", dir);
        snprintf(f->ckpt, sizeof f->ckpt, "%s/model.safetensors", dir);
        snprintf(f->batch, sizeof f->batch, "%s/probe-batch.safetensors", dir);
        snprintf(f->probe, sizeof f->probe, "%s/probe.safetensors", dir);
        snprintf(f->dump, sizeof f->dump, "%s/tape.safetensors", dir);
        snprintf(log, sizeof log, "%s.log", dir);
        remove(log);
        printf("== %s: 1 rank %s\n", f->dir, model);
        fflush(stdout);
        if (train(self, 1, nsteps, NULL, f, f->dir, log))
            return fprintf(stderr, "error: the 1-rank reference failed; see %s\n", log), 1;
        probe_write_batch(f->ckpt, f->batch, 12, PROBE_BATCH_STEP);
        if (probe(self, 1, f->ckpt, f->batch, NULL, f->probe, f->dump, log))
            return fprintf(stderr, "error: the 1-rank reference's probe failed; see %s\n", log), 1;
        r->ref = &refs[n_refs++];
    }

    bool ok = true;
    for (int i = 0; i < n; i++) {
        Row *r = &rows[i];
        const Reference *f = r->ref;
        if (r->refused[0]) continue;
        char name[96], dir[DIR_LEN], result[PATH_LEN_], dump[PATH_LEN_], err[1024];
        snprintf(name, sizeof name, "%s%s", r->bug ? r->bug->name : "correct",
                 r->hidden ? "-hidden" : "");
        snprintf(dir, sizeof dir, "%s/%s", out, name);
        snprintf(result, sizeof result, "%s/probe.safetensors", dir);
        snprintf(dump, sizeof dump, "%s/tape.safetensors", dir);
        printf("== %s: %d ranks %s %s\n", name, ranks, r->layout, f->model);
        fflush(stdout);
        snprintf(log, sizeof log, "%s/%s.log", out, name);
        remove(log);
        int rc = train(self, ranks, nsteps, r, f, dir, log), nan_step = rc ? diverged_at(log) : 0;
        if ((rc && !nan_step) ||
            probe(self, ranks, f->ckpt, f->batch, r, result, dumped(r) ? dump : NULL, log))
            return fprintf(stderr, "error: the %d-rank run of %s failed; see %s\n", ranks, name, log), 1;
        if (nan_step) r->flagged = nan_step, r->diverged = true;
        else loss_difference(r, dir, f->dir);
        if (dumped(r)) first_divergence(r, dump, f->dump);
        else snprintf(r->where, sizeof r->where, "-");
        if (compare_probe_errors(result, f->probe, &r->out_err, &r->grad_err, err, sizeof err))
            return fprintf(stderr, "error: %s\n", err), 1;
        // a hidden row hides from tolerances; --exact, which sees any bit, may catch it
        bool expected = r->bug && !r->hidden ? caught(r) : !caught(r) || (r->hidden && shared.parallel.exact);
        ok = ok && expected;
    }
    printf("\n");
    write_table(stdout, rows, n, ranks, steps, shared.parallel.exact);
    snprintf(path, sizeof path, "%s/bugs.md", out);
    FILE *f = fopen(path, "w");
    if (!f) usage_error("--out: cannot write %s: %s", path, strerror(errno));
    write_table(f, rows, n, ranks, steps, shared.parallel.exact);
    fclose(f);
    snprintf(path, sizeof path, "%s/bugs.png", out);
    write_plot(rows, n, ranks, path);
    printf("\nwrote %s/bugs.md and %s/bugs.png: %s\n", out, out,
           ok ? "the correct code agrees with one rank, every bug is caught, and every hidden row is "
                "as expected"
              : "NOT every row is as it should be (the correct code agrees, every bug is caught, every "
                "hidden row missed)");
    for (int i = 0; i < n; i++) losslog_free(&rows[i].diff);
    free(rows);
    return ok ? 0 : 1;
}
