// sample.c: see sample.h.
#include "sample.h"
#include "../core/check.h"
#include "../core/rng.h"
#include "canvas.h"
#include "checkpoint.h"
#include "config.h"
#include "flags.h"
#include "outfile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAMPLE_CHUNK 16 // images per forward pass at most (twice that many rows with guidance)

static bool is_guided(const DiTConfig *c, double cfg_scale) {
    return cfg_scale != 1 && c->class_dropout_prob > 0;
}

size_t sample_min_bytes(const SeqParallel *sp, const DiTConfig *c, double cfg_scale) {
    return sp_step_bytes(sp, c, is_guided(c, cfg_scale) ? 2 : 1, false);
}

// the most images per forward pass (up to SAMPLE_CHUNK) whose activations fit in `bytes`
static int chunk_images(const SeqParallel *sp, const DiTConfig *c, bool guided, size_t bytes) {
    int k = SAMPLE_CHUNK;
    while (k > 1 && sp_step_bytes(sp, c, guided ? 2 * k : k, false) > bytes) k--;
    return k;
}

void sample_images(DiT *m, SeqParallel *sp, Arena *arena, const int64_t *labels, int n, int steps,
                   double cfg_scale, uint64_t seed, real *out) {
    const DiTConfig *c = &m->cfg;
    int C = c->in_channels, S = c->input_size;
    size_t chw = (size_t)C * S * S;
    bool guided = is_guided(c, cfg_scale);
    CHECK(arena->cap >= sample_min_bytes(sp, c, cfg_scale),
          "sampling needs an arena of %zu bytes, not %zu", sample_min_bytes(sp, c, cfg_scale), arena->cap);
    int chunk = chunk_images(sp, c, guided, arena->cap);
    rng_fill_normal(out, (size_t)n * chw, seed, STREAM_SAMPLE, 0, 1.0);
    DiTShard sh = sp_dit_shard(sp);
    for (int start = 0; start < n; start += chunk) {
        int k = n - start < chunk ? n - start : chunk, B = guided ? 2 * k : k;
        real *x = out + (size_t)start * chw;
        for (int s = 0; s < steps; s++) {
            double t = flow_time(s, steps), t_next = flow_time(s + 1, steps);
            arena_reset(arena);
            Tape tp = tape_create(arena);
            tp.grad_enabled = false;
            Tensor *xin = tensor_new(arena, 4, B, C, S, S), *tin = tensor_new(arena, 1, B);
            int64_t *y = arena_alloc(arena, (size_t)B * sizeof(int64_t));
            for (int i = 0; i < B; i++) {
                memcpy(xin->data + i * chw, x + (i % k) * chw, chw * sizeof(real));
                tin->data[i] = (real)(FLOW_T_SCALE * t);
                y[i] = i < k ? labels[start + i] : c->num_classes; // second half: the null class
            }
            Tensor *tokens = dit_forward(m, &tp, xin, tin, y, &sh);
            Tensor *img = sp_gather_image(&tp, sp, tokens, c); // (B, C_out, S, S)
            size_t out_chw = (size_t)dit_out_channels(c) * S * S;
            real *v = arena_alloc(arena, (size_t)k * chw * sizeof(real));
            for (int i = 0; i < k; i++) // the first C output channels are the velocity
                for (size_t j = 0; j < chw; j++) {
                    real cond = img->data[i * out_chw + j];
                    real uncond = guided ? img->data[(k + i) * out_chw + j] : cond;
                    v[i * chw + j] = uncond + (real)cfg_scale * (cond - uncond);
                }
            flow_euler_step(x, v, t, t_next, (size_t)k * chw);
            tape_free(&tp);
        }
    }
    arena_reset(arena);
}

int sample_grid(DiT *m, SeqParallel *sp, Arena *arena, const Data *data, int per_class, int steps,
                double cfg_scale, uint64_t seed, const char *path, char *err, size_t len) {
    const DiTConfig *c = &m->cfg;
    int n = data->classes * per_class, S = c->input_size, up = 96 / S;
    up = up < 1 ? 1 : up > 4 ? 4 : up; // small images are drawn 2-4x larger
    int64_t *labels = xmalloc((size_t)n * sizeof(int64_t));
    real *imgs = xmalloc((size_t)n * 3 * S * S * sizeof(real));
    for (int i = 0; i < n; i++) labels[i] = i / per_class;
    sample_images(m, sp, arena, labels, n, steps, cfg_scale, seed, imgs);
    int rc = 0;
    if (sp->comm->rank == 0) {
        int label_w = 0, cell = S * up + 4, text = 2;
        for (int k = 0; k < data->classes; k++) {
            int w = canvas_text_width(data_class_name(data, k), text);
            label_w = w > label_w ? w : label_w;
        }
        label_w += 12;
        const uint8_t bg[3] = {24, 24, 28}, fg[3] = {230, 230, 230};
        Canvas cv = canvas_create(label_w + per_class * cell + 4, data->classes * cell + 4, bg);
        for (int k = 0; k < data->classes; k++) {
            int y = 4 + k * cell;
            canvas_text(&cv, 6, y + (S * up - canvas_text_height("A", text)) / 2,
                        data_class_name(data, k), text, fg);
            for (int j = 0; j < per_class; j++)
                canvas_paste(&cv, label_w + j * cell, y, imgs + (size_t)(k * per_class + j) * 3 * S * S,
                             S, S, up);
        }
        rc = canvas_write_png(&cv, path, err, len);
        canvas_free(&cv);
    }
    free(labels);
    free(imgs);
    return rc;
}

static void sample_help(void) {
    printf("usage: mpirun -np N train/train sample --ckpt M.safetensors --out S.png [flags]\n"
           "  A grid of class-conditional samples (one row per class) from a checkpoint.\n"
           "  --data shapes|DIR      where the class names come from (default shapes)\n"
           "  --sample-steps N       Euler steps (default 25)\n"
           "  --cfg-scale S          classifier-free guidance scale (default 3; 1 = off)\n"
           "  --samples-per-class K  columns (default 8)\n"
           "  --seed S               noise seed (default 0)\n");
}

int sample_main(int argc, char **argv, Comm *c) {
    const char *ckpt = NULL, *out = NULL;
    bool cfg_given = false;
    TrainConfig tc = {.sample_steps = 25, .cfg_scale = 3, .samples_per_class = 8, .policy = seq_policy_default()};
    strcpy(tc.data, "shapes");
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return c->rank == 0 ? sample_help(), 0 : 0;
        else if (!strcmp(f, "--ckpt")) ckpt = flag_value(argc, argv, &i);
        else if (!strcmp(f, "--out")) out = flag_value(argc, argv, &i);
        else if (!strcmp(f, "--data")) snprintf(tc.data, sizeof tc.data, "%s", flag_value(argc, argv, &i));
        else if (!strcmp(f, "--sample-steps")) tc.sample_steps = flag_int(f, flag_value(argc, argv, &i), 1, 1000);
        else if (!strcmp(f, "--cfg-scale"))
            tc.cfg_scale = flag_double(f, flag_value(argc, argv, &i), 0, 100), cfg_given = true;
        else if (!strcmp(f, "--samples-per-class")) tc.samples_per_class = flag_int(f, flag_value(argc, argv, &i), 1, 64);
        else if (!strcmp(f, "--seed")) tc.seed = flag_u64(f, flag_value(argc, argv, &i));
        else usage_error("sample: unknown argument '%s'", f);
    }
    if (!ckpt || !out) usage_error("sample needs --ckpt and --out");
    char text[2 * PATH_LEN + 128];
    snprintf(text, sizeof text, "ckpt=%s out=%s data=%s steps=%d cfg=%.17g per_class=%d seed=%llu",
             ckpt, out, tc.data, tc.sample_steps, tc.cfg_scale, tc.samples_per_class,
             (unsigned long long)tc.seed);
    comm_check_same(c, "sample arguments", text);
    if (c->rank == 0) { // the rank that writes the grid
        out_file_check("--out", out, ".png");
        out_file_not_input("--out", out, "--ckpt", ckpt);
    }
    char err[1024];
    DiT m;
    if (ckpt_load_model(&m, ckpt, err, sizeof err)) usage_error("%s", err);
    tc.model = m.cfg;
    if (cfg_given && tc.cfg_scale != 1 && m.cfg.class_dropout_prob == 0)
        usage_error("--cfg-scale %g needs a null class, and %s was trained without label dropout; "
                    "pass --cfg-scale 1", tc.cfg_scale, ckpt);
    Data data;
    if (data_open(&data, tc.data, m.cfg.input_size, m.cfg.in_channels, m.cfg.num_classes, err, sizeof err))
        usage_error("--data: %s", err);
    SeqParallel sp;
    sp_setup(&sp, c, c->size, c->rank, &tc.policy, SP_GATHER, 0, &m.cfg);
    // a full pass of SAMPLE_CHUNK images where a quarter of this rank's share of the memory allows
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 4 / comm_node_size(c);
    size_t full = sp_step_bytes(&sp, &m.cfg, 2 * SAMPLE_CHUNK, false);
    size_t least = sample_min_bytes(&sp, &m.cfg, tc.cfg_scale);
    Arena arena = arena_create(full < have ? full : least > have ? least : (size_t)have);
    if (sample_grid(&m, &sp, &arena, &data, tc.samples_per_class, tc.sample_steps, tc.cfg_scale,
                    tc.seed, out, err, sizeof err))
        usage_error("--out: %s", err);
    arena_destroy(&arena);
    print0(c, "wrote %s\n", out);
    sp_free(&sp);
    data_close(&data);
    dit_free(&m);
    return 0;
}
