// budget.h: the memory each command needs and the memory a rank has, in one place: the arenas of
// training, probe and sample, sized from the model, the layout and the batch, and the check of a
// training run against its ranks' share of their machine's memory, or of their GPU's, made before
// anything is allocated.
#pragma once
#include "../run/config.h"

// The memory a rank shares and how many ranks share it: its machine's among the node_ranks ranks
// on it, or with cuda its GPU's among the ranks on that GPU (node_ranks over the machine's GPUs).
typedef struct Memory {
    double bytes; // 0: unknown
    int sharing;
} Memory;
Memory budget_memory(bool cuda, int node_ranks);

// Training: its one arena, for the steps (one micro-batch of this data group's images at a time)
// and the sampling, on the side of the step (with cuda it also holds the uploaded batch).
size_t budget_train_arena(const SeqParallel *sp, const TrainConfig *tc);
// What one rank of a training run over `ranks` ranks holds, in bytes, as the check before a run
// counts it; the layout, --recompute and --zero are tc's (a planner sets them). With --device
// cuda everything but `host` and the swap copy (half of `ema`) is on the GPU, and the host keeps a
// copy of the parameters, gradients, moments and EMA too.
typedef struct RankMemory {
    double arena;     // the step's activations (one micro-batch) or the sampling's, the larger
    double weights;   // parameters and gradients: whole on every rank, or as --zero splits them
                      // (ps_weight_reals: level 2 the gradients of the slice, the embeddings,
                      // the final layer and one block; level 3 the parameters of the slice, the
                      // embeddings, the final layer and two blocks too)
    double optimizer; // Adam's two moments: whole, or this rank's 1/ranks under --zero
    double ema;       // the EMA and the copy of the parameters sampling swaps out (--ema > 0):
                      // whole, or this rank's slice of them under --zero 3
    double params;    // elements: the model's parameters
    double slice;     // elements: this rank's slice of them (all of them when whole), and its
    double blocks;    // pieces of the blocks' (the units reduce-scattered as backward goes)
    double pos_embed;
    double host;      // the batch, the sampled images and a save's one unit (ckpt_stage_bytes)
} RankMemory;
// NULL and *m, or the sentence naming why tc cannot run over `ranks` (the sequence split, the
// batch over the data groups)
const char *budget_rank_memory(const TrainConfig *tc, int ranks, RankMemory *m, char *err, size_t len);
// The checks a run makes before it allocates or writes anything, as usage errors: the sequence
// split over `ranks`, and the memory that `node_ranks` of them on one machine will need. When
// `said` is not NULL, the passed check in a sentence (the needs against what there is).
void budget_train_check(const TrainConfig *tc, int ranks, int node_ranks, char *said, size_t len);

// Probe of a batch of B images, `count` of them this data group's, in micro-batches of at most
// `micro`: the host arena (the batch, the output images of the group's slice and of the batch)
// and the step's (a micro-batch with the gather of its output, and with cuda the uploaded slice).
typedef struct ProbeArenas {
    size_t host, step;
} ProbeArenas;
ProbeArenas budget_probe(const SeqParallel *sp, const DiTConfig *c, int B, int count, int micro);

// Sample: SAMPLE_CHUNK images per forward pass at most, each two rows when guided (cfg_scale
// not 1 and a model trained with label dropout); at least one image a pass (budget_sample_min).
#define SAMPLE_CHUNK 16
bool budget_sample_guided(const DiTConfig *c, double cfg_scale);
size_t budget_sample_min(const SeqParallel *sp, const DiTConfig *c, double cfg_scale);
// One forward pass of `rows` rows (images, twice each when guided): the model's forward, and the
// rows' noisy images, times, labels and gathered output images beside it
size_t budget_sample_pass(const SeqParallel *sp, const DiTConfig *c, int rows);
// A full pass of SAMPLE_CHUNK images where a quarter of this rank's share of the memory
// (budget_memory) allows, else what that quarter allows, and at least one image per pass.
size_t budget_sample_arena(const SeqParallel *sp, const DiTConfig *c, double cfg_scale,
                           int node_ranks);
