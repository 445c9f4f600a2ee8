// ring.c: the ring layout (ring attention, see sp.h), and the ring that the hybrid layout runs
// over its head groups. Forward: each rank's K/V block travels the
// ring (P - 1 steps, to rank + 1); every step attends the local queries to the visiting block with
// the fused kernel, and the partial outputs merge by their log-sum-exp. Backward runs the ring the
// other way, starting from the last block the forward saw: every step adds this rank's share of
// the visiting block's dK/dV (recomputed against the final output and log-sum-exp), which travel
// with the block and reach its owner at the last step; dQ stays here. Sends 2 B T_pad D (P-1)/P
// values per layer and rank forward, twice that backward.
#include "../core/check.h"
#include "../kernels/kernels.h"
#include "sp.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o, (void)heads, (void)P, (void)buf, (void)len;
    return NULL; // any heads over any ranks
}

// kept: the output, its log-sum-exp and the last visiting K/V block; transient: a step's partial
// output and log-sum-exp and the travelling K/V blocks, sent and received (backward's travelling
// K, V, dK, dV fit in the gradients the estimate counts for a block)
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double n = sp->shard.n, D = c->hidden_size, H = c->num_heads;
    AttnMemory m = {.kept = 3 * n * D + H * n, .transient = 5 * n * D + H * n,
                    .queries = sp->shard.n, .keys = sp->shard.n};
    if (sp->bugs & BUG_RING_BLOCK_DELTA) m.transient += n * D + H * n; // a block's partial output
    return dit_step_bytes(c, B, sp->shard.n, m, backward);
}

typedef struct Ring { // what one call needs, from q (B, n, D)
    Comm *c;
    const uint8_t *mask; // all tokens'
    unsigned bugs;
    int B, n, H, dh;
    int bq, bk; // the kernels' tiles, no larger than a block
    size_t blk; // B * n * D: one K or V block
} Ring;

static real *scratch(Arena *a, const Ring *g) {
    return arena_alloc(a, attention_scratch_count(g->bq, g->bk, g->dh, kernel_threads()) * sizeof(real));
}

static const uint8_t *block_mask(const Ring *g, int owner) {
    return g->mask ? g->mask + (size_t)owner * g->n : NULL;
}

// o, l = the merge by log-sum-exp of (o, l) and a block's (os, ls); under the ring-wrong-merge
// bug the partial outputs are averaged instead, without the rescaling
static void merge(const Ring *g, real *o, real *l, const real *os, const real *ls, int step) {
    int D = g->H * g->dh;
    bool bug = g->bugs & BUG_RING_WRONG_MERGE;
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->H; h++)
            for (int i = 0; i < g->n; i++) {
                size_t row = ((size_t)b * g->H + h) * g->n + i;
                double la = l[row], lb = ls[row];
                if (lb == -INFINITY) continue; // every key of the block masked
                double mx = fmax(la, lb), lnew = la == -INFINITY ? lb : mx + log(exp(la - mx) + exp(lb - mx));
                double wb = bug ? 1.0 / (step + 1) : exp(lb - lnew);
                double wa = bug ? 1 - wb : la == -INFINITY ? 0 : exp(la - lnew);
                real *oa = o + ((size_t)b * g->n + i) * D + h * g->dh;
                const real *ob = os + ((size_t)b * g->n + i) * D + h * g->dh;
                for (int d = 0; d < g->dh; d++) oa[d] = (real)(wa * oa[d] + wb * ob[d]);
                l[row] = (real)lnew;
            }
}

static void ring_bwd(Node *nd) {
    Ring g = *(const Ring *)nd->ptr;
    Comm *c = g.c;
    int P = c->size, r = c->rank;
    real *dq = node_grad(nd, 0), *dk = node_grad(nd, 1), *dv = node_grad(nd, 2);
    size_t mark = arena_mark(nd->arena);
    real *lse = nd->saved->data, *last = lse + (size_t)g.B * g.H * g.n; // last K, V block
    real *cur = arena_alloc(nd->arena, 8 * g.blk * sizeof(real)), *next = cur + 4 * g.blk; // K V dK dV
    real *work = scratch(nd->arena, &g);
    bool stale = g.bugs & BUG_RING_STALE_KV, block_delta = g.bugs & BUG_RING_BLOCK_DELTA;
    real *os = block_delta ? arena_alloc(nd->arena, (g.blk + (size_t)g.B * g.H * g.n) * sizeof(real)) : NULL;
    memcpy(cur, last, 2 * g.blk * sizeof(real));
    for (int s = 0; s < P; s++) { // block of rank r + 1 + s: the last is this rank's own
        int owner = (r + 1 + s) % P;
        bool keep_here = (g.bugs & BUG_RING_DKV_NOT_RETURNED) && owner != r;
        // under ring-stale-kv every step recomputes against this rank's own block
        const real *k = stale ? nd->in[1]->data : cur, *v = stale ? nd->in[2]->data : cur + g.blk;
        const real *q = nd->in[0]->data, *o = nd->out->data;
        if (block_delta) { // the row term from the visiting block's partial output
            attention_forward(os, os + g.blk, work, q, k, v, block_mask(&g, owner), g.B, g.n, g.n,
                              g.H, g.dh, g.bq, g.bk);
            o = os;
        }
        attention_backward(dq, keep_here ? dk : cur + 2 * g.blk, keep_here ? dv : cur + 3 * g.blk,
                           work, nd->out->grad, o, lse, q, k, v, block_mask(&g, owner), g.B, g.n,
                           g.n, g.H, g.dh, g.bq, g.bk);
        if (s == P - 1) break;
        comm_shift(c, next, cur, 4 * g.blk, -1);
        real *t = cur;
        cur = next, next = t;
    }
    for (size_t i = 0; i < g.blk; i++) { // this rank's own block, every rank's share summed
        if (dk) dk[i] += cur[2 * g.blk + i];
        if (dv) dv[i] += cur[3 * g.blk + i];
    }
    arena_release(nd->arena, mark);
}

Tensor *ring_attention(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                       const uint8_t *key_mask, unsigned bugs) {
    int B = q->shape[0], n = q->shape[1], D = q->shape[2], P = c->size, r = c->rank;
    CHECK(heads > 0 && D % heads == 0, "ring attention: %d heads do not divide the width %d", heads, D);
    Ring *g = arena_alloc(tp->arena, sizeof(Ring));
    *g = (Ring){.c = c, .mask = key_mask, .bugs = bugs, .B = B, .n = n, .H = heads, .dh = D / heads,
                .bq = ATTN_BQ < n ? ATTN_BQ : n, .bk = ATTN_BK < n ? ATTN_BK : n,
                .blk = (size_t)B * n * D};
    Tensor *out = tensor_like(tp->arena, q);
    Tensor *saved = tensor_new(tp->arena, 1, (int)((size_t)B * heads * n + 2 * g->blk)); // lse, last K V
    real *lse = saved->data, *last = lse + (size_t)B * heads * n;
    size_t mark = arena_mark(tp->arena);
    real *cur = arena_alloc(tp->arena, 4 * g->blk * sizeof(real)), *next = cur + 2 * g->blk;
    real *os = arena_alloc(tp->arena, (g->blk + (size_t)B * heads * n) * sizeof(real)), *ls = os + g->blk;
    real *work = scratch(tp->arena, g);
    memcpy(cur, k->data, g->blk * sizeof(real)), memcpy(cur + g->blk, v->data, g->blk * sizeof(real));
    for (size_t i = 0; i < (size_t)B * heads * n; i++) lse[i] = -INFINITY;
    for (int s = 0; s < P; s++) { // block of rank r - s
        attention_forward(os, ls, work, q->data, cur, cur + g->blk, block_mask(g, (r - s + P) % P),
                          B, n, n, heads, g->dh, g->bq, g->bk);
        merge(g, out->data, lse, os, ls, s);
        if (s == P - 1) break;
        comm_shift(c, next, cur, 2 * g->blk, 1);
        real *t = cur;
        cur = next, next = t;
    }
    memcpy(last, cur, 2 * g->blk * sizeof(real));
    arena_release(tp->arena, mark);
    Node *nd = tape_record(tp, "ring_attention", ring_bwd, out, 3, q, k, v);
    if (nd) nd->saved = saved, nd->ptr = g;
    return out;
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, void *ctx) {
    SeqParallel *sp = ctx;
    return ring_attention(tp, sp->comm, q, k, v, heads, sp_key_mask(sp), sp->bugs);
}

const SpLayout sp_ring = {"ring", validate, step_bytes, attend};
