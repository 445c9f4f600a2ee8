// sp.c: see sp.h. The parallel context of one rank: the groups it splits from the world, the
// device and the collectives' backend they use, and the bytes they sent.
#include "sp.h"
#include "../core/check.h"
#include "../core/device.h"
#include "usage.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SpOptions sp_options_default(void) {
    return (SpOptions){.policy = seq_policy_default(), .layout = SP_GATHER, .grad_accum = 1,
                       .virtual_shards = EXACT_BLOCKS};
}

const char *sp_layout_text(const SpOptions *o, int ranks, char *buf, size_t len) {
    int P = o->sp ? o->sp : ranks;
    char dp[32] = "", hybrid[64] = "", accum[64] = "";
    if (P < ranks && P > 0) snprintf(dp, sizeof dp, "dp %d x ", ranks / P);
    if (o->layout == SP_HYBRID && o->ulysses > 0)
        snprintf(hybrid, sizeof hybrid, " (ulysses %d x ring %d)", o->ulysses, P / o->ulysses);
    if (o->grad_accum > 1) snprintf(accum, sizeof accum, ", grad-accum %d", o->grad_accum);
    if (o->exact) snprintf(accum + strlen(accum), sizeof accum - strlen(accum), ", exact (%d blocks)", o->virtual_shards);
    if (o->recompute) snprintf(accum + strlen(accum), sizeof accum - strlen(accum), ", recompute");
    snprintf(buf, len, "%ssp %d, %s%s%s", dp, P, seq_attention_name(o->layout), hybrid, accum);
    return buf;
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
    CHECK(sp->n_groups < SP_MAX_GROUPS, "a parallel context splits at most %d groups",
          SP_MAX_GROUPS);
    Comm *g = &sp->groups[sp->n_groups++];
    comm_split(sp->world, color, key, g);
    return g;
}

const char *sp_exact_error(const SpOptions *o, char *buf, size_t len) {
    if (!o->exact && o->virtual_shards != EXACT_BLOCKS)
        return snprintf(buf, len, "--virtual-shards sets the canonical blocks of --exact; add --exact, "
                        "or drop --virtual-shards"), buf;
    return NULL;
}

// The pad-mask-off-by-one bug: each shard's keys masked from its own count of real tokens with
// `<=` for `<`, so the first padded key of the shard that holds the sequence's end takes part
// NULL when bug b can run with these options and dp data groups; else the sentence naming the
// flags it needs
static const char *bug_fits(const BugInfo *b, const SpOptions *o, int dp, char *buf, size_t len) {
    int at = b->layout;
    if (at >= 0 && at != (int)o->layout && !(at == SP_RING && o->layout == SP_HYBRID)) {
        const char *name = seq_attention_name((SeqAttention)at);
        return snprintf(buf, len, "the %s bug lives in the %s layout; inject it with "
                        "--sp-attention %s", b->name, name, name), buf;
    }
    if (at == BUG_DATA_PARALLEL && dp < 2)
        return snprintf(buf, len, "the %s bug needs data parallelism: pass --sp N with N a divisor "
                        "of the ranks below their count (e.g. --sp 1 for 2 ranks)", b->name), buf;
    if (at == BUG_MICRO_BATCHES && o->grad_accum < 2)
        return snprintf(buf, len, "the %s bug needs micro-batches: pass --grad-accum K with K >= 2, "
                        "and a K that does not divide the images of a data group to see it (e.g. "
                        "--grad-accum 3 for 8 images)", b->name), buf;
    if (at == BUG_PACKS && !o->packs)
        return snprintf(buf, len, "the %s bug needs packs of images of different sizes in one "
                        "sequence: pass --max-tokens N with --data DIR, or a probe batch of packs ('pack')",
                        b->name), buf;
    return NULL;
}

// NULL when every bug the options inject can run with them; else the sentence for the first
static const char *bugs_error(const SpOptions *o, int dp, char *buf, size_t len) {
    const char *why = NULL;
    const BugInfo *b;
    for (int i = 0; !why && (b = bug_info(i)); i++)
        if (o->bugs & b->flag) why = bug_fits(b, o, dp, buf, len);
    return why;
}

static void pad_mask_off_by_one(SeqShard *s) {
    for (int j = 0; j < s->T_pad; j++) {
        int local = j % s->n, real_here = s->T - j / s->n * s->n;
        s->key_mask[j] = local <= real_here;
    }
}

const char *sp_init(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o, int T,
                    int heads, char *buf, size_t len) {
    int P = o->sp ? o->sp : ranks;
    if (P > ranks || ranks % P)
        return snprintf(buf, len, "--sp %d must divide the %d ranks (the data groups are ranks / "
                        "--sp); pass a divisor of %d", P, ranks, ranks), buf;
    if (o->layout == SP_AUTO)
        return snprintf(buf, len, "--sp-attention auto picks the layout of a training run; give "
                        "this command a layout (train/train plan shows the one it picks)"), buf;
    if (o->ulysses && o->layout != SP_HYBRID)
        return snprintf(buf, len, "--ulysses-degree applies to --sp-attention hybrid only; leave it "
                        "out, or pass --sp-attention hybrid"), buf;
    const char *why = sp_exact_error(o, buf, len);
    SeqPolicy policy = o->policy; // --exact pads to a multiple of the canonical blocks
    policy.exact_blocks = o->exact ? o->virtual_shards : 0;
    if (!why) why = sp_device_error(o, buf, len);
    if (!why) why = seq_validate(&policy, T, P, buf, len);
    if (!why) why = sp_layout_error(o, heads, P, buf, len);
    if (!why) why = bugs_error(o, ranks / P, buf, len);
    if (why) return why;
    int U = o->layout == SP_HYBRID ? o->ulysses : 1, sp_rank = rank % P, dp_rank = rank / P;
    *sp = (SeqParallel){.comm = world, .world = world, .shard = seq_shard(&policy, T, P, sp_rank),
                        .layout = o->layout, .dp = ranks / P, .dp_rank = dp_rank, .ulysses = U,
                        .accum = o->grad_accum, .bugs = o->bugs, .cuda = o->cuda,
                        .exact = o->exact, .packs = o->packs, .pack_images = o->pack_images, .recompute = o->recompute,
                        .policy_blocks = policy.exact_blocks};
    if (o->bugs & BUG_PAD_MASK_OFF_BY_ONE) pad_mask_off_by_one(&sp->shard);
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

void sp_setup(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
              const DiTConfig *m) {
    sp_setup_tokens(sp, world, ranks, rank, o, m, dit_tokens(m));
}

// NULL when the bugs of the QK-norm and rotary positions that the options inject can show on
// model m over P ranks per sequence group; else the sentence naming the flags they need
const char *sp_model_bugs_error(const SpOptions *o, const DiTConfig *m, int P, char *buf, size_t len) {
    unsigned rope = o->bugs & (BUG_ROPE_LOCAL_POSITIONS | BUG_ROPE_PACK_POSITIONS);
    char name[64];
    if (rope && m->pos != DIT_POS_ROPE)
        return snprintf(buf, len, "the %s bug turns rotary positions; add --pos rope",
                        bug_list(rope, name, sizeof name)), buf;
    if ((o->bugs & BUG_KNORM_GRAD_EARLY) && m->qk_norm == DIT_QK_NONE)
        return snprintf(buf, len, "the knorm-grad-early bug lives in the k-norm's backward; add "
                        "--qk-norm head or --qk-norm full"), buf;
    if ((o->bugs & BUG_QK_NORM_HEAD_SHARD) && m->qk_norm != DIT_QK_FULL)
        return snprintf(buf, len, "the qk-norm-head-shard bug computes the full-width QK-norm over "
                        "a rank's heads; add --qk-norm full"), buf;
    if ((o->bugs & BUG_QK_NORM_HEAD_SHARD) && m->num_heads % P)
        return snprintf(buf, len, "the qk-norm-head-shard bug splits the width equally over the %d "
                        "ranks' heads; use a head count they divide (--heads %d)", P, P), buf;
    return NULL;
}

void sp_setup_tokens(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
                     const DiTConfig *m, int T) {
    char err[1024];
    const char *why = sp_model_bugs_error(o, m, o->sp ? o->sp : ranks, err, sizeof err);
    if (!why) why = sp_init(sp, world, ranks, rank, o, T, m->num_heads, err, sizeof err);
    if (!why) why = sp_init_context(sp, o, m, err, sizeof err);
    if (why) usage_error("%s", why);
}

const char *sp_context_error(const SpOptions *o, const DiTConfig *m, char *buf, size_t len) {
    bool in_context = m->in_context, joint = m->text && m->text_attn == DIT_TEXT_JOINT;
    if (in_context && (o->exact || o->recompute || o->packs ||
                       (o->layout != SP_GATHER && o->layout != SP_ALL_TO_ALL)))
        return snprintf(buf, len, "in-context conditioning (--in-context, or a checkpoint trained "
                        "with it) runs with --sp-attention gather or all-to-all and without --exact, "
                        "--recompute, --max-tokens and --sample-sizes so far; pass one of those "
                        "layouts and leave out the others, or train without --in-context"), buf;
    if ((o->bugs & BUG_ULYSSES_REPLICATED_KV) && !in_context)
        return snprintf(buf, len, "the ulysses-replicated-kv bug exchanges the in-context "
                        "conditioning tokens' K/V; add --in-context"), buf;
    if ((o->bugs & BUG_JOINT_TEXT_REPLICATED) && !joint)
        return snprintf(buf, len, "the joint-text-replicated bug exchanges joint attention's caption "
                        "with the image tokens; add --cond text --text-attn joint"), buf;
    if ((o->bugs & BUG_RING_TEXT_EVERY_STEP) && !joint)
        return snprintf(buf, len, "the ring-text-every-step bug attends to joint attention's caption "
                        "at every ring step; add --cond text --text-attn joint"), buf;
    return NULL;
}

const char *sp_init_context(SeqParallel *sp, const SpOptions *o, const DiTConfig *m, char *buf, size_t len) {
    const char *why = sp_context_error(o, m, buf, len);
    if (why || !dit_front_tokens(m)) return why;
    sp->context = dit_front_tokens(m);
    sp->joint = !m->in_context;
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
