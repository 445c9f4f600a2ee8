// locate.c: see locate.h.
#include "locate.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "compare.h"
#include "../run/flags.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Dump {
    SafeTensors st;
    int ranks, tokens, padded;
    int context; // in-context: the conditioning tokens in front of the tokens of a (B, T, X) tensor
    bool exact;
} Dump;

static int meta_int(const SafeTensors *st, const char *key) {
    const char *v = st_meta(st, key);
    return v ? atoi(v) : 0;
}

static int load(Dump *d, const char *path, char *err, size_t len) {
    *d = (Dump){0};
    if (st_read(path, &d->st, err, len)) return -1;
    d->ranks = meta_int(&d->st, "ranks"), d->tokens = meta_int(&d->st, "tokens");
    d->padded = meta_int(&d->st, "padded_tokens"), d->exact = meta_int(&d->st, "exact") > 0;
    d->context = meta_int(&d->st, "context_tokens");
    if (d->ranks < 1 || d->tokens < 1 || d->padded < d->tokens) {
        snprintf(err, len, "%s is not a tape dump (probe --dump-tape writes one): its metadata lacks "
                 "ranks, tokens or padded_tokens", path);
        return st_free(&d->st), -1;
    }
    return 0;
}

// The tensor at position `pos` ("NNNN name"); NULL past the end
static const StTensor *at(const Dump *d, int pos) {
    for (int i = 0; i < d->st.n; i++)
        if (atoi(d->st.tensors[i].name) == pos) return &d->st.tensors[i];
    return NULL;
}
static const char *name_of(const StTensor *t) { return strchr(t->name, ' ') ? strchr(t->name, ' ') + 1 : t->name; }
// The tensor called `name` whatever its position (another implementation may order them otherwise)
static const StTensor *named(const Dump *d, const char *name) {
    for (int i = 0; i < d->st.n; i++)
        if (!strcmp(name_of(&d->st.tensors[i]), name)) return &d->st.tensors[i];
    return NULL;
}

// How x and y (same name and shape) differ: whether they do (any bit under --exact, else
// ||x - y|| / ||y|| over tol), that relative error, the count of differing values (beyond tol
// times the largest |y|), the largest |x - y| and |y|, and for tokens (B, T, X) the first and last
// token where they do
typedef struct Diff {
    bool differs;
    double rel; // ||x - y|| / ||y|| (||x - y|| where y is all 0; infinite for a NaN)
    size_t count;
    double max_diff, max_ref;
    int t_lo, t_hi;
} Diff;

static Diff diff_of(const StTensor *x, const StTensor *y, bool exact, double tol) {
    Diff f = {.t_lo = -1, .t_hi = -1};
    size_t n = x->nbytes / st_dtype_size(x->dtype);
    real *a = xmalloc(n * sizeof(real)), *b = xmalloc(n * sizeof(real));
    char err[256];
    st_to_real(x, a, n, err, sizeof err), st_to_real(y, b, n, err, sizeof err);
    double dd = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        f.max_ref = fmax(f.max_ref, fabs((double)b[i])), dd += d * d, bb += (double)b[i] * b[i];
    }
    f.rel = bb > 0 ? sqrt(dd / bb) : sqrt(dd); // compare's rule (probe results): absolute where y is 0
    if (isnan(f.rel)) f.rel = INFINITY;
    f.differs = exact ? memcmp(a, b, n * sizeof(real)) != 0 : !(f.rel <= tol);
    int T = x->ndim == 3 ? (int)x->shape[1] : 0, X = x->ndim == 3 ? (int)x->shape[2] : 1;
    for (size_t i = 0; f.differs && i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        bool differs = exact ? memcmp(&a[i], &b[i], sizeof(real)) != 0 : !(d <= tol * f.max_ref);
        if (!differs) continue;
        f.count++, f.max_diff = fmax(f.max_diff, isnan(d) ? INFINITY : d);
        if (!T) continue;
        int t = (int)(i / (size_t)X % (size_t)T);
        if (f.t_lo < 0 || t < f.t_lo) f.t_lo = t;
        if (t > f.t_hi) f.t_hi = t;
    }
    free(a), free(b);
    return f;
}

// "rank 1" or "ranks 0-2" of d's layout owning tokens [lo, hi]
static void owners(const Dump *d, int lo, int hi, char *buf, size_t len) {
    int n = d->padded / d->ranks, r0 = lo / n, r1 = hi / n;
    if (r0 == r1) snprintf(buf, len, "rank %d of %d", r0, d->ranks);
    else snprintf(buf, len, "ranks %d-%d of %d", r0, r1, d->ranks);
}

// "(backward, block 3, op attn.v)" for the tensor called `name` in d: a gradient of no tensor the
// forward made is a parameter's, summed over ranks
static void describe(const Dump *d, const char *name, char *buf, size_t len) {
    bool grad = !strncmp(name, "grad.", 5);
    const char *what = grad ? name + 5 : name, *op = what;
    char block[32] = "";
    int blk;
    if (sscanf(what, "blocks.%d.", &blk) == 1 && strchr(what + 7, '.'))
        snprintf(block, sizeof block, "block %d, ", blk), op = strchr(what + 7, '.') + 1;
    bool param = grad;
    for (int i = 0; param && i < d->st.n; i++) param = strcmp(name_of(&d->st.tensors[i]), what) != 0;
    snprintf(buf, len, "%s, %sop %s", param ? "parameter gradient" : grad ? "backward" : "forward", block, op);
}

int locate_dumps(const char *pa, const char *pb, double tol, char *buf, size_t len, TapeSummary *sum) {
    Dump a, b;
    TapeSummary s = {.worst_tol = -1};
    if (sum) *sum = s;
    if (load(&a, pa, buf, len)) return -1;
    if (load(&b, pb, buf, len)) return st_free(&a.st), -1;
    bool exact = a.exact && b.exact;
    int first = -1, later = 0, after = 0, rc = 0, worst = -1;
    double worst_ratio = -1;
    Diff fd = {0};
    for (int pos = 0;; pos++) { // A's order, B's tensors by name
        const StTensor *x = at(&a, pos), *y = x ? named(&b, name_of(x)) : NULL;
        if (!x) break;
        if (!y || x->ndim != y->ndim || x->nbytes / st_dtype_size(x->dtype) != y->nbytes / st_dtype_size(y->dtype) ||
            memcmp(x->shape, y->shape, sizeof x->shape)) {
            snprintf(buf, len, "%s has %s, which %s %s: dump the same model and batch (the layout and "
                     "bugs may differ)", pa, name_of(x), pb, y ? "holds in another shape" : "lacks");
            rc = -1;
            break;
        }
        bool grad = !strncmp(name_of(x), "grad.", 5);
        double t = tol > 0 ? tol : grad ? PROBE_GRAD_TOL : PROBE_OUT_TOL;
        Diff d = diff_of(x, y, exact, t);
        // the worst: under --exact the largest relative error among those whose bits differ,
        // else the largest for its tolerance
        double ratio = exact ? (d.differs ? d.rel : -1) : d.rel / t;
        if (worst < 0 || ratio > worst_ratio)
            worst = pos, worst_ratio = ratio, s.worst_err = d.rel, s.worst_tol = exact ? 0 : t;
        s.tensors++, s.over += d.differs;
        if (first >= 0) after++, later += d.differs;
        else if (d.differs) first = pos, fd = d;
    }
    s.exact = exact;
    if (rc == 0 && worst >= 0) {
        char what[96];
        describe(&a, name_of(at(&a, worst)), what, sizeof what);
        snprintf(s.worst, sizeof s.worst, "%s (%s)", name_of(at(&a, worst)), what);
    }
    if (rc == 0 && first < 0)
        snprintf(buf, len, "no divergence: every tensor of the step is %s", exact ? "identical, bit for bit" : "within tolerance");
    else if (rc == 0) {
        const char *name = name_of(at(&a, first));
        char what[96], tokens[224] = "", oa[48], ob[48];
        describe(&a, name, what, sizeof what);
        const StTensor *x = at(&a, first);
        int R = x->ndim == 3 && x->shape[1] == a.context + a.tokens ? a.context : 0;
        if (fd.t_hi >= R) { // tokens counted after the in-context conditioning ones, which every rank holds
            int lo = fd.t_lo > R ? fd.t_lo - R : 0, hi = fd.t_hi - R;
            owners(&a, lo, hi, oa, sizeof oa), owners(&b, lo, hi, ob, sizeof ob);
            snprintf(tokens, sizeof tokens, ", tokens %d-%d of %d (%s in A, %s in B)%s", lo, hi, a.tokens,
                     oa, ob, fd.t_lo < R ? ", and the conditioning tokens" : "");
        } else if (fd.t_lo >= 0) snprintf(tokens, sizeof tokens, ", the conditioning tokens only");
        snprintf(buf, len, "first divergence: %s (%s)%s; %zu values differ, largest |difference| "
                 "%.3g (%.3g of the tensor's largest value); %d of the %d tensors after it differ too",
                 name, what, tokens, fd.count, fd.max_diff,
                 fd.max_ref > 0 ? fd.max_diff / fd.max_ref : INFINITY, later, after);
        rc = 1;
    }
    if (sum && rc >= 0) *sum = s;
    st_free(&a.st), st_free(&b.st);
    return rc;
}

static void help(void) {
    printf("usage: train/train locate A B [--tol T]\n"
           "  A and B are dumps of one step (probe --dump-tape) of the same model and batch, say N ranks\n"
           "  and one. Names the first tensor, in execution order (forward, then backward), where they\n"
           "  part: bit for bit when both were dumped with --exact, else ||a - b|| / ||b|| beyond --tol\n"
           "  (default %g forward, %g for gradients); with its block, op, the\n"
           "  tokens that differ and the ranks owning them in each layout, the size of the difference,\n"
           "  and how many later tensors differ too. Exit 0 when nothing parts, 1 when it does.\n" DRY_RUN_HELP,
           PROBE_OUT_TOL, PROBE_GRAD_TOL);
}

int locate_main(int argc, char **argv) {
    const char *path[2] = {NULL, NULL};
    double tol = 0;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(), 0;
        else if (!strcmp(argv[i], "--tol")) tol = flag_double("--tol", flag_value(argc, argv, &i), 0, 1);
        else if (argv[i][0] == '-' && argv[i][1]) usage_error("locate: unknown flag '%s' (see train/train locate --help)", argv[i]);
        else if (n < 2) path[n++] = argv[i];
        else usage_error("locate takes two dumps; '%s' is a third", argv[i]);
    }
    if (n < 2) usage_error("locate needs two dumps: train/train locate A B (probe --dump-tape writes them)");
    if (dry_run) {
        dry_run_missing("A", path[0], true), dry_run_missing("B", path[1], true);
        printf("dry run: locate would compare the tapes %s and %s\ndry run: every flag checked; nothing "
               "run\n", path[0], path[1]);
        return 0;
    }
    char verdict[1024];
    int rc = locate_dumps(path[0], path[1], tol, verdict, sizeof verdict, NULL);
    if (rc < 0) usage_error("locate: %s", verdict);
    printf("%s\n", verdict);
    return rc;
}
