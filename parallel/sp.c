// sp.c: see sp.h. The table of layouts and of injectable bugs, and what every layout shares.
#include "sp.h"
#include "../core/check.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include "autograd_collectives.h"
#include <stdio.h>
#include <string.h>

static const SpLayout *const layouts[SP_LAYOUTS] = {
    [SP_GATHER] = &sp_gather, [SP_ALL_TO_ALL] = &sp_all_to_all, [SP_RING] = &sp_ring,
    [SP_HYBRID] = &sp_hybrid};

enum { ANY = BUG_ANY_LAYOUT, DATA_PARALLEL = BUG_DATA_PARALLEL, MICRO_BATCHES = BUG_MICRO_BATCHES };

static const BugInfo bugs[] = {
    {"local-kv", BUG_LOCAL_KV, SP_GATHER, NULL, ""},
    {"no-dkv-reduce-scatter", BUG_NO_DKV_REDUCE_SCATTER, SP_GATHER, NULL, ""},
    {"no-grad-allreduce", BUG_NO_GRAD_ALLREDUCE, ANY, NULL, ""},
    {"no-pad-mask", BUG_NO_PAD_MASK, ANY, NULL, ""},
    {"wrong-restore", BUG_WRONG_RESTORE, SP_GATHER, NULL, ""},
    {"ring-wrong-merge", BUG_RING_WRONG_MERGE, SP_RING, NULL, ""},
    {"ring-dkv-not-returned", BUG_RING_DKV_NOT_RETURNED, SP_RING, NULL, ""},
    {"no-dp-allreduce", BUG_NO_DP_ALLREDUCE, DATA_PARALLEL, NULL, ""},
    {"same-data-all-dp", BUG_SAME_DATA_ALL_DP, DATA_PARALLEL, NULL, ""},
    {"ring-stale-kv", BUG_RING_STALE_KV, SP_RING, "diffusers #14265", ""},
    {"ring-block-delta", BUG_RING_BLOCK_DELTA, SP_RING, "picotron #37", ""},
    {"accum-unweighted", BUG_ACCUM_UNWEIGHTED, MICRO_BATCHES, "verl #2857", "--grad-accum 5"},
    {"local-mean-loss", BUG_LOCAL_MEAN_LOSS, ANY, "DeepSpeed #5248, VeOmni #338", ""},
};
#define N_BUGS (int)(sizeof bugs / sizeof bugs[0])

const BugInfo *bug_info(int i) { return i >= 0 && i < N_BUGS ? &bugs[i] : NULL; }

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

SpOptions sp_options_default(void) {
    return (SpOptions){.policy = seq_policy_default(), .layout = SP_GATHER, .grad_accum = 1};
}

const char *sp_layout_text(const SpOptions *o, int ranks, char *buf, size_t len) {
    int P = o->sp ? o->sp : ranks;
    char dp[32] = "", hybrid[64] = "", accum[32] = "";
    if (P < ranks && P > 0) snprintf(dp, sizeof dp, "dp %d x ", ranks / P);
    if (o->layout == SP_HYBRID && o->ulysses > 0)
        snprintf(hybrid, sizeof hybrid, " (ulysses %d x ring %d)", o->ulysses, P / o->ulysses);
    if (o->grad_accum > 1) snprintf(accum, sizeof accum, ", grad-accum %d", o->grad_accum);
    snprintf(buf, len, "%ssp %d, %s%s%s", dp, P, layouts[o->layout]->name, hybrid, accum);
    return buf;
}

// The bug's place: NULL if it can run with these options, else the sentence
static const char *bug_fits(int i, const SpOptions *o, int dp, char *buf, size_t len) {
    int at = bugs[i].layout;
    if (at >= 0 && at != (int)o->layout && !(at == SP_RING && o->layout == SP_HYBRID))
        return snprintf(buf, len, "the %s bug lives in the %s layout; inject it with "
                        "--sp-attention %s", bugs[i].name, layouts[at]->name, layouts[at]->name), buf;
    if (at == DATA_PARALLEL && dp < 2)
        return snprintf(buf, len, "the %s bug needs data parallelism: pass --sp N with N a divisor "
                        "of the ranks below their count (e.g. --sp 1 for 2 ranks)", bugs[i].name), buf;
    if (at == MICRO_BATCHES && o->grad_accum < 2)
        return snprintf(buf, len, "the %s bug needs micro-batches: pass --grad-accum K with K >= 2, "
                        "and a K that does not divide the images of a data group to see it (e.g. "
                        "--grad-accum 3 for 8 images)", bugs[i].name), buf;
    return NULL;
}

const char *sp_device_error(const SpOptions *o, char *buf, size_t len) {
    if (o->tf32 && !o->cuda)
        return snprintf(buf, len, "--tf32 applies to --device cuda only; leave it out, or pass "
                        "--device cuda"), buf;
    if (o->cuda && device_count() == 0)
        return snprintf(buf, len, "--device cuda: %s; run on a machine with an NVIDIA GPU, or "
                        "leave out --device (the CPU is the default)",
#ifdef USE_CUDA
                        "no GPU is visible here (no NVIDIA driver, or no device)"
#else
                        "this build has no CUDA (nvcc was not found when it was built)"
#endif
                        ), buf;
    return NULL;
}

// a group split from the world, owned by sp
static Comm *split(SeqParallel *sp, int color, int key) {
    Comm *g = &sp->groups[sp->n_groups++];
    comm_split(sp->world, color, key, g);
    return g;
}

const char *sp_init(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o, int T,
                    int heads, char *buf, size_t len) {
    int P = o->sp ? o->sp : ranks;
    if (P > ranks || ranks % P)
        return snprintf(buf, len, "--sp %d must divide the %d ranks (the data groups are ranks / "
                        "--sp); pass a divisor of %d", P, ranks, ranks), buf;
    if (o->ulysses && o->layout != SP_HYBRID)
        return snprintf(buf, len, "--ulysses-degree applies to --sp-attention hybrid only; leave it "
                        "out, or pass --sp-attention hybrid"), buf;
    const char *why = sp_device_error(o, buf, len);
    if (!why) why = seq_validate(&o->policy, T, P, buf, len);
    if (!why) why = layouts[o->layout]->validate(o, heads, P, buf, len);
    for (int i = 0; i < N_BUGS && !why; i++)
        if (o->bugs & bugs[i].flag) why = bug_fits(i, o, ranks / P, buf, len);
    if (why) return why;
    int U = o->layout == SP_HYBRID ? o->ulysses : 1, sp_rank = rank % P, dp_rank = rank / P;
    *sp = (SeqParallel){.comm = world, .world = world, .shard = seq_shard(&o->policy, T, P, sp_rank),
                        .layout = o->layout, .dp = ranks / P, .dp_rank = dp_rank, .ulysses = U,
                        .accum = o->grad_accum, .bugs = o->bugs, .cuda = o->cuda};
    if (!world) return NULL;
    sp->comm = split(sp, dp_rank, sp_rank); // consecutive ranks form a sequence group
    if (P < ranks) sp->data = split(sp, sp_rank, dp_rank);
    if (o->layout == SP_HYBRID) { // consecutive ranks exchange heads; the ring joins every U-th
        sp->heads = split(sp, rank / U, sp_rank % U);
        sp->ring = split(sp, dp_rank * U + sp_rank % U, sp_rank / U);
    }
    if (o->cuda) {
        int local, node = comm_node_place(world, &local), gpus = device_count();
        if (!device_in_use()) device_select(local % gpus);
        device_set_tf32(o->tf32);
        // NCCL refuses two ranks on one GPU; the world's NCCL communicator is sp's too
        sp->nccl = comm_have_nccl() && node <= gpus && ranks > 1;
        for (int i = 0; sp->nccl && i < sp->n_groups; i++) comm_use_nccl(&sp->groups[i]);
        if (sp->nccl) comm_use_nccl(world);
        if (sp->shard.key_mask) { // up once, not with every attention call
            sp->key_mask_device = device_alloc((size_t)sp->shard.T_pad);
            copy_bytes(sp->key_mask_device, sp->shard.key_mask, (size_t)sp->shard.T_pad);
        }
    }
    return NULL;
}

const char *sp_device_text(const SeqParallel *sp, char *buf, size_t len) {
    if (!sp->cuda) return snprintf(buf, len, "cpu"), buf;
    int ranks = sp->world ? sp->world->size : 1;
    snprintf(buf, len, "cuda (%s%s)", device_name(),
             ranks == 1           ? ""
             : sp->nccl           ? ", collectives over NCCL"
             : comm_have_nccl()   ? ", collectives over MPI, host-staged: ranks share a GPU"
                                  : ", collectives over MPI, host-staged: this build has no NCCL");
    return buf;
}

void sp_free(SeqParallel *sp) {
    if (sp->nccl) comm_free_nccl(sp->world);
    device_free(sp->key_mask_device);
    for (int i = 0; i < sp->n_groups; i++) comm_free(&sp->groups[i]);
    seq_shard_free(&sp->shard);
}

const char *sp_batch_slice(const SeqParallel *sp, int B, int *first, int *count, char *buf, size_t len) {
    if (B % sp->dp)
        return snprintf(buf, len, "the batch of %d images does not split over the %d data groups "
                        "(ranks / --sp); pass a --batch that %d divides, or another --sp", B,
                        sp->dp, sp->dp), buf;
    *count = B / sp->dp;
    *first = (sp->bugs & BUG_SAME_DATA_ALL_DP) ? 0 : sp->dp_rank * *count;
    if (sp->accum > *count) {
        char whose[96] = "the batch";
        if (sp->dp > 1)
            snprintf(whose, sizeof whose, "each data group (the batch of %d over %d groups)", B, sp->dp);
        return snprintf(buf, len, "--grad-accum %d is more than the %d images of %s, so a "
                        "micro-batch would be empty; pass --grad-accum at most %d, or a larger "
                        "--batch", sp->accum, *count, whose, *count), buf;
    }
    return NULL;
}

void sp_micro_batch(const SeqParallel *sp, int count, int i, int *first, int *n) {
    // split as heads are over ranks: the first count mod K micro-batches take one image more
    *first = seq_first_head(count, sp->accum, i);
    *n = seq_heads(count, sp->accum, i);
}

size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    return layouts[sp->layout]->step_bytes(sp, c, B, backward);
}

DiTShard sp_dit_shard(SeqParallel *sp) {
    return (DiTShard){.t0 = sp->shard.t0, .n = sp->shard.n, .attend = layouts[sp->layout]->attend,
                      .attend_ctx = sp};
}

DiTShard sp_loss_shard(SeqParallel *sp, int images, int batch) {
    DiTShard sh = sp_dit_shard(sp);
    sh.images = batch, sh.tokens = sp->shard.T;
    if (sp->bugs & BUG_ACCUM_UNWEIGHTED) sh.images = images * sp->accum * sp->dp; // 1/K each
    if (sp->bugs & BUG_LOCAL_MEAN_LOSS) { // this rank's images and its real tokens [t0, T)
        int real_tokens = sp->shard.T - sp->shard.t0;
        if (real_tokens > sp->shard.n) real_tokens = sp->shard.n;
        sh.images = images;
        sh.tokens = real_tokens > 0 ? real_tokens : 1; // a rank of padding only: its zero sum / 1
    }
    return sh;
}

const uint8_t *sp_key_mask(const SeqParallel *sp) {
    return (sp->bugs & BUG_NO_PAD_MASK) ? NULL : sp->key_mask_device ? sp->key_mask_device : sp->shard.key_mask;
}

Tensor *sp_gather_image(Tape *tp, SeqParallel *sp, Tensor *tokens, const DiTConfig *c) {
    bool grad = tp->grad_enabled;
    tp->grad_enabled = false;
    int B = tokens->shape[0], row = tokens->shape[2], T = sp->shard.T, Tp = sp->shard.T_pad;
    Tensor *all = seq_all_gather(tp, sp->comm, tokens);
    Tensor *real_tokens = tensor_new(tp->arena, 3, B, T, row);
    RUN(real_tokens->device, add_rows, real_tokens->data, (size_t)T * row, all->data,
        (size_t)Tp * row, (size_t)T * row, B);
    Tensor *img = unpatchify(tp, real_tokens, dit_out_channels(c), c->input_size, c->input_size,
                             c->patch_size);
    tp->grad_enabled = grad;
    return img;
}

size_t sp_layout_bytes(const SeqParallel *sp) {
    size_t n = 0;
    for (int i = 0; i < sp->n_groups; i++) n += sp->groups[i].bytes_sent;
    return n;
}

size_t sp_world_bytes(const SeqParallel *sp) { return sp->world->bytes_sent; }

void sp_reset_bytes(SeqParallel *sp) {
    for (int i = 0; i < sp->n_groups; i++) sp->groups[i].bytes_sent = 0;
    sp->world->bytes_sent = 0;
}

void sp_gather_batch(SeqParallel *sp, real *out, const real *in, size_t size) {
    if (sp->data) comm_all_gather(sp->data, out, in, size);
    else copy_bytes(out, in, size * sizeof(real));
}

void sp_sync_grads(SeqParallel *sp, ParamStore *ps) {
    if (sp->bugs & BUG_NO_GRAD_ALLREDUCE) return; // each rank keeps its partial sums
    // under no-dp-allreduce each data group keeps the gradient of its own images
    comm_all_reduce((sp->bugs & BUG_NO_DP_ALLREDUCE) ? sp->comm : sp->world, ps->grads, ps->total);
}
