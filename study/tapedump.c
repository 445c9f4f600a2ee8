// tapedump.c: see tapedump.h.
#include "tapedump.h"
#include "../core/check.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include "../parallel/mesh/batch.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A tensor of the captions' tokens, which every rank holds whole (layers/dit.c names them): the
// text encoder's (text_*), the cross-attention's keys and values (blocks.<i>.cross.k, .v) and
// joint attention's text stream (blocks.<i>.txt.*); a caption may have as many tokens as a shard
static bool caption_tensor(const char *name) {
    size_t n = strlen(name);
    return !strncmp(name, "text_", 5) || strstr(name, ".txt.") ||
           (n > 8 && (!strcmp(name + n - 8, ".cross.k") || !strcmp(name + n - 8, ".cross.v")));
}

// t (B, n, X) this rank's tokens, or (B, R + n, X) the R in-context conditioning tokens and this
// rank's, or (B, ...) one row per image (a caption's tokens too), or the loss: in the one-rank layout on the host (rank 0's
// copy; (B, R + T, X) for in-context tokens), freed by the caller
static real *one_rank_layout(Tape *tp, SeqParallel *sp, const Tensor *t, bool grad, int *ndim, int *shape) {
    Arena *a = tp->arena;
    bool was = tp->grad_enabled;
    tp->grad_enabled = false;
    size_t mark = arena_mark(a);
    const real *src = grad ? t->grad : t->data;
    if (!grad && t->half) { // stored in 2 bytes a value (to_bf16_stored): its values
        real *u = arena_alloc_empty(a, t->size * sizeof(real));
        RUN(a->device, unpack_bf16, u, t->half, t->size);
        src = u;
    }
    Tensor view = *t;
    view.data = (real *)src;
    int B = t->shape[0], T = sp->shard.T;
    real *local = NULL;
    size_t per_image;
    int front = sp->joint ? 0 : sp->context; // in-context tokens in front of the shard's
    int R = t->ndim == 3 && t->shape[1] == sp->shard.n + front ? front : 0;
    if (t->ndim == 3 && t->shape[1] == sp->shard.n + R && !caption_tensor(t->name)) { // tokens: the sequence group's, padding
        // dropped, after the conditioning tokens (every rank's copy; their gradient, each rank's
        // share, summed)
        int X = t->shape[2], n = sp->shard.n;
        Tensor *mine = R ? tensor_new(a, 3, B, n, X) : &view, *cond = R ? tensor_new(a, 3, B, R, X) : NULL;
        if (R) {
            RUN(a->device, add_rows, cond->data, (size_t)R * X, src, (size_t)(R + n) * X, (size_t)R * X, B);
            RUN(a->device, add_rows, mine->data, (size_t)n * X, src + (size_t)R * X, (size_t)(R + n) * X,
                (size_t)n * X, B);
        }
        // every rank's (B, n, X) in rank order, placed here rather than by the layouts' own
        // all-gather, so that a slip in theirs shows in the tensors it feeds, not in every one
        size_t shard = (size_t)B * n * X;
        real *all = arena_alloc(a, (size_t)sp->comm->size * shard * sizeof(real));
        comm_all_gather(sp->comm, all, mine->data, shard);
        per_image = (size_t)(R + T) * X;
        local = xmalloc((size_t)B * per_image * sizeof(real));
        for (int b = 0; b < B; b++) {
            real *to = local + b * per_image;
            if (R) copy_bytes(to, cond->data + (size_t)b * R * X, (size_t)R * X * sizeof(real));
            for (int r = 0, t0 = 0; t0 < T; r++, t0 += n) // rank r's tokens [r n, (r + 1) n), padding dropped
                copy_bytes(to + (size_t)(R + t0) * X, all + r * shard + (size_t)b * n * X,
                           (size_t)(t0 + n < T ? n : T - t0) * X * sizeof(real));
        }
        if (R && grad) // the conditioning rows' gradient: every rank's share
            for (int b = 0; b < B; b++) comm_all_reduce(sp->comm, COMM_REAL, local + b * per_image, (size_t)R * X);
        *ndim = 3, shape[1] = R + T, shape[2] = X;
    } else { // one row per image (every rank of the group has it), or a scalar
        per_image = t->size / (size_t)B;
        local = xmalloc(t->size * sizeof(real));
        copy_bytes(local, src, t->size * sizeof(real));
        // its gradient is each rank's share (its tokens'), but under --exact, where the spread
        // of the adaLN vectors already summed it over the group
        if (grad && !tp->exact) comm_all_reduce(sp->comm, COMM_REAL, local, t->size);
        *ndim = t->ndim;
        for (int i = 1; i < t->ndim; i++) shape[i] = t->shape[i];
    }
    arena_release(a, mark);
    tp->grad_enabled = was;
    shape[0] = B * sp->dp;
    real *whole = xmalloc((size_t)B * sp->dp * per_image * sizeof(real));
    sp_gather_batch(sp, whole, local, (size_t)B * per_image); // every data group's images, in order
    free(local);
    return whole;
}

// The values of tensor d->index, kept until the dump is written (NULL: nothing to free)
static void keep(TapeDump *d, real *v) {
    d->kept = xrealloc(d->kept, (size_t)d->index + 1, sizeof *d->kept);
    d->kept[d->index++] = v;
}

static void watch(Tape *tp, Tensor *t, bool grad, void *ctx) {
    TapeDump *d = ctx;
    char name[160];
    int ndim, shape[4];
    if (t->size == 1) { // the loss: the step's, over every rank (the tensor holds this rank's share)
        double loss = tensor_item(t);
        int64_t mem[EXACT_LIMBS + 2];
        ExactSum s = exact_view(mem, 1);
        if (tp->exact) exact_merge(&s, 0, &tp->exact->loss); // summed as the step sums it
        comm_all_reduce_double(d->sp->world, &loss, tp->exact ? &s : NULL);
        snprintf(name, sizeof name, "%04d %s", d->index, t->name);
        d->loss = (real)loss;
        if (d->w) st_writer_add_real(d->w, name, 1, (int[]){1}, &d->loss);
        keep(d, NULL);
        return;
    }
    real *v = one_rank_layout(tp, d->sp, t, grad, &ndim, shape);
    snprintf(name, sizeof name, "%04d %s%s", d->index, grad ? "grad." : "", t->name);
    if (d->w) st_writer_add_real(d->w, name, ndim, shape, v); // read when the dump is written
    else free(v), v = NULL;
    keep(d, v);
}

void tape_dump_params(TapeDump *d, const ParamStore *ps) {
    for (int i = 0; d->w && i < ps->n; i++) {
        const Tensor *t = ps->t[i];
        real *v = xmalloc(t->size * sizeof(real));
        copy_bytes(v, t->grad, t->size * sizeof(real));
        char name[160];
        snprintf(name, sizeof name, "%04d grad.%s", d->index, t->name);
        st_writer_add_real(d->w, name, t->ndim, t->shape, v);
        keep(d, v);
    }
}

void tape_dump_start(TapeDump *d, SeqParallel *sp, int rank) {
    CHECK(sp->accum == 1, "probe --dump-tape dumps one micro-batch; drop --grad-accum");
    *d = (TapeDump){.sp = sp, .w = rank == 0 ? st_writer_new() : NULL};
    sp->watch = watch, sp->watch_ctx = d;
}

int tape_dump_write(TapeDump *d, const char *path, const char *layout, char *err, size_t len) {
    d->sp->watch = NULL;
    int rc = 0;
    if (d->w) { // rank 0
        char text[64];
        const SeqShard *s = &d->sp->shard;
        st_writer_meta(d->w, "layout", layout);
#define META(key, fmt, v) snprintf(text, sizeof text, fmt, v), st_writer_meta(d->w, key, text)
        META("ranks", "%d", s->P);
        META("tokens", "%d", s->T);
        META("padded_tokens", "%d", s->T_pad);
        META("exact", "%d", d->sp->exact);
        META("context_tokens", "%d", d->sp->joint ? 0 : d->sp->context); // in-context: tensors of tokens have them first
#undef META
        rc = st_writer_write(d->w, path, err, len);
        st_writer_free(d->w);
    }
    for (int i = 0; i < d->index; i++) free(d->kept[i]); // every rank keeps the list
    free(d->kept);
    d->w = NULL, d->kept = NULL;
    return rc;
}
