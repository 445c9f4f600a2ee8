// cublas_v2.h for the emulated device (see cuda_runtime.h here): the GEMMs linear.cu calls, done
// by CBLAS in cuBLAS's column-major convention; the stream is ignored (launches run in order).
#pragma once
#define CUBLAS_EMULATED 1 // linear.cu calls these, instead of opening libcublas
#include "cuda_runtime_api.h"
#include <cblas.h>

typedef void *cublasHandle_t;
typedef int cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH } cublasMath_t;
#define CUBLAS_STATUS_SUCCESS 0

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) { return *h = (void *)1, 0; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return 0; }
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
static inline CBLAS_TRANSPOSE blas_op(cublasOperation_t op) { return op == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; }
static inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float *alpha, const float *A,
                                         int lda, const float *B, int ldb, const float *beta,
                                         float *C, int ldc) {
    emulated_device_open();
    cblas_sgemm(CblasColMajor, blas_op(ta), blas_op(tb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    emulated_device_close();
    return 0;
}
static inline cublasStatus_t cublasDgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const double *alpha, const double *A,
                                         int lda, const double *B, int ldb, const double *beta,
                                         double *C, int ldc) {
    emulated_device_open();
    cblas_dgemm(CblasColMajor, blas_op(ta), blas_op(tb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    emulated_device_close();
    return 0;
}
