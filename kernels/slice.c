// slice.c: a column range of the last dim (chunk/split of adaLN and qkv outputs).
#include "kernels.h"
#include <string.h>

// out is (N,len), inp is (N,C)
void slice_forward(real *out, const real *inp, int N, int C, int off, int len) {
#pragma omp parallel for if ((size_t)N * len > PAR_MIN)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * len, inp + (size_t)n * C + off, len * sizeof(real));
}

void slice_backward(real *dinp, const real *dout, int N, int C, int off, int len) {
    add_rows(dinp + off, (size_t)C, dout, (size_t)len, (size_t)len, (size_t)N); // columns of each row
}
