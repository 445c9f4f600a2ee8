// params.h: the parameter store. All trainable parameters live in one flat buffer, with the
// same layout for their gradients and the two Adam moments, so the optimizer, the gradient
// all-reduce and checkpointing each run over one pointer. Register with ps_add, then ps_alloc.
#pragma once
#include "../core/tensor.h"

#define MAX_PARAMS 1024

typedef struct ParamStore {
    int n;
    Tensor *t[MAX_PARAMS];      // views into the flat buffers; t->name is the checkpoint name
    size_t offset[MAX_PARAMS];  // element offset of each parameter
    size_t total;               // elements in each flat buffer
    real *params, *grads, *m, *v; // [total] each
} ParamStore;

// Register a parameter (name copied). Its data/grad point into the store after ps_alloc.
Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape);
void ps_alloc(ParamStore *ps); // zero-filled
void ps_free(ParamStore *ps);
Tensor *ps_find(const ParamStore *ps, const char *name); // NULL if absent
void ps_zero_grad(ParamStore *ps);
// After backward: aborts naming the first parameter that received no gradient.
void ps_check_reached(const ParamStore *ps);
