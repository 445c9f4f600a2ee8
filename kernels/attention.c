// attention.c: fused multi-head attention (the FlashAttention-2 algorithm on the CPU). Queries go
// in tiles of bq rows against key blocks of bk rows with the online softmax (running max m and
// sum l), so no Tq x Tk matrix ever exists: forward keeps the output and the per-row log-sum-exp
// L = m + log l; backward recomputes each block's probabilities P = exp(S - L). Work is split
// over (batch, head) pairs with OpenMP; each thread owns its pairs' rows of dQ, dK, dV, so the
// result does not depend on the thread count. Heads are column blocks of width dh in rows of
// width D = H*dh. Small block products go through CBLAS (single-threaded inside the region); the
// softmax and the rest between them run at the CPU's vector width (SIMD_CLONES), a query tile
// (forward) or a (batch, head) pair (backward) at a time.
#include "../core/cpu.h"
#include "kernels.h"
#include <cblas.h>
#include <math.h>

void (*attention_progress)(void);

// attention_progress, on the team's thread 0 only (comm.c checks that it is MPI's thread)
static inline void progress(void) {
    if (attention_progress && omp_thread() == 0) attention_progress();
}

size_t attention_tiled_scratch_count(int bq, int bk, int dh, int threads) {
    return (size_t)threads * (2 * (size_t)bq * bk + (size_t)bq * dh + 2 * (size_t)bq);
}

// S (nq,nk) = scale * Q K^T for the rows of one tile and block; masked keys, and keys of another
// image than the query's (qs, ks: the tile's and the block's image ids, or NULL), get -inf
static void scores(real *S, const real *Q, const real *K, const uint8_t *mask, const int32_t *qs,
                   const int32_t *ks, int nq, int nk, int D, int dh, real scale) {
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dh, scale, Q, D, K, D, 0, S, nk);
    if (mask)
        for (int j = 0; j < nk; j++)
            if (!mask[j])
                for (int r = 0; r < nq; r++) S[(size_t)r * nk + j] = -INFINITY;
    if (qs)
        for (int r = 0; r < nq; r++)
            for (int j = 0; j < nk; j++)
                if (qs[r] != ks[j]) S[(size_t)r * nk + j] = -INFINITY;
}

// the image ids from token `at` of row b (NULL without segments)
static const int32_t *seg_ids(Segments s, int b, int at) {
    return s.id ? s.id + (size_t)b * s.T + at : NULL;
}

// What queries of ids qs (nq) see of keys of ids ks (nk): SEE_NONE when their ranges of ids do
// not overlap, SEE_ALL when all are of one image (or there are no segments), else SEE_SOME. A
// block that none of a tile's queries sees is skipped: the cost follows the images' own
// attention, not the pack's length squared.
enum { SEE_NONE, SEE_SOME, SEE_ALL };
static int sight(const int32_t *qs, int nq, const int32_t *ks, int nk) {
    if (!qs) return SEE_ALL;
    int32_t qlo = qs[0], qhi = qs[0], klo = ks[0], khi = ks[0];
    for (int r = 1; r < nq; r++) qlo = qs[r] < qlo ? qs[r] : qlo, qhi = qs[r] > qhi ? qs[r] : qhi;
    for (int j = 1; j < nk; j++) klo = ks[j] < klo ? ks[j] : klo, khi = ks[j] > khi ? ks[j] : khi;
    if (qhi < klo || khi < qlo) return SEE_NONE;
    return qlo == qhi && klo == khi ? SEE_ALL : SEE_SOME;
}

// the query tile of rows i0.. of batch b, head h; S is the thread's scratch
SIMD_BODY void forward_tile(real *out, real *lse, real *S, const real *q, const real *k,
                            const real *v, const uint8_t *key_mask, Segments seg, int Tq, int Tk,
                            int H, int dh, int bq, int bk, int b, int h, int i0) {
    int D = H * dh, nq = Tq - i0 < bq ? Tq - i0 : bq;
    real scale = (real)(1 / sqrt((double)dh));
    real *acc = S + 2 * (size_t)bq * bk, *m = acc + (size_t)bq * dh, *l = m + bq;
    const real *Q = q + ((size_t)b * Tq + i0) * D + h * dh;
    const int32_t *qs = seg_ids(seg, b, seg.q0 + i0);
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;
    for (size_t x = 0; x < (size_t)nq * dh; x++) acc[x] = 0;
    for (int j0 = 0; j0 < Tk; j0 += bk) {
        int nk = Tk - j0 < bk ? Tk - j0 : bk;
        const real *K = k + ((size_t)b * Tk + j0) * D + h * dh, *V = v + ((size_t)b * Tk + j0) * D + h * dh;
        const int32_t *ks = seg_ids(seg, b, seg.k0 + j0);
        int see = sight(qs, nq, ks, nk);
        if (see == SEE_NONE) continue;
        const int32_t *mixed = see == SEE_SOME ? qs : NULL; // else no key to mask by image
        scores(S, Q, K, key_mask ? key_mask + j0 : NULL, mixed, ks, nq, nk, D, dh, scale);
        for (int r = 0; r < nq; r++) {
            real *p = S + (size_t)r * nk, mx = m[r];
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < nk; j++) mx = p[j] > mx ? p[j] : mx;
            if (mx == -INFINITY) { // every key so far masked: this block adds nothing
                for (int j = 0; j < nk; j++) p[j] = 0;
                continue;
            }
            real sum = 0, alpha = rexp(m[r] - mx); // rescales what earlier blocks summed
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < nk; j++) sum += p[j] = rexp(p[j] - mx); // masked: exactly 0
#ifndef ATTENTION_PLANTED_BUG
            l[r] = l[r] * alpha + sum;
#else // tests/test_attention.c builds this file again with the running sum left unrescaled
            l[r] = l[r] + sum;
#endif
            for (int d = 0; d < dh; d++) acc[(size_t)r * dh + d] *= alpha;
            m[r] = mx;
        }
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dh, nk, 1, S, nk, V, D, 1, acc, dh);
    }
    for (int r = 0; r < nq; r++) { // a query whose keys are all masked outputs 0
        real *o = out + ((size_t)b * Tq + i0 + r) * D + h * dh, inv = l[r] > 0 ? 1 / l[r] : 0;
        for (int d = 0; d < dh; d++) o[d] = acc[(size_t)r * dh + d] * inv;
        lse[((size_t)b * H + h) * Tq + i0 + r] = l[r] > 0 ? m[r] + (real)log(l[r]) : -INFINITY;
    }
}
SIMD_CLONES(forward_tile, (real *out, real *lse, real *S, const real *q, const real *k, const real *v,
                           const uint8_t *key_mask, Segments seg, int Tq, int Tk, int H, int dh,
                           int bq, int bk, int b, int h, int i0),
            (out, lse, S, q, k, v, key_mask, seg, Tq, Tk, H, dh, bq, bk, b, h, i0))

// q, out (B,Tq,D); k, v (B,Tk,D); lse (B,H,Tq); key_mask (Tk) or NULL; seg (segments.h)
void attention_forward_tiled(real *out, real *lse, real *scratch, const real *q, const real *k,
                             const real *v, const uint8_t *key_mask, Segments seg,
                             int B, int Tq, int Tk, int H, int dh, int bq, int bk) {
    int tiles = (Tq + bq - 1) / bq;
    size_t per_thread = attention_tiled_scratch_count(bq, bk, dh, 1);
#pragma omp parallel for schedule(dynamic)
    for (long job = 0; job < (long)B * H * tiles; job++) {
        progress();
        forward_tile_simd(out, lse, scratch + (size_t)omp_thread() * per_thread, q, k, v, key_mask,
                          seg, Tq, Tk, H, dh, bq, bk, (int)(job / ((long)H * tiles)),
                          (int)(job / tiles % H), (int)(job % tiles) * bq);
    }
}

// Per tile and block: P = exp(S - L), dV += P^T dO, dP = dO V^T, dS = P (dP - Delta) with
// Delta = rowsum(dO * O), dQ += scale dS K, dK += scale dS^T Q. Here the pair bh = b H + h, with
// the thread's scratch P.
SIMD_BODY void backward_pair(real *dq, real *dk, real *dv, real *P, const real *dout, const real *out,
                             const real *lse, const real *q, const real *k, const real *v,
                             const uint8_t *key_mask, Segments seg, int Tq, int Tk, int H, int dh,
                             int bq, int bk, int bh) {
    int D = H * dh, b = bh / H, h = bh % H;
    real scale = (real)(1 / sqrt((double)dh));
    real *dP = P + (size_t)bq * bk, *delta = dP + (size_t)bq * bk;
    for (int i0 = 0; i0 < Tq; i0 += bq) {
        progress();
        int nq = Tq - i0 < bq ? Tq - i0 : bq;
        size_t qo = ((size_t)b * Tq + i0) * D + h * dh;
        const real *L = lse + (size_t)bh * Tq + i0;
        const int32_t *qs = seg_ids(seg, b, seg.q0 + i0);
        for (int r = 0; r < nq; r++) {
            double s = 0;
            for (int d = 0; d < dh; d++) s += (double)dout[qo + (size_t)r * D + d] * out[qo + (size_t)r * D + d];
            delta[r] = (real)s;
        }
        for (int j0 = 0; j0 < Tk; j0 += bk) {
            int nk = Tk - j0 < bk ? Tk - j0 : bk;
            size_t ko = ((size_t)b * Tk + j0) * D + h * dh;
            const int32_t *ks = seg_ids(seg, b, seg.k0 + j0);
            int see = sight(qs, nq, ks, nk);
            if (see == SEE_NONE) continue;
            const int32_t *mixed = see == SEE_SOME ? qs : NULL; // else no key to mask by image
            scores(P, q + qo, k + ko, key_mask ? key_mask + j0 : NULL, mixed, ks, nq, nk, D, dh,
                   scale);
            for (int r = 0; r < nq; r++) { // masked keys (-inf) and fully masked rows: exactly 0
                real *p = P + (size_t)r * nk, l = L[r] == -INFINITY ? INFINITY : L[r];
#pragma omp simd
                for (int j = 0; j < nk; j++) p[j] = rexp(p[j] - l);
            }
            if (dv)
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dh, nq, 1, P, nk, dout + qo,
                     D, 1, dv + ko, D);
            if (!dq && !dk) continue;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dh, 1, dout + qo, D, v + ko,
                 D, 0, dP, nk);
            for (int r = 0; r < nq; r++) {
                real *p = P + (size_t)r * nk, *dp = dP + (size_t)r * nk, dr = delta[r];
#pragma omp simd
                for (int j = 0; j < nk; j++) dp[j] = p[j] * (dp[j] - dr);
            }
            if (dq)
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dh, nk, scale, dP, nk,
                     k + ko, D, 1, dq + qo, D);
            if (dk)
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dh, nq, scale, dP, nk,
                     q + qo, D, 1, dk + ko, D);
        }
    }
}
SIMD_CLONES(backward_pair, (real *dq, real *dk, real *dv, real *P, const real *dout, const real *out,
                            const real *lse, const real *q, const real *k, const real *v,
                            const uint8_t *key_mask, Segments seg, int Tq, int Tk, int H, int dh,
                            int bq, int bk, int bh),
            (dq, dk, dv, P, dout, out, lse, q, k, v, key_mask, seg, Tq, Tk, H, dh, bq, bk, bh))

void attention_backward_tiled(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                              const real *out, const real *lse, const real *q, const real *k,
                              const real *v, const uint8_t *key_mask, Segments seg,
                              int B, int Tq, int Tk, int H, int dh, int bq, int bk) {
    size_t per_thread = attention_tiled_scratch_count(bq, bk, dh, 1);
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < B * H; bh++)
        backward_pair_simd(dq, dk, dv, scratch + (size_t)omp_thread() * per_thread, dout, out, lse,
                           q, k, v, key_mask, seg, Tq, Tk, H, dh, bq, bk, bh);
}

// ---- with the tiles chosen here: the launchers' arguments ---------------------------------------
static int tile(int rows, int most) { return rows < most ? rows : most; }

size_t attention_scratch_count(int B, int Tq, int Tk, int H, int dh, bool backward) {
    (void)B, (void)H, (void)backward; // per thread, the same in both directions
    return attention_tiled_scratch_count(tile(Tq, attn_bq()), tile(Tk, attn_bk()), dh, kernel_threads());
}

void attention_forward(real *out, real *lse, real *scratch, const real *q, const real *k,
                       const real *v, const uint8_t *key_mask, Segments seg,
                       int B, int Tq, int Tk, int H, int dh) {
    attention_forward_tiled(out, lse, scratch, q, k, v, key_mask, seg, B, Tq, Tk, H, dh,
                            tile(Tq, attn_bq()), tile(Tk, attn_bk()));
}

void attention_backward(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                        const real *out, const real *lse, const real *q, const real *k,
                        const real *v, const uint8_t *key_mask, Segments seg,
                        int B, int Tq, int Tk, int H, int dh) {
    attention_backward_tiled(dq, dk, dv, scratch, dout, out, lse, q, k, v, key_mask, seg, B, Tq, Tk,
                             H, dh, tile(Tq, attn_bq()), tile(Tk, attn_bk()));
}

void attention_merge(real *o, real *lse, const real *o_blk, const real *lse_blk, int B, int n,
                     int H, int dh, AttnMerge m) {
    int D = H * dh;
#pragma omp parallel for collapse(2) if ((size_t)B * n * D > PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                size_t row = ((size_t)b * H + h) * n + i;
                double la = lse[row], lb = lse_blk[row];
                if (lb == -INFINITY) continue;
                double wa, wb, lnew;
                merge_weights(la, lb, m, &wa, &wb, &lnew);
                real *oa = o + ((size_t)b * n + i) * D + h * dh;
                const real *ob = o_blk + ((size_t)b * n + i) * D + h * dh;
                for (int d = 0; d < dh; d++) oa[d] = (real)(wa * oa[d] + wb * ob[d]);
                lse[row] = (real)lnew;
            }
}
