// zero.h: the optimizer over the mesh (zero.c): AdamW after the gradients' sum, and ZeRO's split
// store over the world (stages 1 to 3).
#pragma once
#include "../../autograd/optim.h"
#include "sp.h"

// ---- the optimizer over the mesh (zero.c) -----------------------------------------------------
// The AdamW update of ps after sp_sync_grads; returns the global gradient norm. A whole store
// updates itself; a split one (ps_shard, --zero: ZeRO over every rank) updates its pieces, from a
// norm summed over the ranks (under --exact, exactly), and each unit's parameters are
// all-gathered.
double sp_optimizer_step(SeqParallel *sp, AdamW *opt, ParamStore *ps);
// --zero 1 to 3: splits the store ps over the world at `level`: an allocated whole store in place
// (ps_shard), or one laid out but not yet allocated before its memory is taken (ps_split; then
// ps_alloc and dit_init a unit at a time: no rank ever holds the whole model). Makes sp its
// hook (autograd/params.h): before a block's backward its gradients' place is cleared, after it
// they are summed into the slice; at level 3 a block's parameters are all-gathered into their
// place as it opens, forward or backward, and the next block's gather is posted (one ahead).
// sp must outlive the store's use.
void sp_split_store(SeqParallel *sp, ParamStore *ps, int level);
// A forward of this store all-gathers its blocks over the world (--zero 3 over several ranks): code
// that runs forwards per group (sampling) must then run as many on every group
bool sp_forward_spans_world(const ParamStore *ps);
// The units whole in the parameters' buffer all-gathered from the ranks' pieces (after an update,
// or after the pieces were swapped with the EMA's)
void sp_gather_params(SeqParallel *sp, ParamStore *ps);
// The summed gradients of a store split over the world (its slice) whole on every rank, in a whole
// store's layout (total values: the parameters in the order registered), a unit at a time (probe)
void sp_whole_grads(SeqParallel *sp, const ParamStore *ps, real *out);
