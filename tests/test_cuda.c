// test_cuda.c: device kernels against the CPU kernels, by normalized error; the sampler on the
// device against the sampler on the host; the step's formulas (formulas.h) on the device. When the
// build has no CUDA or the machine has no GPU, these are not run: the suite says
// "skipped: N tests ... (why)", which make test's summary counts, and runs only what needs no
// device.
#include <check.h>
#include <stdio.h>

#ifndef USE_CUDA
Suite *cuda_suite(void) {
    printf("skipped: the CUDA kernels against the CPU (built without CUDA: no nvcc, or USE_CUDA=0)\n");
    return suite_create("cuda");
}
#else
#include "../kernels/cuda.h"
#include "../kernels/kernels.h"
#include "../parallel/mesh/sp.h"
#include "../train/sample.h"
#include "formulas.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

// Normalized error max|gpu - cpu| / max|cpu| over a buffer. Both sides do the same math in the
// same precision; they differ by rounding (FMA contraction, device tanh/exp, summation order), so
// the bound is a small multiple of the unit roundoff: 2^-24 = 6e-8 in float32, 1.1e-16 in float64.
#ifdef REAL_F64
#define TOL 1e-12
#else
#define TOL 1e-5
#endif

// ---- helpers -------------------------------------------------------------------------------------

// N(0, std) + shift, from (seed 7, stream)
static real *host_randn(size_t n, uint64_t stream, double std, double shift) {
    real *x = xmalloc(n * sizeof(real));
    rng_fill_normal(x, n, 7, stream, 0, std);
    for (size_t i = 0; i < n; i++) x[i] += (real)shift;
    return x;
}

static real *to_device(const real *h, size_t n) {
    real *d = device_alloc(n * sizeof(real));
    copy_bytes(d, h, n * sizeof(real));
    return d;
}

// infinite when gpu holds a NaN or an infinity
static double normalized_error(const real *gpu, const real *cpu, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) return INFINITY;
        num = fmax(num, fabs((double)gpu[i] - cpu[i]));
        den = fmax(den, fabs((double)cpu[i]));
    }
    return den > 0 ? num / den : num;
}

// Copies the device buffer back, prints one line with its error against cpu, and asserts on it.
static double expect_within(const char *what, const real *dev, const real *cpu, size_t n, double tol) {
    device_sync();
    real *h = xmalloc(n * sizeof(real));
    copy_bytes(h, dev, n * sizeof(real));
    double err = normalized_error(h, cpu, n);
    free(h);
    printf("cuda %-24s n=%-8zu normalized error %.2e (tolerance %.0e, %s)\n", what, n, err, tol,
           REAL_NAME);
    fflush(stdout);
    ck_assert_msg(err <= tol, "%s: normalized error %.3e above %.0e (n = %zu)", what, err, tol, n);
    return err;
}
static void expect_close(const char *what, const real *dev, const real *cpu, size_t n) {
    expect_within(what, dev, cpu, n, TOL);
}

// ---- elementwise ---------------------------------------------------------------------------------

START_TEST(cuda_add) {
    // b the same size as a, b repeating with a ragged tail, b a scalar; da NULL in the last case
    const size_t sizes[][2] = {{1, 1}, {1000003, 1000003}, {1000003, 769}, {1000, 1}};
    for (int t = 0; t < 4; t++) {
        size_t n = sizes[t][0], nb = sizes[t][1];
        bool want_da = t != 3;
        real *a = host_randn(n, 1, 1, 0), *b = host_randn(nb, 2, 1, 0);
        real *out = xmalloc(n * sizeof(real)), *dout = host_randn(n, 3, 1, 0);
        real *da = host_randn(n, 4, 1, 0), *db = host_randn(nb, 5, 1, 0);
        real *a_d = to_device(a, n), *b_d = to_device(b, nb), *out_d = device_alloc(n * sizeof(real));
        real *dout_d = to_device(dout, n), *da_d = to_device(da, n), *db_d = to_device(db, nb);

        add_forward(out, a, b, n, nb);
        add_forward_cuda(out_d, a_d, b_d, n, nb, 0);
        expect_close("add_forward out", out_d, out, n);

        add_backward(want_da ? da : NULL, db, dout, n, nb);
        add_backward_cuda(want_da ? da_d : NULL, db_d, dout_d, n, nb, 0);
        expect_close("add_backward da", da_d, da, n);
        expect_close("add_backward db", db_d, db, nb);

        real *bufs[] = {a, b, out, dout, da, db};
        real *dbufs[] = {a_d, b_d, out_d, dout_d, da_d, db_d};
        for (int i = 0; i < 6; i++) {
            free(bufs[i]);
            device_free(dbufs[i]);
        }
    }
}
END_TEST

typedef void (*UnaryForward)(real *, const real *, size_t);
typedef void (*UnaryBackward)(real *, const real *, const real *, size_t);
typedef void (*UnaryForwardCuda)(real *, const real *, size_t, cudaStream_t);
typedef void (*UnaryBackwardCuda)(real *, const real *, const real *, size_t, cudaStream_t);

// forward, then backward into a gradient that starts from the same non-zero values on both sides
static void check_unary(const char *name, UnaryForward fwd, UnaryBackward bwd,
                        UnaryForwardCuda fwd_cuda, UnaryBackwardCuda bwd_cuda) {
    const size_t sizes[] = {1, 1000003};
    char what[64];
    for (int t = 0; t < 2; t++) {
        size_t n = sizes[t];
        real *inp = host_randn(n, 10, 3, 0), *out = xmalloc(n * sizeof(real));
        real *dout = host_randn(n, 11, 1, 0), *dinp = host_randn(n, 12, 1, 0);
        real *inp_d = to_device(inp, n), *out_d = device_alloc(n * sizeof(real));
        real *dout_d = to_device(dout, n), *dinp_d = to_device(dinp, n);

        fwd(out, inp, n);
        fwd_cuda(out_d, inp_d, n, 0);
        snprintf(what, sizeof what, "%s_forward out", name);
        expect_close(what, out_d, out, n);

        bwd(dinp, dout, inp, n);
        bwd_cuda(dinp_d, dout_d, inp_d, n, 0);
        snprintf(what, sizeof what, "%s_backward dinp", name);
        expect_close(what, dinp_d, dinp, n);

        free(inp), free(out), free(dout), free(dinp);
        device_free(inp_d), device_free(out_d), device_free(dout_d), device_free(dinp_d);
    }
}

START_TEST(cuda_gelu) {
    check_unary("gelu", gelu_forward, gelu_backward, gelu_forward_cuda, gelu_backward_cuda);
}
END_TEST

START_TEST(cuda_silu) {
    check_unary("silu", silu_forward, silu_backward, silu_forward_cuda, silu_backward_cuda);
}
END_TEST

// ---- layernorm -----------------------------------------------------------------------------------

START_TEST(cuda_layernorm) {
    // C not a multiple of 32, and C below one warp; rows with a non-zero mean
    const int shapes[][2] = {{37, 769}, {5, 31}};
    const real eps = (real)1e-6;
    for (int t = 0; t < 2; t++) {
        int N = shapes[t][0], C = shapes[t][1];
        size_t n = (size_t)N * C;
        real *inp = host_randn(n, 20, 2, 0.5), *out = xmalloc(n * sizeof(real));
        real *mean = xmalloc(N * sizeof(real)), *rstd = xmalloc(N * sizeof(real));
        real *dout = host_randn(n, 21, 1, 0), *dinp = host_randn(n, 22, 1, 0);
        real *inp_d = to_device(inp, n), *out_d = device_alloc(n * sizeof(real));
        real *mean_d = device_alloc(N * sizeof(real)), *rstd_d = device_alloc(N * sizeof(real));
        real *dout_d = to_device(dout, n), *dinp_d = to_device(dinp, n);

        layernorm_forward(out, mean, rstd, inp, N, C, eps);
        layernorm_forward_cuda(out_d, mean_d, rstd_d, inp_d, N, C, eps, 0);
        expect_close("layernorm_forward out", out_d, out, n);
        expect_close("layernorm_forward mean", mean_d, mean, N);
        expect_close("layernorm_forward rstd", rstd_d, rstd, N);

        // backward from the CPU statistics on both sides, so that it is tested on its own
        copy_bytes(mean_d, mean, N * sizeof(real));
        copy_bytes(rstd_d, rstd, N * sizeof(real));
        layernorm_backward(dinp, dout, inp, mean, rstd, N, C);
        layernorm_backward_cuda(dinp_d, dout_d, inp_d, mean_d, rstd_d, N, C, 0);
        expect_close("layernorm_backward dinp", dinp_d, dinp, n);

        free(inp), free(out), free(mean), free(rstd), free(dout), free(dinp);
        device_free(inp_d), device_free(out_d), device_free(mean_d), device_free(rstd_d);
        device_free(dout_d), device_free(dinp_d);
    }
}
END_TEST

// ---- QK-norm (RMSNorm over groups) and rotary positions, one op --------------------------------

START_TEST(cuda_qknorm) {
    // the norm alone, over groups of a head (5 heads of 12) with a scale of 12, of the full width
    // (45, below two warps, not a multiple of 32), and of 20 with a scale of the full width 60;
    // the turn alone (3 heads of 6; one row of angles per token of 5, or per row); the norm of a
    // head then the turn, and the full-width norm then the turn (angles per row); rows of mean
    // non-zero. Columns: N, C, G, S (0: no norm), dh (0: no turn), A
    const int shapes[][6] = {{37, 60, 12, 12, 0, 0}, {9, 45, 45, 45, 0, 0}, {7, 60, 20, 60, 0, 0},
                             {10, 18, 0, 0, 6, 5}, {10, 18, 0, 0, 6, 10}, {37, 60, 12, 12, 12, 37},
                             {9, 66, 66, 66, 6, 3}};
    for (int k = 0; k < 7; k++) {
        int N = shapes[k][0], C = shapes[k][1], G = shapes[k][2], S = shapes[k][3], dh = shapes[k][4], A = shapes[k][5];
        size_t n = (size_t)N * C, ng = S ? (size_t)N * (C / G) : 1, na = dh ? (size_t)A * dh : 1;
        real *inp = host_randn(n, 60, 2, 0.5), *scale = host_randn(S ? S : 1, 61, 0.5, 1), *out = xmalloc(n * sizeof(real));
        real *rstd = xmalloc(ng * sizeof(real)), *dout = host_randn(n, 62, 1, 0), *cs = host_randn(na, 66, 1, 0);
        real *dinp = host_randn(n, 63, 1, 0), *dscale = host_randn(S ? S : 1, 64, 1, 0);
        real *inp_d = to_device(inp, n), *scale_d = to_device(scale, S ? S : 1), *out_d = device_alloc(n * sizeof(real));
        real *rstd_d = device_alloc(ng * sizeof(real)), *dout_d = to_device(dout, n), *cs_d = to_device(cs, na);
        real *dinp_d = to_device(dinp, n), *dscale_d = to_device(dscale, S ? S : 1);
        real *sc = S ? scale : NULL, *sc_d = S ? scale_d : NULL, *a = dh ? cs : NULL, *a_d = dh ? cs_d : NULL;
        qk_norm_rope_forward(out, rstd, inp, sc, a, N, C, G, S, dh, A, (real)1e-6);
        qk_norm_rope_forward_cuda(out_d, rstd_d, inp_d, sc_d, a_d, N, C, G, S, dh, A, (real)1e-6, 0);
        expect_close("qk_norm_rope_forward out", out_d, out, n);
        if (S) {
            expect_close("qk_norm_rope_forward rstd", rstd_d, rstd, ng);
            copy_bytes(rstd_d, rstd, ng * sizeof(real)); // backward on its own, from the CPU's statistics
        }
        qk_norm_rope_backward(dinp, S ? dscale : NULL, dout, inp, sc, rstd, a, N, C, G, S, dh, A);
        qk_norm_rope_backward_cuda(dinp_d, S ? dscale_d : NULL, dout_d, inp_d, sc_d, rstd_d, a_d, N, C, G, S, dh, A, 0);
        expect_close("qk_norm_rope_backward dinp", dinp_d, dinp, n);
        if (S) expect_close("qk_norm_rope_backward dscale", dscale_d, dscale, S);
        free(inp), free(scale), free(out), free(rstd), free(dout), free(dinp), free(dscale), free(cs);
        device_free(inp_d), device_free(scale_d), device_free(out_d), device_free(rstd_d);
        device_free(dout_d), device_free(dinp_d), device_free(dscale_d), device_free(cs_d);
    }
}
END_TEST

// ---- AdamW ---------------------------------------------------------------------------------------

START_TEST(cuda_adamw) {
    // lr is large so that the update is not lost in the normalization by max|params|; step 3 and
    // grad_scale != 1 so that the bias correction and the scaling both matter
    const size_t sizes[] = {1, 1000003};
    for (int t = 0; t < 2; t++) {
        size_t n = sizes[t];
        real *p = host_randn(n, 30, 1, 0), *g = host_randn(n, 31, 1, 0);
        real *m = host_randn(n, 32, 0.1, 0), *v = host_randn(n, 33, 0.1, 0);
        for (size_t i = 0; i < n; i++) v[i] *= v[i]; // second moments are non-negative
        real *p_d = to_device(p, n), *g_d = to_device(g, n);
        real *m_d = to_device(m, n), *v_d = to_device(v, n);

        adamw_update(p, g, m, v, n, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
        adamw_update_cuda(p_d, g_d, m_d, v_d, n, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3, 0);
        expect_close("adamw_update params", p_d, p, n);
        expect_close("adamw_update m", m_d, m, n);
        expect_close("adamw_update v", v_d, v, n);
        ema_update(m, p, n, 0.9);
        ema_update_cuda(m_d, p_d, n, 0.9, 0);
        expect_close("ema_update", m_d, m, n);

        free(p), free(g), free(m), free(v);
        device_free(p_d), device_free(g_d), device_free(m_d), device_free(v_d);
    }
}
END_TEST

// ---- linear (cuBLAS) ------------------------------------------------------------------------------

// sizes that are no multiple of anything, with and without bias; gradients start non-zero
START_TEST(cuda_linear) {
    int N = 37, C = 45, OC = 29;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    real *inp = host_randn(ni, 100, 1, 0), *w = host_randn(nw, 101, 0.2, 0), *bias = host_randn(OC, 102, 1, 0);
    real *dout = host_randn(no, 103, 1, 0), *out = xmalloc(no * sizeof(real));
    real *dinp = host_randn(ni, 104, 1, 0), *dw = host_randn(nw, 105, 1, 0), *db = host_randn(OC, 106, 1, 0);
    real *inp_d = to_device(inp, ni), *w_d = to_device(w, nw), *bias_d = to_device(bias, OC);
    real *dout_d = to_device(dout, no), *out_d = device_alloc(no * sizeof(real));
    real *dinp_d = to_device(dinp, ni), *dw_d = to_device(dw, nw), *db_d = to_device(db, OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        linear_forward(out, inp, w, with_bias ? bias : NULL, N, C, OC);
        linear_forward_cuda(out_d, inp_d, w_d, with_bias ? bias_d : NULL, N, C, OC, 0);
        expect_close(with_bias ? "linear_forward, bias" : "linear_forward", out_d, out, no);
    }
    linear_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    linear_backward_cuda(dinp_d, dw_d, db_d, dout_d, inp_d, w_d, N, C, OC, 0);
    expect_close("linear_backward dinp", dinp_d, dinp, ni);
    expect_close("linear_backward dweight", dw_d, dw, nw);
    expect_close("linear_backward dbias", db_d, db, OC);
    free(inp), free(w), free(bias), free(dout), free(out), free(dinp), free(dw), free(db);
    device_free(inp_d), device_free(w_d), device_free(bias_d), device_free(dout_d), device_free(out_d);
    device_free(dinp_d), device_free(dw_d), device_free(db_d);
}
END_TEST

// ---- adaLN, slice, loss ---------------------------------------------------------------------------

// modulate and the gated add, forward and backward, with gradients that start non-zero; a D that
// fills no block evenly, and T = 1
START_TEST(cuda_adaln) {
    const int shapes[][3] = {{3, 50, 37}, {2, 1, 300}};
    for (int c = 0; c < 2; c++) {
        int B = shapes[c][0], T = shapes[c][1], D = shapes[c][2];
        size_t n = (size_t)B * T * D, nv = (size_t)B * D;
        real *x = host_randn(n, 50, 1, 0), *y = host_randn(n, 51, 1, 0), *dout = host_randn(n, 52, 1, 0);
        real *a = host_randn(nv, 53, 0.5, 0), *b = host_randn(nv, 54, 0.5, 0);
        real *out = xmalloc(n * sizeof(real)), *dx = host_randn(n, 55, 1, 0), *dy = host_randn(n, 56, 1, 0);
        real *da = host_randn(nv, 57, 1, 0), *db = host_randn(nv, 58, 1, 0);
        real *x_d = to_device(x, n), *y_d = to_device(y, n), *dout_d = to_device(dout, n);
        real *a_d = to_device(a, nv), *b_d = to_device(b, nv), *out_d = device_alloc(n * sizeof(real));
        real *dx_d = to_device(dx, n), *dy_d = to_device(dy, n), *da_d = to_device(da, nv), *db_d = to_device(db, nv);
        modulate_forward(out, x, a, b, B, T, D);
        modulate_forward_cuda(out_d, x_d, a_d, b_d, B, T, D, 0);
        expect_close("modulate_forward out", out_d, out, n);
        modulate_backward(dx, da, db, dout, x, b, B, T, D);
        modulate_backward_cuda(dx_d, da_d, db_d, dout_d, x_d, b_d, B, T, D, 0);
        expect_close("modulate_backward dx", dx_d, dx, n);
        expect_close("modulate_backward dshift", da_d, da, nv);
        expect_close("modulate_backward dscale", db_d, db, nv);
        gated_add_forward(out, x, a, y, B, T, D);
        gated_add_forward_cuda(out_d, x_d, a_d, y_d, B, T, D, 0);
        expect_close("gated_add_forward out", out_d, out, n);
        gated_add_backward(dx, da, dy, dout, a, y, B, T, D);
        gated_add_backward_cuda(dx_d, da_d, dy_d, dout_d, a_d, y_d, B, T, D, 0);
        expect_close("gated_add_backward dx", dx_d, dx, n);
        expect_close("gated_add_backward dgate", da_d, da, nv);
        expect_close("gated_add_backward dy", dy_d, dy, n);
        free(x), free(y), free(dout), free(a), free(b), free(out), free(dx), free(dy), free(da), free(db);
        device_free(x_d), device_free(y_d), device_free(dout_d), device_free(a_d), device_free(b_d);
        device_free(out_d), device_free(dx_d), device_free(dy_d), device_free(da_d), device_free(db_d);
    }
}
END_TEST

START_TEST(cuda_slice) {
    int N = 33, C = 70, off = 23, len = 25;
    size_t n = (size_t)N * C, m = (size_t)N * len;
    real *inp = host_randn(n, 60, 1, 0), *dinp = host_randn(n, 61, 1, 0), *dout = host_randn(m, 62, 1, 0);
    real *out = xmalloc(m * sizeof(real));
    real *inp_d = to_device(inp, n), *dinp_d = to_device(dinp, n), *dout_d = to_device(dout, m);
    real *out_d = device_alloc(m * sizeof(real));
    slice_forward(out, inp, N, C, off, len);
    slice_forward_cuda(out_d, inp_d, N, C, off, len, 0);
    expect_close("slice_forward out", out_d, out, m);
    slice_backward(dinp, dout, N, C, off, len);
    slice_backward_cuda(dinp_d, dout_d, N, C, off, len, 0);
    expect_close("slice_backward dinp", dinp_d, dinp, n);
    free(inp), free(dinp), free(dout), free(out);
    device_free(inp_d), device_free(dinp_d), device_free(dout_d), device_free(out_d);
}
END_TEST

// strided rows, as the collectives pack them: 37 rows of 45 values, 70 apart in dst and 50 in src
START_TEST(cuda_add_rows) {
    size_t rows = 37, width = 45, dpitch = 70, spitch = 50, nd = rows * dpitch, ns = rows * spitch;
    real *dst = host_randn(nd, 63, 1, 0), *src = host_randn(ns, 64, 1, 0);
    real *dst_d = to_device(dst, nd), *src_d = to_device(src, ns);
    add_rows(dst, dpitch, src, spitch, width, rows);
    add_rows_cuda(dst_d, dpitch, src_d, spitch, width, rows, 0);
    expect_close("add_rows", dst_d, dst, nd); // the gaps between rows stay as they were
    free(dst), free(src);
    device_free(dst_d), device_free(src_d);
}
END_TEST

// --precision bf16 on the device: the rounding and the wire's packing and unpacking, bit for bit
// the CPU kernels' (an odd count; every 7th value a tie, half a bf16 place above a bf16 value)
START_TEST(cuda_bf16) {
    size_t n = 1001;
    real *x = host_randn(n, 70, 3, 0), *r = xmalloc(n * sizeof(real)), *back = xmalloc(n * sizeof(real));
    for (size_t i = 0; i < n; i += 7) {
        float f = (float)x[i];
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u = (u & 0xffff0000u) | 0x8000u;
        memcpy(&f, &u, sizeof f);
        x[i] = f;
    }
    uint16_t *bits = xmalloc(n * sizeof(uint16_t)), *bits_h = xmalloc(n * sizeof(uint16_t));
    real *x_d = to_device(x, n), *r_d = device_alloc(n * sizeof(real));
    uint16_t *bits_d = device_alloc(n * sizeof(uint16_t));
    round_bf16(r, x, n);
    round_bf16_cuda(r_d, x_d, n, 0);
    expect_within("round_bf16", r_d, r, n, 0);
    pack_bf16(bits, x, n);
    pack_bf16_cuda(bits_d, x_d, n, 0);
    device_sync();
    copy_bytes(bits_h, bits_d, n * sizeof(uint16_t));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += bits_h[i] != bits[i];
    printf("cuda pack_bf16: %zu of %zu patterns differ from the CPU's\n", differ, n);
    ck_assert_uint_eq(differ, 0);
    unpack_bf16(back, bits, n);
    unpack_bf16_cuda(r_d, bits_d, n, 0);
    expect_within("unpack_bf16", r_d, back, n, 0);
    for (size_t i = 0; i < n; i++) ck_assert(back[i] == r[i]); // the wire gives the rounded values
    free(x), free(r), free(back), free(bits), free(bits_h);
    device_free(x_d), device_free(r_d), device_free(bits_d);
}
END_TEST

// the sampler's step, with and without guidance: 5 images of 3x7x7, predictions of 6 channels
START_TEST(cuda_euler_step) {
    int k = 5;
    size_t chw = 3 * 49, pred_chw = 6 * 49, nx = k * chw, np = 2 * k * pred_chw;
    for (int guided = 0; guided < 2; guided++) {
        real *x = host_randn(nx, 65, 1, 0), *pred = host_randn(np, 66, 1, 0);
        real *x_d = to_device(x, nx), *pred_d = to_device(pred, np);
        euler_step(x, pred, k, chw, pred_chw, guided, (real)2.5, -0.04);
        euler_step_cuda(x_d, pred_d, k, chw, pred_chw, guided, (real)2.5, -0.04, 0);
        expect_close(guided ? "euler_step, guided" : "euler_step", x_d, x, nx);
        free(x), free(pred);
        device_free(x_d), device_free(pred_d);
    }
}
END_TEST

// a sum from the device against the CPU's, relative
static void expect_close_double(const char *what, double got, double cpu) {
    double err = fabs(got - cpu) / fmax(fabs(cpu), 1e-300);
    printf("cuda %-24s relative error %.2e (tolerance %.0e, %s)\n", what, err, TOL, REAL_NAME);
    ck_assert_msg(err <= TOL, "%s: %.17g vs %.17g", what, got, cpu);
}

// the masked MSE (a mask with gaps, and none) and the sum of squares, over sizes below and far
// above one block's threads
START_TEST(cuda_loss) {
    const size_t sizes[] = {7, 100003, 1000003}; // the last over more blocks than the first pass has
    for (int c = 0; c < 3; c++) {
        size_t n = sizes[c];
        real *p = host_randn(n, 70, 1, 0), *t = host_randn(n, 71, 1, 0);
        real *dp = host_randn(n, 72, 1, 0), *dt = host_randn(n, 73, 1, 0);
        uint8_t *mask = xmalloc(n);
        for (size_t i = 0; i < n; i++) mask[i] = i % 7 != 3;
        real *p_d = to_device(p, n), *t_d = to_device(t, n), *dp_d = to_device(dp, n), *dt_d = to_device(dt, n);
        uint8_t *mask_d = device_alloc(n);
        copy_bytes(mask_d, mask, n);
        for (int masked = 0; masked < 2; masked++) {
            const uint8_t *m = masked ? mask : NULL, *m_d = masked ? mask_d : NULL;
            expect_close_double(masked ? "mse_forward, masked" : "mse_forward",
                                mse_forward_cuda(p_d, t_d, m_d, n, 3.0 * n, 0),
                                mse_forward(p, t, m, n, 3.0 * n));
            mse_backward(dp, dt, (real)0.7, p, t, m, n, 3.0 * n);
            mse_backward_cuda(dp_d, dt_d, (real)0.7, p_d, t_d, m_d, n, 3.0 * n, 0);
            expect_close("mse_backward dpred", dp_d, dp, n);
            expect_close("mse_backward dtarget", dt_d, dt, n);
        }
        expect_close_double("sum_squares", sum_squares_cuda(p_d, n, 0), sum_squares(p, n));
        free(p), free(t), free(dp), free(dt), free(mask);
        device_free(p_d), device_free(t_d), device_free(dp_d), device_free(dt_d), device_free(mask_d);
    }
}
END_TEST

// ---- patches and embeddings ------------------------------------------------------------------------

// a shard of tokens [20, 40) of a 6 x 6 grid (its last 4 rows padding), and of a clip of 6
// frames of 9 x 6 in patches of 3 x 3 x 3 (a 2 x 3 x 2 grid, tokens [5, 14): a shard that cuts
// frames apart, its last 2 padding); both token layouts; both directions add into outputs that
// start non-zero
START_TEST(cuda_patch) {
    ClipShape shapes[2] = {{2, 3, 1, 12, 12, 1, 2}, {2, 2, 6, 9, 6, 3, 3}};
    int t0s[2] = {20, 5}, ns[2] = {20, 9};
    for (int k = 0; k < 4; k++) {
        int last = k % 2, t0 = t0s[k / 2], n = ns[k / 2];
        ClipShape s = shapes[k / 2];
        size_t ni = (size_t)s.B * s.C * s.F * s.H * s.W, nt = (size_t)s.B * n * s.C * s.pt * s.p * s.p;
        real *img = host_randn(ni, 80, 1, 0), *tok = host_randn(nt, 81, 1, 0);
        real *img_d = to_device(img, ni), *tok_d = to_device(tok, nt);
        patch_gather(tok, img, s, t0, n, last);
        patch_gather_cuda(tok_d, img_d, s, t0, n, last, 0);
        expect_close(last ? "patch_gather channels last" : "patch_gather", tok_d, tok, nt);
        patch_scatter(img, tok, s, t0, n, last);
        patch_scatter_cuda(img_d, tok_d, s, t0, n, last, 0);
        expect_close(last ? "patch_scatter channels last" : "patch_scatter", img_d, img, ni);
        free(img), free(tok);
        device_free(img_d), device_free(tok_d);
    }
}
END_TEST

// labels that repeat within the batch; an odd timestep width and times up to 999
START_TEST(cuda_embedding) {
    int B = 6, V = 5, D = 37, dim = 33;
    int64_t idx[6] = {4, 1, 4, 0, 1, 4};
    real *table = host_randn((size_t)V * D, 90, 1, 0), *dtable = host_randn((size_t)V * D, 91, 1, 0);
    real *dout = host_randn((size_t)B * D, 92, 1, 0), *out = xmalloc((size_t)B * D * sizeof(real)); // D > dim
    real t[6] = {0, 1.5f, 999, 250, 31.25f, 600}, dt[6] = {1, 2, 3, 4, 5, 6};
    real *gt = host_randn((size_t)B * dim, 93, 1, 0);
    real *table_d = to_device(table, (size_t)V * D), *dtable_d = to_device(dtable, (size_t)V * D);
    real *dout_d = to_device(dout, (size_t)B * D), *out_d = device_alloc((size_t)B * D * sizeof(real));
    real *t_d = to_device(t, B), *dt_d = to_device(dt, B), *gt_d = to_device(gt, (size_t)B * dim);
    int64_t *idx_d = device_alloc(sizeof idx);
    copy_bytes(idx_d, idx, sizeof idx);
    embedding_forward(out, table, idx, B, V, D);
    embedding_forward_cuda(out_d, table_d, idx_d, B, V, D, 0);
    expect_close("embedding_forward", out_d, out, (size_t)B * D);
    embedding_backward(dtable, dout, idx, B, V, D);
    embedding_backward_cuda(dtable_d, dout_d, idx_d, B, V, D, 0);
    expect_close("embedding_backward", dtable_d, dtable, (size_t)V * D);
    timestep_embedding_forward(out, t, B, dim, 10000);
    timestep_embedding_forward_cuda(out_d, t_d, B, dim, 10000, 0);
    expect_close("timestep_embedding fwd", out_d, out, (size_t)B * dim);
    timestep_embedding_backward(dt, gt, t, B, dim, 10000);
    timestep_embedding_backward_cuda(dt_d, gt_d, t_d, B, dim, 10000, 0);
    expect_close("timestep_embedding bwd", dt_d, dt, B);
    free(table), free(dtable), free(dout), free(out), free(gt);
    device_free(table_d), device_free(dtable_d), device_free(dout_d), device_free(out_d), device_free(t_d);
    device_free(dt_d), device_free(gt_d), device_free(idx_d);
}
END_TEST

// ---- fused attention -----------------------------------------------------------------------------

// q (B,Tq,H*dh), k, v (B,Tk,H*dh), a key mask (NULL, some keys masked, or every key masked),
// forward and backward on both sides; the gradients start non-zero (both sides add into them),
// and one case passes no dQ. packed: the rows are packs of images of 9 to 16 tokens, different in
// each row, the keys all Tk tokens and the queries the last Tq (Tq <= Tk), so that tiles of
// queries skip the key tiles of other images.
static double attention_case(int B, int Tq, int Tk, int H, int dh, int masking, bool with_dq,
                             bool packed, double tol) {
    int D = H * dh;
    size_t nq = (size_t)B * Tq * D, nk = (size_t)B * Tk * D, nl = (size_t)B * H * Tq;
    real *q = host_randn(nq, 40, 1, 0), *k = host_randn(nk, 41, 1, 0), *v = host_randn(nk, 42, 1, 0);
    real *dout = host_randn(nq, 43, 1, 0), *dq = host_randn(nq, 44, 1, 0);
    real *dk = host_randn(nk, 45, 1, 0), *dv = host_randn(nk, 46, 1, 0);
    real *out = xmalloc(nq * sizeof(real)), *lse = xmalloc(nl * sizeof(real));
    uint8_t *mask = NULL;
    if (masking) {
        mask = xmalloc((size_t)Tk);
        for (int j = 0; j < Tk; j++) mask[j] = masking == 1 && (j % 5 != 3 && j < Tk - 2);
    }
    real *q_d = to_device(q, nq), *k_d = to_device(k, nk), *v_d = to_device(v, nk);
    real *dout_d = to_device(dout, nq), *dq_d = to_device(dq, nq), *dk_d = to_device(dk, nk);
    real *dv_d = to_device(dv, nk), *out_d = device_alloc(nq * sizeof(real));
    real *lse_d = device_alloc(nl * sizeof(real));
    real *scratch_d = device_alloc(attention_scratch_count_cuda(B, Tq, Tk, H, dh, true) * sizeof(real));
    uint8_t *mask_d = NULL;
    if (mask) mask_d = device_alloc((size_t)Tk), copy_bytes(mask_d, mask, (size_t)Tk);
    int32_t *ids = NULL, *ids_d = NULL;
    Segments seg = NO_SEGMENTS, seg_d = NO_SEGMENTS;
    if (packed) {
        ids = xmalloc((size_t)B * Tk * sizeof(int32_t));
        for (int b = 0; b < B; b++)
            for (int t = 0, img = 0, left = 9; t < Tk; t++, left--) {
                if (!left) img++, left = 9 + (img * 5 + b * 3) % 8;
                ids[(size_t)b * Tk + t] = img;
            }
        ids_d = device_alloc((size_t)B * Tk * sizeof(int32_t));
        copy_bytes(ids_d, ids, (size_t)B * Tk * sizeof(int32_t));
        seg = (Segments){ids, Tk, Tk - Tq, 0}, seg_d = (Segments){ids_d, Tk, Tk - Tq, 0};
    }

    real *scratch = xmalloc(attention_scratch_count(B, Tq, Tk, H, dh, true) * sizeof(real));
    attention_forward(out, lse, scratch, q, k, v, mask, seg, B, Tq, Tk, H, dh);
    attention_forward_cuda(out_d, lse_d, scratch_d, q_d, k_d, v_d, mask_d, seg_d, B, Tq, Tk, H, dh, 0);
    char what[64];
    snprintf(what, sizeof what, "attention out %dx%dx%d h%d%s", B, Tq, Tk, dh, packed ? " packed" : "");
    double err = expect_within(what, out_d, out, nq, tol);
    if (masking != 2) { // every key masked: lse is -inf on both sides, compared below by equality
        snprintf(what, sizeof what, "attention lse %dx%dx%d h%d", B, Tq, Tk, dh);
        expect_within(what, lse_d, lse, nl, tol);
    } else {
        real *h = xmalloc(nl * sizeof(real));
        copy_bytes(h, lse_d, nl * sizeof(real));
        for (size_t i = 0; i < nl; i++) ck_assert(h[i] == -INFINITY && lse[i] == -INFINITY);
        free(h);
    }
    // backward from the CPU's out and lse on both sides, so that it is tested on its own
    copy_bytes(out_d, out, nq * sizeof(real));
    copy_bytes(lse_d, lse, nl * sizeof(real));
    attention_backward(with_dq ? dq : NULL, dk, dv, scratch, dout, out, lse, q, k, v, mask, seg, B,
                       Tq, Tk, H, dh);
    attention_backward_cuda(with_dq ? dq_d : NULL, dk_d, dv_d, scratch_d, dout_d, out_d, lse_d, q_d,
                            k_d, v_d, mask_d, seg_d, B, Tq, Tk, H, dh, 0);
    snprintf(what, sizeof what, "attention dq %dx%dx%d h%d", B, Tq, Tk, dh);
    expect_within(what, dq_d, dq, nq, tol);
    snprintf(what, sizeof what, "attention dk %dx%dx%d h%d", B, Tq, Tk, dh);
    expect_within(what, dk_d, dk, nk, tol);
    snprintf(what, sizeof what, "attention dv %dx%dx%d h%d", B, Tq, Tk, dh);
    expect_within(what, dv_d, dv, nk, tol);

    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(out), free(lse);
    free(mask), free(scratch), free(ids);
    device_free(q_d), device_free(k_d), device_free(v_d), device_free(dout_d), device_free(dq_d);
    device_free(dk_d), device_free(dv_d), device_free(out_d), device_free(lse_d), device_free(scratch_d);
    device_free(mask_d), device_free(ids_d);
    return err; // the forward output's
}

// Tq != Tk, sizes that fill no tile or block evenly, head widths of DiT-S (64) and DiT-XL (72),
// 32 and 128, widths that the tensor cores' kernel pads (20; 18, whose rows are not 16-byte
// aligned), a mask with masked keys inside and at the end, every key masked, no dQ wanted, and
// packs
START_TEST(cuda_attention) {
    attention_case(2, 70, 45, 3, 16, 1, true, false, TOL);
    attention_case(1, 129, 300, 2, 64, 0, true, false, TOL);
    attention_case(2, 37, 37, 2, 72, 1, false, false, TOL);
    attention_case(1, 20, 9, 1, 8, 2, true, false, TOL);
    attention_case(2, 129, 300, 2, 16, 0, true, true, TOL);
    attention_case(2, 37, 37, 2, 72, 1, true, true, TOL);
    attention_case(1, 40, 70, 2, 32, 1, true, false, TOL);
    attention_case(1, 33, 50, 1, 128, 0, true, true, TOL);
    attention_case(2, 21, 30, 2, 20, 1, true, false, TOL);
    attention_case(1, 17, 19, 3, 18, 0, true, false, TOL);
}
END_TEST

// --tf32: forward and backward in one TF32 product (kernels/attention_mma.cu), within
// ATTN_TF32_TOL, and the forward above float32's error (3xTF32 would be within it)
START_TEST(cuda_attention_tf32) {
#ifndef REAL_F64
    device_set_tf32(true);
    double e1 = attention_case(2, 70, 45, 3, 16, 1, true, false, ATTN_TF32_TOL);
    double e2 = attention_case(1, 129, 300, 2, 64, 0, true, true, ATTN_TF32_TOL);
    device_set_tf32(false);
    ck_assert_msg(e1 > TOL && e2 > TOL, "--tf32: the forward's errors %.1e and %.1e are float32's: "
                  "not one TF32 product", e1, e2);
#endif
}
END_TEST

// bf16 products (attention_set_bf16_cuda): within ATTN_BF16_TOL, each case's forward error above
// the same case's with one TF32 product (bf16 keeps 3 fewer bits); widths the bf16 kernels pad to
// 16 (8), 32 (20) and 80 (72), and 128
START_TEST(cuda_attention_bf16) {
#ifndef REAL_F64
    struct { int B, Tq, Tk, H, dh, masking; bool packed; } cases[] = {
        {2, 70, 45, 3, 16, 1, false}, {2, 37, 37, 2, 72, 1, true}, {1, 20, 9, 1, 8, 0, false},
        {2, 21, 30, 2, 20, 1, false}, {1, 33, 50, 1, 128, 0, true}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        __typeof__(cases[0]) c = cases[i];
        device_set_tf32(true);
        double tf32 = attention_case(c.B, c.Tq, c.Tk, c.H, c.dh, c.masking, true, c.packed, ATTN_TF32_TOL);
        device_set_tf32(false);
        attention_set_bf16_cuda(true);
        double bf16 = attention_case(c.B, c.Tq, c.Tk, c.H, c.dh, c.masking, true, c.packed, ATTN_BF16_TOL);
        attention_set_bf16_cuda(false);
        ck_assert_msg(bf16 > tf32, "bf16 attention, width %d: its error %.1e is not above one TF32 "
                      "product's %.1e: not bf16 products", c.dh, bf16, tf32);
    }
#endif
}
END_TEST

// A GPU that gives a block less shared memory than a kernel needs (sm_86 and sm_89: 101,376 bytes)
// gets a sentence before any launch, not a failed one: on the emulated device, which says so when
// EMULATE_BLOCK_SHARED asks, the forward at width 128 fits exactly and the backward is refused
START_TEST(cuda_attention_shared_memory_limit) {
#ifndef REAL_F64
    if (strcmp(device_name(), "emulated device")) return; // a GPU's limit is its own
    int T = 8, dh = 128;
    size_t n = (size_t)T * dh;
    real *q = host_randn(n, 90, 1, 0), *buf[8];
    for (int i = 0; i < 8; i++) buf[i] = to_device(q, n); // q k v out dout dq dk dv
    real *lse = device_alloc((size_t)T * sizeof(real));
    real *scratch = device_alloc(attention_scratch_count_cuda(1, T, T, 1, dh, true) * sizeof(real) + sizeof(real));
    setenv("EMULATE_BLOCK_SHARED", "101376", 1);
    attention_forward_cuda(buf[3], lse, scratch, buf[0], buf[1], buf[2], NULL, NO_SEGMENTS, 1, T, T, 1, dh, 0);
    EXPECT_FATAL(attention_backward_cuda(buf[5], buf[6], buf[7], scratch, buf[4], buf[3], lse, buf[0], buf[1],
                                         buf[2], NULL, NO_SEGMENTS, 1, T, T, 1, dh, 0),
                 "needs 135680 bytes of shared memory a block, and this GPU gives at most 101376");
    unsetenv("EMULATE_BLOCK_SHARED");
    for (int i = 0; i < 8; i++) device_free(buf[i]);
    device_free(lse), device_free(scratch), free(q);
#endif
}
END_TEST

// the ring's merge of partial outputs: rows of -inf on either side (a block, or everything so far,
// fully masked) and the ring-wrong-merge bug's plain average
START_TEST(cuda_attention_merge) {
    int B = 2, n = 13, H = 3, dh = 40;
    size_t no = (size_t)B * n * H * dh, nl = (size_t)B * H * n;
    AttnMerge ways[] = {{MERGE_BY_LSE, 0}, {MERGE_AS_MEAN, 3}, {MERGE_OVERFLOWING, 0}};
    for (int w = 0; w < 3; w++) {
        real *o = host_randn(no, 80, 1, 0), *ob = host_randn(no, 81, 1, 0);
        real *l = host_randn(nl, 82, 2, 0), *lb = host_randn(nl, 83, 2, 0);
        for (size_t i = 0; i < nl; i += 5) lb[i] = -INFINITY;
        for (size_t i = 2; i < nl; i += 7) l[i] = -INFINITY;
        real *o_d = to_device(o, no), *ob_d = to_device(ob, no), *l_d = to_device(l, nl), *lb_d = to_device(lb, nl);
        attention_merge(o, l, ob, lb, B, n, H, dh, ways[w]);
        attention_merge_cuda(o_d, l_d, ob_d, lb_d, B, n, H, dh, ways[w], 0);
        expect_close(w == 1 ? "attention_merge, averaged o" : w == 2 ? "attention_merge, overflowing o" : "attention_merge o",
                     o_d, o, no);
        real *lh = xmalloc(nl * sizeof(real));
        copy_bytes(lh, l_d, nl * sizeof(real));
        bool same_inf = true; // -inf where the CPU has it, finite values close
        for (size_t i = 0; i < nl; i++) {
            same_inf = same_inf && isinf(lh[i]) == isinf(l[i]);
            if (isinf(l[i])) lh[i] = l[i] = 0;
        }
        ck_assert_msg(same_inf, "attention_merge_cuda: -inf rows of the log-sum-exp differ");
        real *lh_d = to_device(lh, nl);
        expect_close("attention_merge lse", lh_d, l, nl);
        free(o), free(ob), free(l), free(lb), free(lh);
        device_free(o_d), device_free(ob_d), device_free(l_d), device_free(lb_d), device_free(lh_d);
    }
}
END_TEST

// ---- tensor-core instructions (kernels/tensorcore.cuh), each against the PTX ISA --------------------

// TF32 (cvt.rna: 11 significant bits, ties away from zero) and bf16 (8 bits, ties to even) of a
// finite normal float, by the formula in double (independent of the kernels' bit tricks)
static float ref_round(float x, int bits, bool ties_even) {
    int e;
    double m = frexp((double)x, &e), s = ldexp(m, bits);
    return (float)ldexp(ties_even ? nearbyint(s) : round(s), e - bits);
}

static void *to_device_bytes(const void *h, size_t bytes) {
    void *d = device_alloc(bytes);
    copy_bytes(d, h, bytes);
    return d;
}

// D = A B + C of one warp against the f64 product of the rounded inputs, within the float
// accumulation of K terms (2^-20 of the sum of their magnitudes)
static void expect_mma(const char *what, bool bf, uint64_t stream) {
    int K = bf ? 16 : 8, bits = bf ? 8 : 11;
    float a[16 * 16], b[16 * 8], c[16 * 8], d[16 * 8];
    for (int i = 0; i < 16 * K; i++) a[i] = (float)(((int)((i * 2654435761u + stream) % 2001) - 1000) / 317.0);
    for (int i = 0; i < K * 8; i++) b[i] = (float)(((int)((i * 40503u + 7 * stream) % 1999) - 999) / 211.0);
    for (int i = 0; i < 16 * 8; i++) c[i] = (float)((int)(i * 97 % 61) - 30) / 7.0f;
    float *a_d = to_device_bytes(a, sizeof a), *b_d = to_device_bytes(b, sizeof b), *c_d = to_device_bytes(c, sizeof c);
    float *d_d = device_alloc(sizeof d);
    (bf ? tensorcore_mma_bf16_cuda : tensorcore_mma_tf32_cuda)(d_d, a_d, b_d, c_d, 0);
    device_sync();
    copy_bytes(d, d_d, sizeof d);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double sum = c[i * 8 + j], mag = fabs(sum);
            for (int k = 0; k < K; k++) {
                double p = (double)ref_round(a[i * K + k], bits, bf) * ref_round(b[k * 8 + j], bits, bf);
                sum += p, mag += fabs(p);
            }
            worst = fmax(worst, fabs(d[i * 8 + j] - sum) / mag);
        }
    printf("cuda tensor cores: %-18s worst |D - f64| / sum |terms| %.2e (tolerance %.0e)\n", what, worst, 0x1p-20);
    ck_assert_msg(worst <= 0x1p-20, "%s: D differs from the f64 product by %.3e of its terms' magnitude", what, worst);
    device_free(a_d), device_free(b_d), device_free(c_d), device_free(d_d);
}

START_TEST(cuda_tensor_cores) {
    expect_mma("mma tf32 m16n8k8", false, 1);
    expect_mma("mma bf16 m16n8k16", true, 2);
    // ldmatrix x1, x2, x4, plain and .trans, against the PTX ISA's layout
    uint16_t m[256];
    for (int i = 0; i < 256; i++) m[i] = (uint16_t)(1000 + i);
    uint16_t *m_d = to_device_bytes(m, sizeof m);
    uint32_t *out_d = device_alloc(128 * sizeof(uint32_t)), out[128];
    for (int n = 1; n <= 4; n *= 2)
        for (int trans = 0; trans < 2; trans++) {
            tensorcore_ldmatrix_cuda(out_d, m_d, n, trans, 0);
            device_sync();
            copy_bytes(out, out_d, sizeof out);
            int wrong = 0;
            for (int lane = 0; lane < 32; lane++)
                for (int j = 0; j < n; j++) {
                    int r = lane / 4, c = 2 * (lane % 4); // row, first column (.trans: swapped)
                    uint32_t lo = trans ? m[64 * j + 8 * c + r] : m[64 * j + 8 * r + c];
                    uint32_t hi = trans ? m[64 * j + 8 * (c + 1) + r] : m[64 * j + 8 * r + c + 1];
                    wrong += out[lane * 4 + j] != (lo | hi << 16);
                }
            printf("cuda tensor cores: ldmatrix .x%d%s    %d of %d registers wrong\n", n, trans ? ".trans" : "      ", wrong, 32 * n);
            ck_assert_msg(!wrong, "ldmatrix .x%d%s: %d registers differ from the PTX layout", n, trans ? ".trans" : "", wrong);
        }
    // cp.async in two groups, the shuffles
    float in[256], got[256];
    for (int i = 0; i < 256; i++) in[i] = (float)i * 0.5f - 7;
    float *in_d = to_device_bytes(in, sizeof in), *got_d = device_alloc(sizeof got);
    tensorcore_cp_async_cuda(got_d, in_d, 0);
    device_sync();
    copy_bytes(got, got_d, sizeof got);
    ck_assert_msg(!memcmp(got, in, sizeof in), "cp.async: the copy through shared memory differs");
    int sh[128], *sh_d = device_alloc(sizeof sh), wrong = 0;
    tensorcore_shuffle_cuda(sh_d, 0);
    device_sync();
    copy_bytes(sh, sh_d, sizeof sh);
    for (int lane = 0; lane < 32; lane++) {
        int v[32], down = lane + 3 < 32 ? lane + 3 : lane;
        for (int l = 0; l < 32; l++) v[l] = 3 * l + 1;
        wrong += sh[lane * 4] != v[7 * lane % 32] || sh[lane * 4 + 1] != v[down] || sh[lane * 4 + 2] != v[lane ^ 5] ||
                 sh[lane * 4 + 3] != v[(lane & ~7) | 2];
    }
    printf("cuda tensor cores: cp.async 2 groups and 4 shuffles: %d lanes wrong\n", wrong);
    ck_assert_msg(!wrong, "the shuffles: %d lanes differ", wrong);
    // the roundings, ties included (the bit just below the kept ones set, those below clear)
    enum { NX = 200 };
    float x[NX], tf[NX], bf[NX];
    for (int i = 0; i < NX; i++) {
        uint32_t u = 0x3f800000u + (uint32_t)i * 0x9e37u * 0x51u % 0x7fffffu + ((uint32_t)(i % 7) << 23);
        if (i % 5 == 0) u = (u & ~0x1fffu) | 0x1000u; // a tie for TF32
        if (i % 5 == 1) u = (u & ~0xffffu) | 0x8000u; // a tie for bf16
        if (i % 2) u |= 0x80000000u;
        memcpy(&x[i], &u, sizeof u);
    }
    float *x_d = to_device_bytes(x, sizeof x), *tf_d = device_alloc(sizeof tf), *bf_d = device_alloc(sizeof bf);
    tensorcore_convert_cuda(tf_d, bf_d, x_d, NX, 0);
    device_sync();
    copy_bytes(tf, tf_d, sizeof tf), copy_bytes(bf, bf_d, sizeof bf);
    wrong = 0;
    for (int i = 0; i < NX; i++) wrong += tf[i] != ref_round(x[i], 11, false) || bf[i] != ref_round(x[i], 8, true);
    printf("cuda tensor cores: TF32 and bf16 roundings of %d floats (%d ties each): %d wrong\n", NX, NX / 5, wrong);
    ck_assert_msg(!wrong, "TF32 (ties away) or bf16 (ties even) rounding: %d of %d differ", wrong, NX);
    device_free(m_d), device_free(out_d), device_free(in_d), device_free(got_d), device_free(sh_d);
    device_free(x_d), device_free(tf_d), device_free(bf_d);
}
END_TEST

// ---- the step's formulas, and the sampler -------------------------------------------------------

START_TEST(cuda_formulas) {
    check_adamw_formula(true);
    check_ema_formula(true);
    check_euler_formula(true);
}
END_TEST

// The sampler (train/sample.c: the DiT forward, the guided Euler steps) on the device against
// the host: a small DiT with random weights N(0, 0.1) (every path live, unlike the adaLN-Zero
// init; at 0.3 the steps amplify rounding 100-fold), 5 images of 4 classes (and the null class)
// in one pass of 3 steps, on one rank (MPI started in this process).
START_TEST(cuda_sampler) {
    Comm world;
    comm_init(&world, NULL, NULL);
    const DiTConfig c = {.input_size = 8, .patch_size = 2, .in_channels = 3, .hidden_size = 16,
                         .depth = 2, .num_heads = 2, .mlp_ratio = 2, .num_classes = 4,
                         .learn_sigma = true, .class_dropout_prob = 0.1};
    DiT m;
    dit_create(&m, &c);
    for (int i = 0; i < m.ps.n; i++) rng_fill_normal(m.ps.t[i]->data, m.ps.t[i]->size, 5, 1000 + i, 0, 0.1);
    int n = 5;
    const int64_t labels[5] = {0, 3, 1, 2, 0};
    size_t each = (size_t)c.in_channels * c.input_size * c.input_size;
    real *img[2] = {xmalloc(n * each * sizeof(real)), xmalloc(n * each * sizeof(real))};
    for (int device = 0; device < 2; device++) {
        SpOptions o = sp_options_default();
        o.cuda = device;
        SeqParallel sp;
        char why[512];
        ck_assert_msg(!sp_init(&sp, &world, 1, 0, &o, dit_tokens(&c), c.num_heads, why, sizeof why), "%s", why);
        Arena a = arena_create_on(device, sp_step_bytes(&sp, &c, 2 * n, false), 0);
        DiT dev, *w = dit_place(&m, &dev, device);
        sample_images(w, &sp, &a, labels, n, 3, 2.5, 7, img[device]);
        if (w != &m) dit_free(w);
        arena_destroy(&a);
        sp_free(&sp);
    }
    double err = normalized_error(img[1], img[0], n * each);
    printf("cuda %-24s n=%-8zu normalized error %.2e (tolerance %.0e, %s)\n", "sample_images", n * each,
           err, TOL, REAL_NAME);
    ck_assert_msg(err <= TOL, "sample_images: normalized error %.3e above %.0e", err, TOL);
    free(img[0]), free(img[1]);
    dit_free(&m);
    comm_finalize();
}
END_TEST

// ---- launcher shape checks (no device needed: they fail before any CUDA call) -------------------

START_TEST(cuda_launchers_check_sizes) {
    real x = 0;
    EXPECT_FATAL(add_forward_cuda(&x, &x, &x, 10, 0, 0), "b is empty");
    EXPECT_FATAL(add_backward_cuda(&x, &x, &x, 10, 0, 0), "b is empty");
    EXPECT_FATAL(layernorm_forward_cuda(&x, &x, &x, &x, 4, 0, (real)1e-6, 0), "bad shape");
    EXPECT_FATAL(layernorm_backward_cuda(&x, &x, &x, &x, &x, -1, 8, 0), "bad shape");
    EXPECT_FATAL(qk_norm_rope_forward_cuda(&x, &x, &x, &x, NULL, 4, 10, 4, 4, 0, 0, (real)1e-6, 0), "bad shape");
    EXPECT_FATAL(qk_norm_rope_forward_cuda(&x, &x, &x, NULL, &x, 4, 10, 0, 0, 5, 4, (real)1e-6, 0), "bad shape");
    EXPECT_FATAL(qk_norm_rope_forward_cuda(&x, &x, &x, &x, &x, 4, 30, 15, 15, 6, 4, (real)1e-6, 0), "bad shape");
    EXPECT_FATAL(adamw_update_cuda(&x, &x, &x, &x, 1, 1, 1, 1, 1, 1, 1, 0, 0),
                 "step counts from 1");
    EXPECT_FATAL(ema_update_cuda(&x, &x, 1, 1.5, 0), "outside [0, 1]");
    EXPECT_FATAL(linear_forward_cuda(&x, &x, &x, NULL, 4, 0, 4, 0), "bad shape");
    EXPECT_FATAL(modulate_forward_cuda(&x, &x, &x, &x, 0, 4, 4, 0), "bad shape");
    EXPECT_FATAL(slice_forward_cuda(&x, &x, 2, 8, 5, 4, 0), "columns [5, 9) of 8");
    EXPECT_FATAL(mse_forward_cuda(&x, &x, NULL, 1, 0, 0), "must be positive");
    EXPECT_FATAL(patch_gather_cuda(&x, &x, (ClipShape){1, 3, 1, 7, 8, 1, 2}, 0, 4, false, 0), "bad shape");
    EXPECT_FATAL(patch_gather_cuda(&x, &x, (ClipShape){1, 3, 5, 8, 8, 2, 2}, 0, 4, false, 0), "bad shape");
    EXPECT_FATAL(embedding_forward_cuda(&x, &x, NULL, 1, 0, 4, 0), "bad shape");
    EXPECT_FATAL(attention_forward_cuda(&x, &x, &x, &x, &x, &x, NULL, NO_SEGMENTS, 1, 4, 4, 1, ATTN_CUDA_MAX_DH + 1, 0),
                 "bad shape");
    EXPECT_FATAL(attention_backward_cuda(&x, &x, &x, &x, &x, &x, &x, &x, &x, &x, NULL, NO_SEGMENTS, 1, 0, 4, 1, 8, 0),
                 "bad shape");
}
END_TEST

// whether this machine has a GPU, asked in a child process: the tests run in forked children, and
// CUDA, once started, does not survive a fork
static bool have_gpu(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(device_count() > 0 ? 0 : 1);
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void select_gpu(void) {
    if (!device_in_use()) device_select(0);
}

Suite *cuda_suite(void) {
    const TTest *on_device[] = {cuda_add, cuda_gelu, cuda_silu, cuda_layernorm, cuda_adamw, cuda_linear,
                                cuda_adaln, cuda_slice, cuda_add_rows, cuda_euler_step, cuda_loss,
                                cuda_patch, cuda_embedding, cuda_attention, cuda_attention_tf32,
                                cuda_attention_bf16, cuda_attention_shared_memory_limit, cuda_attention_merge,
                                cuda_formulas, cuda_sampler, cuda_qknorm, cuda_tensor_cores, cuda_bf16};
    int n = sizeof on_device / sizeof on_device[0];
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda");
    tcase_add_test(tc, cuda_launchers_check_sizes);
    suite_add_tcase(s, tc);
    if (!have_gpu()) {
        printf("skipped: %d tests of the CUDA kernels against the CPU (no GPU on this machine)\n", n);
        return s;
    }
    // a case of each test, named by it: CK_RUN_CASE=cuda_layernorm runs one (make test's planted
    // kernel bugs run the test that must catch theirs)
    for (int i = 0; i < n; i++) {
        tc = tcase_create(on_device[i]->name);
        tcase_set_timeout(tc, 60); // first CUDA call in each forked test creates a context
        tcase_add_checked_fixture(tc, select_gpu, NULL);
        tcase_add_test(tc, on_device[i]);
        suite_add_tcase(s, tc);
    }
    return s;
}
#endif
