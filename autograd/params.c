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

void ps_alloc(ParamStore *ps, bool device) {
    size_t bytes = 4 * ps->total * sizeof(real);
    real *flat = device ? device_alloc(bytes) : xcalloc(4 * ps->total + 1, sizeof(real));
    if (device) zero_bytes(flat, bytes);
    ps->device = device;
    ps->params = flat;
    ps->grads = flat + ps->total;
    ps->m = flat + 2 * ps->total;
    ps->v = flat + 3 * ps->total;
    for (int i = 0; i < ps->n; i++) {
        ps->t[i]->data = ps->params + ps->offset[i];
        ps->t[i]->grad = ps->grads + ps->offset[i];
        ps->t[i]->device = device;
    }
}

void ps_copy(ParamStore *dst, const ParamStore *src) {
    CHECK(dst->n == src->n && dst->total == src->total,
          "ps_copy: the stores hold different parameters (%d, %zu values vs %d, %zu)", dst->n,
          dst->total, src->n, src->total);
    copy_bytes(dst->params, src->params, 4 * src->total * sizeof(real)); // the four, in one piece
}

void ps_free(ParamStore *ps) {
    for (int i = 0; i < ps->n; i++) {
        free((char *)ps->t[i]->name);
        free(ps->t[i]);
    }
    if (ps->device) device_free(ps->params);
    else free(ps->params);
    *ps = (ParamStore){0};
}

Tensor *ps_find(const ParamStore *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->t[i]->name, name) == 0) return ps->t[i];
    return NULL;
}

void ps_zero_grad(ParamStore *ps) {
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
