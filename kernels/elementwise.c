// elementwise.c: add with repetition, GELU (tanh approximation), SiLU. The loops of GELU, SiLU and
// add_rows run at the CPU's vector width (SIMD_CLONES), SPAN elements or rows at a time per thread.
#include "../core/cpu.h"
#include "kernels.h"
#include <math.h>

void add_forward(real *out, const real *a, const real *b, size_t n, size_t nb) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i % nb];
}

void add_backward(real *da, real *db, const real *dout, size_t n, size_t nb) {
    if (da)
#pragma omp parallel for if (n > PAR_MIN)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    if (db) // each element of b sums its repeats in order
#pragma omp parallel for if (n > PAR_MIN)
        for (size_t j = 0; j < nb; j++)
            for (size_t i = j; i < n; i += nb) db[j] += dout[i];
}

SIMD_BODY void add_rows_span(real *dst, size_t dpitch, const real *src, size_t spitch, size_t width,
                             size_t rows) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < width; j++) dst[i * dpitch + j] += src[i * spitch + j];
}
SIMD_CLONES(add_rows_span, (real *dst, size_t dpitch, const real *src, size_t spitch, size_t width,
                            size_t rows), (dst, dpitch, src, spitch, width, rows))

void add_rows(real *dst, size_t dpitch, const real *src, size_t spitch, size_t width, size_t rows) {
    size_t per = width < SPAN ? SPAN / width : 1; // rows in a span
#pragma omp parallel for if (rows * width > PAR_MIN)
    for (size_t i = 0; i < rows; i += per)
        add_rows_span_simd(dst + i * dpitch, dpitch, src + i * spitch, spitch, width,
                           span_len(i, rows, per));
}

void euler_step(real *x, const real *pred, int k, size_t chw, size_t pred_chw, bool guided,
                real scale, double dt) {
#pragma omp parallel for collapse(2) if ((size_t)k * chw > PAR_MIN)
    for (int i = 0; i < k; i++)
        for (size_t j = 0; j < chw; j++) {
            real c = pred[i * pred_chw + j], u = guided ? pred[(k + i) * pred_chw + j] : c;
            real v = u + scale * (c - u);
            x[i * chw + j] += (real)(dt * v);
        }
}

void round_bf16(real *out, const real *x, size_t n) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = real_to_bf16(x[i]);
}

void pack_bf16(uint16_t *out, const real *x, size_t n) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = real_to_bf16_bits(x[i]);
}

void unpack_bf16(real *out, const uint16_t *bits, size_t n) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = real_from_bf16_bits(bits[i]);
}

#define GELU_K 0.7978845608028654 // sqrt(2/pi)
#define GELU_C 0.044715

SIMD_BODY void gelu_forward_span(real *out, const real *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        real x = inp[i];
        out[i] = (real)0.5 * x * (1 + rtanh((real)GELU_K * (x + (real)GELU_C * x * x * x)));
    }
}
SIMD_CLONES(gelu_forward_span, (real *out, const real *inp, size_t n), (out, inp, n))

void gelu_forward(real *out, const real *inp, size_t n) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN) gelu_forward_span_simd(out + i, inp + i, span_len(i, n, SPAN));
}

SIMD_BODY void gelu_backward_span(real *dinp, const real *dout, const real *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        real x = inp[i];
        real th = rtanh((real)GELU_K * (x + (real)GELU_C * x * x * x));
        real dth = (1 - th * th) * (real)GELU_K * (1 + 3 * (real)GELU_C * x * x);
        dinp[i] += dout[i] * ((real)0.5 * (1 + th) + (real)0.5 * x * dth);
    }
}
SIMD_CLONES(gelu_backward_span, (real *dinp, const real *dout, const real *inp, size_t n),
            (dinp, dout, inp, n))

void gelu_backward(real *dinp, const real *dout, const real *inp, size_t n) {
    if (!dinp) return;
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN)
        gelu_backward_span_simd(dinp + i, dout + i, inp + i, span_len(i, n, SPAN));
}

SIMD_BODY void silu_forward_span(real *out, const real *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = inp[i] / (1 + rexp(-inp[i]));
}
SIMD_CLONES(silu_forward_span, (real *out, const real *inp, size_t n), (out, inp, n))

void silu_forward(real *out, const real *inp, size_t n) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN) silu_forward_span_simd(out + i, inp + i, span_len(i, n, SPAN));
}

SIMD_BODY void silu_backward_span(real *dinp, const real *dout, const real *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        real s = 1 / (1 + rexp(-inp[i]));
        dinp[i] += dout[i] * s * (1 + inp[i] * (1 - s));
    }
}
SIMD_CLONES(silu_backward_span, (real *dinp, const real *dout, const real *inp, size_t n),
            (dinp, dout, inp, n))

void silu_backward(real *dinp, const real *dout, const real *inp, size_t n) {
    if (!dinp) return;
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN)
        silu_backward_span_simd(dinp + i, dout + i, inp + i, span_len(i, n, SPAN));
}
