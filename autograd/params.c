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

// Points the slices and the tensors into flat, (4 or 5) x total reals on the store's side
static void point(ParamStore *ps, real *flat, bool ema) {
    ps->params = flat;
    ps->grads = flat + ps->total;
    ps->m = flat + 2 * ps->total;
    ps->v = flat + 3 * ps->total;
    ps->ema = ema ? flat + 4 * ps->total : NULL;
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

void ps_alloc(ParamStore *ps, bool device, bool ema) {
    ps->device = device;
    point(ps, zeros((4 + (size_t)ema) * ps->total, device), ema);
}

void ps_add_ema(ParamStore *ps) {
    CHECK(ps->params && !ps->ema, "ps_add_ema: the store is not allocated, or has an EMA already");
    real *old = ps->params, *flat = zeros(5 * ps->total, ps->device);
    copy_bytes(flat, old, 4 * ps->total * sizeof(real));
    copy_bytes(flat + 4 * ps->total, old, ps->total * sizeof(real)); // the average starts at params
    free_flat(old, ps->device);
    point(ps, flat, true);
}

void ps_copy(ParamStore *dst, const ParamStore *src) {
    CHECK(dst->n == src->n && dst->total == src->total && !dst->ema == !src->ema,
          "ps_copy: the stores hold different parameters (%d, %zu values%s vs %d, %zu%s)", dst->n,
          dst->total, dst->ema ? " and an EMA" : "", src->n, src->total, src->ema ? " and an EMA" : "");
    size_t slices = src->ema ? 5 : 4; // in one piece
    copy_bytes(dst->params, src->params, slices * src->total * sizeof(real));
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
    ps->exact_mem = xmalloc(exact_bytes(ps->total));
    ps->exact = exact_view(ps->exact_mem, ps->total);
    for (int i = 0; i < ps->n; i++) ps->t[i]->exact = &ps->exact, ps->t[i]->exact_at = ps->offset[i];
}

void ps_exact_grads(ParamStore *ps) {
    real *g = ps->device ? xmalloc(ps->total * sizeof(real)) : ps->grads; // the sums are on the host
    exact_result(g, &ps->exact, 0, ps->total);
    if (g != ps->grads) copy_bytes(ps->grads, g, ps->total * sizeof(real)), free(g);
}

void ps_zero_grad(ParamStore *ps) {
    if (ps->exact_mem) exact_clear(&ps->exact);
    zero_bytes(ps->grads, ps->total * sizeof(real));
    for (int i = 0; i < ps->n; i++) ps->t[i]->got_grad = false;
}

void ps_check_reached(const ParamStore *ps) {
    for (int i = 0; i < ps->n; i++)
        CHECK(ps->t[i]->got_grad,
              "no gradient reached parameter '%s': it is not used by the forward pass that "
              "produced the loss (is it wired into the model, with gradients enabled?)",
              ps->t[i]->name);
}
