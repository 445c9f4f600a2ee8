// ring.c: the ring layout (ring attention, see sp.h), and the ring that the hybrid layout runs
// over its head groups. Forward: each rank's K/V block travels the
// ring (P - 1 steps, to rank + 1); every step attends the local queries to the visiting block with
// the fused kernel, and the partial outputs merge by their log-sum-exp. Each block is sent on
// (nonblocking) while it is attended, so the transfer overlaps the step's compute. Backward runs
// the ring the other way, starting from the last block the forward saw: every step computes this
// rank's share of the visiting block's dK/dV (recomputed against the final output and
// log-sum-exp) apart, then adds to it the sum of the earlier ranks' shares, which arrived
// meanwhile; the sums travel with the block and reach its owner at the last step; dQ stays here.
// K and V travel during the step that attends them, the sums during the next step (with
// DIT_RING_BLOCKING=1 each transfer ends before the step goes on: the same additions in the same
// order, the same bits). Sends 2 B T_pad D (P-1)/P values per layer and rank forward, twice that
// backward.
#include "../core/check.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include "../layers/attention_exact.h"
#include "sp.h"
#include <stdio.h>
#include <string.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o, (void)heads, (void)P, (void)buf, (void)len;
    return NULL; // any heads over any ranks
}

// kept: the output, its log-sum-exp and the last visiting K/V block; transient: a step's partial
// output and log-sum-exp and the travelling K/V blocks, sent and received (backward's travelling
// K, V, its dK, dV shares and sums, 10 blocks, fit in the gradients the estimate counts for a block)
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double n = sp->shard.n, D = c->hidden_size, H = c->num_heads;
    AttnMemory m = {.kept = 3 * n * D + H * n, .transient = 5 * n * D + H * n,
                    .queries = sp->shard.n, .keys = sp->shard.n};
    if (sp->bugs & BUG_RING_BLOCK_DELTA) m.transient += n * D + H * n; // a block's partial output
    return dit_step_bytes(c, B, sp->shard.n, m, sp_pass(sp, backward));
}

typedef struct Ring { // what one call needs, from q (B, n, D)
    Comm *c;
    const uint8_t *mask; // all tokens'
    const int32_t *seg;  // all tokens' images (B, P n), or NULL
    unsigned bugs;
    int B, n, H, dh;
    size_t blk; // B * n * D: one K or V block
} Ring;

static const uint8_t *block_mask(const Ring *g, int owner) {
    return g->mask ? g->mask + (size_t)owner * g->n : NULL;
}

// this rank's queries against the block of `owner`: a block whose images none of the queries
// share is skipped tile by tile inside the kernels, so such a ring step only passes it on
static Segments block_segments(const Ring *g, int owner) {
    return g->seg ? (Segments){g->seg, g->c->size * g->n, g->c->rank * g->n, owner * g->n} : NO_SEGMENTS;
}

// attention of the local queries to one visiting block, on the host or the device (the arena's)
static void block_forward(Arena *a, const Ring *g, real *o, real *l, const real *q, const real *k,
                          const real *v, int owner) {
    attention_kernel_forward(a, o, l, q, k, v, block_mask(g, owner), block_segments(g, owner), g->B,
                             g->n, g->n, g->H, g->dh);
}

static void ring_bwd(Node *nd) {
    Ring g = *(const Ring *)nd->ptr;
    Comm *c = g.c;
    Arena *a = nd->arena;
    int P = c->size, r = c->rank;
    real *dq = node_grad(nd, 0), *dk = node_grad(nd, 1), *dv = node_grad(nd, 2);
    size_t mark = arena_mark(a), two = 2 * g.blk;
    real *lse = nd->saved->data, *last = lse + (size_t)g.B * g.H * g.n; // last K, V block
    // K V of the visiting block and of the next; dK dV of this rank's share of the visiting block,
    // of the last step's block (on its way on), and the earlier ranks' sum arriving for this one
    real *cur = arena_alloc(a, 5 * two * sizeof(real)), *next = cur + two, *share = next + two,
         *sent = share + two, *sums = sent + two;
    bool stale = g.bugs & BUG_RING_STALE_KV, block_delta = g.bugs & BUG_RING_BLOCK_DELTA;
    real *os = block_delta ? arena_alloc(a, (g.blk + (size_t)g.B * g.H * g.n) * sizeof(real)) : NULL;
    copy_bytes(cur, last, two * sizeof(real));
    CommShift dkv; // the last step's sums on their way on, this step's arriving
    for (int s = 0; s < P; s++) { // block of rank r + 1 + s: the last is this rank's own
        int owner = (r + 1 + s) % P;
        bool keep_here = (g.bugs & BUG_RING_DKV_NOT_RETURNED) && owner != r;
        CommShift kv; // K and V travel on while this step works on them
        if (s < P - 1) comm_shift_start(c, &kv, next, cur, two, -1);
        // under ring-stale-kv every step recomputes against this rank's own block
        const real *k = stale ? nd->in[1]->data : cur, *v = stale ? nd->in[2]->data : cur + g.blk;
        const real *q = nd->in[0]->data, *o = nd->out->data;
        if (block_delta) { // the row term from the visiting block's partial output
            block_forward(a, &g, os, os + g.blk, q, k, v, owner);
            o = os;
        }
        if (s) zero_bytes(share, two * sizeof(real));
        attention_kernel_backward(a, dq, keep_here ? dk : share, keep_here ? dv : share + g.blk,
                                  nd->out->grad, o, lse, q, k, v, block_mask(&g, owner),
                                  block_segments(&g, owner), g.B, g.n, g.n, g.H, g.dh);
        if (s) { // the earlier ranks' sum arrived while this share was computed: added to it
            comm_shift_wait(&dkv);
            RUN(a->device, add_rows, share, two, sums, two, two, 1);
        }
        if (s == P - 1) break;
        comm_shift_start(c, &dkv, sums, share, two, -1); // travels during the next step
        comm_shift_wait(&kv);
        real *t = cur;
        cur = next, next = t, t = share, share = sent, sent = t;
    }
    // this rank's own block, every rank's share summed
    if (dk) RUN(a->device, add_rows, dk, g.blk, share, g.blk, g.blk, 1);
    if (dv) RUN(a->device, add_rows, dv, g.blk, share + g.blk, g.blk, g.blk, 1);
    arena_release(a, mark);
}

// ---- --exact (attention_exact.h): the same ring, twice forward (the blocks' log-sum-exp, then
// their weighted outputs), and backward with dK, dV as order-independent sums that travel with
// their block; the ring-* bugs as above
typedef struct RingExact {
    ExactAttn g;
    Comm *c;
    unsigned bugs;
    size_t blk; // B * n * D: one K or V block
} RingExact;

// Sends K, V (and the sums sk, sv of their gradients) of the block in cur one rank on, into next
static void ring_step(Comm *c, real *next, const real *cur, size_t blk, ExactSum *nk, ExactSum *nv,
                      ExactSum *sk, ExactSum *sv, int shift) {
    comm_shift(c, next, cur, 2 * blk, shift);
    if (!sk) return;
    exact_flush(sk), exact_flush(sv);
    comm_shift_bytes(c, nk->top, sk->top, exact_bytes(blk), shift);
    comm_shift_bytes(c, nv->top, sv->top, exact_bytes(blk), shift);
}

static void ring_exact_bwd(Node *nd) {
    const RingExact *e = nd->ptr;
    const ExactAttn *g = &e->g;
    Comm *c = e->c;
    Arena *a = nd->arena;
    int P = c->size, r = c->rank, n = g->Tq, nb = n / g->blk;
    real *dq = node_grad(nd, 0), *dk = node_grad(nd, 1), *dv = node_grad(nd, 2);
    ArenaMarks mark = arena_marks(a);
    size_t blk = e->blk;
    const real *q = nd->in[0]->data, *o = nd->out->data, *lse = nd->saved->data, *dout = nd->out->grad;
    real *cur = arena_alloc(a, 4 * blk * sizeof(real)), *next = cur + 2 * blk;
    ExactSum sq = exact_sums(a, blk), s[4] = {exact_sums(a, blk), exact_sums(a, blk), exact_sums(a, blk), exact_sums(a, blk)};
    ExactSum *sk = &s[0], *sv = &s[1], *nk = &s[2], *nv = &s[3], kept[2] = {exact_sums(a, blk), exact_sums(a, blk)};
    bool stale = e->bugs & BUG_RING_STALE_KV;
    copy_bytes(cur, lse + (size_t)g->B * g->H * n, 2 * blk * sizeof(real)); // the last block seen
    for (int s_ = 0; s_ < P; s_++) { // block of rank r + 1 + s_: the last is this rank's own
        int owner = (r + 1 + s_) % P;
        bool keep_here = (e->bugs & BUG_RING_DKV_NOT_RETURNED) && owner != r;
        const real *k = stale ? nd->in[1]->data : cur, *v = stale ? nd->in[2]->data : cur + blk;
        exact_attn_grad(g, a, &sq, keep_here ? &kept[0] : sk, keep_here ? &kept[1] : sv, dout, o, lse,
                        q, k, v, n, owner * nb);
        if (s_ == P - 1) break;
        ring_step(c, next, cur, blk, nk, nv, sk, sv, -1);
        real *t = cur;
        ExactSum *tk = sk, *tv = sv;
        cur = next, next = t, sk = nk, sv = nv, nk = tk, nv = tv;
    }
    if (dq) exact_add_into(dq, &sq, 0, blk, a);
    if (dk) exact_add_into(dk, sk, 0, blk, a), exact_add_into(dk, &kept[0], 0, blk, a);
    if (dv) exact_add_into(dv, sv, 0, blk, a), exact_add_into(dv, &kept[1], 0, blk, a);
    arena_release_marks(a, mark);
}

static Tensor *ring_attention_exact(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                                    const uint8_t *key_mask, const int32_t *seg, unsigned bugs) {
    int B = q->shape[0], n = q->shape[1], D = q->shape[2], P = c->size, r = c->rank, blkt = tp->exact->block;
    CHECK(n % blkt == 0, "ring attention: --exact needs whole blocks of %d tokens, got %d tokens", blkt, n);
    Arena *a = tp->arena;
    int nb = n / blkt;
    RingExact *e = arena_alloc(arena_host(a), sizeof *e);
    Segments images = seg ? (Segments){seg, P * n, r * n, 0} : NO_SEGMENTS;
    *e = (RingExact){{B, n, heads, D / heads, blkt, P * nb, key_mask, images, bugs & BUG_RING_WRONG_MERGE,
                      bugs & BUG_RING_BLOCK_DELTA, bugs & BUG_LSE_OVERFLOW}, c, bugs, (size_t)B * n * D};
    Tensor *out = tensor_like(a, q);
    Tensor *saved = tensor_new(a, 1, (int)((size_t)B * heads * n + 2 * e->blk)); // lse, last K V
    ArenaMarks mark = arena_marks(a);
    size_t lsize = (size_t)B * heads * n;
    // the blocks' log-sum-exps, their combination and the output's sums on the host
    real *lparts = arena_alloc(arena_host(a), ((size_t)P * nb + 1) * lsize * sizeof(real));
    real *L = lparts + (size_t)P * nb * lsize, *o_host = arena_alloc(arena_host(a), out->size * sizeof(real));
    real *cur = arena_alloc(a, 4 * e->blk * sizeof(real)), *next = cur + 2 * e->blk;
    ExactSum o = exact_sums(a, out->size);
    for (int pass = 0; pass < 2; pass++) {
        copy_bytes(cur, k->data, e->blk * sizeof(real)), copy_bytes(cur + e->blk, v->data, e->blk * sizeof(real));
        for (int s = 0; s < P; s++) { // block of rank r - s
            int owner = (r - s + P) % P;
            if (pass == 0) exact_attn_lse(&e->g, a, lparts, q->data, cur, cur + e->blk, n, owner * nb);
            else exact_attn_out(&e->g, a, &o, L, q->data, cur, cur + e->blk, n, owner * nb);
            if (s == P - 1) break;
            ring_step(c, next, cur, e->blk, NULL, NULL, NULL, NULL, 1);
            real *t = cur;
            cur = next, next = t;
        }
        if (pass == 0) exact_attn_combine(&e->g, L, lparts);
    }
    exact_result(o_host, &o, 0, out->size);
    copy_bytes(out->data, o_host, out->size * sizeof(real));
    copy_bytes(saved->data, L, lsize * sizeof(real));
    copy_bytes(saved->data + lsize, cur, 2 * e->blk * sizeof(real));
    arena_release_marks(a, mark);
    Node *nd = tape_record(tp, "ring_attention_exact", ring_exact_bwd, out, 3, q, k, v);
    if (nd) nd->saved = saved, nd->ptr = e;
    return out;
}

Tensor *ring_attention(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                       const uint8_t *key_mask, const int32_t *seg, unsigned bugs) {
    if (tp->exact) return ring_attention_exact(tp, c, q, k, v, heads, key_mask, seg, bugs);
    int B = q->shape[0], n = q->shape[1], D = q->shape[2], P = c->size, r = c->rank;
    CHECK(heads > 0 && D % heads == 0, "ring attention: %d heads do not divide the width %d", heads, D);
    Arena *a = tp->arena;
    Ring *g = arena_alloc(arena_host(a), sizeof(Ring));
    *g = (Ring){.c = c, .mask = key_mask, .seg = seg, .bugs = bugs, .B = B, .n = n, .H = heads, .dh = D / heads,
                .blk = (size_t)B * n * D};
    Tensor *out = tensor_like(a, q);
    Tensor *saved = tensor_new(a, 1, (int)((size_t)B * heads * n + 2 * g->blk)); // lse, last K V
    real *lse = saved->data, *last = lse + (size_t)B * heads * n;
    size_t mark = arena_mark(a);
    real *cur = arena_alloc(a, 4 * g->blk * sizeof(real)), *next = cur + 2 * g->blk;
    real *os = arena_alloc(a, (g->blk + (size_t)B * heads * n) * sizeof(real)), *ls = os + g->blk;
    copy_bytes(cur, k->data, g->blk * sizeof(real)), copy_bytes(cur + g->blk, v->data, g->blk * sizeof(real));
    for (int s = 0; s < P; s++) { // block of rank r - s; the first is the merge's start
        int owner = (r - s + P) % P;
        CommShift kv; // the block travels on while it is attended here
        if (s < P - 1) comm_shift_start(c, &kv, next, cur, 2 * g->blk, 1);
        block_forward(a, g, s ? os : out->data, s ? ls : lse, q->data, cur, cur + g->blk, owner);
        if (s) // under ring-wrong-merge, a plain average of the partial outputs
            RUN(a->device, attention_merge, out->data, lse, os, ls, B, n, heads, g->dh,
                (bugs & BUG_RING_WRONG_MERGE) ? s + 1 : (bugs & BUG_LSE_OVERFLOW) ? -1 : 0);
        if (s == P - 1) break;
        comm_shift_wait(&kv);
        real *t = cur;
        cur = next, next = t;
    }
    copy_bytes(last, cur, 2 * g->blk * sizeof(real));
    arena_release(a, mark);
    Node *nd = tape_record(tp, "ring_attention", ring_bwd, out, 3, q, k, v);
    if (nd) nd->saved = saved, nd->ptr = g;
    return out;
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    return ring_attention(tp, sp->comm, q, k, v, heads, sp_key_mask(sp), sp_images(sp, seg), sp->bugs);
}

// P - 1 steps, each one message: K and V of B n tokens forward, K, V, dK and dV backward
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double P = sp->shard.P;
    return (SpTraffic){(backward ? 4 : 2) * (P - 1) * B * sp->shard.n * c->hidden_size, P - 1};
}

const SpLayout sp_ring = {"ring", validate, step_bytes, traffic, attend};
