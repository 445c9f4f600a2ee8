// layernorm.cu: LayerNorm over the last dim without affine parameters, on the device; the same
// math as layernorm.c. One warp per row (lanes stride over C, so reads are coalesced); row
// statistics are accumulated in double, as on the CPU, so float32 stays close to float64.
#include "cuda.h"
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 8 // rows per block

// ---- kernels -------------------------------------------------------------------------------------

// sum over the 32 lanes of a warp; every lane gets the result
__device__ static double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// out, inp are (N,C); mean, rstd are (N)
static __global__ void layernorm_forward_kernel(real *out, real *mean, real *rstd, const real *inp,
                                                int N, int C, real eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return; // whole warps leave together, so the shuffles stay full
    const real *x = inp + (size_t)row * C;
    real *o = out + (size_t)row * C;
    double m = 0, var = 0;
    for (int c = lane; c < C; c += 32) m += x[c];
    m = warp_sum(m) / C;
    for (int c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
    var = warp_sum(var) / C;
    real r = (real)(1 / sqrt(var + eps));
    for (int c = lane; c < C; c += 32) o[c] = (real)((x[c] - m) * r);
    if (lane == 0) {
        mean[row] = (real)m;
        rstd[row] = r;
    }
}

// dinp += rstd * (dout - mean(dout) - xhat * mean(dout * xhat)); dinp, dout, inp are (N,C)
static __global__ void layernorm_backward_kernel(real *dinp, const real *dout, const real *inp,
                                                 const real *mean, const real *rstd, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const real *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    real *dx = dinp + (size_t)row * C;
    real mu = mean[row], rs = rstd[row];
    double gm = 0, gxm = 0;
    for (int c = lane; c < C; c += 32) {
        gm += g[c];
        gxm += g[c] * (x[c] - mu) * rs;
    }
    gm = warp_sum(gm) / C;
    gxm = warp_sum(gxm) / C;
    for (int c = lane; c < C; c += 32) {
        real xhat = (x[c] - mu) * rs;
        dx[c] += rs * (real)(g[c] - gm - xhat * gxm);
    }
}

// ---- launchers -----------------------------------------------------------------------------------

void layernorm_forward_cuda(real *out, real *mean, real *rstd, const real *inp, int N, int C,
                            real eps, cudaStream_t stream) {
    CHECK(N >= 0 && C > 0, "layernorm_forward_cuda: bad shape N = %d, C = %d", N, C);
    if (N == 0) return;
    int blocks = (N + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    layernorm_forward_kernel<<<blocks, 32 * WARPS_PER_BLOCK, 0, stream>>>(out, mean, rstd, inp, N,
                                                                          C, eps);
    CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward_cuda(real *dinp, const real *dout, const real *inp, const real *mean,
                             const real *rstd, int N, int C, cudaStream_t stream) {
    CHECK(N >= 0 && C > 0, "layernorm_backward_cuda: bad shape N = %d, C = %d", N, C);
    if (N == 0 || !dinp) return;
    int blocks = (N + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    layernorm_backward_kernel<<<blocks, 32 * WARPS_PER_BLOCK, 0, stream>>>(dinp, dout, inp, mean,
                                                                           rstd, N, C);
    CUDA_CHECK(cudaGetLastError());
}
