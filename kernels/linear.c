// linear.c: fully connected layer on CBLAS (OpenBLAS; threaded inside, bias loops on OpenMP). Weight layout is PyTorch's (OC, C).
#include "kernels.h"
#include <cblas.h>

// out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or NULL
void linear_forward(real *out, const real *inp, const real *weight, const real *bias, int N, int C,
                    int OC) {
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1, inp, C, weight, C, 0, out, OC);
    if (!bias) return;
#pragma omp parallel for if ((size_t)N * OC > PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
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
        for (int o0 = 0; o0 < OC; o0 += 16) {
            int w = OC - o0 < 16 ? OC - o0 : 16;
            real acc[16];
            for (int j = 0; j < w; j++) acc[j] = dbias[o0 + j];
            for (int n = 0; n < N; n++)
                for (int j = 0; j < w; j++) acc[j] += dout[(size_t)n * OC + o0 + j];
            for (int j = 0; j < w; j++) dbias[o0 + j] = acc[j];
        }
}
