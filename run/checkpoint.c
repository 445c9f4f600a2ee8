// checkpoint.c: see checkpoint.h.
#include "checkpoint.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../parallel/transport/comm.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A step as the metadata holds it: a whole number in 0..INT_MAX, nothing before or after it; else -1
static int parse_step(const char *s) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return *end || errno || v > INT_MAX ? -1 : (int)v;
}

// ---- model file -------------------------------------------------------------------------------
static void put_meta(StWriter *w, const DiTConfig *c) {
    char buf[64];
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        dit_config_value(c, i, buf, sizeof buf);
        st_writer_meta(w, dit_config_key(i), buf);
    }
}

// The optimizer file's flat tensors, [total] each in a whole store's order: the float master
// copies of the parameters and the EMA (written under --save-dtype bf16 only), Adam's moments
static const char *const FLAT[4] = {"master.params", "master.ema", "adam.m", "adam.v"};

// Where unit u begins in a whole store's layout (the parameters in the order registered)
static size_t unit_start(const ParamStore *ps, int u) {
    size_t at = 0;
    for (int k = 0; k < u; k++) at += ps->unit[k].len;
    return at;
}

// The model file begun at "<path>.tmp": the metadata and pos_embed (always the real type: a fixed
// table), every parameter to come as a later tensor (BF16 with bf16: --save-dtype bf16). NULL with
// a message: nothing left behind
static StWriter *begin_model(const DiT *m, const char *path, int step, const char *optimizer_file,
                             bool bf16, char *err, size_t len) {
    StWriter *w = st_writer_new();
    put_meta(w, &m->cfg);
    char buf[32];
    snprintf(buf, sizeof buf, "%d", step);
    if (step >= 0) st_writer_meta(w, "step", buf);
    if (optimizer_file) st_writer_meta(w, "optimizer_state", optimizer_file);
    st_writer_add_real(w, "pos_embed", 3, m->pos_embed.shape, m->pos_embed.data);
    for (int i = 0; i < m->ps.n; i++) st_writer_add_real_later(w, m->ps.t[i]->name, m->ps.t[i]->ndim, m->ps.t[i]->shape, bf16);
    if (!st_writer_begin(w, path, err, len)) return w;
    st_writer_free(w);
    return NULL;
}

// Unit u's parameters (its values in the order registered) into a begun model file
static void put_params(StWriter *w, const ParamStore *ps, int u, const real *values) {
    int end = u + 1 < ps->units ? ps->unit[u + 1].first : ps->n;
    for (int i = ps->unit[u].first; i < end; values += ps->t[i++]->size)
        st_writer_put_real(w, ps->t[i]->name, 0, values, ps->t[i]->size);
}

// Ends a file begun (0, or -1 with the reason) and frees its writer
static int end_file(StWriter *w, char *err, size_t len) {
    int rc = st_writer_end(w, err, len);
    st_writer_free(w);
    return rc;
}

int ckpt_save_model(const DiT *m, const real *flat, const char *path, int step,
                    const char *optimizer_file, char *err, size_t len) {
    const ParamStore *ps = &m->ps;
    CHECK(flat || ps->level < 3, "ckpt_save_model: a store split at level 3 has no whole parameters");
    StWriter *w = begin_model(m, path, step, optimizer_file, false, err, len);
    if (!w) return -1;
    for (int u = 0; u < ps->units; u++) // flat: a whole store's order
        put_params(w, ps, u, flat ? flat + unit_start(ps, u) : ps->params + ps->unit[u].at);
    return end_file(w, err, len);
}

// ---- a run's state, a unit at a time ----------------------------------------------------------
size_t ckpt_stage_bytes(const ParamStore *ps) {
    size_t most = 0;
    for (int u = 0; ps->shards > 1 && u < ps->units; u++) {
        size_t bytes = (ps->shards * ps->unit[u].piece * sizeof(real) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        most = bytes > most ? bytes : most;
    }
    return most;
}

// Unit u of a buffer laid out as the slice (the moments; at level 3 the parameters and the EMA)
// on rank 0, in a whole store's order: every rank's piece gathered into stage, or the buffer's own
// when the store is whole (NULL on the other ranks)
static const real *gather_unit(Comm *c, const ParamStore *ps, int u, const real *slice, Arena *stage) {
    const PsUnit *U = &ps->unit[u];
    if (ps->shards == 1) return slice + U->slice;
    real *all = c->rank == 0 ? arena_alloc_empty(stage, ps->shards * U->piece * sizeof(real)) : NULL;
    comm_gather(c, all, slice + U->slice, U->piece);
    return all;
}

static void path_in(char *buf, size_t len, const char *dir, const char *file) {
    int n = snprintf(buf, len, "%s/%s", dir, file);
    CHECK(n > 0 && (size_t)n < len, "the path %s/%s is too long", dir, file);
}

static StWriter *begin_optimizer(const ParamStore *ps, const AdamW *opt, const char *run,
                                 bool masters, const char *path, char *err, size_t len);
static void put_flat(StWriter *w, const ParamStore *ps, int u, const char *name, const real *values);

int ckpt_save_state(const DiT *m, const AdamW *opt, const char *run, int step, bool bf16, Comm *c,
                    Arena *stage, const char *dir, char *err, size_t len) {
    const ParamStore *ps = &m->ps;
    const char *file[3] = {"optimizer.safetensors", "model.safetensors", "ema.safetensors"};
    StWriter *w[3] = {0}; // rank 0's writers of the files, as they begin
    char path[4096], why[1024];
    int rc = 0;
    for (int f = 0; c->rank == 0 && !rc && f < (ps->ema ? 3 : 2); f++) {
        path_in(path, sizeof path, dir, file[f]);
        w[f] = f ? begin_model(m, path, step, f == 1 ? file[0] : NULL, bf16, err, len)
                 : begin_optimizer(ps, opt, run, bf16, path, err, len);
        rc = w[f] ? 0 : -1;
    }
    bool split = ps->level >= 3; // the parameters and the EMA are pieces too
    size_t mark = c->rank == 0 ? arena_mark(stage) : 0;
    for (int u = 0; u < ps->units; u++) // every rank gathers, one unit of one buffer at a time
        for (int k = 0; k < 4; k++) { // the parameters, the EMA, then Adam's m and v
            if (k == 1 && !ps->ema) continue;
            const real *buf = k == 0 ? ps->own : k == 1 ? ps->ema : k == 2 ? ps->m : ps->v;
            const real *values = k < 2 && !split ? buf + ps->unit[u].at // whole on every rank
                                                 : gather_unit(c, ps, u, buf, stage);
            if (k < 2 && w[1 + k]) put_params(w[1 + k], ps, u, values);
            if ((k >= 2 || bf16) && w[0]) put_flat(w[0], ps, u, FLAT[k], values);
            if (c->rank == 0) arena_release(stage, mark);
        }
    for (int f = 0; f < 3; f++) // ends every file begun, keeping the first failure's message
        if (w[f] && end_file(w[f], rc ? why : err, rc ? sizeof why : len)) rc = -1;
    return rc;
}

// ---- loading: the config, then every name, shape and dtype, then the values --------------------
static bool shape_matches(const StTensor *s, const Tensor *t) {
    if (s->ndim != t->ndim) return false;
    for (int i = 0; i < t->ndim; i++)
        if (s->shape[i] != t->shape[i]) return false;
    return true;
}

// Appends "; " and a formatted problem to err, listing the first few problems of a checkpoint.
static void note(char *err, size_t len, int *problems, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(char *err, size_t len, int *problems, const char *fmt, ...) {
    size_t n = strlen(err);
    if (++*problems > 4 || n + 8 >= len) return; // the first few are enough to act on
    n += (size_t)snprintf(err + n, len - n, "%s", *problems > 1 ? "; " : ": ");
    va_list ap;
    va_start(ap, fmt);
    if (n < len) vsnprintf(err + n, len - n, fmt, ap);
    va_end(ap);
}

// The config in the file's metadata, within the training flags' limits; -1 with a message.
static int read_config(const SafeTensors *st, const char *path, DiTConfig *cfg, char *err,
                       size_t len) {
    *cfg = (DiTConfig){0};
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        const char *key = dit_config_key(i), *v = st_meta(st, key);
        if (!v && !strcmp(key, "class_dropout_prob")) {
            // not among DESIGN's keys: the label table's extra null-class row tells whether the
            // model was trained with label dropout (DiT's default rate then); num_classes, an
            // earlier row of the table, is read by now
            const StTensor *t = st_find(st, "y_embedder.embedding_table.weight");
            bool null_row = t && t->ndim == 2 && t->shape[0] == cfg->num_classes + 1;
            cfg->class_dropout_prob = null_row ? 0.1 : 0;
            continue;
        }
        if (!v && (!strcmp(key, "in_context") || !strcmp(key, "cond") || !strcmp(key, "text_len") ||
                   !strcmp(key, "text_depth") || !strcmp(key, "text_attn") || !strcmp(key, "frames") ||
                   !strcmp(key, "patch_t") || !strcmp(key, "pos") || !strcmp(key, "qk_norm")))
            continue; // not among DESIGN's keys: adaLN, class labels, images, sin-cos, no QK-norm
        if (!v || dit_config_set(cfg, i, v)) {
            snprintf(err, len, "%s: the metadata %s config key '%s'%s%s; write checkpoints with "
                     "'train' or add the DiT config to __metadata__", path,
                     v ? "has an invalid value for" : "lacks the", key, v ? ": " : "", v ? v : "");
            return -1;
        }
    }
    char why[256];
    if (dit_config_error(cfg, why, sizeof why)) {
        snprintf(err, len, "%s: the DiT config in its metadata is invalid: %s; the file is corrupt "
                 "or was not written for this program", path, why);
        return -1;
    }
    return 0;
}

// The file's tensors against m's layout (pos_embed and every parameter): each missing,
// misshapen, non-float or unexpected tensor is noted in err. Returns the number of problems.
static int check_tensors(const SafeTensors *st, const DiT *m, const char *path, char *err,
                         size_t len) {
    int problems = 0;
    snprintf(err, len, "%s does not match the DiT its metadata describes", path);
    char a[64], b[64];
    for (int i = -1; i < m->ps.n; i++) { // -1: pos_embed
        const Tensor *t = i < 0 ? &m->pos_embed : m->ps.t[i];
        const StTensor *s = st_find(st, t->name);
        if (!s) note(err, len, &problems, "missing tensor '%s'", t->name);
        else if (!shape_matches(s, t))
            note(err, len, &problems, "'%s' has shape %s but %s was expected", t->name,
                 st_shape_str(a, sizeof a, s->shape, s->ndim), tensor_shape_str(t, b, sizeof b));
        else if (!st_is_float(s->dtype))
            note(err, len, &problems, "'%s' has dtype %s, not a float type (F32, F64, BF16, F16)", t->name,
                 st_dtype_name(s->dtype));
    }
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, "pos_embed") && !ps_find(&m->ps, st->tensors[i].name))
            note(err, len, &problems, "unexpected tensor '%s'", st->tensors[i].name);
    return problems;
}

// 0 with err empty when there were no problems; else -1, err ending in how many were not listed.
static int verdict(char *err, size_t len, int problems) {
    if (!problems) return err[0] = 0, 0;
    if (problems > 4) {
        size_t n = strlen(err);
        snprintf(err + n, len - n, "; and %d more problems", problems - 4);
    }
    return -1;
}

int ckpt_open_model(SafeTensors *st, DiT *m, const char *path, char *err, size_t len) {
    *m = (DiT){0};
    if (st_open(path, st, err, len)) return -1;
    DiTConfig cfg;
    if (read_config(st, path, &cfg, err, len)) return st_free(st), -1;
    dit_layout(m, &cfg);
    int problems = check_tensors(st, m, path, err, len);
    if (!problems) return 0;
    st_free(st);
    dit_free(m);
    *m = (DiT){0};
    return verdict(err, len, problems);
}

#define UNUSABLE "%s cannot be used (its run had diverged when it was saved, or the file is " \
                 "corrupt; use another checkpoint)"

// Elements [first, first + n) of the file's tensor `name` into dst, noting a value that is not finite
static void load_range(const SafeTensors *st, const char *name, size_t first, size_t n, real *dst,
                       char *err, size_t len, int *problems) {
    char why[256];
    const StTensor *s = st_find(st, name);
    if (st_read_real(st, s, first, n, dst, why, sizeof why)) return note(err, len, problems, "%s", why);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(dst[i]);
    if (bad && n == s->nbytes / st_dtype_size(s->dtype))
        note(err, len, problems, "tensor '%s' has NaN or infinite values: %zu of %zu", name, bad, n);
    else if (bad)
        note(err, len, problems, "tensor '%s' has NaN or infinite values: %zu of its elements "
             "[%zu, %zu)", name, bad, first, first + n);
}

// Unit u's values from st where its tensors point, then kept (ps_keep_unit) as the parameters, the
// EMA or both: each tensor's own, or with flat its place in that flat tensor (the masters)
static void load_unit(const SafeTensors *st, ParamStore *ps, int u, const char *flat, bool params,
                      bool ema, char *err, size_t len, int *problems) {
    int end = u + 1 < ps->units ? ps->unit[u + 1].first : ps->n;
    size_t at = unit_start(ps, u);
    for (int i = ps->unit[u].first; i < end; at += ps->t[i++]->size)
        load_range(st, flat ? flat : ps->t[i]->name, flat ? at : 0, ps->t[i]->size, ps->t[i]->data, err,
                   len, problems);
    ps_keep_unit(ps, u, params, ema);
}

int ckpt_load_values(DiT *m, const SafeTensors *st, const char *path, bool params, bool ema,
                     char *err, size_t len) {
    ParamStore *ps = &m->ps;
    CHECK(ps->params && !ps->device && (!ema || ps->ema),
          "ckpt_load_values: the store is not allocated on the host%s", ema ? " with an EMA" : "");
    int problems = 0;
    snprintf(err, len, UNUSABLE, path);
    if (params) load_range(st, "pos_embed", 0, m->pos_embed.size, m->pos_embed.data, err, len, &problems);
    for (int u = 0; u < ps->units; u++) load_unit(st, ps, u, NULL, params, ema, err, len, &problems);
    return verdict(err, len, problems);
}

int ckpt_load_model(DiT *m, const char *path, char *err, size_t len) {
    SafeTensors st;
    if (ckpt_open_model(&st, m, path, err, len)) return -1;
    dit_alloc(m, false, false);
    int rc = ckpt_load_values(m, &st, path, true, false, err, len);
    st_free(&st);
    if (rc) {
        dit_free(m);
        *m = (DiT){0};
    }
    return rc;
}

int ckpt_load_ema(DiT *m, const char *path, char *err, size_t len) {
    SafeTensors st;
    DiT layout; // shapes only
    if (ckpt_open_model(&st, &layout, path, err, len)) return -1;
    int rc = -1;
    if (layout.ps.total != m->ps.total)
        snprintf(err, len, "%s holds a different model (%zu parameters, not %zu)", path,
                 layout.ps.total, m->ps.total);
    else {
        int problems = check_tensors(&st, m, path, err, len); // its names and shapes are m's
        rc = problems ? verdict(err, len, problems) : ckpt_load_values(m, &st, path, false, true, err, len);
    }
    st_free(&st);
    dit_free(&layout);
    return rc;
}

int ckpt_step(const char *path, char *err, size_t len) {
    SafeTensors st;
    if (st_open(path, &st, err, len)) return -1;
    int step = parse_step(st_meta(&st, "step"));
    if (step < 0)
        snprintf(err, len, "%s records no training step; it was not written by a training run", path);
    st_free(&st);
    return step;
}

// ---- optimizer file ---------------------------------------------------------------------------
// The optimizer file begun at "<path>.tmp": the run's settings and step, Adam's moments to come,
// and with masters (--save-dtype bf16) the float parameters and EMA, whose model files are bf16
static StWriter *begin_optimizer(const ParamStore *ps, const AdamW *opt, const char *run,
                                 bool masters, const char *path, char *err, size_t len) {
    StWriter *w = st_writer_new();
    st_writer_meta(w, "run", run);
    char buf[64];
    int n = (int)ps->total;
    snprintf(buf, sizeof buf, "%d", opt->step);
    st_writer_meta(w, "step", buf);
    snprintf(buf, sizeof buf, "%zu", ps->total);
    st_writer_meta(w, "elements", buf);
    for (int k = 0; k < 4; k++)
        if (k >= 2 || (masters && (k == 0 || ps->ema))) st_writer_add_real_later(w, FLAT[k], 1, &n, false);
    if (!st_writer_begin(w, path, err, len)) return w;
    st_writer_free(w);
    return NULL;
}

// Unit u's values of the optimizer file's flat tensor `name`
static void put_flat(StWriter *w, const ParamStore *ps, int u, const char *name, const real *values) {
    st_writer_put_real(w, name, unit_start(ps, u), values, ps->unit[u].len);
}

int ckpt_save_optimizer(const ParamStore *ps, const real *m, const real *v, const AdamW *opt,
                        const char *run, const char *path, char *err, size_t len) {
    StWriter *w = begin_optimizer(ps, opt, run, false, path, err, len);
    if (!w) return -1;
    for (int u = 0; u < ps->units; u++) {
        size_t at = unit_start(ps, u);
        put_flat(w, ps, u, FLAT[2], m + at);
        put_flat(w, ps, u, FLAT[3], v + at);
    }
    return end_file(w, err, len);
}

int ckpt_load_optimizer(ParamStore *ps, AdamW *opt, const char *run, const char *path, char *err,
                        size_t len) {
    SafeTensors st;
    if (st_open(path, &st, err, len)) return -1;
    const StTensor *m = st_find(&st, "adam.m"), *v = st_find(&st, "adam.v");
    const char *step = st_meta(&st, "step"), *saved_run = st_meta(&st, "run");
    int step_value = parse_step(step);
    int rc = -1;
    if (!m || !v || !step || !saved_run)
        snprintf(err, len, "%s is not an optimizer state file (it needs adam.m, adam.v, a step and "
                 "the run settings)", path);
    else if (step_value < 0)
        snprintf(err, len, "%s records step '%.40s', which is not a whole number in 0..%d; resume "
                 "from another checkpoint or start a new run", path, step, INT_MAX);
    else if (strcmp(saved_run, run))
        snprintf(err, len, "%s was written by a run with %s but this one has %s; resume with the "
                 "same settings or start a new run", path, saved_run, run);
    else if (m->ndim != 1 || v->ndim != 1 || (size_t)m->shape[0] != ps->total ||
             (size_t)v->shape[0] != ps->total)
        snprintf(err, len, "%s holds Adam moments for %lld parameters but the model has %zu; it "
                 "belongs to another model", path, (long long)m->shape[0], ps->total);
    else { // this rank's piece of each unit (a whole store's: every unit)
        int problems = 0;
        snprintf(err, len, "%s cannot be used", path);
        for (int u = 0; u < ps->units; u++) {
            size_t from, mine = ps_piece_of(ps, u, &from), at = unit_start(ps, u) + from;
            load_range(&st, "adam.m", at, mine, ps->m + ps->unit[u].slice, err, len, &problems);
            load_range(&st, "adam.v", at, mine, ps->v + ps->unit[u].slice, err, len, &problems);
        }
        if (problems) {
            size_t n = strlen(err);
            snprintf(err + n, len - n, "; resume from another checkpoint or start a new run");
        } else opt->step = step_value, rc = 0;
    }
    st_free(&st);
    return rc;
}

int ckpt_load_masters(DiT *m, const char *path, bool ema, char *err, size_t len) {
    ParamStore *ps = &m->ps;
    SafeTensors st;
    if (st_open(path, &st, err, len)) return -1;
    const StTensor *t[2] = {st_find(&st, FLAT[0]), st_find(&st, FLAT[1])};
    int rc = -1;
    ema = ema && t[1];
    if (!t[0] && !t[1]) rc = 1; // saved in float: the model files hold the weights
    else if (!t[0])
        snprintf(err, len, "%s holds %s but not %s (a file cut or edited?); resume from another "
                 "checkpoint", path, FLAT[1], FLAT[0]);
    else if (t[0]->ndim != 1 || (size_t)t[0]->shape[0] != ps->total || (ema && (t[1]->ndim != 1 ||
             (size_t)t[1]->shape[0] != ps->total)))
        snprintf(err, len, "%s holds master weights of another size than the model's %zu "
                 "parameters; it belongs to another model", path, ps->total);
    else {
        int problems = 0;
        snprintf(err, len, UNUSABLE, path);
        for (int u = 0; u < ps->units; u++) // the EMA first: it passes through the parameters' place
            for (int k = ema ? 1 : 0; k >= 0; k--) load_unit(&st, ps, u, FLAT[k], k == 0, k == 1, err, len, &problems);
        rc = verdict(err, len, problems);
    }
    st_free(&st);
    return rc;
}
