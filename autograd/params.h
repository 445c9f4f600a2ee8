// params.h: the parameter store. All trainable parameters live in one flat buffer, with the
// same layout for their gradients and the two Adam moments, so the optimizer, the gradient
// all-reduce and checkpointing each run over one pointer. Register with ps_add, then ps_alloc. A
// store on the device keeps all four there (its tensors' device is true).
#pragma once
#include "../core/exact.h"
#include "../core/tensor.h"

#define MAX_PARAMS 1024

typedef struct ParamStore {
    int n;
    Tensor *t[MAX_PARAMS];      // views into the flat buffers; t->name is the checkpoint name
    size_t offset[MAX_PARAMS];  // element offset of each parameter
    size_t total;               // elements in each flat buffer
    real *params, *grads, *m, *v; // [total] each
    bool device;                  // the buffers are device memory
    ExactSum exact;               // --exact: the gradients as order-independent sums [total]
    void *exact_mem;              // its memory (NULL: not exact)
} ParamStore;

// Register a parameter (name copied). Its data/grad point into the store after ps_alloc.
Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape);
void ps_alloc(ParamStore *ps, bool device); // zero-filled, on the host or the device
void ps_free(ParamStore *ps);
// dst's four buffers = src's: the same parameters registered in the same order, either side
void ps_copy(ParamStore *dst, const ParamStore *src);
Tensor *ps_find(const ParamStore *ps, const char *name); // NULL if absent
void ps_zero_grad(ParamStore *ps); // and the exact sums
// --exact (host stores): backward adds the parameters' gradients into ps->exact (ps_zero_grad
// empties it); ps_exact_grads rounds the sums into the gradient buffer once they are complete.
void ps_use_exact(ParamStore *ps);
void ps_exact_grads(ParamStore *ps);
// After backward: aborts naming the first parameter that received no gradient.
void ps_check_reached(const ParamStore *ps);
