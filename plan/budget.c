// budget.c: see budget.h.
#include "budget.h"
#include "../core/device.h"
#include "../parallel/transport/usage.h"
#include "../run/checkpoint.h"
#include "../parallel/mesh/batch.h"
#include <string.h>
#include <unistd.h>

Memory budget_memory(bool cuda, int node_ranks) {
    if (!cuda)
        return (Memory){(double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE), node_ranks};
    int gpus = device_count();
    return (Memory){(double)device_memory(0), (node_ranks + gpus - 1) / gpus};
}

size_t budget_train_arena(const SeqParallel *sp, const TrainConfig *tc) {
    int first, largest; // micro-batch 0
    sp_micro_batch(sp, tc->batch / sp->dp, 0, &first, &largest);
    double image = (double)tc->model.in_channels * dit_frames(&tc->model) * tc->model.input_size * tc->model.input_size;
    size_t upload = sp->cuda ? (size_t)((3 * image + 1) * (tc->batch / sp->dp) * sizeof(real)) + 8 * ARENA_ALIGN : 0;
    size_t step = sp_step_bytes(sp, &tc->model, largest, true) + upload;
    size_t sample = budget_sample_min(sp, &tc->model, tc->cfg_scale);
    return step > sample ? step : sample;
}

const char *budget_rank_memory(const TrainConfig *tc, int ranks, RankMemory *m, char *err, size_t len) {
    const DiTConfig *mc = &tc->model;
    // every shard has the same length, rank 0's data group as many images as any
    SeqParallel sp;
    const char *why = sp_init(&sp, NULL, ranks, 0, &tc->parallel, dit_tokens(mc), mc->num_heads, err, len);
    if (why) return why;
    int first, count; // in-context: the blocks' extra tokens
    why = sp_init_context(&sp, &tc->parallel, mc, err, len);
    if (!why) why = sp_batch_slice(&sp, tc->batch, &first, &count, err, len);
    double arena = why ? 0 : (double)budget_train_arena(&sp, tc);
    sp_free(&sp);
    if (why) return why;
    DiT shape;
    dit_layout(&shape, mc);
    ps_split(&shape.ps, 0, tc->parallel.zero && ranks > 1 ? ranks : 1, tc->parallel.zero); // as ps_shard splits the store
    const ParamStore *ps = &shape.ps;
    double R = sizeof(real), blocks = 0;
    for (int u = 0; u < ps->units; u++) blocks += ps->unit[u].scoped ? (double)ps->unit[u].piece : 0;
    double image = (double)mc->in_channels * dit_frames(mc) * mc->input_size * mc->input_size; // clips: every frame
    double samples = (double)mc->num_classes * tc->samples_per_class * image;
    *m = (RankMemory){.arena = arena, .weights = (double)ps_weight_reals(ps) * R,
                      .optimizer = 2.0 * ps->chunk * R, .ema = tc->ema > 0 ? 2.0 * ps_own_len(ps) * R : 0,
                      .params = (double)ps->total, .slice = (double)ps->chunk, .blocks = blocks,
                      .pos_embed = (double)shape.pos_embed.size * R,
                      .host = (3.0 * count * image + samples) * R + (double)ckpt_stage_bytes(ps)};
    dit_free(&shape);
    return NULL;
}

void budget_train_check(const TrainConfig *tc, int ranks, int node_ranks, char *said, size_t len) {
    // with --device cuda the arena, the weights, moments, the EMA and pos_embed are on the GPU,
    // which node_ranks / GPUs ranks share
    char err[1024];
    RankMemory m;
    if (budget_rank_memory(tc, ranks, &m, err, sizeof err)) usage_error("%s", err);
    double model = m.weights + m.optimizer + m.ema + m.pos_embed, step = m.arena;
    double need = model + m.host + step, GiB = 1073741824.0, MiB = 1048576.0;
    char flags[64] = ""; // what frees memory and is not on yet
    if (!tc->parallel.recompute) strcat(flags, "add --recompute, ");
    if (tc->parallel.zero < 3 && ranks > 1) strcat(flags, tc->parallel.recompute ? "add --zero 3, " : "--zero 3, ");
    if (tc->parallel.cuda) {
        Memory gpu = budget_memory(true, node_ranks);
        double device = model - m.ema / 2 + step; // no swap copy there
        if (gpu.bytes > 0 && device * gpu.sharing > gpu.bytes)
            usage_error("this run needs about %.1f GiB of GPU memory per rank (%.1f GiB of "
                        "activations), %.1f GiB for the %d rank%s sharing a GPU, which has %.1f GiB; "
                        "%slower --batch (or use --grad-accum), --input-size or the model size, or "
                        "spread the sequence over more GPUs", device / GiB, step / GiB,
                        device * gpu.sharing / GiB, gpu.sharing, gpu.sharing > 1 ? "s" : "",
                        gpu.bytes / GiB, flags);
        need = model + m.host, step = 0; // the host keeps a copy of the model and sampling's swap
    }
    Memory have = budget_memory(false, node_ranks);
    if (have.bytes > 0 && need * have.sharing > have.bytes)
        usage_error("this run needs about %.1f GiB per rank (%.1f GiB of activations), %.1f GiB for "
                    "the %d rank%s on this machine, which has %.1f GiB; %slower --batch, --input-size "
                    "or the model size, or spread the sequence over more machines", need / GiB,
                    step / GiB, need * have.sharing / GiB, have.sharing, have.sharing > 1 ? "s" : "",
                    have.bytes / GiB, flags);
    if (said)
        snprintf(said, len, "memory check: about %.1f MiB per rank (%.1f MiB of activations%s), "
                 "%.1f MiB for the %d rank%s on this machine, which has %.1f GiB: fits", need / MiB,
                 (tc->parallel.cuda ? m.arena : step) / MiB, tc->parallel.cuda ? ", on the GPU" : "",
                 need * have.sharing / MiB, have.sharing, have.sharing > 1 ? "s" : "", have.bytes / GiB);
}

ProbeArenas budget_probe(const SeqParallel *sp, const DiTConfig *c, int B, int count, int micro) {
    // the batch (x, t, target and the labels) and the output images; the step's output gathered:
    // all T_pad tokens, the T real ones, the images
    int S = c->input_size, Co = dit_out_channels(c), T = sp->shard.T;
    size_t pixels = (size_t)dit_frames(c) * S * S; // clips: every frame
    size_t in = ((size_t)c->in_channels + Co) * pixels + 1, out = (size_t)Co * pixels;
    size_t reals = (size_t)B * (in + out) + (size_t)count * out;
    size_t step = (size_t)micro * out * (sp->shard.T_pad + 2 * T) / T + (sp->cuda ? count * in : 0);
    size_t pack = sp->packs ? sizeof(DiTPack) + DIT_PACK_MAX * (sizeof(real) + sizeof(int64_t)) : 0;
    return (ProbeArenas){reals * sizeof(real) + (size_t)B * sizeof(int64_t) + pack + 64 * ARENA_ALIGN,
                         sp_step_bytes(sp, c, micro, true) + step * sizeof(real) + 64 * ARENA_ALIGN};
}

bool budget_sample_guided(const DiTConfig *c, double cfg_scale) {
    return cfg_scale != 1 && (c->text || c->class_dropout_prob > 0); // text: the empty caption
}

size_t budget_sample_pass(const SeqParallel *sp, const DiTConfig *c, int rows) {
    size_t S = (size_t)c->input_size, pixels = dit_frames(c) * S * S; // clips: every frame
    size_t in = c->in_channels * pixels, out = dit_out_channels(c) * pixels;
    return sp_step_bytes(sp, c, rows, false) + (size_t)rows * ((in + out + 1) * sizeof(real) + (c->text ? c->text_len : 1) * sizeof(int64_t)) +
           8 * ARENA_ALIGN;
}

size_t budget_sample_min(const SeqParallel *sp, const DiTConfig *c, double cfg_scale) {
    return budget_sample_pass(sp, c, budget_sample_guided(c, cfg_scale) ? 2 : 1);
}

size_t budget_sample_arena(const SeqParallel *sp, const DiTConfig *c, double cfg_scale,
                           int node_ranks) {
    Memory m = budget_memory(sp->cuda, node_ranks);
    double have = m.bytes / 4 / m.sharing;
    size_t full = budget_sample_pass(sp, c, 2 * SAMPLE_CHUNK);
    size_t least = budget_sample_min(sp, c, cfg_scale);
    return full < have ? full : least > have ? least : (size_t)have;
}
