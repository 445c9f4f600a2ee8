// gather.c: the gather layout (see layouts.h): K and V all-gathered along the sequence, local queries
// against all T_pad keys, the output the local shard. The local-kv, no-dkv-reduce-scatter and
// wrong-restore bugs are code paths of this file.
#include "../../core/check.h"
#include "../../kernels/run.h"
#include "../transport/autograd_collectives.h"
#include "gather.h"
#include "shared.h"
#include <stdio.h>

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o, (void)heads, (void)P, (void)buf, (void)len;
    return NULL; // any heads over any ranks
}

// kept: K and V gathered, the output and its log-sum-exp (under wrong-restore: Q gathered too, and
// the output of all queries); transient: the gather's rank-major blocks, or in backward the
// reduce-scatter's blocks and its result
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    // in-context: the conditioning tokens among the queries and the keys
    double n = sp->shard.n + dit_front_tokens(c), T = sp->shard.T_pad + dit_front_tokens(c);
    double D = c->hidden_size, H = c->num_heads;
    AttnMemory m = {.kept = 2 * T * D + n * D + H * n, .transient = T * D + n * D,
                    .joint_held = 8, .queries = (int)n, .keys = (int)T};
    m.kept += 2 * sp->shard.T_pad * D * (dit_front_tokens(c) > 0); // in-context: K, V gathered, then joined
    if (sp->bugs & BUG_WRONG_RESTORE) m.kept += 2 * T * D + H * T, m.queries = sp->shard.T_pad;
    return dit_step_bytes(c, B, sp->shard.n, m, sp_step(sp, backward));
}

// The no-dkv-reduce-scatter bug: the all-gather's backward keeps this rank's own rows of the
// gradient instead of summing every rank's share onto them
static void keep_local_rows_bwd(Node *nd) {
    const Comm *c = nd->ptr;
    real *dx = node_grad(nd, 0);
    int B = nd->iarg[0], n = nd->iarg[1], D = nd->iarg[2];
    size_t row = (size_t)n * D;
    if (dx) RUN(nd->arena->device, add_rows, dx, row, nd->out->grad + c->rank * row, c->size * row, row, B);
}

// K or V of every rank. Under --exact gathered off the tape: attention_exact sends dK and dV of
// all keys back through the all-gather's backward itself, as exact sums (reduce_scatter_exact)
static Tensor *gather(Tape *tp, SeqParallel *sp, Tensor *x) {
    bool grad = tp->grad_enabled;
    tp->grad_enabled = grad && !tp->exact;
    Tensor *all = seq_all_gather(tp, sp->comm, x);
    tp->grad_enabled = grad;
    if ((sp->bugs & BUG_NO_DKV_REDUCE_SCATTER) && all->requires_grad)
        tp->nodes[tp->n - 1].backward = keep_local_rows_bwd;
    return all;
}

// The wrong-restore bug: the output of all queries "restored" as rows [0, n) instead of this
// rank's rows [t0, t0 + n); the rows are added to zeros so that the result is an op's output
// (a tensor a watched tape can name), not a view
static Tensor *wrong_restore(Tape *tp, Tensor *o_all, Tensor *q, int n) {
    Tensor *flat = tensor_reshape(tp->arena, o_all, 2, (int[]){o_all->shape[0], o_all->shape[1] * o_all->shape[2]});
    Tensor *rows = slice_last(tp, flat, 0, n * q->shape[2]);
    return add(tp, tensor_reshape(tp->arena, rows, 3, q->shape), tensor_new(tp->arena, 3, 1, n, q->shape[2]));
}

// --exact: the all-gather's backward for dK and dV of all keys as exact sums
static void reduce_scatter_exact(Arena *a, real *d, const ExactSum *d_all, int B, int n, int D, void *ctx) {
    seq_reduce_scatter_sums(((SeqParallel *)ctx)->comm, a, d, d_all, B, n, D);
}

// q attends to every rank's keys k_all and values v_all (this rank's k and v among them from
// token t0 on), the queries' and keys' images as in `images`
static Tensor *attend_all(Tape *tp, SeqParallel *sp, Tensor *q, Tensor *k, Tensor *v, Tensor *k_all,
                          Tensor *v_all, int heads, Segments images) {
    const uint8_t *mask = sp_key_mask(sp);
    if (!tp->exact) return attention(tp, q, k_all, v_all, heads, mask, images);
    ExactReduceFn reduce = (sp->bugs & BUG_NO_DKV_REDUCE_SCATTER) ? NULL : reduce_scatter_exact;
    return attention_exact(tp, q, k, v, k_all, v_all, sp->shard.t0, heads, mask, images, reduce, sp);
}

// The local-kv bug: local queries against local keys, long-range lost
static Tensor *local_kv(Tape *tp, SeqParallel *sp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg) {
    int t0 = sp->shard.t0;
    const uint8_t *mask = sp_key_mask(sp);
    if (mask) mask += t0;
    if (!tp->exact) return attention(tp, q, k, v, heads, mask, sp_segments(sp, seg, t0, t0));
    Segments local = sp_segments(sp, seg, 0, 0); // --exact: keys from token 0, each row's ids from t0
    if (local.id) local.id += t0;
    return attention_exact(tp, q, k, v, k, v, 0, heads, mask, local, NULL, NULL);
}

// In-context conditioning or joint attention: q, k, v (B, R + n, D), the R tokens that every rank
// holds first (context.h); the keys and values are theirs, once, then the gathered ones of every rank's
// tokens. Every rank attends with the R front queries too, over all keys: their output is the same
// on every rank. ids: joint attention's images (AttendFn), or NULL.
static Tensor *attend_in_context(Tape *tp, SeqParallel *sp, Tensor *q, Tensor *k, Tensor *v, int heads,
                                 const int32_t *ids) {
    int B = q->shape[0], n = sp->shard.n, R = q->shape[1] - n, T = sp->shard.T_pad;
    ids = sp_joint_images(tp->arena, sp, ids, B, R);
    if (tp->exact) { // joint attention: the image keys gathered off the tape (as attend_all's)
        Tensor *k_all = gather(tp, sp, dit_tokens_of(tp, k, R, n)), *v_all = gather(tp, sp, dit_tokens_of(tp, v, R, n));
        ExactReduceFn reduce = (sp->bugs & BUG_NO_DKV_REDUCE_SCATTER) ? NULL : reduce_scatter_exact;
        return attention_joint_exact(tp, q, k, v, R, 1, k_all, v_all, sp->shard.t0, heads, sp_host_key_mask(sp), ids,
                                     reduce, sp_sum_group, sp);
    }
    Tensor *k_all = dit_join_tokens(tp, dit_tokens_of(tp, k, 0, R), gather(tp, sp, dit_tokens_of(tp, k, R, n)));
    Tensor *v_all = dit_join_tokens(tp, dit_tokens_of(tp, v, 0, R), gather(tp, sp, dit_tokens_of(tp, v, R, n)));
    Segments caption = ids ? dit_joint_segments(tp->arena, ids, B, R, T, sp->shard.t0, n, 1, 0, T) : NO_SEGMENTS;
    return attention(tp, q, k_all, v_all, heads, sp_front_mask(tp->arena, sp, R), caption);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    const SeqShard *s = &sp->shard;
    if (sp->context) return attend_in_context(tp, sp, q, k, v, heads, seg);
    if (sp->bugs & BUG_LOCAL_KV) return local_kv(tp, sp, q, k, v, heads, seg);
    Tensor *k_all = gather(tp, sp, k), *v_all = gather(tp, sp, v);
    if (!(sp->bugs & BUG_WRONG_RESTORE))
        return attend_all(tp, sp, q, k, v, k_all, v_all, heads, sp_segments(sp, seg, s->t0, 0));
    // all queries attend, and the output is "restored" as rows [0, n) instead of this rank's rows
    // [t0, t0 + n)
    Tensor *o_all = attend_all(tp, sp, seq_all_gather(tp, sp->comm, q), k, v, k_all, v_all, heads,
                               sp_segments(sp, seg, 0, 0));
    return wrong_restore(tp, o_all, q, s->n);
}

// forward all-gathers K and V (P - 1 shards of B n D each, one ring step per shard), backward
// reduce-scatters their gradients the same way
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    double P = sp->shard.P, w = backward ? sp_grad_wire(sp) : sp_wire(sp); // K and V forward, dK and dV backward
    return (SpTraffic){w * 2 * (P - 1) * B * sp->shard.n * c->hidden_size, 2 * (P - 1)};
}

const SpLayout sp_gather = {"gather", "all-gather K/V", validate, step_bytes, traffic, attend, .reduce_scatters_kv = true,
                             .in_context = true};
