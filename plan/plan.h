// plan.h: the planner (`train plan`, and --sp-attention auto). For a model, image size, batch,
// rank count and link it predicts, for every mesh the ranks can run (--sp, the layout and
// --ulysses-degree; each with and without recompute and zero), the peak memory per rank (budget.c's
// estimate, which tests hold against the arena's peak), the bytes each rank sends per step (the
// layouts' traffic formulas and the gradient all-reduce, which tests hold against the
// collectives' counters) and the step time: compute from measured rates of the GEMMs, the fused
// attention and the rest, plus alpha-beta communication (a latency per message the rank waits
// for, and the bytes the link carries for it over the link's bandwidth: its bytes sent, and what
// MPI's algorithms move beyond them); transfers overlap compute only in the ring layout, each step's
// behind its attention (plan.c's ring_hidden). It ranks them: those that fit the memory first,
// each group by predicted time.
#pragma once
#include "../run/config.h"

// What one rank computes per second, measured with every rank of the job measuring at once (so
// ranks that share a machine's cores share them here too)
typedef struct PlanRates {
    double gemm;      // flop/s of the linear layers, forward + backward
    double attention; // flop/s of the fused attention, forward + backward
    double rest;      // tokens/s through one block's other ops (LayerNorm, modulation, GELU,
                      // gated residuals, slices), forward + backward
    double optimizer; // parameters/s: AdamW, the gradient norm and the EMA update
} PlanRates;

// A rank's link while every rank sends at once (ranks sharing one network share its bandwidth)
typedef struct PlanLink {
    double bandwidth; // bytes/s
    double latency;   // s per message
} PlanLink;

typedef struct PlanRow {
    SpOptions parallel;         // tc's options with this mesh: --sp, the layout, --ulysses-degree
    bool recompute;             // each block's forward again in backward (--recompute)
    int zero;                   // state split over the ranks (--zero 1 to 3)
    double memory, arena;       // bytes per rank: all of it, and the activations
    double sent, messages;      // bytes and messages per step and rank
    double compute, comm, time; // seconds per step: compute + comm = time
    bool fits;                  // memory within the rank's share
} PlanRow;

// The prediction for one mesh (o: tc's options with the mesh set); `memory` is what a rank has
// (bytes; 0: unknown, everything fits).
PlanRow plan_predict(const TrainConfig *tc, int ranks, const SpOptions *o, bool recompute, int zero,
                     const PlanRates *rates, const PlanLink *link, double memory);
// Every mesh of `ranks` ranks that tc's model, batch and options allow (tc->parallel.sp, when not
// 0, fixes --sp), ranked: those that fit first, each by predicted time. Their count (at most max).
int plan_rows(const TrainConfig *tc, int ranks, const PlanRates *rates, const PlanLink *link,
              double memory, PlanRow *rows, int max);
// The rates at tc's shapes on `ranks` ranks, measured on every rank of c at once and averaged
// (collective).
PlanRates plan_measure_rates(const TrainConfig *tc, int ranks, Comm *c);
// The link between c's ranks, every rank sending to the next at once (collective, 2 ranks or more).
PlanLink plan_measure_link(Comm *c);
// --sp-attention auto: measures the rates and the link (collective), sets tc's mesh to the
// planner's pick and says on rank 0 why it was picked; a usage error when no mesh fits.
void plan_choose(TrainConfig *tc, Comm *c);
// train plan
int plan_main(int argc, char **argv, Comm *c);
