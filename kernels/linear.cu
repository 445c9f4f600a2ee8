// linear.cu: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias on the device (linear.c) through
// cuBLAS: SGEMM in the float32 build (cuBLAS's default math; TF32 tensor cores only after device_set_tf32), DGEMM in the float64 one.
// cuBLAS is column-major: a row-major (R,K) matrix is its (K,R) transpose there, so each product
// is written for the transposes. The bias and its gradient go through the add kernels.
#include "cuda.h"
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

// cuBLAS is opened at the first device GEMM, not linked: loading it costs every process about 0.1 s
// of CPU (its relocations and constructors), which each rank of each CPU-only run of this build would
// pay for nothing. The emulated device's header (tests/gpu/emulate) defines the calls themselves.
#ifdef CUBLAS_EMULATED
#define CUBLAS_SYMBOL(name) (&name)
#else
#define CUBLAS_NAME_(name) #name
#define CUBLAS_NAME(name) CUBLAS_NAME_(name) // after cublas_v2.h's renames (cublasCreate_v2, ...)
#define CUBLAS_FILE "libcublas.so." CUBLAS_NAME(CUBLAS_VER_MAJOR)
static void *cublas_symbol(const char *name) {
    static void *lib;
    if (!lib && !(lib = dlopen(CUBLAS_FILE, RTLD_NOW | RTLD_LOCAL)))
        fatal(__FILE__, __LINE__, "cannot load cuBLAS (%s): %s; install the CUDA toolkit's cuBLAS, or "
              "add its folder to LD_LIBRARY_PATH", CUBLAS_FILE, dlerror());
    void *f = dlsym(lib, name);
    if (!f) fatal(__FILE__, __LINE__, "%s has no %s: %s", CUBLAS_FILE, name, dlerror());
    return f;
}
#define CUBLAS_SYMBOL(name) ((decltype(&name))cublas_symbol(CUBLAS_NAME(name)))
#endif
static struct {
    bool open;
    decltype(&cublasCreate) create;
    decltype(&cublasSetStream) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm) gemm_s;
    decltype(&cublasDgemm) gemm_d;
} cublas;

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) fatal(__FILE__, __LINE__, "%s failed: status %d", #call, (int)s_); \
    } while (0)

static bool tf32; // float32 GEMMs on TF32 tensor cores (--tf32)

void device_set_tf32(bool on) { tf32 = on; }
bool device_tf32(void) { return tf32; }

static cublasHandle_t handle(cudaStream_t stream) {
    static cublasHandle_t h;
    if (!cublas.open)
        cublas = {true, CUBLAS_SYMBOL(cublasCreate), CUBLAS_SYMBOL(cublasSetStream),
                  CUBLAS_SYMBOL(cublasSetMathMode), CUBLAS_SYMBOL(cublasSgemm), CUBLAS_SYMBOL(cublasDgemm)};
    if (!h) CUBLAS_CHECK(cublas.create(&h));
    CUBLAS_CHECK(cublas.set_stream(h, stream));
    CUBLAS_CHECK(cublas.set_math_mode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return h;
}

// C = op(A) op(B) alpha + C beta in cuBLAS's terms; h from handle(), which opened cuBLAS
static void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const real *alpha, const real *A, int lda, const real *B, int ldb, const real *beta,
                 real *C, int ldc) {
#ifdef REAL_F64
    CUBLAS_CHECK(cublas.gemm_d(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
#else
    CUBLAS_CHECK(cublas.gemm_s(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
#endif
}

static void check_shape(const char *op, int N, int C, int OC) {
    CHECK(N > 0 && C > 0 && OC > 0, "%s: bad shape N %d, C %d, OC %d", op, N, C, OC);
}

void linear_forward_cuda(real *out, const real *inp, const real *weight, const real *bias, int N,
                         int C, int OC, cudaStream_t stream) {
    check_shape("linear_forward_cuda", N, C, OC);
    const real one = 1, zero = 0;
    // out^T (OC,N) = weight (OC,C) inp^T (C,N)
    gemm(handle(stream), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &zero, out, OC);
    if (bias) add_forward_cuda(out, out, bias, (size_t)N * OC, (size_t)OC, stream);
}

void linear_backward_cuda(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                          const real *weight, int N, int C, int OC, cudaStream_t stream) {
    check_shape("linear_backward_cuda", N, C, OC);
    const real one = 1;
    if (dinp) // dinp^T (C,N) += weight^T (C,OC) dout^T (OC,N)
        gemm(handle(stream), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &one, dinp, C);
    if (dweight) // dweight^T (C,OC) += inp^T (C,N) dout (N,OC)
        gemm(handle(stream), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dweight, C);
    if (dbias) add_backward_cuda(NULL, dbias, dout, (size_t)N * OC, (size_t)OC, stream);
}
