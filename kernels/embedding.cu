// embedding.cu: the class-label table lookup and DiT's sinusoidal timestep embedding on the device
// (embedding.c). The backward passes sum in a fixed order without atomics: the table's gradient
// takes one thread per column, adding the batch's rows in order (labels repeat within a batch);
// a timestep's gradient takes one thread per image.
#include "cuda.h"
#include <cuda_runtime.h>

// out (B,D) = table (V,D)[idx[b]]
static __global__ void embedding_forward_kernel(real *out, const real *table, const int64_t *idx,
                                                int B, int D) {
    size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (x < (size_t)B * D) out[x] = table[idx[x / D] * D + x % D];
}

// dtable[idx[b]] += dout[b], column d by one thread, b in order
static __global__ void embedding_backward_kernel(real *dtable, const real *dout, const int64_t *idx,
                                                 int B, int D) {
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    for (int b = 0; b < B; b++) dtable[idx[b] * D + d] += dout[(size_t)b * D + d];
}

// out[b] = [cos(t f_i), sin(t f_i), (0 if dim is odd)], f_i = exp(-ln(max_period) i / half); the
// phase in double, as on the CPU
static __global__ void timestep_forward_kernel(real *out, const real *t, int B, int dim,
                                               real max_period) {
    int half = dim / 2;
    size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (x >= (size_t)B * dim) return;
    int b = (int)(x / dim), i = (int)(x % dim);
    if (i >= 2 * half) { out[x] = 0; return; }
    int k = i % half;
    double a = (double)t[b] * exp(-log((double)max_period) * k / half);
    out[x] = (real)(i < half ? cos(a) : sin(a));
}

static __global__ void timestep_backward_kernel(real *dt, const real *dout, const real *t, int B,
                                                int dim, real max_period) {
    int b = blockIdx.x * blockDim.x + threadIdx.x, half = dim / 2;
    if (b >= B) return;
    const real *g = dout + (size_t)b * dim;
    real s = 0;
    for (int i = 0; i < half; i++) {
        double f = exp(-log((double)max_period) * i / half), a = (double)t[b] * f;
        s += (real)(f * (-g[i] * sin(a) + g[half + i] * cos(a)));
    }
    dt[b] += s;
}

void embedding_forward_cuda(real *out, const real *table, const int64_t *idx, int B, int V, int D,
                            cudaStream_t stream) {
    CHECK(B > 0 && V > 0 && D > 0, "embedding_cuda: bad shape B %d, V %d, D %d", B, V, D);
    embedding_forward_kernel<<<cuda_blocks((size_t)B * D), CUDA_BLOCK, 0, stream>>>(out, table, idx, B, D);
    CUDA_CHECK(cudaGetLastError());
}

void embedding_backward_cuda(real *dtable, const real *dout, const int64_t *idx, int B, int V, int D,
                             cudaStream_t stream) {
    CHECK(B > 0 && V > 0 && D > 0, "embedding_cuda: bad shape B %d, V %d, D %d", B, V, D);
    embedding_backward_kernel<<<cuda_blocks((size_t)D), CUDA_BLOCK, 0, stream>>>(dtable, dout, idx, B, D);
    CUDA_CHECK(cudaGetLastError());
}

void timestep_embedding_forward_cuda(real *out, const real *t, int B, int dim, real max_period,
                                     cudaStream_t stream) {
    CHECK(B > 0 && dim > 1, "timestep_embedding_cuda: bad shape B %d, dim %d", B, dim);
    timestep_forward_kernel<<<cuda_blocks((size_t)B * dim), CUDA_BLOCK, 0, stream>>>(out, t, B, dim, max_period);
    CUDA_CHECK(cudaGetLastError());
}

void timestep_embedding_backward_cuda(real *dt, const real *dout, const real *t, int B, int dim,
                                      real max_period, cudaStream_t stream) {
    CHECK(B > 0 && dim > 1, "timestep_embedding_cuda: bad shape B %d, dim %d", B, dim);
    timestep_backward_kernel<<<cuda_blocks((size_t)B), CUDA_BLOCK, 0, stream>>>(dt, dout, t, B, dim, max_period);
    CUDA_CHECK(cudaGetLastError());
}
