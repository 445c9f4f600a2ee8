// attention_exact.h: the pieces of attention under --exact, for the op in attention_exact.c and
// for layouts that visit the keys group by group (the ring). Queries and keys go in canonical
// blocks of `blk` tokens; a key group is keys (B, nk, D) whose first canonical block is kb0 of
// the nkb of the whole sequence. Forward takes two passes over the key groups, in any order:
// the first gives every key block's log-sum-exp per query, combined in block order into the
// query's L; the second adds each key block's output weighted by exp(L_kb - L) into
// order-independent sums. Backward, per key group: the fused backward with the final output and
// L gives each block pair's exact share of dQ, dK and dV, added into such sums too. So the
// result does not depend on which rank holds which blocks, or in which order they come. On a
// device arena q, k, v, dout, out and the backward's lse are device memory and each block pair
// runs the CUDA kernels; the sums and lparts, and the lse of pass 2, are host memory.
#pragma once
#include "common.h"

typedef struct ExactAttn {
    int B, Tq, H, dh, blk, nkb; // queries (B, Tq, H*dh) in Tq / blk blocks; nkb key blocks in all
    const uint8_t *mask;        // all nkb * blk keys', or NULL
    Segments seg;               // packs: the images of the queries (from token seg.q0) and of all
                                // nkb * blk keys (seg.k0 0); NO_SEGMENTS otherwise
    bool mean_merge;            // the ring-wrong-merge bug: blocks averaged, not weighted by L
    bool block_delta;           // the ring-block-delta bug: backward's row term from each block's
                                // own partial output
    bool no_max;                // the lse-overflow bug: lse = log(sum of e^L) in real precision,
                                // no max subtracted
} ExactAttn;

// Pass 1: the log-sum-exp of every query block against each block of the group, into lparts
// (nkb, B, Tq/blk, H, blk) at the group's blocks
void exact_attn_lse(const ExactAttn *g, Arena *a, real *lparts, const real *q, const real *k,
                    const real *v, int nk, int kb0);
// Between the passes: lse (B, Tq/blk, H, blk) from lparts, over the key blocks in order
void exact_attn_combine(const ExactAttn *g, real *lse, const real *lparts);
// Pass 2: each block of the group's output, weighted, into o (B*Tq*D elements)
void exact_attn_out(const ExactAttn *g, Arena *a, ExactSum *o, const real *lse, const real *q,
                    const real *k, const real *v, int nk, int kb0);
// Backward for one key group: shares of dQ into dq (B*Tq*D), of the group's dK and dV into dk,
// dv (B*nk*D, from the group's first key)
void exact_attn_grad(const ExactAttn *g, Arena *a, ExactSum *dq, ExactSum *dk, ExactSum *dv,
                     const real *dout, const real *out, const real *lse, const real *q,
                     const real *k, const real *v, int nk, int kb0);
// Rounds sums s (n values from `at`) and adds them into dst
void exact_add_into(real *dst, ExactSum *s, size_t at, size_t n, Arena *a);

// Rows [first, first + len) of each of x's B rows of `stride` values into a new (B, rows, D), its
// rows [len, rows) zero; on the arena's side
real *exact_take_rows(Arena *a, const real *x, size_t stride, size_t first, int B, int len, int rows, size_t D);
// The rounded sums s, rows of `s_pitch` from each of B, their first `width` values added into dst
// (B rows `d_pitch` apart)
void exact_add_rows(Arena *a, real *dst, size_t d_pitch, ExactSum *s, size_t s_pitch, size_t width, int B);
// Joint attention's keys under --exact: the caption's R (padded to Rp; `copies` times over, a
// bug's: else 1) before Tk image keys, then the caption's queries (Rp) and the image's (nq, image
// tokens [q0, q0 + nq)): every key's mask
// (1, then key_mask's, a host array, or 1) and the images (kernels/segments.h) of ids, joint
// images of R caption and Tk image tokens (the caption's padding to Rp -1 as keys, 0 as queries),
// for the caption's queries (seg_t) and the image's (seg_i); where the kernels run
typedef struct ExactJointKeys {
    const uint8_t *mask;
    Segments seg_t, seg_i;
} ExactJointKeys;
ExactJointKeys exact_joint_keys(Arena *a, int B, int R, int Rp, int copies, int Tk, int q0, int nq,
                                const uint8_t *key_mask, const int32_t *ids);
