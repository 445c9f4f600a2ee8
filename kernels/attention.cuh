// attention.cuh: what the attention kernels on CUDA cores (attention.cu) and on tensor cores
// (attention_mma.cu) share: the rows of a head, the images of a pack (segments.h) and the tile
// skipping they allow, and the arguments of a forward pass.
#pragma once
#include "cuda.h"
#include <cuda_runtime.h>
#include <math.h>

// what every attention kernel reads: q (B, Tq, H*dh); k, v (B, Tk, H*dh); the key mask (Tk) and
// seg's ids on the device or NULL
struct AttentionArgs {
    const real *q, *k, *v;
    const uint8_t *mask;
    Segments seg;
    int Tq, Tk, H, dh;
    real scale;
};

// row r of head h in batch b of a (B, T, H*dh) tensor
__device__ static size_t row_at(int b, int T, int r, int D, int h, int dh) {
    return ((size_t)b * T + r) * D + (size_t)h * dh;
}

// the image of token `at` of row b (segments.h); 0 without segments, where every key is its own
__device__ static int32_t image_of(Segments seg, int b, int at) {
    return seg.id ? seg.id[(size_t)b * seg.T + at] : 0;
}

// whether rows [a0, a0 + na) from token a of row b can see one of rows [c0, c0 + nc) from token c:
// their ranges of image ids overlap (always without segments). Every thread of a block reaches
// the same answer, so a tile none of the block's rows can see is skipped by all of them at once,
// barriers included: the cost follows the images' own attention, not the pack's length squared.
__device__ static bool meet(Segments seg, int b, int a, int na, int c, int nc) {
    if (!seg.id) return true;
    int32_t alo = INT32_MAX, ahi = INT32_MIN, clo = INT32_MAX, chi = INT32_MIN;
    for (int r = 0; r < na; r++) {
        int32_t x = image_of(seg, b, a + r);
        alo = x < alo ? x : alo, ahi = x > ahi ? x : ahi;
    }
    for (int r = 0; r < nc; r++) {
        int32_t x = image_of(seg, b, c + r);
        clo = x < clo ? x : clo, chi = x > chi ? x : chi;
    }
    return alo <= chi && clo <= ahi;
}

#ifndef REAL_F64
// on tensor cores (attention_mma.cu), grids and blocks of their own, all accumulating in float32:
// 3xTF32 (float32's accuracy), one TF32 product (--tf32), or bf16 products. The forward writes
// out, lse (B, H, Tq); the backward adds into dq, dk, dv (each may be NULL) from dout, lse and
// delta (B, H, Tq: rowsum(dO * O))
enum AttentionMode { ATTN_3XTF32, ATTN_TF32, ATTN_BF16 };
void attention_forward_mma(const AttentionArgs &a, real *out, real *lse, int B, AttentionMode mode, cudaStream_t stream);
void attention_backward_mma(const AttentionArgs &a, real *dq, real *dk, real *dv, const real *dout,
                            const real *lse, const real *delta, int B, AttentionMode mode, cudaStream_t stream);
#endif
