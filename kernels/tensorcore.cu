// tensorcore.cu: each instruction of tensorcore.cuh (and the warp shuffles) run by one warp on
// known inputs, for tests/test_cuda.c to hold against an f64 product or the PTX ISA's layout: on
// the emulated device these check the emulation, on a GPU the hardware (tests/gpu/device_check.sh),
// so that a slip in a fragment's layout shows before a kernel builds on it. Every kernel is one
// warp of 32 threads; matrices are row-major in global memory.
#include "cuda.h"
#include "tensorcore.cuh"
#include <cuda_runtime.h>

// ---- kernels -------------------------------------------------------------------------------------

// d (16x8) = a (16x8) b (8x8, k x n) + c, the inputs rounded to TF32 first
static __global__ void mma_tf32_kernel(float *d, const float *a, const float *b, const float *c) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t A[4], B[2];
    float C[4], D[4];
    for (int i = 0; i < 4; i++) A[i] = float_bits(tf32_round(a[(g + 8 * (i & 1)) * 8 + t + 4 * (i >> 1)]));
    for (int i = 0; i < 2; i++) B[i] = float_bits(tf32_round(b[(t + 4 * i) * 8 + g]));
    for (int i = 0; i < 4; i++) C[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    mma_tf32_m16n8k8(D, A, B, C);
    for (int i = 0; i < 4; i++) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = D[i];
}

// d (16x8) = a (16x16) b (16x8, k x n) + c, the inputs rounded to bf16 first
static __global__ void mma_bf16_kernel(float *d, const float *a, const float *b, const float *c) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t A[4], B[2];
    float C[4], D[4];
    for (int i = 0; i < 4; i++) { // elements 2 i (low half) and 2 i + 1
        bf16 h[2];
        for (int e = 2 * i; e < 2 * i + 2; e++)
            h[e % 2] = bf16_from_float(a[(g + 8 * ((e >> 1) & 1)) * 16 + 2 * t + (e & 1) + 8 * (e >> 2)]);
        A[i] = bf16_pair(h[0], h[1]);
    }
    for (int i = 0; i < 2; i++) {
        bf16 h[2];
        for (int e = 2 * i; e < 2 * i + 2; e++) h[e % 2] = bf16_from_float(b[(2 * t + (e & 1) + 8 * (e >> 1)) * 8 + g]);
        B[i] = bf16_pair(h[0], h[1]);
    }
    for (int i = 0; i < 4; i++) C[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    mma_bf16_m16n8k16(D, A, B, C);
    for (int i = 0; i < 4; i++) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = D[i];
}

// out[lane * 4 + j] = register j of ldmatrix .xN (.trans) of the 4 matrices m (8x8 b16 each),
// staged in shared memory; lane 8 j + i gives row i of matrix j
template <int N, bool TRANS> static __device__ void ldmatrix_rows(uint32_t *out, const uint16_t *shared, int lane) {
    uint32_t r[N];
    ldmatrix<N, TRANS>(r, shared + 64 * (lane / 8) + 8 * (lane % 8));
    for (int j = 0; j < N; j++) out[lane * 4 + j] = r[j];
}
static __global__ void ldmatrix_kernel(uint32_t *out, const uint16_t *m, int n, int trans) {
    __shared__ __align__(16) uint16_t tile[4 * 64];
    int lane = threadIdx.x;
    for (int i = lane; i < 4 * 64; i += 32) tile[i] = m[i];
    __syncwarp();
    if (n == 1) trans ? ldmatrix_rows<1, true>(out, tile, lane) : ldmatrix_rows<1, false>(out, tile, lane);
    if (n == 2) trans ? ldmatrix_rows<2, true>(out, tile, lane) : ldmatrix_rows<2, false>(out, tile, lane);
    if (n == 4) trans ? ldmatrix_rows<4, true>(out, tile, lane) : ldmatrix_rows<4, false>(out, tile, lane);
}

// in (256 floats) through shared memory by cp.async, in two groups of 16 bytes a lane each: the
// first read once one group may be in flight, the second after both
static __global__ void cp_async_kernel(float *out, const float *in) {
    __shared__ __align__(16) float tile[256];
    int lane = threadIdx.x;
    cp_async_16(tile + 4 * lane, in + 4 * lane);
    cp_async_commit();
    cp_async_16(tile + 128 + 4 * lane, in + 128 + 4 * lane);
    cp_async_commit();
    cp_async_wait<1>();
    for (int i = 0; i < 4; i++) out[4 * lane + i] = tile[4 * lane + i]; // this lane's own copy
    cp_async_wait<0>();
    for (int i = 0; i < 4; i++) out[128 + 4 * lane + i] = tile[128 + 4 * lane + i];
}

// out[lane * 4 + k]: shuffles of v = 3 lane + 1: from lane 7 lane mod 32, 3 lanes down, xor 5,
// and from lane 2 of its group of 8
static __global__ void shuffle_kernel(int *out) {
    int lane = threadIdx.x, v = 3 * lane + 1;
    out[lane * 4 + 0] = __shfl_sync(0xffffffffu, v, (7 * lane) % 32);
    out[lane * 4 + 1] = __shfl_down_sync(0xffffffffu, v, 3);
    out[lane * 4 + 2] = __shfl_xor_sync(0xffffffffu, v, 5);
    __syncwarp();
    out[lane * 4 + 3] = __shfl_sync(0xffffffffu, v, 2, 8);
}

// tf32[i] = cvt.rna.tf32 of x[i]; bf[i] = x[i] to bf16 (nearest even) and back, NaN where the
// pair (x[i], x[i + 1]) for even i, rounded at once (bf16x2_from_floats), disagrees
static __global__ void convert_kernel(float *tf32, float *bf, const float *x, int n) {
    for (int i = threadIdx.x; i < n; i += 32) tf32[i] = tf32_round(x[i]), bf[i] = bf16_to_float(bf16_from_float(x[i]));
    __syncwarp();
    for (int i = 2 * threadIdx.x; i + 1 < n; i += 64) { // the same by pairs (cvt.rn.bf16x2.f32): must agree
        uint32_t r = bf16x2_from_floats(x[i], x[i + 1]);
        if (bf16_to_float(bf16{(uint16_t)(r & 0xffffu)}) != bf[i] || bf16_to_float(bf16{(uint16_t)(r >> 16)}) != bf[i + 1])
            bf[i] = bf[i + 1] = NAN;
    }
}

// ---- launchers -----------------------------------------------------------------------------------
void tensorcore_mma_tf32_cuda(float *d, const float *a, const float *b, const float *c, cudaStream_t stream) {
    mma_tf32_kernel<<<1, 32, 0, stream>>>(d, a, b, c);
    CUDA_CHECK(cudaGetLastError());
}

void tensorcore_mma_bf16_cuda(float *d, const float *a, const float *b, const float *c, cudaStream_t stream) {
    mma_bf16_kernel<<<1, 32, 0, stream>>>(d, a, b, c);
    CUDA_CHECK(cudaGetLastError());
}

void tensorcore_ldmatrix_cuda(uint32_t *out, const uint16_t *m, int n, bool trans, cudaStream_t stream) {
    CHECK(n == 1 || n == 2 || n == 4, "ldmatrix loads 1, 2 or 4 matrices, not %d", n);
    ldmatrix_kernel<<<1, 32, 0, stream>>>(out, m, n, trans);
    CUDA_CHECK(cudaGetLastError());
}

void tensorcore_cp_async_cuda(float *out, const float *in, cudaStream_t stream) {
    cp_async_kernel<<<1, 32, 0, stream>>>(out, in);
    CUDA_CHECK(cudaGetLastError());
}

void tensorcore_shuffle_cuda(int *out, cudaStream_t stream) {
    shuffle_kernel<<<1, 32, 0, stream>>>(out);
    CUDA_CHECK(cudaGetLastError());
}

void tensorcore_convert_cuda(float *tf32, float *bf, const float *x, int n, cudaStream_t stream) {
    convert_kernel<<<1, 32, 0, stream>>>(tf32, bf, x, n);
    CUDA_CHECK(cudaGetLastError());
}
