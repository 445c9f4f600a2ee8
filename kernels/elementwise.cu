// elementwise.cu: add with repetition, strided row adds, GELU (tanh approximation), SiLU on the
// device; the same math as elementwise.c. Elementwise kernels are grid-stride loops over n;
// backward adds (+=).
#include "cuda.h"
#include <cuda_runtime.h>

#define GELU_K 0.7978845608028654 // sqrt(2/pi)
#define GELU_C 0.044715
#define DB_ROWS 8       // add_backward_db: threadIdx.y rows per block of 32 columns

// ---- kernels -------------------------------------------------------------------------------------

// out, a are (n); b is (nb), repeating
static __global__ void add_forward_kernel(real *out, const real *a, const real *b, size_t n,
                                          size_t nb) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i % nb];
}

// dst += src over rows of width values, dpitch and spitch apart
static __global__ void add_rows_kernel(real *dst, size_t dpitch, const real *src, size_t spitch,
                                       size_t width, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / width, j = i - r * width;
        dst[r * dpitch + j] += src[r * spitch + j];
    }
}

// db (nb) += sum over repetitions r of dout[r * nb + j]. A block (32, DB_ROWS) owns 32 adjacent
// columns (coalesced rows); threadIdx.y strides over the repetitions and the block adds its
// partial sums in a fixed order: deterministic, no atomics.
static __global__ void add_backward_db_kernel(real *db, const real *dout, size_t n, size_t nb) {
    __shared__ real part[DB_ROWS][32];
    size_t j = (size_t)blockIdx.x * 32 + threadIdx.x;
    real s = 0;
    if (j < nb)
        for (size_t i = j + threadIdx.y * nb; i < n; i += DB_ROWS * nb) s += dout[i];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < nb) {
        for (int y = 1; y < DB_ROWS; y++) s += part[y][threadIdx.x];
        db[j] += s;
    }
}

// out, inp are (n)
static __global__ void gelu_forward_kernel(real *out, const real *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        real x = inp[i];
        out[i] = (real)0.5 * x * (1 + tanh((real)GELU_K * (x + (real)GELU_C * x * x * x)));
    }
}

// dinp, dout, inp are (n)
static __global__ void gelu_backward_kernel(real *dinp, const real *dout, const real *inp,
                                            size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        real x = inp[i];
        real th = tanh((real)GELU_K * (x + (real)GELU_C * x * x * x));
        real dth = (1 - th * th) * (real)GELU_K * (1 + 3 * (real)GELU_C * x * x);
        dinp[i] += dout[i] * ((real)0.5 * (1 + th) + (real)0.5 * x * dth);
    }
}

static __global__ void silu_forward_kernel(real *out, const real *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = inp[i] / (1 + exp(-inp[i]));
}

static __global__ void silu_backward_kernel(real *dinp, const real *dout, const real *inp,
                                            size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        real s = 1 / (1 + exp(-inp[i]));
        dinp[i] += dout[i] * s * (1 + inp[i] * (1 - s));
    }
}

// ---- launchers -----------------------------------------------------------------------------------

void add_forward_cuda(real *out, const real *a, const real *b, size_t n, size_t nb,
                      cudaStream_t stream) {
    CHECK(nb > 0 || n == 0, "add_forward_cuda: b is empty (nb = 0) but n = %zu", n);
    if (n == 0) return;
    add_forward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, a, b, n, nb);
    CUDA_CHECK(cudaGetLastError());
}

void add_backward_cuda(real *da, real *db, const real *dout, size_t n, size_t nb,
                       cudaStream_t stream) {
    CHECK(nb > 0 || n == 0, "add_backward_cuda: b is empty (nb = 0) but n = %zu", n);
    if (n == 0) return;
    if (da) add_rows_cuda(da, n, dout, n, n, 1, stream);
    if (db) {
        size_t blocks = (nb + 31) / 32;
        CHECK(blocks <= 0x7fffffff, "add_backward_cuda: nb = %zu is too large for one grid", nb);
        add_backward_db_kernel<<<(unsigned)blocks, dim3(32, DB_ROWS), 0, stream>>>(db, dout, n, nb);
        CUDA_CHECK(cudaGetLastError());
    }
}

void add_rows_cuda(real *dst, size_t dpitch, const real *src, size_t spitch, size_t width,
                   size_t rows, cudaStream_t stream) {
    if (width == 0 || rows == 0) return;
    add_rows_kernel<<<cuda_grid(width * rows), CUDA_BLOCK, 0, stream>>>(dst, dpitch, src, spitch,
                                                                       width, width * rows);
    CUDA_CHECK(cudaGetLastError());
}

// x (k, chw) += dt v, v from pred's first chw values per image, guided by images k..2k-1
static __global__ void euler_kernel(real *x, const real *pred, size_t chw, size_t pred_chw,
                                    int k, bool guided, real scale, double dt) {
    for (size_t n = (size_t)k * chw, a = blockIdx.x * (size_t)blockDim.x + threadIdx.x; a < n;
         a += (size_t)gridDim.x * blockDim.x) {
        size_t i = a / chw, j = a - i * chw;
        real c = pred[i * pred_chw + j], u = guided ? pred[(k + i) * pred_chw + j] : c;
        real v = u + scale * (c - u);
        x[a] += (real)(dt * v);
    }
}

void euler_step_cuda(real *x, const real *pred, int k, size_t chw, size_t pred_chw, bool guided,
                     real scale, double dt, cudaStream_t stream) {
    if (k <= 0 || chw == 0) return;
    euler_kernel<<<cuda_grid((size_t)k * chw), CUDA_BLOCK, 0, stream>>>(x, pred, chw, pred_chw, k,
                                                                        guided, scale, dt);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void round_bf16_kernel(real *out, const real *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = real_to_bf16(x[i]);
}

void round_bf16_cuda(real *out, const real *x, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    round_bf16_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, x, n);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void pack_bf16_kernel(uint16_t *out, const real *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = real_to_bf16_bits(x[i]);
}

void pack_bf16_cuda(uint16_t *out, const real *x, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    pack_bf16_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, x, n);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void unpack_bf16_kernel(real *out, const uint16_t *bits, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = real_from_bf16_bits(bits[i]);
}

void unpack_bf16_cuda(real *out, const uint16_t *bits, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    unpack_bf16_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, bits, n);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_forward_cuda(real *out, const real *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_forward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_backward_cuda(real *dinp, const real *dout, const real *inp, size_t n,
                        cudaStream_t stream) {
    if (n == 0 || !dinp) return;
    gelu_backward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(dinp, dout, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void silu_forward_cuda(real *out, const real *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    silu_forward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void silu_backward_cuda(real *dinp, const real *dout, const real *inp, size_t n,
                        cudaStream_t stream) {
    if (n == 0 || !dinp) return;
    silu_backward_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(dinp, dout, inp, n);
    CUDA_CHECK(cudaGetLastError());
}
