// ulysses.c: see ulysses.h.
#include "ulysses.h"
#include "../core/check.h"
#include "collectives.h"
#include <stdio.h>
#include <string.h>

static const struct { const char *name; unsigned flag; } bugs[] = {
    {"local-kv", BUG_LOCAL_KV},
    {"no-dkv-reduce-scatter", BUG_NO_DKV_REDUCE_SCATTER},
    {"no-grad-allreduce", BUG_NO_GRAD_ALLREDUCE},
    {"no-pad-mask", BUG_NO_PAD_MASK},
    {"wrong-restore", BUG_WRONG_RESTORE},
};

unsigned bug_from_name(const char *name) {
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        if (!strcmp(bugs[i].name, name)) return bugs[i].flag;
    return 0;
}

void bug_inject(unsigned bug, unsigned *bugs, SeqPolicy *policy) {
    *bugs |= bug;
    if (bug == BUG_LOCAL_KV) policy->kv_must_be_global = false;
}

const char *bug_list(unsigned set, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0] && n < len; i++)
        if (set & bugs[i].flag) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", bugs[i].name);
    if (!n) snprintf(buf, len, "none");
    return buf;
}

const char *bug_names(void) {
    return "local-kv, no-dkv-reduce-scatter, no-grad-allreduce, no-pad-mask, wrong-restore";
}

bool seq_attention_from_name(const char *name, SeqAttention *out) {
    if (!strcmp(name, "gather")) return *out = SP_GATHER, true;
    if (!strcmp(name, "all-to-all")) return *out = SP_ALL_TO_ALL, true;
    return false;
}

const char *seq_attention_name(SeqAttention a) { return a == SP_GATHER ? "gather" : "all-to-all"; }

const char *ulysses_validate(SeqAttention variant, int heads, int P, unsigned bugs, char *buf,
                             size_t len) {
    if (variant != SP_ALL_TO_ALL) return NULL;
    if (heads % P)
        snprintf(buf, len, "all-to-all attention splits the %d heads over %d ranks, which does "
                 "not divide them; use a rank count that divides the heads, or --sp-attention "
                 "gather", heads, P);
    else if (bugs & (BUG_LOCAL_KV | BUG_NO_DKV_REDUCE_SCATTER | BUG_WRONG_RESTORE))
        snprintf(buf, len, "the local-kv, no-dkv-reduce-scatter and wrong-restore bugs live in "
                 "the gather variant; inject them with --sp-attention gather");
    else
        return NULL;
    return buf;
}

size_t ulysses_step_bytes(const Ulysses *u, const DiTConfig *c, int B, bool backward) {
    int queries = (u->bugs & BUG_WRONG_RESTORE) ? u->shard->T_pad : u->shard->n;
    return dit_step_bytes(c, B, queries, u->shard->T_pad, backward);
}

// q, k, v are (B, n, D): this rank's tokens
Tensor *ulysses_attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, void *ctx) {
    Ulysses *u = ctx;
    const SeqShard *s = u->shard;
    const uint8_t *mask = (u->bugs & BUG_NO_PAD_MASK) ? NULL : s->key_mask;
    if (u->variant == SP_ALL_TO_ALL) { // all tokens of this rank's heads, then back
        int P = u->comm->size;
        CHECK(heads % P == 0, "all-to-all attention: %d heads over %d ranks", heads, P);
        Tensor *o = attention(tp, seq_all_to_all(tp, u->comm, q, TO_SEQUENCE),
                              seq_all_to_all(tp, u->comm, k, TO_SEQUENCE),
                              seq_all_to_all(tp, u->comm, v, TO_SEQUENCE), heads / P, mask);
        return seq_all_to_all(tp, u->comm, o, TO_HEADS);
    }
    if (!u->policy->kv_must_be_global) // local queries against local keys: long-range lost
        return attention(tp, q, k, v, heads, mask ? mask + s->t0 : NULL);
    bool keep_local = u->bugs & BUG_NO_DKV_REDUCE_SCATTER;
    Tensor *k_all = seq_all_gather(tp, u->comm, k, keep_local);
    Tensor *v_all = seq_all_gather(tp, u->comm, v, keep_local);
    if (u->bugs & BUG_WRONG_RESTORE) {
        // all queries attend, and the output is "restored" as rows [0, n) instead of this
        // rank's rows [t0, t0 + n)
        Tensor *q_all = seq_all_gather(tp, u->comm, q, false);
        Tensor *o_all = attention(tp, q_all, k_all, v_all, heads, mask);
        Tensor *flat = tensor_reshape(tp->arena, o_all, 2,
                                      (int[]){o_all->shape[0], o_all->shape[1] * o_all->shape[2]});
        Tensor *rows = slice_last(tp, flat, 0, s->n * q->shape[2]);
        return tensor_reshape(tp->arena, rows, 3, q->shape);
    }
    return attention(tp, q, k_all, v_all, heads, mask);
}

DiTShard ulysses_dit_shard(Ulysses *u) {
    return (DiTShard){.t0 = u->shard->t0, .n = u->shard->n, .attend = ulysses_attend,
                      .attend_ctx = u};
}

Tensor *ulysses_gather_image(Tape *tp, Ulysses *u, Tensor *tokens, const DiTConfig *c) {
    bool grad = tp->grad_enabled;
    tp->grad_enabled = false;
    int B = tokens->shape[0], row = tokens->shape[2], T = u->shard->T, Tp = u->shard->T_pad;
    Tensor *all = seq_all_gather(tp, u->comm, tokens, false);
    Tensor *real_tokens = tensor_new(tp->arena, 3, B, T, row);
    for (int b = 0; b < B; b++)
        memcpy(real_tokens->data + (size_t)b * T * row, all->data + (size_t)b * Tp * row,
               (size_t)T * row * sizeof(real));
    Tensor *img = unpatchify(tp, real_tokens, dit_out_channels(c), c->input_size, c->input_size,
                             c->patch_size);
    tp->grad_enabled = grad;
    return img;
}

void seq_sync_grads(Ulysses *u, ParamStore *ps) {
    if (u->bugs & BUG_NO_GRAD_ALLREDUCE) return;
    comm_all_reduce(u->comm, ps->grads, ps->total);
}
