// probe.c: see probe.h. Batch file: x (B,C,H,W), t (B), y (B) integer, target (B,C_out,H,W).
// Result file: out (B,C_out,H,W), loss (1), grad.<name> for every trainable parameter.
#include "probe.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../parallel/mesh/sp.h"
#include "../plan/budget.h"
#include "../run/checkpoint.h"
#include "../run/allowed.h"
#include "../run/config.h"
#include "../data/caption.h"
#include "../data/data.h"
#include "../run/flags.h"
#include "../run/outfile.h"
#include "../run/settings.h"
#include "../parallel/mesh/step.h"
#include "tapedump.h"
#include "../parallel/mesh/batch.h"
#include "../parallel/mesh/zero.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: mpirun -np N train/train probe --ckpt M.safetensors --batch B.safetensors --out R.safetensors\n"
           "  One forward + backward of loss = mean((model(x, t, y) - target)^2), eval mode.\n"
           "  --ckpt PATH           DiT checkpoint (safetensors with the config in __metadata__)\n"
           "  --batch PATH          x F32 [B,C,H,W], t F32 [B], y I64 [B], target F32 [B,C_out,H,W];\n"
           "                        packs: x, target strips [B,C,p,T*p], t, y [n], pack I64 [n,4]\n"
           "                        (row, first token, patch rows, patch columns of each image)\n"
           "  --out PATH            writes out, loss and grad.<name> for every trainable parameter\n"
           "  --dump-tape PATH      also every named tensor of the step and its gradient, in the\n"
           "                        one-rank layout, for `train locate` (one micro-batch)\n"
           "  --make-batch B        instead: write a batch of B images (of --data, step %d of seed 0,\n"
           "                        with times, labels and velocity targets; with --max-tokens B rows\n"
           "                        of packs and their 'pack' I64 [n,4]) for --ckpt to --out\n",
           PROBE_BATCH_STEP);
    settings_help(stdout, FOR_PROBE);
    printf(EVERY_COMMAND_HELP);
}

// The batch tensor `name`, which this checkpoint needs to be a float tensor (F32 or F64) or, if
// `integer`, an I64 or I32 tensor, of this shape (a -1 is the batch size B, any B >= 1). Anything
// else is a usage error naming the tensor, what was expected and what the file holds.
static const StTensor *batch_tensor(const SafeTensors *st, const char *path, const char *name,
                                    bool integer, int ndim, const int64_t *shape) {
    const StTensor *t = st_find(st, name);
    bool ok = t && t->ndim == ndim && (integer ? t->dtype == ST_I64 || t->dtype == ST_I32
                                               : t->dtype == ST_F32 || t->dtype == ST_F64);
    for (int i = 0; ok && i < ndim; i++)
        ok = shape[i] < 0 ? t->shape[i] >= 1 : t->shape[i] == shape[i];
    if (ok) return t;
    char want[128], got[64];
    int n = snprintf(want, sizeof want, "%s [", integer ? "I64 or I32" : "F32 or F64");
    for (int i = 0; i < ndim; i++)
        n += snprintf(want + n, sizeof want - (size_t)n, shape[i] < 0 ? "%sB" : "%s%lld",
                      i ? ", " : "", (long long)shape[i]);
    snprintf(want + n, sizeof want - (size_t)n, "]%s", shape[0] < 0 ? " with B >= 1" : "");
    if (!t)
        usage_error("--batch %s has no tensor '%s'; a probe batch for this checkpoint needs '%s' "
                    "as %s", path, name, name, want);
    usage_error("--batch %s: '%s' must be %s for this checkpoint, but the file has %s %s", path,
                name, want, st_dtype_name(t->dtype), st_shape_str(got, sizeof got, t->shape, t->ndim));
}

// Converts a batch tensor that batch_tensor accepted into dst, which has its shape. A value that
// is NaN or infinite (or, in an F64 file, beyond the build's range) is a usage error naming the
// tensor and the index of the first one.
static void batch_into(Tensor *dst, const StTensor *t, const char *path) {
    char err[512];
    CHECK(!st_to_real(t, dst->data, dst->size, err, sizeof err), "%s", err);
    size_t i = 0;
    while (i < dst->size && isfinite(dst->data[i])) i++;
    if (i == dst->size) return;
    size_t idx[MAX_DIMS], rest = i;
    for (int d = dst->ndim - 1; d >= 0; d--)
        idx[d] = rest % (size_t)dst->shape[d], rest /= (size_t)dst->shape[d];
    char at[128], what[64];
    for (int d = 0, n = 0; d < dst->ndim; d++)
        n += snprintf(at + n, sizeof at - (size_t)n, "%s%zu", d ? ", " : "", idx[d]);
    double v = dst->data[i];
    if (t->dtype == ST_F64) memcpy(&v, (const char *)t->data + 8 * i, 8); // unaligned is fine
    if (isfinite(v)) snprintf(what, sizeof what, "%g", v);
    else snprintf(what, sizeof what, "%s", isnan(v) ? "NaN" : v > 0 ? "+infinity" : "-infinity");
    usage_error("--batch %s: '%s' holds %s at %s[%s], its first value that is no finite " REAL_NAME
                "; a probe batch must hold finite numbers", path, t->name, what, t->name, at);
}

typedef struct ProbeArgs {
    const char *ckpt, *batch, *out, *dump; // dump: --dump-tape, or NULL
    int make_batch;  // > 0: write a batch of this many images to --out instead
    TrainConfig run; // the settings probe takes (settings.h, FOR_PROBE): the parallel options
} ProbeArgs;

// false when --help was printed; usage errors exit
static bool parse_args(ProbeArgs *a, int argc, char **argv, Comm *c) {
    *a = (ProbeArgs){0};
    train_config_defaults(&a->run);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (c->rank == 0) help();
            return false;
        } else if (!strcmp(argv[i], "--ckpt")) a->ckpt = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--batch")) a->batch = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--out")) a->out = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--dump-tape")) a->dump = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--make-batch"))
            a->make_batch = flag_int(argv[i], flag_value(argc, argv, &i), 1, 4096);
        else if (!settings_flag(&a->run, FOR_PROBE, argc, argv, &i))
            usage_error("probe: unknown argument '%s'", argv[i]);
    }
    if (a->make_batch && a->batch) usage_error("probe --make-batch writes a batch to --out; leave out --batch");
    if (!a->make_batch && (a->run.max_tokens || strcmp(a->run.data, "shapes")))
        usage_error("probe --data and --max-tokens choose the images of --make-batch; a --batch file "
                    "brings its own (a batch of packs has a 'pack' tensor): leave them out");
    if (a->make_batch) a->batch = "";
    if (!a->ckpt || !a->batch || !a->out) usage_error("probe needs --ckpt, --batch and --out");
    char why[1024]; // the bugs' needs of the options; the model's once the checkpoint is read
    if (sp_bugs_error(&a->run.parallel, NULL, c->size, why, sizeof why)) usage_error("%s", why);
    if (a->dump && a->make_batch) usage_error("probe --make-batch writes a batch; leave out --dump-tape");
    if (a->dump && a->run.parallel.grad_accum > 1)
        usage_error("probe --dump-tape dumps one micro-batch; drop --grad-accum");
    char text[4096], settings_line[2048];
    settings_text(&a->run, FOR_PROBE, settings_line, sizeof settings_line);
    snprintf(text, sizeof text, "ckpt=%s batch=%s out=%s dump=%s make_batch=%d %s", a->ckpt, a->batch,
             a->out, a->dump ? a->dump : "", a->make_batch, settings_line);
    comm_check_same(c, "probe arguments", text);
    if (c->rank == 0) { // the rank that writes the result
        out_file_check("--out", a->out, NULL);
        out_file_not_input("--out", a->out, "--ckpt", a->ckpt);
        if (!a->make_batch) out_file_not_input("--out", a->out, "--batch", a->batch);
        if (a->dump) {
            out_file_check("--dump-tape", a->dump, NULL);
            out_file_not_input("--dump-tape", a->dump, "--ckpt", a->ckpt);
            out_file_not_input("--dump-tape", a->dump, "--batch", a->batch);
            out_file_not_input("--dump-tape", a->dump, "--out", a->out);
        }
    }
    return true;
}

// Integer tensor t's value i (I64 or I32) as int64; memcpy: other writers may leave the data
// unaligned
static int64_t batch_int(const StTensor *t, size_t i) {
    int64_t v64;
    int32_t v32;
    if (t->dtype == ST_I64) return memcpy(&v64, (const char *)t->data + 8 * i, 8), v64;
    return memcpy(&v32, (const char *)t->data + 4 * i, 4), v32;
}

// The batch's `pack` tensor (the file has one) as a pack of B rows of T tokens, in the arena
// (row, first token, patch rows, patch columns, and for a clip model patch frames, of each image)
static DiTPack *load_pack(const SafeTensors *st, const char *path, int B, int T, bool clips, Arena *arena) {
    int cols = clips ? 5 : 4;
    const StTensor *ps = batch_tensor(st, path, "pack", true, 2, (int64_t[]){-1, cols});
    if (ps->shape[0] > DIT_PACK_MAX)
        usage_error("--batch %s: 'pack' lists %lld images; a batch of packs holds at most %d", path,
                    (long long)ps->shape[0], DIT_PACK_MAX);
    DiTPack *pk = arena_alloc(arena, sizeof *pk);
    *pk = (DiTPack){.B = B, .T = T, .n = (int)ps->shape[0]};
    for (int i = 0; i < pk->n; i++) {
        int v[5] = {0, 0, 0, 0, 1};
        for (int k = 0; k < cols; k++) {
            int64_t v64 = batch_int(ps, (size_t)cols * i + k);
            v[k] = v64 < INT32_MIN || v64 > INT32_MAX ? -1 : (int)v64;
        }
        pk->img[i] = (DiTImage){v[0], v[1], v[2], v[3], v[4] < 1 ? -1 : v[4]};
    }
    char err[256];
    if (dit_pack_error(pk, err, sizeof err))
        usage_error("--batch %s: 'pack' (row, first token, patch rows, patch columns%s of each image): "
                    "%s", path, clips ? ", patch frames" : "", err);
    return pk;
}

ProbeBatch probe_load_batch(const DiT *m, const char *path, const SafeTensors *st, Arena *arena) {
    const DiTConfig *cfg = &m->cfg;
    int S = cfg->input_size, Co = dit_out_channels(cfg), p = cfg->patch_size;
    // clips: their frames stacked along the height; packs: strips (B, C, pt p, T p) of rows of T tokens
    const StTensor *raw = st_find(st, "x");
    bool packs = st_find(st, "pack") != NULL;
    int64_t H = packs ? dit_patch_t(cfg) * p : dit_frames(cfg) * S, W = !packs ? S : raw && raw->ndim == 4 && raw->shape[3] > 0 ? raw->shape[3] : p;
    if (packs && (W % p || W / p > dit_tokens(cfg)))
        usage_error("--batch %s: 'x' is a strip of %lld pixels; a batch of packs needs rows of at most "
                    "%d tokens of %d pixels (--max-tokens of the checkpoint's --input-size)", path,
                    (long long)W, dit_tokens(cfg), p);
    const StTensor *xs = batch_tensor(st, path, "x", false, 4, (int64_t[]){-1, cfg->in_channels, H, W});
    int64_t B64 = xs->shape[0];
    if (B64 > PROBE_MAX_BATCH) // probe_main sized the arena for at most this many
        usage_error("--batch %s: 'x' holds %lld images; a probe batch holds at most %d", path,
                    (long long)B64, PROBE_MAX_BATCH);
    DiTPack *pack = packs ? load_pack(st, path, (int)B64, (int)(W / p), dit_frames(cfg) > 1, arena) : NULL;
    int64_t n64 = pack ? pack->n : B64; // times and labels: per image
    const StTensor *ts = batch_tensor(st, path, "t", false, 1, &n64);
    int L = cfg->text ? cfg->text_len : 1; // text: y holds each image's caption, (n, L) token ids
    const StTensor *ys = batch_tensor(st, path, "y", true, cfg->text ? 2 : 1, (int64_t[]){n64, L});
    // the target: every output channel, or (learn_sigma) the velocity's alone, as training and
    // --make-batch write it
    const StTensor *g = st_find(st, "target");
    int Ct = g && g->ndim == 4 && g->shape[1] == cfg->in_channels ? cfg->in_channels : Co;
    const StTensor *gs = batch_tensor(st, path, "target", false, 4, (int64_t[]){B64, Ct, H, W});
    int B = (int)B64, n = (int)n64;
    ProbeBatch b = {tensor_new(arena, 4, B, cfg->in_channels, (int)H, (int)W), tensor_new(arena, 1, n),
                    tensor_new(arena, 4, B, Ct, (int)H, (int)W), arena_alloc(arena, (size_t)n * L * sizeof(int64_t)), pack};
    batch_into(b.x, xs, path);
    batch_into(b.t, ts, path);
    batch_into(b.target, gs, path);
    for (int i = 0; i < n * L && cfg->text; i++) {
        b.y[i] = batch_int(ys, (size_t)i);
        if (!caption_word((int)b.y[i]) && b.y[i])
            usage_error("--batch %s: y[%d][%d] = %lld is not a word of the captions' vocabulary (1 to "
                        "%d, or 0 for padding)", path, i / L, i % L, (long long)b.y[i], caption_vocab_size());
    }
    int classes = cfg->num_classes, rows = m->y_table ? m->y_table->shape[0] : 0; // +1: a null class
    for (int i = 0; i < n && !cfg->text; i++) {
        b.y[i] = batch_int(ys, (size_t)i);
        if (b.y[i] < 0 || b.y[i] >= rows) {
            char null[64] = "";
            if (rows > classes) snprintf(null, sizeof null, ", or %d for the null class", classes);
            usage_error("--batch %s: label y[%d] = %lld is not a class of this checkpoint; its "
                        "labels are 0 to %d%s", path, i, (long long)b.y[i], classes - 1, null);
        }
    }
    return b;
}

void probe_write_batch(const char *ckpt, const char *path, int B, int step, const char *source,
                       int max_tokens) {
    char err[1024];
    DiT m;
    if (ckpt_load_model(&m, ckpt, err, sizeof err)) usage_error("--ckpt: %s", err);
    const DiTConfig *c = &m.cfg;
    if (max_tokens && data_procedural(source))
        usage_error("probe --make-batch --max-tokens packs the images of a folder; pass --data DIR");
    if (max_tokens > dit_tokens(c))
        usage_error("--max-tokens %d is above the %d tokens of %s's input size; pass at most %d",
                    max_tokens, dit_tokens(c), ckpt, dit_tokens(c));
    Data data;
    if (data_open(&data, source, c->input_size, dit_frames(c), c->in_channels, c->num_classes, err, sizeof err))
        usage_error("--data: %s", err);
    if (c->text && data_captions(&data, c->text_len, err, sizeof err)) usage_error("--data: %s", err);
    data.max_tokens = max_tokens, data.patch = c->patch_size;
    int per = c->text ? c->text_len : 1;
    Batch b = max_tokens ? batch_alloc_packs(0, B, B, c->in_channels, dit_patch_t(c), c->patch_size, max_tokens, per)
                         : batch_alloc(0, B, B, c->in_channels, dit_frames(c), c->input_size, per);
    batch_make(&b, &data, 0, c->class_dropout_prob, c->num_classes, step);
    int n = b.pack ? b.pack->n : B; // the times and labels are per image
    StWriter *w = st_writer_new();
    st_writer_add_real(w, "x", 4, b.xt->shape, b.xt->data);
    st_writer_add_real(w, "t", 1, (int[]){n}, b.t->data);
    st_writer_add_real(w, "target", 4, b.v->shape, b.v->data);
    if (c->text) st_writer_add(w, "y", ST_I64, 2, (int64_t[]){n, c->text_len}, b.y);
    else st_writer_add(w, "y", ST_I64, 1, (int64_t[]){n}, b.y);
    int cols = dit_frames(c) > 1 ? 5 : 4; // clips: their patch frames too
    int64_t *images = xmalloc((size_t)cols * n * sizeof(int64_t));
    for (int i = 0; b.pack && i < n; i++) {
        const DiTImage *im = &b.pack->img[i];
        int64_t v[5] = {im->row, im->start, im->gh, im->gw, dit_image_grid(im).frames};
        memcpy(images + (size_t)cols * i, v, (size_t)cols * sizeof(int64_t));
    }
    if (b.pack) st_writer_add(w, "pack", ST_I64, 2, (int64_t[]){n, cols}, images);
    if (st_writer_write(w, path, err, sizeof err)) usage_error("--out: %s", err);
    st_writer_free(w);
    free(images);
    batch_free(&b);
    data_close(&data);
    dit_free(&m);
}

// out, loss and every parameter's gradient (on rank 0), and the precision they were computed in
// (metadata "precision": compare's bounds follow it)
static void write_result(const DiT *m, const Tensor *img, double loss, bool bf16, const char *out) {
    char err[1024], name[160];
    StWriter *w = st_writer_new();
    st_writer_meta(w, "precision", bf16 ? "bf16" : "fp32");
    real lossv = (real)loss;
    st_writer_add_real(w, "out", 4, img->shape, img->data);
    st_writer_add_real(w, "loss", 1, (int[]){1}, &lossv);
    for (int i = 0; i < m->ps.n; i++) {
        snprintf(name, sizeof name, "grad.%s", m->ps.t[i]->name);
        st_writer_add_real(w, name, m->ps.t[i]->ndim, m->ps.t[i]->shape, m->ps.t[i]->grad);
    }
    if (st_writer_write(w, out, err, sizeof err)) usage_error("--out: %s", err);
    st_writer_free(w);
}

int probe_main(int argc, char **argv, Comm *c) {
    ProbeArgs a;
    if (!parse_args(&a, argc, argv, c)) return 0;
    if (dry_run) {
        bool say = c->rank == 0;
        dry_run_missing("--ckpt", a.ckpt, say);
        if (!a.make_batch) dry_run_missing("--batch", a.batch, say);
        if (a.make_batch) print0(c, "dry run: probe would write a batch of %d for %s to %s\n", a.make_batch, a.ckpt, a.out);
        else print0(c, "dry run: probe would run one step of %s on %s over %d rank%s and write %s%s%s\n",
                    a.ckpt, a.batch, c->size, c->size > 1 ? "s" : "", a.out, a.dump ? " and the tape " : "",
                    a.dump ? a.dump : "");
        print0(c, "dry run: every flag checked; nothing run or written\n");
        return 0;
    }
    if (a.make_batch) {
        if (c->rank == 0)
            probe_write_batch(a.ckpt, a.out, a.make_batch, PROBE_BATCH_STEP, a.run.data, a.run.max_tokens);
        print0(c, "probe: wrote a batch of %d %s to %s\n", a.make_batch,
               a.run.max_tokens ? "rows of packs" : "images", a.out);
        return 0;
    }
    char err[1024];
    DiT m;
    SafeTensors ck, st; // the checkpoint (its values read once the store is split), the batch
    if (ckpt_open_model(&ck, &m, a.ckpt, err, sizeof err)) usage_error("--ckpt: %s", err);
    if (st_read(a.batch, &st, err, sizeof err)) usage_error("--batch: %s", err);
    const StTensor *xs = st_find(&st, "x");
    int B = xs && xs->ndim == 4 && xs->shape[0] >= 1 && xs->shape[0] <= PROBE_MAX_BATCH ? (int)xs->shape[0] : 1;
    // packs: rows of the strip's tokens (probe_load_batch checks them)
    int p = m.cfg.patch_size, T = xs && xs->ndim == 4 ? (int)(xs->shape[3] / p) : 0;
    bool packs = st_find(&st, "pack") && T >= 1 && T <= dit_tokens(&m.cfg);
    a.run.parallel.packs = packs;
    a.run.model = m.cfg;
    run_check(&a.run, FOR_PROBE, c->size); // the checkpoint's model
    SeqParallel sp;
    sp_setup_tokens(&sp, c, c->size, c->rank, &a.run.parallel, &m.cfg, packs ? T : dit_tokens(&m.cfg));
    if (a.dump && packs && sp.dp > 1)
        usage_error("probe --dump-tape of packs runs in one data group (its images' rows differ "
                    "between groups); leave out --sp");
    int first, count, micro_first, micro;
    if (sp_batch_slice(&sp, B, &first, &count, err, sizeof err)) usage_error("--batch %s: %s", a.batch, err);
    sp_micro_batch(&sp, count, 0, &micro_first, &micro); // the largest
    ProbeArenas bytes = budget_probe(&sp, &m.cfg, B, count, micro);
    Arena host = arena_create(bytes.host), arena = arena_create_on(sp.cuda, bytes.step, sp.exact ? bytes.step : 0);
    ProbeBatch whole = probe_load_batch(&m, a.batch, &st, &host);
    st_free(&st);

    // forward and backward of this rank's shard of its data group's images, then the sums over
    // ranks, and the data group's output images
    if (a.run.parallel.zero && c->size > 1) sp_split_store(&sp, &m.ps, a.run.parallel.zero); // as training: split, then read
    dit_alloc(&m, false, false);
    if (ckpt_load_values(&m, &ck, a.ckpt, true, false, err, sizeof err)) usage_error("--ckpt: %s", err);
    st_free(&ck);
    DiT dev, *work = dit_place(&m, &dev, sp.cuda);
    int H = whole.x->shape[2], W = whole.x->shape[3], Co = dit_out_channels(&m.cfg);
    TapeDump dump;
    if (a.dump) tape_dump_start(&dump, &sp, c->rank);
    Tensor *img = tensor_new(&host, 4, count, Co, H, W);
    DiTPack mine; // packs: the data group's rows, whose images are [i0, i0 + mine.n)
    int i0 = whole.pack ? dit_pack_rows(whole.pack, first, count, &mine) : first;
    double total_loss = step_gradients(work, &sp, &arena,
                                       tensor_rows(&host, whole.x, first, count),
                                       tensor_rows(&host, whole.t, i0, whole.pack ? mine.n : count),
                                       whole.y + (size_t)i0 * (m.cfg.text ? m.cfg.text_len : 1), // a label or a caption each
                                       tensor_rows(&host, whole.target, first, count),
                                       B, whole.pack ? &mine : NULL, img->data);
    if (work != &m) dit_copy(&m, work), dit_free(work); // the gradients, for the result
    real *whole_grads = NULL; // --zero: the summed gradients are the ranks' slices; whole here
    if (m.ps.shards > 1) {
        whole_grads = xmalloc(m.ps.total * sizeof(real));
        sp_whole_grads(&sp, &m.ps, whole_grads);
        for (int i = 0, at = 0; i < m.ps.n; at += m.ps.t[i++]->size) m.ps.t[i]->grad = whole_grads + at;
    }
    if (a.dump) tape_dump_params(&dump, &m.ps);
    if (sp.dp > 1) {
        Tensor *all = tensor_new(&host, 4, B, Co, H, W);
        sp_gather_batch(&sp, all->data, img->data, img->size);
        img = all;
    }
    char layout_text[128];
    sp_layout_text(&a.run.parallel, c->size, layout_text, sizeof layout_text);
    if (a.dump && tape_dump_write(&dump, a.dump, layout_text, err, sizeof err)) usage_error("--dump-tape: %s", err);
    if (c->rank == 0) {
        write_result(&m, img, total_loss, a.run.parallel.bf16, a.out);
        char layout[128], device[256] = "";
        if (sp.cuda) snprintf(device, sizeof device, " on %s", sp_device_text(&sp, layout, sizeof layout));
        printf("probe: %d rank%s (%s)%s, %d tokens (padded to %d), loss %.9g, wrote %s\n", c->size,
               c->size > 1 ? "s" : "", sp_layout_text(&a.run.parallel, c->size, layout, sizeof layout),
               device, sp.shard.T, sp.shard.T_pad, total_loss, a.out);
    }
    arena_destroy(&arena);
    arena_destroy(&host);
    sp_free(&sp);
    free(whole_grads);
    dit_free(&m);
    return 0;
}
