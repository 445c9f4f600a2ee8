// linear.cu: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias on the device (linear.c) through
// cuBLAS: SGEMM in the float32 build (cuBLAS's default math; TF32 tensor cores only after device_set_tf32), DGEMM in the float64 one.
// cuBLAS is column-major: a row-major (R,K) matrix is its (K,R) transpose there, so each product
// is written for the transposes. The bias and its gradient go through the add kernels.
#include "cuda.h"
#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef REAL_F64
#define GEMM_CUDA cublasDgemm
#else
#define GEMM_CUDA cublasSgemm
#endif

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) fatal(__FILE__, __LINE__, "%s failed: status %d", #call, (int)s_); \
    } while (0)

static bool tf32; // float32 GEMMs on TF32 tensor cores (--tf32)

void device_set_tf32(bool on) { tf32 = on; }

static cublasHandle_t handle(cudaStream_t stream) {
    static cublasHandle_t h;
    if (!h) CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, stream));
    CUBLAS_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return h;
}

static void check_shape(const char *op, int N, int C, int OC) {
    CHECK(N > 0 && C > 0 && OC > 0, "%s: bad shape N %d, C %d, OC %d", op, N, C, OC);
}

void linear_forward_cuda(real *out, const real *inp, const real *weight, const real *bias, int N,
                         int C, int OC, cudaStream_t stream) {
    check_shape("linear_forward_cuda", N, C, OC);
    const real one = 1, zero = 0;
    // out^T (OC,N) = weight (OC,C) inp^T (C,N)
    CUBLAS_CHECK(GEMM_CUDA(handle(stream), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp,
                           C, &zero, out, OC));
    if (bias) add_forward_cuda(out, out, bias, (size_t)N * OC, (size_t)OC, stream);
}

void linear_backward_cuda(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                          const real *weight, int N, int C, int OC, cudaStream_t stream) {
    check_shape("linear_backward_cuda", N, C, OC);
    const real one = 1;
    if (dinp) // dinp^T (C,N) += weight^T (C,OC) dout^T (OC,N)
        CUBLAS_CHECK(GEMM_CUDA(handle(stream), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C,
                               dout, OC, &one, dinp, C));
    if (dweight) // dweight^T (C,OC) += inp^T (C,N) dout (N,OC)
        CUBLAS_CHECK(GEMM_CUDA(handle(stream), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C,
                               dout, OC, &one, dweight, C));
    if (dbias) add_backward_cuda(NULL, dbias, dout, (size_t)N * OC, (size_t)OC, stream);
}
