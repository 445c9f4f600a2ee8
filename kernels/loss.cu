// loss.cu: the masked mean squared error of loss.c on the device, and the sum of squares the
// gradient-norm clipping needs. The sums run in double in one block of CUDA_BLOCK threads, each
// striding over the elements, then a tree in shared memory: a fixed order, so the result does
// not depend on scheduling.
#include "cuda.h"
#include <cuda_runtime.h>

// *out = sum over i (mask[i] or no mask) of (a[i] - b[i])^2 (b NULL: a[i]^2), divided by denom
static __global__ void squares_kernel(double *out, const real *a, const real *b,
                                      const uint8_t *mask, size_t n, double denom) {
    __shared__ double part[CUDA_BLOCK];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += CUDA_BLOCK) {
        double e = (double)a[i] - (b ? b[i] : 0);
        if (!mask || mask[i]) s += e * e;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = CUDA_BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0] / denom;
}

// dpred += g, dtarget -= g, g = 2 dloss (pred - target) / denom where the mask is set
static __global__ void mse_backward_kernel(real *dpred, real *dtarget, real dloss, const real *pred,
                                           const real *target, const uint8_t *mask, size_t n,
                                           double denom) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (mask && !mask[i]) continue;
        real g = (real)(2 * dloss * (pred[i] - target[i]) / denom);
        if (dpred) dpred[i] += g;
        if (dtarget) dtarget[i] -= g;
    }
}

void mse_forward_cuda(double *loss, const real *pred, const real *target, const uint8_t *mask,
                      size_t n, double denom, cudaStream_t stream) {
    CHECK(denom > 0, "mse_forward_cuda: the element count %g must be positive", denom);
    squares_kernel<<<1, CUDA_BLOCK, 0, stream>>>(loss, pred, target, mask, n, denom);
    CUDA_CHECK(cudaGetLastError());
}

void mse_backward_cuda(real *dpred, real *dtarget, real dloss, const real *pred, const real *target,
                       const uint8_t *mask, size_t n, double denom, cudaStream_t stream) {
    CHECK(denom > 0, "mse_backward_cuda: the element count %g must be positive", denom);
    if (n == 0) return;
    mse_backward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(
        dpred, dtarget, dloss, pred, target, mask, n, denom);
    CUDA_CHECK(cudaGetLastError());
}

void sum_squares_cuda(double *sum, const real *x, size_t n, cudaStream_t stream) {
    squares_kernel<<<1, CUDA_BLOCK, 0, stream>>>(sum, x, NULL, NULL, n, 1);
    CUDA_CHECK(cudaGetLastError());
}
