// all_to_all.c: the all-to-all layout (DeepSpeed-Ulysses, see layouts.h): Q, K and V from the token
// shard to a head shard, attention on this rank's heads over all T_pad tokens, the output back to
// the token shard. The heads need not divide: the first H mod P ranks take one more.
#include "../transport/autograd_collectives.h"
#include "all_to_all.h"
#include "shared.h"
#include "../../core/device.h"
#include "../../kernels/run.h"
#include <stdio.h>
#include <string.h>

// the bugs that exchange the tokens every rank holds in front with the shard's
#define BUGS_REPLICATED (BUG_ULYSSES_REPLICATED_KV | BUG_JOINT_TEXT_REPLICATED)

static const char *validate(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    (void)o;
    if (heads >= P) return NULL;
    snprintf(buf, len, "--sp-attention all-to-all splits the %d heads over %d ranks, fewer heads "
             "than ranks; use --sp-attention gather or ring, or hybrid with a --ulysses-degree "
             "that divides %d and is at most %d", heads, P, P, heads);
    return buf;
}

// kept: Q, K, V and the output in the head shard (all T_pad tokens and the R front tokens, the
// columns of the most heads a rank holds, ceil(H/P); under bf16 the output's rounded copy for its
// return too, in float: dit_bf16_bytes counts the one the projection takes, stored in 2 bytes),
// their log-sum-exp, the output back in the
// token shard and the front tokens' copies; transient: an exchange's send and receive buffers
static size_t step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    // under the ulysses-replicated-kv bug every rank's front tokens among the keys
    double P = sp->shard.P, R = dit_front_tokens(c), n = sp->shard.n + R, T = sp->shard.T_pad + R;
    double keys = sp->bugs & BUGS_REPLICATED ? P * n : T;
    double D = c->hidden_size;
    double h = seq_heads(c->num_heads, sp->shard.P, 0), Dh = h * D / c->num_heads;
    AttnMemory m = {.kept = 2 * T * Dh + 2 * keys * Dh + h * T + n * D + sp->bf16 * T * Dh,
                    .transient = n * D + keys * Dh, .joint_held = 10, .queries = (int)T, .keys = (int)keys};
    m.kept += (R > 0) * (3 * sp->shard.T_pad * Dh + 2 * (P + 1) * R * Dh + 4 * R * D); // joined, copies
    // the cross-kv-all-to-all bug: the caption's K and V joined copy by copy, 2, 3, ..., P copies
    if ((sp->bugs & BUG_CROSS_KV_ALL_TO_ALL) && c->text) m.kept += 2 * c->text_len * D * (P * (P + 1) / 2 - 1);
    return dit_step_bytes(c, B, sp->shard.n, m, sp_step(sp, backward));
}

// whole_grads (--exact): the front's gradient, whole on every rank, summed over c's ranks, each of
// which holds its own heads' columns of it and zeros elsewhere (so the sum is exact)
static void sum_grads_bwd(Node *nd) {
    real *dx = node_grad(nd, 0), *g = nd->out->grad;
    size_t n = nd->out->size;
    if (!dx) return;
    comm_all_reduce((Comm *)nd->ptr, COMM_REAL, g, n);
    RUN(nd->arena->device, add_rows, dx, n, g, n, n, 1);
}

Tensor *seq_front_to_heads(Tape *tp, Comm *c, Tensor *x, int R, int heads, bool whole_grads) {
    int n = x->shape[1] - R, h = seq_heads(heads, c->size, c->rank), dh = x->shape[2] / heads;
    int first = seq_first_head(heads, c->size, c->rank) * dh;
    // the shard exchanged first, then the front taken: the order whose arena peak the estimate holds
    Tensor *shard = seq_all_to_all(tp, c, dit_tokens_of(tp, x, R, n), heads, TO_HEAD_SHARD);
    Tensor *front = dit_tokens_of(tp, x, 0, R);
    if (whole_grads) {
        Tensor *f = tensor_like(tp->arena, front);
        copy_bytes(f->data, front->data, front->size * sizeof(real));
        Node *nd = tape_record(tp, "front (gradient summed over the group)", sum_grads_bwd, f, 1, front);
        if (nd) nd->ptr = c;
        front = f;
    }
    return dit_join_tokens(tp, slice_last(tp, front, first, h * dh), shard);
}

Tensor *seq_output_to_tokens(Tape *tp, Comm *c, Tensor *o, int heads) {
    return seq_all_to_all(tp, c, to_bf16(tp, o), heads, TO_TOKEN_SHARD);
}

Tensor *seq_front_from_heads(Tape *tp, Comm *c, Tensor *o, int R, int heads, bool whole_grads) {
    o = to_bf16(tp, o); // as seq_output_to_tokens
    Tensor *front = dit_tokens_of(tp, o, 0, R), *copies = NULL;
    for (int r = 0; r < c->size; r++) { // whole_grads: the others' copies off the tape
        Tensor *copy = front;
        if (whole_grads && r != c->rank) {
            copy = tensor_like(tp->arena, front);
            copy_bytes(copy->data, front->data, front->size * sizeof(real));
            copy->bf16 = front->bf16;
        }
        copies = copies ? dit_join_tokens(tp, copies, copy) : copy;
    }
    return dit_join_tokens(tp, seq_all_to_all(tp, c, copies, heads, TO_TOKEN_SHARD),
                           seq_output_to_tokens(tp, c, dit_tokens_of(tp, o, R, o->shape[1] - R), heads));
}

// In-context conditioning or joint attention: q, k, v (B, R + n, D), the R tokens that every rank
// holds first (context.h), to the head shard and back as seq_front_to_heads and seq_front_from_heads
// move them: each rank attends with its heads of the R front queries (each head once in the
// group) and of every token's, over the R front keys once and all tokens'. ids: joint attention's
// images (AttendFn), or NULL.
// Under the ulysses-replicated-kv bug (in-context) or the joint-text-replicated bug (the caption)
// the front tokens' K/V are exchanged with the others, as if [front; shard] were one sequence: the
// head shard holds every rank's copy of them, P times, and they weigh P times in the softmax
// (under --exact, joint attention: the P copies of the caption's keys are laid out here, not
// exchanged: the same values, each copy's share of their gradients added).
static Tensor *attend_in_context(Tape *tp, SeqParallel *sp, Tensor *q, Tensor *k, Tensor *v, int heads,
                                 const int32_t *ids) {
    Comm *c = sp->comm;
    int B = q->shape[0], n = sp->shard.n, R = q->shape[1] - n, P = c->size, h = seq_heads(heads, P, c->rank);
    int T = sp->shard.T_pad;
    ids = sp_joint_images(tp->arena, sp, ids, B, R);
    Tensor *qkv[3] = {q, k, v}, *mine[3];
    bool replicated = sp->bugs & BUGS_REPLICATED;
    for (int j = 0; j < 3; j++)
        mine[j] = replicated && j && !tp->exact ? seq_all_to_all(tp, c, qkv[j], heads, TO_HEAD_SHARD)
                                                : seq_front_to_heads(tp, c, qkv[j], R, heads, tp->exact);
    if (tp->exact) { // joint attention: every key of these heads here, the caption's queries of them nowhere else
        bool grad = tp->grad_enabled; // the image keys' values only: their gradients go through mine's
        tp->grad_enabled = false;
        Tensor *k_img = dit_tokens_of(tp, mine[1], R, T), *v_img = dit_tokens_of(tp, mine[2], R, T);
        tp->grad_enabled = grad;
        return seq_front_from_heads(tp, c, attention_joint_exact(tp, mine[0], mine[1], mine[2], R, replicated ? P : 1,
                                                                 k_img, v_img, 0, h,
                                                                 sp_host_key_mask(sp), ids, NULL, NULL, NULL),
                                    R, heads, true);
    }
    const uint8_t *mask = sp_front_mask(tp->arena, sp, R);
    int keys = R + T;
    if (replicated) {
        uint8_t *each = mask ? arena_alloc(arena_host(tp->arena), (size_t)P * (R + n)) : NULL;
        for (int r = 0; each && r < P; r++) // rank r's copy of the front tokens, its tokens
            memset(each + (size_t)r * (R + n), 1, (size_t)R),
            memcpy(each + (size_t)r * (R + n) + R, mask + R + (size_t)r * n, (size_t)n);
        mask = each, keys = P * (R + n);
    }
    int kept = replicated ? P : 1; // copies of the front tokens among the keys
    Segments caption = ids ? dit_joint_segments(tp->arena, ids, B, R, T, 0, T, kept, 0, keys / kept - R) : NO_SEGMENTS;
    return seq_front_from_heads(tp, c, attention(tp, mine[0], mine[1], mine[2], h, mask, caption), R, heads, false);
}

// q, k, v are (B, n, D): this rank's tokens
static Tensor *attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const int32_t *seg,
                      void *ctx) {
    SeqParallel *sp = ctx;
    if (sp->context) return attend_in_context(tp, sp, q, k, v, heads, seg);
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
    return seq_output_to_tokens(tp, c, o, heads);
}

// forward: Q, K and V to the head shard and the output back (under bf16 all four in 2 bytes a
// value); backward: the output's gradient to the head shard and dQ, dK, dV back (under
// --grad-wire bf16 in 2 bytes too); each exchange one message to each of the P - 1 others.
// With tokens in front (in-context, joint): their output's heads to every rank in one more
// exchange, and their gradients back in backward (K and V of them too under the
// ulysses-replicated-kv and joint-text-replicated bugs).
static SpTraffic traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    int P = sp->shard.P, r = sp->shard.rank, H = c->num_heads, dh = c->hidden_size / H;
    double front = (double)B * dit_front_tokens(c), q = (double)B * sp->shard.n;
    double kv = q + (sp->bugs & BUGS_REPLICATED ? front : 0);
#define HEADS(rows) seq_all_to_all_values(H, P, r, rows, dh, TO_HEAD_SHARD)
#define TOKENS(rows) seq_all_to_all_values(H, P, r, rows, dh, TO_TOKEN_SHARD)
    double values = backward ? sp_grad_wire(sp) * (HEADS(q) + HEADS(front) + TOKENS(q) + 2 * TOKENS(kv))
                             : sp_wire(sp) * (HEADS(q) + 2 * HEADS(kv) + TOKENS(q) + TOKENS(front));
#undef HEADS
#undef TOKENS
    return (SpTraffic){values, (4.0 + (front > 0)) * (P - 1)};
}

// every rank of the group attends every shard's queries for its heads
static int head_group(const SeqParallel *sp) { return sp->shard.P; }

const SpLayout sp_all_to_all = {"all-to-all", "heads over ranks", validate, step_bytes, traffic, attend, head_group, .in_context = true};
