// shared.c: see shared.h.
#include "shared.h"
#include <string.h>

void sp_sum_group(ExactSum *s, void *ctx) { comm_all_reduce_sums(((SeqParallel *)ctx)->comm, s, s->n); }

double sp_wire(const SeqParallel *sp) { return sp->bf16 ? (double)sizeof(uint16_t) / sizeof(real) : 1; }
double sp_grad_wire(const SeqParallel *sp) { return sp->bf16_grads ? sp_wire(sp) : 1; }

DiTStep sp_step(const SeqParallel *sp, bool backward) {
    return (DiTStep){!backward ? DIT_FORWARD : sp->recompute ? DIT_RECOMPUTE : DIT_BACKWARD, sp->bf16, sp->exact};
}

const int32_t *sp_images(const SeqParallel *sp, const int32_t *seg) {
    return (sp->bugs & BUG_PACK_MASK_CROSSES) ? NULL : seg;
}

const int32_t *sp_joint_images(Arena *a, const SeqParallel *sp, const int32_t *ids, int B, int R) {
    if (!(sp->bugs & BUG_PACK_MASK_CROSSES) || !ids) return ids;
    int W = 2 * R + sp->shard.T_pad;
    int32_t *one = arena_alloc(arena_host(a), (size_t)B * W * sizeof(int32_t)); // zeroed
    for (int b = 0; b < B; b++)
        for (int x = 0; x < R; x++) one[(size_t)b * W + x] = ids[(size_t)b * W + x] < 0 ? -1 : 0;
    return one;
}

Segments sp_segments(const SeqParallel *sp, const int32_t *seg, int q0, int k0) {
    seg = sp_images(sp, seg);
    return seg ? (Segments){seg, sp->shard.T_pad, q0, k0} : NO_SEGMENTS;
}

const uint8_t *sp_host_key_mask(const SeqParallel *sp) {
    return (sp->bugs & BUG_NO_PAD_MASK) ? NULL : sp->shard.key_mask;
}

const uint8_t *sp_front_mask(Arena *a, const SeqParallel *sp, int R) {
    const uint8_t *keys = sp_host_key_mask(sp);
    if (!keys) return NULL;
    uint8_t *m = arena_alloc(arena_host(a), (size_t)R + sp->shard.T_pad);
    memset(m, 1, (size_t)R);
    memcpy(m + R, keys, (size_t)sp->shard.T_pad);
    return m;
}

const uint8_t *sp_key_mask(const SeqParallel *sp) {
    return sp->key_mask_device && sp_host_key_mask(sp) ? sp->key_mask_device : sp_host_key_mask(sp);
}
