// params.c: see params.h.
#include "params.h"
#include "../core/check.h"
#include "../core/device.h"
#include <stdlib.h>
#include <string.h>

Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape) {
    CHECK(ps->params == NULL, "ps_add('%s') after ps_alloc: register every parameter first", name);
    CHECK(ps->n < MAX_PARAMS, "too many parameters (at most %d)", MAX_PARAMS);
    CHECK(ps_find(ps, name) == NULL, "parameter '%s' is registered twice", name);
    Tensor *t = xcalloc(1, sizeof(Tensor));
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] > 0, "parameter '%s' dim %d must be positive, got %d", name, i, shape[i]);
        t->shape[i] = shape[i];
        t->size *= (size_t)shape[i];
    }
    char *copy = xmalloc(strlen(name) + 1);
    strcpy(copy, name);
    t->name = copy;
    t->requires_grad = true;
    ps->offset[ps->n] = ps->total;
    ps->t[ps->n++] = t;
    ps->total += t->size;
    return t;
}

// The reals of the flat buffer: parameters, gradients, the two moments and the EMA
static size_t flat_size(const ParamStore *ps, bool ema) {
    return (2 + (size_t)ema) * ps->padded + 2 * ps->chunk;
}

// Points the slices and the tensors into flat (flat_size reals) on the store's side
static void point(ParamStore *ps, real *flat, bool ema) {
    ps->params = flat;
    ps->grads = flat + ps->padded;
    ps->m = flat + 2 * ps->padded;
    ps->v = ps->m + ps->chunk;
    ps->ema = ema ? ps->v + ps->chunk : NULL;
    for (int i = 0; i < ps->n; i++) {
        ps->t[i]->data = ps->params + ps->offset[i];
        ps->t[i]->grad = ps->grads + ps->offset[i];
        ps->t[i]->device = ps->device;
    }
}

// n zero reals on the host or the device
static real *zeros(size_t n, bool device) {
    if (!device) return xcalloc(n + 1, sizeof(real));
    real *p = device_alloc(n * sizeof(real));
    zero_bytes(p, n * sizeof(real));
    return p;
}

static void free_flat(real *flat, bool device) {
    if (device) device_free(flat);
    else free(flat);
}

// The slice of shard `shard` of `shards`
static void split(ParamStore *ps, int shard, int shards) {
    ps->shards = shards;
    ps->chunk = (ps->total + (size_t)shards - 1) / (size_t)shards;
    ps->at = (size_t)shard * ps->chunk;
    ps->padded = (size_t)shards * ps->chunk;
}

void ps_alloc(ParamStore *ps, bool device, bool ema) {
    if (!ps->shards) split(ps, 0, 1);
    ps->device = device;
    point(ps, zeros(flat_size(ps, ema), device), ema);
}

void ps_shard(ParamStore *ps, int shard, int shards) {
    CHECK(ps->params && ps->shards == 1 && !ps->exact_mem && shard >= 0 && shard < shards,
          "ps_shard: the store is not allocated whole, or shard %d of %d does not exist", shard, shards);
    ParamStore old = *ps;
    split(ps, shard, shards);
    real *flat = zeros(flat_size(ps, old.ema), ps->device);
    point(ps, flat, old.ema);
    size_t bytes = ps->total * sizeof(real), mine = ps->at < ps->total ? ps->total - ps->at : 0;
    if (mine > ps->chunk) mine = ps->chunk; // the last slices hold padding only, or partly
    copy_bytes(ps->params, old.params, bytes);
    copy_bytes(ps->grads, old.grads, bytes);
    copy_bytes(ps->m, old.m + ps->at, mine * sizeof(real));
    copy_bytes(ps->v, old.v + ps->at, mine * sizeof(real));
    if (old.ema) copy_bytes(ps->ema, old.ema, bytes);
    free_flat(old.params, ps->device);
}

void ps_add_ema(ParamStore *ps) {
    CHECK(ps->params && !ps->ema, "ps_add_ema: the store is not allocated, or has an EMA already");
    real *old = ps->params, *flat = zeros(flat_size(ps, true), ps->device);
    copy_bytes(flat, old, flat_size(ps, false) * sizeof(real));
    point(ps, flat, true);
    copy_bytes(ps->ema, old, ps->padded * sizeof(real)); // the average starts at params
    free_flat(old, ps->device);
}

void ps_copy(ParamStore *dst, const ParamStore *src) {
    CHECK(dst->n == src->n && dst->total == src->total && !dst->ema == !src->ema &&
          dst->shards == src->shards && dst->at == src->at,
          "ps_copy: the stores hold different parameters (%d, %zu values%s, %d shards vs %d, %zu%s, "
          "%d)", dst->n, dst->total, dst->ema ? " and an EMA" : "", dst->shards, src->n, src->total,
          src->ema ? " and an EMA" : "", src->shards);
    copy_bytes(dst->params, src->params, flat_size(src, src->ema) * sizeof(real)); // in one piece
}

void ps_free(ParamStore *ps) {
    for (int i = 0; i < ps->n; i++) {
        free((char *)ps->t[i]->name);
        free(ps->t[i]);
    }
    free(ps->exact_mem);
    free_flat(ps->params, ps->device);
    *ps = (ParamStore){0};
}

Tensor *ps_find(const ParamStore *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->t[i]->name, name) == 0) return ps->t[i];
    return NULL;
}

void ps_use_exact(ParamStore *ps) {
    CHECK(ps->params, "--exact needs the parameters allocated");
    if (ps->exact_mem) return;
    ps->exact_mem = xmalloc(exact_bytes(ps->padded));
    ps->exact = exact_view(ps->exact_mem, ps->padded);
    for (int i = 0; i < ps->n; i++) ps->t[i]->exact = &ps->exact, ps->t[i]->exact_at = ps->offset[i];
}

void ps_exact_grads(ParamStore *ps, size_t at, size_t n) {
    real *g = ps->device ? xmalloc(n * sizeof(real)) : ps->grads + at; // the sums are on the host
    exact_result(g, &ps->exact, at, n);
    if (g != ps->grads + at) copy_bytes(ps->grads + at, g, n * sizeof(real)), free(g);
}

void ps_zero_grad(ParamStore *ps) {
    if (ps->exact_mem) exact_clear(&ps->exact);
    zero_bytes(ps->grads, ps->padded * sizeof(real));
    for (int i = 0; i < ps->n; i++) ps->t[i]->got_grad = false;
}

void ps_check_reached(const ParamStore *ps) {
    for (int i = 0; i < ps->n; i++)
        CHECK(ps->t[i]->got_grad,
              "no gradient reached parameter '%s': it is not used by the forward pass that "
              "produced the loss (is it wired into the model, with gradients enabled?)",
              ps->t[i]->name);
}
