// embedding.c: table lookup (class labels) and the sinusoidal timestep embedding of DiT.
#include "kernels.h"
#include <math.h>
#include <string.h>

// out is (B,D), table is (V,D), idx is (B) with values in [0, V) (checked by the caller)
void embedding_forward(real *out, const real *table, const int64_t *idx, int B, int V, int D) {
    (void)V;
    for (int b = 0; b < B; b++) memcpy(out + (size_t)b * D, table + idx[b] * D, D * sizeof(real));
}

void embedding_backward(real *dtable, const real *dout, const int64_t *idx, int B, int V, int D) {
    (void)V;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) dtable[idx[b] * D + d] += dout[(size_t)b * D + d];
}

// out is (B,dim), t is (B): out[b] = [cos(t f_0..f_{h-1}), sin(t f_0..f_{h-1}), (0 if dim odd)]
void timestep_embedding_forward(real *out, const real *t, int B, int dim, real max_period) {
    int half = dim / 2;
    for (int b = 0; b < B; b++) {
        real *o = out + (size_t)b * dim;
        for (int i = 0; i < half; i++) {
            double f = exp(-log(max_period) * i / half), a = (double)t[b] * f; // t is up to 999:
            o[i] = (real)cos(a); // the phase needs double even in the float32 build
            o[half + i] = (real)sin(a);
        }
        if (dim % 2) o[dim - 1] = 0;
    }
}

void timestep_embedding_backward(real *dt, const real *dout, const real *t, int B, int dim,
                                 real max_period) {
    int half = dim / 2;
    for (int b = 0; b < B; b++) {
        const real *g = dout + (size_t)b * dim;
        for (int i = 0; i < half; i++) {
            double f = exp(-log(max_period) * i / half), a = (double)t[b] * f;
            dt[b] += (real)(f * (-g[i] * sin(a) + g[half + i] * cos(a)));
        }
    }
}
