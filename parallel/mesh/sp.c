// sp.c: see sp.h. The parallel context of one rank: the groups it splits from the world, the
// device and the collectives' backend they use, and the bytes they sent.
#include "sp.h"
#include "../../core/check.h"
#include "../../core/device.h"
#include "../transport/usage.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SpOptions sp_options_default(void) {
    return (SpOptions){.policy = seq_policy_default(), .layout = SP_DEFAULT_LAYOUT, .grad_accum = 1,
                       .virtual_shards = EXACT_BLOCKS};
}

const char *sp_layout_text(const SpOptions *o, int ranks, char *buf, size_t len) {
    int P = o->sp ? o->sp : ranks;
    char dp[32] = "", hybrid[64] = "", accum[64] = "";
    if (P < ranks && P > 0) snprintf(dp, sizeof dp, "dp %d x ", ranks / P);
    if (o->ulysses > 0) // the layout takes a degree (sp_init refuses it elsewhere)
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
    if (o->bf16_grads && !o->bf16)
        return snprintf(buf, len, "--grad-wire bf16 sends the gradients of bf16 values in 2 bytes and "
                        "needs --precision bf16; add it, or drop --grad-wire"), buf;
    if (o->bf16_grads && o->exact)
        return snprintf(buf, len, "--grad-wire bf16 rounds partial sums of dK and dV, which depend on "
                        "the rank count, so --exact cannot give one rank's bits with it; drop one of "
                        "them"), buf;
    return NULL;
}

// ---- the bugs' needs (inject.h's tables) -------------------------------------------------------
// What a run's settings give the bugs' needs (`known`: the NEED_* filled; a need not known is not
// checked)
typedef struct BugRun {
    int layout; // SeqAttention; SP_AUTO: the planner's pick, each layout asked again
    unsigned known;
    int dp, grad_accum, zero, heads, P, ring; // ring: the ranks round a ring (P, or P / U in hybrid)
    bool packs, text, joint, in_context, rope, qk_norm, qk_full;
} BugRun;

// Whether a bug of layout `at` runs in `layout`: its own, or any that runs ring attention when it
// is the ring's
static bool bug_runs_in(int at, int layout) {
    return at == layout || (at >= 0 && sp_layout_row((SeqAttention)at)->ring_path &&
                            sp_layout_row((SeqAttention)layout)->ring_path);
}

const char *bug_where(const BugInfo *b, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int a = 0; b->layout >= 0 && a < sp_layouts() && n < len; a++)
        if (bug_runs_in(b->layout, a)) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", seq_attention_name((SeqAttention)a));
    for (int k = 0; k < NEEDS && n < len; k++)
        if (b->needs & bug_need(k)->need) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", bug_need(k)->where);
    if (!n) snprintf(buf, len, "any layout");
    return buf;
}

const char *bug_help(char *buf, size_t len, int width) {
    size_t n = 0, line = 0; // where the current line starts
    buf[0] = 0;
    for (int i = 0; bug_info(i) && n < len; i++) {
        char where[160], item[256];
        snprintf(item, sizeof item, "%s (%s)%s", bug_info(i)->name, bug_where(bug_info(i), where, sizeof where),
                 bug_info(i + 1) ? "," : "");
        bool wrap = n > line && n - line + 1 + strlen(item) > (size_t)width;
        n += (size_t)snprintf(buf + n, len - n, "%s%s", wrap ? "\n" : n > line ? " " : "", item);
        if (wrap) line = n - strlen(item);
    }
    return buf;
}

// Whether a run has what a need asks for
static bool has(unsigned need, const BugRun *r) {
    switch (need) {
    case NEED_DATA_PARALLEL: return r->dp >= 2;
    case NEED_MICRO_BATCHES: return r->grad_accum >= 2;
    case NEED_PACKS: return r->packs;
    case NEED_TEXT: return r->text;
    case NEED_JOINT: return r->joint;
    case NEED_IN_CONTEXT: return r->in_context;
    case NEED_ROPE: return r->rope;
    case NEED_QK_NORM: return r->qk_norm;
    case NEED_QK_FULL: return r->qk_full;
    case NEED_HEADS_DIVIDE: return r->P > 0 && r->heads % r->P == 0;
    case NEED_ZERO: return r->zero >= 1;
    case NEED_RING_OF_3: return r->ring >= 3;
    default: return r->zero >= 2; // NEED_ZERO_GRADS
    }
}

static const char *bugs_refusal(BugMask set, const BugRun *r, char *buf, size_t len) {
    const BugInfo *b;
    for (int i = 0; (b = bug_info(i)); i++) {
        if (!(set & b->flag)) continue;
        int at = b->layout;
        if (at >= 0 && r->layout != SP_AUTO && !bug_runs_in(at, r->layout)) {
            const char *name = seq_attention_name((SeqAttention)at);
            return snprintf(buf, len, "the %s bug lives in the %s layout; inject it with "
                            "--sp-attention %s", b->name, name, name), buf;
        }
        for (int k = 0; k < NEEDS; k++)
            if ((b->needs & bug_need(k)->need) && (r->known & bug_need(k)->need) && !has(bug_need(k)->need, r)) {
                char fix[256];
                snprintf(fix, sizeof fix, bug_need(k)->fix, r->P, r->P);
                return snprintf(buf, len, "the %s bug %s; %s", b->name, b->does, fix), buf;
            }
    }
    return NULL;
}

// What the options and (when not NULL) the model give the bugs' needs (inject.h): the options
// are always known, the model's needs only with it
static BugRun bug_run(const SpOptions *o, const DiTConfig *m, int ranks, int heads) {
    int P = o->sp ? o->sp : ranks;
    BugRun r = {.layout = o->layout, .dp = ranks / P, .grad_accum = o->grad_accum, .zero = o->zero,
                .packs = o->packs, .heads = heads, .P = P, .ring = o->ulysses > 1 ? P / o->ulysses : P,
                .known = NEED_DATA_PARALLEL | NEED_MICRO_BATCHES | NEED_PACKS | NEED_ZERO | NEED_ZERO_GRADS |
                         NEED_HEADS_DIVIDE | NEED_RING_OF_3};
    if (!m) return r;
    r.known = ~0u;
    r.text = m->text, r.joint = m->text && m->text_attn == DIT_TEXT_JOINT, r.in_context = m->in_context;
    r.rope = m->pos == DIT_POS_ROPE, r.qk_norm = m->qk_norm != DIT_QK_NONE, r.qk_full = m->qk_norm == DIT_QK_FULL;
    return r;
}

const char *sp_bugs_error(const SpOptions *o, const DiTConfig *m, int ranks, char *buf, size_t len) {
    BugRun r = bug_run(o, m, ranks, m ? m->num_heads : 0);
    if (!m) r.known &= ~(unsigned)(NEED_HEADS_DIVIDE | NEED_PACKS); // a probe's: its batch says if packs
    return bugs_refusal(o->bugs, &r, buf, len);
}

// The pad-mask-off-by-one bug: each shard's keys masked from its own count of real tokens with
// `<=` for `<`, so the first padded key of the shard that holds the sequence's end takes part
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
    if (o->ulysses && !sp_layout_row(o->layout)->degrees) {
        const char *takes = "hybrid"; // the layout that takes one
        for (int a = 0; a < sp_layouts(); a++)
            if (sp_layout_row((SeqAttention)a)->degrees) takes = seq_attention_name((SeqAttention)a);
        return snprintf(buf, len, "--ulysses-degree applies to --sp-attention %s only; leave it "
                        "out, or pass --sp-attention %s", takes, takes), buf;
    }
    const char *why = sp_exact_error(o, buf, len);
    SeqPolicy policy = o->policy; // --exact pads to a multiple of the canonical blocks
    policy.exact_blocks = o->exact ? o->virtual_shards : 0;
    if (!why) why = sp_device_error(o, buf, len);
    if (!why) why = seq_validate(&policy, T, P, buf, len);
    if (!why) why = sp_layout_error(o, heads, P, buf, len);
    if (!why) {
        BugRun r = bug_run(o, NULL, ranks, heads);
        why = bugs_refusal(o->bugs, &r, buf, len);
    }
    if (why) return why;
    bool heads_then_ring = sp_layout_row(o->layout)->degrees; // hybrid: a head group, then a ring
    int U = heads_then_ring ? o->ulysses : 1, sp_rank = rank % P, dp_rank = rank / P;
    *sp = (SeqParallel){.comm = world, .world = world, .shard = seq_shard(&policy, T, P, sp_rank),
                        .layout = o->layout, .dp = ranks / P, .dp_rank = dp_rank, .ulysses = U,
                        .accum = o->grad_accum, .bugs = o->bugs, .cuda = o->cuda,
                        .exact = o->exact, .bf16 = o->bf16, .bf16_grads = o->bf16_grads, .packs = o->packs, .pack_images = o->pack_images, .recompute = o->recompute,
                        .policy_blocks = policy.exact_blocks};
    if (o->bugs & BUG_PAD_MASK_OFF_BY_ONE) pad_mask_off_by_one(&sp->shard);
    if (!world) return NULL;
    sp->comm = split(sp, dp_rank, sp_rank); // consecutive ranks form a sequence group
    if (P < ranks) sp->data = split(sp, sp_rank, dp_rank);
    if (heads_then_ring) { // consecutive ranks exchange heads; the ring joins every U-th
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

void sp_setup_tokens(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
                     const DiTConfig *m, int T) {
    char err[1024];
    const char *why = sp_bugs_error(o, m, ranks, err, sizeof err);
    if (!why) why = sp_init(sp, world, ranks, rank, o, T, m->num_heads, err, sizeof err);
    if (!why) why = sp_init_context(sp, o, m, err, sizeof err);
    if (why) usage_error("%s", why);
}

const char *sp_context_error(const SpOptions *o, const DiTConfig *m, char *buf, size_t len) {
    char layouts[128];
    if (m->in_context && (o->exact || o->recompute || o->packs || !sp_layout_row(o->layout)->in_context))
        return snprintf(buf, len, "in-context conditioning (--in-context, or a checkpoint trained "
                        "with it) runs with --sp-attention %s and without --exact, "
                        "--recompute, --max-tokens and --sample-sizes so far; pass one of those "
                        "layouts and leave out the others, or train without --in-context",
                        sp_layouts_with(offsetof(SpLayout, in_context), layouts, sizeof layouts)), buf;
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
