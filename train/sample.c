// sample.c: see sample.h.
#include "sample.h"
#include "../core/check.h"
#include "../core/device.h"
#include "../core/rng.h"
#include "../kernels/run.h"
#include "../plan/budget.h"
#include "../data/caption.h"
#include "../data/shapes.h"
#include "../draw/canvas.h"
#include "../run/checkpoint.h"
#include "../run/allowed.h"
#include "../run/config.h"
#include "../run/flags.h"
#include "../run/lock.h"
#include "../run/outfile.h"
#include "../run/settings.h"
#include "../core/timing.h"
#include "../parallel/mesh/batch.h"
#include "../parallel/mesh/zero.h"
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// the most images per forward pass (up to SAMPLE_CHUNK) whose activations fit in `bytes`
static int chunk_images(const SeqParallel *sp, const DiTConfig *c, bool guided, size_t bytes) {
    int k = SAMPLE_CHUNK;
    while (k > 1 && budget_sample_pass(sp, c, guided ? 2 * k : k) > bytes) k--;
    return k;
}

// Progress of sampling on rank 0: once the passes done and the estimate of the rest add up to
// more than SAMPLE_QUIET_SECONDS (or the seconds in the environment variable of that name), a
// line per Euler step (at most one a second, and the last)
#define SAMPLE_QUIET_SECONDS 5.0
typedef struct Progress {
    double t0, t_line, quiet;
    int done, total;
    bool talk;
} Progress;

static Progress progress_start(int total) {
    const char *e = getenv("SAMPLE_QUIET_SECONDS");
    char *end = NULL;
    double quiet = e ? strtod(e, &end) : SAMPLE_QUIET_SECONDS;
    if (!e || end == e || *end || !(quiet >= 0)) quiet = SAMPLE_QUIET_SECONDS;
    return (Progress){.t0 = now_seconds(), .quiet = quiet, .total = total};
}

static void progress_step(Progress *p, int step, int steps, int first, int k, int n) {
    p->done++;
    double t = now_seconds(), eta = (t - p->t0) / p->done * (p->total - p->done);
    p->talk = p->talk || t - p->t0 + eta > p->quiet;
    if (!p->talk || (t - p->t_line < 1 && p->done < p->total)) return;
    char images[64] = "", a[32], b[32];
    if (k < n) snprintf(images, sizeof images, " of images %d-%d of %d", first + 1, first + k, n);
    printf("sampling: Euler step %d/%d%s | %s | ETA %s\n", step, steps, images,
           duration_text(t - p->t0, a, sizeof a), duration_text(eta, b, sizeof b));
    fflush(stdout);
    p->t_line = t;
}

// The passes go round the data groups: group g runs passes g, g + groups, ... When a forward
// gathers parameters over the world (--zero 3), every group must run as many forwards, so a group
// with one pass fewer runs the last round's first pass too, a stand-in whose images it then zeroes
// as any other group's. Whether this group runs `pass`:
static bool pass_runs(int pass, int passes, int groups, int group, bool lockstep) {
    int last_round = (passes - 1) / groups * groups; // its first pass
    return pass % groups == group || (lockstep && group + last_round >= passes && pass == last_round);
}

// This group's passes of all `passes`
static int passes_run(int passes, int groups, int group, bool lockstep) {
    int n = 0;
    for (int pass = 0; pass < passes; pass++) n += pass_runs(pass, passes, groups, group, lockstep);
    return n;
}

void sample_images(DiT *m, SeqParallel *sp, Arena *arena, const int64_t *labels, int n, int steps,
                   double cfg_scale, uint64_t seed, real *out) {
    const DiTConfig *c = &m->cfg;
    int C = c->in_channels, S = c->input_size, F = dit_frames(c); // clips: F frames stacked
    size_t chw = (size_t)C * F * S * S;
    bool guided = budget_sample_guided(c, cfg_scale);
    CHECK(arena->cap >= budget_sample_min(sp, c, cfg_scale),
          "sampling needs an arena of %zu bytes, not %zu", budget_sample_min(sp, c, cfg_scale), arena->cap);
    int chunk = chunk_images(sp, c, guided, arena->cap);
    rng_fill_normal(out, (size_t)n * chw, seed, STREAM_SAMPLE, 0, 1.0);
    DiTShard sh = sp_dit_shard(sp);
    bool rank0 = !sp->world || sp->world->rank == 0;
    // the passes go round the data groups (each draws the same passes it would draw alone)
    int passes = (n + chunk - 1) / chunk, groups = sp->data ? sp->data->size : 1;
    int group = sp->data ? sp->data->rank : 0;
    bool lockstep = sp_forward_spans_world(&m->ps);
    Progress prog = progress_start(steps * passes_run(passes, groups, group, lockstep));
    size_t out_chw = (size_t)dit_out_channels(c) * F * S * S;
    // on the device a pass's images stay there through its steps
    real *xd = arena->device ? device_alloc((size_t)chunk * chw * sizeof(real)) : NULL;
    for (int start = 0, pass = 0; start < n; start += chunk, pass++) {
        int k = n - start < chunk ? n - start : chunk, B = guided ? 2 * k : k;
        real *x = out + (size_t)start * chw, *xs = xd ? xd : x;
        if (!pass_runs(pass, passes, groups, group, lockstep)) { // another data group's: zero here,
            memset(x, 0, (size_t)k * chw * sizeof(real));             // its images in the sum below
            continue;
        }
        if (xd) copy_bytes(xd, x, (size_t)k * chw * sizeof(real));
        for (int s = 0; s < steps; s++) {
            double t = flow_time(s, steps), t_next = flow_time(s + 1, steps);
            arena_reset(arena);
            Tape tp = tape_create(arena);
            ExactMode exact;
            sp_tape_arithmetic(sp, &tp, &exact, true);
            tp.grad_enabled = false;
            Arena *host = arena_host(arena); // the times and labels are made on the host
            Tensor *xin = tensor_new(arena, 4, B, C, F * S, S), *tin = tensor_new(host, 1, B);
            int per = c->text ? c->text_len : 1; // a label, or a caption's token ids
            int64_t *y = arena_alloc(host, (size_t)B * per * sizeof(int64_t));
            for (int half = 0; half < B / k; half++) // the images, twice with guidance
                RUN(arena->device, add_rows, xin->data + half * k * chw, chw, xs, chw, chw, k);
            for (int i = 0; i < B; i++) { // second half: the null class, or the empty caption
                tin->data[i] = (real)(FLOW_T_SCALE * t);
                for (int j = 0; j < per; j++)
                    y[(size_t)i * per + j] = i < k ? labels[(size_t)(start + i) * per + j] : c->text ? 0 : c->num_classes;
            }
            if (arena->device) tin = tensor_to(arena, tin);
            Tensor *tokens = dit_forward(m, &tp, xin, tin, y, &sh);
            Tensor *img = sp_gather_image(&tp, sp, tokens, c, false); // (B, C_out, F S, S)
            // the first C output channels are the velocity
            RUN(arena->device, euler_step, xs, img->data, k, chw, out_chw, guided, (real)cfg_scale,
                t_next - t);
            tape_free(&tp);
            if (rank0) progress_step(&prog, s + 1, steps, start, k, n);
        }
        if (xd) copy_bytes(x, xd, (size_t)k * chw * sizeof(real));
        if (pass % groups != group) memset(x, 0, (size_t)k * chw * sizeof(real)); // a stand-in's
    }
    device_free(xd);
    if (sp->data) comm_all_reduce(sp->data, COMM_REAL, out, (size_t)n * chw);
    arena_reset(arena);
}

// Pass of sample_sized from image `first`: the images that fill up to `rows` rows of T tokens in
// order (at most DIT_PACK_MAX / copies), into pk's first rows, and with guidance (copies 2) again
// in as many rows after them; returns how many
static int pack_pass(const int *h, const int *w, int gf, int p, int T, int rows, int copies,
                     int first, int n, DiTPack *pk) {
    *pk = (DiTPack){.T = T};
    int k = 0, row = 0, start = 0;
    for (; first + k < n && k < DIT_PACK_MAX / copies; k++) {
        int tokens = gf * (h[first + k] / p) * (w[first + k] / p);
        if (start + tokens > T) {
            if (row + 1 == rows) break;
            row++, start = 0;
        }
        pk->img[k] = (DiTImage){row, start, h[first + k] / p, w[first + k] / p, gf};
        start += tokens;
    }
    pk->B = (row + 1) * copies, pk->n = k * copies;
    for (int j = k; j < pk->n; j++) pk->img[j] = pk->img[j - k], pk->img[j].row += row + 1;
    return k;
}

void sample_sized(DiT *m, SeqParallel *sp, Arena *arena, const int64_t *labels, const int *h,
                  const int *w, int n, int steps, double cfg_scale, uint64_t seed, real *out) {
    const DiTConfig *c = &m->cfg;
    CHECK(!c->text, "sampling at mixed sizes (--sample-sizes) is not built for text conditioning");
    int C = c->in_channels, S = c->input_size, p = c->patch_size, Co = dit_out_channels(c), T = sp->shard.T;
    int F = dit_frames(c), pt = dit_patch_t(c), gf = F / pt; // clips: F frames of each size
    size_t chw = (size_t)C * F * S * S;
    bool guided = budget_sample_guided(c, cfg_scale);
    int copies = guided ? 2 : 1;
    CHECK(arena->cap >= budget_sample_min(sp, c, cfg_scale),
          "sampling needs an arena of %zu bytes, not %zu", budget_sample_min(sp, c, cfg_scale), arena->cap);
    int rows = chunk_images(sp, c, guided, arena->cap);
    rng_fill_normal(out, (size_t)n * chw, seed, STREAM_SAMPLE, 0, 1.0);
    DiTPack *pk = xmalloc(sizeof *pk);
    real *v = xmalloc(2 * (size_t)Co * T * pt * p * p * sizeof(real)); // an image's velocities, twice
    bool rank0 = !sp->world || sp->world->rank == 0;
    int groups = sp->data ? sp->data->size : 1, group = sp->data ? sp->data->rank : 0, passes = 0;
    bool lockstep = sp_forward_spans_world(&m->ps); // the passes go round the data groups
    for (int first = 0; first < n; passes++) first += pack_pass(h, w, gf, p, T, rows, copies, first, n, pk);
    Progress prog = progress_start(steps * passes_run(passes, groups, group, lockstep));
    for (int first = 0, k, pass = 0; first < n; first += k, pass++) {
        k = pack_pass(h, w, gf, p, T, rows, copies, first, n, pk);
        if (!pass_runs(pass, passes, groups, group, lockstep)) { // another data group's: zero here, its images in the sum below
            memset(out + (size_t)first * chw, 0, (size_t)k * chw * sizeof(real));
            continue;
        }
        for (int s = 0; s < steps; s++) {
            double t = flow_time(s, steps), t_next = flow_time(s + 1, steps);
            arena_reset(arena);
            Tape tp = tape_create(arena);
            ExactMode exact;
            sp_tape_arithmetic(sp, &tp, &exact, true);
            tp.grad_enabled = false;
            Arena *host = arena_host(arena); // the strips, times and labels are made on the host
            Tensor *xin = tensor_new(host, 4, pk->B, C, pt * p, T * p), *tin = tensor_new(host, 1, pk->n);
            int64_t *y = arena_alloc(host, (size_t)pk->n * sizeof(int64_t));
            for (int j = 0; j < pk->n; j++) { // the images, twice with guidance (then the null class)
                dit_pack_image(pk, j, xin->data, out + (size_t)(first + j % k) * chw, C, pt, p, true);
                tin->data[j] = (real)(FLOW_T_SCALE * t);
                y[j] = j < k ? labels[first + j] : c->num_classes;
            }
            if (arena->device) xin = tensor_to(arena, xin), tin = tensor_to(arena, tin);
            DiTShard sh = sp_dit_shard(sp);
            sh.pack = pk;
            Tensor *tokens = dit_forward(m, &tp, xin, tin, y, &sh);
            Tensor *strip = sp_gather_image(&tp, sp, tokens, c, true); // (B, C_out, pt p, T p)
            real *pred = strip->data;
            if (arena->device) // down to the host
                pred = arena_alloc(host, strip->size * sizeof(real)), copy_bytes(pred, strip->data, strip->size * sizeof(real));
            for (int j = 0; j < k; j++) { // the first C output channels are the velocity
                size_t hw = (size_t)F * h[first + j] * w[first + j]; // every frame's
                for (int copy = 0; copy < copies; copy++)
                    dit_pack_image(pk, j + copy * k, pred, v + copy * Co * hw, Co, pt, p, false);
                RUN(false, euler_step, out + (size_t)(first + j) * chw, v, 1, C * hw, Co * hw, guided,
                    (real)cfg_scale, t_next - t);
            }
            tape_free(&tp);
            if (rank0) progress_step(&prog, s + 1, steps, first, k, n);
        }
        if (pass % groups != group) memset(out + (size_t)first * chw, 0, (size_t)k * chw * sizeof(real)); // a stand-in's
    }
    free(pk), free(v);
    if (sp->data) comm_all_reduce(sp->data, COMM_REAL, out, (size_t)n * chw);
    arena_reset(arena);
}

int sample_prompts(const Data *d, uint64_t seed, char (*prompts)[SAMPLE_PROMPT_LEN]) {
    int n = d->shapes ? SHAPES_CLASSES : d->folder.n < SHAPES_CLASSES ? d->folder.n : SHAPES_CLASSES;
    for (int i = 0; i < n; i++)
        if (d->shapes) shapes_caption(prompts[i], SAMPLE_PROMPT_LEN, seed, (uint64_t)i);
        else caption_text(d->captions + (size_t)i * d->text_len, d->text_len, prompts[i], SAMPLE_PROMPT_LEN);
    return n;
}

// Frame f of a clip (3, F h, w) of F frames stacked along the height, into frame (3, h, w)
static void sample_frame(const real *clip, int F, int h, int w, int f, real *frame) {
    size_t hw = (size_t)h * w;
    for (int k = 0; k < 3; k++) memcpy(frame + k * hw, clip + (k * F + f) * hw, hw * sizeof(real));
}

// A sample grid: one row per class (or per prompt), per_class images (clips: each with its
// frames across) at their sizes h[j] x w[j], upscaled by up, at imgs + i chw
typedef struct Grid {
    const Data *data;
    const real *imgs;
    size_t chw;
    int per_class;
    const int *h, *w;
    int tall, up, F;
    int rows;                                 // the classes, or the prompts
    const char (*prompts)[SAMPLE_PROMPT_LEN]; // each row's label under --cond text, else NULL
} Grid;

static const char *row_label(const Grid *g, int k) {
    return g->prompts ? g->prompts[k] : data_class_name(g->data, k);
}

// The grid's canvas: frame `frame` of every clip, or (-1) every frame across
static Canvas grid_canvas(const Grid *g, int frame) {
    int label_w = 0, cell = g->tall * g->up + 4, text = g->prompts ? 1 : 2, width = 0, classes = g->rows;
    int frames = frame < 0 ? g->F : 1, gap = frames > 1 ? 8 : 0;
    for (int k = 0; k < classes; k++) {
        int w = canvas_text_width(row_label(g, k), text);
        label_w = w > label_w ? w : label_w;
    }
    label_w += 12;
    for (int j = 0; j < g->per_class; j++) width += frames * (g->w[j] * g->up + 4) + gap;
    const uint8_t bg[3] = {24, 24, 28}, fg[3] = {230, 230, 230};
    Canvas cv = canvas_create(label_w + width + 4, classes * cell + 4, bg);
    real *pixels = xmalloc(g->chw * sizeof(real)); // one frame
    for (int k = 0; k < classes; k++) {
        int y = 4 + k * cell;
        canvas_text(&cv, 6, y + (g->tall * g->up - canvas_text_height("A", text)) / 2,
                    row_label(g, k), text, fg);
        for (int j = 0, x = label_w; j < g->per_class; x += gap, j++) // each at its size
            for (int f = 0; f < frames; x += g->w[j] * g->up + 4, f++) {
                sample_frame(g->imgs + (k * g->per_class + j) * g->chw, g->F, g->h[j], g->w[j],
                             frame < 0 ? f : frame, pixels);
                canvas_paste(&cv, x, y, pixels, g->h[j], g->w[j], g->up);
            }
    }
    free(pixels);
    return cv;
}

// Clips: the grid animated, frame by frame, into the PNG's path with .gif for .png
static int write_gif(const Grid *g, const char *png, char *err, size_t len) {
    char path[4096], why[1024];
    snprintf(path, sizeof path, "%.*s.gif", (int)(strlen(png) - 4), png); // out_file_check: *.png
    Canvas *cv = xmalloc((size_t)g->F * sizeof(Canvas));
    for (int f = 0; f < g->F; f++) cv[f] = grid_canvas(g, f);
    int rc = canvas_write_gif(cv, g->F, SAMPLE_GIF_DELAY_CS, path, why, sizeof why);
    if (rc) snprintf(err, len, "writing %s failed: %s", path, why);
    for (int f = 0; f < g->F; f++) canvas_free(&cv[f]);
    free(cv);
    return rc ? SAMPLE_WRITE_FAILED : 0;
}

int sample_grid(DiT *m, SeqParallel *sp, Arena *arena, const Data *data, const char (*prompts)[SAMPLE_PROMPT_LEN],
                int n_prompts, int per_class, const SampleSizes *sizes, int steps, double cfg_scale,
                uint64_t seed, const char *path, char *err, size_t len) {
    const DiTConfig *c = &m->cfg;
    char (*own)[SAMPLE_PROMPT_LEN] = NULL; // text without prompts given: the data's first captions
    if (c->text && !prompts) {
        own = xmalloc(SHAPES_CLASSES * sizeof *own);
        n_prompts = sample_prompts(data, seed, own);
        prompts = (const char (*)[SAMPLE_PROMPT_LEN])own;
    }
    int rows = c->text ? n_prompts : data->classes, per = c->text ? c->text_len : 1;
    int n = rows * per_class, S = c->input_size, cols = sizes && sizes->n ? sizes->n : 0;
    int *h = xmalloc((size_t)n * sizeof(int)), *w = xmalloc((size_t)n * sizeof(int)), tall = 0, side = 0;
    for (int i = 0; i < n; i++) { // column j: size j mod cols
        h[i] = cols ? sizes->h[i % per_class % cols] : S, w[i] = cols ? sizes->w[i % per_class % cols] : S;
        tall = h[i] > tall ? h[i] : tall, side = w[i] > side ? w[i] : side;
    }
    side = tall > side ? tall : side;
    int up = 96 / side;
    up = up < 1 ? 1 : up > 4 ? 4 : up; // small images are drawn 2-4x larger
    int F = dit_frames(c); // clips: frames stacked along the height
    size_t chw = (size_t)3 * F * S * S, bad = 0;
    int64_t *labels = xmalloc((size_t)n * per * sizeof(int64_t)); // labels, or captions' ids
    real *imgs = xmalloc(n * chw * sizeof(real));
    for (int i = 0; i < n; i++)
        if (!c->text) labels[i] = i / per_class;
        else CHECK(!caption_tokenize(prompts[i / per_class], labels + (size_t)i * per, per, "--prompt",
                                     err, len), "%s", err);
    if (cols) sample_sized(m, sp, arena, labels, h, w, n, steps, cfg_scale, seed, imgs);
    else sample_images(m, sp, arena, labels, n, steps, cfg_scale, seed, imgs);
    int rc = 0;
    while (bad < n * chw && isfinite(imgs[bad])) bad++;
    if (bad < n * chw) { // every rank has every image, so every rank stops here
        snprintf(err, len, "sampling gave %s in image %zu of %d (class '%s'): the model's velocity "
                 "overflowed, so no picture was drawn", isnan(imgs[bad]) ? "NaN" : "an infinite value",
                 bad / chw + 1, n, c->text ? prompts[bad / chw / per_class] : data_class_name(data, (int)labels[bad / chw]));
        rc = SAMPLE_NOT_FINITE;
    } else if (!sp->world || sp->world->rank == 0) {
        Grid g = {data, imgs, chw, per_class, h, w, tall, up, F, rows, c->text ? prompts : NULL};
        Canvas cv = grid_canvas(&g, -1);
        char why[1024];
        if (canvas_write_png(&cv, path, why, sizeof why)) {
            snprintf(err, len, "writing %s failed: %s", path, why);
            rc = SAMPLE_WRITE_FAILED;
        }
        canvas_free(&cv);
        if (!rc && F > 1) rc = write_gif(&g, path, err, len);
    }
    free(labels);
    free(imgs);
    free(h), free(w);
    free(own);
    return rc;
}

// --ckpt: a checkpoint file, or a run folder, whose ema.safetensors (else model.safetensors) is
// sampled. Sets path to the file; returns which weights those are, and the run folder (the
// folder, or the file's folder) in run.
static const char *checkpoint_in(const char *ckpt, char *path, char *run, size_t len) {
    struct stat sb;
    if (strlen(ckpt) >= PATH_LEN)
        usage_error("--ckpt: the path is longer than %d characters", PATH_LEN - 1);
    if (stat(ckpt, &sb) || !S_ISDIR(sb.st_mode)) {
        snprintf(path, len, "%s", ckpt);
        char buf[PATH_LEN + 32];
        snprintf(buf, sizeof buf, "%s", ckpt);
        snprintf(run, len, "%s", dirname(buf));
        const char *base = strrchr(ckpt, '/') ? strrchr(ckpt, '/') + 1 : ckpt;
        return !strcmp(base, "ema.safetensors")     ? "the EMA weights"
               : !strcmp(base, "model.safetensors") ? "the raw weights (not the EMA)"
                                                    : "the weights";
    }
    snprintf(run, len, "%s", ckpt);
    snprintf(path, len, "%s/ema.safetensors", ckpt);
    if (!access(path, F_OK)) return "the EMA weights";
    snprintf(path, len, "%s/model.safetensors", ckpt);
    if (!access(path, F_OK)) return "the raw weights (the run kept no EMA)";
    usage_error("--ckpt %s is a folder with neither ema.safetensors nor model.safetensors; pass a "
                "checkpoint file or the --out folder of a training run", ckpt);
}

// The data source in run/config.json (a training run's), into data; false when there is none
static bool run_data(const char *run, char *data, size_t len) {
    char path[2 * PATH_LEN], err[2 * PATH_LEN];
    json_t *root = settings_load(run, path, sizeof path, err, sizeof err);
    TrainConfig tc;
    train_config_defaults(&tc);
    const char *why = root ? settings_read(&tc, root, path, err, sizeof err) : NULL;
    bool found = root && json_object_get(root, "data") && tc.data[0];
    json_decref(root);
    if (why) usage_error("--ckpt: %s; correct it there, or pass --data", why);
    if (found) snprintf(data, len, "%s", tc.data);
    return found;
}

static void sample_help(void) {
    printf("usage: mpirun -np N train/train sample --ckpt M.safetensors|RUN --out S.png [flags]\n"
           "  A grid of class-conditional samples (one row per class) from a checkpoint, or from a\n"
           "  run folder: its ema.safetensors, else its model.safetensors. The class names come from\n"
           "  the --data given, else the data in the run's config.json, else the shapes; the seed\n"
           "  draws the noise; --samples-per-class is at least 1.\n"
           "  --prompt TEXT (repeatable; a checkpoint of --cond text): one row per prompt, labelled\n"
           "  with it (default: the data's first ten captions); guidance takes the empty caption.\n");
    settings_help(stdout, FOR_SAMPLE);
    printf(EVERY_COMMAND_HELP);
}

int sample_main(int argc, char **argv, Comm *c) {
    const char *ckpt = NULL, *out = NULL;
    bool cfg_given = false, data_given = false;
    static char prompts[SAMPLE_MAX_PROMPTS][SAMPLE_PROMPT_LEN];
    int n_prompts = 0;
    TrainConfig tc; // the settings sample takes (settings.h, FOR_SAMPLE)
    train_config_defaults(&tc);
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        const Setting *s;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return c->rank == 0 ? sample_help(), 0 : 0;
        else if (!strcmp(f, "--ckpt")) ckpt = flag_value(argc, argv, &i);
        else if (!strcmp(f, "--out")) out = flag_value(argc, argv, &i);
        else if (!strcmp(f, "--prompt")) {
            const char *p = flag_value(argc, argv, &i);
            if (n_prompts == SAMPLE_MAX_PROMPTS)
                usage_error("--prompt: at most %d prompts (rows of the grid)", SAMPLE_MAX_PROMPTS);
            if (strlen(p) >= SAMPLE_PROMPT_LEN)
                usage_error("--prompt: a prompt holds at most %d characters", SAMPLE_PROMPT_LEN - 1);
            strcpy(prompts[n_prompts++], p);
        }
        else if ((s = settings_flag(&tc, FOR_SAMPLE, argc, argv, &i))) {
            data_given = data_given || !strcmp(s->key, "data");
            cfg_given = cfg_given || !strcmp(s->key, "cfg_scale");
        } else usage_error("sample: unknown argument '%s'", f);
    }
    if (!ckpt || !out) usage_error("sample needs --ckpt and --out");
    if (tc.samples_per_class < 1)
        usage_error("sample --samples-per-class 0 draws no samples; pass 1 or more");
    char text[3 * PATH_LEN + 256];
    settings_text(&tc, FOR_SAMPLE, text, sizeof text);
    char line[sizeof text + 2 * PATH_LEN];
    snprintf(line, sizeof line, "ckpt=%s out=%s prompts=%d %s", ckpt, out, n_prompts, text);
    comm_check_same(c, "sample arguments", line);
    if (c->rank == 0) { // the rank that writes the grid; not into a folder another job writes
        out_file_check("--out", out, ".png");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", out);
        run_folder_lock("--out", dirname(dir), false);
    }
    if (dry_run) {
        dry_run_missing("--ckpt", ckpt, c->rank == 0);
        print0(c, "dry run: sample would draw %d per class from %s over %d rank%s into %s\n"
               "dry run: every flag checked; nothing run or written\n", tc.samples_per_class, ckpt,
               c->size, c->size > 1 ? "s" : "", out);
        return 0;
    }
    char path[PATH_LEN + 32], run[PATH_LEN + 32], err[1024];
    const char *weights = checkpoint_in(ckpt, path, run, sizeof path);
    if (c->rank == 0) out_file_not_input("--out", out, "--ckpt", path);
    // the classes: --data, else the data of the run the checkpoint comes from
    bool data_from_run = !data_given && run_data(run, tc.data, sizeof tc.data);
    DiT m;
    SafeTensors ck; // the checkpoint, its values read once the store is split (--zero 3)
    if (ckpt_open_model(&ck, &m, path, err, sizeof err)) usage_error("%s", err);
    tc.model = m.cfg;
    if (n_prompts && !m.cfg.text)
        usage_error("--prompt: %s is class-conditioned (trained without --cond text); leave out --prompt", path);
    for (int i = 0; i < n_prompts; i++) { // every word in the vocabulary, no more than text_len
        int64_t ids[DIT_MAX_TEXT_LEN];
        if (caption_tokenize(prompts[i], ids, m.cfg.text_len, "--prompt", err, sizeof err)) usage_error("%s", err);
    }
    if (cfg_given && tc.cfg_scale != 1 && !m.cfg.text && m.cfg.class_dropout_prob == 0)
        usage_error("--cfg-scale %g needs a null class, and %s was trained without label dropout; "
                    "pass --cfg-scale 1", tc.cfg_scale, path);
    Data data; // any number of classes here: the checkpoint's count is fixed, --num-classes no help
    if (data_open(&data, tc.data, m.cfg.input_size, dit_frames(&m.cfg), m.cfg.in_channels, DIT_MAX_CLASSES, err, sizeof err))
        usage_error("--data %s%s: %s", tc.data, data_from_run ? " (the run's, from its config.json)" : "", err);
    if (m.cfg.text && !n_prompts && data_captions(&data, m.cfg.text_len, err, sizeof err))
        usage_error("--data %s: %s; or give --prompt", tc.data, err);

    if (data.classes > m.cfg.num_classes)
        usage_error("--data %s has %d classes but %s was trained on %d; pass the --data it was "
                    "trained on", tc.data, data.classes, path, m.cfg.num_classes);
    print0(c, "sampling %s in %s; classes of %s (%s)\n", weights, path, tc.data,
           data_given ? "--data" : data_from_run ? "the run's config.json" : "the default");
    if (run_refusal(&tc, FOR_SAMPLE, c->size, err, sizeof err)) usage_error("%s (the model of %s)", err, path);
    SeqParallel sp;
    tc.parallel.packs = tc.sample_sizes.n > 0; // its sequences are packs then
    sp_setup(&sp, c, c->size, c->rank, &tc.parallel, &m.cfg);
    if (tc.parallel.zero && c->size > 1) sp_split_store(&sp, &m.ps, tc.parallel.zero); // a block gathered as it opens
    dit_alloc(&m, false, false);
    if (ckpt_load_values(&m, &ck, path, true, false, err, sizeof err)) usage_error("%s", err);
    st_free(&ck);
    size_t bytes = budget_sample_arena(&sp, &m.cfg, tc.cfg_scale, comm_node_size(c));
    Arena arena = arena_create_on(sp.cuda, bytes, sp.exact ? bytes : 0); // --exact: sums on the host
    DiT dev, *work = dit_place(&m, &dev, sp.cuda);
    int rc = sample_grid(work, &sp, &arena, &data, n_prompts ? (const char (*)[SAMPLE_PROMPT_LEN])prompts : NULL,
                         n_prompts, tc.samples_per_class, &tc.sample_sizes, tc.sample_steps, tc.cfg_scale,
                         tc.seed, out, err, sizeof err);
    if (rc == SAMPLE_WRITE_FAILED) usage_error("--out: %s", err);
    if (rc == SAMPLE_NOT_FINITE) comm_stop_all(err, 1);
    if (work != &m) dit_free(work);
    arena_destroy(&arena);
    print0(c, "wrote %s%s%.*s%s\n", out, dit_frames(&m.cfg) > 1 ? " and " : "",
           dit_frames(&m.cfg) > 1 ? (int)strlen(out) - 4 : 0, out, dit_frames(&m.cfg) > 1 ? ".gif" : "");
    comm_print_peak_memory(c);
    sp_free(&sp);
    data_close(&data);
    dit_free(&m);
    return 0;
}
