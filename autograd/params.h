// params.h: the parameter store. All trainable parameters live in one flat buffer, with the
// same layout for their gradients, the two Adam moments and, when training keeps one, the moving
// average of the weights (EMA), so the optimizer, the gradient all-reduce and checkpointing each
// run over one pointer. Register with ps_add, then ps_alloc. A store on the device keeps every
// slice there (its tensors' device is true).
// Under --zero 1 the store is one of `shards` (ps_shard): each rank keeps the Adam moments of its
// slice [at, at + chunk) of the parameters only, chunk = ceil(total / shards); the parameters,
// gradients and EMA stay whole, padded to shards x chunk elements so that every slice is whole.
#pragma once
#include "../core/exact.h"
#include "../core/tensor.h"

#define MAX_PARAMS 1024

typedef struct ParamStore {
    int n;
    Tensor *t[MAX_PARAMS];      // views into the flat buffers; t->name is the checkpoint name
    size_t offset[MAX_PARAMS];  // element offset of each parameter
    size_t total;               // elements of the parameters
    int shards;                 // the stores the Adam moments are split over (1: whole)
    size_t at, chunk, padded;   // this store's slice [at, at + chunk); padded = shards x chunk
    real *params, *grads;       // [padded] each (the elements past total are zero)
    real *m, *v;                // [chunk] each: the moments of the slice
    real *ema;                  // [padded]: the EMA of params (ps_add_ema), or NULL: none
    bool device;                  // the buffers are device memory
    ExactSum exact;               // --exact: the gradients as order-independent sums [padded]
    void *exact_mem;              // its memory (NULL: not exact)
} ParamStore;

// Register a parameter (name copied). Its data/grad point into the store after ps_alloc.
Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape);
// zero-filled, on the host or the device, with the EMA slice when ema; whole, or split as
// ps->shards and ps->at say when they are set (a copy of a sharded store)
void ps_alloc(ParamStore *ps, bool device, bool ema);
// --zero 1: the store becomes shard `shard` of `shards`, keeping the moments of its slice only
// (the flat buffer moves; the tensors follow it). Before ps_use_exact.
void ps_shard(ParamStore *ps, int shard, int shards);
// Adds the EMA slice to an allocated store without one, equal to the parameters (the flat buffer
// moves; the tensors follow it).
void ps_add_ema(ParamStore *ps);
void ps_free(ParamStore *ps);
// dst's slices = src's: the same parameters registered in the same order and split the same
// way, the EMA on both or neither, either side
void ps_copy(ParamStore *dst, const ParamStore *src);
Tensor *ps_find(const ParamStore *ps, const char *name); // NULL if absent
void ps_zero_grad(ParamStore *ps); // and the exact sums
// --exact (host stores): backward adds the parameters' gradients into ps->exact (ps_zero_grad
// empties it); ps_exact_grads rounds the sums of elements [at, at + n) into the gradient buffer
// once they are complete.
void ps_use_exact(ParamStore *ps);
void ps_exact_grads(ParamStore *ps, size_t at, size_t n);
// After backward: aborts naming the first parameter that received no gradient.
void ps_check_reached(const ParamStore *ps);
