// slice.cu: a column range of the last dim on the device (slice.c): out (N,len) =
// inp (N,C)[:, off:off+len], a grid-stride loop over N * len; backward adds into that range
// (add_rows).
#include "cuda.h"
#include <cuda_runtime.h>

static __global__ void slice_kernel(real *out, const real *inp, size_t n, int len, int C, int off) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = inp[i / len * C + off + i % len];
}

static void check_shape(int N, int C, int off, int len) {
    CHECK(N > 0 && len > 0 && off >= 0 && off + len <= C, "slice_cuda: columns [%d, %d) of %d, "
          "%d rows", off, off + len, C, N);
}

void slice_forward_cuda(real *out, const real *inp, int N, int C, int off, int len,
                        cudaStream_t stream) {
    check_shape(N, C, off, len);
    size_t n = (size_t)N * len;
    slice_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(out, inp, n, len, C, off);
    CUDA_CHECK(cudaGetLastError());
}

void slice_backward_cuda(real *dinp, const real *dout, int N, int C, int off, int len,
                         cudaStream_t stream) {
    check_shape(N, C, off, len);
    add_rows_cuda(dinp + off, (size_t)C, dout, (size_t)len, (size_t)len, (size_t)N, stream);
}
