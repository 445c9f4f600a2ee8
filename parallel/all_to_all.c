// all_to_all.c: the all-to-all layout (DeepSpeed-Ulysses, see sp.h): Q, K and V from the token
// shard to a head shard, attention on this rank's heads over all T_pad tokens, the output back to
// the token shard.
#include "../core/check.h"
#include "collectives.h"
#include "sp.h"
#include <stdio.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o;
    if (heads % P == 0) return NULL;
    snprintf(buf, len, "all-to-all attention splits the %d heads over %d ranks, which does not "
             "divide them; use a rank count that divides the heads, or --sp-attention gather",
             heads, P);
    return buf;
}

// kept: Q, K, V and the output in the head shard (all T_pad tokens, D/P columns), their
// log-sum-exp, the output back in the token shard; transient: an exchange's send and receive
// buffers
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double n = sp->shard.n, T = sp->shard.T_pad, D = c->hidden_size, H = c->num_heads, P = sp->shard.P;
    AttnMemory m = {.kept = 4 * T * D / P + H / P * T + n * D, .transient = 2 * n * D,
                    .queries = sp->shard.T_pad, .keys = sp->shard.T_pad};
    return dit_step_bytes(c, B, sp->shard.n, m, backward);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, void *ctx) {
    SeqParallel *sp = ctx;
    Comm *c = sp->comm;
    CHECK(heads % c->size == 0, "all-to-all attention: %d heads over %d ranks", heads, c->size);
    Tensor *o = attention(tp, seq_all_to_all(tp, c, q, TO_HEAD_SHARD),
                          seq_all_to_all(tp, c, k, TO_HEAD_SHARD),
                          seq_all_to_all(tp, c, v, TO_HEAD_SHARD), heads / c->size, sp_key_mask(sp));
    return seq_all_to_all(tp, c, o, TO_TOKEN_SHARD);
}

const SpLayout sp_all_to_all = {"all-to-all", validate, step_bytes, attend};
