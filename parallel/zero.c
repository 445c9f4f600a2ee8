// zero.c: the optimizer over the mesh (sp.h). Under --zero 1 and 2 (ZeRO stages 1 and 2) every
// rank keeps the Adam moments (and at 2 the summed gradients) of its slice of the parameters only:
// the gradients are reduce-scattered unit by unit (sp_sync_grads, sp_store_hook), each rank updates
// its pieces, and each unit's parameters are all-gathered, so every rank holds the same parameters
// as without it, from a quarter of the moments on 4 ranks.
#include "../core/check.h"
#include "../core/device.h"
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
        comm_all_reduce_sums(sp->world, &squares);
        exact_result_double(&sum, &squares, 0, 1);
    } else comm_all_reduce(sp->world, COMM_DOUBLE, &sum, 1);
    double norm = sqrt(sum);
    adamw_update_slice(opt, ps, norm);
    for (int u = 0; u < ps->units; u++) {
        const PsUnit *U = &ps->unit[u];
        comm_all_gather(sp->world, ps->params + U->at, ps->params + U->at + (size_t)ps->shard * U->piece, U->piece);
    }
    return norm;
}

real *sp_gather_moments(SeqParallel *sp, const ParamStore *ps) {
    real *all = sp->world->rank == 0 ? xmalloc(2 * ps->padded * sizeof(real)) : NULL; // every slice
    comm_gather(sp->world, all, ps->m, ps->chunk);
    comm_gather(sp->world, all ? all + ps->padded : NULL, ps->v, ps->chunk);
    if (!all) return NULL;
    real *whole = xmalloc(2 * ps->total * sizeof(real) + 1); // m, v of total each, unit by unit
    for (int k = 0; k < 2; k++)
        for (size_t u = 0, done = 0; u < (size_t)ps->units; u++) {
            const PsUnit *U = &ps->unit[u];
            for (int r = 0; r < ps->shards; r++) { // rank r's piece, the padding dropped
                size_t from = (size_t)r * U->piece, n = U->len - from < U->piece ? U->len - from : U->piece;
                if (from >= U->len) break;
                copy_bytes(whole + k * ps->total + done + from, all + k * ps->padded + (size_t)r * ps->chunk + U->slice,
                           n * sizeof(real));
            }
            done += U->len;
        }
    free(all);
    return whole;
}
