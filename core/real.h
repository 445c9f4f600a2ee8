// real.h: the floating-point type of every tensor. float32 by default; `-DREAL_F64` builds the
// same sources in float64 (used by the gradient checks). BLAS calls go through the GEMM macro,
// hot elementwise math through rexp and rtanh.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>
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
// exp for the float32 build, written so that loops over it vectorize (libm's expf is a call):
// x = n ln2 + r with n = round(x / ln2) found by adding 1.5*2^23, e^r from a degree-6 polynomial
// (the Cephes coefficients), and 2^(n-1) built in the exponent bits. Within 1 ulp of exp for
// x in [-86.5, 88.7]; below -86.5 it gives 0 (the true value is under 3e-38), above the float
// range +inf, and NaN stays NaN (tests/test_core.c checks all of this against libm).
static inline float rexp(float x) {
    const float round = 12582912.0f;  // 1.5 * 2^23, bits 0x4B400000
    float t = x * 1.44269504088896341f + round, n = t - round;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000u + 126u) << 23;  // 2^(n-1), a normal float for n in [-125, 128]
    float half_scale;
    memcpy(&half_scale, &bits, sizeof half_scale);
    float y = p * half_scale * 2.0f;
    return x < -86.5f ? 0.0f : x > 88.8f ? INFINITY : y;
}
// tanh from exp, accurate to ~1e-7 absolute; glibc's tanhf (through expm1f) costs 2x more
static inline float rtanh(float u) { return 1.0f - 2.0f / (rexp(2.0f * u) + 1.0f); }
#endif

// --precision bf16: x rounded to the nearest bf16 value (8 significant bits, float's exponent
// range), ties to the even one; infinities and NaN stay. A float keeps its top 16 bits after the
// carry; a double (the float64 build, whose values need not be floats) is rounded at its 8th
// significant bit directly, so that it is rounded once.
#ifdef __CUDACC__
__host__ __device__
#endif
static inline real real_to_bf16(real x) {
#ifdef REAL_F64
    if (!isfinite(x) || x == 0) return x;
    int e;
    double m = frexp(x, &e); // x = m 2^e, 0.5 <= |m| < 1
    return ldexp(rint(ldexp(m, 8)), e - 8);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

// The bf16 bit pattern of x rounded to bf16, and the value of a bf16 bit pattern
#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint16_t real_to_bf16_bits(real x) {
    float f = (float)real_to_bf16(x); // a bf16 value: a float exactly
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline real real_from_bf16_bits(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return (real)f;
}
