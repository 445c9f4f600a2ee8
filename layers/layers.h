// layers.h: differentiable ops. Each takes the tape, returns a new tensor from the tape's arena,
// and records its backward when an input requires a gradient. Shapes are checked on entry.
#pragma once
#include "../autograd/tape.h"
#include "../kernels/segments.h"
#include <stdint.h>

// x (..., C), w (OC, C), b (OC) or NULL -> (..., OC)
Tensor *linear(Tape *tp, Tensor *x, Tensor *w, Tensor *b);
// The same as `parts` tensors (..., OC / parts), out[j] the output's columns [j OC / parts,
// (j + 1) OC / parts): views of one output stored part after part, so that no copy is made to
// take them apart (the qkv projection's q, k and v)
void linear_parts(Tape *tp, Tensor *x, Tensor *w, Tensor *b, int parts, Tensor **out);
// Clips of F frames travel as images of their frames stacked along the height: (B, C, F*H, W),
// cut into pt x p x p patches whose tokens run frame-major (frame, row, column); images are
// clips of one frame (F = pt = 1).
// img (B, C, F*H, W) -> (B, len, C*pt*p*p): patches [t0, t0 + len) of the (F/pt)*(H/p)*(W/p)
// grid, rows laid out (c, a, i, j), or (a, i, j, c) when channels_last; rows past the grid are zero
Tensor *patchify(Tape *tp, Tensor *img, int F, int pt, int p, int t0, int len, bool channels_last);
// conv with stride = kernel = the patch on patches [t0, t0 + len): img (B, C, F*H, W),
// w (D,C,p,p) (pt = 1) or (D,C,pt,p,p), b (D) -> (B, len, D)
Tensor *patch_embed(Tape *tp, Tensor *img, int F, Tensor *w, Tensor *b, int t0, int len);
// tokens (B, T, pt*p*p*C) laid out (a, i, j, c) -> (B, C, F*H, W)
Tensor *unpatchify(Tape *tp, Tensor *tokens, int C, int F, int H, int W, int pt, int p);
// a + b; b may be smaller, repeating over the leading dims of a (a bias or pos_embed)
Tensor *add(Tape *tp, Tensor *a, Tensor *b);
Tensor *gelu(Tape *tp, Tensor *x); // tanh approximation
Tensor *silu(Tape *tp, Tensor *x);
// --precision bf16 (tp->bf16, precision.c): x rounded to bf16 values, its gradient passed through
// unchanged; x itself when the tape is not bf16 or x holds bf16 values already
Tensor *to_bf16(Tape *tp, Tensor *x);
// The same in place, with nothing on the tape (the rounding's gradient is 1): for a value that
// its producer's backward does not read and that every consumer would round (a linear's input, the
// attention's Q, K, V), so that no copy is kept or made
Tensor *to_bf16_here(Tape *tp, Tensor *x);
// The same, and stored in 2 bytes a value where x lies at the top of the tape's arena (just made):
// its floats freed, x->half set. For a value that only linears and GELU read (they unpack it a
// block at a time: linear.c, elementwise.c)
Tensor *to_bf16_stored(Tape *tp, Tensor *x);
// x (..., C), normalized over C, no affine parameters
Tensor *layernorm(Tape *tp, Tensor *x, real eps);
// QK-norm, then rotary positions, one op (one output, one pass back): x (..., C), or (B, T, heads x
// dh) with angles. scale non-NULL: over groups of `group` columns (a head's, or all C),
// x / sqrt(mean of x^2 over the group + eps) * scale[c mod S], scale (S) with group | S | C (a
// head's dh, or C). angles non-NULL: then each pair (2j, 2j+1) of every head of token t turned by
// the angle whose cos and sin are angles[.., t, 2j] and [.., t, 2j+1]; angles (1 or B, T, dh), not
// differentiated (dit.c makes them); the groups even. Either alone: NULL for the other
Tensor *qk_norm_rope(Tape *tp, Tensor *x, Tensor *scale, int group, real eps, Tensor *angles, int heads);
// x (B,T,D), shift, scale (B,D), or (B,G,D) with row g for tokens [g T/G, (g+1) T/G):
// x * (1 + scale) + shift
Tensor *modulate(Tape *tp, Tensor *x, Tensor *shift, Tensor *scale);
// modulate(layernorm(x, eps), shift, scale), the same values, as one op that keeps no normalized
// copy of x (its backward normalizes x again): a DiT block's and the final layer's
Tensor *layernorm_modulate(Tape *tp, Tensor *x, Tensor *shift, Tensor *scale, real eps);
// x, y (B,T,D), gate (B,D) or (B,G,D) as for modulate: x + gate * y
Tensor *gated_add(Tape *tp, Tensor *x, Tensor *gate, Tensor *y);
// table (V,D), idx (B) in [0, V) -> (B,D)
Tensor *embedding(Tape *tp, Tensor *table, const int64_t *idx, int B);
// t (B) -> (B, dim): [cos(t f), sin(t f)], f_i = 10000^(-i / (dim/2))
Tensor *timestep_embedding(Tape *tp, Tensor *t, int dim);
// --exact (attention_exact.c): q (B,Tq,D) this rank's queries; k, v (B,n,D) its keys and values,
// rows [kfirst, kfirst + n) of k_all, v_all (B,Tk,D), all the keys its queries see (not
// differentiated; k_all = k where they are all here). Tq and Tk are multiples of the tape's
// canonical block. seg: packs' images of the queries (from token seg.q0) and of all Tk keys
// (seg.k0 0), or NO_SEGMENTS. reduce (NULL: none, this rank's rows of d_all are its keys' whole
// gradient) adds into d (B,n,D) this rank's rows of d_all, the exact sums of dK or dV of all keys,
// summed over the ranks whose queries saw them.
typedef void (*ExactReduceFn)(Arena *a, real *d, const ExactSum *d_all, int B, int n, int D, void *ctx);
// --exact: a linear's blocks' weight gradients wait for the sums in groups of up to this many
// blocks and values (at least one block's); a group's blocks run on the threads, so the values
// allow a few blocks of width 384's largest layer (6 x 384^2 weights)
#define LINEAR_EXACT_BLOCKS 8
#define LINEAR_EXACT_TERMS (1 << 21)
// A linear unpacks an input stored in 2 bytes (to_bf16_stored) a block of rows at a time: about
// this many values, and no fewer than this many rows (GELU: a block of this many values)
#define UNPACK_VALUES (1 << 20)
#define UNPACK_ROWS 128
Tensor *attention_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, Tensor *k_all, Tensor *v_all,
                        int kfirst, int heads, const uint8_t *key_mask, Segments seg,
                        ExactReduceFn reduce, void *ctx);
// --exact, keys that every rank of the group holds whole (a caption's): q (B,n,D) this rank's
// queries, n a multiple of the tape's canonical block; k, v (B,L,D); seg as attention's. Each
// query block's share of dK and dV goes into exact sums, which sum_group adds over the group's
// ranks (all of them get every query's share): the same bits for any split of the queries.
typedef void (*ExactSumFn)(ExactSum *s, void *ctx);
Tensor *attention_whole_kv_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, Segments seg,
                                 ExactSumFn sum_group, void *ctx);
// --exact, joint attention (SD3's MMDiT): q, k, v (B, R + n, D) this rank's tokens, the R of the
// caption (which every rank of the group holds whole) in front of its n image tokens, n a multiple
// of the tape's canonical block; k_all, v_all (B, Tk, D) every image key (this rank's from kfirst),
// key_mask (Tk) their padding or NULL; ids the joint images of the R caption and Tk image tokens
// (kernels/segments.h; this rank's image queries are tokens [kfirst, kfirst + n)). The caption's
// keys are canonical blocks of their own (padded) before the image's, its queries too: every
// query's output is the same whatever the split. Backward: dQ of the queries here; the image keys'
// dK and dV through reduce (as attention_exact's), the caption's summed over the group by
// sum_group, whole on every rank, the caption queries' shares (the same on every rank) added by
// the group's rank 0 alone. sum_group NULL: the caption's queries here are nowhere else (a head
// shard's), their shares and the caption's dK and dV complete here. copies > 1: the caption's keys
// that many times among every query's (the joint-text-replicated bug), each copy's share of dK
// and dV added.
Tensor *attention_joint_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int R, int copies, Tensor *k_all, Tensor *v_all,
                              int kfirst, int heads, const uint8_t *key_mask, const int32_t *ids,
                              ExactReduceFn reduce, ExactSumFn sum_group, void *ctx);
// q (B,Tq,D), k, v (B,Tk,D), D = heads * dh; key_mask (Tk) 1 = attend, or NULL -> (B,Tq,D);
// seg: the images of packed rows, a query attends only to its own image's keys (segments.h), or
// NO_SEGMENTS. Labels, masks and ids may be host memory for ops on the device too (copied up).
Tensor *attention(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const uint8_t *key_mask,
                  Segments seg);
// The fused attention kernels alone, where the arena is (RUN), their scratch from the arena: for
// layouts that attend block by block (ring attention). Arguments as in kernels.h; backward adds
// into dq, dk, dv.
void attention_kernel_forward(Arena *a, real *out, real *lse, const real *q, const real *k,
                              const real *v, const uint8_t *key_mask, Segments seg,
                              int B, int Tq, int Tk, int H, int dh);
void attention_kernel_backward(Arena *a, real *dq, real *dk, real *dv, const real *dout,
                               const real *out, const real *lse, const real *q, const real *k,
                               const real *v, const uint8_t *key_mask, Segments seg,
                               int B, int Tq, int Tk, int H, int dh);
// x (..., C) -> (..., len): columns [off, off + len)
Tensor *slice_last(Tape *tp, Tensor *x, int off, int len);
// a (..., Ca), b (..., Cb) with the same leading dims -> (..., Ca + Cb): a's columns, then b's
Tensor *concat_last(Tape *tp, Tensor *a, Tensor *b);
// scalar sum(mask * (pred - target)^2) / denom; mask (pred->size) or NULL = all ones
Tensor *mse_loss(Tape *tp, Tensor *pred, Tensor *target, const uint8_t *mask, double denom);
