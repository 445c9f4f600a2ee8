// test_attention.c: the fused attention (kernels/attention.c, its tiled form) against an
// independent reference (the materialized softmax in double precision, the only place a Tq x Tk
// matrix still exists) and against central differences, over masks, packs of images (the
// block-diagonal mask, from queries and keys anywhere in the pack), Tq != Tk and tile sizes that
// do and do not divide the sequence. A copy of the kernel built with a planted bug (the running
// sum not rescaled when the row maximum grows; see the Makefile) must fail both checks.
#include "../autograd/gradcheck.h"
#include "../kernels/kernels.h"
#include "../layers/layers.h"
#include "testutil.h"
#include <math.h>

#ifdef REAL_F64
#define TOL(t64, t32) (t64)
#define EPS 1e-6
#else
#define TOL(t64, t32) (t32)
#define EPS 1e-2
#endif

// the same kernel compiled with ATTENTION_PLANTED_BUG
void planted_attention_forward_tiled(real *out, real *lse, real *scratch, const real *q,
                                     const real *k, const real *v, const uint8_t *key_mask,
                                     Segments seg, int B, int Tq, int Tk, int H, int dh, int bq,
                                     int bk);

typedef struct Case {
    const char *name;
    int B, Tq, Tk, H, dh, bq, bk;
    const char *mask; // per key: '1' attend, '0' masked; NULL = all keys valid but the padding
    int pad;          // with mask NULL: the last `pad` keys are masked (sequence padding)
    // a pack: the image of every token of the B rows, one digit each ('.': padding, id -1), row
    // after row; queries are the tokens from q0 of each row, keys those from k0. NULL: one image
    const char *images;
    int q0, k0;
} Case;

static const Case cases[] = {
    {"one tile, one block", 1, 7, 7, 1, 4, 64, 128, NULL, 0, NULL, 0, 0},
    {"Tq != Tk, tiles that do not divide", 2, 5, 11, 2, 3, 2, 3, "11011101110", 0, NULL, 0, 0},
    {"first key block all masked", 2, 9, 13, 3, 2, 4, 5, "0000011011111", 0, NULL, 0, 0},
    {"every key masked", 1, 3, 6, 2, 2, 1, 1, "000000", 0, NULL, 0, 0},
    {"1 x 1 tiles", 1, 4, 5, 1, 3, 1, 1, "10111", 0, NULL, 0, 0},
    {"padding at the end, 128 x 256 tiles", 2, 70, 150, 2, 8, 128, 256, NULL, 5, NULL, 0, 0},
    {"long rows, several blocks", 1, 33, 200, 1, 5, 16, 32, NULL, 0, NULL, 0, 0},
    {"pack of 3 images, blocks skipped", 2, 20, 20, 2, 3, 4, 5, NULL, 0,
     "0000001111111122222." "00011111111111111222", 0, 0},
    {"a shard's queries against the whole pack", 2, 7, 20, 2, 3, 3, 4, "10111111111111111110",
     0, "0000001111111122222." "00011111111111111222", 9, 0},
    {"a visiting block cut through images", 1, 8, 6, 1, 4, 3, 2, NULL, 0,
     "0000111111222233", 0, 6},
    {"a block no query sees", 1, 4, 4, 1, 2, 2, 2, NULL, 0, "00001111", 0, 4},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

// the case's image ids (B, T) into buf, as Segments; NO_SEGMENTS without a pack
static Segments segments_of(const Case *c, int32_t *buf) {
    if (!c->images) return NO_SEGMENTS;
    int n = (int)strlen(c->images);
    for (int t = 0; t < n; t++) buf[t] = c->images[t] == '.' ? -1 : c->images[t] - '0';
    return (Segments){buf, n / c->B, c->q0, c->k0};
}

static uint8_t *mask_of(const Case *c, uint8_t *buf) {
    if (!c->mask && !c->pad) return NULL;
    for (int j = 0; j < c->Tk; j++) buf[j] = c->mask ? c->mask[j] == '1' : j < c->Tk - c->pad;
    return buf;
}

// The materialized softmax in double: out (B,Tq,D) and, for dout, dq, dk, dv (all overwritten).
static void reference(double *out, double *dq, double *dk, double *dv, const real *q,
                      const real *k, const real *v, const real *dout, const uint8_t *mask,
                      Segments sg, const Case *c) {
    int D = c->H * c->dh, Tk = c->Tk;
    double scale = 1 / sqrt((double)c->dh), *p = malloc(Tk * sizeof(double)), *dp = malloc(Tk * sizeof(double));
    size_t nq = (size_t)c->B * c->Tq * D, nk = (size_t)c->B * Tk * D;
    memset(dq, 0, nq * sizeof(double)), memset(dk, 0, nk * sizeof(double)), memset(dv, 0, nk * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Tq; i++) {
                const real *qi = q + ((size_t)b * c->Tq + i) * D + h * c->dh;
                const real *go = dout + ((size_t)b * c->Tq + i) * D + h * c->dh;
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int j = 0; j < Tk; j++) {
                    const real *kj = k + ((size_t)b * Tk + j) * D + h * c->dh;
                    double s = 0;
                    for (int d = 0; d < c->dh; d++) s += (double)qi[d] * kj[d];
                    bool same = !sg.id || sg.id[b * sg.T + sg.q0 + i] == sg.id[b * sg.T + sg.k0 + j];
                    p[j] = (!mask || mask[j]) && same ? s * scale : -INFINITY;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < Tk; j++) sum += p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                for (int j = 0; j < Tk; j++) p[j] = sum > 0 ? p[j] / sum : 0;
                double *o = out + ((size_t)b * c->Tq + i) * D + h * c->dh;
                for (int d = 0; d < c->dh; d++) {
                    o[d] = 0;
                    for (int j = 0; j < Tk; j++) o[d] += p[j] * v[((size_t)b * Tk + j) * D + h * c->dh + d];
                }
                for (int j = 0; j < Tk; j++) { // dP = dO V^T, dS = P (dP - sum_j P dP)
                    dp[j] = 0;
                    for (int d = 0; d < c->dh; d++) dp[j] += (double)go[d] * v[((size_t)b * Tk + j) * D + h * c->dh + d];
                    dot += p[j] * dp[j];
                }
                for (int j = 0; j < Tk; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    size_t kj = ((size_t)b * Tk + j) * D + h * c->dh, qo = ((size_t)b * c->Tq + i) * D + h * c->dh;
                    for (int d = 0; d < c->dh; d++) {
                        dv[kj + d] += p[j] * go[d];
                        dq[qo + d] += ds * k[kj + d];
                        dk[kj + d] += ds * q[qo + d];
                    }
                }
            }
    free(p), free(dp);
}

// max |a - ref| / max |ref| (the absolute error when ref is all zero)
static double norm_err(const real *a, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - ref[i])), m = fmax(m, fabs(ref[i]));
    return m > 0 ? e / m : e;
}

typedef struct Run { // one case's inputs, the kernel's results and the reference's
    real *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv, *scratch;
    double *rout, *rdq, *rdk, *rdv;
    uint8_t mask[256];
    int32_t ids[256];
    size_t nq, nk;
} Run;

static Run run_case(const Case *c, bool planted) {
    Run r = {0};
    int D = c->H * c->dh, threads = kernel_threads();
    r.nq = (size_t)c->B * c->Tq * D, r.nk = (size_t)c->B * c->Tk * D;
    real **bufs[] = {&r.q, &r.dout, &r.out, &r.dq}, **kbufs[] = {&r.k, &r.v, &r.dk, &r.dv};
    for (int i = 0; i < 4; i++) *bufs[i] = calloc(r.nq, sizeof(real)), *kbufs[i] = calloc(r.nk, sizeof(real));
    double **rb[] = {&r.rout, &r.rdq}, **rk[] = {&r.rdk, &r.rdv};
    for (int i = 0; i < 2; i++) *rb[i] = malloc(r.nq * sizeof(double)), *rk[i] = malloc(r.nk * sizeof(double));
    r.lse = malloc((size_t)c->B * c->H * c->Tq * sizeof(real));
    r.scratch = malloc(attention_tiled_scratch_count(c->bq, c->bk, c->dh, threads) * sizeof(real));
    rng_fill_normal(r.q, r.nq, 7, 1, 0, 1), rng_fill_normal(r.k, r.nk, 7, 2, 0, 1);
    rng_fill_normal(r.v, r.nk, 7, 3, 0, 1), rng_fill_normal(r.dout, r.nq, 7, 4, 0, 1);
    const uint8_t *m = mask_of(c, r.mask);
    Segments sg = segments_of(c, r.ids);
    (planted ? planted_attention_forward_tiled : attention_forward_tiled)(
        r.out, r.lse, r.scratch, r.q, r.k, r.v, m, sg, c->B, c->Tq, c->Tk, c->H, c->dh, c->bq, c->bk);
    attention_backward_tiled(r.dq, r.dk, r.dv, r.scratch, r.dout, r.out, r.lse, r.q, r.k, r.v, m,
                             sg, c->B, c->Tq, c->Tk, c->H, c->dh, c->bq, c->bk);
    reference(r.rout, r.rdq, r.rdk, r.rdv, r.q, r.k, r.v, r.dout, m, sg, c);
    return r;
}

static void run_free(Run *r) {
    void *p[] = {r->q, r->k, r->v, r->dout, r->out, r->lse, r->dq, r->dk, r->dv, r->scratch,
                 r->rout, r->rdq, r->rdk, r->rdv};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

// worst normalized error of out, dq, dk, dv against the reference
static double worst_err(const Run *r) {
    double e[4] = {norm_err(r->out, r->rout, r->nq), norm_err(r->dq, r->rdq, r->nq),
                   norm_err(r->dk, r->rdk, r->nk), norm_err(r->dv, r->rdv, r->nk)};
    return fmax(fmax(e[0], e[1]), fmax(e[2], e[3]));
}

START_TEST(fused_matches_reference) {
    const Case *c = &cases[_i];
    Run r = run_case(c, false);
    double err = worst_err(&r);
    printf("fused attention vs materialized reference, %s (%dx%d, tiles %dx%d): %.2e\n", c->name,
           c->Tq, c->Tk, c->bq, c->bk, err);
    ck_assert_double_le(err, TOL(1e-12, 2e-6));
    int D = c->H * c->dh;
    const uint8_t *m = mask_of(c, r.mask);
    for (int b = 0; b < c->B; b++) // exact semantics: masked keys weigh exactly 0
        for (int j = 0; j < c->Tk; j++)
            for (int d = 0; d < D && m && !m[j]; d++) {
                size_t o = ((size_t)b * c->Tk + j) * D + d;
                ck_assert(r.dk[o] == 0 && r.dv[o] == 0);
            }
    if (c->mask && !strchr(c->mask, '1')) // every key masked: output and dq exactly 0
        for (size_t i = 0; i < r.nq; i++) ck_assert(r.out[i] == 0 && r.dq[i] == 0);
    run_free(&r);
}
END_TEST

// ---- central differences through the kernels at the case's tiles, as an op --------------------
typedef void (*AttnForward)(real *out, real *lse, real *scratch, const real *q, const real *k,
                            const real *v, const uint8_t *key_mask, Segments seg, int B, int Tq,
                            int Tk, int H, int dh, int bq, int bk);

static void tiled_bwd(Node *n) {
    const Case *c = n->ptr;
    uint8_t buf[256];
    int32_t ids[256];
    attention_backward_tiled(node_grad(n, 0), node_grad(n, 1), node_grad(n, 2), n->saved[1].data,
                             n->out->grad, n->out->data, n->saved->data, n->in[0]->data,
                             n->in[1]->data, n->in[2]->data, mask_of(c, buf), segments_of(c, ids),
                             c->B, c->Tq, c->Tk, c->H, c->dh, c->bq, c->bk);
}

// attention of the inputs q, k, v by `forward` (and the real backward), at the case's tiles
static Tensor *tiled_op(Tape *tp, Tensor **in, const Case *c, AttnForward forward) {
    uint8_t buf[256];
    int32_t ids[256];
    Tensor *out = tensor_like(tp->arena, in[0]);
    Tensor *saved = arena_alloc(tp->arena, 2 * sizeof(Tensor)); // lse, then scratch
    saved[0] = *tensor_new(tp->arena, 1, c->B * c->H * c->Tq);
    saved[1] = *tensor_new(tp->arena, 1, (int)attention_tiled_scratch_count(c->bq, c->bk, c->dh,
                                                                            kernel_threads()));
    forward(out->data, saved[0].data, saved[1].data, in[0]->data, in[1]->data, in[2]->data,
            mask_of(c, buf), segments_of(c, ids), c->B, c->Tq, c->Tk, c->H, c->dh, c->bq, c->bk);
    Node *n = tape_record(tp, "tiled attention", tiled_bwd, out, 3, in[0], in[1], in[2]);
    if (n) n->saved = saved, n->ptr = c;
    return out;
}

static Tensor *f_tiled(Tape *tp, Tensor **in, void *ctx) {
    return tiled_op(tp, in, ctx, attention_forward_tiled);
}

static GradCheck check_case(const Case *c, GradFn f) {
    Arena inputs = arena_create(1 << 20), scratch = arena_create(1 << 24);
    int D = c->H * c->dh;
    Tensor *in[3] = {randn(&inputs, 41, 1, true, 3, (int[]){c->B, c->Tq, D}),
                     randn(&inputs, 42, 1, true, 3, (int[]){c->B, c->Tk, D}),
                     randn(&inputs, 43, 1, true, 3, (int[]){c->B, c->Tk, D})};
    GradCheck g = gradcheck(f, in, 3, (void *)c, &scratch, EPS, 5);
    arena_destroy(&inputs), arena_destroy(&scratch);
    return g;
}

START_TEST(fused_gradcheck) {
    const Case *c = &cases[_i];
    if (c->Tq * c->Tk > 2000) return; // the small cases; the reference covers the large ones
    GradCheck g = check_case(c, f_tiled);
    printf("fused attention gradcheck, %s: %.2e (%s)\n", c->name, g.max_rel_err, REAL_NAME);
    ck_assert_double_le(g.max_rel_err, TOL(1e-8, 2e-2));
}
END_TEST

// ---- the planted bug: both checks must fail --------------------------------------------------------
static Tensor *f_planted(Tape *tp, Tensor **in, void *ctx) {
    return tiled_op(tp, in, ctx, planted_attention_forward_tiled);
}

START_TEST(planted_bug_is_caught) {
    const Case *c = &cases[6]; // several key blocks, no mask: the row maximum grows along the row
    Run r = run_case(c, true);
    double ref = worst_err(&r);
    GradCheck g = check_case(&(Case){"planted", 1, 5, 11, 1, 3, 2, 3, NULL, 0, NULL, 0, 0}, f_planted);
    printf("planted bug (running sum not rescaled): vs reference %.2e, gradcheck %.2e (both must "
           "fail)\n", ref, g.max_rel_err);
    ck_assert_double_gt(ref, 1e-2);
    ck_assert_double_gt(g.max_rel_err, 1e-2);
    run_free(&r);
}
END_TEST

// The attention's memory is linear in the sequence: a tape holds the output and one log-sum-exp
// per query row and head, and the scratch (freed after the call) does not grow with Tk.
START_TEST(memory_is_linear_in_the_sequence) {
    size_t peak[2];
    for (int s = 0; s < 2; s++) {
        int T = s ? 4096 : 1024, D = 16;
        Arena a = arena_create((size_t)64 << 20);
        Tape tp = tape_create(&a);
        Tensor *q = randn(&a, 1, 1, true, 3, (int[]){1, T, D});
        size_t base = arena_mark(&a);
        arena_reset_peak(&a);
        attention(&tp, q, q, q, 2, NULL, NO_SEGMENTS);
        peak[s] = a.peak - base;
        tape_free(&tp), arena_destroy(&a);
    }
    printf("attention forward memory: %zu bytes at 1024 tokens, %zu at 4096\n", peak[0], peak[1]);
    ck_assert_uint_lt(peak[1], 4 * peak[0]); // a T x T matrix would make it 16x
}
END_TEST

Suite *attention_suite(void) {
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("fused");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, fused_matches_reference, 0, N_CASES);
    tcase_add_loop_test(tc, fused_gradcheck, 0, N_CASES);
    tcase_add_test(tc, planted_bug_is_caught);
    tcase_add_test(tc, memory_is_linear_in_the_sequence);
    suite_add_tcase(s, tc);
    return s;
}
