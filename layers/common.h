// common.h: helpers shared by the op files (not part of the public layers API).
#pragma once
#include "../core/check.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include "layers.h"
#include <string.h>

// Ops run where their output's arena is: on the device when it is a device arena.
static inline bool on_device(const Tape *tp) { return tp->arena->device; }
static inline bool node_on_device(const Node *n) { return n->arena->device; }

// Data an op's kernels read (labels, masks): as is on the host or when already on the device,
// else a copy in the device arena that lives as long as the op's other buffers.
static inline const void *op_input(Arena *a, const void *host, size_t bytes) {
    if (!a->device || !host || device_pointer(host)) return host;
    void *d = arena_alloc(a, bytes);
    copy_bytes(d, host, bytes);
    return d;
}

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
