// common.h: helpers shared by the op files (not part of the public layers API).
#pragma once
#include "../core/check.h"
#include "layers.h"
#include <string.h>

// A new tensor shaped like x but with the last dim replaced by `last`.
static inline Tensor *with_last_dim(Arena *a, const Tensor *x, int last) {
    int shape[MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = last;
    return tensor_new_shape(a, x->ndim, shape);
}

// Rows when the last dim is the feature dim: product of the leading dims.
static inline int rows_of(const Tensor *x) { return (int)(x->size / (size_t)x->shape[x->ndim - 1]); }
static inline int last_dim(const Tensor *x) { return x->shape[x->ndim - 1]; }
