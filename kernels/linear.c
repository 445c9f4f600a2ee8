// linear.c: fully connected layer on CBLAS (OpenBLAS; threaded inside, bias loops on OpenMP, at the
// CPU's vector width: SIMD_CLONES). Weight layout is PyTorch's (OC, C).
#include "../core/cpu.h"
#include "kernels.h"
#include <cblas.h>

// out (N,OC) += bias (OC) on each row
SIMD_BODY void add_bias(real *out, const real *bias, int N, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}
SIMD_CLONES(add_bias, (real *out, const real *bias, int N, int OC), (out, bias, N, OC))

// dbias[o0, o0 + w) += the column sums of dout (N,OC), w <= 16, each column's rows in order
SIMD_BODY void bias_columns(real *dbias, const real *dout, int N, int OC, int o0, int w) {
    real acc[16];
    for (int j = 0; j < w; j++) acc[j] = dbias[o0 + j];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) acc[j] += dout[(size_t)n * OC + o0 + j];
    for (int j = 0; j < w; j++) dbias[o0 + j] = acc[j];
}
SIMD_CLONES(bias_columns, (real *dbias, const real *dout, int N, int OC, int o0, int w),
            (dbias, dout, N, OC, o0, w))

// out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or NULL
void linear_forward(real *out, const real *inp, const real *weight, const real *bias, int N, int C,
                    int OC) {
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1, inp, C, weight, C, 0, out, OC);
    if (!bias) return;
    int per = OC < SPAN ? SPAN / OC : 1;
#pragma omp parallel for if ((size_t)N * OC > PAR_MIN)
    for (int n = 0; n < N; n += per) add_bias_simd(out + (size_t)n * OC, bias, N - n < per ? N - n : per, OC);
}

void linear_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, int N, int C, int OC) {
    if (dinp) // dinp (N,C) += dout (N,OC) @ weight (OC,C)
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1, dout, OC, weight, C, 1, dinp,
             C);
    if (dweight) // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1, dout, OC, inp, C, 1, dweight,
             C);
    if (dbias) // blocks of 16 columns on the threads, each summing its rows in order in registers
#pragma omp parallel for if ((size_t)N * OC > PAR_MIN)
        for (int o0 = 0; o0 < OC; o0 += 16)
            bias_columns_simd(dbias, dout, N, OC, o0, OC - o0 < 16 ? OC - o0 : 16);
}
