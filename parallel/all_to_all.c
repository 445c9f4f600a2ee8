// all_to_all.c: the all-to-all layout (DeepSpeed-Ulysses, see sp.h): Q, K and V from the token
// shard to a head shard, attention on this rank's heads over all T_pad tokens, the output back to
// the token shard. The heads need not divide: the first H mod P ranks take one more.
#include "autograd_collectives.h"
#include "sp.h"
#include <stdio.h>
#include <string.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o;
    if (heads >= P) return NULL;
    snprintf(buf, len, "--sp-attention all-to-all splits the %d heads over %d ranks, fewer heads "
             "than ranks; use --sp-attention gather or ring, or hybrid with a --ulysses-degree "
             "that divides %d and is at most %d", heads, P, P, heads);
    return buf;
}

// kept: Q, K, V and the output in the head shard (all T_pad tokens, the columns of the most heads
// a rank holds, ceil(H/P)), their log-sum-exp, the output back in the token shard; transient: an
// exchange's send and receive buffers
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    // in-context: every rank's conditioning tokens among the queries, and (under the
    // ulysses-replicated-kv bug) among the keys
    double P = sp->shard.P, R = sp->context, n = sp->shard.n + R, T = sp->shard.T_pad + P * R;
    double D = c->hidden_size;
    double h = seq_heads(c->num_heads, sp->shard.P, 0), Dh = h * D / c->num_heads;
    AttnMemory m = {.kept = 4 * T * Dh + h * T + n * D, .transient = n * D + T * Dh,
                    .queries = (int)T, .keys = (int)T};
    m.kept += 2 * sp->shard.T_pad * Dh * (R > 0); // in-context: K, V exchanged, then joined
    // the cross-kv-all-to-all bug: the caption's K and V joined copy by copy, 2, 3, ..., P copies
    if ((sp->bugs & BUG_CROSS_KV_ALL_TO_ALL) && c->text) m.kept += 2 * c->text_len * D * (P * (P + 1) / 2 - 1);
    return dit_step_bytes(c, B, sp->shard.n, m, sp_pass(sp, backward));
}

// In-context: q, k, v (B, R + n, D), the R conditioning tokens that every rank holds first. Every
// rank's queries go to the head shard, so each gets its own back; the keys and values are this
// rank's heads of the conditioning tokens, then the exchanged ones of every rank's tokens. Under
// the ulysses-replicated-kv bug the conditioning tokens' K/V are exchanged with the others, so
// the head shard holds every rank's copy of them: P times.
static Tensor *attend_in_context(Tape *tp, SeqParallel *sp, Tensor *q, Tensor *k, Tensor *v, int heads) {
    Comm *c = sp->comm;
    int R = sp->context, n = sp->shard.n, P = c->size, h = seq_heads(heads, P, c->rank);
    int dh = q->shape[2] / heads, first = seq_first_head(heads, P, c->rank) * dh;
    Tensor *qh = seq_all_to_all(tp, c, q, heads, TO_HEAD_SHARD), *kh, *vh;
    const uint8_t *mask = sp_context_mask(sp);
    if (sp->bugs & BUG_ULYSSES_REPLICATED_KV) {
        kh = seq_all_to_all(tp, c, k, heads, TO_HEAD_SHARD);
        vh = seq_all_to_all(tp, c, v, heads, TO_HEAD_SHARD);
        uint8_t *each = mask ? arena_alloc(arena_host(tp->arena), (size_t)P * (R + n)) : NULL;
        for (int r = 0; each && r < P; r++) // rank r's copy of the conditioning tokens, its tokens
            memset(each + (size_t)r * (R + n), 1, (size_t)R),
            memcpy(each + (size_t)r * (R + n) + R, mask + R + (size_t)r * n, (size_t)n);
        mask = each;
    } else {
        kh = dit_join_tokens(tp, slice_last(tp, dit_tokens_of(tp, k, 0, R), first, h * dh),
                             seq_all_to_all(tp, c, dit_tokens_of(tp, k, R, n), heads, TO_HEAD_SHARD));
        vh = dit_join_tokens(tp, slice_last(tp, dit_tokens_of(tp, v, 0, R), first, h * dh),
                             seq_all_to_all(tp, c, dit_tokens_of(tp, v, R, n), heads, TO_HEAD_SHARD));
    }
    return seq_all_to_all(tp, c, attention(tp, qh, kh, vh, h, mask, NO_SEGMENTS), heads, TO_TOKEN_SHARD);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    if (sp->context) return attend_in_context(tp, sp, q, k, v, heads);
    Comm *c = sp->comm;
    Tensor *qh = seq_all_to_all(tp, c, q, heads, TO_HEAD_SHARD);
    Tensor *kh = sp->bugs & BUG_KNORM_GRAD_EARLY ? seq_all_to_all_early(tp, c, k, heads)
                                                 : seq_all_to_all(tp, c, k, heads, TO_HEAD_SHARD);
    Tensor *vh = seq_all_to_all(tp, c, v, heads, TO_HEAD_SHARD);
    int h = seq_heads(heads, c->size, c->rank);
    // --exact: every key of these heads is here, so dK and dV need no reduction
    Segments images = sp_segments(sp, seg, 0, 0);
    Tensor *o = tp->exact ? attention_exact(tp, qh, kh, vh, kh, vh, 0, h, sp_key_mask(sp), images, NULL, NULL)
                          : attention(tp, qh, kh, vh, h, sp_key_mask(sp), images);
    return seq_all_to_all(tp, c, o, heads, TO_TOKEN_SHARD);
}

// forward: Q, K and V to the head shard and the output back; backward: the output's gradient to
// the head shard and dQ, dK, dV back; each exchange one message to each of the P - 1 others.
// In-context: the queries and the output have the conditioning tokens too (K and V too under
// the ulysses-replicated-kv bug).
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    int P = sp->shard.P, r = sp->shard.rank, H = c->num_heads, dh = c->hidden_size / H;
    double R = sp->context, kv = (double)B * (sp->shard.n + (sp->bugs & BUG_ULYSSES_REPLICATED_KV ? R : 0));
    double q = (double)B * (sp->shard.n + R);
    double q_heads = seq_all_to_all_values(H, P, r, q, dh, TO_HEAD_SHARD);
    double q_tokens = seq_all_to_all_values(H, P, r, q, dh, TO_TOKEN_SHARD);
    double kv_heads = seq_all_to_all_values(H, P, r, kv, dh, TO_HEAD_SHARD);
    double kv_tokens = seq_all_to_all_values(H, P, r, kv, dh, TO_TOKEN_SHARD);
    return (SpTraffic){backward ? q_heads + q_tokens + 2 * kv_tokens : q_heads + 2 * kv_heads + q_tokens,
                       4.0 * (P - 1)};
}

const SpLayout sp_all_to_all = {"all-to-all", validate, step_bytes, traffic, attend};
