// attention.c: fused multi-head attention (the FlashAttention-2 algorithm on the CPU). Queries go
// in tiles of bq rows against key blocks of bk rows with the online softmax (running max m and
// sum l), so no Tq x Tk matrix ever exists: forward keeps the output and the per-row log-sum-exp
// L = m + log l; backward recomputes each block's probabilities P = exp(S - L). Work is split
// over (batch, head) pairs with OpenMP; each thread owns its pairs' rows of dQ, dK, dV, so the
// result does not depend on the thread count. Heads are column blocks of width dh in rows of
// width D = H*dh. Small block products go through CBLAS (single-threaded inside the region).
#include "kernels.h"
#include <cblas.h>
#include <math.h>

size_t attention_tiled_scratch_count(int bq, int bk, int dh, int threads) {
    return (size_t)threads * (2 * (size_t)bq * bk + (size_t)bq * dh + 2 * (size_t)bq);
}

// S (nq,nk) = scale * Q K^T for the rows of one tile and block; masked keys get -inf
static void scores(real *S, const real *Q, const real *K, const uint8_t *mask, int nq, int nk,
                   int D, int dh, real scale) {
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dh, scale, Q, D, K, D, 0, S, nk);
    if (mask)
        for (int j = 0; j < nk; j++)
            if (!mask[j])
                for (int r = 0; r < nq; r++) S[(size_t)r * nk + j] = -INFINITY;
}

// q, out (B,Tq,D); k, v (B,Tk,D); lse (B,H,Tq); key_mask (Tk) or NULL
void attention_forward_tiled(real *out, real *lse, real *scratch, const real *q, const real *k,
                             const real *v, const uint8_t *key_mask, int B, int Tq, int Tk, int H,
                             int dh, int bq, int bk) {
    int D = H * dh, tiles = (Tq + bq - 1) / bq;
    real scale = (real)(1 / sqrt((double)dh));
#pragma omp parallel for schedule(dynamic)
    for (long job = 0; job < (long)B * H * tiles; job++) {
        int b = (int)(job / ((long)H * tiles)), h = (int)(job / tiles % H), i0 = (int)(job % tiles) * bq;
        int nq = Tq - i0 < bq ? Tq - i0 : bq;
        real *S = scratch + (size_t)omp_thread() * attention_tiled_scratch_count(bq, bk, dh, 1);
        real *acc = S + 2 * (size_t)bq * bk, *m = acc + (size_t)bq * dh, *l = m + bq;
        const real *Q = q + ((size_t)b * Tq + i0) * D + h * dh;
        for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;
        for (size_t x = 0; x < (size_t)nq * dh; x++) acc[x] = 0;
        for (int j0 = 0; j0 < Tk; j0 += bk) {
            int nk = Tk - j0 < bk ? Tk - j0 : bk;
            const real *K = k + ((size_t)b * Tk + j0) * D + h * dh, *V = v + ((size_t)b * Tk + j0) * D + h * dh;
            scores(S, Q, K, key_mask ? key_mask + j0 : NULL, nq, nk, D, dh, scale);
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
}

// Per tile and block: P = exp(S - L), dV += P^T dO, dP = dO V^T, dS = P (dP - Delta) with
// Delta = rowsum(dO * O), dQ += scale dS K, dK += scale dS^T Q.
void attention_backward_tiled(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                              const real *out, const real *lse, const real *q, const real *k,
                              const real *v, const uint8_t *key_mask, int B, int Tq, int Tk, int H,
                              int dh, int bq, int bk) {
    int D = H * dh;
    real scale = (real)(1 / sqrt((double)dh));
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        real *P = scratch + (size_t)omp_thread() * attention_tiled_scratch_count(bq, bk, dh, 1);
        real *dP = P + (size_t)bq * bk, *delta = dP + (size_t)bq * bk;
        for (int i0 = 0; i0 < Tq; i0 += bq) {
            int nq = Tq - i0 < bq ? Tq - i0 : bq;
            size_t qo = ((size_t)b * Tq + i0) * D + h * dh;
            const real *L = lse + (size_t)bh * Tq + i0;
            for (int r = 0; r < nq; r++) {
                double s = 0;
                for (int d = 0; d < dh; d++) s += (double)dout[qo + (size_t)r * D + d] * out[qo + (size_t)r * D + d];
                delta[r] = (real)s;
            }
            for (int j0 = 0; j0 < Tk; j0 += bk) {
                int nk = Tk - j0 < bk ? Tk - j0 : bk;
                size_t ko = ((size_t)b * Tk + j0) * D + h * dh;
                scores(P, q + qo, k + ko, key_mask ? key_mask + j0 : NULL, nq, nk, D, dh, scale);
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
}

// ---- with the tiles chosen here: the launchers' arguments ---------------------------------------
static int tile(int rows, int most) { return rows < most ? rows : most; }

size_t attention_scratch_count(int B, int Tq, int Tk, int H, int dh, bool backward) {
    (void)B, (void)H, (void)backward; // per thread, the same in both directions
    return attention_tiled_scratch_count(tile(Tq, ATTN_BQ), tile(Tk, ATTN_BK), dh, kernel_threads());
}

void attention_forward(real *out, real *lse, real *scratch, const real *q, const real *k,
                       const real *v, const uint8_t *key_mask, int B, int Tq, int Tk, int H,
                       int dh) {
    attention_forward_tiled(out, lse, scratch, q, k, v, key_mask, B, Tq, Tk, H, dh,
                            tile(Tq, ATTN_BQ), tile(Tk, ATTN_BK));
}

void attention_backward(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                        const real *out, const real *lse, const real *q, const real *k,
                        const real *v, const uint8_t *key_mask, int B, int Tq, int Tk, int H,
                        int dh) {
    attention_backward_tiled(dq, dk, dv, scratch, dout, out, lse, q, k, v, key_mask, B, Tq, Tk, H,
                             dh, tile(Tq, ATTN_BQ), tile(Tk, ATTN_BK));
}

void attention_merge(real *o, real *lse, const real *o_blk, const real *lse_blk, int B, int n,
                     int H, int dh, int mean_of) {
    int D = H * dh;
#pragma omp parallel for collapse(2) if ((size_t)B * n * D > PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                size_t row = ((size_t)b * H + h) * n + i;
                double la = lse[row], lb = lse_blk[row];
                if (lb == -INFINITY) continue;
                double mx = fmax(la, lb), lnew = la == -INFINITY ? lb : mx + log(exp(la - mx) + exp(lb - mx));
    if (mean_of < 0) lnew = log((double)((real)exp(la) + (real)exp(lb))); // overflows past ~88 (f32)
                double wb = mean_of > 0 ? 1.0 / mean_of : exp(lb - lnew);
                double wa = mean_of > 0 ? 1 - wb : la == -INFINITY ? 0 : exp(la - lnew);
                real *oa = o + ((size_t)b * n + i) * D + h * dh;
                const real *ob = o_blk + ((size_t)b * n + i) * D + h * dh;
                for (int d = 0; d < dh; d++) oa[d] = (real)(wa * oa[d] + wb * ob[d]);
                lse[row] = (real)lnew;
            }
}
