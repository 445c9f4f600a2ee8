// tensor.h: an up-to-5-D, row-major, contiguous array of `real` with an optional gradient of the
// same shape. Tensors of one step live in an arena; parameters point into the flat parameter
// store. A view (tensor_reshape) shares storage with its parent. A tensor of a device arena has
// its data and gradient on the GPU (device true) and its header on the host.
#pragma once
#include "arena.h"
#include "exact.h"
#include "real.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_DIMS 5

typedef struct Tensor {
    int ndim;
    int shape[MAX_DIMS];
    size_t size;        // number of elements = product of shape
    real *data;         // [size]
    real *grad;         // [size] or NULL until a backward pass writes it
    bool requires_grad; // true for parameters, marked inputs, and anything computed from them
    bool got_grad;      // set when a backward pass accumulated into grad
    bool device;        // data and grad are device memory
    bool bf16;          // its values are bf16 values (to_bf16, --precision bf16): collectives move
                        // 2 bytes a value
    uint16_t *half;     // bf16 values stored in 2 bytes each (to_bf16_stored), data NULL; else NULL
    const char *name;   // parameters: the checkpoint name; otherwise NULL
    struct Tensor *base; // views: the tensor whose storage they share; otherwise NULL
    struct ExactSum *exact; // parameters under --exact: the store's order-independent gradient
    size_t exact_at;        // sums, this tensor's elements from exact_at on; otherwise NULL
} Tensor;

// A new zero-filled tensor of the given shape in arena `a` (ndim ints follow).
Tensor *tensor_new(Arena *a, int ndim, ...);
Tensor *tensor_new_shape(Arena *a, int ndim, const int *shape);
// The same, their data not zeroed (arena_alloc_empty): for an output whose every element is
// written before it is read; what accumulates (+=) takes the zeroed ones.
Tensor *tensor_empty(Arena *a, int ndim, ...);
Tensor *tensor_empty_shape(Arena *a, int ndim, const int *shape);
// Frees everything allocated in `a` since `mark` but t, which moves down to `mark` (t must not be
// a view, and nothing allocated since mark may be used afterwards); returns it.
Tensor *tensor_keep(Arena *a, Tensor *t, size_t mark);
Tensor *tensor_like(Arena *a, const Tensor *t);
Tensor *tensor_empty_like(Arena *a, const Tensor *t);
// A copy of t's values in arena a: onto the device or back to the host, as a's kind says.
Tensor *tensor_to(Arena *a, const Tensor *t);
double tensor_item(const Tensor *t); // element 0, from the host or the device
// Allocate t's gradient (zeroed) if it has none; a view gets the matching part of its base's.
real *tensor_grad(Arena *a, Tensor *t);
// The same storage seen with another shape of equal size.
Tensor *tensor_reshape(Arena *a, const Tensor *t, int ndim, const int *shape);
// Rows [first, first + n) of the first dimension (images of a batch), sharing storage.
Tensor *tensor_rows(Arena *a, const Tensor *t, int first, int n);

bool tensor_same_shape(const Tensor *a, const Tensor *b);
// "[2, 3, 5]" into buf, for error messages.
const char *tensor_shape_str(const Tensor *t, char *buf, size_t len);
void tensor_check_shape(const Tensor *t, const char *what, int ndim, const int *shape);
