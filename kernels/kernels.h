// kernels.h: the CPU kernels behind every op, forward and backward side by side. Arguments are
// outputs, then inputs, then sizes. Backward kernels ADD into the gradients they are given (+=);
// any gradient pointer may be NULL when that input needs none. CUDA counterparts live in the
// .cu files and are declared in cuda.h.
#pragma once
#include "../core/cpu.h"
#include "../core/real.h"
#include "clipshape.h"
#include "merge.h"
#include "segments.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// ---- threads: loops of more than PAR_MIN elements run on the OpenMP threads, each element (or
// row, or column) on one thread, so results do not depend on the thread count -----------------
#define PAR_MIN 32768
static inline int kernel_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
// A loop whose body calls threaded kernels (GEMMs, the loops here) runs on the threads when `on`
// holds, else outside any OpenMP region: under `parallel if (0)` it would still be a team of one,
// and each region inside it (a GEMM's, a loop's) would start threads of its own and end them.
#define OMP_PRAGMA(text) _Pragma(#text)
#define FOR_ON_THREADS(on, clauses, ...)                                                          \
    do {                                                                                           \
        if (on) {                                                                                  \
            OMP_PRAGMA(omp parallel for clauses)                                                   \
            __VA_ARGS__                                                                            \
        } else {                                                                                   \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)
// loops cut into spans for the vector-width clones (core/cpu.h): SPAN elements at a time; the
// length of the span of at most `per` that starts at i of n
#define SPAN 8192
static inline size_t span_len(size_t i, size_t n, size_t per) { return n - i < per ? n - i : per; }
static inline int omp_thread(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ---- linear: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) --------------------------------
void linear_forward(real *out, const real *inp, const real *weight, const real *bias, int N, int C,
                    int OC);
void linear_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, int N, int C, int OC);

// ---- patches: clips img (B,C,F,H,W) <-> tokens (B, n, C*pt*p*p) = patches [t0, t0+n) --------
// A clip is cut into pt x p x p patches, an (F/pt) x (H/p) x (W/p) grid of tokens in frame-major
// order (frame, row, column); an image is a clip of one frame (F = pt = 1). Token rows are laid
// out (c, a, i, j), or (a, i, j, c) when channels_last; rows past the last patch are padding and
// left alone. Both ADD into their output. ClipShape: clipshape.h.
void patch_gather(real *tokens, const real *img, ClipShape s, int t0, int n, bool channels_last);
void patch_scatter(real *img, const real *tokens, ClipShape s, int t0, int n, bool channels_last);

// ---- elementwise ---------------------------------------------------------------------------------
// add: out (n) = a (n) + b (n % nb): b repeats when it is smaller (e.g. pos_embed over a batch).
void add_forward(real *out, const real *a, const real *b, size_t n, size_t nb);
void add_backward(real *da, real *db, const real *dout, size_t n, size_t nb);
void gelu_forward(real *out, const real *inp, size_t n); // tanh approximation
// out = x rounded to bf16 (real_to_bf16, core/real.h), n values; out may be x
void round_bf16(real *out, const real *x, size_t n);
// --precision bf16 on the wire: out = the bf16 bits of x rounded (real_to_bf16), n values; and
// back, out = the values of n bf16 bit patterns
void pack_bf16(uint16_t *out, const real *x, size_t n);
void unpack_bf16(real *out, const uint16_t *bits, size_t n);
void gelu_backward(real *dinp, const real *dout, const real *inp, size_t n);
void silu_forward(real *out, const real *inp, size_t n);
void silu_backward(real *dinp, const real *dout, const real *inp, size_t n);
// strided rows, for packing collectives' blocks: dst += src over `rows` rows of `width` values,
// row i at dst + i * dpitch and src + i * spitch
void add_rows(real *dst, size_t dpitch, const real *src, size_t spitch, size_t width, size_t rows);

// ---- the sampler's Euler step: x (k, chw) += dt v, v from the model's output pred: the first chw
// values of each of its first k images (pred_chw values each); guided: v = u + scale (c - u), c
// those and u the same of images k..2k-1 (the null class's)
void euler_step(real *x, const real *pred, int k, size_t chw, size_t pred_chw, bool guided,
                real scale, double dt);

// ---- adaLN: x (B,T,D); shift, scale, gate (B,D) broadcast over T --------------------------------
void modulate_forward(real *out, const real *x, const real *shift, const real *scale, int B, int T,
                      int D);
void modulate_backward(real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                       const real *scale, int B, int T, int D);
// gated residual: out = x + gate * y
void gated_add_forward(real *out, const real *x, const real *gate, const real *y, int B, int T,
                       int D);
void gated_add_backward(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                        const real *y, int B, int T, int D);

// ---- layernorm without affine: out (N,C); mean, rstd (N) saved for backward -------------------
void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, int N, int C, real eps);
void layernorm_backward(real *dinp, const real *dout, const real *inp, const real *mean,
                        const real *rstd, int N, int C);

// ---- QK-norm and rotary positions, one op: out = turn(norm(inp)), inp and out (N,C) -------------
// norm (scale non-NULL): RMSNorm with a learned scale over groups of G columns (G divides C),
// x / sqrt(mean over the group of x^2 + eps) * scale[c mod S], scale (S), S a multiple of G
// dividing C (a head's dh, or the width); rstd (N, C/G) saved for backward. scale NULL: no norm
// (G, S and rstd unused). turn (cs non-NULL): the pair (2j, 2j+1) of every head of dh columns of
// row n turned by the angle whose (cos, sin) are cs[(n mod A) dh + 2j, + 1]: A rows of angles,
// the T tokens of a row shared by its images, or one per row; G even. cs NULL: no turn (dh and A
// unused). Backward adds into dinp and dscale (either may be NULL)
void qk_norm_rope_forward(real *out, real *rstd, const real *inp, const real *scale,
                          const real *cs, int N, int C, int G, int S, int dh, int A, real eps);
void qk_norm_rope_backward(real *dinp, real *dscale, const real *dout, const real *inp,
                           const real *scale, const real *rstd, const real *cs, int N, int C,
                           int G, int S, int dh, int A);

// ---- embeddings ----------------------------------------------------------------------------------
// out (B,D) = table (V,D)[idx[b]]
void embedding_forward(real *out, const real *table, const int64_t *idx, int B, int V, int D);
void embedding_backward(real *dtable, const real *dout, const int64_t *idx, int B, int V, int D);
// out (B,dim) = [cos(t f_i), sin(t f_i)], f_i = exp(-ln(max_period) i / (dim/2)); odd dim: 0 pad
void timestep_embedding_forward(real *out, const real *t, int B, int dim, real max_period);
void timestep_embedding_backward(real *dt, const real *dout, const real *t, int B, int dim,
                                 real max_period);

// ---- attention: q (B,Tq,H*dh), k, v (B,Tk,H*dh), out (B,Tq,H*dh) ---------------------------------
// Fused (see attention.c): queries in tiles of attn_bq() rows against key blocks of attn_bk() rows
// (fewer when the sequence is shorter), sizes chosen for the machine at start (core/cpu.h); lse (B,H,Tq) is the per-row log-sum-exp, written by
// forward (-inf where every key is masked) and read by backward, which also reads out. key_mask
// (Tk): 1 = attend, 0 = masked (weight exactly 0); NULL = all keys valid. seg: the images of a
// pack (segments.h): a query sees only its own image's keys; NO_SEGMENTS: one image. scratch holds
// attention_scratch_count(B, Tq, Tk, H, dh, backward) reals for kernel_threads() threads. The
// arguments are the CUDA launchers' (cuda.h), so a layer runs either through RUN.
// While attention_progress is set (parallel/transport/comm.c sets it while a ring transfer is in flight),
// both directions call it on their team's thread 0 between query tiles, so that MPI moves the
// transfer while the attention computes (comm.c acts only on MPI's own thread: inside a parallel
// region of jobs every thread is its inner team's thread 0).
extern void (*attention_progress)(void);
static inline int attn_bq(void) { return cpu_plan()->bq; } // query tile rows
static inline int attn_bk(void) { return cpu_plan()->bk; } // key block rows
size_t attention_scratch_count(int B, int Tq, int Tk, int H, int dh, bool backward);
void attention_forward(real *out, real *lse, real *scratch, const real *q, const real *k,
                       const real *v, const uint8_t *key_mask, Segments seg,
                       int B, int Tq, int Tk, int H, int dh);
void attention_backward(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                        const real *out, const real *lse, const real *q, const real *k,
                        const real *v, const uint8_t *key_mask, Segments seg,
                        int B, int Tq, int Tk, int H, int dh);
// The same with the tiles given: queries in tiles of bq rows, keys in blocks of bk rows (the tests
// sweep sizes that do and do not divide the sequence); scratch holds
// attention_tiled_scratch_count(bq, bk, dh, threads) reals for up to `threads` OpenMP threads.
size_t attention_tiled_scratch_count(int bq, int bk, int dh, int threads);
void attention_forward_tiled(real *out, real *lse, real *scratch, const real *q, const real *k,
                             const real *v, const uint8_t *key_mask, Segments seg,
                             int B, int Tq, int Tk, int H, int dh, int bq, int bk);
void attention_backward_tiled(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                              const real *out, const real *lse, const real *q, const real *k,
                              const real *v, const uint8_t *key_mask, Segments seg,
                              int B, int Tq, int Tk, int H, int dh, int bq, int bk);

// ---- merging partial attention (ring attention): o (B,n,H*dh), lse (B,H,n) become the merge of
// themselves and a block's o_blk, lse_blk, as m says (merge.h: by log-sum-exp, or as a merge bug);
// rows whose block lse is -inf (every key of the block masked) stay.
void attention_merge(real *o, real *lse, const real *o_blk, const real *lse_blk, int B, int n,
                     int H, int dh, AttnMerge m);

// ---- slice of the last dim: out (N,len) = inp (N,C)[:, off:off+len] -------------------------------
void slice_forward(real *out, const real *inp, int N, int C, int off, int len);
void slice_backward(real *dinp, const real *dout, int N, int C, int off, int len);

// ---- masked mean squared error: sum(mask * (pred - target)^2) / denom; mask NULL = all ones -----
double mse_forward(const real *pred, const real *target, const uint8_t *mask, size_t n,
                   double denom);
void mse_backward(real *dpred, real *dtarget, real dloss, const real *pred, const real *target,
                  const uint8_t *mask, size_t n, double denom);

// ---- AdamW on a flat buffer; grad_scale multiplies every gradient (clipping) ---------------------
void adamw_update(real *params, const real *grads, real *m, real *v, size_t n, real lr, real beta1,
                  real beta2, real eps, real weight_decay, real grad_scale, int step);
double sum_squares(const real *x, size_t n);
// the exponential moving average of the weights: ema = decay ema + (1 - decay) params
void ema_update(real *ema, const real *params, size_t n, double decay);
