// config.h: the training run's configuration (TrainConfig and its defaults are settings.h's): the
// flags with --resume and their validation, --help, the text every rank compares at start, and
// config.json. Each field is a row of the settings table (settings.h), which parses, prints and
// stores it.
#pragma once
#include "settings.h"
#include <stdint.h>
#include <stdio.h>

// Parses argv (program name and subcommand removed) into *tc; usage errors exit with code 2.
// Returns false when --help was printed.
bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank);
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
