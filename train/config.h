// config.h: the training run's configuration: flags, their validation and --help, the text every
// rank compares at start, and config.json.
#pragma once
#include "../layers/dit.h"
#include "../parallel/sp.h"
#include <stdint.h>

#define PATH_LEN 512
#define EXACT_BLOCKS 12 // --exact's canonical blocks: 1, 2, 3, 4, 6 and 12 ranks divide it

typedef struct TrainConfig {
    DiTConfig model;
    char preset[32];
    int steps, batch;
    double lr, weight_decay, clip_norm, ema; // ema 0 = off
    uint64_t seed;
    char out[PATH_LEN], data[PATH_LEN], resume[PATH_LEN]; // data: "shapes" or an image folder
    int sample_every, save_every, log_every;              // 0 = only at the end; save -1 = timed
    int sample_steps, samples_per_class;
    double cfg_scale;
    int threads; // BLAS threads per rank; 0 = cores / ranks
    SpOptions parallel; // the layout, the groups and the injected bugs (parallel/sp.h)
} TrainConfig;

// The parallel flags that training and probe share (--no-auto-pad, --pad-multiple,
// --sp-attention, --sp, --ulysses-degree, --grad-accum, --inject-bug): true when argv[*i] is one,
// its value consumed.
bool seq_flag(int argc, char **argv, int *i, SpOptions *o);
// --device cpu|cuda and --tf32 alone (seq_flag reads them too), the same way
bool device_flag(int argc, char **argv, int *i, SpOptions *o);
#define SEQ_FLAGS_HELP                                                                             \
    "  --sp N                ranks per sequence group; the ranks / N groups are data parallel,\n" \
    "                        each training on its slice of --batch (default 0: every rank)\n"     \
    "  --sp-attention NAME   gather (all-gather K/V, default), all-to-all (heads over ranks),\n"  \
    "                        ring (K/V blocks travel the ring; one other rank's block at a time)\n" \
    "                        or hybrid (all-to-all in groups of --ulysses-degree, ring across)\n" \
    "  --ulysses-degree U    hybrid: ranks per all-to-all group (divides --sp, at most the heads)\n" \
    "  --no-auto-pad         refuse a token count that the rank count does not divide\n"          \
    "  --pad-multiple N      pad tokens to a multiple of N * ranks (default 1)\n"                 \
    "  --grad-accum K        run each data group's images as K micro-batches (sizes differ by at\n" \
    "                        most one) and add up their gradients; each loss divides by the whole\n" \
    "                        batch's element count, so any K gives one batch's gradient, with the\n" \
    "                        activation memory of the largest micro-batch (default 1)\n"          \
    "  --exact               the same bits for any ranks per sequence group that divides the\n"    \
    "                        canonical blocks (--virtual-shards, default 12: 1, 2, 3, 4, 6, 12),\n" \
    "                        any data groups and micro-batches: per-token work on canonical\n" \
    "                        blocks, every sum over tokens, images or ranks order-independent\n" \
    "                        (gather and all-to-all, on the CPU)\n"                           \
    "  --virtual-shards V    --exact with V canonical blocks (padding to a multiple of V; 0: off)\n"    \
    "  --inject-bug NAME     reproduce a classic bug on purpose: local-kv, no-dkv-reduce-scatter,\n" \
    "                        no-grad-allreduce, no-pad-mask, wrong-restore (gather);\n" \
    "                        ring-wrong-merge, ring-dkv-not-returned, ring-stale-kv,\n"  \
    "                        ring-block-delta (ring, hybrid);\n" \
    "                        no-dp-allreduce, same-data-all-dp (with --sp below the ranks);\n" \
    "                        accum-unweighted (with --grad-accum 2 or more); local-mean-loss\n" \
    DEVICE_FLAGS_HELP
#define DEVICE_FLAGS_HELP                                                                          \
    "  --device cpu|cuda     where the step runs (default cpu); cuda: each rank on GPU local rank\n" \
    "                        mod the GPUs of its machine\n"                                       \
    "  --tf32                cuda: float32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)\n"

// Parses argv (program name and subcommand removed) into *tc; usage errors exit with code 2.
// Returns false when --help was printed.
bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank);
// One line with every setting that must agree across ranks.
void train_config_text(const TrainConfig *tc, char *buf, size_t len);
// config.json in the run folder (atomic); -1 with a message on failure.
int train_config_write_json(const TrainConfig *tc, int ranks, const char *path, char *err,
                            size_t len);
