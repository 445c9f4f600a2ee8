// inject.c: see inject.h. The table of injectable bugs and where each one can run.
#include "inject.h"
#include "sp.h"
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
    static char names[512];
    return bug_list(~0u, names, sizeof names);
}

// The bug's place: NULL if it can run with these options, else the sentence
static const char *bug_fits(int i, const SpOptions *o, int dp, char *buf, size_t len) {
    int at = bugs[i].layout;
    if (at >= 0 && at != (int)o->layout && !(at == SP_RING && o->layout == SP_HYBRID)) {
        const char *name = seq_attention_name((SeqAttention)at);
        return snprintf(buf, len, "the %s bug lives in the %s layout; inject it with "
                        "--sp-attention %s", bugs[i].name, name, name), buf;
    }
    if (at == DATA_PARALLEL && dp < 2)
        return snprintf(buf, len, "the %s bug needs data parallelism: pass --sp N with N a divisor "
                        "of the ranks below their count (e.g. --sp 1 for 2 ranks)", bugs[i].name), buf;
    if (at == MICRO_BATCHES && o->grad_accum < 2)
        return snprintf(buf, len, "the %s bug needs micro-batches: pass --grad-accum K with K >= 2, "
                        "and a K that does not divide the images of a data group to see it (e.g. "
                        "--grad-accum 3 for 8 images)", bugs[i].name), buf;
    if (at == PACKS && !o->packs)
        return snprintf(buf, len, "the %s bug needs packs of images of different sizes in one "
                        "sequence: pass --max-tokens N with --data DIR, or a probe batch of packs ('pack')",
                        bugs[i].name), buf;
    return NULL;
}

const char *bug_check(const SpOptions *o, int dp, char *buf, size_t len) {
    const char *why = NULL;
    for (int i = 0; i < N_BUGS && !why; i++)
        if (o->bugs & bugs[i].flag) why = bug_fits(i, o, dp, buf, len);
    return why;
}
