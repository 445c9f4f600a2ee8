// cuda.h: the CUDA counterparts of the CPU kernels in kernels.h, plus the few device helpers the
// tests and the training loop need. Each launcher has the CPU kernel's name with a _cuda suffix and
// the same arguments (outputs, inputs, sizes; all pointers on the device), then a stream.
// Backward launchers ADD into the gradients they are given (+=); a NULL gradient is skipped.
// Launchers check sizes with CHECK and the launch with CUDA_CHECK(cudaGetLastError()); they do
// not synchronize. Only for builds with USE_CUDA (the include path must reach the CUDA headers).
#pragma once
#include "../core/check.h"
#include "../core/device.h"
#include "../core/real.h"
#include "clipshape.h"
#include "merge.h"
#include "segments.h"
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// device memory, copies and synchronization: core/device.h

// ---- launch sizes: blocks of CUDA_BLOCK threads ----------------------------------------------------
#define CUDA_BLOCK 256
#define CUDA_MAX_BLOCKS 8192 // a grid-stride loop covers the elements beyond
// blocks for one thread per item
static inline unsigned cuda_blocks(size_t n) { return (unsigned)((n + CUDA_BLOCK - 1) / CUDA_BLOCK); }
// blocks for a grid-stride loop over n items: one thread per item, at most CUDA_MAX_BLOCKS blocks
static inline unsigned cuda_grid(size_t n) {
    unsigned b = cuda_blocks(n);
    return b < CUDA_MAX_BLOCKS ? b : CUDA_MAX_BLOCKS;
}

// ---- elementwise: add with b repeating (b[i % nb]), GELU (tanh approximation), SiLU -------------
void add_forward_cuda(real *out, const real *a, const real *b, size_t n, size_t nb,
                      cudaStream_t stream);
void add_backward_cuda(real *da, real *db, const real *dout, size_t n, size_t nb,
                       cudaStream_t stream);
void gelu_forward_cuda(real *out, const real *inp, size_t n, cudaStream_t stream);
void round_bf16_cuda(real *out, const real *x, size_t n, cudaStream_t stream);
void pack_bf16_cuda(uint16_t *out, const real *x, size_t n, cudaStream_t stream);
void unpack_bf16_cuda(real *out, const uint16_t *bits, size_t n, cudaStream_t stream);
void gelu_backward_cuda(real *dinp, const real *dout, const real *inp, size_t n,
                        cudaStream_t stream);
void silu_forward_cuda(real *out, const real *inp, size_t n, cudaStream_t stream);
void silu_backward_cuda(real *dinp, const real *dout, const real *inp, size_t n,
                        cudaStream_t stream);
void add_rows_cuda(real *dst, size_t dpitch, const real *src, size_t spitch, size_t width,
                   size_t rows, cudaStream_t stream);

// ---- tensor-core instructions, each run by one warp (tensorcore.cu): for tests/test_cuda.c -----
// d (16x8) = a (16x8) b (8x8) + c with a and b rounded to TF32; the same in bf16 with a (16x16),
// b (16x8); all row-major, float
void tensorcore_mma_tf32_cuda(float *d, const float *a, const float *b, const float *c, cudaStream_t stream);
void tensorcore_mma_bf16_cuda(float *d, const float *a, const float *b, const float *c, cudaStream_t stream);
// out[lane * 4 + j] = register j of lane `lane` after ldmatrix .x`n` (.trans) of the 4 8x8 b16
// matrices m (256 values, matrix j at m + 64 j; lane 8 j + i gives row i of matrix j)
void tensorcore_ldmatrix_cuda(uint32_t *out, const uint16_t *m, int n, bool trans, cudaStream_t stream);
// out = in (256 floats) through shared memory by cp.async in two committed groups
void tensorcore_cp_async_cuda(float *out, const float *in, cudaStream_t stream);
// out[lane * 4 + k] for v = 3 lane + 1: __shfl_sync from lane 7 lane mod 32, __shfl_down_sync by 3,
// __shfl_xor_sync by 5, then (after __syncwarp) __shfl_sync from lane 2 of each group of 8
void tensorcore_shuffle_cuda(int *out, cudaStream_t stream);
// tf32[i] = x[i] rounded to TF32 (cvt.rna), bf[i] = x[i] to bf16 (nearest even) and back
void tensorcore_convert_cuda(float *tf32, float *bf, const float *x, int n, cudaStream_t stream);

// ---- the sampler's Euler step, with classifier-free guidance (elementwise.cu)
void euler_step_cuda(real *x, const real *pred, int k, size_t chw, size_t pred_chw, bool guided,
                     real scale, double dt, cudaStream_t stream);

// ---- layernorm without affine: out (N,C); mean, rstd (N) saved for backward -------------------
void layernorm_forward_cuda(real *out, real *mean, real *rstd, const real *inp, int N, int C,
                            real eps, cudaStream_t stream);
void layernorm_backward_cuda(real *dinp, const real *dout, const real *inp, const real *mean,
                             const real *rstd, int N, int C, cudaStream_t stream);

// ---- QK-norm and rotary positions, one op (qknorm.cu) ------------------------------------------
void qk_norm_rope_forward_cuda(real *out, real *rstd, const real *inp, const real *scale,
                               const real *cs, int N, int C, int G, int S, int dh, int A, real eps,
                               cudaStream_t stream);
void qk_norm_rope_backward_cuda(real *dinp, real *dscale, const real *dout, const real *inp,
                                const real *scale, const real *rstd, const real *cs, int N, int C,
                                int G, int S, int dh, int A, cudaStream_t stream);

// ---- patches (patch.cu): clips img (B,C,F,H,W) <-> tokens (B, n, C*pt*p*p); both add --------
void patch_gather_cuda(real *tokens, const real *img, ClipShape s, int t0, int n,
                       bool channels_last, cudaStream_t stream);
void patch_scatter_cuda(real *img, const real *tokens, ClipShape s, int t0, int n,
                        bool channels_last, cudaStream_t stream);

// ---- embeddings (embedding.cu): labels idx (B, on the device) into table (V,D); timesteps ------
void embedding_forward_cuda(real *out, const real *table, const int64_t *idx, int B, int V, int D,
                            cudaStream_t stream);
void embedding_backward_cuda(real *dtable, const real *dout, const int64_t *idx, int B, int V, int D,
                             cudaStream_t stream);
void timestep_embedding_forward_cuda(real *out, const real *t, int B, int dim, real max_period,
                                     cudaStream_t stream);
void timestep_embedding_backward_cuda(real *dt, const real *dout, const real *t, int B, int dim,
                                      real max_period, cudaStream_t stream);

// ---- fused attention (attention.cu): q, out (B,Tq,H*dh); k, v (B,Tk,H*dh); lse (B,H,Tq); -------
// key_mask (Tk) and seg's ids on the device or NULL; the CPU kernels' semantics and arguments
// (kernels.h), with tiles of their own. scratch holds attention_scratch_count_cuda(B, Tq, Tk, H, dh, backward)
// reals: B H Tq for backward's row terms, none for forward.
#define ATTN_CUDA_MAX_DH 128 // head width at most
#define ATTN_TF32_TOL 2e-3  // normalized error of the attention with --tf32 (one TF32 product)
#define ATTN_BF16_TOL 2e-2  // the same with bf16 products
// The attention's products in bf16 (inputs rounded to bf16, float32 accumulation, softmax and
// LSE): the float32 build's, for mixed precision; off by default
void attention_set_bf16_cuda(bool on);
size_t attention_scratch_count_cuda(int B, int Tq, int Tk, int H, int dh, bool backward);
void attention_forward_cuda(real *out, real *lse, real *scratch, const real *q, const real *k,
                            const real *v, const uint8_t *key_mask, Segments seg,
                            int B, int Tq, int Tk, int H, int dh, cudaStream_t stream);
void attention_backward_cuda(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                             const real *out, const real *lse, const real *q, const real *k,
                             const real *v, const uint8_t *key_mask, Segments seg,
                             int B, int Tq, int Tk, int H, int dh, cudaStream_t stream);

void attention_merge_cuda(real *o, real *lse, const real *o_blk, const real *lse_blk, int B, int n,
                          int H, int dh, AttnMerge m, cudaStream_t stream);

// ---- linear through cuBLAS (linear.cu): out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) ----
void linear_forward_cuda(real *out, const real *inp, const real *weight, const real *bias, int N,
                         int C, int OC, cudaStream_t stream);
void linear_backward_cuda(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                          const real *weight, int N, int C, int OC, cudaStream_t stream);

// ---- adaLN: x (B,T,D); shift, scale, gate (B,D) broadcast over T (adaln.cu) ---------------------
void modulate_forward_cuda(real *out, const real *x, const real *shift, const real *scale, int B,
                           int T, int D, cudaStream_t stream);
void modulate_backward_cuda(real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                            const real *scale, int B, int T, int D, cudaStream_t stream);
void gated_add_forward_cuda(real *out, const real *x, const real *gate, const real *y, int B, int T,
                            int D, cudaStream_t stream);
void gated_add_backward_cuda(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                             const real *y, int B, int T, int D, cudaStream_t stream);

// ---- slice of the last dim: out (N,len) = inp (N,C)[:, off:off+len] (slice.cu) -----------------
void slice_forward_cuda(real *out, const real *inp, int N, int C, int off, int len,
                        cudaStream_t stream);
void slice_backward_cuda(real *dinp, const real *dout, int N, int C, int off, int len,
                         cudaStream_t stream);

// ---- masked mean squared error and sum of squares (loss.cu): the sums, as the CPU kernels return
// them (these two wait for the device to read them back)
double mse_forward_cuda(const real *pred, const real *target, const uint8_t *mask, size_t n,
                        double denom, cudaStream_t stream);
void mse_backward_cuda(real *dpred, real *dtarget, real dloss, const real *pred, const real *target,
                       const uint8_t *mask, size_t n, double denom, cudaStream_t stream);
double sum_squares_cuda(const real *x, size_t n, cudaStream_t stream);

// ---- AdamW on a flat buffer; grad_scale multiplies every gradient (clipping) ---------------------
void adamw_update_cuda(real *params, const real *grads, real *m, real *v, size_t n, real lr,
                       real beta1, real beta2, real eps, real weight_decay, real grad_scale,
                       int step, cudaStream_t stream);
void ema_update_cuda(real *ema, const real *params, size_t n, double decay, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
