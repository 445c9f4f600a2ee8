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

// A new tensor shaped like x but with the last dim replaced by `last`: zero-filled or empty
// (tensor_empty_shape).
static inline Tensor *with_last_dim(Arena *a, const Tensor *x, int last, bool zeroed) {
    int shape[MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = last;
    return (zeroed ? tensor_new_shape : tensor_empty_shape)(a, x->ndim, shape);
}

// --precision bf16 (precision.c): n values of x (memory of a's kind) rounded to bf16, in a
const real *bf16_copy(Arena *a, const real *x, size_t n);
// Values [first, first + n) of x as reals: x's own, or those of a tensor stored in 2 bytes a value
// (to_bf16_stored) unpacked into a
const real *bf16_values(Arena *a, const Tensor *x, size_t first, size_t n);

// Rows when the last dim is the feature dim: product of the leading dims.
static inline int rows_of(const Tensor *x) { return (int)(x->size / (size_t)x->shape[x->ndim - 1]); }
static inline int last_dim(const Tensor *x) { return x->shape[x->ndim - 1]; }

// ---- --exact on the device: the order-independent sums (exact.h) are host memory, on the host
// side of a device arena. The kernels compute each canonical block's share on the device (fixed
// shapes: the same bits whatever the rank count); the shares are staged to the host and added
// there, and the rounded sums go back (op_input).
typedef struct ArenaMarks { size_t dev, host; } ArenaMarks; // both sides of an arena
static inline ArenaMarks arena_marks(Arena *a) { return (ArenaMarks){arena_mark(a), arena_mark(arena_host(a))}; }
static inline void arena_release_marks(Arena *a, ArenaMarks m) {
    arena_release(arena_host(a), m.host);
    arena_release(a, m.dev);
}
static inline ExactSum exact_sums(Arena *a, size_t n) { // (an arena's memory comes zeroed)
    return exact_view_zeroed(arena_alloc(arena_host(a), exact_bytes(n)), n);
}
// n reals at src (memory of a's kind) for the host to read: src itself, or a copy on a's host side
static inline const real *host_reals(Arena *a, const real *src, size_t n) {
    if (!a->device) return src;
    real *h = arena_alloc(arena_host(a), n * sizeof(real));
    copy_bytes(h, src, n * sizeof(real));
    return h;
}
