// patch.cu: images <-> patch tokens on the device (patch.c): one thread per element of the
// shard's real token rows; the token element and its pixel are a one-to-one pair, so both
// directions add without races. Rows past the last patch (padding) are left alone.
#include "cuda.h"
#include <cuda_runtime.h>

// tokens (B, n, C*p*p) += patches of img (B, C, H, W), or img += tokens (to_image)
static __global__ void patch_kernel(real *tokens, real *img, int B, int C, int H, int W, int p,
                                    int t0, int n, bool channels_last, bool to_image) {
    int gw = W / p, T = (H / p) * gw, row = C * p * p;
    for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < (size_t)B * n * row;
         x += (size_t)gridDim.x * blockDim.x) {
        int e = (int)(x % row), r = (int)(x / row % n), b = (int)(x / ((size_t)row * n));
        if (t0 + r >= T) continue;
        int c = channels_last ? e % C : e / (p * p), ij = channels_last ? e / C : e % (p * p);
        int th = (t0 + r) / gw, tw = (t0 + r) % gw, i = ij / p, j = ij % p;
        size_t ie = (((size_t)b * C + c) * H + th * p + i) * W + tw * p + j;
        if (to_image) img[ie] += tokens[x];
        else tokens[x] += img[ie];
    }
}

static void launch(real *tokens, real *img, int B, int C, int H, int W, int p, int t0, int n,
                   bool channels_last, bool to_image, cudaStream_t stream) {
    CHECK(B > 0 && C > 0 && p > 0 && H % p == 0 && W % p == 0 && H > 0 && W > 0 && t0 >= 0 && n > 0,
          "patch_cuda: bad shape B %d, C %d, H %d, W %d, p %d, tokens [%d, %d)", B, C, H, W, p, t0,
          t0 + n);
    patch_kernel<<<cuda_grid((size_t)B * n * C * p * p), CUDA_BLOCK, 0, stream>>>(
        tokens, img, B, C, H, W, p, t0, n, channels_last, to_image);
    CUDA_CHECK(cudaGetLastError());
}

void patch_gather_cuda(real *tokens, const real *img, int B, int C, int H, int W, int p, int t0,
                       int n, bool channels_last, cudaStream_t stream) {
    launch(tokens, (real *)img, B, C, H, W, p, t0, n, channels_last, false, stream);
}

void patch_scatter_cuda(real *img, const real *tokens, int B, int C, int H, int W, int p, int t0,
                        int n, bool channels_last, cudaStream_t stream) {
    launch((real *)tokens, img, B, C, H, W, p, t0, n, channels_last, true, stream);
}
