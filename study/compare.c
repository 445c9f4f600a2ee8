// compare.c: see compare.h.
#include "compare.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../run/flags.h"
#include "../run/losslog.h"
#include "../run/outfile.h"
#include "../run/settings.h"
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf("usage: train/train compare RUN_A RUN_B [--tol T] [--plot PATH]\n"
           "       train/train compare A.safetensors B.safetensors [--tol T] [--grad-tol G]\n"
           "  Runs: per-step relative loss difference |a - b| / |b| over the steps both logged;\n"
           "        prints the largest and the first step over --tol (default %g; %g when either\n"
           "        run's config.json says --precision bf16, as verify), and plots both\n"
           "        curves and the difference (default RUN_A/compare.png; --plot must not exist yet,\n"
           "        unless it is a compare.png). Settings of the runs' config.json that change the\n"
           "        loss curve and differ are named: the runs are then expected to diverge.\n"
           "  Probe results: ||a - b|| / ||b|| for every tensor; 'out' and 'loss' against --tol\n"
           "        (default %g), 'grad.*' against --grad-tol (default %g); %g and %g when either\n"
           "        was probed with --precision bf16 (its metadata), as verify.\n"
           "  Other files (checkpoints, EMA weights, optimizer states, probe batches) are refused.\n"
           "  Runs without mpirun.\n"
           "  Exit status: 0 within tolerance, 1 over it, 2 for bad arguments or files.\n" EVERY_COMMAND_HELP,
           COMPARE_LOSS_TOL, COMPARE_BF16_LOSS_TOL, PROBE_OUT_TOL, PROBE_GRAD_TOL, PROBE_BF16_OUT_TOL,
           PROBE_BF16_GRAD_TOL);
}

// Whether the run in dir trained with --precision bf16 (its config.json; false without one)
static bool run_in_bf16(const char *dir) {
    char path[PATH_LEN + 16], err[PATH_LEN + 128];
    TrainConfig tc;
    train_config_defaults(&tc);
    json_t *root = settings_load(dir, path, sizeof path, err, sizeof err);
    bool bf16 = root && !settings_read(&tc, root, path, err, sizeof err) && tc.parallel.bf16;
    json_decref(root);
    return bf16;
}

// Whether a probe result was computed under --precision bf16 (its metadata; false without)
static bool result_in_bf16(const char *path) {
    SafeTensors st;
    char err[1024];
    if (st_read(path, &st, err, sizeof err)) return false; // compare_results says why
    const char *p = st_meta(&st, "precision");
    bool bf16 = p && !strcmp(p, "bf16");
    st_free(&st);
    return bf16;
}

// Says which settings of the runs' config.json differ, beyond those the settings table marks
// NOT_COMPARED (where and how long a run went, its logging, sampling, EMA, threads and device, and
// what a comparison is there to check: the parallel layout, the micro-batches, the bugs): their
// loss curves are then expected to part. Silent when either run has no readable config.json.
static void note_settings(const char *a, const char *b) {
    char pa[PATH_LEN + 16], pb[PATH_LEN + 16], err[PATH_LEN + 128], list[1024];
    json_t *ja = settings_load(a, pa, sizeof pa, err, sizeof err);
    json_t *jb = settings_load(b, pb, sizeof pb, err, sizeof err);
    if (ja && jb && settings_differ(ja, jb, list, sizeof list))
        printf("note: the runs differ in %s (their config.json), so their losses are expected "
               "to diverge; compare runs of the same settings to check the parallelism\n", list);
    json_decref(ja);
    json_decref(jb);
}

int compare_runs(const char *a, const char *b, double tol, const char *plot, const char *label_a,
                 const char *label_b) {
    char pa[1024], pb[1024], err[1024];
    LossLog runs[2];
    snprintf(pa, sizeof pa, "%s/loss.csv", a);
    snprintf(pb, sizeof pb, "%s/loss.csv", b);
    if (losslog_read(&runs[0], pa, err, sizeof err)) return fprintf(stderr, "error: %s\n", err), 2;
    if (losslog_read(&runs[1], pb, err, sizeof err)) {
        losslog_free(&runs[0]);
        return fprintf(stderr, "error: %s\n", err), 2;
    }
    LossDiff d = losslog_diff(&runs[0], &runs[1], tol);
    int common = d.n;
    const char *names[2] = {label_a ? label_a : a, label_b ? label_b : b};
    int rc = 0;
    if (!common) {
        fprintf(stderr, "error: %s and %s share no logged step\n", a, b);
        rc = 2;
    } else {
        note_settings(a, b);
        if (common < runs[0].n || common < runs[1].n)
            printf("%s logged %d steps and %s %d: comparing the %d steps both logged\n", names[0],
                   runs[0].n, names[1], runs[1].n, common);
        printf("compared %d steps: largest relative loss difference %.3e at step %.0f (tolerance %.1e)\n",
               common, d.rel[d.worst], d.step[d.worst], tol);
        if (d.first_over >= 0) printf("first step over tolerance: %.0f -> the runs DIVERGE\n", d.step[d.first_over]), rc = 1;
        else printf("every step within tolerance -> the runs AGREE\n");
        if (losslog_plot(plot, "loss curves", runs, names, 2, true, tol, err, sizeof err))
            fprintf(stderr, "error: %s\n", err), rc = 2;
        else printf("plot: %s\n", plot);
    }
    losslog_diff_free(&d);
    losslog_free(&runs[0]);
    losslog_free(&runs[1]);
    return rc;
}

// ||a - b|| / ||b|| of two tensors of n values, in double; -1 with a message if either cannot be
// read as reals
static double tensor_rel_err(const StTensor *ta, const StTensor *tb, size_t n, char *err, size_t len) {
    real *x = xmalloc(n * sizeof(real) + 1), *y = xmalloc(n * sizeof(real) + 1);
    double num = 0, den = 0, e = -1;
    if (!st_to_real(ta, x, n, err, len) && !st_to_real(tb, y, n, err, len)) {
        for (size_t k = 0; k < n; k++) num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]), den += (double)y[k] * y[k];
        e = den > 0 ? sqrt(num / den) : sqrt(num);
    }
    free(x);
    free(y);
    return e;
}

static bool same_shape(const StTensor *ta, const StTensor *tb) {
    return ta->ndim == tb->ndim && !memcmp(ta->shape, tb->shape, (size_t)ta->ndim * sizeof ta->shape[0]);
}

int compare_probe_errors(const char *a, const char *b, double *out_err, double *grad_err, char *err,
                         size_t len) {
    SafeTensors sa, sb;
    if (st_read(a, &sa, err, len)) return -1;
    if (st_read(b, &sb, err, len)) return st_free(&sa), -1;
    *out_err = INFINITY, *grad_err = 0;
    for (int i = 0; i < sb.n; i++) {
        const StTensor *tb = &sb.tensors[i], *ta = st_find(&sa, tb->name);
        bool grad = !strncmp(tb->name, "grad.", 5);
        if (!grad && strcmp(tb->name, "out")) continue;
        char why[256];
        double e = ta && same_shape(ta, tb)
                       ? tensor_rel_err(ta, tb, tb->nbytes / st_dtype_size(tb->dtype), why, sizeof why)
                       : -1;
        if (e < 0) e = INFINITY;
        if (grad) *grad_err = e > *grad_err || isnan(e) ? e : *grad_err; // NaN, once seen, stays
        else *out_err = e;
    }
    st_free(&sa);
    st_free(&sb);
    return 0;
}

static int compare_results(const char *a, const char *b, double tol, double grad_tol) {
    SafeTensors sa, sb;
    char err[1024];
    if (st_read(a, &sa, err, sizeof err)) return fprintf(stderr, "error: %s\n", err), 2;
    if (st_read(b, &sb, err, sizeof err)) return st_free(&sa), fprintf(stderr, "error: %s\n", err), 2;
    int bad = 0, grads = 0;
    double worst_grad = 0;
    const char *worst_name = "";
    for (int i = 0; i < sb.n; i++) { // a tensor missing, reshaped or not numeric counts as over
        const StTensor *tb = &sb.tensors[i], *ta = st_find(&sa, tb->name);
        bool grad = !strncmp(tb->name, "grad.", 5);
        char shape_a[256], shape_b[256];
        double e = -1;
        if (!ta) snprintf(err, sizeof err, "missing in %s", a);
        else if (!same_shape(ta, tb))
            snprintf(err, sizeof err, "has shape %s in %s but %s in %s",
                     st_shape_str(shape_a, sizeof shape_a, ta->shape, ta->ndim), a,
                     st_shape_str(shape_b, sizeof shape_b, tb->shape, tb->ndim), b);
        else e = tensor_rel_err(ta, tb, tb->nbytes / st_dtype_size(tb->dtype), err, sizeof err);
        if (e < 0) {
            printf("%-44s %s\n", tb->name, err);
            bad++;
            continue;
        }
        bool over = !(e <= (grad ? grad_tol : tol));
        bad += over;
        grads += grad;
        if (over || !grad) printf("%-44s relative error %.3e%s\n", tb->name, e, over ? " OVER TOLERANCE" : "");
        if (grad && (!worst_name[0] || !(e <= worst_grad))) worst_grad = e, worst_name = tb->name;
    }
    for (int i = 0; i < sa.n; i++)
        if (!st_find(&sb, sa.tensors[i].name))
            printf("%-44s missing in %s\n", sa.tensors[i].name, b), bad++;
    if (grads) printf("%-44s relative error %.3e (the worst of %d gradients)\n", worst_name, worst_grad, grads);
    printf("%s (tolerance %.1e, gradients %.1e)\n", bad ? "the results DIFFER" : "the results AGREE", tol, grad_tol);
    st_free(&sa);
    st_free(&sb);
    return bad ? 1 : 0;
}

// What a compare argument is: a folder is taken for a run (compare_runs says what it lacks), a
// file is named by the tensors it holds; what is the words for a message.
typedef enum { ARG_RUN, ARG_RESULT, ARG_WEIGHTS, ARG_OTHER } ArgKind;

static ArgKind arg_kind(const char *path, char *what, size_t len) {
    struct stat sb;
    if (stat(path, &sb))
        usage_error("compare: %s does not exist; pass two run folders or two probe results", path);
    if (S_ISDIR(sb.st_mode)) return snprintf(what, len, "a run folder"), ARG_RUN;
    char dir[1024], base[1024];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(base, sizeof base, "%s", path);
    if (!strcmp(basename(base), "loss.csv"))
        usage_error("compare: %s is a run's loss log; pass the run folder, %s", path, dirname(dir));
    SafeTensors st;
    char err[1024];
    if (st_read(path, &st, err, sizeof err))
        usage_error("compare: %s; pass two run folders or two probe results", err);
    ArgKind k = ARG_OTHER;
    const char *w = "a safetensors file of none of this program's kinds";
    if (st_find(&st, "out")) k = ARG_RESULT, w = "a probe result";
    else if (st_find(&st, "adam.m")) w = "an optimizer state (a run's optimizer.safetensors)";
    else if (st_find(&st, "x") && st_find(&st, "target")) w = "a probe batch";
    else if (st_find(&st, "pos_embed")) { // the training run's model names its optimizer state
        k = ARG_WEIGHTS;
        w = st_meta(&st, "optimizer_state") ? "a model checkpoint (a run's model.safetensors)"
            : st_meta(&st, "step")          ? "EMA weights (a run's ema.safetensors)"
                                            : "a model checkpoint";
    }
    snprintf(what, len, "%s", w);
    st_free(&st);
    return k;
}

int compare_main(int argc, char **argv) {
    const char *files[2] = {0}, *plot = NULL;
    double tol = -1, grad_tol = -1;
    int nf = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(), 0;
        else if (!strcmp(argv[i], "--tol")) tol = flag_double("--tol", flag_value(argc, argv, &i), 0, 1e9);
        else if (!strcmp(argv[i], "--grad-tol")) grad_tol = flag_double("--grad-tol", flag_value(argc, argv, &i), 0, 1e9);
        else if (!strcmp(argv[i], "--plot")) plot = flag_value(argc, argv, &i);
        else if (argv[i][0] == '-') usage_error("compare: unknown flag '%s'", argv[i]);
        else if (nf < 2) files[nf++] = argv[i];
        else usage_error("compare takes two runs or two probe results, not '%s' as well", argv[i]);
    }
    if (nf != 2) usage_error("compare needs two runs (folders) or two probe results (.safetensors)");
    if (dry_run) {
        dry_run_missing("A", files[0], true), dry_run_missing("B", files[1], true);
        printf("dry run: compare would compare %s with %s\ndry run: every flag checked; nothing run or "
               "written\n", files[0], files[1]);
        return 0;
    }
    char what[2][96];
    ArgKind ka = arg_kind(files[0], what[0], sizeof what[0]);
    ArgKind kb = arg_kind(files[1], what[1], sizeof what[1]);
    if (ka == ARG_RESULT && kb == ARG_RESULT) { // the bounds of the precision either was computed in
        OurBounds o = our_bounds(result_in_bf16(files[0]) || result_in_bf16(files[1]));
        return compare_results(files[0], files[1], tol < 0 ? o.out : tol, grad_tol < 0 ? o.grad : grad_tol);
    }
    if (ka != ARG_RUN || kb != ARG_RUN)
        usage_error("compare: %s is %s and %s is %s, but compare takes two run folders (their "
                    "loss curves) or two probe results (probe --out)%s", files[0], what[0],
                    files[1], what[1], ka == ARG_WEIGHTS || kb == ARG_WEIGHTS
                        ? "; to compare two checkpoints, probe both on one batch (probe "
                          "--make-batch writes one) and compare the results" : "");
    char def[1024];
    snprintf(def, sizeof def, "%s/compare.png", files[0]);
    if (plot) { // an existing file is replaced only when it is a plot compare wrote: a compare.png
        out_file_check("--plot", plot, ".png");
        struct stat sb;
        char base[1024];
        snprintf(base, sizeof base, "%s", plot);
        if (stat(plot, &sb) == 0 && strcmp(basename(base), "compare.png"))
            usage_error("--plot %s already exists, and compare replaces no file but a compare.png "
                        "it wrote; pass a path that does not exist yet", plot);
    }
    if (tol < 0) tol = our_bounds(run_in_bf16(files[0]) || run_in_bf16(files[1])).loss;
    return compare_runs(files[0], files[1], tol, plot ? plot : def, NULL, NULL);
}
