// config.h: the training run's configuration: its defaults, the flags with --resume and their
// validation, --help, the text every rank compares at start, and config.json. Each field is a
// row of the settings table (settings.h), which parses, prints and stores it.
#pragma once
#include "../layers/dit.h"
#include "../parallel/sp.h"
#include <stdint.h>
#include <stdio.h>

#define PATH_LEN 512

// --sample-sizes: the pixel sizes h x w of the samples' columns (column j: size j mod n); n 0:
// square images of --input-size
#define SAMPLE_SIZES_MAX 16
typedef struct SampleSizes {
    int n, h[SAMPLE_SIZES_MAX], w[SAMPLE_SIZES_MAX];
} SampleSizes;

typedef struct TrainConfig {
    DiTConfig model;
    char preset[32];
    int steps, batch;
    double lr, weight_decay, clip_norm, ema; // ema 0 = off
    uint64_t seed;
    double qkv_gain; // the initial attention qkv weights times this (large attention logits)
    char out[PATH_LEN], data[PATH_LEN], resume[PATH_LEN]; // data: "shapes" or an image folder
    int sample_every, save_every, log_every;              // 0 = only at the end; save -1 = timed
    int sample_steps, samples_per_class;
    double cfg_scale;
    SampleSizes sample_sizes;
    int threads; // BLAS threads per rank; 0 = cores / ranks
    int max_tokens; // --max-tokens: rows pack a folder's images at their own sizes (0: square)
    int zero;    // --zero: 1 = the Adam moments sharded over every rank (ZeRO stage 1); 0 = whole
    SpOptions parallel; // the layout, the groups and the injected bugs (parallel/sp.h)
    int ranks;          // the run's world size (config.json only: mpirun -np chooses it)
} TrainConfig;

void train_config_defaults(TrainConfig *tc);

// Parses argv (program name and subcommand removed) into *tc; usage errors exit with code 2.
// Returns false when --help was printed.
bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank);
// --max-tokens (packs) with what it does not run with yet: a usage error (at a run's start, so
// that config.json keeps any combination)
void train_config_check_packs(const TrainConfig *tc);
// NULL when every --sample-sizes size fits model m: each side a multiple of the patch, at most
// the tokens of --input-size; else the sentence
const char *sample_sizes_error(const SampleSizes *s, const DiTConfig *m, char *buf, size_t len);
// train/train --help
void train_config_help(FILE *f);
// One line with every setting that must agree across ranks.
void train_config_text(const TrainConfig *tc, char *buf, size_t len);
// config.json in the run folder (atomic): every setting, the objective and the sampler; -1 with a
// message on failure.
int train_config_write_json(const TrainConfig *tc, const char *path, char *err, size_t len);
