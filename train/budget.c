// budget.c: see budget.h.
#include "budget.h"
#include "../core/device.h"
#include "../parallel/usage.h"
#include "sample.h"
#include <unistd.h>

Memory budget_memory(bool cuda, int node_ranks) {
    if (!cuda)
        return (Memory){(double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE), node_ranks};
    int gpus = device_count();
    return (Memory){(double)device_memory(0), (node_ranks + gpus - 1) / gpus};
}

// With recompute a step keeps each block's input (B n D) and one block's activations at a time:
// the estimate of a one-block model plus the other blocks' inputs
static size_t train_arena(const SeqParallel *sp, const TrainConfig *tc, bool recompute) {
    int first, largest; // micro-batch 0
    sp_micro_batch(sp, tc->batch / sp->dp, 0, &first, &largest);
    double image = (double)tc->model.in_channels * tc->model.input_size * tc->model.input_size;
    size_t upload = sp->cuda ? (size_t)((3 * image + 1) * (tc->batch / sp->dp) * sizeof(real)) + 8 * ARENA_ALIGN : 0;
    DiTConfig one = tc->model;
    one.depth = 1;
    size_t inputs = (size_t)tc->model.depth * largest * sp->shard.n * tc->model.hidden_size * sizeof(real);
    size_t step = (recompute ? sp_step_bytes(sp, &one, largest, true) + inputs
                             : sp_step_bytes(sp, &tc->model, largest, true)) + upload;
    size_t sample = sample_min_bytes(sp, &tc->model, tc->cfg_scale);
    return step > sample ? step : sample;
}

size_t budget_train_arena(const SeqParallel *sp, const TrainConfig *tc) { return train_arena(sp, tc, false); }

TrainNeed budget_train_need(const TrainConfig *tc, int ranks, bool recompute, int zero) {
    // a rank holds parameters, gradients and Adam moments (4 copies; with zero the moments split
    // over the ranks), the EMA copy and the copy sampling swaps out, pos_embed, the arena for the
    // steps and the sampling, the batch and the sampled images (every shard has the same length)
    const DiTConfig *mc = &tc->model;
    SeqParallel sp;
    sp_setup(&sp, NULL, ranks, 0, &tc->parallel, mc);
    char err[512];
    int first, count;
    if (sp_batch_slice(&sp, tc->batch, &first, &count, err, sizeof err)) usage_error("%s", err);
    TrainNeed need = {.arena = (double)train_arena(&sp, tc, recompute)};
    sp_free(&sp);
    DiT shape;
    dit_layout(&shape, mc);
    double image = (double)mc->in_channels * mc->input_size * mc->input_size;
    double moments = zero ? 2.0 / ranks : 2, copies = 2 + moments + 2 * (tc->ema > 0);
    double samples = (double)mc->num_classes * tc->samples_per_class * image;
    need.one_copy = (double)shape.ps.total * sizeof(real);
    need.model = need.one_copy * copies + (double)shape.pos_embed.size * sizeof(real);
    need.host = (3.0 * count * image + samples) * sizeof(real);
    dit_free(&shape);
    return need;
}

void budget_train_check(const TrainConfig *tc, int ranks, int node_ranks) {
    // with --device cuda the arena, the four copies, the EMA and pos_embed are on the rank's GPU,
    // which node_ranks / GPUs ranks share
    TrainNeed n = budget_train_need(tc, ranks, false, 0);
    double need = n.model + n.host + n.arena, step = n.arena, GiB = 1073741824.0;
    if (tc->parallel.cuda) {
        Memory gpu = budget_memory(true, node_ranks);
        double device = n.model - (tc->ema > 0 ? n.one_copy : 0) + step; // no swap copy there
        if (gpu.bytes > 0 && device * gpu.sharing > gpu.bytes)
            usage_error("this run needs about %.1f GiB of GPU memory per rank (%.1f GiB of "
                        "activations), %.1f GiB for the %d rank%s sharing a GPU, which has %.1f GiB; "
                        "lower --batch (or use --grad-accum), --input-size or the model size, or "
                        "spread the sequence over more GPUs", device / GiB, step / GiB,
                        device * gpu.sharing / GiB, gpu.sharing, gpu.sharing > 1 ? "s" : "",
                        gpu.bytes / GiB);
        need = n.model + n.host, step = 0; // the host keeps a copy of the model and sampling's swap
    }
    Memory have = budget_memory(false, node_ranks);
    if (have.bytes > 0 && need * have.sharing > have.bytes)
        usage_error("this run needs about %.1f GiB per rank (%.1f GiB of activations), %.1f GiB for "
                    "the %d rank%s on this machine, which has %.1f GiB; lower --batch, --input-size "
                    "or the model size, or spread the sequence over more machines", need / GiB,
                    step / GiB, need * have.sharing / GiB, have.sharing, have.sharing > 1 ? "s" : "",
                    have.bytes / GiB);
}

ProbeArenas budget_probe(const SeqParallel *sp, const DiTConfig *c, int B, int count, int micro) {
    // the batch (x, t, target and the labels) and the output images; the step's output gathered:
    // all T_pad tokens, the T real ones, the images
    int S = c->input_size, Co = dit_out_channels(c), T = sp->shard.T;
    size_t in = ((size_t)c->in_channels + Co) * S * S + 1, out = (size_t)Co * S * S;
    size_t reals = (size_t)B * (in + out) + (size_t)count * out;
    size_t step = (size_t)micro * out * (sp->shard.T_pad + 2 * T) / T + (sp->cuda ? count * in : 0);
    return (ProbeArenas){reals * sizeof(real) + (size_t)B * sizeof(int64_t) + 64 * ARENA_ALIGN,
                         sp_step_bytes(sp, c, micro, true) + step * sizeof(real) + 64 * ARENA_ALIGN};
}

size_t budget_sample_arena(const SeqParallel *sp, const DiTConfig *c, double cfg_scale,
                           int node_ranks) {
    Memory m = budget_memory(sp->cuda, node_ranks);
    double have = m.bytes / 4 / m.sharing;
    size_t full = sp_step_bytes(sp, c, 2 * SAMPLE_CHUNK, false);
    size_t least = sample_min_bytes(sp, c, cfg_scale);
    return full < have ? full : least > have ? least : (size_t)have;
}
