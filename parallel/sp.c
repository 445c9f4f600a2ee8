// sp.c: see sp.h. The table of layouts and of injectable bugs, and what every layout shares.
#include "sp.h"
#include "../core/check.h"
#include "collectives.h"
#include <stdio.h>
#include <string.h>

static const SpLayout *const layouts[SP_LAYOUTS] = {
    [SP_GATHER] = &sp_gather, [SP_ALL_TO_ALL] = &sp_all_to_all, [SP_RING] = &sp_ring};

static const struct {
    const char *name;
    unsigned flag;
    int layout; // the layout whose code path it is, or -1 for any
} bugs[] = {
    {"local-kv", BUG_LOCAL_KV, SP_GATHER},
    {"no-dkv-reduce-scatter", BUG_NO_DKV_REDUCE_SCATTER, SP_GATHER},
    {"no-grad-allreduce", BUG_NO_GRAD_ALLREDUCE, -1},
    {"no-pad-mask", BUG_NO_PAD_MASK, -1},
    {"wrong-restore", BUG_WRONG_RESTORE, SP_GATHER},
    {"ring-wrong-merge", BUG_RING_WRONG_MERGE, SP_RING},
    {"ring-dkv-not-returned", BUG_RING_DKV_NOT_RETURNED, SP_RING},
};
#define N_BUGS (int)(sizeof bugs / sizeof bugs[0])

unsigned bug_from_name(const char *name) {
    for (int i = 0; i < N_BUGS; i++)
        if (!strcmp(bugs[i].name, name)) return bugs[i].flag;
    return 0;
}

const char *bug_list(unsigned set, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_BUGS && n < len; i++)
        if (set & bugs[i].flag) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", bugs[i].name);
    if (!n) snprintf(buf, len, "none");
    return buf;
}

const char *bug_names(void) {
    static char names[256];
    return bug_list(~0u, names, sizeof names);
}

bool seq_attention_from_name(const char *name, SeqAttention *out) {
    for (int a = 0; a < SP_LAYOUTS; a++)
        if (!strcmp(layouts[a]->name, name)) return *out = (SeqAttention)a, true;
    return false;
}

const char *seq_attention_name(SeqAttention a) { return layouts[a]->name; }

const char *seq_attention_names(void) {
    static char names[128];
    size_t n = 0;
    for (int a = 0; a < SP_LAYOUTS; a++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", a ? ", " : "", layouts[a]->name);
    return names;
}

const char *sp_init(SeqParallel *sp, Comm *comm, int P, int rank, const SeqPolicy *policy,
                    SeqAttention layout, unsigned set, int T, int heads, char *buf, size_t len) {
    const char *why = seq_validate(policy, T, P, buf, len);
    if (!why) why = layouts[layout]->validate(heads, P, buf, len);
    for (int i = 0; i < N_BUGS && !why; i++)
        if ((set & bugs[i].flag) && bugs[i].layout >= 0 && bugs[i].layout != (int)layout)
            why = buf, snprintf(buf, len, "the %s bug lives in the %s layout; inject it with "
                                "--sp-attention %s", bugs[i].name, layouts[bugs[i].layout]->name,
                                layouts[bugs[i].layout]->name);
    if (why) return why;
    *sp = (SeqParallel){.comm = comm, .shard = seq_shard(policy, T, P, rank), .layout = layout,
                        .bugs = set};
    return NULL;
}

void sp_free(SeqParallel *sp) { seq_shard_free(&sp->shard); }

size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    return layouts[sp->layout]->step_bytes(sp, c, B, backward);
}

DiTShard sp_dit_shard(SeqParallel *sp) {
    return (DiTShard){.t0 = sp->shard.t0, .n = sp->shard.n, .attend = layouts[sp->layout]->attend,
                      .attend_ctx = sp};
}

const uint8_t *sp_key_mask(const SeqParallel *sp) {
    return (sp->bugs & BUG_NO_PAD_MASK) ? NULL : sp->shard.key_mask;
}

Tensor *sp_gather_image(Tape *tp, SeqParallel *sp, Tensor *tokens, const DiTConfig *c) {
    bool grad = tp->grad_enabled;
    tp->grad_enabled = false;
    int B = tokens->shape[0], row = tokens->shape[2], T = sp->shard.T, Tp = sp->shard.T_pad;
    Tensor *all = seq_all_gather(tp, sp->comm, tokens);
    Tensor *real_tokens = tensor_new(tp->arena, 3, B, T, row);
    for (int b = 0; b < B; b++)
        memcpy(real_tokens->data + (size_t)b * T * row, all->data + (size_t)b * Tp * row,
               (size_t)T * row * sizeof(real));
    Tensor *img = unpatchify(tp, real_tokens, dit_out_channels(c), c->input_size, c->input_size,
                             c->patch_size);
    tp->grad_enabled = grad;
    return img;
}

void sp_sync_grads(SeqParallel *sp, ParamStore *ps) {
    if (sp->bugs & BUG_NO_GRAD_ALLREDUCE) return; // each rank keeps its partial sums
    comm_all_reduce(sp->comm, ps->grads, ps->total);
}
