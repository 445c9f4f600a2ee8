// test_ops.c: central-difference gradient checks of every op on small odd shapes, a
// random-direction check of a whole DiT-style block, and a negative test showing that the
// checker reports a wrong backward. Tolerances are per op and per build: float64 is the real
// check (target ~1e-7 relative); float32 runs the same cases with a coarse step as a smoke test.
#include "../autograd/gradcheck.h"
#include "../layers/dit.h"
#include "../layers/layers.h"
#include "../kernels/kernels.h"
#include "gradchecked.h"
#include "testutil.h"
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#ifdef REAL_F64
#define EPS 1e-6
#define TOL(t64, t32) (t64)
#else
#define EPS 1e-2
#define TOL(t64, t32) (t32)
#endif

static const int64_t labels[5] = {3, 1, 1, 0, 3}; // repeats check that lookups accumulate
static const uint8_t key_mask[7] = {1, 1, 0, 1, 0, 1, 1};
static const uint8_t elem_mask[14] = {1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1};

static Tensor *f_linear(Tape *tp, Tensor **in, void *c) { (void)c; return linear(tp, in[0], in[1], in[2]); }
static Tensor *f_linear_shared(Tape *tp, Tensor **in, void *c) { // x feeds two linears
    (void)c;
    return add(tp, linear(tp, in[0], in[1], NULL), linear(tp, in[0], in[2], NULL));
}
static Tensor *f_linear_nb(Tape *tp, Tensor **in, void *c) { (void)c; return linear(tp, in[0], in[1], NULL); }
static Tensor *f_layernorm_modulate(Tape *tp, Tensor **in, void *c) {
    (void)c;
    return layernorm_modulate(tp, in[0], in[1], in[2], 1e-6);
}
// the three parts side by side, each its own columns of the result: a gradient taken from the
// wrong part's rows of the output, the weight or the bias shows
static Tensor *f_linear_parts(Tape *tp, Tensor **in, void *c) {
    (void)c;
    Tensor *p[3];
    linear_parts(tp, in[0], in[1], in[2], 3, p);
    return concat_last(tp, p[0], concat_last(tp, p[2], gelu(tp, p[1])));
}
static Tensor *f_patchify(Tape *tp, Tensor **in, void *c) { (void)c; return patchify(tp, in[0], 1, 1, 2, 0, 6, false); }
static Tensor *f_patchify_shard(Tape *tp, Tensor **in, void *c) { (void)c; return patchify(tp, in[0], 1, 1, 2, 4, 3, true); }
static Tensor *f_patch_embed(Tape *tp, Tensor **in, void *c) { (void)c; return patch_embed(tp, in[0], 1, in[1], in[2], 0, 6); }
static Tensor *f_unpatchify(Tape *tp, Tensor **in, void *c) { (void)c; return unpatchify(tp, in[0], 3, 1, 4, 6, 1, 2); }
// clips (2, 2 channels, 4 frames of 3 x 6) in patches of 2 frames x 3 x 3: a 2 x 1 x 2 grid;
// a shard of tokens [1, 5) ends in padding
static Tensor *f_patchify_clip(Tape *tp, Tensor **in, void *c) { (void)c; return patchify(tp, in[0], 4, 2, 3, 1, 4, false); }
static Tensor *f_patchify_clip_last(Tape *tp, Tensor **in, void *c) { (void)c; return patchify(tp, in[0], 4, 2, 3, 1, 4, true); }
static Tensor *f_patch_embed_clip(Tape *tp, Tensor **in, void *c) { (void)c; return patch_embed(tp, in[0], 4, in[1], in[2], 0, 4); }
static Tensor *f_unpatchify_clip(Tape *tp, Tensor **in, void *c) { (void)c; return unpatchify(tp, in[0], 2, 4, 3, 6, 2, 3); }
static Tensor *f_add(Tape *tp, Tensor **in, void *c) { (void)c; return add(tp, in[0], in[1]); }
static Tensor *f_gelu(Tape *tp, Tensor **in, void *c) { (void)c; return gelu(tp, in[0]); }
static Tensor *f_silu(Tape *tp, Tensor **in, void *c) { (void)c; return silu(tp, in[0]); }
static Tensor *f_layernorm(Tape *tp, Tensor **in, void *c) { (void)c; return layernorm(tp, in[0], 1e-6); }
static Tensor *f_modulate(Tape *tp, Tensor **in, void *c) { (void)c; return modulate(tp, in[0], in[1], in[2]); }
static Tensor *f_gated_add(Tape *tp, Tensor **in, void *c) { (void)c; return gated_add(tp, in[0], in[1], in[2]); }
static Tensor *f_embedding(Tape *tp, Tensor **in, void *c) { (void)c; return embedding(tp, in[0], labels, 5); }
static Tensor *f_timestep(Tape *tp, Tensor **in, void *c) { return timestep_embedding(tp, in[0], *(int *)c); }
static Tensor *f_attention(Tape *tp, Tensor **in, void *c) { return attention(tp, in[0], in[1], in[2], *(int *)c, NULL, NO_SEGMENTS); }
static Tensor *f_attention_mask(Tape *tp, Tensor **in, void *c) { return attention(tp, in[0], in[1], in[2], *(int *)c, key_mask, NO_SEGMENTS); }
// cross-attention to captions: 3 queries of one image per row against 5 caption tokens, row 0's
// caption 2 words (then padding), row 1's empty (its queries see nothing: zero output and gradients)
static const int32_t caption_ids[16] = {0, 0, 0, 0, 0, -1, -1, -1, 0, 0, 0, -1, -1, -1, -1, -1};
static Tensor *f_attention_cross(Tape *tp, Tensor **in, void *c) {
    return attention(tp, in[0], in[1], in[2], *(int *)c, NULL, (Segments){caption_ids, 8, 0, 3});
}
static Tensor *f_slice(Tape *tp, Tensor **in, void *c) { (void)c; return slice_last(tp, in[0], 3, 4); }
static Tensor *f_concat(Tape *tp, Tensor **in, void *c) { (void)c; return concat_last(tp, in[0], in[1]); }
static Tensor *f_mse(Tape *tp, Tensor **in, void *c) { (void)c; return mse_loss(tp, in[0], in[1], elem_mask, 11); }

// qk_norm_rope: the norm alone over groups of ctx's columns; the turn alone on 3 heads with ctx's
// rows of angles; both (NormTurn: the norm's groups, the rows of angles)
static int group5 = 5, group7 = 7;
static Tensor *f_norm(Tape *tp, Tensor **in, void *c) { return qk_norm_rope(tp, in[0], in[1], *(int *)c, 1e-6, NULL, 0); }
// rotary angles for T = 3 tokens of dh = 6 (1 row, or one per image of B = 2): cos and sin of
// angles that are not multiples of pi/2
static Tensor *rope_angles(int rows) {
    static real cs[2][2 * 3 * 6];
    static Tensor t[2];
    real *a = cs[rows - 1];
    for (int i = 0; i < rows * 3 * 3; i++) a[2 * i] = (real)cos(0.7 * i + 0.3), a[2 * i + 1] = (real)sin(0.7 * i + 0.3);
    t[rows - 1] = (Tensor){.ndim = 3, .shape = {rows, 3, 6}, .size = (size_t)rows * 18, .data = a};
    return &t[rows - 1];
}
static Tensor *f_turn(Tape *tp, Tensor **in, void *c) { return qk_norm_rope(tp, in[0], NULL, 0, 0, rope_angles(*(int *)c), 3); }
typedef struct NormTurn { int group, rows; } NormTurn;
static NormTurn head6 = {6, 1}, full18 = {18, 2}, head6_wide = {6, 2};
static Tensor *f_norm_turn(Tape *tp, Tensor **in, void *c) {
    const NormTurn *nt = c;
    return qk_norm_rope(tp, in[0], in[1], nt->group, 1e-6, rope_angles(nt->rows), 3);
}
static int rows1 = 1, rows2 = 2;
static int dim8 = 8, dim7 = 7, heads1 = 1, heads2 = 2, heads3 = 3;

typedef struct OpCase {
    const char *name;
    GradFn fn;
    void *ctx;
    int n_in;
    int ndim[4];
    int shape[4][5];
    double tol64, tol32; // max relative error allowed in the float64 and float32 builds
} OpCase;

static const OpCase cases[] = {
    {"linear", f_linear, NULL, 3, {3, 2, 1}, {{2, 3, 5}, {7, 5}, {7}}, 1e-8, 1e-3},
    {"linear (input shared by two)", f_linear_shared, NULL, 3, {2, 2, 2}, {{3, 5}, {4, 5}, {4, 5}}, 1e-8, 1e-3},
    {"layernorm_modulate", f_layernorm_modulate, NULL, 3, {3, 2, 2}, {{2, 3, 5}, {2, 5}, {2, 5}}, 1e-7, 1e-2},
    {"linear in 3 parts", f_linear_parts, NULL, 3, {3, 2, 1}, {{2, 3, 5}, {6, 5}, {6}}, 1e-8, 1e-3},
    {"linear (no bias, 1 row)", f_linear_nb, NULL, 2, {2, 2}, {{1, 3}, {4, 3}}, 1e-8, 1e-3},
    {"patchify", f_patchify, NULL, 1, {4}, {{2, 3, 4, 6}}, 1e-8, 1e-3},
    {"patchify (last shard, padded)", f_patchify_shard, NULL, 1, {4}, {{2, 3, 4, 6}}, 1e-8, 1e-3},
    {"patch_embed", f_patch_embed, NULL, 3, {4, 4, 1}, {{2, 3, 4, 6}, {5, 3, 2, 2}, {5}}, 1e-8, 1e-3},
    {"unpatchify", f_unpatchify, NULL, 1, {3}, {{2, 6, 12}}, 1e-8, 1e-3},
    {"patchify (clip, 3-D patches, shard)", f_patchify_clip, NULL, 1, {4}, {{2, 2, 12, 6}}, 1e-8, 1e-3},
    {"patchify (clip, channels last)", f_patchify_clip_last, NULL, 1, {4}, {{2, 2, 12, 6}}, 1e-8, 1e-3},
    {"patch_embed (clip, 3-D conv)", f_patch_embed_clip, NULL, 3, {4, 5, 1}, {{2, 2, 12, 6}, {5, 2, 2, 3, 3}, {5}}, 1e-8, 1e-3},
    {"unpatchify (clip)", f_unpatchify_clip, NULL, 1, {3}, {{2, 4, 36}}, 1e-8, 1e-3},
    {"add", f_add, NULL, 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, 1e-8, 1e-3},
    {"add (repeated, pos_embed)", f_add, NULL, 2, {3, 3}, {{2, 3, 5}, {1, 3, 5}}, 1e-8, 1e-3},
    {"add (bias row)", f_add, NULL, 2, {3, 1}, {{2, 3, 5}, {5}}, 1e-8, 1e-3},
    {"gelu", f_gelu, NULL, 1, {2}, {{3, 7}}, 1e-8, 1e-3},
    {"silu", f_silu, NULL, 1, {2}, {{3, 7}}, 1e-8, 1e-3},
    {"layernorm", f_layernorm, NULL, 1, {3}, {{2, 3, 7}}, 1e-7, 1e-3},
    {"modulate", f_modulate, NULL, 3, {3, 2, 2}, {{2, 3, 5}, {2, 5}, {2, 5}}, 1e-8, 1e-3},
    {"gated_add", f_gated_add, NULL, 3, {3, 2, 3}, {{2, 3, 5}, {2, 5}, {2, 3, 5}}, 1e-8, 1e-3},
    {"embedding", f_embedding, NULL, 1, {2}, {{4, 5}}, 1e-8, 1e-3},
    {"timestep_embedding", f_timestep, &dim8, 1, {1}, {{3}}, 1e-7, 1e-3},
    {"timestep_embedding (odd dim)", f_timestep, &dim7, 1, {1}, {{3}}, 1e-7, 1e-3},
    {"attention", f_attention, &heads2, 3, {3, 3, 3}, {{2, 3, 6}, {2, 7, 6}, {2, 7, 6}}, 1e-7, 1e-3},
    {"attention (1 token, 1 head)", f_attention, &heads1, 3, {3, 3, 3}, {{1, 1, 5}, {1, 1, 5}, {1, 1, 5}}, 1e-7, 1e-3},
    {"attention (key mask, 3 heads)", f_attention_mask, &heads3, 3, {3, 3, 3}, {{2, 3, 6}, {2, 7, 6}, {2, 7, 6}}, 1e-7, 1e-3},
    {"attention (cross, per-row caption masks, one empty)", f_attention_cross, &heads2, 3, {3, 3, 3}, {{2, 3, 6}, {2, 5, 6}, {2, 5, 6}}, 1e-7, 1e-3},
    {"qk_norm_rope (norm alone, head groups: 2 heads of 5)", f_norm, &group5, 2, {3, 1}, {{2, 3, 10}, {5}}, 1e-7, 1e-3},
    {"qk_norm_rope (norm alone, full width 7)", f_norm, &group7, 2, {2, 1}, {{3, 7}, {7}}, 1e-7, 1e-3},
    {"qk_norm_rope (norm alone, groups of 5, scale of the width)", f_norm, &group5, 2, {3, 1}, {{2, 3, 10}, {10}}, 1e-7, 1e-3},
    {"qk_norm_rope (turn alone, one row of angles, 3 heads)", f_turn, &rows1, 1, {3}, {{2, 3, 18}}, 1e-8, 1e-3},
    {"qk_norm_rope (turn alone, angles per image)", f_turn, &rows2, 1, {3}, {{2, 3, 18}}, 1e-8, 1e-3},
    {"qk_norm_rope (per-head norm, then the turn: 3 heads of 6)", f_norm_turn, &head6, 2, {3, 1}, {{2, 3, 18}, {6}}, 1e-7, 1e-3},
    {"qk_norm_rope (full-width norm, then the turn, angles per image)", f_norm_turn, &full18, 2, {3, 1}, {{2, 3, 18}, {18}}, 1e-7, 1e-3},
    {"qk_norm_rope (head groups, scale of the width, angles per image)", f_norm_turn, &head6_wide, 2, {3, 1}, {{2, 3, 18}, {18}}, 1e-7, 1e-3},
    {"slice_last", f_slice, NULL, 1, {3}, {{2, 3, 9}}, 1e-8, 1e-3},
    {"concat_last", f_concat, NULL, 2, {3, 3}, {{2, 3, 4}, {2, 3, 5}}, 1e-8, 1e-3},
    {"mse_loss (masked)", f_mse, NULL, 2, {2, 2}, {{2, 7}, {2, 7}}, 1e-8, 1e-3},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

START_TEST(op_gradcheck) {
    const OpCase *c = &cases[_i];
    Arena inputs = arena_create(1 << 20), scratch = arena_create(1 << 22);
    Tensor *in[4];
    for (int k = 0; k < c->n_in; k++) in[k] = randn(&inputs, 100 + k, 1.0, true, c->ndim[k], c->shape[k]);
    if (c->fn == f_timestep) rng_fill_uniform(in[0]->data, in[0]->size, 1, 9, 0, 0, 3); // t >= 0
    GradCheck r = gradcheck(c->fn, in, c->n_in, c->ctx, &scratch, EPS, 7);
    double tol = TOL(c->tol64, c->tol32);
    printf("gradcheck %-30s max rel err %.2e (tol %.0e, %s)\n", c->name, r.max_rel_err, tol, REAL_NAME);
    fflush(stdout);
    ck_assert_msg(r.max_rel_err <= tol, "%s: input %d element %zu: autograd %.10g vs numeric %.10g (rel err %.3g > %.0e)",
                  c->name, r.worst_input, r.worst_index, r.analytic, r.numeric, r.max_rel_err, tol);
    arena_destroy(&inputs);
    arena_destroy(&scratch);
}
END_TEST

static size_t shift_len(int G, int B, int D) { return (size_t)B * (G ? G : 1) * D; }

// ---- layernorm_modulate is modulate(layernorm(x)), keeping no normalized copy -------------------
// the same values and the same gradients of x, shift and scale, bit for bit (the same kernels run
// in the same order), for per-image vectors (B, D) and per-block ones (B, G, D); and the arena
// holds one n D less after it than after the two ops
START_TEST(layernorm_modulate_is_the_two_ops) {
    enum { B = 2, T = 6, D = 10 };
    for (int G = 0; G <= 3; G += 3) {
        Arena a = arena_create(1 << 20);
        real *got[2][4];
        size_t kept[2];
        for (int fused = 0; fused < 2; fused++) {
            Tape tp = tape_create(&a);
            Tensor *x = randn(&a, 1, 2, true, 3, (int[]){B, T, D});
            int vd = G ? 3 : 2, vs[3] = {B, G ? G : D, D};
            Tensor *shift = randn(&a, 2, 1, true, vd, vs), *scale = randn(&a, 3, 1, true, vd, vs);
            size_t before = a.used;
            Tensor *y = fused ? layernorm_modulate(&tp, x, shift, scale, 1e-6)
                              : modulate(&tp, layernorm(&tp, x, 1e-6), shift, scale);
            kept[fused] = a.used - before;
            real *dy = arena_alloc(&a, y->size * sizeof(real));
            rng_fill_normal(dy, y->size, 4, 4, 0, 1);
            backward_from(&tp, y, dy);
            got[fused][0] = y->data, got[fused][1] = x->grad, got[fused][2] = shift->grad, got[fused][3] = scale->grad;
            tape_free(&tp);
        }
        const size_t len[4] = {B * T * D, B * T * D, shift_len(G, B, D), shift_len(G, B, D)};
        for (int k = 0; k < 4; k++)
            ck_assert_msg(!memcmp(got[0][k], got[1][k], len[k] * sizeof(real)), "layernorm_modulate (G %d): %s differs", G,
                          (const char *[]){"output", "dx", "dshift", "dscale"}[k]);
        ck_assert_uint_ge(kept[0] - kept[1], (size_t)B * T * D * sizeof(real));
        arena_destroy(&a);
    }
    printf("layernorm_modulate against layernorm then modulate: the same bits, one n D less kept\n");
}
END_TEST

// ---- a linear in parts is the linear's column groups, stored apart ------------------------------
// linear_parts(x, w, b, 3) against one linear whose output slice_last cuts into three: each part
// the same values, and for the same output gradients the same dX, dW, dB (to the summation order:
// dX adds three products of a third of the columns); the parts views of one tensor, one after
// another, so that no copy was made
START_TEST(linear_parts_are_its_column_groups) {
    enum { N = 7, C = 5, O = 4 };
    Arena a = arena_create(1 << 20);
    real *got[2][4];
    Tensor *p[3];
    for (int split = 0; split < 2; split++) {
        Tape tp = tape_create(&a);
        Tensor *x = randn(&a, 1, 1, true, 2, (int[]){N, C}), *w = randn(&a, 2, 1, true, 2, (int[]){3 * O, C});
        Tensor *b = randn(&a, 3, 1, true, 1, (int[]){3 * O});
        if (split) linear_parts(&tp, x, w, b, 3, p);
        else {
            Tensor *y = linear(&tp, x, w, b);
            for (int j = 0; j < 3; j++) p[j] = slice_last(&tp, y, j * O, O);
        }
        real *out = arena_alloc(&a, 3 * N * O * sizeof(real));
        for (int j = 0; j < 3; j++) {
            memcpy(out + j * N * O, p[j]->data, N * O * sizeof(real));
            real *dy = arena_alloc(&a, N * O * sizeof(real));
            rng_fill_normal(dy, N * O, 4 + j, 4, 0, 1);
            memcpy(tensor_grad(&a, p[j]), dy, N * O * sizeof(real));
        }
        if (split)
            for (int j = 0; j < 3; j++) ck_assert(p[j]->base && p[j]->data == p[0]->data + (size_t)j * N * O);
        Tensor *sum = concat_last(&tp, p[0], concat_last(&tp, p[1], p[2])); // one output to start from
        real *ones = arena_alloc(&a, sum->size * sizeof(real));
        for (size_t i = 0; i < sum->size; i++) ones[i] = 0; // the parts' gradients are set above
        backward_from(&tp, sum, ones);
        got[split][0] = out, got[split][1] = x->grad, got[split][2] = w->grad, got[split][3] = b->grad;
        tape_free(&tp);
    }
    const size_t len[4] = {3 * N * O, N * C, 3 * O * C, 3 * O};
    double e = 0;
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < len[k]; i++) e = fmax(e, fabs(got[1][k][i] - got[0][k][i]) / (1 + fabs(got[0][k][i])));
    printf("linear in 3 parts against one linear sliced: worst %.1e (%s)\n", e, REAL_NAME);
    ck_assert_double_le(e, TOL(1e-14, 1e-6));
    arena_destroy(&a);
}
END_TEST

// ---- the 3-D patch embedding is a 3-D convolution of stride = kernel ------------------------------
// out[b, t, d] = bias[d] + sum_{c,a,i,j} w[d, c, a, i, j] x[b, c, f pt + a, y p + i, x p + j] for
// token t = (f, y, x) of the frame-major grid, computed here from that formula, pixel by pixel
START_TEST(patch_embed_is_a_3d_conv) {
    enum { B = 2, C = 2, F = 6, H = 3, W = 6, PT = 3, P = 3, D = 4 };
    Arena a = arena_create(1 << 20);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, false, 4, (int[]){B, C, F * H, W});
    Tensor *w = randn(&a, 2, 1, false, 5, (int[]){D, C, PT, P, P}), *b = randn(&a, 3, 1, false, 1, (int[]){D});
    int gf = F / PT, gh = H / P, gw = W / P, T = gf * gh * gw;
    Tensor *out = patch_embed(&tp, x, F, w, b, 0, T);
    double worst = 0;
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                int f = t / (gh * gw), y = t / gw % gh, xx = t % gw;
                double sum = b->data[d];
                for (int c = 0; c < C; c++)
                    for (int k = 0; k < PT; k++)
                        for (int i = 0; i < P; i++)
                            for (int j = 0; j < P; j++)
                                sum += w->data[(((d * C + c) * PT + k) * P + i) * P + j] *
                                       x->data[(((size_t)bi * C + c) * F + f * PT + k) * H * W +
                                               (y * P + i) * W + xx * P + j];
                worst = fmax(worst, fabs(sum - out->data[((size_t)bi * T + t) * D + d]));
            }
    printf("patch_embed vs a 3-D convolution: max abs err %.2e (%s)\n", worst, REAL_NAME);
    ck_assert_double_le(worst, TOL(1e-12, 1e-5));
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

// ---- a whole DiT-style block, checked along one random direction -------------------------------
// in: x (2,5,6), c (2,6), then (weight, bias) for adaLN (36), qkv (18), proj (6), fc1 (12), fc2 (6)
static Tensor *f_block(Tape *tp, Tensor **in, void *ctx) {
    (void)ctx;
    Tensor *x = in[0], *mod = linear(tp, silu(tp, in[1]), in[2], in[3]);
    int D = 6;
    Tensor *m[6];
    for (int i = 0; i < 6; i++) m[i] = slice_last(tp, mod, i * D, D);
    Tensor *h = modulate(tp, layernorm(tp, x, 1e-6), m[0], m[1]);
    Tensor *qkv = linear(tp, h, in[4], in[5]);
    Tensor *a = attention(tp, slice_last(tp, qkv, 0, D), slice_last(tp, qkv, D, D),
                          slice_last(tp, qkv, 2 * D, D), 2, NULL, NO_SEGMENTS);
    x = gated_add(tp, x, m[2], linear(tp, a, in[6], in[7]));
    h = modulate(tp, layernorm(tp, x, 1e-6), m[3], m[4]);
    h = linear(tp, gelu(tp, linear(tp, h, in[8], in[9])), in[10], in[11]);
    return gated_add(tp, x, m[5], h);
}

static Tensor **block_inputs(Arena *a) {
    static const int ndim[12] = {3, 2, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1};
    static const int shape[12][3] = {{2, 5, 6}, {2, 6}, {36, 6}, {36}, {18, 6}, {18},
                                     {6, 6},    {6},    {12, 6}, {12}, {6, 12},  {6}};
    Tensor **in = arena_alloc(a, 12 * sizeof(Tensor *));
    for (int k = 0; k < 12; k++) in[k] = randn(a, 200 + k, 0.5, true, ndim[k], shape[k]);
    return in;
}

START_TEST(block_direction_check) {
    Arena inputs = arena_create(1 << 20), scratch = arena_create(1 << 22);
    Tensor **in = block_inputs(&inputs);
    double step = TOL(1e-6, 1e-3); // finite-difference step along the direction
    double err = gradcheck_direction(f_block, in, 12, NULL, &scratch, step, 11);
    printf("direction check of a DiT block: rel err %.2e (%s)\n", err, REAL_NAME);
    ck_assert_double_le(err, TOL(1e-7, 1e-2));
    arena_destroy(&inputs);
    arena_destroy(&scratch);
}
END_TEST

// ---- a joint-attention DiT (SD3's MMDiT blocks), element by element -------------------------------
// Two images of 4 tokens, captions of 3 tokens (one with padding, one empty), 2 blocks of width 8
// over 2 heads, every weight random: the output's gradient with respect to the text streams'
// parameters (the last block's qkv and modulation only), the image streams' qkv, the word table
// and the patch embedding, against central differences. Block 0's text stream reaches the output
// only through block 1's keys and values, its gradients a hundredth of the output's scale: the
// differences' rounding (~1e-16 |f| / step) and curvature (~step^2) meet near 1e-7 at a step of
// 1e-5 (1e-6 gives 8e-7, 1e-4 9e-7).
typedef struct JointCase {
    DiT m;
    Tensor *img, *t;
    int64_t y[6];
} JointCase;

static Tensor *f_joint_dit(Tape *tp, Tensor **in, void *ctx) {
    (void)in; // the model's own parameters
    JointCase *c = ctx;
    return dit_forward(&c->m, tp, c->img, c->t, c->y, NULL);
}

START_TEST(joint_dit_gradcheck) {
    JointCase c = {.y = {5, 17, 0, 0, 0, 0}};
    DiTConfig cfg = {.input_size = 8, .patch_size = 4, .in_channels = 2, .hidden_size = 8, .depth = 2,
                     .num_heads = 2, .mlp_ratio = 2, .num_classes = 1, .text = true, .text_len = 3, .text_depth = 1,
                     .text_attn = DIT_TEXT_JOINT};
    dit_create(&c.m, &cfg);
    dit_init(&c.m, 3, 1);
    Arena inputs = arena_create(1 << 20), scratch = arena_create(1 << 24);
    Tensor *in[16];
    int n = 0;
    for (int i = 0; i < c.m.ps.n; i++) { // every weight random (adaLN-Zero would hide the streams)
        Tensor *w = c.m.ps.t[i];
        rng_fill_normal(w->data, w->size, 9, 100 + i, 0, 0.4);
        w->requires_grad = false;
        if (n < 16 && (strstr(w->name, ".txt.") || strstr(w->name, "attn.qkv.weight") ||
                       strstr(w->name, "text_embedder") || strstr(w->name, "x_embedder.proj.weight")))
            w->requires_grad = true, in[n++] = w;
    }
    c.img = randn(&inputs, 400, 1, false, 4, (int[]){2, 2, 8, 8});
    c.t = randn(&inputs, 401, 1, false, 1, (int[]){2});
    GradCheck r = gradcheck(f_joint_dit, in, n, &c, &scratch, TOL(1e-5, EPS), 13);
    printf("gradcheck of a joint-attention DiT (%d parameters): max rel err %.2e at %s (%s)\n", n,
           r.max_rel_err, in[r.worst_input]->name, REAL_NAME);
    ck_assert_int_ge(n, 12);
    ck_assert_double_le(r.max_rel_err, TOL(5e-7, 5e-2));
    arena_destroy(&inputs), arena_destroy(&scratch);
    dit_free(&c.m);
}
END_TEST

// ---- the checker must fail a wrong backward ------------------------------------------------------
static void gelu_wrong_bwd(Node *n) { // drops the x * d(tanh)/dx term of the true derivative
    real *dx = node_grad(n, 0);
    const real *x = n->in[0]->data;
    for (size_t i = 0; i < n->out->size; i++)
        dx[i] += n->out->grad[i] * (real)0.5 *
                 (1 + tanh((real)0.7978845608028654 * (x[i] + (real)0.044715 * x[i] * x[i] * x[i])));
}

static Tensor *f_gelu_wrong(Tape *tp, Tensor **in, void *c) {
    (void)c;
    Tensor *out = tensor_like(tp->arena, in[0]);
    gelu_forward(out->data, in[0]->data, in[0]->size);
    tape_record(tp, "gelu_wrong", gelu_wrong_bwd, out, 1, in[0]);
    return out;
}

START_TEST(checker_catches_wrong_backward) {
    Arena inputs = arena_create(1 << 20), scratch = arena_create(1 << 22);
    Tensor *x = randn(&inputs, 300, 1.0, true, 2, (int[]){3, 7});
    GradCheck r = gradcheck(f_gelu_wrong, &x, 1, NULL, &scratch, EPS, 7);
    printf("gradcheck of a deliberately wrong GELU backward: max rel err %.2e (must fail)\n", r.max_rel_err);
    ck_assert_double_gt(r.max_rel_err, 1e-1);
    double d = gradcheck_direction(f_gelu_wrong, &x, 1, NULL, &scratch, EPS, 7);
    ck_assert_double_gt(d, 1e-2);
    arena_destroy(&inputs);
    arena_destroy(&scratch);
}
END_TEST

// Masked keys get weight exactly 0, so their K and V receive exactly zero gradient.
START_TEST(masked_keys_get_zero_weight_and_gradient) {
    Arena a = arena_create(1 << 20);
    Tape tp = tape_create(&a);
    Tensor *q = randn(&a, 1, 1, true, 3, (int[]){2, 3, 6}), *k = randn(&a, 2, 1, true, 3, (int[]){2, 7, 6});
    Tensor *v = randn(&a, 3, 1, true, 3, (int[]){2, 7, 6});
    Tensor *out = attention(&tp, q, k, v, 3, key_mask, NO_SEGMENTS);
    real *dout = arena_alloc(&a, out->size * sizeof(real));
    rng_fill_normal(dout, out->size, 5, 5, 0, 1);
    backward_from(&tp, out, dout);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 7; j++)
            for (int d = 0; d < 6; d++) {
                size_t o = ((size_t)b * 7 + j) * 6 + d;
                if (!key_mask[j]) ck_assert(k->grad[o] == 0 && v->grad[o] == 0);
                else ck_assert(v->grad[o] != 0);
            }
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

// The linear op's GEMMs take their threads from OpenMP's pool: under `parallel if (0)` (a team of
// one) every GEMM started threads of its own and ended them (a step at 2 threads ran 1.1-1.4x
// slower). This program's own pthread_create stands before the C library's (an executable's
// definition comes first for its libraries: libgomp's calls land here too), so it counts every
// thread this process starts, whatever other processes do.
static atomic_int threads_started;
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*run)(void *), void *arg) {
    static int (*libc_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!libc_create) *(void **)&libc_create = dlsym(RTLD_NEXT, "pthread_create");
    atomic_fetch_add(&threads_started, 1);
    return libc_create(t, attr, run, arg);
}

static void *no_work(void *arg) { return arg; }

START_TEST(linear_takes_threads_from_the_pool) {
    int threads = omp_get_max_threads(); // put back after: the later tests run at the default
    omp_set_num_threads(2);
    Arena a = arena_create(64 << 20);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, false, 2, (int[]){512, 128}), *w = randn(&a, 2, 1, false, 2, (int[]){128, 128});
    Tensor *b = randn(&a, 3, 1, false, 1, (int[]){128});
    int at_first = atomic_load(&threads_started);
    linear(&tp, x, w, b); // the pool's threads start here
    int pool = atomic_load(&threads_started) - at_first, before = atomic_load(&threads_started);
    for (int i = 0; i < 40; i++) linear(&tp, x, w, b);
    int started = atomic_load(&threads_started) - before;
    tape_free(&tp);
    arena_destroy(&a);
    omp_set_num_threads(threads);
    // the counter counts: a thread started here is seen (the check cannot pass by seeing nothing)
    pthread_t t;
    pthread_create(&t, NULL, no_work, NULL);
    pthread_join(t, NULL);
    ck_assert_msg(atomic_load(&threads_started) == before + started + 1, "pthread_create is not counted");
    ck_assert_msg(started == 0, "40 linear calls started %d threads of their own (the first, %d)", started, pool);
}
END_TEST

// Every op tests/gradchecked.h lists as checked here has a row in the table above
START_TEST(every_listed_op_has_a_row) {
    for (size_t i = 0; i < sizeof gradchecked_ops / sizeof *gradchecked_ops; i++) {
        const char *op = gradchecked_ops[i];
        bool found = false;
        for (int c = 0; c < N_CASES && !found; c++)
            found = !strncmp(cases[c].name, op, strlen(op)) &&
                    (cases[c].name[strlen(op)] == 0 || cases[c].name[strlen(op)] == ' ');
        ck_assert_msg(found, "op %s is listed as gradient-checked but tests/test_ops.c has no row", op);
    }
}
END_TEST

Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("gradcheck");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, op_gradcheck, 0, N_CASES);
    tcase_add_test(tc, patch_embed_is_a_3d_conv);
    tcase_add_test(tc, linear_parts_are_its_column_groups);
    tcase_add_test(tc, layernorm_modulate_is_the_two_ops);
    tcase_add_test(tc, block_direction_check);
    tcase_add_test(tc, joint_dit_gradcheck);
    tcase_add_test(tc, every_listed_op_has_a_row);
    tcase_add_test(tc, checker_catches_wrong_backward);
    tcase_add_test(tc, masked_keys_get_zero_weight_and_gradient);
    tcase_add_test(tc, linear_takes_threads_from_the_pool);
    suite_add_tcase(s, tc);
    return s;
}
