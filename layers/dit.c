// dit.c: the DiT's forward (see dit.h), module by module as in the reference: patch embedding +
// pos_embed, timestep and label embedders, N adaLN-Zero blocks, the final layer; the text
// encoder, cross and joint attention, in-context tokens, packs and --recompute. The rest of the
// model: dit_config.c, dit_memory.c, dit_params.c, dit_positions.c, dit_packs.c.
#include "dit.h"
#include "common.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-6

// The image of token r of the shard in row b of a pack (ids as dit_pack_ids gives them for
// T_pad tokens; NULL for padding), and the token's index in it (the pack bugs choose the origin)
static const DiTImage *pack_token(const DiTPack *p, const int32_t *id, int T_pad,
                                  const DiTShard *sh, int b, int r, int *index) {
    int t = sh->t0 + r, i = id[(size_t)b * T_pad + t];
    if (i < 0) return NULL;
    const DiTImage *a = &p->img[i];
    int origin = sh->positions_from_shard && a->start < sh->t0 ? sh->t0 : sh->rope_pack_run_on ? 0 : a->start;
    *index = (sh->rope_local ? r : t) - origin;
    return a;
}

// pos (B, n, D): the sin-cos positions of tokens [t0, t0 + n) of the pack's rows, zero for padding
static void pack_positions(real *pos, const DiTPack *p, const int32_t *id, int T_pad,
                           const DiTShard *sh, const DiTConfig *c) {
    int D = c->hidden_size;
    for (int b = 0; b < p->B; b++)
        for (int r = 0; r < sh->n; r++) {
            real *e = pos + ((size_t)b * sh->n + r) * D;
            int u;
            const DiTImage *a = pack_token(p, id, T_pad, sh, b, r, &u);
            if (a) dit_position(e, c, dit_image_grid(a), u);
            else memset(e, 0, (size_t)D * sizeof(real));
        }
}

// The rotary angles (1 or B, lead + n, dh) of the shard's tokens: of their global index in the
// square image's grid, or of their index in their pack's image (padding: not turned); after `lead`
// rows that do not turn (in-context: the conditioning tokens, which have no place in the grid, as
// HunyuanVideo leaves its text tokens)
static Tensor *rope_table(Tape *tp, const DiT *m, const DiTShard *sh, const int32_t *id, int B, int lead) {
    const DiTConfig *c = &m->cfg;
    int dh = c->hidden_size / c->num_heads, rows = sh->pack ? B : 1, n = lead + sh->n;
    DiTGrid g = dit_grid(c); // the model's image or clip
    real *host = arena_alloc(arena_host(tp->arena), (size_t)rows * n * dh * sizeof(real));
    for (int b = 0; b < rows; b++)
        for (int r = -lead; r < sh->n; r++) {
            real *cs = host + ((size_t)b * n + lead + r) * dh;
            int u = sh->rope_local ? r : sh->t0 + r;
            const DiTImage *a = sh->pack && r >= 0 ? pack_token(sh->pack, id, sh->T_pad, sh, b, r, &u) : NULL;
            DiTGrid in = a ? dit_image_grid(a) : (DiTGrid){1, 1, 1};
            if (r < 0 || sh->pack) dit_rope_angles(cs, a ? u : -1, in.frames, in.rows, in.cols, dh);
            else dit_rope_angles(cs, u, g.frames, g.rows, g.cols, dh);
        }
    Tensor *angles = tensor_new(tp->arena, 3, rows, n, dh);
    copy_bytes(angles->data, host, angles->size * sizeof(real));
    return angles;
}

// ---- forward ----------------------------------------------------------------------------------
// What every attention takes: q, k and v as the tape's precision has them (layers/precision.c),
// rounded where they are (their producers, slices, a linear or QK-norm, do not read them back)
static void attention_inputs(Tape *tp, Tensor **q, Tensor **k, Tensor **v) {
    *q = to_bf16_here(tp, *q), *k = to_bf16_here(tp, *k), *v = to_bf16_here(tp, *v);
}

// The attention's output as its projection takes it: under bf16 a rounded copy (the attention's
// backward reads the float output), stored in 2 bytes; the all-to-all's, rounded for its return
// already, stored as it is
static Tensor *attention_output(Tape *tp, Tensor *o) { return to_bf16_stored(tp, to_bf16(tp, o)); }

// The MLP's first linear's output as GELU takes it: under bf16 rounded, as autocast's linear
// rounds its output, and stored in 2 bytes (GELU's backward reads it: unpacked a block at a time)
static Tensor *fc1_output(Tape *tp, Tensor *h) { return to_bf16_stored(tp, h); }

static Tensor *local_attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads,
                           const int32_t *seg, void *ctx) {
    (void)ctx;
    int n = q->shape[1];
    return attention(tp, q, k, v, heads, NULL, seg ? (Segments){seg, n, 0, 0} : NO_SEGMENTS);
}

// The images of a pack: seg (B, T_pad) the image of every token of the padded rows (-1:
// padding), for the attention; image_of (B, n) the image of each of the shard's tokens (padding:
// image 0), for the conditioning. NULL both without packs.
// rope (1 or B, n, dh): the rotary angles of the shard's tokens (rope_table), or NULL without
// rotary positions; made once for every block.
typedef struct PackTokens {
    const int32_t *seg;
    const int64_t *image_of;
    Tensor *rope;
} PackTokens;

// The adaLN vectors: per image (rows, K) as they are, or with packs each token's image's row
// (B, n, K), which modulate and gated_add take as one vector per token; under --exact as
// sh->spread gives them (a block's, spread by block_modulation already: 3-D, kept)
static Tensor *per_token(Tape *tp, Tensor *per_image, const PackTokens *pt, const DiTShard *sh,
                         int B, int n) {
    if (per_image->ndim == 3) return per_image;
    if (sh->spread) return sh->spread(tp, per_image, pt->image_of, B, n, sh->attend_ctx);
    if (!pt->image_of) return per_image;
    Tensor *e = embedding(tp, per_image, pt->image_of, B * n);
    return tensor_reshape(tp->arena, e, 3, (int[]){B, n, per_image->shape[1]});
}

// The adaLN modulation of block i from c_act = silu(c) (B,D), or with packs (images, D): m[0..5]
// shift, scale and gate of the attention, then of the MLP, one row per image (per_token spreads
// them over a pack's tokens where they are used). Under --exact they are spread here, the six at
// once: one exact reduction of their gradients over the group instead of six.
static void block_modulation(const DiTBlock *b, int i, Tape *tp, Tensor *c_act, const PackTokens *pt,
                             const DiTShard *sh, int B, int n, Tensor *m[6]) {
    int D = b->ada_w->shape[0] / 6;
    Tensor *mod = tape_name(tp, linear(tp, c_act, b->ada_w, b->ada_b), "blocks.%d.adaLN", i);
    if (sh->spread) mod = per_token(tp, mod, pt, sh, B, n);
    for (int j = 0; j < 6; j++) m[j] = slice_last(tp, mod, j * D, D);
}

// A block's two halves, x (B,n,D) -> x + gate * f(modulate(layernorm(x), shift, scale)), with
// m = {shift, scale, gate}: f the attention, or the MLP. Watched tapes see the tensors by name
// (blocks.<i>.<what>).
typedef Tensor *(*HalfFn)(const DiTBlock *b, int i, Tape *tp, Tensor *x, Tensor *const m[3],
                          int heads, const PackTokens *pt, const DiTShard *sh);

// modulate(layernorm(x), shift, scale), m = {shift, scale, gate}: a linear's input, so under bf16
// rounded and stored in 2 bytes (layernorm_modulate's backward reads x, not its output)
static Tensor *norm_modulate(Tape *tp, Tensor *x, Tensor *const m[3], const PackTokens *pt,
                             const DiTShard *sh) {
    int B = x->shape[0], n = x->shape[1];
    Tensor *shift = per_token(tp, m[0], pt, sh, B, n);
    return to_bf16_stored(tp, layernorm_modulate(tp, x, shift, per_token(tp, m[1], pt, sh, B, n), LN_EPS));
}

#define NAME(t, what) tape_name(tp, t, "blocks.%d.%s%s", i, b->stream, what)
// QK-norm, then the rotary positions (angles, or NULL), on q and k (B, n, D) of block i; in the
// token shard, before the layout moves the heads: a full-width norm sees every head of a token.
// One op each (qk_norm_rope): its output is named q_rope / k_rope when it turns (normed first
// with QK-norm), q_norm / k_norm when it only norms
static void qk_prepare(const DiTBlock *b, int i, Tape *tp, Tensor **q, Tensor **k, Tensor *angles,
                       int heads, const DiTShard *sh) {
    if (!b->q_norm && !angles) return;
    int group = !b->q_norm ? 0 : sh->qk_norm_parts ? (*q)->shape[2] / sh->qk_norm_parts : (int)b->q_norm->size;
    // a joint block's caption (no angles), whole on every rank: under --exact rows of their own
    int B = (*q)->shape[0], L = (*q)->shape[1], D = (*q)->shape[2];
    bool rows = *b->stream && tp->exact;
    Tensor *x[2] = {*q, *k}, *const scale[2] = {b->q_norm, b->k_norm};
    for (int j = 0; j < 2; j++) {
        if (rows) x[j] = tensor_reshape(tp->arena, x[j], 2, (int[]){B * L, D});
        x[j] = qk_norm_rope(tp, x[j], scale[j], group, DIT_QK_EPS, angles, heads);
        if (rows) x[j] = tensor_reshape(tp->arena, x[j], 3, (int[]){B, L, D});
    }
    *q = NAME(x[0], angles ? "attn.q_rope" : "attn.q_norm"), *k = NAME(x[1], angles ? "attn.k_rope" : "attn.k_norm");
}

static void token_linear_parts(Tape *tp, Tensor *x, Tensor *w, Tensor *b, int parts, Tensor **out);
static Tensor *token_linear(Tape *tp, Tensor *x, Tensor *w, Tensor *b);
// A stream's linear: the image tokens' (canonical blocks under --exact), or a joint block's
// caption's, which every rank holds whole (token_linear); its output in parts (linear_parts)
static void stream_linear_parts(const DiTBlock *b, Tape *tp, Tensor *x, Tensor *w, Tensor *bias, int parts,
                                Tensor **out) {
    if (*b->stream) token_linear_parts(tp, x, w, bias, parts, out);
    else linear_parts(tp, x, w, bias, parts, out);
}
static Tensor *stream_linear(const DiTBlock *b, Tape *tp, Tensor *x, Tensor *w, Tensor *bias) {
    Tensor *y;
    stream_linear_parts(b, tp, x, w, bias, 1, &y);
    return y;
}

// A stream's attention inputs, x (B,n,D) -> q, k, v (B,n,D): modulate(layernorm(x), shift, scale),
// its qkv, then QK-norm and the rotary angles (NULL: none)
static void stream_qkv(const DiTBlock *b, int i, Tape *tp, Tensor *x, Tensor *const m[3], Tensor *angles,
                       int heads, const PackTokens *pt, const DiTShard *sh, Tensor *qkv_out[3]) {
    stream_linear_parts(b, tp, NAME(norm_modulate(tp, x, m, pt, sh), "norm1"), b->qkv_w, b->qkv_b, 3, qkv_out);
    Tensor *q = NAME(qkv_out[0], "attn.q"), *k = NAME(qkv_out[1], "attn.k");
    NAME(qkv_out[2], "attn.v");
    qk_prepare(b, i, tp, &q, &k, angles, heads, sh);
    attention_inputs(tp, &q, &k, &qkv_out[2]);
    qkv_out[0] = q, qkv_out[1] = k;
}

// A stream's attention output a (B,n,D) -> x + gate * proj(a)
static Tensor *stream_out(const DiTBlock *b, int i, Tape *tp, Tensor *x, Tensor *gate, Tensor *a,
                          const PackTokens *pt, const DiTShard *sh) {
    a = NAME(stream_linear(b, tp, NAME(attention_output(tp, a), "attn.out"), b->proj_w, b->proj_b), "attn.proj");
    return NAME(gated_add(tp, x, per_token(tp, gate, pt, sh, x->shape[0], x->shape[1]), a), "residual1");
}

static Tensor *attention_half(const DiTBlock *b, int i, Tape *tp, Tensor *x, Tensor *const m[3],
                              int heads, const PackTokens *pt, const DiTShard *sh) {
    Tensor *qkv[3];
    stream_qkv(b, i, tp, x, m, pt->rope, heads, pt, sh, qkv);
    AttendFn attend = sh->attend ? sh->attend : local_attend;
    return stream_out(b, i, tp, x, m[2], attend(tp, qkv[0], qkv[1], qkv[2], heads, pt->seg, sh->attend_ctx), pt, sh);
}

static Tensor *mlp_half(const DiTBlock *b, int i, Tape *tp, Tensor *x, Tensor *const m[3], int heads,
                        const PackTokens *pt, const DiTShard *sh) {
    (void)heads;
    int B = x->shape[0], n = x->shape[1];
    Tensor *h = NAME(norm_modulate(tp, x, m, pt, sh), "norm2");
    h = NAME(to_bf16_stored(tp, gelu(tp, NAME(fc1_output(tp, stream_linear(b, tp, h, b->fc1_w, b->fc1_b)), "mlp.fc1"))), "mlp.gelu");
    h = NAME(stream_linear(b, tp, h, b->fc2_w, b->fc2_b), "mlp.fc2");
    return NAME(gated_add(tp, x, per_token(tp, m[2], pt, sh, B, n), h), "residual2");
}
// ---- text: the captions' encoder and the blocks' cross-attention -----------------------------
// A linear of tokens (B, T, C) that every rank of a group holds whole (a caption's): under --exact
// as B T rows of one, each its own block, so that each rank adds the weight gradients of its share
// of the rows (linear.c, as the conditioning's rows), the same bits for any rank count; else linear
static void token_linear_parts(Tape *tp, Tensor *x, Tensor *w, Tensor *b, int parts, Tensor **out) {
    if (!tp->exact) {
        linear_parts(tp, x, w, b, parts, out);
        return;
    }
    int B = x->shape[0], T = x->shape[1];
    linear_parts(tp, tensor_reshape(tp->arena, x, 2, (int[]){B * T, x->shape[2]}), w, b, parts, out);
    for (int j = 0; j < parts; j++) out[j] = tensor_reshape(tp->arena, out[j], 3, (int[]){B, T, w->shape[0] / parts});
}
static Tensor *token_linear(Tape *tp, Tensor *x, Tensor *w, Tensor *b) {
    Tensor *y;
    token_linear_parts(tp, x, w, b, 1, &y);
    return y;
}

typedef struct TextTokens {
    Tensor *h;          // (rows, K, D): the encoded captions, whole on every rank: an image's
                        // (K = L), or with packs each row's images' one after another (K = its
                        // slots x L)
    const int32_t *seg; // (rows, n + K): the cross-attention's images (kernels/segments.h): the
                        // shard's n tokens', then each caption word's (its image's; padding -1)
    const int32_t *words; // (images, L): the caption's words 0 and its padding -1
    const int32_t *joint; // joint attention's images of the K caption and T_pad image tokens
                          // (B rows, kernels/segments.h's joint_image)
    const int64_t *image_of; // packs: (B, K) the image of each caption token (an empty slot's: 0);
                             // else NULL
} TextTokens;

// PixArt-alpha's cross-attention after the self-attention, x (B, n, D) this rank's tokens:
// x + proj(attention(q(x), k(text), v(text))), text padding masked. The caption's keys and values
// come from the encoded captions that every rank holds whole: no collective in any layout, and
// each rank's dK, dV hold its own queries' share, summed over the group with the parameters'
// gradients (once).
// Under --exact the queries go in canonical blocks and the caption's dK and dV are summed exactly
// over the group (sh->sum_group), so that every rank holds all of them, and a caption's tokens are
// rows of their own to the linears (token_linear).
static Tensor *cross_half(const DiTBlock *b, int i, Tape *tp, Tensor *x, int heads, const TextTokens *tt,
                          const DiTShard *sh) {
    int n = x->shape[1], L = tt->h->shape[1];
    Tensor *q = NAME(linear(tp, x, b->xq_w, b->xq_b), "cross.q");
    Tensor *kv[2];
    token_linear_parts(tp, tt->h, b->xkv_w, b->xkv_b, 2, kv);
    Tensor *k = NAME(kv[0], "cross.k"), *v = NAME(kv[1], "cross.v");
    attention_inputs(tp, &q, &k, &v);
    Segments seg = {tt->seg, n + L, 0, n};
    if (sh->cross_kv_copies > 1) { // the cross-kv-all-to-all bug: every rank's copy of the caption
        int U = sh->cross_kv_copies, B = x->shape[0];
        int32_t *ids = arena_alloc(arena_host(tp->arena), (size_t)B * (n + U * L) * sizeof(int32_t));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < n + U * L; j++) // the queries, then each copy's words and padding
                ids[(size_t)b * (n + U * L) + j] = tt->seg[(size_t)b * (n + L) + (j < n ? j : n + (j - n) % L)];
        Tensor *k1 = k, *v1 = v;
        for (int c = 1; c < U; c++) k = dit_join_tokens(tp, k, k1), v = dit_join_tokens(tp, v, v1);
        seg = (Segments){ids, n + U * L, 0, n};
    }
    Tensor *a = NAME(attention_output(tp, tp->exact ? attention_whole_kv_exact(tp, q, k, v, heads, seg, sh->sum_group, sh->attend_ctx)
                                           : attention(tp, q, k, v, heads, NULL, seg)), "cross.out");
    return NAME(add(tp, x, NAME(linear(tp, a, b->xproj_w, b->xproj_b), "cross.proj")), "cross.residual");
}
#undef NAME

Segments dit_joint_segments(Arena *a, const int32_t *ids, int B, int R, int T, int q0, int nq, int copies,
                            int k0, int nk) {
    int Q = R + nq, W = Q + copies * (R + nk);
    int32_t *id = arena_alloc(arena_host(a), (size_t)B * W * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < W; j++) {
            int at = j < Q ? j : (j - Q) % (R + nk), set = j < Q ? 0 : (j - Q) / (R + nk);
            int x = at < R ? at : R + (j < Q ? q0 : k0 + set * nk) + at - R; // the token's place in the row
            id[(size_t)b * W + j] = joint_image(ids, R, T, b, x, j < Q);
        }
    return (Segments){id, W, 0, Q};
}

static Tensor *checkpoint(const DiT *m, const DiTBlock *b, int i, HalfFn half, Tape *tp, Tensor *x,
                          Tensor *const mod[3], const PackTokens *pt, const DiTShard *sh);

// Joint block i (SD3's MMDiT): x (B, n, D) this rank's image tokens, *ctx (B, L, D) the caption's,
// whole on every rank. Each stream its own modulation and qkv; one attention of the queries
// [caption; image] over the keys [caption; image] (tt->joint: each token sees its image's, the
// caption's padding masked; with packs, each row's captions one after another, *ctx (B, K, D), each
// modulated by its image's vectors), by the layout's attend with the caption as the tokens every
// rank holds in front (parallel/layouts/context.h); then each
// stream its own projection and MLP. The last block's caption output is dropped (*ctx stays; only
// its keys and values were used). The streams stay apart between blocks, so that backward hands
// each residual's gradient buffer down its stream. Under --recompute with gradients each stream's
// MLP half is a checkpoint; the joint attention keeps its tensors.
static Tensor *joint_block_forward(const DiT *m, int i, Tape *tp, Tensor *x, Tensor **ctx, Tensor *c_act,
                                   const PackTokens *pt, const DiTShard *sh, const TextTokens *tt) {
    const DiTBlock *b = &m->blocks[i], *bt = &m->txt[i];
    int B = x->shape[0], n = x->shape[1], D = x->shape[2], L = (*ctx)->shape[1];
    int heads = m->cfg.num_heads, rows = bt->proj_w ? 6 : 2;
    PackTokens cap = {.image_of = tt->image_of};
    // the caption's stream: its modulation one vector an image (packs: gathered for each of its
    // tokens, cap), also under --exact
    DiTShard tsh = *sh;
    tsh.spread = NULL;
    Tensor *mod[6], *tmod[6], *xi[3], *xt[3], *qkv[3];
    block_modulation(b, i, tp, c_act, pt, sh, B, n, mod);
    Tensor *tm = tape_name(tp, linear(tp, c_act, bt->ada_w, bt->ada_b), "blocks.%d.txt.adaLN", i);
    for (int j = 0; j < rows; j++) tmod[j] = slice_last(tp, tm, j * D, D);
    stream_qkv(b, i, tp, x, mod, pt->rope, heads, pt, sh, xi);
    stream_qkv(bt, i, tp, *ctx, tmod, NULL, heads, &cap, &tsh, xt);
    for (int j = 0; j < 3; j++) qkv[j] = dit_join_tokens(tp, xt[j], xi[j]);
    Tensor *o = sh->attend ? sh->attend(tp, qkv[0], qkv[1], qkv[2], heads, tt->joint, sh->attend_ctx)
                           : attention(tp, qkv[0], qkv[1], qkv[2], heads, NULL,
                                       dit_joint_segments(tp->arena, tt->joint, B, L, sh->T_pad, sh->t0, n, 1, sh->t0, n));
    bool again = sh->recompute && tp->grad_enabled;
    x = stream_out(b, i, tp, x, mod[2], dit_tokens_of(tp, o, L, n), pt, sh);
    x = again ? checkpoint(m, b, i, mlp_half, tp, x, mod + 3, pt, sh) : mlp_half(b, i, tp, x, mod + 3, heads, pt, sh);
    if (rows == 6) {
        Tensor *c = stream_out(bt, i, tp, *ctx, tmod[2], dit_tokens_of(tp, o, 0, L), &cap, &tsh);
        *ctx = again ? checkpoint(m, bt, i, mlp_half, tp, c, tmod + 3, &cap, &tsh)
                     : mlp_half(bt, i, tp, c, tmod + 3, heads, &cap, &tsh);
    }
    return x;
}

// ---- --recompute: each half of a block as one tape node that keeps its inputs and output only --
typedef struct Checkpoint {
    const DiT *m;
    const DiTBlock *b; // block `block`'s stream: its image stream, or a joint block's text stream
    int block;
    HalfFn half;
    PackTokens pt; // its buffers lie below every block's
    DiTShard sh;
    TapeWatch watch; // the outer tape's (probe --dump-tape), which sees the forward once only
    void *watch_ctx;
} Checkpoint;

static void watch_grads(Tape *tp, Tensor *t, bool grad, void *ctx) {
    const Checkpoint *k = ctx;
    if (grad) k->watch(tp, t, grad, k->watch_ctx);
}

// Runs the half again on leaves that share the inputs' data and gradient buffers, then its
// backward from the output's gradient: the same kernels in the same order as without --recompute,
// so every gradient gets the same bits. x's gradient takes over the output's buffer as the
// residual add does without recompute; one that starts elsewhere is kept below the half's
// intermediates, which are freed. The modulation's gradients (a row per image) start before.
static void checkpoint_bwd(Node *nd) {
    const Checkpoint *k = nd->ptr;
    Arena *a = nd->arena;
    Tensor in[4], *m[3] = {&in[1], &in[2], &in[3]};
    for (int j = 0; j < 4; j++) {
        if (j) node_grad(nd, j);
        in[j] = *nd->in[j];
        in[j].got_grad = false;
    }
    size_t mark = arena_mark(a);
    Tape sub = tape_create(a);
    sub.exact = nd->exact;
    sub.bf16 = nd->iarg[0], sub.bf16_grads = nd->iarg[1];
    if (k->watch) sub.watch = watch_grads, sub.watch_ctx = (void *)k;
    Tensor *y = k->half(k->b, k->block, &sub, &in[0], m, k->m->cfg.num_heads,
                        &k->pt, &k->sh);
    y->grad = nd->out->grad;
    backward_given(&sub, y);
    tape_free(&sub);
    Tensor *x = &in[0];
    if (x->grad && (uint8_t *)x->grad >= a->base + mark) // a buffer of its own: kept
        x->grad = arena_keep(a, mark, x->grad, x->size * sizeof(real));
    else arena_release(a, mark);
    for (int j = 0; j < 4; j++) {
        nd->in[j]->grad = in[j].grad;
        nd->in[j]->got_grad |= in[j].got_grad;
    }
}

// The half's forward with gradients (so that its values are those of a run without recompute),
// its tape nodes and intermediates then dropped, and one node that runs it again in backward
static Tensor *checkpoint(const DiT *m, const DiTBlock *b, int i, HalfFn half, Tape *tp, Tensor *x,
                          Tensor *const mod[3], const PackTokens *pt, const DiTShard *sh) {
    CHECK(!x->base && !mod[0]->base && !mod[1]->base && !mod[2]->base,
          "--recompute: a block's inputs must be whole tensors");
    size_t mark = arena_mark(tp->arena);
    int nodes = tp->n;
    Tensor *y = half(b, i, tp, x, mod, m->cfg.num_heads, pt, sh);
    tp->n = nodes;
    y = tensor_keep(tp->arena, y, mark);
    y->name = NULL; // watched already; its gradient is watched as the run again's output
    Node *nd = tape_record(tp, "half block (recomputed)", checkpoint_bwd, y, 4, x, mod[0], mod[1], mod[2]);
    if (!nd) return y;
    Checkpoint *k = arena_alloc(arena_host(tp->arena), sizeof *k);
    *k = (Checkpoint){m, b, i, half, *pt, *sh, tp->watch, tp->watch_ctx};
    nd->ptr = k;
    nd->iarg[0] = tp->bf16, nd->iarg[1] = tp->bf16_grads; // the run again's precision
    return y;
}

// Block i: its modulation, the attention half, with text the cross-attention, the MLP half; under
// --recompute with gradients each half is a checkpoint (the cross-attention keeps its tensors)
static Tensor *block_forward(const DiT *m, int i, Tape *tp, Tensor *x, Tensor *c_act,
                             const PackTokens *pt, const DiTShard *sh, const TextTokens *tt) {
    Tensor *mod[6];
    block_modulation(&m->blocks[i], i, tp, c_act, pt, sh, x->shape[0], x->shape[1], mod);
    bool again = sh->recompute && tp->grad_enabled;
    x = again ? checkpoint(m, &m->blocks[i], i, attention_half, tp, x, mod, pt, sh)
              : attention_half(&m->blocks[i], i, tp, x, mod, m->cfg.num_heads, pt, sh);
    if (tt) x = cross_half(&m->blocks[i], i, tp, x, m->cfg.num_heads, tt, sh);
    return again ? checkpoint(m, &m->blocks[i], i, mlp_half, tp, x, mod + 3, pt, sh)
                 : mlp_half(&m->blocks[i], i, tp, x, mod + 3, m->cfg.num_heads, pt, sh);
}

// A plain pre-norm transformer block, x (B, T, D): an in-context block (the conditioning tokens
// first; prefix "blocks"; QK-norm and rotary angles as the model's), or a layer of the text
// encoder (angles NULL; its linears token_linear's). Names as in block_forward.
static Tensor *plain_block_forward(const DiTBlock *b, const char *prefix, int i, Tape *tp, Tensor *x,
                                   int heads, AttendFn attend, const int32_t *seg, void *ctx,
                                   Tensor *angles, const DiTShard *sh) {
#define NAME(t, what) tape_name(tp, t, "%s.%d.%s", prefix, i, what)
    // the norms' and GELU's outputs feed linears only: under bf16 rounded and stored in 2 bytes
    Tensor *qkv[3];
    token_linear_parts(tp, NAME(to_bf16_stored(tp, layernorm(tp, x, LN_EPS)), "norm1"), b->qkv_w, b->qkv_b, 3, qkv);
    Tensor *q = NAME(qkv[0], "attn.q"), *k = NAME(qkv[1], "attn.k"), *v = NAME(qkv[2], "attn.v");
    qk_prepare(b, i, tp, &q, &k, angles, heads, sh);
    attention_inputs(tp, &q, &k, &v);
    Tensor *a = NAME(attention_output(tp, attend(tp, q, k, v, heads, seg, ctx)), "attn.out");
    x = NAME(add(tp, x, NAME(token_linear(tp, a, b->proj_w, b->proj_b), "attn.proj")), "residual1");
    Tensor *h = NAME(to_bf16_stored(tp, layernorm(tp, x, LN_EPS)), "norm2");
    h = NAME(to_bf16_stored(tp, gelu(tp, NAME(fc1_output(tp, token_linear(tp, h, b->fc1_w, b->fc1_b)), "mlp.fc1"))), "mlp.gelu");
    h = NAME(token_linear(tp, h, b->fc2_w, b->fc2_b), "mlp.fc2");
    return NAME(add(tp, x, h), "residual2");
#undef NAME
}

// x (B, a, D) and y (B, b, D) -> (B, a + b, D): x's tokens, then y's
Tensor *dit_join_tokens(Tape *tp, Tensor *x, Tensor *y) {
    int B = x->shape[0], D = x->shape[2], a = x->shape[1], b = y->shape[1];
    Tensor *xy = concat_last(tp, tensor_reshape(tp->arena, x, 2, (int[]){B, a * D}),
                             tensor_reshape(tp->arena, y, 2, (int[]){B, b * D}));
    return tensor_reshape(tp->arena, xy, 3, (int[]){B, a + b, D});
}

// x (B, T, D) -> its tokens [first, first + n) (B, n, D)
Tensor *dit_tokens_of(Tape *tp, Tensor *x, int first, int n) {
    int B = x->shape[0], T = x->shape[1], D = x->shape[2];
    Tensor *rows = slice_last(tp, tensor_reshape(tp->arena, x, 2, (int[]){B, T * D}), first * D, n * D);
    return tensor_reshape(tp->arena, rows, 3, (int[]){B, n, D});
}

// The in-context DiT after the embeddings: x (B, n, D), temb and yemb (B, D) -> tokens
static Tensor *in_context_forward(DiT *m, Tape *tp, Tensor *x, Tensor *temb, Tensor *yemb,
                                  Tensor *angles, const DiTShard *sh) {
    const DiTConfig *c = &m->cfg;
    int B = x->shape[0], n = x->shape[1], D = c->hidden_size;
    Tensor *cond = tape_name(tp, concat_last(tp, temb, yemb), "c");
    x = dit_join_tokens(tp, tensor_reshape(tp->arena, cond, 3, (int[]){B, DIT_CONTEXT_TOKENS, D}), x);
    for (int i = 0; i < c->depth; i++) {
        size_t mark = arena_mark(tp->arena);
        x = ps_open(&m->ps, tp, dit_block_unit(i), x);
        x = plain_block_forward(&m->blocks[i], "blocks", i, tp, x, c->num_heads,
                                sh->attend ? sh->attend : local_attend, NULL, sh->attend_ctx, angles, sh);
        x = ps_close(&m->ps, tp, dit_block_unit(i), x);
        if (!tp->grad_enabled) x = tensor_keep(tp->arena, x, mark); // free the block's intermediates
    }
    x = tape_name(tp, to_bf16_stored(tp, layernorm(tp, dit_tokens_of(tp, x, DIT_CONTEXT_TOKENS, n), LN_EPS)), "final_layer.norm");
    return tape_name(tp, linear(tp, x, m->f_w, m->f_b), "final_layer.out");
}

// Packs: each row's captions one after another, (B, slots L, D) from h (images, L, D), slots the
// most images of a row (a shorter row's last slots hold image 0's, masked); seg as TextTokens says,
// the shard's tokens' images from the pack's ids (T_pad a row); image_of each slot's image (B, K)
static Tensor *pack_captions(Tape *tp, Tensor *h, const DiTPack *pk, const int32_t *id, int T_pad,
                             int t0, int n, const int32_t *words, int32_t **seg, int64_t **image_of) {
    int L = h->shape[1], D = h->shape[2], slots = 1, B = pk->B;
    int *used = arena_alloc(arena_host(tp->arena), (size_t)B * sizeof(int));
    memset(used, 0, (size_t)B * sizeof(int));
    for (int i = 0; i < pk->n; i++) used[pk->img[i].row]++;
    for (int b = 0; b < B; b++) slots = used[b] > slots ? used[b] : slots;
    int K = slots * L;
    int64_t *from = arena_alloc(arena_host(tp->arena), (size_t)B * K * sizeof(int64_t));
    *image_of = arena_alloc(arena_host(tp->arena), (size_t)B * K * sizeof(int64_t));
    *seg = arena_alloc(arena_host(tp->arena), (size_t)B * (n + K) * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int32_t *row = *seg + (size_t)b * (n + K);
        for (int j = 0; j < n; j++) row[j] = id[(size_t)b * T_pad + t0 + j];
        for (int j = 0; j < K; j++) from[(size_t)b * K + j] = 0, (*image_of)[(size_t)b * K + j] = 0, row[n + j] = -1;
    }
    memset(used, 0, (size_t)B * sizeof(int));
    for (int i = 0; i < pk->n; i++) { // image i's caption into its row's next slot
        int b = pk->img[i].row, at = used[b]++ * L;
        for (int w = 0; w < L; w++) {
            from[(size_t)b * K + at + w] = (int64_t)i * L + w, (*image_of)[(size_t)b * K + at + w] = i;
            (*seg)[(size_t)b * (n + K) + n + at + w] = words[(size_t)i * L + w] ? -1 : i;
        }
    }
    Tensor *flat = tensor_reshape(tp->arena, h, 2, (int[]){pk->n * L, D});
    return tensor_reshape(tp->arena, embedding(tp, flat, from, B * K), 3, (int[]){B, K, D});
}

// ids (images, L) -> TextTokens of a shard of n tokens: each word's embedding plus the position of
// its place (dit_caption_positions), then text_depth plain blocks whose attention
// sees the caption's words only (a padding token's query sees padding only; its output is never
// read). Every rank of a sequence group runs it on the whole caption. Packs (pk, the pack's ids
// id): each row's captions (pack_captions). Joint attention: their images (TextTokens.joint).
static TextTokens text_tokens(const DiT *m, Tape *tp, const int64_t *ids, int images, const DiTShard *sh,
                              const int32_t *id) {
    const DiTConfig *c = &m->cfg;
    int L = c->text_len, D = c->hidden_size, n = sh->n;
    Arena *host = arena_host(tp->arena);
    int32_t *words = arena_alloc(host, (size_t)images * L * sizeof(int32_t));
    int32_t *seg = arena_alloc(host, (size_t)images * (n + L) * sizeof(int32_t));
    for (int b = 0; b < images; b++)
        for (int j = 0; j < n + L; j++) {
            int32_t w = j < n ? 0 : ids[(size_t)b * L + j - n] ? 0 : -1;
            seg[(size_t)b * (n + L) + j] = w;
            if (j >= n) words[(size_t)b * L + j - n] = w;
        }
    real *at = arena_alloc(host, (size_t)L * D * sizeof(real));
    dit_caption_positions(at, L, D);
    Tensor *pos = tensor_new(tp->arena, 3, 1, L, D);
    copy_bytes(pos->data, at, pos->size * sizeof(real));
    Tensor *e = tensor_reshape(tp->arena, embedding(tp, m->w_table, ids, images * L), 3, (int[]){images, L, D});
    Tensor *h = tape_name(tp, add(tp, e, pos), "text_embedder");
    for (int i = 0; i < c->text_depth; i++)
        h = plain_block_forward(&m->text_layers[i], "text_encoder.layers", i, tp, h, c->num_heads,
                                local_attend, words, NULL, NULL, NULL);
    h = tape_name(tp, h, "text_encoder");
    int64_t *image_of = NULL;
    if (sh->pack) h = pack_captions(tp, h, sh->pack, id, sh->T_pad, sh->t0, n, words, &seg, &image_of);
    if (c->text_attn != DIT_TEXT_JOINT) return (TextTokens){h, seg, words, NULL, image_of};
    int B = h->shape[0], K = h->shape[1], T = sh->T_pad, W = 2 * K + T;
    int32_t *joint = arena_alloc(host, (size_t)B * W * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int x = 0; x < W; x++) { // keys, queries, image tokens (without packs: a word 0, the rest 0)
            int32_t *to = joint + (size_t)b * W + x;
            if (!sh->pack) *to = x < K ? words[(size_t)b * L + x] : 0;
            else if (x < K) *to = seg[(size_t)b * (n + K) + n + x];
            else *to = x < 2 * K ? (int32_t)image_of[(size_t)b * K + x - K] : id[(size_t)b * T + x - 2 * K];
        }
    return (TextTokens){h, seg, words, joint, image_of};
}

static DiTShard whole(const DiT *m, const DiTShard *sh) {
    DiTShard w = sh ? *sh : (DiTShard){.t0 = 0, .n = dit_tokens(&m->cfg)};
    if (!w.T_pad) w.T_pad = w.t0 + w.n;
    return w;
}

// the tokens of a row: the pack's, or the square image's
static int row_tokens(const DiT *m, const DiTShard *sh) {
    return sh->pack ? sh->pack->T : dit_tokens(&m->cfg);
}

// the input image batch, or the packs' strip, must be (B, C, ...) of the model and the shard
static void check_images(const DiT *m, const DiTShard *sh, Tensor *img, int C, const char *what) {
    const DiTConfig *c = &m->cfg;
    int B = img->shape[0];
    if (!sh->pack) {
        tensor_check_shape(img, what, 4, (int[]){B, C, dit_frames(c) * c->input_size, c->input_size});
        return;
    }
    char err[256];
    const char *why = dit_pack_error(sh->pack, err, sizeof err);
    CHECK(!why, "%s", why);
    tensor_check_shape(img, what, 4, (int[]){sh->pack->B, C, dit_patch_t(c) * c->patch_size, sh->pack->T * c->patch_size});
}

// the frames of the model's input: a clip's, or a pack strip's pt
static int input_frames(const DiTConfig *c, const DiTShard *sh) {
    return sh->pack ? dit_patch_t(c) : dit_frames(c);
}

// the pack's image ids of all T_pad tokens, in the host side of the tape's arena
static int32_t *pack_ids(Tape *tp, const DiTShard *sh) {
    int32_t *id = arena_alloc(arena_host(tp->arena), (size_t)sh->pack->B * sh->T_pad * sizeof(int32_t));
    dit_pack_ids(sh->pack, id, sh->T_pad);
    return id;
}

Tensor *dit_forward(DiT *m, Tape *tp, Tensor *img, Tensor *t, const int64_t *y,
                    const DiTShard *shard) {
    const DiTConfig *c = &m->cfg;
    DiTShard sh = whole(m, shard);
    int B = img->shape[0], D = c->hidden_size, T = row_tokens(m, &sh);
    int images = sh.pack ? sh.pack->n : B; // what the conditioning is per
    check_images(m, &sh, img, c->in_channels, "the input image batch");
    tensor_check_shape(t, "the timestep batch", 1, (int[]){images});
    // x = patch_embed(img) + pos_embed, on this shard's tokens (padding rows get no position)
    Tensor *x = patch_embed(tp, img, input_frames(c, &sh), m->x_w, m->x_b, sh.t0, sh.n);
    PackTokens pt = {0};
    bool table = c->pos == DIT_POS_SINCOS;
    Tensor *pos = NULL;
    int32_t *id = sh.pack ? pack_ids(tp, &sh) : NULL;
    if (sh.pack) { // each image's own grid
        if (table) {
            real *host = arena_alloc(arena_host(tp->arena), (size_t)B * sh.n * D * sizeof(real));
            pack_positions(host, sh.pack, id, sh.T_pad, &sh, c);
            pos = tensor_new(tp->arena, 3, B, sh.n, D);
            copy_bytes(pos->data, host, pos->size * sizeof(real));
        }
        int64_t *image_of = arena_alloc(arena_host(tp->arena), (size_t)B * sh.n * sizeof(int64_t));
        for (int b = 0; b < B; b++)
            for (int r = 0; r < sh.n; r++) {
                int32_t i = id[(size_t)b * sh.T_pad + sh.t0 + r];
                image_of[(size_t)b * sh.n + r] = i < 0 ? 0 : i;
            }
        // up once for every block
        pt = (PackTokens){op_input(tp->arena, id, (size_t)B * sh.T_pad * sizeof(int32_t)), image_of, NULL};
    } else if (table) {
        pos = tensor_new(tp->arena, 3, 1, sh.n, D);
        int rows = sh.t0 >= T ? 0 : T - sh.t0 < sh.n ? T - sh.t0 : sh.n; // the shard's real tokens
        size_t first = sh.first_positions ? 0 : (size_t)sh.t0;
        copy_bytes(pos->data, m->pos_embed.data + first * D, (size_t)rows * D * sizeof(real));
    }
    if (table) x = add(tp, x, pos);
    else pt.rope = rope_table(tp, m, &sh, id, B, c->in_context ? DIT_CONTEXT_TOKENS : 0);
    x = tape_name(tp, x, "x_embedder");
    // c = t_embedder(t) + y_embedder(y)
    Tensor *temb = linear(tp, timestep_embedding(tp, t, DIT_FREQ_DIM), m->t0_w, m->t0_b);
    temb = linear(tp, silu(tp, temb), m->t2_w, m->t2_b);
    if (c->in_context)
        return in_context_forward(m, tp, x, temb, embedding(tp, m->y_table, y, images), pt.rope, &sh);
    TextTokens tt = {0};
    bool joint = c->text && c->text_attn == DIT_TEXT_JOINT;
    if (c->text) tt = text_tokens(m, tp, y, images, &sh, id);
    Tensor *ctx = tt.h; // joint: the caption's stream
    Tensor *c_act = silu(tp, tape_name(tp, c->text ? temb : add(tp, temb, embedding(tp, m->y_table, y, images)), "c"));
    // without gradients each block's output replaces its intermediates and the block before's output
    size_t mark = arena_mark(tp->arena);
    for (int i = 0; i < c->depth; i++) {
        x = ps_open(&m->ps, tp, dit_block_unit(i), x);
        x = ps_close(&m->ps, tp, dit_block_unit(i),
                     joint ? joint_block_forward(m, i, tp, x, &ctx, c_act, &pt, &sh, &tt)
                           : block_forward(m, i, tp, x, c_act, &pt, &sh, c->text ? &tt : NULL));
        if (!tp->grad_enabled) x = tensor_keep(tp->arena, x, mark);
        if (!tp->grad_enabled && joint) ctx = tensor_keep(tp->arena, ctx, arena_mark(tp->arena));
    }
    // final layer
    Tensor *mod = tape_name(tp, linear(tp, c_act, m->f_ada_w, m->f_ada_b), "final_layer.adaLN");
    mod = per_token(tp, mod, &pt, &sh, B, sh.n);
    x = to_bf16_stored(tp, layernorm_modulate(tp, x, slice_last(tp, mod, 0, D), slice_last(tp, mod, D, D), LN_EPS));
    return tape_name(tp, linear(tp, tape_name(tp, x, "final_layer.norm"), m->f_w, m->f_b), "final_layer.out");
}

Tensor *dit_loss(DiT *m, Tape *tp, Tensor *out, Tensor *target, const DiTShard *shard) {
    const DiTConfig *c = &m->cfg;
    DiTShard sh = whole(m, shard);
    int B = out->shape[0], pv = dit_patch_values(c), Co = dit_out_channels(c), T = row_tokens(m, &sh);
    int Ct = target->ndim == 4 ? target->shape[1] : 0;
    CHECK(Ct >= 1 && Ct <= Co, "the target batch must have 1 to %d channels", Co);
    check_images(m, &sh, target, Ct, "the target batch");
    if (Ct < Co) { // rows are laid out (a, i, j, c): keep the first Ct of every pixel's channels
        Tensor *px = tensor_reshape(tp->arena, out, 2, (int[]){B * sh.n * pv, Co});
        out = tensor_reshape(tp->arena, slice_last(tp, px, 0, Ct), 3, (int[]){B, sh.n, pv * Ct});
    }
    Tensor *tgt = patchify(tp, target, input_frames(c, &sh), dit_patch_t(c), c->patch_size, sh.t0, sh.n, true);
    size_t row = (size_t)pv * Ct;
    uint8_t *mask = arena_alloc(arena_host(tp->arena), out->size); // real tokens only
    const int32_t *id = sh.pack ? pack_ids(tp, &sh) : NULL;
    for (int b = 0; b < B; b++)
        for (int r = 0; r < sh.n && sh.t0 + r < T; r++)
            memset(mask + ((size_t)b * sh.n + r) * row, !id || id[(size_t)b * sh.T_pad + sh.t0 + r] >= 0, row);
    double count = sh.pack ? (double)(sh.pack_tokens ? sh.pack_tokens : dit_pack_tokens(sh.pack)) * row
                           : (double)(sh.images ? sh.images : B) * (sh.tokens ? sh.tokens : T) * row;
    return tape_name(tp, mse_loss(tp, out, tgt, mask, count), "loss");
}
