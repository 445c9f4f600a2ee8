// bugs.c: see bugs.h.
#include "bugs.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../parallel/mesh/sp.h"
#include "../draw/canvas.h"
#include "../run/checkpoint.h"
#include "compare.h"
#include "../run/config.h"
#include "../data/data.h"
#include "../run/flags.h"
#include "../run/lock.h"
#include "launch.h"
#include "locate.h"
#include "../run/losslog.h"
#include "../run/outfile.h"
#include "../draw/plot.h"
#include "probe.h"
#include "regimes.h"
#include "../run/settings.h"
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
enum { MAX_REFS = 16 }; // different configs of the bugs

static TrainConfig shared; // the settings every run of the catalogue gets (settings.h, FOR_BUGS)

static void help(void) {
    printf("usage: train/train bugs [--ranks N] [--steps S] [--out DIR] [--bug NAME] [--regimes] [flags]\n"
           "       train/train bugs --list\n"
           "  The catalogue of injectable sequence-parallel bugs: for the correct code and for every\n"
           "  bug (--inject-bug), a training run of S steps (default 30) on N ranks (default 4) in the\n"
           "  layout the bug lives in, compared with one rank: the first step whose loss differs by\n"
           "  more than %g, and a probe of the reference run's final weights against one rank's: the\n"
           "  output's and the worst gradient's relative error (tolerances %g and %g; verify's bf16\n"
           "  bounds with --precision bf16: %g, %g and %g).\n"
           "  Writes DIR/bugs.md (the table, also printed) and DIR/bugs.png (each row's loss\n"
           "  difference per step); DIR defaults to runs/bugs, and its earlier results are replaced.\n"
           "  A bug whose layout needs further flags (its config) is compared with a 1-rank run given\n"
           "  them too.\n"
           "  --regimes also runs each probe under --exact, each bug that hides under some config\n"
           "  (T divisible by P, small logits) there too, and the correct code in every layout the\n"
           "  bugs use, and judges every row by the checks other libraries' own tests make (forward\n"
           "  only, finite gradients, bf16 tolerances, ...): a table of which regime catches which\n"
           "  bug, with every measured error, in DIR/regimes.md, .csv and .png.\n"
           "  --bug NAME runs the correct code and that bug's row alone (the names: --inject-bug's).\n"
           "  --list prints the table of the bugs (docs/bugs.md holds it) and runs nothing.\n"
           "  It starts its own ranks with mpirun: run it without mpirun.\n"
           "  With --exact every difference counts, and a column gives the step that flags each bug:\n"
           "  1 when the probe's one step differs at all, else the first step whose loss differs.\n"
           "  Exit 0 when the correct code agrees and every bug is caught (under --exact: at step 1),\n"
           "  but a bug that is right in exact arithmetic (cross-kv-all-to-all: only its rounding\n"
           "  differs), which must agree within the tolerances unless --exact; 1 otherwise.\n",
           COMPARE_LOSS_TOL, PROBE_OUT_TOL, PROBE_GRAD_TOL, COMPARE_BF16_LOSS_TOL, PROBE_BF16_OUT_TOL,
           PROBE_BF16_GRAD_TOL);
    char list[4096];
    printf("  The bugs, and where each runs:\n");
    bug_help(list, sizeof list, 86);
    for (const char *line = list; *line;) {
        int n = (int)strcspn(line, "\n");
        printf("    %.*s\n", n, line);
        line += n + (line[n] == '\n');
    }
    printf("  These flags go to every training and probe run:\n");
    settings_help(stdout, FOR_BUGS);
    printf(EVERY_COMMAND_HELP);
}

// The 1-rank reference of the runs given further flags (a bug's config: "--grad-accum 5"; "": none)
typedef struct Reference {
    const char *flags;
    char dir[DIR_LEN], model[PATH_LEN_], batch[PATH_LEN_];
} Reference;

typedef struct Row {
    const BugInfo *bug; // NULL: the correct code
    bool hidden;        // run with the bug's `hides` flags, where it does not show
    char name[160];     // the bug, and where it hides; the correct code, and its layout
    const char *flags;  // the further flags: its bug's (or where it hides); the reference's
    const Reference *ref;
    char layout[128];   // its layout and further flags: "--sp-attention ring", "--sp 2", ...
    double out_err, grad_err;
    int flagged; // the first step over the tolerance; 0 if none
    LossLog diff; // relative loss difference per step
    char where[192]; // locate's first divergence of the probe's step ("" if none); "-": no dump
    char refused[256]; // under --exact, why its flags cannot run ("": they can)
} Row;

// The layout flags that put a bug on its code path over `ranks` ranks, and its further flags
static void layout_flags(const BugInfo *b, const char *flags, int ranks, char *buf, size_t len) {
    buf[0] = 0;
    if (!b) return;
    if (b->needs & NEED_DATA_PARALLEL) snprintf(buf, len, "--sp %d", ranks % 2 ? 1 : ranks / 2);
    else if (b->layout >= 0 && b->layout != (int)sp_options_default().layout)
        snprintf(buf, len, "--sp-attention %s", seq_attention_name((SeqAttention)b->layout));
    if (flags[0]) snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? " " : "", flags);
}

// Runs cmd with the layout flags, the bug (NULL: none) and the shared settings, its output
// appended to log; the exit status
static int run(Command *cmd, const char *layout, const char *bug, const char *log) {
    command_add_words(cmd, layout);
    if (bug) command_add(cmd, "--inject-bug", bug, NULL);
    char *args[32], values[PATH_LEN_];
    int k = settings_args(&shared, FOR_BUGS, args, 32, values, sizeof values);
    CHECK(k >= 0, "the shared settings do not fit in 32 arguments");
    for (int i = 0; i < k; i++) command_add(cmd, args[i], NULL);
    return command_run(cmd, log);
}

// A training run on `ranks` ranks with the layout flags and the bug (NULL: none) into dir; its
// exit status
static int train(const char *self, int ranks, const char *steps, const char *layout, const char *bug,
                 const char *dir, const char *log) {
    run_folder_clear(dir);
    Command cmd;
    command_start(&cmd, ranks, self);
    for (int i = 0; i < N_BASE; i++) command_add(&cmd, base[i], NULL);
    command_add(&cmd, "--steps", steps, "--out", dir, NULL);
    return run(&cmd, layout, bug, log);
}

// Whether the training run in dir stopped because its loss became NaN or infinite (train exits 1
// and says at which step in log, loss.csv holding the steps before it): then that step's loss is
// added to its loss.csv, so that the comparisons see where it diverged
static bool diverged(const char *dir, const char *log) {
    FILE *f = fopen(log, "r");
    char line[1024], what[16] = "", path[PATH_LEN_];
    int step = 0;
    while (f && !step && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "the loss became ");
        if (!at || !strstr(line, "training diverged") || sscanf(at, "the loss became %15s at step %d", what, &step) != 2)
            step = 0;
    }
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    FILE *csv = step > 0 ? fopen(path, "a") : NULL;
    if (!csv) return false;
    if (!fseek(csv, 0, SEEK_END) && ftell(csv) == 0) fprintf(csv, "step,loss\n");
    fprintf(csv, "%d,%s\n", step, strcmp(what, "NaN") ? "inf" : "nan");
    return !fclose(csv);
}

// The words of the flags that a probe takes: a training run's others (the input size, ...) are
// the checkpoint's
static void probe_flags(const char *flags, char *buf, size_t len) {
    char words[256];
    snprintf(words, sizeof words, "%s", flags);
    buf[0] = 0;
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        const Setting *s = setting_by_flag(w, FOR_PROBE), *t = s ? s : setting_by_flag(w, FOR_TRAIN);
        char *value = t && t->arg ? strtok_r(NULL, " ", &save) : NULL;
        if (s) snprintf(buf + strlen(buf), len - strlen(buf), "%s%s%s%s", buf[0] ? " " : "", w,
                        value ? " " : "", value ? value : "");
    }
}

// A probe on `ranks` ranks with the layout flags and the bug (NULL: none) of ckpt on batch into
// out, its tape into dump (NULL: none); its exit status
static int probe(const char *self, int ranks, const char *ckpt, const char *batch, const char *layout,
                 const char *bug, const char *out, const char *dump, const char *log) {
    char flags[256];
    probe_flags(layout, flags, sizeof flags);
    remove(out);
    Command cmd;
    command_start(&cmd, ranks, self);
    command_add(&cmd, "probe", "--ckpt", ckpt, "--batch", batch, "--out", out, NULL);
    if (dump) remove(dump), command_add(&cmd, "--dump-tape", dump, NULL);
    return run(&cmd, flags, bug, log);
}

// A probe's tape dumps one micro-batch: runs given --grad-accum are not dumped
static bool dumped(const char *flags) { return !strstr(flags, "--grad-accum"); }

// Why flags (a row's layout and config) and bug (its name, or NULL) cannot run with --exact added
// to the shared settings (in-context conditioning has no exact mode), into buf; NULL if they can
static const char *exact_refusal(const char *flags, const char *bug, char *buf, size_t len) {
    TrainConfig tc = shared;
    tc.parallel.bugs = bug ? bug_from_name(bug) : 0;
    char words[256], *argv[32], *save = NULL;
    int argc = 0;
    snprintf(words, sizeof words, "%s", flags);
    for (char *w = strtok_r(words, " ", &save); w && argc < 32; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    for (int i = 0; i < argc; i++) settings_flag(&tc, FOR_TRAIN, argc, argv, &i);
    tc.parallel.exact = true;
    return sp_context_error(&tc.parallel, &tc.model, buf, len);
}

// The probe of ckpt into dir/probe.safetensors and its tape (where dumped), and with --regimes the
// same under --exact (dir/exact-*); the exit status
static int probes(const char *self, int ranks, const char *ckpt, const char *batch, const char *layout,
                  const char *bug, const char *dir, bool regimes, const char *log) {
    char out[PATH_LEN_], dump[PATH_LEN_], exact[160], why[256];
    snprintf(out, sizeof out, "%s/" REGIMES_PROBE, dir), snprintf(dump, sizeof dump, "%s/" REGIMES_TAPE, dir);
    int rc = probe(self, ranks, ckpt, batch, layout, bug, out, dumped(layout) ? dump : NULL, log);
    if (rc || !regimes || exact_refusal(layout, bug, why, sizeof why)) return rc; // no exact files: "-"
    snprintf(exact, sizeof exact, "%s --exact", layout);
    snprintf(out, sizeof out, "%s/" REGIMES_EXACT_PROBE, dir), snprintf(dump, sizeof dump, "%s/" REGIMES_EXACT_TAPE, dir);
    return probe(self, ranks, ckpt, batch, exact, bug, out, dumped(layout) ? dump : NULL, log);
}

// OUT/BASE, or OUT/BASE-FLAGS with each space of the flags a '-'
static void folder(char dir[DIR_LEN], const char *out, const char *base, const char *flags) {
    int k = snprintf(dir, DIR_LEN, "%s/%s%s", out, base, flags[0] ? "-" : "");
    for (int i = 0; flags[i] && k < DIR_LEN - 1; i++) dir[k++] = flags[i] == ' ' ? '-' : flags[i];
    dir[k < DIR_LEN ? k : DIR_LEN - 1] = 0;
}

// The reference for runs given `flags`, run the first time a row asks (one rank, `steps` steps,
// then a probe batch of its final weights and its probes) in OUT/reference, or
// OUT/reference-FLAGS; NULL (with the sentence on stderr) if it failed
static const Reference *reference(Reference *refs, int *n, const char *flags, const char *self,
                                  const char *steps, const char *out, bool regimes) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(refs[i].flags, flags)) return &refs[i];
    CHECK(*n < MAX_REFS, "more than %d different bug configs", MAX_REFS);
    Reference *r = &refs[(*n)++];
    r->flags = flags;
    folder(r->dir, out, "reference", flags);
    snprintf(r->model, sizeof r->model, "%s/model.safetensors", r->dir);
    snprintf(r->batch, sizeof r->batch, "%s/probe-batch.safetensors", r->dir);
    char log[PATH_LEN_];
    snprintf(log, sizeof log, "%s.log", r->dir);
    remove(log);
    printf("== the reference: 1 rank, %s steps%s%s -> %s (each run's output: %s/NAME.log)\n", steps,
           flags[0] ? ", " : "", flags, r->dir, out);
    fflush(stdout);
    if (train(self, 1, steps, flags, NULL, r->dir, log))
        return fprintf(stderr, "error: the 1-rank reference failed; see %s\n", log), NULL;
    probe_write_batch(r->model, r->batch, 12, PROBE_BATCH_STEP, "shapes", 0);
    if (probes(self, 1, r->model, r->batch, flags, NULL, r->dir, regimes, log))
        return fprintf(stderr, "error: the 1-rank reference's probe failed; see %s\n", log), NULL;
    return r;
}

// locate's verdict on the row's tape against the reference's, as "NAME (forward)" or "" if none
static void first_divergence(Row *r, const char *dump, const char *ref_dump) {
    char verdict[1024];
    OurBounds ours = our_bounds(shared.parallel.bf16);
    int rc = locate_dumps(dump, ref_dump, ours.out, ours.grad, verdict, sizeof verdict, NULL);
    CHECK(rc >= 0, "%s", verdict);
    r->where[0] = 0;
    const char *name = verdict + strlen("first divergence: "), *open = strchr(verdict, '('), *comma = open ? strchr(open, ',') : NULL;
    if (rc == 1 && open && comma)
        snprintf(r->where, sizeof r->where, "%.*s(%.*s)", (int)(open - name), name, (int)(comma - open - 1), open + 1);
}

// The relative loss difference of run dir against the reference, per step, and its first step
// over the tolerance (0 if none)
static void loss_difference(Row *r, const char dir[DIR_LEN], const char ref_dir[DIR_LEN]) {
    char path[PATH_LEN_], err[1024];
    LossLog a, b;
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    CHECK(!losslog_read(&a, path, err, sizeof err), "%s", err);
    snprintf(path, sizeof path, "%s/loss.csv", ref_dir);
    CHECK(!losslog_read(&b, path, err, sizeof err), "%s", err);
    LossDiff d = losslog_diff(&a, &b, shared.parallel.exact ? 0 : our_bounds(shared.parallel.bf16).loss);
    r->flagged = d.first_over < 0 ? 0 : (int)d.step[d.first_over];
    for (int k = 0; k < d.n; k++) // 1e-12: the plot's floor
        losslog_add(&r->diff, d.step[k], d.rel[k] > 1e-12 ? d.rel[k] : 1e-12);
    losslog_diff_free(&d);
    losslog_free(&a), losslog_free(&b);
}

static bool caught(const Row *r) {
    OurBounds ours = our_bounds(shared.parallel.bf16);
    return r->flagged || !(r->out_err <= ours.out) || !(r->grad_err <= ours.grad) ||
           (r->where[0] && strcmp(r->where, "-"));
}

// --exact: the first step at which some bit differs. The probe is one step (forward and backward
// of a training batch) from the reference's weights, so a probe output, gradient or tape tensor
// that differs at all flags the bug at step 1; otherwise the first step whose loss differs. (From
// the initial weights a bug in the attention's backward changes nothing at step 1: adaLN-Zero's
// zero gates make every attention gradient exactly 0 there.) 0: not flagged.
static int exact_step(const Row *r) {
    bool probe_differs = r->out_err != 0 || r->grad_err != 0 || (r->where[0] && strcmp(r->where, "-"));
    return probe_differs ? 1 : r->flagged;
}

static const char *step_text(char *buf, size_t len, int step) {
    snprintf(buf, len, step ? "%d" : "not flagged", step);
    return buf;
}

static void write_table(FILE *f, const Row *rows, int n, int ranks, int steps, bool exact) {
    fprintf(f, "| bug | reproduces | layout on %d ranks | probe: output error | probe: worst gradient "
               "error | flagged by verify at step (of %d) |%s first divergence (locate, one step) |\n"
               "| --- | --- | --- | --- | --- | --- |%s --- |\n", ranks, steps,
            exact ? " --exact: flagged at step (1: the probe's step differs) |" : "", exact ? " --- |" : "");
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        if (r->refused[0]) {
            fprintf(f, "| %s | %s | %s | - | - | not run |%s not run: %s |\n", r->name,
                    r->bug->report ? r->bug->report : "this project's own", r->layout,
                    exact ? " not run |" : "", r->refused);
            continue;
        }
        char step[32], estep[40] = "";
        if (exact) snprintf(estep, sizeof estep, " %s |", step_text(step, sizeof step, exact_step(r)));
        fprintf(f, "| %s | %s | %s | %.1e | %.1e | %s |%s %s |\n", r->name,
                !r->bug ? "-" : r->bug->report ? r->bug->report : "this project's own",
                r->layout[0] ? r->layout : "gather", r->out_err, r->grad_err,
                step_text(step, sizeof step, r->flagged), estep,
                !strcmp(r->where, "-") ? "- (micro-batches: not dumped)" : r->where[0] ? r->where
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
        double tol = our_bounds(shared.parallel.bf16).loss;
        double tx[2] = {d->n ? d->step[0] : 0, d->n ? d->step[d->n - 1] : 1}, ty[2] = {tol, tol};
        PlotSeries s[2] = {{NULL, d->step, d->loss, d->n, {214, 39, 40}},
                           {NULL, tx, ty, 2, {120, 120, 120}}};
        char title[200];
        snprintf(title, sizeof title, rows[i].refused[0] ? "%s: not run"
                                      : rows[i].flagged   ? "%s: step %d"
                                                          : "%s: not flagged",
                 rows[i].name, rows[i].flagged);
        plot_panel(&cv, i % cols * W, i / cols * H + TOP, W, H, title, "step", s, 2, true);
    }
    char err[1024];
    if (canvas_write_png(&cv, path, err, sizeof err)) usage_error("%s", err);
    canvas_free(&cv);
}

// A bug's rows: none for the pack bugs (the shapes data has no packs; test_parallel catches
// them), and with --regimes a second one where it hides
static int rows_of(const BugInfo *b, bool regimes) {
    return (b->needs & NEED_PACKS) ? 0 : 1 + (regimes && b->hides);
}

// The bug is one of the run's: every bug, or the one --bug names; and `ranks` can show it (a bug
// of a ring of 3 or more needs 3 ranks: on 2 it is left out, and said so)
static bool chosen(const BugInfo *b, const char *only, int ranks) {
    return (!only || !strcmp(b->name, only)) && (!(b->needs & NEED_RING_OF_3) || ranks >= 3);
}

static void free_rows(Row *rows, int n, RegimeRow *reg) {
    for (int i = 0; i < n; i++) losslog_free(&rows[i].diff);
    free(rows), free(reg);
}

// --list: the table of the bugs, made from inject.c's (docs/bugs.md holds it; docs_check.py holds
// the two alike)
static void list(void) {
    printf("| bug | where it runs | what the code then does | reproduces | caught by |\n"
           "| --- | --- | --- | --- | --- |\n");
    const BugInfo *b;
    for (int i = 0; (b = bug_info(i)); i++) {
        char where[160];
        printf("| `%s` | %s | %s | %s | %s%s%s |\n", b->name, bug_where(b, where, sizeof where), b->does,
               b->report ? b->report : "this project's own",
               b->exact_only ? "`--exact` alone: only its rounding differs"
               : rows_of(b, false) ? "`verify` and `train bugs`" : "`test_parallel` (`train bugs` has no packs)",
               b->hides ? "; hides with " : "", b->hides ? (b->hides[0] ? b->hides : "small logits") : "");
    }
}

int bugs_main(int argc, char **argv) {
    int ranks = 4, steps = 30;
    bool regimes = false;
    const char *out = "runs/bugs", *only = NULL;
    train_config_defaults(&shared);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(), 0;
        else if (!strcmp(argv[i], "--ranks")) ranks = flag_int("--ranks", flag_value(argc, argv, &i), 2, 64);
        else if (!strcmp(argv[i], "--steps")) steps = flag_int("--steps", flag_value(argc, argv, &i), 2, 100000);
        else if (!strcmp(argv[i], "--out")) out = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--regimes")) regimes = true;
        else if (!strcmp(argv[i], "--bug")) only = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--list")) return list(), 0;
        else if (!settings_flag(&shared, FOR_BUGS, argc, argv, &i))
            usage_error("bugs: unknown argument '%s'", argv[i]);
    }
    if (only) { // a bug of the catalogue that has a row here
        BugMask flag = bug_from_name(only);
        const BugInfo *b = NULL;
        for (int i = 0; flag && bug_info(i); i++) b = bug_info(i)->flag == flag ? bug_info(i) : b;
        if (!b) usage_error("--bug %s: no such bug; the bugs: %s", only, bug_names());
        if (!rows_of(b, false))
            usage_error("--bug %s: its rows are test_parallel's (the catalogue's shapes data has no packs)", only);
        if (!chosen(b, only, ranks))
            usage_error("--bug %s: it needs 3 ranks or more round the ring; run it with --ranks 3 or more", only);
    }
    char why[512];
    if (sp_device_error(&shared.parallel, why, sizeof why) || sp_exact_error(&shared.parallel, why, sizeof why))
        usage_error("%s", why); // --tf32 without cuda, --virtual-shards without --exact
    char path[PATH_LEN_], self[4096], nsteps[16];
    if (strlen(out) >= OUT_LEN) usage_error("--out: the path is longer than %d characters", OUT_LEN - 1);
    if (regimes && shared.parallel.exact)
        usage_error("bugs --regimes runs its own --exact column beside the default mode: drop --exact");
    run_folder_lock("--out", out, false); // a job writing it now refuses this one at once
    out_runs_folder_check("--out", out, "bugs");
    if (dry_run) {
        printf("dry run: bugs would run the catalogue%s on %d ranks into %s\ndry run: every flag "
               "checked; nothing trained or written\n", regimes ? " with its regimes" : "", ranks, out);
        return 0;
    }
    run_folder_lock("--out", out, true);
    if (!launch_self(self, sizeof self)) usage_error("cannot find the train program itself");
    snprintf(nsteps, sizeof nsteps, "%d", steps);

    // the rows: the correct code, each bug; with --regimes each bug where it hides too, and the
    // correct code in every layout the bugs run in (a regime may flag that as well)
    int bugs = 0;
    for (int i = 0; bug_info(i); i++) {
        bugs += chosen(bug_info(i), only, ranks) * rows_of(bug_info(i), regimes);
        if (!only && !chosen(bug_info(i), NULL, ranks))
            printf("%s: left out (it needs 3 ranks or more round the ring; --ranks %d)\n", bug_info(i)->name, ranks);
    }
    Row *rows = xcalloc((size_t)(2 * bugs + 1), sizeof *rows), *bug_rows = rows + bugs + 1;
    for (int i = 0, k = 0; bug_info(i); i++)
        for (int hidden = 0; chosen(bug_info(i), only, ranks) && hidden < rows_of(bug_info(i), regimes); hidden++) {
            Row *r = &bug_rows[k++];
            r->bug = bug_info(i), r->hidden = hidden, r->flags = hidden ? r->bug->hides : r->bug->flags;
            snprintf(r->name, sizeof r->name, "%s%s", r->bug->name, hidden ? " (where it hides)" : "");
            layout_flags(r->bug, r->flags, ranks, r->layout, sizeof r->layout);
        }
    int n = 1;
    rows[0] = (Row){.name = "(correct code)", .flags = ""};
    for (int k = 0; regimes && k < bugs; k++) {
        bool have = false;
        for (int i = 0; i < n; i++) have = have || !strcmp(rows[i].layout, bug_rows[k].layout);
        if (have) continue;
        rows[n] = (Row){.flags = bug_rows[k].flags};
        snprintf(rows[n].layout, sizeof rows[n].layout, "%s", bug_rows[k].layout);
        snprintf(rows[n].name, sizeof rows[n].name, "(correct code: %s)", rows[n].layout);
        n++;
    }
    memmove(rows + n, bug_rows, (size_t)bugs * sizeof *rows);
    n += bugs;
    RegimeRow *reg = regimes ? xcalloc((size_t)n, sizeof *reg) : NULL;
    Reference refs[MAX_REFS];
    int n_refs = 0;
    bool ok = true, failed = false; // failed: a run, or reading what it wrote, failed
    for (int i = 0; i < n; i++) {
        Row *r = &rows[i];
        if (shared.parallel.exact && exact_refusal(r->layout, r->bug ? r->bug->name : NULL, r->refused, sizeof r->refused)) {
            printf("== %s: not run: %s\n", r->name, r->refused);
            continue;
        }
        if (!(r->ref = reference(refs, &n_refs, r->flags, self, nsteps, out, regimes))) {
            failed = true;
            break;
        }
        const char *bug = r->bug ? r->bug->name : NULL;
        char dir[DIR_LEN], log[PATH_LEN_], err[1024];
        folder(dir, out, bug ? bug : "correct", r->hidden ? "hidden" : bug ? "" : r->layout);
        printf("== %s: %d ranks %s\n", r->name, ranks, r->layout);
        fflush(stdout);
        snprintf(log, sizeof log, "%s.log", dir);
        remove(log);
        if ((train(self, ranks, nsteps, r->layout, bug, dir, log) && !diverged(dir, log)) ||
            probes(self, ranks, r->ref->model, r->ref->batch, r->layout, bug, dir, regimes, log)) {
            fprintf(stderr, "error: the %d-rank run of %s failed; see %s\n", ranks, r->name, log);
            failed = true;
            break;
        }
        loss_difference(r, dir, r->ref->dir);
        char result[PATH_LEN_], ref_probe[PATH_LEN_], dump[PATH_LEN_], ref_dump[PATH_LEN_];
        snprintf(result, sizeof result, "%s/" REGIMES_PROBE, dir);
        snprintf(ref_probe, sizeof ref_probe, "%s/" REGIMES_PROBE, r->ref->dir);
        snprintf(dump, sizeof dump, "%s/" REGIMES_TAPE, dir);
        snprintf(ref_dump, sizeof ref_dump, "%s/" REGIMES_TAPE, r->ref->dir);
        if (dumped(r->layout)) first_divergence(r, dump, ref_dump);
        else snprintf(r->where, sizeof r->where, "-");
        if (compare_probe_errors(result, ref_probe, &r->out_err, &r->grad_err, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            failed = true;
            break;
        }
        bool shows = r->bug && !(r->bug->exact_only && !shared.parallel.exact); // beyond the tolerances
        ok = ok && (r->hidden || (shows ? caught(r) && (!shared.parallel.exact || exact_step(r) == 1)
                                        : !caught(r)));
        if (!regimes) continue;
        snprintf(reg[i].name, sizeof reg[i].name, "%s", r->name);
        snprintf(reg[i].flags, sizeof reg[i].flags, "%s", r->layout);
        reg[i].bug = r->bug, reg[i].hidden = r->hidden, reg[i].rounding = r->bug && r->bug->exact_only;
        reg[i].bf16 = shared.parallel.bf16;
        regimes_measure(&reg[i], dir, r->ref->dir, dumped(r->layout));
    }
    if (failed) {
        free_rows(rows, n, reg);
        return 1;
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
           ok ? "the correct code agrees with one rank and every bug is caught"
              : "NOT every row is as it should be (the correct code agrees, every bug is caught)");
    char err[1024];
    if (regimes && regimes_write(reg, n, ranks, steps, out, err, sizeof err)) usage_error("--out: %s", err);
    if (regimes) printf("wrote %s/regimes.md, %s/regimes.csv and %s/regimes.png\n", out, out, out);
    free_rows(rows, n, reg);
    return ok ? 0 : 1;
}
