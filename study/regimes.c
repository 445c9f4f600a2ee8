// regimes.c: see regimes.h.
#include "regimes.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../draw/canvas.h"
#include "compare.h"
#include "../run/losslog.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---- the regimes: what each library's own test compares, and how --------------------------------

typedef struct Regime {
    const char *id;     // the CSV's name for it
    const char *label;  // the table's and the picture's
    const char *source; // the test file it is modelled on
} Regime;

enum { FORWARD_ONLY, MODEL_OUTPUT, FINITE_GRADIENTS, BF16_ATTENTION, MEAN_AND_ONE_GRAD, LOSS_5PCT,
       FP32_ATTENTION, OURS, OURS_EXACT, N_REGIMES };
static const Regime regimes[N_REGIMES] = {
    {"forward-only", "forward only", "yunchang test/test_hybrid_attn.py"},
    {"model-output", "model output", "diffusers tests/models/testing_utils/parallelism.py, test_context_parallel_inference"},
    {"finite-gradients", "finite gradients", "diffusers tests/models/testing_utils/parallelism.py, test_context_parallel_backward"},
    {"bf16-attention", "bf16 attention", "TransformerEngine tests/pytorch/attention/run_attention_with_cp.py"},
    {"mean-and-one-grad", "mean + one grad", "verl tests/models/test_transformers_ulysses.py"},
    {"loss-5pct", "loss within 5%", "TransformerEngine examples/pytorch/transformer README"},
    {"fp32-attention", "fp32 attention", "PyTorch test/distributed/tensor/test_attention.py"},
    {"ours", "ours", "train probe + compare; verify"},
    {"ours-exact", "ours, exact", "--exact probe and tape"},
};

// The tensors a check reads, from the N-rank run and the reference alike
typedef enum {
    ATTN_OUT,       // every block's attention output (tape)
    ATTN_DQ,        // every block's gradient of q, k, v: the attention inputs' (tape), as the
                    // attention-level tests make them, from an output gradient of unit size
                    // (TransformerEngine's randn, PyTorch's out.sum()): divided by the root mean
                    // square of the reference's gradient of the block's output (which the
                    // backward is linear in), not ~1/(values in the loss) as the probe's loss makes it
    ATTN_DK,
    ATTN_DV,
    OUTPUT,         // the model's output (probe)
    OUTPUT_MEAN,    // its mean over every value
    Q_PROJ_GRAD,    // the first block's query projection's weight gradient: qkv.weight's first D rows
    PARAM_GRADS,    // every parameter's gradient (probe)
    LOSS_CURVE,     // the training run's loss at every step
    EXACT_FORWARD,  // under --exact: the output, the loss and every forward tensor of the tape
    EXACT_BACKWARD, // under --exact: every gradient of the tape and every parameter's
} Tensors;

typedef enum {
    ALLCLOSE,   // torch.allclose per value, |a - b| <= atol + rtol |b|, and NaN never close: the
                // error is the largest |a - b| / (atol + rtol |b|), caught above 1
    REL,        // this project's: the worst ||a - b|| / ||b|| of the probe's tensors (as compare
                // reports it), or the largest per-step |a - b| / |b| of the loss curve, above atol
    NON_FINITE, // the count of inf and NaN values in the N-rank run's tensors, caught above 0
    DIFFERING,  // the count of values whose bits differ, caught above 0
} Metric;

typedef struct Check {
    int regime;
    const char *name; // what it compares
    Tensors what;
    Metric metric;
    double atol, rtol;
    bool b_parallel; // the |b| of the formula is the N-rank value: the source passes it second
} Check;

// One row per comparison a source makes, quoted beside it
static const Check checks[] = {
    // assert_close(local_out, local_out_ref, atol=1e-2, rtol=0); dq, dk, dv are only logged
    {FORWARD_ONLY, "attn.out", ATTN_OUT, ALLCLOSE, 1e-2, 0, false},
    // assert_close(ref_output, cp_output, atol=1e-4, rtol=1e-4)
    {MODEL_OUTPUT, "out", OUTPUT, ALLCLOSE, 1e-4, 1e-4, true},
    // has_valid_grads = all(torch.isfinite(g).all() for g in grads): the backward test's only check
    {FINITE_GRADIENTS, "grads", PARAM_GRADS, NON_FINITE, 0, 0, false},
    // bf16: tols = dict(atol=2.5e-2, rtol=2.5e-2); _error(a, b) = assert_close(a, b, **tols) for
    // [out_, dq_, dk_, dv_] (with CP) against [out, dq, dk, dv] (without)
    {BF16_ATTENTION, "attn.out", ATTN_OUT, ALLCLOSE, 2.5e-2, 2.5e-2, false},
    {BF16_ATTENTION, "dq", ATTN_DQ, ALLCLOSE, 2.5e-2, 2.5e-2, false},
    {BF16_ATTENTION, "dk", ATTN_DK, ALLCLOSE, 2.5e-2, 2.5e-2, false},
    {BF16_ATTENTION, "dv", ATTN_DV, ALLCLOSE, 2.5e-2, 2.5e-2, false},
    // assert_close(mean_local, mean_full, rtol=1e-2, atol=3e-5), mean_full the sequence-parallel
    // logits'; assert_close(grad, grad_full, rtol=1e-2, atol=3e-5) of layers[0].self_attn.q_proj
    {MEAN_AND_ONE_GRAD, "out mean", OUTPUT_MEAN, ALLCLOSE, 3e-5, 1e-2, true},
    {MEAN_AND_ONE_GRAD, "q_proj grad", Q_PROJ_GRAD, ALLCLOSE, 3e-5, 1e-2, false},
    // the example's loss curves agree within 5% (relative): atol 0, rtol 0.05 at every step
    {LOSS_5PCT, "loss", LOSS_CURVE, REL, 0.05, 0, false},
    // fp32, efficient SDPA: torch.allclose(out, cp_out, atol=1e-08) (rtol its default 1e-05), and
    // torch.allclose(q.grad, cp_dq, atol=2e-06), the same for k and v
    {FP32_ATTENTION, "attn.out", ATTN_OUT, ALLCLOSE, 1e-8, 1e-5, true},
    {FP32_ATTENTION, "dq", ATTN_DQ, ALLCLOSE, 2e-6, 1e-5, true},
    {FP32_ATTENTION, "dk", ATTN_DK, ALLCLOSE, 2e-6, 1e-5, true},
    {FP32_ATTENTION, "dv", ATTN_DV, ALLCLOSE, 2e-6, 1e-5, true},
    // compare's probe tolerances and verify's loss tolerance, by the runs' precision (our_bounds)
    {OURS, "out", OUTPUT, REL, 0, 0, false},
    {OURS, "grads", PARAM_GRADS, REL, 0, 0, false},
    {OURS, "loss", LOSS_CURVE, REL, 0, 0, false},
    // --exact: not one differing bit, forward or backward
    {OURS_EXACT, "forward", EXACT_FORWARD, DIFFERING, 0, 0, false},
    {OURS_EXACT, "backward", EXACT_BACKWARD, DIFFERING, 0, 0, false},
};
_Static_assert(sizeof checks / sizeof checks[0] == REGIMES_CHECKS, "regimes.h's REGIMES_CHECKS counts the checks");

// The level above which a check's error catches the bug, in runs of the precision bf16 or not
static double tau(const Check *c, bool bf16) {
    if (c->regime == OURS && c->metric == REL) {
        OurBounds o = our_bounds(bf16);
        return c->what == OUTPUT ? o.out : c->what == PARAM_GRADS ? o.grad : o.loss;
    }
    return c->metric == ALLCLOSE ? 1 : c->metric == REL ? c->atol : 0;
}
// NaN counts as over; a negative error (not measured) never is
static bool over(double err, double tau) { return isnan(err) || err > tau; }

// ---- measuring ---------------------------------------------------------------------------------

// A tape's names are "NNNN name", a probe's just the name
static const char *name_of(const StTensor *t) { return strchr(t->name, ' ') ? strchr(t->name, ' ') + 1 : t->name; }
static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

// Whether `what` reads the tensor called name
static bool reads(Tensors what, const char *name) {
    bool grad = !strncmp(name, "grad.", 5);
    const char *base = grad ? name + 5 : name;
    switch (what) {
    case ATTN_OUT: return !grad && !strncmp(base, "blocks.", 7) && ends_with(base, ".attn.out");
    case ATTN_DQ: return grad && !strncmp(base, "blocks.", 7) && ends_with(base, ".attn.q");
    case ATTN_DK: return grad && !strncmp(base, "blocks.", 7) && ends_with(base, ".attn.k");
    case ATTN_DV: return grad && !strncmp(base, "blocks.", 7) && ends_with(base, ".attn.v");
    case OUTPUT: case OUTPUT_MEAN: return !strcmp(name, "out");
    case Q_PROJ_GRAD: return !strcmp(name, "grad.blocks.0.attn.qkv.weight");
    case PARAM_GRADS: case EXACT_BACKWARD: return grad;
    case EXACT_FORWARD: return !grad;
    case LOSS_CURVE: return false;
    }
    return false;
}

static real *values(const StTensor *t, size_t *n) {
    char err[256];
    *n = t->nbytes / st_dtype_size(t->dtype);
    real *v = xmalloc(*n * sizeof(real) + 1);
    CHECK(!st_to_real(t, v, *n, err, sizeof err), "%s", err);
    return v;
}

static double allclose_error(const real *a, const real *b, size_t n, const Check *c) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i], d = fabs(x - y), bound = c->atol + c->rtol * fabs(c->b_parallel ? x : y);
        double e = x == y ? 0 : isnan(d) || isinf(d) ? INFINITY : bound > 0 ? d / bound : INFINITY;
        worst = fmax(worst, e);
    }
    return worst;
}

static double mean(const real *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    return s / (double)n;
}

// 1 / the root mean square of the reference's gradient of the attention output whose input
// gradient is `name` (grad.blocks.N.attn.q, k or v); 1 if it is 0 or absent (no gradient reached
// it: the last joint block's caption output, which is dropped)
static double unit_dout(const SafeTensors *B, const char *name) {
    char out[160];
    snprintf(out, sizeof out, "%.*sout", (int)(strrchr(name, '.') + 1 - name), name);
    for (int j = 0; j < B->n; j++) {
        if (strcmp(name_of(&B->tensors[j]), out)) continue;
        size_t n;
        real *v = values(&B->tensors[j], &n);
        double ss = 0;
        for (size_t k = 0; k < n; k++) ss += (double)v[k] * v[k];
        free(v);
        return ss > 0 ? 1 / sqrt(ss / (double)n) : 1;
    }
    return 1;
}

// Check c on the tensors of A (the N-rank run) and B (the reference) that it reads; a tensor of
// A that B lacks or holds in another shape is an infinite error
static double measure_files(const SafeTensors *A, const SafeTensors *B, const Check *c) {
    double e = 0;
    for (int i = 0; i < A->n; i++) {
        const StTensor *x = &A->tensors[i], *y = NULL;
        const char *name = name_of(x);
        if (!reads(c->what, name)) continue;
        for (int j = 0; j < B->n && !y; j++)
            if (!strcmp(name_of(&B->tensors[j]), name)) y = &B->tensors[j];
        if (!y || x->nbytes != y->nbytes || x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof x->shape))
            return INFINITY;
        size_t n;
        real *a = values(x, &n), *b = values(y, &n);
        if (c->what == OUTPUT_MEAN) a[0] = (real)mean(a, n), b[0] = (real)mean(b, n), n = 1;
        if (c->what == Q_PROJ_GRAD) n = (size_t)(x->shape[1] * x->shape[1]); // (3D, D): q's rows first
        if (c->what >= ATTN_DQ && c->what <= ATTN_DV) {
            double s = unit_dout(B, name);
            for (size_t k = 0; k < n; k++) a[k] = (real)(a[k] * s), b[k] = (real)(b[k] * s);
        }
        if (c->metric == ALLCLOSE) e = fmax(e, allclose_error(a, b, n, c));
        for (size_t k = 0; k < n && c->metric != ALLCLOSE; k++)
            e += c->metric == NON_FINITE ? !isfinite(a[k]) : memcmp(&a[k], &b[k], sizeof(real)) != 0;
        free(a), free(b);
    }
    return e;
}

// The largest per-step relative loss difference of dir's run against ref_dir's
static double loss_error(const char *dir, const char *ref_dir) {
    char path[4200], err[1024];
    LossLog a = {0}, b = {0};
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    CHECK(!losslog_read(&a, path, err, sizeof err), "%s", err);
    snprintf(path, sizeof path, "%s/loss.csv", ref_dir);
    CHECK(!losslog_read(&b, path, err, sizeof err), "%s", err);
    LossDiff d = losslog_diff(&a, &b, 0);
    double e = d.n ? d.rel[d.worst] : INFINITY;
    losslog_diff_free(&d), losslog_free(&a), losslog_free(&b);
    return isnan(e) ? INFINITY : e;
}

static void load(SafeTensors *st, const char *dir, const char *file) {
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK(!st_read(path, st, err, sizeof err), "%s", err);
}

void regimes_measure(RegimeRow *r, const char *dir, const char *ref_dir, bool tape) {
    enum { PROBE, TAPE, EXACT_PROBE, EXACT_TAPE, N_FILES };
    const char *file[N_FILES] = {REGIMES_PROBE, REGIMES_TAPE, REGIMES_EXACT_PROBE, REGIMES_EXACT_TAPE};
    SafeTensors a[N_FILES] = {0}, b[N_FILES] = {0};
    char exact_probe[4200]; // none when the row's flags have no exact mode (in-context): "-"
    snprintf(exact_probe, sizeof exact_probe, "%s/%s", dir, REGIMES_EXACT_PROBE);
    bool have_exact = access(exact_probe, F_OK) == 0;
    for (int f = 0; f < N_FILES; f++)
        if ((tape || (f != TAPE && f != EXACT_TAPE)) && (have_exact || f < EXACT_PROBE))
            load(&a[f], dir, file[f]), load(&b[f], ref_dir, file[f]);
    char path[4200], ref[4200], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, REGIMES_PROBE), snprintf(ref, sizeof ref, "%s/%s", ref_dir, REGIMES_PROBE);
    double out_err, grad_err;
    CHECK(!compare_probe_errors(path, ref, &out_err, &grad_err, err, sizeof err), "%s", err);
    for (int k = 0; k < REGIMES_CHECKS; k++) {
        const Check *c = &checks[k];
        bool on_tape = c->what <= ATTN_DV, exact = c->what == EXACT_FORWARD || c->what == EXACT_BACKWARD;
        double *e = &r->err[k];
        if (c->what == LOSS_CURVE) *e = loss_error(dir, ref_dir);
        else if (c->metric == REL) *e = c->what == OUTPUT ? out_err : grad_err;
        else if (on_tape) *e = tape ? measure_files(&a[TAPE], &b[TAPE], c) : -1;
        else if (exact && !have_exact) *e = -1;
        else if (exact) *e = measure_files(&a[EXACT_PROBE], &b[EXACT_PROBE], c) + (tape ? measure_files(&a[EXACT_TAPE], &b[EXACT_TAPE], c) : 0);
        else *e = measure_files(&a[PROBE], &b[PROBE], c);
    }
    for (int f = 0; f < N_FILES; f++) st_free(&a[f]), st_free(&b[f]);
}

// ---- the verdicts and what shows them ----------------------------------------------------------

static bool caught(const RegimeRow *r, int g) {
    bool any = false;
    for (int k = 0; k < REGIMES_CHECKS; k++)
        if (checks[k].regime == g) any = any || over(r->err[k], tau(&checks[k], r->bf16));
    return any;
}

// Whether regime g measured row r at all: a row whose config has no such mode (--exact of a bug
// that runs without it) has none of the regime's errors, and is neither caught nor missed
static bool ran(const RegimeRow *r, int g) {
    for (int k = 0; k < REGIMES_CHECKS; k++)
        if (checks[k].regime == g && !(r->err[k] < 0)) return true; // NaN: measured
    return false;
}

static const char *verdict(const RegimeRow *r, int g) {
    return !ran(r, g) ? "not run" : caught(r, g) ? "caught" : "missed";
}

// Regime g's totals: the bugs it misses where they show, the correct runs it flags (false
// alarms), and the bugs it misses or catches only where it flags the correct code of the same
// layout too (a catch that does not tell the bug from rounding), of those it ran; and the bugs it
// could not run
typedef struct Totals {
    int bugs, correct, missed, alarms, blind, not_run;
} Totals;
static Totals totals(const RegimeRow *rows, int n, int g) {
    Totals t = {0};
    for (int i = 0; i < n; i++) {
        const RegimeRow *r = &rows[i];
        if (!r->bug) t.correct++, t.alarms += caught(r, g);
        if (!r->bug || r->hidden) continue;
        t.bugs++;
        if (!ran(r, g)) {
            t.not_run++;
            continue;
        }
        bool alarm = false;
        for (int j = 0; j < n; j++) alarm = alarm || (!rows[j].bug && !strcmp(rows[j].flags, r->flags) && caught(&rows[j], g));
        t.missed += !caught(r, g), t.blind += !caught(r, g) || alarm;
    }
    return t;
}

static void verdict_table(FILE *f, const RegimeRow *rows, int n, int ranks) {
    fprintf(f, "| bug | runs on %d ranks with |", ranks);
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " %s |", regimes[g].label);
    fprintf(f, "\n| --- | --- |");
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " --- |");
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        const RegimeRow *r = &rows[i];
        fprintf(f, "| %s | %s |", r->name, r->flags[0] ? r->flags : "gather");
        for (int g = 0; g < N_REGIMES; g++) fprintf(f, " %s |", verdict(r, g));
        fprintf(f, "\n");
    }
    Totals t[N_REGIMES];
    for (int g = 0; g < N_REGIMES; g++) t[g] = totals(rows, n, g);
    fprintf(f, "| **missed, of %d bugs** | |", t[0].bugs);
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " **%d** |", t[g].missed);
    fprintf(f, "\n| **false alarms, of %d correct runs** | |", t[0].correct);
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " **%d** |", t[g].alarms);
    fprintf(f, "\n| **missed, or caught only where the correct code is flagged too** | |");
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " **%d** |", t[g].blind);
    fprintf(f, "\n| **not run (the bug's config has no such mode)** | |");
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, " **%d** |", t[g].not_run);
    fprintf(f, "\n");
}

static void error_table(FILE *f, const RegimeRow *rows, int n) {
    fprintf(f, "| bug |");
    for (int k = 0; k < REGIMES_CHECKS; k++)
        fprintf(f, " %s: %s (over %g) |", regimes[checks[k].regime].label, checks[k].name, tau(&checks[k], n && rows[0].bf16));
    fprintf(f, "\n| --- |");
    for (int k = 0; k < REGIMES_CHECKS; k++) fprintf(f, " --- |");
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| %s |", rows[i].name);
        for (int k = 0; k < REGIMES_CHECKS; k++)
            if (rows[i].err[k] < 0) fprintf(f, " - |");
            else fprintf(f, checks[k].metric >= NON_FINITE ? " %.0f |" : " %.2e |", rows[i].err[k]);
        fprintf(f, "\n");
    }
}

static void write_md(FILE *f, const RegimeRow *rows, int n, int ranks, int steps) {
    fprintf(f, "# Which bugs each regime catches (%d ranks against one, %d training steps)\n\n", ranks, steps);
    verdict_table(f, rows, n, ranks);
    fprintf(f, "\nThe regimes, each as its source compares a context-parallel result with one device:\n\n");
    for (int g = 0; g < N_REGIMES; g++) {
        fprintf(f, "- **%s** (%s):", regimes[g].label, regimes[g].source);
        for (int k = 0; k < REGIMES_CHECKS; k++) {
            const Check *c = &checks[k];
            if (c->regime != g) continue;
            if (c->metric == ALLCLOSE) fprintf(f, " %s atol %g rtol %g;", c->name, c->atol, c->rtol);
            else if (c->metric == REL) fprintf(f, " %s relative error %g;", c->name, tau(c, n && rows[0].bf16));
            else fprintf(f, " %s: any %s;", c->name, c->metric == NON_FINITE ? "inf or NaN" : "differing bit");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\nThe attention-level tests backpropagate an output gradient of unit size (randn, or "
               "out.sum()); the probe's loss, a mean, makes it ~1e-6 in DiT-tiny, so dq, dk and dv are compared "
               "divided by the root mean square of the reference's gradient of that block's attention "
               "output (the backward is linear in it).\n"
               "\nThe measured errors (a cell is caught when one of its errors is over the level in its "
               "column; allclose errors are the largest |a - b| / (atol + rtol |b|), so 1 is the "
               "tolerance; - : not measured, a tape holds one micro-batch):\n\n");
    error_table(f, rows, n);
}

const char *regimes_check_name(int k, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", regimes[checks[k].regime].id, checks[k].name);
    return buf;
}

// The CSV: the row, then each check's error and level, then each regime's verdict
static void write_csv(FILE *f, const RegimeRow *rows, int n) {
    fprintf(f, "bug,flags,kind");
    char name[96];
    for (int k = 0; k < REGIMES_CHECKS; k++)
        fprintf(f, ",%s error,%s tau", regimes_check_name(k, name, sizeof name), name);
    for (int g = 0; g < N_REGIMES; g++) fprintf(f, ",%s verdict", regimes[g].id);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        const RegimeRow *r = &rows[i];
        fprintf(f, "%s,%s,%s", r->name, r->flags, // neither holds a comma
                !r->bug ? "correct" : r->hidden ? "hidden" : r->rounding ? "rounding" : "bug");
        for (int k = 0; k < REGIMES_CHECKS; k++) {
            if (r->err[k] < 0) fprintf(f, ",-");
            else fprintf(f, ",%.17g", r->err[k]);
            fprintf(f, ",%g", tau(&checks[k], r->bf16));
        }
        for (int g = 0; g < N_REGIMES; g++) fprintf(f, ",%s", verdict(r, g));
        fprintf(f, "\n");
    }
}

// The heat map: a row per run and a column per regime, caught green and missed red; on the
// correct code's row, agreeing grey and a false alarm orange; under them each regime's misses
static int write_png(const RegimeRow *rows, int n, const char *path, char *err, size_t len) {
    const uint8_t white[3] = {255, 255, 255}, ink[3] = {30, 30, 30}, green[3] = {67, 160, 71},
                  red[3] = {229, 57, 53}, grey[3] = {150, 150, 150}, orange[3] = {251, 140, 0};
    enum { ch = 26, top = 70, left = 12 };
    int label_w = 0, cw = 0;
    for (int i = 0; i < n; i++) {
        int w = canvas_text_width(rows[i].name, 2);
        label_w = w > label_w ? w : label_w;
    }
    for (int g = 0; g < N_REGIMES; g++) {
        int w = canvas_text_width(regimes[g].label, 1) + 16;
        cw = w > cw ? w : cw;
    }
    label_w += 24;
    Canvas cv = canvas_create(left + label_w + N_REGIMES * cw + 12, top + (n + 2) * ch + 40, white);
    canvas_text(&cv, left, 10, "which bugs each regime catches (green: caught, red: missed, white: not run)", 2, ink);
    char line[64];
    for (int g = 0; g < N_REGIMES; g++) {
        int x = left + label_w + g * cw;
        canvas_text(&cv, x + 8, top - 18, regimes[g].label, 1, ink);
        Totals t = totals(rows, n, g);
        snprintf(line, sizeof line, "%d missed", t.missed);
        canvas_text(&cv, x + 8, top + n * ch + 9, line, 1, ink);
        snprintf(line, sizeof line, "%d false alarm%s", t.alarms, t.alarms == 1 ? "" : "s");
        canvas_text(&cv, x + 8, top + (n + 1) * ch + 9, line, 1, ink);
        if (!g) {
            snprintf(line, sizeof line, "of %d bugs", t.bugs);
            canvas_text(&cv, left, top + n * ch + 6, line, 2, ink);
            snprintf(line, sizeof line, "of %d correct runs", t.correct);
            canvas_text(&cv, left, top + (n + 1) * ch + 6, line, 2, ink);
        }
    }
    for (int i = 0; i < n; i++) {
        int y = top + i * ch;
        canvas_text(&cv, left, y + 6, rows[i].name, 2, ink);
        for (int g = 0; g < N_REGIMES; g++) {
            bool c = caught(&rows[i], g), bug = rows[i].bug, r = ran(&rows[i], g);
            int x = left + label_w + g * cw;
            canvas_fill_rect(&cv, x + 1, y + 1, cw - 2, ch - 2, !r ? white : bug ? (c ? green : red) : c ? orange : grey);
            canvas_text(&cv, x + 8, y + 9, !r ? "not run" : bug ? (c ? "caught" : "missed") : c ? "false alarm" : "agrees", 1,
                        r ? white : ink);
        }
    }
    canvas_text(&cv, left, top + (n + 2) * ch + 12, "(where it hides): the bug run in a config where it "
                "does not show; it counts in no total", 1, ink);
    int rc = canvas_write_png(&cv, path, err, len);
    canvas_free(&cv);
    return rc;
}

int regimes_write(const RegimeRow *rows, int n, int ranks, int steps, const char *dir, char *err, size_t len) {
    printf("\n");
    verdict_table(stdout, rows, n, ranks);
    const char *ext[2] = {"md", "csv"};
    char path[4200];
    for (int e = 0; e < 2; e++) {
        snprintf(path, sizeof path, "%s/regimes.%s", dir, ext[e]);
        FILE *f = fopen(path, "w");
        if (!f) return snprintf(err, len, "cannot write %s: %s", path, strerror(errno)), -1;
        if (e == 0) write_md(f, rows, n, ranks, steps);
        else write_csv(f, rows, n);
        if (fclose(f)) return snprintf(err, len, "cannot write %s: %s", path, strerror(errno)), -1;
    }
    snprintf(path, sizeof path, "%s/regimes.png", dir);
    return write_png(rows, n, path, err, len);
}
