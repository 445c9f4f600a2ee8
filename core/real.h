// real.h: the floating-point type of every tensor. float32 by default; `-DREAL_F64` builds the
// same sources in float64 (used by the gradient checks). BLAS calls go through the GEMM macro,
// hot elementwise math through rexp and rtanh.
#pragma once
#include <math.h>
#ifdef REAL_F64
typedef double real;
#define REAL_NAME "float64"
#define GEMM cblas_dgemm
#define rexp exp
#define rtanh tanh
#else
typedef float real;
#define REAL_NAME "float32"
#define GEMM cblas_sgemm
// single-precision math in the float32 build: the double versions cost 3x, and glibc's tanhf
// (through expm1f) 2x more than tanh from expf, which is accurate to ~1e-7 absolute
#define rexp expf
static inline float rtanh(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }
#endif
