// locate.c: see locate.h.
#include "locate.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "compare.h"
#include "../run/flags.h"
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A token range [lo, hi) that a rank holds (the "shards" metadata of tapes written elsewhere)
typedef struct Run {
    int rank, lo, hi;
} Run;

typedef struct Dump {
    SafeTensors st;
    int ranks, tokens, padded;
    int context; // in-context: the conditioning tokens in front of the tokens of a (B, T, X) tensor
    bool exact;
    int *order;  // [st.n] the tensors in tape order: by their "NNNN " position, then file order
    Run *runs;   // the "shards" metadata's runs, or NULL: rank r holds [r T_pad/P, (r+1) T_pad/P)
    int n_runs;
} Dump;

static int meta_int(const SafeTensors *st, const char *key) {
    const char *v = st_meta(st, key);
    return v ? atoi(v) : 0;
}

static void dump_free(Dump *d) { st_free(&d->st), free(d->order), free(d->runs); }

// The position a tape gives tensor t ("NNNN name"); INT_MAX when its name has none
static int position(const StTensor *t) {
    const char *s = t->name;
    if (!isdigit((unsigned char)*s)) return INT_MAX;
    while (isdigit((unsigned char)*s)) s++;
    return *s == ' ' ? atoi(t->name) : INT_MAX;
}
static const SafeTensors *sorting;
static int by_position(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    int pi = position(&sorting->tensors[i]), pj = position(&sorting->tensors[j]);
    return pi != pj ? (pi < pj ? -1 : 1) : i - j;
}

// "shards": each rank's token runs, ranks by commas, a rank's runs by '+': "0-13,13-25" or
// "0-4+12-16,4-8+8-12"; -1 when it does not parse into runs of [0, padded) for `ranks` ranks
static int parse_shards(Dump *d, const char *s) {
    int rank = 0, cap = 0;
    const char *p = s;
    while (*p) {
        char *end;
        if (*p == ',') { // a rank holding no tokens
            rank++, p++;
            continue;
        }
        long lo = strtol(p, &end, 10);
        if (end == p || *end != '-') return -1;
        p = end + 1;
        long hi = strtol(p, &end, 10);
        if (end == p || lo < 0 || hi < lo || hi > d->padded) return -1;
        if (d->n_runs == cap) d->runs = xrealloc(d->runs, (size_t)(cap = cap ? 2 * cap : 16), sizeof *d->runs);
        d->runs[d->n_runs++] = (Run){rank, (int)lo, (int)hi};
        p = end;
        if (*p == ',') rank++, p++;
        else if (*p == '+') p++;
        else if (*p) return -1;
    }
    return rank + 1 == d->ranks ? 0 : -1;
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
        return dump_free(d), -1;
    }
    const char *shards = st_meta(&d->st, "shards");
    if (shards && parse_shards(d, shards)) {
        snprintf(err, len, "%s: its metadata's shards \"%.100s\" are not %d ranks' token runs in [0, %d) "
                 "(\"0-13,13-25\": a comma between ranks, '+' between a rank's runs)", path, shards,
                 d->ranks, d->padded);
        return dump_free(d), -1;
    }
    d->order = xmalloc((size_t)(d->st.n ? d->st.n : 1) * sizeof *d->order);
    for (int i = 0; i < d->st.n; i++) d->order[i] = i;
    sorting = &d->st;
    qsort(d->order, (size_t)d->st.n, sizeof *d->order, by_position);
    return 0;
}

static const char *name_of(const StTensor *t) {
    return position(t) != INT_MAX ? strchr(t->name, ' ') + 1 : t->name;
}
// The tensor called `name` whatever its position (another implementation may order them otherwise)
static const StTensor *named(const Dump *d, const char *name) {
    for (int i = 0; i < d->st.n; i++)
        if (!strcmp(name_of(&d->st.tensors[i]), name)) return &d->st.tensors[i];
    return NULL;
}
static bool is_float(const StTensor *t) { return t->dtype == ST_F32 || t->dtype == ST_F64; }
static size_t count_of(const StTensor *t) { return t->nbytes / st_dtype_size(t->dtype); }

// How x and y (same name and shape) differ: whether they do (any bit under --exact, else
// ||x - y|| / ||y|| over tol), that relative error, the count of differing values (beyond tol
// times the largest |y|), the largest |x - y| and |y|, and for a tensor of T tokens (B, T, X)
// (T > 0) the first and last token where they do
typedef struct Diff {
    bool differs;
    double rel; // ||x - y|| / ||y|| (||x - y|| where y is all 0; infinite for a NaN)
    size_t count;
    double max_diff, max_ref;
    int t_lo, t_hi;
} Diff;

static Diff diff_of(const StTensor *x, const StTensor *y, bool exact, double tol, int T) {
    Diff f = {.t_lo = -1, .t_hi = -1};
    size_t n = count_of(x);
    real *a = xmalloc((n ? n : 1) * sizeof(real)), *b = xmalloc((n ? n : 1) * sizeof(real));
    char err[256];
    CHECK(!st_to_real(x, a, n, err, sizeof err) && !st_to_real(y, b, n, err, sizeof err), "%s", err);
    double dd = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        f.max_ref = fmax(f.max_ref, fabs((double)b[i])), dd += d * d, bb += (double)b[i] * b[i];
    }
    f.rel = bb > 0 ? sqrt(dd / bb) : sqrt(dd); // compare's rule (probe results): absolute where y is 0
    if (isnan(f.rel)) f.rel = INFINITY;
    f.differs = exact ? memcmp(a, b, n * sizeof(real)) != 0 : !(f.rel <= tol);
    int X = T ? (int)x->shape[2] : 1;
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

// "rank 1 of 2", "ranks 0-2 of 3" or "ranks 0, 3 of 4": of d's layout, those owning tokens [lo, hi]
static void owners(const Dump *d, int lo, int hi, char *buf, size_t len) {
    if (!d->runs) { // the contiguous shards of probe --dump-tape
        int n = d->padded / d->ranks, r0 = lo / n, r1 = hi / n;
        if (r0 == r1) snprintf(buf, len, "rank %d of %d", r0, d->ranks);
        else snprintf(buf, len, "ranks %d-%d of %d", r0, r1, d->ranks);
        return;
    }
    bool *own = xmalloc((size_t)d->ranks * sizeof *own);
    int count = 0, first = -1, last = -1;
    for (int r = 0; r < d->ranks; r++) own[r] = false;
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].lo <= hi && d->runs[i].hi > lo) own[d->runs[i].rank] = true;
    for (int r = 0; r < d->ranks; r++)
        if (own[r]) count++, last = r, first = first < 0 ? r : first;
    size_t k = 0;
    if (count == 1) snprintf(buf, len, "rank %d of %d", first, d->ranks);
    else if (count == last - first + 1) snprintf(buf, len, "ranks %d-%d of %d", first, last, d->ranks);
    else {
        k += (size_t)snprintf(buf, len, "ranks ");
        for (int r = 0; r < d->ranks && k < len; r++)
            if (own[r]) k += (size_t)snprintf(buf + k, len - k, "%s%d", r == first ? "" : ", ", r);
        if (k < len) snprintf(buf + k, len - k, " of %d", d->ranks);
    }
    free(own);
}

// Tensors of one tape that the other lacks: their count and the first few names
typedef struct Missing {
    int n;
    char names[160];
} Missing;
static void missing_add(Missing *m, const char *name) {
    size_t k = strlen(m->names);
    if (m->n++ < 3 && k + strlen(name) + 3 < sizeof m->names)
        snprintf(m->names + k, sizeof m->names - k, "%s%s", k ? ", " : "", name);
}
static void missing_text(const Missing *m, const char *side, const char *other, char *buf, size_t len) {
    size_t k = strlen(buf);
    if (m->n && k < len)
        snprintf(buf + k, len - k, "; %d tensor%s of %s %s not in %s (%s%s)", m->n, m->n > 1 ? "s" : "",
                 side, m->n > 1 ? "are" : "is", other, m->names, m->n > 3 ? ", ..." : "");
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

int locate_dumps(const char *pa, const char *pb, double tol, double grad_tol, char *buf, size_t len, TapeSummary *sum) {
    Dump a, b;
    TapeSummary s = {.worst_tol = -1};
    if (sum) *sum = s;
    if (load(&a, pa, buf, len)) return -1;
    if (load(&b, pb, buf, len)) return dump_free(&a), -1;
    if (a.tokens != b.tokens || a.context != b.context) {
        snprintf(buf, len, "%s is a tape of %d tokens (and %d conditioning tokens), %s of %d (and %d): "
                 "dump the same model and batch", pa, a.tokens, a.context, pb, b.tokens, b.context);
        return dump_free(&a), dump_free(&b), -1;
    }
    bool exact = a.exact && b.exact;
    int first = -1, later = 0, after = 0, compared = 0, rc = 0, worst = -1;
    double worst_ratio = -1;
    Missing not_in_b = {0}, not_in_a = {0};
    Diff fd = {0};
    for (int k = 0; k < a.st.n; k++) { // A's order, B's tensors by name
        const StTensor *x = &a.st.tensors[a.order[k]], *y = named(&b, name_of(x));
        if (!y) {
            missing_add(&not_in_b, name_of(x));
            continue;
        }
        if (!is_float(x) || !is_float(y) || x->ndim != y->ndim || count_of(x) != count_of(y) ||
            memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0])) {
            char sa[64], sb[64];
            snprintf(buf, len, "%s has %s as %s %s, but %s as %s %s: dump the same model and batch "
                     "(the layout and bugs may differ), floats in the one-rank layout", pa, name_of(x),
                     st_dtype_name(x->dtype), st_shape_str(sa, sizeof sa, x->shape, x->ndim), pb,
                     st_dtype_name(y->dtype), st_shape_str(sb, sizeof sb, y->shape, y->ndim));
            rc = -1;
            break;
        }
        compared++;
        bool grad = !strncmp(name_of(x), "grad.", 5);
        // a tensor of tokens (B, T, X), or of the R in-context conditioning tokens and them
        int T = x->ndim == 3 && (x->shape[1] == a.tokens || x->shape[1] == a.context + a.tokens) ? (int)x->shape[1] : 0;
        double t = grad ? (grad_tol > 0 ? grad_tol : PROBE_GRAD_TOL) : tol > 0 ? tol : PROBE_OUT_TOL;
        Diff d = diff_of(x, y, exact, t, T);
        // the worst: under --exact the largest relative error among those whose bits differ,
        // else the largest for its tolerance
        double ratio = exact ? (d.differs ? d.rel : -1) : d.rel / t;
        if (worst < 0 || ratio > worst_ratio)
            worst = a.order[k], worst_ratio = ratio, s.worst_err = d.rel, s.worst_tol = exact ? 0 : t;
        s.tensors++, s.over += d.differs;
        if (first >= 0) after++, later += d.differs;
        else if (d.differs) first = a.order[k], fd = d;
    }
    for (int i = 0; rc == 0 && i < b.st.n; i++)
        if (!named(&a, name_of(&b.st.tensors[i]))) missing_add(&not_in_a, name_of(&b.st.tensors[i]));
    s.exact = exact;
    if (rc == 0 && worst >= 0) {
        char what[96];
        describe(&a, name_of(&a.st.tensors[worst]), what, sizeof what);
        snprintf(s.worst, sizeof s.worst, "%s (%s)", name_of(&a.st.tensors[worst]), what);
    }
    if (rc == 0 && !compared) {
        snprintf(buf, len, "%s and %s have no tensor name in common (%s holds %s, %s %s): dump the "
                 "same model under the names of probe --dump-tape", pa, pb, pa,
                 a.st.n ? name_of(&a.st.tensors[a.order[0]]) : "none", pb,
                 b.st.n ? name_of(&b.st.tensors[b.order[0]]) : "none");
        rc = -1;
    } else if (rc == 0 && first < 0) {
        if (not_in_a.n || not_in_b.n)
            snprintf(buf, len, "no divergence: every tensor both tapes hold (%d) is %s", compared,
                     exact ? "identical, bit for bit" : "within tolerance");
        else
            snprintf(buf, len, "no divergence: every tensor of the step is %s", exact ? "identical, bit for bit" : "within tolerance");
    } else if (rc == 0) {
        const StTensor *x = &a.st.tensors[first];
        const char *name = name_of(x);
        char what[96], tokens[320] = "", oa[96], ob[96];
        describe(&a, name, what, sizeof what);
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
    if (rc >= 0) missing_text(&not_in_b, "A", "B", buf, len), missing_text(&not_in_a, "B", "A", buf, len);
    if (sum && rc >= 0) *sum = s;
    dump_free(&a), dump_free(&b);
    return rc;
}

static void help(void) {
    printf("usage: train/train locate A B [--tol T]\n"
           "  A and B are dumps of one step (probe --dump-tape) of the same model and batch, say N ranks\n"
           "  and one. Names the first tensor, in execution order (forward, then backward), where they\n"
           "  part: bit for bit when both were dumped with --exact, else ||a - b|| / ||b|| beyond --tol\n"
           "  (default %g forward, %g for gradients); with its block, op, the\n"
           "  tokens that differ and the ranks owning them in each layout, the size of the difference,\n"
           "  and how many later tensors differ too. A tensor that one tape lacks is named, and the\n"
           "  others compared; a tape of another implementation (python/ditsp_tape.py writes one) may\n"
           "  hold fewer. Pass --tol for a float32 tape against a float64 one (1e-3, say).\n"
           "  Exit 0 when nothing parts, 1 when it does.\n" EVERY_COMMAND_HELP,
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
    int rc = locate_dumps(path[0], path[1], tol, tol, verdict, sizeof verdict, NULL);
    if (rc < 0) usage_error("locate: %s", verdict);
    printf("%s\n", verdict);
    return rc;
}
