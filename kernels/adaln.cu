// adaln.cu: the adaLN pieces of adaln.c on the device: modulate (out = x (1 + scale) + shift) and
// the gated residual (out = x + gate y), per-sample (B,D) vectors broadcast over T tokens.
// Element-wise parts are grid-stride loops; the (B,D) gradients take one thread per (b, d), which
// sums its column over the T rows in order: deterministic, no atomics.
#include "cuda.h"
#include <cuda_runtime.h>

// ---- kernels -------------------------------------------------------------------------------------

// the (b, d) of element i of a (B,T,D) tensor, as an index into a (B,D) vector
__device__ static size_t per_sample(size_t i, int T, int D) {
    return i / ((size_t)T * D) * D + i % D;
}

// out = x * (1 + scale) + shift; out, x (B,T,D); shift, scale (B,D)
static __global__ void modulate_kernel(real *out, const real *x, const real *shift,
                                       const real *scale, size_t n, int T, int D) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bd = per_sample(i, T, D);
        out[i] = x[i] * (1 + scale[bd]) + shift[bd];
    }
}

// out = x + gate * y; out, x, y (B,T,D); gate (B,D)
static __global__ void gated_add_kernel(real *out, const real *x, const real *gate, const real *y,
                                        size_t n, int T, int D) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = x[i] + gate[per_sample(i, T, D)] * y[i];
}

// da += dout * (one + v), v (B,D) broadcast over T or NULL (0): modulate's dx (one = 1, v = scale),
// the gated add's dx (one = 1, no v) and dy (one = 0, v = gate); da, dout (B,T,D)
static __global__ void scaled_grad_kernel(real *da, const real *dout, const real *v, real one,
                                          size_t n, int T, int D) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        da[i] += dout[i] * (one + (v ? v[per_sample(i, T, D)] : 0));
}

// per (b, d), summed over t: dsum += dout, dprod += dout * u; dout, u (B,T,D)
static __global__ void column_sums_kernel(real *dsum, real *dprod, const real *dout, const real *u,
                                          int B, int T, int D) {
    size_t bd = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (bd >= (size_t)B * D) return;
    size_t b = bd / D, d = bd % D;
    real s = 0, p = 0;
    for (int t = 0; t < T; t++) {
        size_t o = (b * T + t) * D + d;
        s += dout[o];
        if (dprod) p += dout[o] * u[o];
    }
    if (dsum) dsum[bd] += s;
    if (dprod) dprod[bd] += p;
}

// ---- launchers -----------------------------------------------------------------------------------

static void check_shape(const char *op, int B, int T, int D) {
    CHECK(B > 0 && T > 0 && D > 0, "%s: bad shape B %d, T %d, D %d", op, B, T, D);
}

void modulate_forward_cuda(real *out, const real *x, const real *shift, const real *scale, int B,
                           int T, int D, cudaStream_t stream) {
    check_shape("modulate_forward_cuda", B, T, D);
    size_t n = (size_t)B * T * D;
    modulate_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, x, shift, scale, n, T, D);
    CUDA_CHECK(cudaGetLastError());
}

void modulate_backward_cuda(real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                            const real *scale, int B, int T, int D, cudaStream_t stream) {
    check_shape("modulate_backward_cuda", B, T, D);
    size_t n = (size_t)B * T * D;
    if (dx) scaled_grad_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(dx, dout, scale, 1, n, T, D);
    CUDA_CHECK(cudaGetLastError());
    if (dshift || dscale)
        column_sums_kernel<<<cuda_blocks((size_t)B * D), CUDA_BLOCK, 0, stream>>>(
            dshift, dscale, dout, x, B, T, D);
    CUDA_CHECK(cudaGetLastError());
}

void gated_add_forward_cuda(real *out, const real *x, const real *gate, const real *y, int B, int T,
                            int D, cudaStream_t stream) {
    check_shape("gated_add_forward_cuda", B, T, D);
    size_t n = (size_t)B * T * D;
    gated_add_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, x, gate, y, n, T, D);
    CUDA_CHECK(cudaGetLastError());
}

void gated_add_backward_cuda(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                             const real *y, int B, int T, int D, cudaStream_t stream) {
    check_shape("gated_add_backward_cuda", B, T, D);
    size_t n = (size_t)B * T * D;
    if (dx) scaled_grad_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(dx, dout, NULL, 1, n, T, D);
    CUDA_CHECK(cudaGetLastError());
    if (dy) scaled_grad_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(dy, dout, gate, 0, n, T, D);
    CUDA_CHECK(cudaGetLastError());
    if (dgate)
        column_sums_kernel<<<cuda_blocks((size_t)B * D), CUDA_BLOCK, 0, stream>>>(
            NULL, dgate, dout, y, B, T, D);
    CUDA_CHECK(cudaGetLastError());
}
