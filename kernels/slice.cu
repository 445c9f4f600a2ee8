// slice.cu: a column range of the last dim on the device (slice.c): out (N,len) =
// inp (N,C)[:, off:off+len]; backward adds into that range. Grid-stride loops over N * len.
#include "cuda.h"
#include <cuda_runtime.h>

static __global__ void slice_kernel(real *dst, const real *src, size_t n, int len, int C, int off,
                                    bool backward) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t wide = i / len * C + off + i % len;
        if (backward) dst[wide] += src[i];
        else dst[i] = src[wide];
    }
}

static void launch(real *dst, const real *src, int N, int C, int off, int len, bool backward,
                   cudaStream_t stream) {
    CHECK(N > 0 && len > 0 && off >= 0 && off + len <= C, "slice_cuda: columns [%d, %d) of %d, "
          "%d rows", off, off + len, C, N);
    size_t n = (size_t)N * len;
    slice_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(
        dst, src, n, len, C, off, backward);
    CUDA_CHECK(cudaGetLastError());
}

void slice_forward_cuda(real *out, const real *inp, int N, int C, int off, int len,
                        cudaStream_t stream) {
    launch(out, inp, N, C, off, len, false, stream);
}

void slice_backward_cuda(real *dinp, const real *dout, int N, int C, int off, int len,
                         cudaStream_t stream) {
    launch(dinp, dout, N, C, off, len, true, stream);
}
