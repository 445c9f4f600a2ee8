// hybrid.c: the hybrid layout (USP, see layouts.h): Q, K and V go all-to-all over this rank's head
// group (U consecutive ranks), so each rank holds the U shards' tokens for its share of the heads
// (the first H mod U ranks of a group one more); those blocks run ring attention (ring.c) over the
// P/U head groups, whose ranks at one place hold the same heads; the output comes back
// all-to-all. The ring-* bugs apply to its ring.
#include "../transport/autograd_collectives.h"
#include "hybrid.h"
#include "shared.h"
#include "all_to_all.h"
#include "ring.h"
#include <stdio.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    int U = o->ulysses;
    if (U < 1)
        return snprintf(buf, len, "--sp-attention hybrid needs --ulysses-degree U: the ranks per "
                        "all-to-all group, a divisor of the %d sequence-parallel ranks and at most "
                        "the %d heads", P, heads), buf;
    if (P % U)
        return snprintf(buf, len, "--ulysses-degree %d must divide the %d sequence-parallel ranks; "
                        "pick a divisor of %d", U, P, P), buf;
    if (U > heads)
        return snprintf(buf, len, "--ulysses-degree %d splits the %d heads over %d ranks, fewer "
                        "heads than ranks; pick a --ulysses-degree that divides %d and is at most "
                        "%d, or use --sp-attention ring or gather", U, heads, U, P, heads), buf;
    return NULL;
}

// kept: Q, K, V and the output in the head shard (U n tokens, the columns of the most heads a
// rank holds, ceil(H/U); under bf16 the output's rounded copy too), the ring's log-sum-exp and last
// K/V block, the output back in the token shard; transient: the ring's travelling blocks and partial output (more than an exchange's
// buffers)
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    // joint attention: the caption's R tokens in front of the U n (their heads), joined, and their
    // output's copies
    double D = c->hidden_size, n = sp->shard.n, R = dit_front_tokens(c), Un = sp->ulysses * n + R;
    double h = seq_heads(c->num_heads, sp->ulysses, 0), Dh = h * D / c->num_heads;
    AttnMemory m = {.kept = 6 * Un * Dh + h * Un + n * D, .transient = 5 * Un * Dh + h * Un,
                    .joint_held = 8, .queries = (int)Un, .keys = (int)Un};
    // the output rounded for its return (seq_output_to_tokens), in float (dit_bf16_bytes counts the
    // projection's input, stored in 2 bytes)
    m.kept += sp->bf16 * Un * Dh;
    m.kept += (R > 0) * (6 * Un * Dh + (sp->ulysses + 1) * R * Dh + 2 * R * D);
    m.transient += (R > 0) * 2 * Un * Dh; // the home step's dK, dV
    if (sp->bugs & BUG_RING_BLOCK_DELTA) m.transient += Un * Dh + h * Un; // a partial output
    return dit_step_bytes(c, B, sp->shard.n, m, sp_step(sp, backward));
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    Comm *h = sp->heads;
    int R = sp->context ? q->shape[1] - sp->shard.n : 0, mine = seq_heads(heads, h->size, h->rank);
    if (R) // joint attention: the caption in front (seg: the joint images), its heads taken here
        return seq_front_from_heads(tp, h, ring_attention(tp, sp->ring, seq_front_to_heads(tp, h, q, R, heads, tp->exact),
                                                          seq_front_to_heads(tp, h, k, R, heads, tp->exact),
                                                          seq_front_to_heads(tp, h, v, R, heads, tp->exact), mine,
                                                          sp_key_mask(sp), sp_joint_images(tp->arena, sp, seg, q->shape[0], R),
                                                          R, sp->bugs), R, heads, tp->exact);
    Tensor *o = ring_attention(tp, sp->ring, seq_all_to_all(tp, h, q, heads, TO_HEAD_SHARD),
                               seq_all_to_all(tp, h, k, heads, TO_HEAD_SHARD),
                               seq_all_to_all(tp, h, v, heads, TO_HEAD_SHARD), mine, sp_key_mask(sp),
                               sp_images(sp, seg), 0, sp->bugs);
    return seq_output_to_tokens(tp, h, o, heads);
}

// the all-to-all layout's exchanges over the U ranks of the head group, and the ring's P/U - 1
// steps of blocks of U n rows of this rank's heads (K and V forward, K, V, dK and dV backward)
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    int U = sp->ulysses, u = sp->shard.rank % U, H = c->num_heads, dh = c->hidden_size / H;
    double rows = (double)B * sp->shard.n, steps = sp->shard.P / U - 1;
    double heads = seq_all_to_all_values(H, U, u, rows, dh, TO_HEAD_SHARD);
    double tokens = seq_all_to_all_values(H, U, u, rows, dh, TO_TOKEN_SHARD);
    double block = U * rows * dh * seq_heads(H, U, u);
    // joint attention: the caption's output heads to every rank of the head group, and their
    // gradients back (its K and V never move)
    double front = (double)B * dit_front_tokens(c);
    double out = seq_all_to_all_values(H, U, u, front, dh, TO_TOKEN_SHARD);
    double back = seq_all_to_all_values(H, U, u, front, dh, TO_HEAD_SHARD);
    // Q, K and V to the heads, K and V round the ring, the output back; their gradients
    double w = sp_wire(sp), gw = sp_grad_wire(sp);
    return (SpTraffic){(backward ? gw * (heads + 3 * tokens + back) + (2 * w + 2 * gw) * steps * block
                                 : w * (3 * heads + 2 * steps * block + tokens + out)),
                       (4.0 + (front > 0)) * (U - 1) + steps};
}

// a head group's ranks attend its shards' queries for their heads
static int head_group(const SeqParallel *sp) { return sp->ulysses; }

// U strictly between 1 and P (U = 1 is the ring, U = P the all-to-all), dividing P
static int degrees(int P, int *U, int max) {
    int n = 0;
    for (int u = 2; u < P && n < max; u++)
        if (P % u == 0) U[n++] = u;
    return n;
}

const SpLayout sp_hybrid = {"hybrid", "all-to-all in groups of --ulysses-degree, ring across", validate, step_bytes, traffic, attend, head_group, degrees, .ring_path = true};
