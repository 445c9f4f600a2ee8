// inject.c: see inject.h. The table of injectable bugs and where each one runs (its layout and its
// needs, as data), and the table of the needs' sentences; sp.c makes the refusals and the --help
// lists from them.
#include "inject.h"
#include "seq_attention.h"
#include <stdio.h>
#include <string.h>

enum { ANY = BUG_ANY_LAYOUT };
enum { DP = NEED_DATA_PARALLEL, ACCUM = NEED_MICRO_BATCHES, PACKS = NEED_PACKS, TEXT = NEED_TEXT,
       JOINT = NEED_JOINT, IN_CONTEXT = NEED_IN_CONTEXT, ROPE = NEED_ROPE, QK = NEED_QK_NORM,
       QK_FULL = NEED_QK_FULL, HEADS = NEED_HEADS_DIVIDE, ZERO = NEED_ZERO, ZERO_GRADS = NEED_ZERO_GRADS,
       RING_OF_3 = NEED_RING_OF_3 };

static const BugInfo bugs[] = {
    {"local-kv", BUG_LOCAL_KV, SP_GATHER, 0, "attends only to the local keys", NULL, "", NULL, false},
    {"no-dkv-reduce-scatter", BUG_NO_DKV_REDUCE_SCATTER, SP_GATHER, 0, "keeps only the local rows of dK/dV",
     "diffusers 0.42.1 context-parallel gather's backward (Helios, LTX2 audio; docs/check-your-own.md)", "",
     NULL, false},
    {"no-grad-allreduce", BUG_NO_GRAD_ALLREDUCE, ANY, 0, "leaves parameter gradients as per-rank partial sums",
     NULL, "", NULL, false},
    {"no-pad-mask", BUG_NO_PAD_MASK, ANY, 0, "lets padded keys take part in attention", NULL, "",
     "--input-size 16", false},
    {"wrong-restore", BUG_WRONG_RESTORE, SP_GATHER, 0, "restores the output from the wrong rows", NULL, "",
     NULL, false},
    {"ring-wrong-merge", BUG_RING_WRONG_MERGE, SP_RING, 0, "averages the ring's partial outputs", NULL, "",
     NULL, false},
    {"ring-dkv-not-returned", BUG_RING_DKV_NOT_RETURNED, SP_RING, 0,
     "keeps each visiting block's dK/dV on the rank that computed them", NULL, "", NULL, false},
    {"no-dp-allreduce", BUG_NO_DP_ALLREDUCE, ANY, DP, "sums the gradients within the sequence group only",
     NULL, "", NULL, false},
    {"same-data-all-dp", BUG_SAME_DATA_ALL_DP, ANY, DP, "trains every data group on the first slice", NULL,
     "", NULL, false},
    {"ring-stale-kv", BUG_RING_STALE_KV, SP_RING, 0, "recomputes the backward against the rank's own K/V",
     "diffusers #14265, NeMo-Automodel #3157", "", NULL, false},
    {"ring-block-delta", BUG_RING_BLOCK_DELTA, SP_RING, 0,
     "takes the backward's row term from a visiting block's partial output", "picotron #37", "", NULL, false},
    {"accum-unweighted", BUG_ACCUM_UNWEIGHTED, ANY, ACCUM, "weighs every micro-batch's mean 1/K",
     "verl #2857", "--grad-accum 5", NULL, false},
    {"local-mean-loss", BUG_LOCAL_MEAN_LOSS, ANY, 0, "divides each rank's loss by its own tokens",
     "DeepSpeed #5248, VeOmni #338", "", NULL, false},
    {"loss-times-sp", BUG_LOSS_TIMES_SP, ANY, 0, "logs the sum of the ranks' local means",
     "transformers #48167", "", NULL, false},
    {"shard-pos-embed", BUG_SHARD_POS_EMBED, ANY, 0, "adds shard 0's position embeddings on every rank",
     "Megatron-LM #5243", "", NULL, false},
    {"pad-mask-off-by-one", BUG_PAD_MASK_OFF_BY_ONE, ANY, 0,
     "masks each shard's keys from its own length, one padded key too many", "NeMo-Automodel #3544", "",
     "--input-size 24", false},
    {"lse-overflow", BUG_LSE_OVERFLOW, SP_RING, 0, "merges the ring's blocks by log(e^L1 + e^L2), no max "
     "subtracted", "EasyContext #14", "--qkv-gain 10", "", false},
    {"ulysses-replicated-kv", BUG_ULYSSES_REPLICATED_KV, SP_ALL_TO_ALL, IN_CONTEXT,
     "exchanges the in-context conditioning tokens' K/V", "vllm-omni #6930", "--in-context --heads 4", NULL,
     false},
    {"pack-mask-crosses-images", BUG_PACK_MASK_CROSSES, ANY, PACKS, "lets the images of a pack attend to "
     "each other", NULL, "", NULL, false},
    {"pack-positions-from-shard", BUG_PACK_POSITIONS_FROM_SHARD, ANY, PACKS, "restarts an image's "
     "positions at each shard", "Megatron-LM #5243", "", NULL, false},
    {"rope-local-positions", BUG_ROPE_LOCAL_POSITIONS, ANY, ROPE, "turns each shard's rotary positions "
     "from 0", "Megatron-LM #560, Megatron-DeepSpeed #392", "--pos rope", NULL, false},
    {"rope-pack-positions", BUG_ROPE_PACK_POSITIONS, ANY, ROPE | PACKS, "runs a pack's rotary positions "
     "on across its images", "TransformerEngine #2077", "--pos rope", NULL, false},
    {"knorm-grad-early", BUG_KNORM_GRAD_EARLY, SP_ALL_TO_ALL, QK, "takes the k-norm's key gradient before "
     "the reverse exchange returns it", "VeOmni #419", "--qk-norm head --heads 4", NULL, false},
    {"qk-norm-head-shard", BUG_QK_NORM_HEAD_SHARD, SP_ALL_TO_ALL, QK_FULL | HEADS, "computes the "
     "full-width QK-norm over a rank's heads", "vLLM #16311", "--qk-norm full --heads 4", NULL, false},
    {"text-grad-unsummed", BUG_TEXT_GRAD_UNSUMMED, ANY, TEXT, "leaves the text encoder's gradients "
     "unsummed", "VeOmni #1059, Megatron-Bridge #4784", "--cond text", NULL, false},
    {"zero-outer-grads-unsummed", BUG_ZERO_OUTER_UNSUMMED, ANY, ZERO_GRADS, "skips the reduce-scatter of "
     "the units outside the blocks", "VeOmni #1059, verl #7493", "--zero 3", NULL, false},
    {"zero-grad-averaged", BUG_ZERO_GRAD_AVERAGED, ANY, ZERO, "divides the gradients --zero sums",
     "DeepSpeed #5248, tmax #9", "--zero 2", NULL, false},
    {"cross-kv-all-to-all", BUG_CROSS_KV_ALL_TO_ALL, SP_ALL_TO_ALL, TEXT, "exchanges the caption's "
     "cross-attention K/V", "vllm-omni #1233, sglang #19340, #19419", "--cond text --heads 4", NULL, true},
    {"joint-text-replicated", BUG_JOINT_TEXT_REPLICATED, SP_ALL_TO_ALL, JOINT, "exchanges joint "
     "attention's caption with the image tokens", "cornserve #206, vllm-omni #7437",
     "--cond text --text-attn joint --heads 4", NULL, false},
    {"ring-text-every-step", BUG_RING_TEXT_EVERY_STEP, SP_RING, JOINT, "attends to joint attention's "
     "caption at every ring step", "vllm-omni #4689, xDiT #611", "--cond text --text-attn joint", NULL, false},
    {"ring-dkv-against-chunks", BUG_RING_DKV_AGAINST, SP_RING, RING_OF_3, "sends the dK/dV sums round "
     "the ring the way the K/V blocks came", "diffusers 0.42.1 TemplatedRingAttention.backward "
     "(docs/check-your-own.md)", "", NULL, false},
};
#define N_BUGS (int)(sizeof bugs / sizeof bugs[0])
_Static_assert(N_BUGS == BUG_COUNT, "a bug flag without a row of the table, or a row without a flag");
_Static_assert(BUG_COUNT <= 64, "BugMask holds 64 bugs");

// The needs: where each shows in --help, and the refusal's fix when a run lacks it (a format given
// the ranks of a sequence group twice)
static const BugNeed needs[NEEDS] = {
    {NEED_DATA_PARALLEL, "--sp below the ranks", "it needs data parallelism: pass --sp N with N a divisor "
     "of the ranks below their count (e.g. --sp 1 for 2 ranks)"},
    {NEED_MICRO_BATCHES, "--grad-accum 2 or more", "it needs micro-batches: pass --grad-accum K with K >= 2, "
     "and a K that does not divide the images of a data group to see it (e.g. --grad-accum 3 for 8 images)"},
    {NEED_PACKS, "--max-tokens", "it needs packs of images of different sizes in one sequence: pass "
     "--max-tokens N with --data DIR, or a probe batch of packs ('pack')"},
    {NEED_TEXT, "--cond text", "add --cond text"},
    {NEED_JOINT, "--text-attn joint", "add --cond text --text-attn joint"},
    {NEED_IN_CONTEXT, "--in-context", "add --in-context"},
    {NEED_ROPE, "--pos rope", "add --pos rope"},
    {NEED_QK_NORM, "--qk-norm head or full", "add --qk-norm head or --qk-norm full"},
    {NEED_QK_FULL, "--qk-norm full", "add --qk-norm full"},
    {NEED_HEADS_DIVIDE, "heads the ranks divide", "use a head count that the %d ranks of a sequence group "
     "divide (e.g. --heads %d)"},
    {NEED_ZERO, "--zero 1 to 3", "add --zero 1, 2 or 3"},
    {NEED_ZERO_GRADS, "--zero 2 or 3", "add --zero 2 or --zero 3"},
    {NEED_RING_OF_3, "3 ranks or more round the ring", "on a ring of 2 both ways lead to the same rank: "
     "run 3 ranks or more round the ring (a sequence group of 3 or more, over --ulysses-degree with "
     "hybrid; the group here: %d)"},
};
_Static_assert(NEED_RING_OF_3 == 1 << (NEEDS - 1), "a need without a row of the needs' table");

const BugInfo *bug_info(int i) { return i >= 0 && i < N_BUGS ? &bugs[i] : NULL; }
const BugNeed *bug_need(int k) { return k >= 0 && k < NEEDS ? &needs[k] : NULL; }

BugMask bug_from_name(const char *name) {
    for (int i = 0; i < N_BUGS; i++)
        if (!strcmp(bugs[i].name, name)) return bugs[i].flag;
    return 0;
}

const char *bug_list(BugMask set, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_BUGS && n < len; i++)
        if (set & bugs[i].flag) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", bugs[i].name);
    if (!n) snprintf(buf, len, "none");
    return buf;
}

const char *bug_names(void) {
    static char names[N_BUGS * 48]; // every name, however many rows the table grows
    return bug_list(~(BugMask)0, names, sizeof names);
}
