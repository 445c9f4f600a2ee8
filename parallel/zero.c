// zero.c: the optimizer over the mesh (sp.h). Under --zero 1 (ZeRO stage 1) every rank keeps the
// Adam moments of its slice of the parameters only: the gradients are reduce-scattered
// (sp_sync_grads), each rank updates its slice, and the parameters are all-gathered, so every
// rank holds the same parameters as without it, from a quarter of the moments on 4 ranks.
#include "../core/check.h"
#include "sp.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

double sp_optimizer_step(SeqParallel *sp, AdamW *opt, ParamStore *ps) {
    if (ps->shards == 1) return adamw_step(opt, ps);
    CHECK(ps->shards == sp->world->size, "a store of %d shards over %d ranks", ps->shards, sp->world->size);
    int64_t mem[EXACT_LIMBS + 2];
    ExactSum squares = exact_view(mem, 1);
    double sum = adamw_squares(ps, &squares);
    if (ps->exact_mem) {
        comm_all_reduce_sums(sp->world, &squares, 1);
        exact_result_double(&sum, &squares, 0, 1);
    } else comm_all_reduce(sp->world, COMM_DOUBLE, &sum, 1);
    double norm = sqrt(sum);
    adamw_update_slice(opt, ps, norm);
    comm_all_gather(sp->world, ps->params, ps->params + ps->at, ps->chunk);
    return norm;
}

real *sp_gather_moments(SeqParallel *sp, const ParamStore *ps) {
    real *whole = sp->world->rank == 0 ? xmalloc(2 * ps->padded * sizeof(real)) : NULL;
    comm_gather(sp->world, whole, ps->m, ps->chunk);
    comm_gather(sp->world, whole ? whole + ps->padded : NULL, ps->v, ps->chunk);
    if (!whole) return NULL;
    memmove(whole + ps->total, whole + ps->padded, ps->total * sizeof(real)); // m, v of total each
    return whole;
}
