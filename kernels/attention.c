// attention.c: multi-head scaled dot-product attention with a key mask, one (batch, head) pair
// at a time through CBLAS. Heads are column blocks of width dh in rows of width D = H*dh.
#include "kernels.h"
#include <cblas.h>
#include <math.h>

// out, q are (B,Tq,D); k, v are (B,Tk,D); probs is (B,H,Tq,Tk); key_mask is (Tk) or NULL
void attention_forward(real *out, real *probs, const real *q, const real *k, const real *v,
                       const uint8_t *key_mask, int B, int Tq, int Tk, int H, int dh) {
    int D = H * dh;
    real scale = (real)(1 / sqrt((double)dh));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const real *Q = q + (size_t)b * Tq * D + h * dh, *K = k + (size_t)b * Tk * D + h * dh;
            const real *V = v + (size_t)b * Tk * D + h * dh;
            real *P = probs + ((size_t)b * H + h) * Tq * Tk, *O = out + (size_t)b * Tq * D + h * dh;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, dh, scale, Q, D, K, D, 0, P, Tk);
            for (int i = 0; i < Tq; i++) {
                real *p = P + (size_t)i * Tk, mx = -INFINITY;
                for (int j = 0; j < Tk; j++)
                    if (!key_mask || key_mask[j]) mx = p[j] > mx ? p[j] : mx;
                double sum = 0;
                for (int j = 0; j < Tk; j++) {
                    p[j] = (!key_mask || key_mask[j]) ? rexp(p[j] - mx) : 0;
                    sum += p[j];
                }
                for (int j = 0; j < Tk; j++) p[j] = sum > 0 ? (real)(p[j] / sum) : 0; // all masked: 0
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, dh, Tk, 1, P, Tk, V, D, 0, O, D);
        }
}

// scratch is (Tq,Tk): dP = dO V^T, then dS = P * (dP - rowsum(P * dP)) in place
void attention_backward(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                        const real *probs, const real *q, const real *k, const real *v, int B,
                        int Tq, int Tk, int H, int dh) {
    int D = H * dh;
    real scale = (real)(1 / sqrt((double)dh));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t qo = (size_t)b * Tq * D + h * dh, ko = (size_t)b * Tk * D + h * dh;
            const real *P = probs + ((size_t)b * H + h) * Tq * Tk, *dO = dout + qo;
            if (dv)
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, dh, Tq, 1, P, Tk, dO, D, 1,
                     dv + ko, D);
            if (!dq && !dk) continue;
            real *dS = scratch;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, dh, 1, dO, D, v + ko, D, 0, dS,
                 Tk);
            for (int i = 0; i < Tq; i++) {
                const real *p = P + (size_t)i * Tk;
                real *ds = dS + (size_t)i * Tk;
                double dot = 0;
                for (int j = 0; j < Tk; j++) dot += (double)p[j] * ds[j];
                for (int j = 0; j < Tk; j++) ds[j] = p[j] * (real)(ds[j] - dot);
            }
            if (dq)
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, dh, Tk, scale, dS, Tk, k + ko,
                     D, 1, dq + qo, D);
            if (dk)
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, dh, Tq, scale, dS, Tk, q + qo, D,
                     1, dk + ko, D);
        }
}
