// qknorm.cu: QK-norm (RMSNorm with a learned scale over groups of G columns) and rotary positions
// on the device; the same math as qknorm.c. RMSNorm: one warp per group of a row (lanes stride over
// its columns, statistics in double); the scale's gradient: one block per scale element, its
// threads' partial sums added in a fixed order (deterministic, no atomics). Rotary: one thread
// per pair of dimensions.
#include "cuda.h"
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 8 // groups per block

// ---- kernels -------------------------------------------------------------------------------------

__device__ static double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// out, inp (N,C); rstd (N, C/G); scale (S)
static __global__ void rmsnorm_forward_kernel(real *out, real *rstd, const real *inp,
                                              const real *scale, int N, int C, int G, int S,
                                              real eps) {
    int lane = threadIdx.x % 32, groups = C / G;
    size_t w = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (w >= (size_t)N * groups) return; // whole warps leave together
    size_t o = w / groups * C + w % groups * G;
    const real *x = inp + o, *s = scale + o % C % S;
    double ss = 0;
    for (int c = lane; c < G; c += 32) ss += (double)x[c] * x[c];
    real r = (real)(1 / sqrt(warp_sum(ss) / G + eps));
    for (int c = lane; c < G; c += 32) out[o + c] = x[c] * r * s[c];
    if (lane == 0) rstd[w] = r;
}

// dinp += r (dy s - xhat mean(dy s xhat)) over each group
static __global__ void rmsnorm_backward_dx_kernel(real *dinp, const real *dout, const real *inp,
                                                  const real *scale, const real *rstd, int N,
                                                  int C, int G, int S) {
    int lane = threadIdx.x % 32, groups = C / G;
    size_t w = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (w >= (size_t)N * groups) return;
    size_t o = w / groups * C + w % groups * G;
    const real *x = inp + o, *dy = dout + o, *s = scale + o % C % S;
    real r = rstd[w];
    double m = 0;
    for (int c = lane; c < G; c += 32) m += (double)dy[c] * s[c] * x[c] * r;
    m = warp_sum(m) / G;
    for (int c = lane; c < G; c += 32) dinp[o + c] += r * (real)(dy[c] * s[c] - x[c] * r * m);
}

// dscale[j] += sum over rows and columns c = j mod S of dout xhat; block j, CUDA_BLOCK threads
static __global__ void rmsnorm_backward_dscale_kernel(real *dscale, const real *dout,
                                                      const real *inp, const real *rstd, int N,
                                                      int C, int G, int S) {
    __shared__ double part[CUDA_BLOCK];
    int j = blockIdx.x, per_row = C / S, groups = C / G;
    double sum = 0;
    for (size_t k = threadIdx.x; k < (size_t)N * per_row; k += blockDim.x) {
        size_t n = k / per_row, c = k % per_row * S + j, i = n * C + c;
        sum += (double)dout[i] * inp[i] * rstd[n * groups + c / G];
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) dscale[j] += (real)part[0];
}

// one thread per pair: (B*T*H*dh/2) of them
static __global__ void rope_kernel(real *out, const real *inp, const real *cs, int B, int T, int H,
                                   int dh, bool per_image, bool backward) {
    size_t pairs = (size_t)B * T * H * (dh / 2);
    real sign = backward ? -1 : 1;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < pairs;
         p += (size_t)gridDim.x * blockDim.x) {
        size_t j = p % (dh / 2) * 2, bt = p / (dh / 2) / H, o = p * 2;
        const real *a = cs + (per_image ? bt : bt % T) * dh + j;
        real c = a[0], s = sign * a[1], x0 = inp[o], x1 = inp[o + 1];
        real y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
        if (backward) out[o] += y0, out[o + 1] += y1;
        else out[o] = y0, out[o + 1] = y1;
    }
}

// ---- launchers -----------------------------------------------------------------------------------

static void check_groups(const char *name, int N, int C, int G, int S) {
    CHECK(N >= 0 && C > 0 && G > 0 && S > 0 && C % G == 0 && S % G == 0 && C % S == 0,
          "%s: bad shape N = %d, C = %d, groups of %d, scale of %d", name, N, C, G, S);
}

void rmsnorm_forward_cuda(real *out, real *rstd, const real *inp, const real *scale, int N, int C,
                          int G, int S, real eps, cudaStream_t stream) {
    check_groups("rmsnorm_forward_cuda", N, C, G, S);
    size_t warps = (size_t)N * (C / G);
    if (!warps) return;
    rmsnorm_forward_kernel<<<(unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK),
                             32 * WARPS_PER_BLOCK, 0, stream>>>(out, rstd, inp, scale, N, C, G, S, eps);
    CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_backward_cuda(real *dinp, real *dscale, const real *dout, const real *inp,
                           const real *scale, const real *rstd, int N, int C, int G, int S,
                           cudaStream_t stream) {
    check_groups("rmsnorm_backward_cuda", N, C, G, S);
    size_t warps = (size_t)N * (C / G);
    if (!warps) return;
    if (dinp) {
        rmsnorm_backward_dx_kernel<<<(unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK),
                                     32 * WARPS_PER_BLOCK, 0, stream>>>(dinp, dout, inp, scale, rstd,
                                                                        N, C, G, S);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dscale) {
        rmsnorm_backward_dscale_kernel<<<S, CUDA_BLOCK, 0, stream>>>(dscale, dout, inp, rstd, N, C, G, S);
        CUDA_CHECK(cudaGetLastError());
    }
}

static void rope_launch(real *out, const real *inp, const real *cs, int B, int T, int H, int dh,
                        bool per_image, bool backward, cudaStream_t stream) {
    CHECK(B >= 0 && T >= 0 && H > 0 && dh > 0 && dh % 2 == 0,
          "rope_%s_cuda: bad shape B = %d, T = %d, H = %d, dh = %d (even)",
          backward ? "backward" : "forward", B, T, H, dh);
    size_t pairs = (size_t)B * T * H * (dh / 2);
    if (!pairs || !out) return;
    rope_kernel<<<cuda_grid(pairs), CUDA_BLOCK, 0, stream>>>(out, inp, cs, B, T, H, dh, per_image,
                                                             backward);
    CUDA_CHECK(cudaGetLastError());
}

void rope_forward_cuda(real *out, const real *inp, const real *cs, int B, int T, int H, int dh,
                       bool per_image, cudaStream_t stream) {
    rope_launch(out, inp, cs, B, T, H, dh, per_image, false, stream);
}

void rope_backward_cuda(real *dinp, const real *dout, const real *cs, int B, int T, int H, int dh,
                        bool per_image, cudaStream_t stream) {
    rope_launch(dinp, dout, cs, B, T, H, dh, per_image, true, stream);
}
