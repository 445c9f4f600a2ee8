// loss.cu: the masked mean squared error of loss.c on the device, and the sum of squares the
// gradient-norm clipping needs. The sums run in double in two passes: up to SQ_BLOCKS blocks each
// stride over the elements and add their threads' sums in a tree in shared memory, then one block
// adds the blocks' sums the same way. The grid depends on n alone, so the order of the additions
// is fixed and the result does not depend on scheduling.
#include "cuda.h"
#include <cuda_runtime.h>

#define SQ_BLOCKS 512

// the tree sum of the block's values v into part[0] (every thread returns it)
static __device__ double block_sum(double *part, double v) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (int half = CUDA_BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    return part[0];
}

// sums[block] = sum over this block's share of i (mask[i] or no mask) of (a[i] - b[i])^2 (b NULL:
// a[i]^2)
static __global__ void squares_kernel(double *sums, const real *a, const real *b,
                                      const uint8_t *mask, size_t n) {
    __shared__ double part[CUDA_BLOCK];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)CUDA_BLOCK + threadIdx.x; i < n;
         i += (size_t)gridDim.x * CUDA_BLOCK) {
        double e = (double)a[i] - (b ? b[i] : 0);
        if (!mask || mask[i]) s += e * e;
    }
    double total = block_sum(part, s);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// *out = the k sums, added, over denom
static __global__ void add_sums_kernel(double *out, const double *sums, unsigned k, double denom) {
    __shared__ double part[CUDA_BLOCK];
    double s = 0;
    for (unsigned i = threadIdx.x; i < k; i += CUDA_BLOCK) s += sums[i];
    double total = block_sum(part, s);
    if (threadIdx.x == 0) *out = total / denom;
}

// the sum of squares over denom, read back to the host
static double squares(const real *a, const real *b, const uint8_t *mask, size_t n, double denom,
                      cudaStream_t stream) {
    static double *sums; // the blocks' sums, then the total, for the process
    if (!sums) sums = (double *)device_alloc((SQ_BLOCKS + 1) * sizeof(double));
    double *out = sums + SQ_BLOCKS, total;
    unsigned k = cuda_blocks(n) < SQ_BLOCKS ? cuda_blocks(n) : SQ_BLOCKS;
    if (k == 0) k = 1; // n = 0: one block of nothing
    squares_kernel<<<k, CUDA_BLOCK, 0, stream>>>(sums, a, b, mask, n);
    CUDA_CHECK(cudaGetLastError());
    add_sums_kernel<<<1, CUDA_BLOCK, 0, stream>>>(out, sums, k, denom);
    CUDA_CHECK(cudaGetLastError());
    copy_bytes(&total, out, sizeof total);
    return total;
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

double mse_forward_cuda(const real *pred, const real *target, const uint8_t *mask, size_t n,
                        double denom, cudaStream_t stream) {
    CHECK(denom > 0, "mse_forward_cuda: the element count %g must be positive", denom);
    return squares(pred, target, mask, n, denom, stream);
}

void mse_backward_cuda(real *dpred, real *dtarget, real dloss, const real *pred, const real *target,
                       const uint8_t *mask, size_t n, double denom, cudaStream_t stream) {
    CHECK(denom > 0, "mse_backward_cuda: the element count %g must be positive", denom);
    if (n == 0) return;
    mse_backward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(
        dpred, dtarget, dloss, pred, target, mask, n, denom);
    CUDA_CHECK(cudaGetLastError());
}

double sum_squares_cuda(const real *x, size_t n, cudaStream_t stream) {
    return squares(x, NULL, NULL, n, 1, stream);
}
