// params.h: the parameter store. All trainable parameters live in one flat buffer, with the
// same layout for their gradients, the two Adam moments and, when training keeps one, the moving
// average of the weights (EMA), so the optimizer, the gradient all-reduce and checkpointing each
// run over one pointer. Register with ps_add, then ps_alloc. A store on the device keeps every
// slice there (its tensors' device is true).
// Units: the parameters come in groups of consecutive ones (ps_unit: the embeddings, each block,
// the final layer), and a store split over `shards` ranks (ps_shard, --zero) splits each unit on
// its own: rank r's piece of a unit is its elements [r piece, (r + 1) piece), piece =
// ceil(len / shards), the unit padded to shards x piece, so that each unit is one reduce-scatter
// or all-gather of equal pieces. A rank's slice is its pieces of every unit, one after another.
//  - level 1 (ZeRO stage 1): the rank keeps the Adam moments of its slice only; the parameters,
//    the gradients backward adds into and the EMA stay whole;
//  - level 2 (stage 2): the gradients too: backward adds a unit's gradients into a place of its
//    own, except the scoped units (the blocks, which the model opens and closes around each use,
//    ps_open), which share one; when a scoped unit's backward is done its gradients are
//    reduce-scattered into the slice and its place is cleared for the next (ps->hook);
//  - level 3 (stage 3): the parameters and the EMA too: the rank keeps its pieces (`own`, and the
//    EMA of them); the units that are not scoped are whole in the parameters' buffer, all-gathered
//    after each update; the scoped ones have two places there, block u the (u mod 2)th, which the
//    hook fills by an all-gather when the block opens (the next one's gather in flight meanwhile).
// The summed gradients of the slice are `slice`; a whole store's slice is its gradient buffer.
#pragma once
#include "../core/exact.h"
#include "../core/tensor.h"

#define MAX_PARAMS 1024
#define PS_MAX_UNITS 80

typedef struct PsUnit {
    int first;     // its first parameter (the next unit's first ends it)
    bool scoped;   // the model opens and closes it around each use (ps_open, ps_close)
    size_t len;    // its elements
    size_t at;     // where it begins in the whole buffers (parameters, EMA below level 3);
                   // shards x piece long
    size_t piece;  // each rank's share: ceil(len / shards)
    size_t slice;  // where this rank's piece begins in the slice buffers (slice, m, v)
    size_t grad;   // where backward adds its gradients in grads (shards x piece of them)
    int sums;      // --exact: which of the store's exact sums hold its gradients (from grad on)
} PsUnit;

typedef struct ParamStore ParamStore;
// Called when a scoped unit opens (open true) or closes, in forward (backward false) and again in
// reverse order as backward runs (closes first, then opens); NULL: nothing to do
typedef void (*PsHook)(ParamStore *ps, int unit, bool open, bool backward, void *ctx);

struct ParamStore {
    int n;
    Tensor *t[MAX_PARAMS];      // views into the flat buffers; t->name is the checkpoint name
    size_t offset[MAX_PARAMS];  // element offset of each parameter in the whole buffers
    size_t total;               // elements of the parameters
    int units;                  // ps_unit's groups (none registered: one unit of every parameter)
    PsUnit unit[PS_MAX_UNITS];
    int shards, shard, level;   // the ranks the store is split over (1: whole), this one, --zero
    size_t padded;              // elements of the whole buffers: every unit padded
    size_t chunk;               // elements of the slice buffers: the pieces of every unit
    size_t work;                // elements of grads
    real *params;               // [padded] (the padding is zero); level 3: see above
    real *own;                  // level 3: [chunk] the slice's parameters; else params
    real *grads;                // [work]: where backward adds (whole, or level 2's places)
    real *slice;                // [chunk]: the slice's summed gradients (grads when whole)
    real *m, *v;                // [chunk] each: the moments of the slice
    real *ema;                  // the EMA of params (ps_alloc's), [padded], at level 3 of own
                                // [chunk]; or NULL: none
    bool device;                // the buffers are device memory
    int n_sums;                 // --exact: the exact sums, one for each place in grads, then
    ExactSum sums[PS_MAX_UNITS + 1]; // the slice's when split (sums[n_sums - 1])
    void *exact_mem;            // their memory (NULL: not exact)
    PsHook hook;                // opens and closes scoped units (parallel/mesh/zero.c); NULL: none
    void *hook_ctx;
};

// A new unit begins with the next parameter registered; scoped: the model opens and closes it
// around each use (ps_open, ps_close)
void ps_unit(ParamStore *ps, bool scoped);
// Register a parameter (name copied). Its data/grad point into the store after ps_alloc.
Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape);
// The sizes (padded, chunk, work, the units' places) and the parameters' offsets of the store as
// rank `shard` of `shards` at --zero `level`, without allocating (ps_alloc and ps_shard call it)
void ps_split(ParamStore *ps, int shard, int shards, int level);
// Where this rank's piece of unit u's parameters lies (own, or the whole buffer)
real *ps_piece(ParamStore *ps, int u);
// A buffer laid out as the whole buffers (the parameters, the EMA below level 3), its padding
// dropped, into out (total values: a whole store's layout)
void ps_unpad(const ParamStore *ps, real *out, const real *whole);
// The parameters the optimizer updates and the EMA follows: own, and its length (chunk at level
// 3, else padded)
size_t ps_own_len(const ParamStore *ps);
// The reals of the parameters and the gradients (grads, and the slice's when split)
size_t ps_weight_reals(const ParamStore *ps);
// zero-filled, on the host or the device, with the EMA when ema; whole, or split as ps->shards,
// ps->shard and ps->level say when shards is set (a copy of a split store)
void ps_alloc(ParamStore *ps, bool device, bool ema);
// --zero `level` (1 to 3): the whole allocated store becomes rank `shard`'s of `shards`, keeping
// its pieces of the moments (and at level 2 of the gradients, which start at zero); the flat
// buffer moves and the tensors follow it. Before ps_use_exact.
void ps_shard(ParamStore *ps, int shard, int shards, int level);
// Unit u's values have just been written where its tensors point: they become the rank's
// parameters when params (at level 3 its piece goes into own, the unit's place being shared), its
// EMA when ema (when the store keeps one), or both. So a split store is initialised or loaded a
// unit at a time, never holding the whole model; an EMA that differs goes first, the parameters
// after it (they stay in the place).
void ps_keep_unit(ParamStore *ps, int u, bool params, bool ema);
// This rank's piece of unit u: its elements (the last pieces hold padding only, or partly), and
// where they begin within the unit
size_t ps_piece_of(const ParamStore *ps, int u, size_t *from);
void ps_free(ParamStore *ps);
// dst's slices = src's: the same parameters registered in the same order and split the same
// way, the EMA on both or neither, either side
void ps_copy(ParamStore *dst, const ParamStore *src);
Tensor *ps_find(const ParamStore *ps, const char *name); // NULL if absent
void ps_zero_grad(ParamStore *ps); // the gradients, the slice and the exact sums
// --exact (host stores): backward adds the parameters' gradients into the store's exact sums
// (ps_zero_grad empties them); ps_exact_slice rounds the slice's complete sums into `slice`.
void ps_use_exact(ParamStore *ps);
void ps_exact_slice(ParamStore *ps);
// The exact sums of unit u's gradients: sums[unit u's sums], its elements from unit u's grad on
ExactSum *ps_unit_sums(ParamStore *ps, int u);
// After backward: aborts naming the first parameter that received no gradient.
void ps_check_reached(const ParamStore *ps);

// Scoped unit u around its use in a forward on tape tp: ps_open before, ps_close after, each
// passing x (the block's input, then its output) through. They call ps->hook (open, then close),
// and with gradients record a node that calls it again in backward: ps_close's opens the unit
// before its backward, ps_open's closes it after. They return x, or the node's output.
typedef struct Tape Tape;
Tensor *ps_open(ParamStore *ps, Tape *tp, int u, Tensor *x);
Tensor *ps_close(ParamStore *ps, Tape *tp, int u, Tensor *x);
