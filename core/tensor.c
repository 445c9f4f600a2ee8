// tensor.c: see tensor.h.
#include "tensor.h"
#include "check.h"
#include "device.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static Tensor *shaped(Arena *a, int ndim, const int *shape, bool zeroed) {
    CHECK(ndim >= 0 && ndim <= MAX_DIMS, "a tensor has at most %d dims, not %d", MAX_DIMS, ndim);
    Tensor *t = arena_alloc(arena_host(a), sizeof(Tensor));
    t->ndim = ndim;
    t->device = a->device;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] > 0, "tensor dim %d must be positive, got %d", i, shape[i]);
        t->shape[i] = shape[i];
        t->size *= (size_t)shape[i];
    }
    t->data = (zeroed ? arena_alloc : arena_alloc_empty)(a, t->size * sizeof(real));
    return t;
}

Tensor *tensor_new_shape(Arena *a, int ndim, const int *shape) { return shaped(a, ndim, shape, true); }
Tensor *tensor_empty_shape(Arena *a, int ndim, const int *shape) { return shaped(a, ndim, shape, false); }

// the ndim ints of ap as a shape
static Tensor *shaped_va(Arena *a, int ndim, va_list ap, bool zeroed) {
    int shape[MAX_DIMS] = {0};
    CHECK(ndim >= 0 && ndim <= MAX_DIMS, "a tensor has at most %d dims, not %d", MAX_DIMS, ndim);
    for (int i = 0; i < ndim; i++) shape[i] = va_arg(ap, int);
    return shaped(a, ndim, shape, zeroed);
}

Tensor *tensor_new(Arena *a, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    Tensor *t = shaped_va(a, ndim, ap, true);
    va_end(ap);
    return t;
}

Tensor *tensor_empty(Arena *a, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    Tensor *t = shaped_va(a, ndim, ap, false);
    va_end(ap);
    return t;
}

Tensor *tensor_keep(Arena *a, Tensor *t, size_t mark) {
    CHECK(!t->base && !t->grad && !t->half, "tensor_keep: only a plain tensor without a gradient can move");
    Tensor saved = *t;
    real *data = arena_keep(a, mark, t->data, t->size * sizeof(real));
    Tensor *k = arena_alloc(arena_host(a), sizeof(Tensor));
    *k = saved;
    k->data = data;
    return k;
}

Tensor *tensor_like(Arena *a, const Tensor *t) { return tensor_new_shape(a, t->ndim, t->shape); }
Tensor *tensor_empty_like(Arena *a, const Tensor *t) { return tensor_empty_shape(a, t->ndim, t->shape); }

Tensor *tensor_to(Arena *a, const Tensor *t) {
    Tensor *c = tensor_empty_like(a, t);
    copy_bytes(c->data, t->data, t->size * sizeof(real));
    return c;
}

double tensor_item(const Tensor *t) {
    real x;
    copy_bytes(&x, t->data, sizeof x);
    return x;
}

real *tensor_grad(Arena *a, Tensor *t) {
    if (t->grad) return t->grad;
    if (t->base) t->grad = tensor_grad(a, t->base) + (t->data - t->base->data);
    else t->grad = arena_alloc(a, t->size * sizeof(real));
    return t->grad;
}

static Tensor *view_of(Arena *a, const Tensor *t) {
    Tensor *v = arena_alloc(arena_host(a), sizeof(Tensor));
    *v = *t;
    v->base = t->base ? t->base : (Tensor *)t;
    return v;
}

Tensor *tensor_reshape(Arena *a, const Tensor *t, int ndim, const int *shape) {
    Tensor *v = view_of(a, t);
    v->ndim = ndim;
    size_t size = 1;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i], size *= (size_t)shape[i];
    char buf[64];
    CHECK(size == t->size, "cannot reshape %s (%zu elements) into %zu elements",
          tensor_shape_str(t, buf, sizeof buf), t->size, size);
    return v;
}

Tensor *tensor_rows(Arena *a, const Tensor *t, int first, int n) {
    char buf[64];
    CHECK(first >= 0 && n >= 1 && first + n <= t->shape[0], "rows %d..%d are not within %s", first,
          first + n - 1, tensor_shape_str(t, buf, sizeof buf));
    CHECK(!t->half, "tensor_rows: %s is stored in 2 bytes a value; take rows of its values", tensor_shape_str(t, buf, sizeof buf));
    Tensor *v = view_of(a, t);
    size_t row = t->size / (size_t)t->shape[0];
    v->shape[0] = n, v->size = row * (size_t)n, v->data = t->data + row * (size_t)first;
    v->grad = NULL; // tensor_grad finds its part of the base's
    return v;
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *tensor_shape_str(const Tensor *t, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %d" : "%d", t->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

void tensor_check_shape(const Tensor *t, const char *what, int ndim, const int *shape) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return;
    Tensor want = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) want.shape[i] = shape[i];
    char got_s[64], want_s[64];
    FATAL("%s has shape %s but %s was expected", what, tensor_shape_str(t, got_s, sizeof got_s),
          tensor_shape_str(&want, want_s, sizeof want_s));
}
