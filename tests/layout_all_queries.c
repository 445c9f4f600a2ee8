// layout_all_queries.c: a layout compiled only into the test build (the Makefile's testlayout
// train, with -DSP_TEST_LAYOUT=sp_all_queries for parallel/layouts/layouts.c), which shows that a new layout
// is this one file and one row of the table: every rank all-gathers Q, K and V along the sequence,
// attends all T_pad queries to all keys, and keeps its own rows of the output. P times the work of
// one rank for nothing, but right: verify at 2 and 3 ranks agrees with one rank
// (tests/layout_test.sh). No --exact path and no front tokens (in-context, joint attention).
#include "../core/check.h"
#include "../parallel/transport/autograd_collectives.h"
#include "../parallel/layouts/row.h"
#include "../parallel/layouts/shared.h"
#include <stdio.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)heads, (void)P;
    if (o->exact) return snprintf(buf, len, "--sp-attention all-queries has no --exact path; drop --exact"), buf;
    return NULL;
}

// kept: Q, K and V gathered, the output of all queries and its log-sum-exp, this rank's rows;
// transient: a gather's rank-major blocks (in backward a reduce-scatter's, and its result)
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double n = sp->shard.n, T = sp->shard.T_pad, D = c->hidden_size, H = c->num_heads;
    AttnMemory m = {.kept = 4 * T * D + H * T + n * D, .transient = T * D + n * D, .joint_held = 8,
                    .queries = (int)T, .keys = (int)T};
    return dit_step_bytes(c, B, sp->shard.n, m, sp_step(sp, backward));
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg, void *ctx) {
    SeqParallel *sp = ctx;
    CHECK(!sp->context && !tp->exact, "all-queries: no front tokens, no --exact");
    Tensor *o = attention(tp, seq_all_gather(tp, sp->comm, q), seq_all_gather(tp, sp->comm, k),
                          seq_all_gather(tp, sp->comm, v), heads, sp_key_mask(sp), sp_segments(sp, seg, 0, 0));
    return dit_tokens_of(tp, o, sp->shard.t0, sp->shard.n);
}

// forward all-gathers Q, K and V, backward reduce-scatters their gradients
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    (void)backward;
    double P = sp->shard.P;
    return (SpTraffic){3 * (P - 1) * B * sp->shard.n * c->hidden_size, 3 * (P - 1)};
}

const SpLayout sp_all_queries = {"all-queries", "Q, K and V gathered, a rank's rows kept; the test build's", validate, step_bytes, traffic, attend, .reduce_scatters_kv = true};
