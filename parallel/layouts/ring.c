// ring.c: the ring layout (ring attention, see layouts.h), and the ring that the hybrid layout runs
// over its head groups. Forward: each rank's K/V block travels the ring (P - 1 steps, to rank + 1);
// every step attends the local queries to the visiting block with the fused kernel, and the
// partial outputs merge by their log-sum-exp. Each block is sent on (nonblocking) while it is
// attended, so the transfer overlaps the step's compute. Backward runs the ring the other way,
// starting from the last block the forward saw: every step computes this rank's share of the
// visiting block's dK/dV (recomputed against the final output and log-sum-exp) apart, then adds to
// it the sum of the earlier ranks' shares, which arrived meanwhile; the sums travel with the block
// and reach its owner at the last step; dQ stays here. K and V travel during the step that attends
// them, the sums during the next step (with DIT_RING_BLOCKING=1 each transfer ends before the step
// goes on: the same additions in the same order, the same bits). Sends 2 B T_pad D (P-1)/P values
// per layer and rank forward, twice that backward.
// --exact (attention_exact.h) runs the same schedule and transfers: the ring turns twice forward
// (the blocks' log-sum-exps, then their weighted outputs), a step's work is the block pairs' exact
// sums, and the shares of dK and dV are exact sums, which travel as they are and add exactly.
#include "../../core/check.h"
#include "../../core/device.h"
#include "../../kernels/run.h"
#include "../../layers/attention_exact.h"
#include "ring.h"
#include "shared.h"
#include <stdio.h>
#include <string.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o, (void)heads, (void)P, (void)buf, (void)len;
    return NULL; // any heads over any ranks
}

// kept: the output, its log-sum-exp and the last visiting K/V block; transient: a step's partial
// output and log-sum-exp and the travelling K/V blocks, sent and received (backward's travelling
// K, V, its dK, dV shares and sums, 10 blocks, and under bf16 their wires, 4 more, fit in the
// gradients the estimate counts for a block)
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    // joint attention: the caption's R queries too, its keys at the home step (backward: their
    // dK, dV with the block's), and q, k, v joined
    double n = sp->shard.n, R = dit_front_tokens(c), nq = n + R, D = c->hidden_size, H = c->num_heads;
    AttnMemory m = {.kept = 2 * n * D + nq * D + H * nq,
                    .transient = 4 * n * D + nq * D + H * nq + 2 * nq * D * (R > 0),
                    .joint_held = 2, .queries = (int)nq, .keys = (int)nq};
    if (sp->bugs & BUG_RING_BLOCK_DELTA) m.transient += nq * D + H * nq; // a block's partial output
    return dit_step_bytes(c, B, sp->shard.n, m, sp_step(sp, backward));
}

typedef struct Ring { // what one call needs, from q (B, R + n, D)
    Comm *c;
    const uint8_t *mask; // all tokens'
    const int32_t *seg;  // all tokens' images (B, P n), or NULL
    BugMask bugs;
    int B, n, H, dh;
    size_t blk;          // B * n * D: one K or V block
    ExactAttn *exact;    // --exact: the block pairs (canonical blocks of exact->blk tokens); else NULL
    // the R tokens every rank holds in front of its block (joint attention's caption; 0: none):
    // queries R + n; their keys attended once, with the rank's own block (the home step), and
    // never sent (under the ring-text-every-step bug: with every visiting block); front_mask
    // (P, R + n): 1 for them, then each rank's block's key mask; front_seg: the images of the
    // queries [caption; this rank's block], then of the keys [caption; the block of rank o] for
    // each rank o in turn (dit_joint_segments' key sets; not under --exact)
    int R, nq;
    const uint8_t *front_mask;
    Segments front_seg;
    // --exact with tokens in front: the caption's queries as a query set of their own (Rp of them,
    // padded to whole canonical blocks), its keys the key blocks before every rank's block (under
    // ring-text-every-step a copy of them for each rank's block, attended with that block); the
    // image's queries apart (qi); kt, vt the caption's keys and values padded the same way. The
    // caption's queries are the same on every rank: rank 0 adds their shares of dK and dV
    ExactAttn *exact_t;
    int Rp;
    real *qt, *qi, *kt, *vt;
    size_t lsize; // the saved log-sum-exps' values, before the last K and V
    bool bf16;    // K and V are bf16 values (--precision bf16): blocks travel in 2 bytes a value
    bool bf16_grads; // and so do their dK, dV sums (--grad-wire bf16)
} Ring;

// where this rank's queries, and the keys of the block of `owner`, start among all tokens (both
// modes: --exact counts the keys in canonical blocks)
static int queries_at(const Ring *g) { return g->c->rank * g->n; }
static int keys_at(const Ring *g, int owner) { return owner * g->n; }

static const uint8_t *block_mask(const Ring *g, int owner) {
    return g->mask ? g->mask + keys_at(g, owner) : NULL;
}

static bool sees_front(const Ring *g, int owner);
// the copies of the front's keys among all keys: one, or under ring-text-every-step one a step
static int front_copies(const Ring *g) { return g->R && (g->bugs & BUG_RING_TEXT_EVERY_STEP) ? g->c->size : 1; }

// this rank's queries against the block of `owner` (with the front's keys where the step sees
// them): a block whose images none of the queries share is skipped tile by tile inside the
// kernels, so such a ring step only passes it on
static Segments block_segments(const Ring *g, int owner) {
    if (g->R) { // key set `owner`, with the caption's keys or without
        Segments s = g->front_seg;
        s.k0 += owner * (g->R + g->n) + (sees_front(g, owner) ? 0 : g->R);
        return s;
    }
    return g->seg ? (Segments){g->seg, g->c->size * g->n, queries_at(g), keys_at(g, owner)} : NO_SEGMENTS;
}

// --exact: the first canonical block of the block of `owner` among all keys (after the caption's)
static int first_key_block(const Ring *g, int owner) { return (front_copies(g) * g->Rp + keys_at(g, owner)) / g->exact->blk; }
// --exact: the first canonical block of the caption's keys that the step of `owner` attends (its copy)
static int front_key_block(const Ring *g, int owner) { return (front_copies(g) > 1 ? owner : 0) * g->Rp / g->exact->blk; }

// attention of the local queries to one visiting block, on the host or the device (the arena's)
static void block_forward(Arena *a, const Ring *g, real *o, real *l, const real *q, const real *k,
                          const real *v, int owner) {
    attention_kernel_forward(a, o, l, q, k, v, block_mask(g, owner), block_segments(g, owner), g->B,
                             g->nq, g->n, g->H, g->dh);
}

// the front tokens' keys: the home step attends to x (B, R + n, D) whole, the front's rows and
// the rank's own block's; the block alone (rows [R, R + n) of each image) travels. to_block:
// the block's rows of x into blk (B, n, D), else blk into them
// A K V block (2 blk values) on its way round the ring: as it is, or in 2 bytes a value when the
// values are bf16 values (its wire: the packed block going out, then the one coming in)
typedef struct Travel {
    CommShift shift;
    uint16_t *wire;
    real *into;
} Travel;

static uint16_t *travel_wire(Arena *a, bool bf16, const Ring *g) {
    return bf16 ? arena_alloc(a, 4 * g->blk * sizeof(uint16_t)) : NULL;
}

static void travel_start(Arena *a, const Ring *g, Travel *t, uint16_t *wire, real *next, const real *cur, int dir) {
    size_t two = 2 * g->blk;
    *t = (Travel){.wire = wire, .into = next};
    if (!wire) {
        comm_shift_start(g->c, &t->shift, next, cur, two * sizeof(real), dir);
        return;
    }
    RUN(a->device, pack_bf16, wire, cur, two);
    comm_shift_start(g->c, &t->shift, wire + two, wire, two * sizeof(uint16_t), dir);
}

static void travel_wait(Arena *a, const Ring *g, Travel *t) {
    comm_shift_wait(&t->shift);
    if (t->wire) RUN(a->device, unpack_bf16, t->into, t->wire + 2 * g->blk, 2 * g->blk);
}

static void own_block(const Ring *g, real *blk, real *x, bool to_block) {
    size_t row = (size_t)g->n * g->H * g->dh, front = (size_t)g->R * g->H * g->dh;
    for (int b = 0; b < g->B; b++) {
        real *in = x + b * (front + row) + front, *out = blk + b * row;
        if (to_block) copy_bytes(out, in, row * sizeof(real));
        else copy_bytes(in, out, row * sizeof(real));
    }
}

// Whether the step that attends to the block of `owner` sees the front tokens' keys: the home
// step, or under the ring-text-every-step bug every step
static bool sees_front(const Ring *g, int owner) {
    return g->R && (owner == g->c->rank || (g->bugs & BUG_RING_TEXT_EVERY_STEP));
}

// The keys (or values) such a step attends to, [front; the block of `owner`] (B, R + n, D): x, the
// input, for the home step; else the front's rows of x and the visiting block blk, joined in a's
static const real *with_front(Arena *a, const Ring *g, real *x, const real *blk, int owner) {
    if (owner == g->c->rank) return x;
    size_t row = (size_t)g->n * g->H * g->dh, front = (size_t)g->R * g->H * g->dh;
    real *j = arena_alloc(a, (size_t)g->B * (front + row) * sizeof(real));
    for (int b = 0; b < g->B; b++) {
        copy_bytes(j + b * (front + row), x + b * (front + row), front * sizeof(real));
        copy_bytes(j + b * (front + row) + front, blk + b * row, row * sizeof(real));
    }
    return j;
}

// ---- forward ----------------------------------------------------------------------------------
typedef struct Forward { // what the steps add up
    real *out, *lse;  // the output and its log-sum-exp, merged so far
    real *os, *ls;    // a step's partial ones
    real *lparts, *L; // --exact: every key block's log-sum-exp (pass 0), and their combination
    ExactSum o;       // --exact: the output's sums (pass 1)
    real *lparts_t, *L_t; // --exact with tokens in front: the caption queries' own
    ExactSum o_t;
} Forward;

// The local queries against the visiting block of `owner` (k, v), at step s of pass `pass`
static void forward_step(Arena *a, const Ring *g, Forward *f, const real *q, const real *k,
                         const real *v, const Tensor *home_k, const Tensor *home_v, int pass, int s, int owner) {
    if (g->exact) { // the image's queries, and the caption's; the caption's keys where the step sees them
        const real *qi = g->R ? g->qi : q;
        for (int home = 0; home <= sees_front(g, owner); home++) {
            const real *kk = home ? g->kt : k, *vv = home ? g->vt : v;
            int nk = home ? g->Rp : g->n, kb = home ? front_key_block(g, owner) : first_key_block(g, owner);
            if (pass == 0) exact_attn_lse(g->exact, a, f->lparts, qi, kk, vv, nk, kb);
            else exact_attn_out(g->exact, a, &f->o, f->L, qi, kk, vv, nk, kb);
            if (g->R && pass == 0) exact_attn_lse(g->exact_t, a, f->lparts_t, g->qt, kk, vv, nk, kb);
            else if (g->R) exact_attn_out(g->exact_t, a, &f->o_t, f->L_t, g->qt, kk, vv, nk, kb);
        }
        return;
    }
    if (sees_front(g, owner)) // the home step: the front tokens' keys once, with this rank's block
        attention_kernel_forward(a, s ? f->os : f->out, s ? f->ls : f->lse, q, with_front(a, g, home_k->data, k, owner),
                                 with_front(a, g, home_v->data, v, owner), g->front_mask + (size_t)owner * g->nq,
                                 block_segments(g, owner), g->B, g->nq, g->R + g->n, g->H, g->dh);
    else block_forward(a, g, s ? f->os : f->out, s ? f->ls : f->lse, q, k, v, owner);
    if (s) { // the first is the merge's start; under ring-wrong-merge a plain average of the partials
        AttnMerge m = {(g->bugs & BUG_RING_WRONG_MERGE) ? MERGE_AS_MEAN
                       : (g->bugs & BUG_LSE_OVERFLOW) ? MERGE_OVERFLOWING : MERGE_BY_LSE, s + 1};
        RUN(a->device, attention_merge, f->out, f->lse, f->os, f->ls, g->B, g->nq, g->H, g->dh, m);
    }
}

static void ring_bwd(Node *nd);

Tensor *ring_attention(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                       const uint8_t *key_mask, const int32_t *seg, int front, BugMask bugs) {
    int B = q->shape[0], nq = q->shape[1], n = nq - front, D = q->shape[2], P = c->size, r = c->rank;
    CHECK(heads > 0 && D % heads == 0, "ring attention: %d heads do not divide the width %d", heads, D);
    CHECK(!front || seg, "ring attention: tokens in front need their images");
    Arena *a = tp->arena;
    Ring *g = arena_alloc(arena_host(a), sizeof(Ring));
    *g = (Ring){.c = c, .bf16 = k->bf16 && v->bf16, .bf16_grads = k->bf16 && v->bf16 && tp->bf16_grads, .mask = key_mask, .seg = seg, .bugs = bugs, .B = B, .n = n, .H = heads, .dh = D / heads,
                .blk = (size_t)B * n * D, .R = front, .nq = nq};
    // the key mask on the host (key_mask: the host's copy under --device cuda too)
    const uint8_t *km = key_mask && device_pointer(key_mask) ? NULL : key_mask;
    if (front && key_mask && !km) { // the device's copy: read back once
        uint8_t *h = arena_alloc(arena_host(a), (size_t)P * n);
        copy_bytes(h, key_mask, (size_t)P * n);
        km = h;
    }
    if (front) { // then where the kernels run
        uint8_t *fm = arena_alloc(arena_host(a), (size_t)P * nq);
        for (int o = 0; o < P; o++)
            for (int j = 0; j < nq; j++) fm[(size_t)o * nq + j] = j < front || !km || km[o * n + j - front];
        g->front_mask = (uint8_t *)op_input(a, fm, (size_t)P * nq);
        if (!tp->exact) {
            g->front_seg = dit_joint_segments(a, seg, B, front, P * n, r * n, n, P, 0, n);
            g->front_seg.id = op_input(a, g->front_seg.id, (size_t)B * g->front_seg.T * sizeof(int32_t));
        }
    }
    size_t lsize = (size_t)B * heads * nq;
    if (tp->exact) {
        int blkt = tp->exact->block;
        CHECK(n % blkt == 0, "ring attention: --exact needs whole blocks of %d tokens, got %d tokens", blkt, n);
        Segments images = seg ? (Segments){seg, P * n, queries_at(g), 0} : NO_SEGMENTS, images_t = images;
        const uint8_t *mask = key_mask;
        if (front) { // the caption's keys first: every key's mask and images (exact_joint_keys)
            g->Rp = (front + blkt - 1) / blkt * blkt;
            ExactJointKeys jk = exact_joint_keys(a, B, front, g->Rp, front_copies(g), P * n, queries_at(g), n, km, seg);
            mask = jk.mask, images = jk.seg_i, images_t = jk.seg_t;
            size_t row = (size_t)nq * D;
            g->qt = exact_take_rows(a, q->data, row, 0, B, front, g->Rp, D), g->qi = exact_take_rows(a, q->data, row, front, B, n, n, D);
            g->kt = exact_take_rows(a, k->data, row, 0, B, front, g->Rp, D), g->vt = exact_take_rows(a, v->data, row, 0, B, front, g->Rp, D);
            g->exact_t = arena_alloc(arena_host(a), sizeof(ExactAttn));
        }
        g->exact = arena_alloc(arena_host(a), sizeof(ExactAttn));
        *g->exact = (ExactAttn){B, n, heads, D / heads, blkt, (front_copies(g) * g->Rp + P * n) / blkt, mask, images,
                                bugs & BUG_RING_WRONG_MERGE, bugs & BUG_RING_BLOCK_DELTA, bugs & BUG_LSE_OVERFLOW};
        if (front) *g->exact_t = *g->exact, g->exact_t->Tq = g->Rp, g->exact_t->seg = images_t;
        lsize = (size_t)B * heads * (n + g->Rp); // the image's L, then the caption's
    }
    g->lsize = lsize;
    Tensor *out = tensor_like(a, q);
    Tensor *saved = tensor_new(a, 1, (int)(lsize + 2 * g->blk)); // lse, last K V
    Forward f = {.out = out->data, .lse = saved->data};
    ArenaMarks mark = arena_marks(a);
    real *cur = arena_alloc(a, 4 * g->blk * sizeof(real)), *next = cur + 2 * g->blk;
    uint16_t *wire = travel_wire(a, g->bf16, g);
    size_t qsize = (size_t)B * nq * D; // a step's partial output
    if (g->exact) { // on the host
        size_t li = (size_t)B * heads * n, lt = (size_t)B * heads * g->Rp, nkb = (size_t)g->exact->nkb;
        f.lparts = arena_alloc(arena_host(a), (nkb + 1) * li * sizeof(real));
        f.L = f.lparts + nkb * li, f.o = exact_sums(a, (size_t)B * n * D);
        if (front) {
            f.lparts_t = arena_alloc(arena_host(a), (nkb + 1) * lt * sizeof(real));
            f.L_t = f.lparts_t + nkb * lt, f.o_t = exact_sums(a, (size_t)B * g->Rp * D);
        }
    } else f.os = arena_alloc(a, (qsize + lsize) * sizeof(real)), f.ls = f.os + qsize;
    for (int pass = 0; pass < (g->exact ? 2 : 1); pass++) { // --exact: L first, then the outputs
        own_block(g, cur, k->data, true), own_block(g, cur + g->blk, v->data, true);
        for (int s = 0; s < P; s++) { // block of rank r - s
            int owner = (r - s + P) % P;
            Travel kv; // the block travels on while it is attended here
            if (s < P - 1) travel_start(a, g, &kv, wire, next, cur, 1);
            forward_step(a, g, &f, q->data, cur, cur + g->blk, k, v, pass, s, owner);
            if (s == P - 1) break;
            travel_wait(a, g, &kv);
            real *t = cur;
            cur = next, next = t;
        }
        if (g->exact && pass == 0) exact_attn_combine(g->exact, f.L, f.lparts);
        if (g->exact && front && pass == 0) exact_attn_combine(g->exact_t, f.L_t, f.lparts_t);
    }
    if (g->exact) { // the output's sums rounded (the caption's rows, then the image's), and L as the log-sum-exp
        size_t li = (size_t)B * heads * n, row = (size_t)nq * D;
        exact_add_rows(a, out->data + (size_t)front * D, row, &f.o, (size_t)n * D, (size_t)n * D, B);
        if (front) exact_add_rows(a, out->data, row, &f.o_t, (size_t)g->Rp * D, (size_t)front * D, B);
        copy_bytes(f.lse, f.L, li * sizeof(real));
        if (front) copy_bytes(f.lse + li, f.L_t, (size_t)B * heads * g->Rp * sizeof(real));
    }
    copy_bytes(f.lse + lsize, cur, 2 * g->blk * sizeof(real));
    arena_release_marks(a, mark);
    Node *nd = tape_record(tp, "ring_attention", ring_bwd, out, 3, q, k, v);
    if (nd) nd->saved = saved, nd->ptr = g;
    return out;
}

// ---- backward ---------------------------------------------------------------------------------
// dK then dV of one block: 2 blk reals where the arena keeps them, or under --exact their exact
// sums (host memory, k's then v's in one allocation, so that they travel as one message)
typedef struct Shares {
    real *d;
    ExactSum k, v;
} Shares;

static Shares shares_new(Arena *a, const Ring *g) {
    if (!g->exact) return (Shares){.d = arena_alloc(a, 2 * g->blk * sizeof(real))};
    char *mem = arena_alloc(arena_host(a), 2 * exact_bytes(g->blk)); // zeroed
    return (Shares){.k = exact_view_zeroed(mem, g->blk), .v = exact_view_zeroed(mem + exact_bytes(g->blk), g->blk)};
}

static void *shares_at(const Shares *s) { return s->d ? (void *)s->d : (void *)s->k.top; }
static size_t shares_bytes(const Ring *g) { return g->exact ? 2 * exact_bytes(g->blk) : 2 * g->blk * sizeof(real); }

static void shares_clear(const Ring *g, Shares *s) {
    if (s->d) zero_bytes(s->d, 2 * g->blk * sizeof(real));
    else exact_clear(&s->k), exact_clear(&s->v);
}

// The shares `from` on their way to the next rank (`way`), arriving in `to`: as they are, or
// through wire (--grad-wire bf16: each value rounded to bf16, 2 bytes; the packed shares going
// out, then those coming in)
static void shares_send(Arena *a, const Ring *g, CommShift *t, uint16_t *wire, Shares *to, const Shares *from, int way) {
    size_t two = 2 * g->blk;
    if (!wire) {
        comm_shift_start(g->c, t, shares_at(to), shares_at(from), shares_bytes(g), way);
        return;
    }
    RUN(a->device, pack_bf16, wire, from->d, two);
    comm_shift_start(g->c, t, wire + two, wire, two * sizeof(uint16_t), way);
}

static void shares_arrive(Arena *a, const Ring *g, CommShift *t, uint16_t *wire, Shares *to) {
    comm_shift_wait(t);
    if (wire) RUN(a->device, unpack_bf16, to->d, wire + 2 * g->blk, 2 * g->blk);
}

// to += from (which may change: exact sums' fronts move into their limbs)
static void shares_add(Arena *a, const Ring *g, Shares *to, Shares *from) {
    size_t two = 2 * g->blk;
    if (to->d) RUN(a->device, add_rows, to->d, two, from->d, two, two, 1);
    else exact_merge(&to->k, 0, &from->k), exact_merge(&to->v, 0, &from->v);
}

typedef struct Backward { // what the steps add into besides the travelling shares
    real *dq, *dk, *dv; // the inputs' gradients
    real *os;           // ring-block-delta: a block's partial output and log-sum-exp
    ExactSum q;         // --exact: dQ's sums
    Shares kept;        // --exact, ring-dkv-not-returned: the shares kept here
    // --exact with tokens in front: the image's and the caption's output, its gradient and L apart
    // (as the Ring's qi, qt); the caption queries' dQ sums and the caption keys' dK, dV sums
    const real *oi, *ot, *gi, *gt, *li, *lt;
    ExactSum qt;
    Shares front;
} Backward;

// This rank's share of the visiting block of `owner` (k, v) into sh, its dQ added; under
// ring-dkv-not-returned another rank's block's share stays here (keep_here)
static void backward_step(Node *nd, const Ring *g, Backward *b, Shares *sh, bool keep_here,
                          const real *k, const real *v, int owner) {
    Arena *a = nd->arena;
    const real *q = nd->in[0]->data, *o = nd->out->data, *lse = nd->saved->data, *dout = nd->out->grad;
    if (g->exact && !g->R) {
        Shares *to = keep_here ? &b->kept : sh;
        return exact_attn_grad(g->exact, a, &b->q, &to->k, &to->v, dout, o, lse, q, k, v, g->n, first_key_block(g, owner));
    }
    if (g->exact) { // the image's queries, then the caption's (rank 0 adds their shares); the
        // caption's keys where the step sees them (sees_front)
        bool adds = g->c->rank == 0;
        for (int home = 0; home <= sees_front(g, owner); home++) {
            Shares *to = home ? &b->front : keep_here ? &b->kept : sh;
            const real *kk = home ? g->kt : k, *vv = home ? g->vt : v;
            int nk = home ? g->Rp : g->n, kb = home ? front_key_block(g, owner) : first_key_block(g, owner);
            exact_attn_grad(g->exact, a, &b->q, &to->k, &to->v, b->gi, b->oi, b->li, g->qi, kk, vv, nk, kb);
            exact_attn_grad(g->exact_t, a, &b->qt, adds ? &to->k : NULL, adds ? &to->v : NULL, b->gt, b->ot, b->lt,
                            g->qt, kk, vv, nk, kb);
        }
        return;
    }
    if (sees_front(g, owner)) { // the home step: the front's dK, dV here, the block's in sh
        Tensor *hk = nd->in[1], *hv = nd->in[2];
        real *dk = arena_alloc(a, 2 * hk->size * sizeof(real)), *dv = dk + hk->size;
        zero_bytes(dk, 2 * hk->size * sizeof(real));
        attention_kernel_backward(a, b->dq, dk, dv, dout, o, lse, q, with_front(a, g, hk->data, k, owner),
                                  with_front(a, g, hv->data, v, owner), g->front_mask + (size_t)owner * g->nq,
                                  block_segments(g, owner), g->B, g->nq, g->R + g->n, g->H, g->dh);
        own_block(g, sh->d, dk, true), own_block(g, sh->d + g->blk, dv, true);
        size_t pitch = hk->size / g->B, width = pitch - g->blk / g->B;
        if (b->dk) RUN(a->device, add_rows, b->dk, pitch, dk, pitch, width, g->B);
        if (b->dv) RUN(a->device, add_rows, b->dv, pitch, dv, pitch, width, g->B);
        return;
    }
    if (b->os) { // ring-block-delta: the row term from the visiting block's partial output
        block_forward(a, g, b->os, b->os + (size_t)g->B * g->nq * g->H * g->dh, q, k, v, owner);
        o = b->os;
    }
    attention_kernel_backward(a, b->dq, keep_here ? b->dk : sh->d, keep_here ? b->dv : sh->d + g->blk, dout, o,
                              lse, q, k, v, block_mask(g, owner), block_segments(g, owner), g->B, g->nq, g->n,
                              g->H, g->dh);
}

// This rank's own block, every rank's share summed in sh, into k's and v's gradients: the shares
// themselves, or under --exact their sums (with those kept here) rounded, dQ's rounded on the way
static void backward_end(Arena *a, const Ring *g, Backward *b, Shares *sh) {
    size_t blk = g->blk;
    const real *d = sh->d;
    size_t row = blk / g->B, pitch = row + (size_t)g->R * g->H * g->dh, front = pitch - row; // the block's rows
    if (g->exact && g->R) { // dQ's rows, the caption's and the image's; the caption's dK, dV summed over the ring
        if (b->dq) exact_add_rows(a, b->dq + front, pitch, &b->q, row, row, g->B);
        if (b->dq) exact_add_rows(a, b->dq, pitch, &b->qt, (size_t)g->Rp * g->H * g->dh, front, g->B);
        comm_all_reduce_sums(g->c, &b->front.k, b->front.k.n), comm_all_reduce_sums(g->c, &b->front.v, b->front.v.n);
        if (b->dk) exact_add_rows(a, b->dk, pitch, &b->front.k, (size_t)g->Rp * g->H * g->dh, front, g->B);
        if (b->dv) exact_add_rows(a, b->dv, pitch, &b->front.v, (size_t)g->Rp * g->H * g->dh, front, g->B);
    } else if (g->exact && b->dq) exact_add_into(b->dq, &b->q, 0, blk, a);
    if (g->exact) {
        if (g->bugs & BUG_RING_DKV_NOT_RETURNED) exact_merge(&sh->k, 0, &b->kept.k), exact_merge(&sh->v, 0, &b->kept.v);
        real *host = arena_alloc(arena_host(a), 2 * blk * sizeof(real));
        exact_result(host, &sh->k, 0, blk), exact_result(host + blk, &sh->v, 0, blk);
        d = op_input(a, host, 2 * blk * sizeof(real));
    }
    if (b->dk) RUN(a->device, add_rows, b->dk + front, pitch, d, row, row, g->B);
    if (b->dv) RUN(a->device, add_rows, b->dv + front, pitch, d + blk, row, row, g->B);
}

static void ring_bwd(Node *nd) {
    const Ring *g = nd->ptr;
    Comm *c = g->c;
    Arena *a = nd->arena;
    int P = c->size, r = c->rank;
    size_t two = 2 * g->blk;
    Backward b = {.dq = node_grad(nd, 0), .dk = node_grad(nd, 1), .dv = node_grad(nd, 2)}; // before the mark
    ArenaMarks mark = arena_marks(a);
    bool kept = g->bugs & BUG_RING_DKV_NOT_RETURNED, delta = g->bugs & BUG_RING_BLOCK_DELTA;
    if (g->exact) b.q = exact_sums(a, g->blk);
    if (g->exact && g->R) { // the image's and the caption's rows apart
        size_t D = (size_t)g->H * g->dh, row = (size_t)g->nq * D, li = (size_t)g->B * g->H * g->n;
        const real *o = nd->out->data, *go = nd->out->grad;
        b.oi = exact_take_rows(a, o, row, g->R, g->B, g->n, g->n, D), b.ot = exact_take_rows(a, o, row, 0, g->B, g->R, g->Rp, D);
        b.gi = exact_take_rows(a, go, row, g->R, g->B, g->n, g->n, D), b.gt = exact_take_rows(a, go, row, 0, g->B, g->R, g->Rp, D);
        b.li = nd->saved->data, b.lt = nd->saved->data + li;
        size_t tk = (size_t)g->B * g->Rp * D;
        b.qt = exact_sums(a, tk);
        char *mem = arena_alloc(arena_host(a), 2 * exact_bytes(tk)); // zeroed
        b.front = (Shares){.k = exact_view_zeroed(mem, tk), .v = exact_view_zeroed(mem + exact_bytes(tk), tk)};
    }
    if (g->exact && kept) b.kept = shares_new(a, g);
    if (!g->exact && delta) b.os = arena_alloc(a, (size_t)g->B * g->nq * (g->H * g->dh + g->H) * sizeof(real));
    // K V of the visiting block and of the next; this rank's share of the visiting block, the
    // last step's (on its way on), and the earlier ranks' sum arriving for this one
    real *cur = arena_alloc(a, 2 * two * sizeof(real)), *next = cur + two;
    uint16_t *wire = travel_wire(a, g->bf16, g), *dwire = travel_wire(a, g->bf16_grads, g);
    Shares share = shares_new(a, g), sent = shares_new(a, g), sums = shares_new(a, g);
    bool stale = g->bugs & BUG_RING_STALE_KV;
    copy_bytes(cur, nd->saved->data + g->lsize, two * sizeof(real)); // the last K, V
    real *own = stale ? arena_alloc(a, two * sizeof(real)) : NULL; // ring-stale-kv: this rank's block
    if (own) own_block(g, own, nd->in[1]->data, true), own_block(g, own + g->blk, nd->in[2]->data, true);
    CommShift dkv; // the last step's sums on their way on, this step's arriving
    for (int s = 0; s < P; s++) { // block of rank r + 1 + s: the last is this rank's own
        int owner = (r + 1 + s) % P;
        bool keep_here = (g->bugs & BUG_RING_DKV_NOT_RETURNED) && owner != r;
        Travel kv; // K and V travel on while this step works on them
        if (s < P - 1) travel_start(a, g, &kv, wire, next, cur, -1);
        // under ring-stale-kv every step recomputes against this rank's own block
        const real *k = stale ? own : cur, *v = stale ? own + g->blk : cur + g->blk;
        if (s) shares_clear(g, &share);
        backward_step(nd, g, &b, &share, keep_here, k, v, owner);
        if (s) { // the earlier ranks' sum arrived while this share was computed: added to it
            shares_arrive(a, g, &dkv, dwire, &sums);
            shares_add(a, g, &share, &sums);
        }
        if (s == P - 1) break;
        int way = g->bugs & BUG_RING_DKV_AGAINST ? 1 : -1; // with its block, or (the bug) against it
        shares_send(a, g, &dkv, dwire, &sums, &share, way); // travels during the next step
        travel_wait(a, g, &kv);
        real *t = cur;
        cur = next, next = t;
        Shares u = share;
        share = sent, sent = u;
    }
    backward_end(a, g, &b, &share);
    arena_release_marks(a, mark);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    if (sp->context) // joint attention: the caption in front (seg: the joint images)
        return ring_attention(tp, sp->comm, q, k, v, heads, sp_key_mask(sp),
                              sp_joint_images(tp->arena, sp, seg, q->shape[0], q->shape[1] - sp->shard.n),
                              q->shape[1] - sp->shard.n, sp->bugs);
    return ring_attention(tp, sp->comm, q, k, v, heads, sp_key_mask(sp), sp_images(sp, seg), 0, sp->bugs);
}

// P - 1 steps, each one message: K and V of B n tokens forward, K, V, dK and dV backward
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double P = sp->shard.P, w = sp_wire(sp), gw = sp_grad_wire(sp);
    return (SpTraffic){(backward ? 2 * w + 2 * gw : 2 * w) * (P - 1) * B * sp->shard.n * c->hidden_size, P - 1};
}

const SpLayout sp_ring = {"ring", "K/V blocks travel the ring; one other rank's block at a time", validate, step_bytes, traffic, attend, .overlaps = true, .ring_path = true};
