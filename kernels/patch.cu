// patch.cu: clips <-> patch tokens on the device (patch.c): one thread per element of the
// shard's real token rows; the token element and its pixel are a one-to-one pair, so both
// directions add without races. Rows past the last patch (padding) are left alone.
#include "cuda.h"
#include <cuda_runtime.h>

// tokens (B, n, C*pt*p*p) += patches of img (B, C, F, H, W), or img += tokens (to_image)
static __global__ void patch_kernel(real *tokens, real *img, ClipShape s, int t0, int n,
                                    bool channels_last, bool to_image) {
    int C = s.C, pt = s.pt, p = s.p, gw = s.W / p, plane = (s.H / p) * gw;
    int T = (s.F / pt) * plane, row = C * pt * p * p, patch = pt * p * p;
    for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < (size_t)s.B * n * row;
         x += (size_t)gridDim.x * blockDim.x) {
        int e = (int)(x % row), r = (int)(x / row % n), b = (int)(x / ((size_t)row * n));
        if (t0 + r >= T) continue;
        int c = channels_last ? e % C : e / patch, aij = channels_last ? e / C : e % patch;
        int t = t0 + r, tf = t / plane, th = t % plane / gw, tw = t % gw;
        int a = aij / (p * p), i = aij / p % p, j = aij % p;
        size_t ie = ((((size_t)b * C + c) * s.F + tf * pt + a) * s.H + th * p + i) * s.W + tw * p + j;
        if (to_image) img[ie] += tokens[x];
        else tokens[x] += img[ie];
    }
}

static void launch(real *tokens, real *img, ClipShape s, int t0, int n, bool channels_last,
                   bool to_image, cudaStream_t stream) {
    CHECK(s.B > 0 && s.C > 0 && s.p > 0 && s.pt > 0 && s.F > 0 && s.H > 0 && s.W > 0 &&
              s.F % s.pt == 0 && s.H % s.p == 0 && s.W % s.p == 0 && t0 >= 0 && n > 0,
          "patch_cuda: bad shape B %d, C %d, F %d, H %d, W %d, patch %dx%dx%d, tokens [%d, %d)",
          s.B, s.C, s.F, s.H, s.W, s.pt, s.p, s.p, t0, t0 + n);
    patch_kernel<<<cuda_grid((size_t)s.B * n * s.C * s.pt * s.p * s.p), CUDA_BLOCK, 0, stream>>>(
        tokens, img, s, t0, n, channels_last, to_image);
    CUDA_CHECK(cudaGetLastError());
}

void patch_gather_cuda(real *tokens, const real *img, ClipShape s, int t0, int n,
                       bool channels_last, cudaStream_t stream) {
    launch(tokens, (real *)img, s, t0, n, channels_last, false, stream);
}

void patch_scatter_cuda(real *img, const real *tokens, ClipShape s, int t0, int n,
                        bool channels_last, cudaStream_t stream) {
    launch((real *)tokens, img, s, t0, n, channels_last, true, stream);
}
