// real.h: the floating-point type of every tensor. float32 by default; `-DREAL_F64` builds the
// same sources in float64 (used by the gradient checks). BLAS calls go through the GEMM macro.
#pragma once
#ifdef REAL_F64
typedef double real;
#define REAL_NAME "float64"
#define REAL_EPS 2.220446049250313e-16
#define GEMM cblas_dgemm
#define GEMV cblas_dgemv
#else
typedef float real;
#define REAL_NAME "float32"
#define REAL_EPS 1.1920929e-07f
#define GEMM cblas_sgemm
#define GEMV cblas_sgemv
#endif
