// allowed.h: the one check of what a run may do. Whether a combination of settings can run is
// decided here and nowhere else: the command, the ranks, the data, the model, the mesh and its
// layout, packs, captions, clips, --zero, --exact and the injected bugs. Every subcommand asks it
// before it starts (probe and sample once their checkpoint gave the model), and the planner asks
// it of every mesh it would rank, so that it never recommends a command that train refuses.
#pragma once
#include "settings.h"

#define TEXT_SAMPLE_SIZES "--sample-sizes draws samples at mixed sizes for class labels; with --cond " \
    "text the samples are square (--input-size): leave out --sample-sizes"

// NULL when `command` (FOR_TRAIN, which verify's runs and the planner's candidates are too;
// FOR_PROBE, FOR_SAMPLE) can run these settings on `ranks` ranks; else the sentence that names
// the problem and the fix. No file is read: --data is judged by its name (procedural or a folder).
// --sp-attention auto is left to the planner, which asks again of each layout.
const char *run_refusal(const TrainConfig *tc, unsigned command, int ranks, char *buf, size_t len);
// run_refusal's sentence as a usage error (exit 2), or nothing
void run_check(const TrainConfig *tc, unsigned command, int ranks);
