// hybrid.c: the hybrid layout (USP, see sp.h): Q, K and V go all-to-all over this rank's head
// group (U consecutive ranks), so each rank holds the U shards' tokens for H/U heads; those blocks
// run ring attention (ring.c) over the P/U head groups; the output comes back all-to-all. The
// ring-* bugs apply to its ring.
#include "collectives.h"
#include "sp.h"
#include <stdio.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    int U = o->ulysses;
    if (U < 1)
        return snprintf(buf, len, "--sp-attention hybrid needs --ulysses-degree U: the ranks per "
                        "all-to-all group, a divisor of both the %d sequence-parallel ranks and the "
                        "%d heads", P, heads), buf;
    if (P % U || heads % U)
        return snprintf(buf, len, "--ulysses-degree %d must divide both the %d sequence-parallel "
                        "ranks and the %d heads; pick a divisor of both", U, P, heads), buf;
    return NULL;
}

// kept: Q, K, V and the output in the head shard (U n tokens, D/U columns), the ring's
// log-sum-exp and last K/V block, the output back in the token shard; transient: the ring's
// travelling blocks and partial output, or an exchange's buffers
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double n = sp->shard.n, D = c->hidden_size, H = c->num_heads;
    int U = sp->ulysses;
    AttnMemory m = {.kept = 7 * n * D + H * n, .transient = 5 * n * D + H * n,
                    .queries = U * sp->shard.n, .keys = U * sp->shard.n};
    if (sp->bugs & BUG_RING_BLOCK_DELTA) m.transient += n * D + H * n; // a block's partial output
    return dit_step_bytes(c, B, sp->shard.n, m, backward);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, void *ctx) {
    SeqParallel *sp = ctx;
    Comm *h = sp->heads;
    Tensor *o = ring_attention(tp, sp->ring, seq_all_to_all(tp, h, q, TO_HEAD_SHARD),
                               seq_all_to_all(tp, h, k, TO_HEAD_SHARD),
                               seq_all_to_all(tp, h, v, TO_HEAD_SHARD), heads / h->size,
                               sp_key_mask(sp), sp->bugs);
    return seq_all_to_all(tp, h, o, TO_TOKEN_SHARD);
}

const SpLayout sp_hybrid = {"hybrid", validate, step_bytes, attend};
