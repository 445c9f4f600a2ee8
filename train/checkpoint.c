// checkpoint.c: see checkpoint.h.
#include "checkpoint.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- model file -------------------------------------------------------------------------------
static void put_meta(StWriter *w, const DiTConfig *c) {
    char buf[64];
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        dit_config_value(c, i, buf, sizeof buf);
        st_writer_meta(w, dit_config_key(i), buf);
    }
}

int ckpt_save_model(const DiT *m, const real *flat, const char *path, int step,
                    const char *optimizer_file, char *err, size_t len) {
    StWriter *w = st_writer_new();
    put_meta(w, &m->cfg);
    char buf[32];
    snprintf(buf, sizeof buf, "%d", step);
    if (step >= 0) st_writer_meta(w, "step", buf);
    if (optimizer_file) st_writer_meta(w, "optimizer_state", optimizer_file);
    st_writer_add_real(w, "pos_embed", 3, m->pos_embed.shape, m->pos_embed.data);
    for (int i = 0; i < m->ps.n; i++)
        st_writer_add_real(w, m->ps.t[i]->name, m->ps.t[i]->ndim, m->ps.t[i]->shape,
                           flat ? flat + m->ps.offset[i] : m->ps.t[i]->data);
    int rc = st_writer_write(w, path, err, len);
    st_writer_free(w);
    return rc;
}

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

// Converts a float tensor into n reals; -1 with a message naming the tensor if its dtype is not a
// float type or any value is NaN or infinite (the state of a diverged run, or a corrupt file).
static int load_finite(const StTensor *s, real *dst, size_t n, char *err, size_t len) {
    if (st_to_real(s, dst, n, err, len)) return -1;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(dst[i]);
    if (bad)
        snprintf(err, len, "tensor '%s' has NaN or infinite values: %zu of %zu", s->name, bad, n);
    return bad ? -1 : 0;
}

// Reads the file's config into *m's layout and checks every name, shape and dtype; then, with
// into NULL, allocates *m and loads every tensor, or else loads only the parameters into `flat`
// (laid out like into->ps.params), which *m's layout must fit, and frees *m.
static int load(DiT *m, const char *path, const DiT *into, real *flat, char *err, size_t len) {
    SafeTensors st;
    *m = (DiT){0};
    if (st_read(path, &st, err, len)) return -1;
    DiTConfig cfg = {0};
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        const char *v = st_meta(&st, dit_config_key(i));
        if (!v && !strcmp(dit_config_key(i), "class_dropout_prob")) {
            // not among DESIGN's keys: the label table's extra null-class row tells whether the
            // model was trained with label dropout (DiT's default rate then)
            const StTensor *t = st_find(&st, "y_embedder.embedding_table.weight");
            cfg.class_dropout_prob = t && t->ndim == 2 && t->shape[0] == cfg.num_classes + 1 ? 0.1 : 0;
            continue;
        }
        if (!v || dit_config_set(&cfg, i, v)) {
            snprintf(err, len, "%s: the metadata %s config key '%s'%s%s; write checkpoints with "
                     "'train' or add the DiT config to __metadata__", path,
                     v ? "has an invalid value for" : "lacks the", dit_config_key(i), v ? ": " : "",
                     v ? v : "");
            st_free(&st);
            return -1;
        }
    }
    char why[256];
    if (dit_config_error(&cfg, why, sizeof why)) {
        snprintf(err, len, "%s: the DiT config in its metadata is invalid: %s; the file is corrupt "
                 "or was not written for this program", path, why);
        st_free(&st);
        return -1;
    }
    // names, shapes and dtypes first: a file whose tensors do not fit its config (its metadata
    // claiming a huge model, say) is refused before the model's memory is taken
    dit_layout(m, &cfg);
    int problems = 0;
    snprintf(err, len, "%s does not match the DiT its metadata describes", path);
    char a[64], b[64];
    for (int i = -1; i < m->ps.n; i++) { // -1: pos_embed
        const Tensor *t = i < 0 ? &m->pos_embed : m->ps.t[i];
        const StTensor *s = st_find(&st, t->name);
        if (!s) note(err, len, &problems, "missing tensor '%s'", t->name);
        else if (!shape_matches(s, t))
            note(err, len, &problems, "'%s' has shape %s but %s was expected", t->name,
                 st_shape_str(a, sizeof a, s->shape, s->ndim), tensor_shape_str(t, b, sizeof b));
        else if (s->dtype != ST_F32 && s->dtype != ST_F64)
            note(err, len, &problems, "'%s' has dtype %s, not F32 or F64", t->name,
                 st_dtype_name(s->dtype));
    }
    for (int i = 0; i < st.n; i++)
        if (strcmp(st.tensors[i].name, "pos_embed") && !ps_find(&m->ps, st.tensors[i].name))
            note(err, len, &problems, "unexpected tensor '%s'", st.tensors[i].name);
    if (!problems && into && m->ps.total != into->ps.total)
        snprintf(err, len, "%s holds a different model (%zu parameters, not %zu)", path,
                 m->ps.total, into->ps.total), problems = 1;
    if (!problems) { // then the values
        if (!into) dit_alloc(m);
        snprintf(err, len, "%s cannot be used (its run had diverged when it was saved, or the file "
                 "is corrupt; use another checkpoint)", path);
        for (int i = into ? 0 : -1; i < m->ps.n; i++) {
            Tensor *t = i < 0 ? &m->pos_embed : m->ps.t[i];
            real *dst = into ? flat + m->ps.offset[i] : t->data;
            if (load_finite(st_find(&st, t->name), dst, t->size, why, sizeof why))
                note(err, len, &problems, "%s", why);
        }
    }
    st_free(&st);
    if (into || problems) {
        dit_free(m);
        *m = (DiT){0};
    }
    if (!problems) return err[0] = 0, 0;
    if (problems > 4) {
        size_t n = strlen(err);
        snprintf(err + n, len - n, "; and %d more problems", problems - 4);
    }
    return -1;
}

int ckpt_step(const char *path, char *err, size_t len) {
    SafeTensors st;
    if (st_read(path, &st, err, len)) return -1;
    const char *v = st_meta(&st, "step");
    char *end;
    long step = v ? strtol(v, &end, 10) : -1;
    if (!v || *end || step < 0)
        snprintf(err, len, "%s records no training step; it was not written by a training run", path),
            step = -1;
    st_free(&st);
    return (int)step;
}

int ckpt_load_model(DiT *m, const char *path, char *err, size_t len) {
    return load(m, path, NULL, NULL, err, len);
}

int ckpt_load_params(const DiT *m, real *flat, const char *path, char *err, size_t len) {
    DiT layout; // shapes only: no second copy of the model
    return load(&layout, path, m, flat, err, len);
}

// ---- optimizer file ---------------------------------------------------------------------------
int ckpt_save_optimizer(const ParamStore *ps, const AdamW *opt, const char *run, const char *path,
                        char *err, size_t len) {
    StWriter *w = st_writer_new();
    st_writer_meta(w, "run", run);
    char buf[64];
    int n = (int)ps->total;
    snprintf(buf, sizeof buf, "%d", opt->step);
    st_writer_meta(w, "step", buf);
    snprintf(buf, sizeof buf, "%zu", ps->total);
    st_writer_meta(w, "elements", buf);
    st_writer_add_real(w, "adam.m", 1, &n, ps->m);
    st_writer_add_real(w, "adam.v", 1, &n, ps->v);
    int rc = st_writer_write(w, path, err, len);
    st_writer_free(w);
    return rc;
}

int ckpt_load_optimizer(ParamStore *ps, AdamW *opt, const char *run, const char *path, char *err,
                        size_t len) {
    SafeTensors st;
    if (st_read(path, &st, err, len)) return -1;
    const StTensor *m = st_find(&st, "adam.m"), *v = st_find(&st, "adam.v");
    const char *step = st_meta(&st, "step"), *saved_run = st_meta(&st, "run");
    char why[256];
    int rc = -1;
    if (!m || !v || !step || !saved_run)
        snprintf(err, len, "%s is not an optimizer state file (it needs adam.m, adam.v, a step and "
                 "the run settings)", path);
    else if (strcmp(saved_run, run))
        snprintf(err, len, "%s was written by a run with %s but this one has %s; resume with the "
                 "same settings or start a new run", path, saved_run, run);
    else if (m->ndim != 1 || v->ndim != 1 || (size_t)m->shape[0] != ps->total ||
             (size_t)v->shape[0] != ps->total)
        snprintf(err, len, "%s holds Adam moments for %lld parameters but the model has %zu; it "
                 "belongs to another model", path, (long long)m->shape[0], ps->total);
    else if (load_finite(m, ps->m, ps->total, why, sizeof why) ||
             load_finite(v, ps->v, ps->total, why, sizeof why))
        snprintf(err, len, "%s cannot be used: %s; resume from another checkpoint or start a "
                 "new run", path, why);
    else {
        opt->step = atoi(step);
        rc = 0;
    }
    st_free(&st);
    return rc;
}
