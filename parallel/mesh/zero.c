// zero.c: the optimizer over the mesh (zero.h). Under --zero 1 and 2 (ZeRO stages 1 and 2) every
// rank keeps the Adam moments (and at 2 the summed gradients) of its slice of the parameters only:
// the gradients are reduce-scattered unit by unit (sp_sync_grads, sp_store_hook), each rank updates
// its pieces, and each unit's parameters are all-gathered, so every rank holds the same parameters
// as without it, from a quarter of the moments on 4 ranks.
#include "../../core/check.h"
#include "../../core/device.h"
#include "zero.h"
#include "batch.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

double sp_optimizer_step(SeqParallel *sp, AdamW *opt, ParamStore *ps) {
    if (ps->shards == 1) return adamw_step(opt, ps);
    CHECK(ps->shards == sp->world->size, "a store of %d shards over %d ranks", ps->shards, sp->world->size);
    int64_t mem[EXACT_LIMBS + 2];
    ExactSum squares = exact_view(mem, 1);
    double sum = adamw_squares(ps, &squares);
    comm_all_reduce_double(sp->world, &sum, ps->exact_mem ? &squares : NULL);
    double norm = sqrt(sum);
    adamw_update_slice(opt, ps, norm);
    sp_gather_params(sp, ps);
    return norm;
}

void sp_gather_params(SeqParallel *sp, ParamStore *ps) {
    for (int u = 0; u < ps->units; u++)
        if (ps->level < 3 || !ps->unit[u].scoped)
            comm_all_gather(sp->world, ps->params + ps->unit[u].at, ps_piece(ps, u), ps->unit[u].piece);
}

// Unit u's parameters into their place: the gather in flight when it is u's, else one now
static void gather_unit(SeqParallel *sp, ParamStore *ps, int u) {
    bool posted = sp->prefetch_unit == u;
    comm_all_gather_wait(&sp->prefetch); // (another unit's, when it is not u's: unused)
    sp->prefetch_unit = 0;
    if (!posted) comm_all_gather(sp->world, ps->params + ps->unit[u].at, ps_piece(ps, u), ps->unit[u].piece);
}

static void hook(ParamStore *ps, int u, bool open, bool backward, void *ctx) {
    SeqParallel *sp = ctx;
    const PsUnit *U = &ps->unit[u];
    if (backward && !open) return sp_sum_unit(sp, ps, u);
    if (backward) { // the shared place, for this unit's gradients
        zero_bytes(ps->grads + U->grad, ps->shards * U->piece * sizeof(real));
        if (ps->exact_mem) *ps_unit_sums(ps, u) = exact_view(ps_unit_sums(ps, u)->top, ps->shards * U->piece);
    }
    if (!open || ps->level < 3) return;
    gather_unit(sp, ps, u);
    int next = backward ? u - 1 : u + 1; // the block that opens after this one
    if (next < 0 || next >= ps->units || !ps->unit[next].scoped) return;
    sp->prefetch_unit = next;
    comm_all_gather_start(sp->world, &sp->prefetch, ps->params + ps->unit[next].at, ps_piece(ps, next),
                          ps->unit[next].piece);
}

void sp_split_store(SeqParallel *sp, ParamStore *ps, int level) {
    if (ps->params) ps_shard(ps, sp->world->rank, sp->world->size, level);
    else ps_split(ps, sp->world->rank, sp->world->size, level);
    if (ps->level >= 2) ps->hook = hook, ps->hook_ctx = sp;
    sp->prefetch_unit = 0;
}

bool sp_forward_spans_world(const ParamStore *ps) { return ps->level >= 3 && ps->shards > 1; }

void sp_whole_grads(SeqParallel *sp, const ParamStore *ps, real *out) {
    size_t most = 0;
    for (int u = 0; u < ps->units; u++) most = ps->unit[u].piece > most ? ps->unit[u].piece : most;
    real *unit = xmalloc(ps->shards * most * sizeof(real));
    for (int u = 0; u < ps->units; out += ps->unit[u++].len) {
        comm_all_gather(sp->world, unit, ps->slice + ps->unit[u].slice, ps->unit[u].piece);
        copy_bytes(out, unit, ps->unit[u].len * sizeof(real));
    }
    free(unit);
}
