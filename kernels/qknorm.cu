// qknorm.cu: QK-norm (RMSNorm with a learned scale over groups of G columns) then rotary positions,
// one op on the device; the same math as qknorm.c. One warp per group of a row (lanes stride over
// its columns, statistics in double); the scale's gradient: one block per scale element, its
// threads' partial sums added in a fixed order (deterministic, no atomics).
#include "cuda.h"
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 8 // groups per block

// the shapes of an op (the launchers' N, C, G, S, dh, A)
struct QkShape {
    int N, C, G, S, dh, A;
};

// ---- kernels -------------------------------------------------------------------------------------

__device__ static double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Element c of a row turned: the pair (c & ~1, c | 1) of (self, partner) turned by the angle of
// pair c mod dh in the row's angles a, by its opposite when sign is -1 (backward)
__device__ static real turn(real self, real partner, const real *a, int c, int dh, real sign) {
    int j = c % dh & ~1;
    real cs = a[j], sn = sign * a[j + 1];
    return c & 1 ? self * cs + partner * sn : self * cs - partner * sn;
}

// one warp per group w of the (N, C/G) groups (without the norm, G = C); a group holds whole
// pairs (G even), so the turn reads only its own group. out, inp (N,C); rstd (N, C/G); scale (S)
static __global__ void qk_forward_kernel(real *out, real *rstd, const real *inp, const real *scale,
                                         const real *cs, QkShape sh, real eps) {
    int N = sh.N, C = sh.C, G = sh.G, S = sh.S, dh = sh.dh, A = sh.A;
    int lane = threadIdx.x % 32, groups = C / G;
    size_t w = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (w >= (size_t)N * groups) return; // whole warps leave together
    size_t n = w / groups, o = n * C + w % groups * G;
    int c0 = (int)(o % C); // the group's first column
    const real *x = inp + o, *s = scale ? scale + c0 % S : NULL, *a = cs ? cs + n % A * dh : NULL;
    real r = 1;
    if (s) {
        double ss = 0;
        for (int c = lane; c < G; c += 32) ss += (double)x[c] * x[c];
        r = (real)(1 / sqrt(warp_sum(ss) / G + eps));
        if (lane == 0) rstd[w] = r;
    }
    for (int c = lane; c < G; c += 32) {
        real z = s ? x[c] * r * s[c] : x[c];
        out[o + c] = a ? turn(z, s ? x[c ^ 1] * r * s[c ^ 1] : x[c ^ 1], a, c0 + c, dh, 1) : z;
    }
}

// dz = the turn's transpose applied to dy (dy without the turn)
#define DZ(dy, a, c, cc) ((a) ? turn((dy)[c], (dy)[(c) ^ 1], a, cc, dh, -1) : (dy)[c])

// dinp += r (dz s - xhat mean(dz s xhat)) over each group (dz without the norm)
static __global__ void qk_backward_dx_kernel(real *dinp, const real *dout, const real *inp,
                                             const real *scale, const real *rstd, const real *cs, QkShape sh) {
    int N = sh.N, C = sh.C, G = sh.G, S = sh.S, dh = sh.dh, A = sh.A;
    int lane = threadIdx.x % 32, groups = C / G;
    size_t w = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (w >= (size_t)N * groups) return;
    size_t n = w / groups, o = n * C + w % groups * G;
    int c0 = (int)(o % C);
    const real *x = inp + o, *dy = dout + o, *a = cs ? cs + n % A * dh : NULL;
    if (!scale) {
        for (int c = lane; c < G; c += 32) dinp[o + c] += DZ(dy, a, c, c0 + c);
        return;
    }
    const real *s = scale + c0 % S;
    real r = rstd[w];
    double m = 0;
    for (int c = lane; c < G; c += 32) m += (double)DZ(dy, a, c, c0 + c) * s[c] * x[c] * r;
    m = warp_sum(m) / G;
    for (int c = lane; c < G; c += 32) dinp[o + c] += r * (real)(DZ(dy, a, c, c0 + c) * s[c] - x[c] * r * m);
}

// dscale[j] += sum over rows and columns c = j mod S of dz xhat; block j, CUDA_BLOCK threads
static __global__ void qk_backward_dscale_kernel(real *dscale, const real *dout, const real *inp,
                                                 const real *rstd, const real *cs, QkShape sh) {
    int N = sh.N, C = sh.C, G = sh.G, S = sh.S, dh = sh.dh, A = sh.A;
    __shared__ double part[CUDA_BLOCK];
    int j = blockIdx.x, per_row = C / S, groups = C / G;
    double sum = 0;
    for (size_t k = threadIdx.x; k < (size_t)N * per_row; k += blockDim.x) {
        size_t n = k / per_row, c = k % per_row * S + j, i = n * C + c;
        const real *a = cs ? cs + n % A * dh : NULL;
        sum += (double)DZ(dout + n * C, a, c, (int)c) * inp[i] * rstd[n * groups + c / G];
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) dscale[j] += (real)part[0];
}
#undef DZ

// ---- launchers -----------------------------------------------------------------------------------

// the groups of one warp each: G, or the whole row without the norm
static int check_shape(const char *name, const real *scale, const real *cs, int N, int C, int G,
                       int S, int dh, int A) {
    CHECK(N >= 0 && C > 0 && (!scale || (G > 0 && S > 0 && C % G == 0 && S % G == 0 && C % S == 0)) &&
              (!cs || (dh > 0 && dh % 2 == 0 && C % dh == 0 && A > 0 && (!scale || G % 2 == 0))),
          "%s: bad shape N = %d, C = %d, groups of %d, scale of %d, heads of %d (even), %d rows of "
          "angles", name, N, C, G, S, dh, A);
    return scale ? G : C;
}

void qk_norm_rope_forward_cuda(real *out, real *rstd, const real *inp, const real *scale,
                               const real *cs, int N, int C, int G, int S, int dh, int A, real eps,
                               cudaStream_t stream) {
    G = check_shape("qk_norm_rope_forward_cuda", scale, cs, N, C, G, S, dh, A);
    size_t warps = (size_t)N * (C / G);
    if (!warps) return;
    qk_forward_kernel<<<(unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK),
                        32 * WARPS_PER_BLOCK, 0, stream>>>(out, rstd, inp, scale, cs, QkShape{N, C, G, S, dh, A}, eps);
    CUDA_CHECK(cudaGetLastError());
}

void qk_norm_rope_backward_cuda(real *dinp, real *dscale, const real *dout, const real *inp,
                                const real *scale, const real *rstd, const real *cs, int N, int C,
                                int G, int S, int dh, int A, cudaStream_t stream) {
    G = check_shape("qk_norm_rope_backward_cuda", scale, cs, N, C, G, S, dh, A);
    size_t warps = (size_t)N * (C / G);
    if (!warps) return;
    if (dinp) {
        qk_backward_dx_kernel<<<(unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK),
                                32 * WARPS_PER_BLOCK, 0, stream>>>(dinp, dout, inp, scale, rstd, cs,
                                                                   QkShape{N, C, G, S, dh, A});
        CUDA_CHECK(cudaGetLastError());
    }
    if (dscale && scale) {
        qk_backward_dscale_kernel<<<S, CUDA_BLOCK, 0, stream>>>(dscale, dout, inp, rstd, cs, QkShape{N, C, G, S, dh, A});
        CUDA_CHECK(cudaGetLastError());
    }
}
