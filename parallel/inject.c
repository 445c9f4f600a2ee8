// inject.c: see inject.h. The table of injectable bugs and where each one can run (checked by
// sp_init, sp.c).
#include "inject.h"
#include "seq_attention.h"
#include <stdio.h>
#include <string.h>

enum { ANY = BUG_ANY_LAYOUT, DATA_PARALLEL = BUG_DATA_PARALLEL, MICRO_BATCHES = BUG_MICRO_BATCHES, PACKS = BUG_PACKS };

static const BugInfo bugs[] = {
    {"local-kv", BUG_LOCAL_KV, SP_GATHER, NULL, "", NULL},
    {"no-dkv-reduce-scatter", BUG_NO_DKV_REDUCE_SCATTER, SP_GATHER, NULL, "", NULL},
    {"no-grad-allreduce", BUG_NO_GRAD_ALLREDUCE, ANY, NULL, "", NULL},
    {"no-pad-mask", BUG_NO_PAD_MASK, ANY, NULL, "", "--input-size 16"},
    {"wrong-restore", BUG_WRONG_RESTORE, SP_GATHER, NULL, "", NULL},
    {"ring-wrong-merge", BUG_RING_WRONG_MERGE, SP_RING, NULL, "", NULL},
    {"ring-dkv-not-returned", BUG_RING_DKV_NOT_RETURNED, SP_RING, NULL, "", NULL},
    {"no-dp-allreduce", BUG_NO_DP_ALLREDUCE, DATA_PARALLEL, NULL, "", NULL},
    {"same-data-all-dp", BUG_SAME_DATA_ALL_DP, DATA_PARALLEL, NULL, "", NULL},
    {"ring-stale-kv", BUG_RING_STALE_KV, SP_RING, "diffusers #14265", "", NULL},
    {"ring-block-delta", BUG_RING_BLOCK_DELTA, SP_RING, "picotron #37", "", NULL},
    {"accum-unweighted", BUG_ACCUM_UNWEIGHTED, MICRO_BATCHES, "verl #2857", "--grad-accum 5", NULL},
    {"local-mean-loss", BUG_LOCAL_MEAN_LOSS, ANY, "DeepSpeed #5248, VeOmni #338", "", NULL},
    {"loss-times-sp", BUG_LOSS_TIMES_SP, ANY, "transformers #48167", "", NULL},
    {"shard-pos-embed", BUG_SHARD_POS_EMBED, ANY, "Megatron-LM #5243", "", NULL},
    {"pad-mask-off-by-one", BUG_PAD_MASK_OFF_BY_ONE, ANY, "NeMo-Automodel #3544", "", "--input-size 24"},
    {"lse-overflow", BUG_LSE_OVERFLOW, SP_RING, "EasyContext #14", "--qkv-gain 10", ""},
    {"ulysses-replicated-kv", BUG_ULYSSES_REPLICATED_KV, SP_ALL_TO_ALL, "vllm-omni #6930", "--in-context --heads 4", NULL},
    {"pack-mask-crosses-images", BUG_PACK_MASK_CROSSES, PACKS, NULL, "", NULL},
    {"pack-positions-from-shard", BUG_PACK_POSITIONS_FROM_SHARD, PACKS, "Megatron-LM #5243", "", NULL},
    {"rope-local-positions", BUG_ROPE_LOCAL_POSITIONS, ANY, "Megatron-LM #560, Megatron-DeepSpeed #392", "--pos rope", NULL},
    {"rope-pack-positions", BUG_ROPE_PACK_POSITIONS, PACKS, "TransformerEngine #2077", "--pos rope", NULL},
    {"knorm-grad-early", BUG_KNORM_GRAD_EARLY, SP_ALL_TO_ALL, "VeOmni #419", "--qk-norm head --heads 4", NULL},
    {"qk-norm-head-shard", BUG_QK_NORM_HEAD_SHARD, SP_ALL_TO_ALL, "vLLM #16311", "--qk-norm full --heads 4", NULL},
    {"text-grad-unsummed", BUG_TEXT_GRAD_UNSUMMED, ANY, "VeOmni #1059, Megatron-Bridge #4784", "--cond text", NULL},
    {"zero-outer-grads-unsummed", BUG_ZERO_OUTER_UNSUMMED, ANY, "VeOmni #1059, verl #7493", "--zero 3", NULL},
    {"zero-grad-averaged", BUG_ZERO_GRAD_AVERAGED, ANY, "DeepSpeed #5248, tmax #9", "--zero 2", NULL},
    {"cross-kv-all-to-all", BUG_CROSS_KV_ALL_TO_ALL, SP_ALL_TO_ALL, "vllm-omni #1233, sglang #19340, #19419",
     "--cond text --heads 4", NULL},
    {"joint-text-replicated", BUG_JOINT_TEXT_REPLICATED, SP_ALL_TO_ALL, "cornserve #206, vllm-omni #7437",
     "--cond text --text-attn joint --heads 4", NULL},
    {"ring-text-every-step", BUG_RING_TEXT_EVERY_STEP, SP_RING, "vllm-omni #4689, xDiT #611",
     "--cond text --text-attn joint", NULL},
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
    static char names[N_BUGS * 48]; // every name, however many rows the table grows
    return bug_list(~0u, names, sizeof names);
}
