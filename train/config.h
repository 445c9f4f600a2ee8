// config.h: the training run's configuration: its defaults, the flags with --resume and their
// validation, --help, the text every rank compares at start, and config.json. Each field is a
// row of the settings table (settings.h), which parses, prints and stores it.
#pragma once
#include "../layers/dit.h"
#include "../parallel/sp.h"
#include <stdint.h>
#include <stdio.h>

#define PATH_LEN 512

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
    int threads; // BLAS threads per rank; 0 = cores / ranks
    SpOptions parallel; // the layout, the groups and the injected bugs (parallel/sp.h)
    int ranks;          // the run's world size (config.json only: mpirun -np chooses it)
} TrainConfig;

void train_config_defaults(TrainConfig *tc);

// Parses argv (program name and subcommand removed) into *tc; usage errors exit with code 2.
// Returns false when --help was printed.
bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank);
// train/train --help
void train_config_help(FILE *f);
// One line with every setting that must agree across ranks.
void train_config_text(const TrainConfig *tc, char *buf, size_t len);
// config.json in the run folder (atomic): every setting, the objective and the sampler; -1 with a
// message on failure.
int train_config_write_json(const TrainConfig *tc, const char *path, char *err, size_t len);
