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
// --max-tokens (packs) with what it does not run with yet: a usage error (at a run's start, so
// that config.json keeps any combination)
void train_config_check_packs(const TrainConfig *tc);
// --cond text against the settings it does not run with yet (--in-context, --sample-sizes); a
// usage error if so (the sample command says TEXT_SAMPLE_SIZES too)
void train_config_check_text(const TrainConfig *tc);
#define TEXT_SAMPLE_SIZES "--sample-sizes draws samples at mixed sizes for class labels; with --cond " \
    "text the samples are square (--input-size): leave out --sample-sizes"
// The injected bugs against what they need of the run on `ranks` ranks (sp_bugs_error; the model's
// needs only when `model`: a probe's model is its checkpoint's): a usage error if one cannot run
void train_config_check_bugs(const TrainConfig *tc, int ranks, bool model);
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
