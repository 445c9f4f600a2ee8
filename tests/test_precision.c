// test_precision.c: --precision bf16 (layers/precision.c). The rounding against an independent
// definition (the nearer of the two bf16 values around x, ties to the even one), and the ops that
// round against float64 formulas of their rounded operands.
#include "../kernels/kernels.h"
#include "../layers/layers.h"
#include "testutil.h"
#include <float.h>
#include <math.h>

// The bf16 value nearest x, found by distances: lo the bf16 value toward zero from x (the float
// toward zero from x, its low 16 bits cleared), hi the next one away from zero; the nearer, or
// on a tie the one whose last bit is 0. |x| below the largest bf16 value.
static double nearest_bf16(double x) {
    if (!isfinite(x) || x == 0) return x;
    float f = (float)x;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    uint32_t lo_bits, hi_bits;
    memcpy(&lo_bits, &f, sizeof f);
    lo_bits &= 0xffff0000u, hi_bits = lo_bits + 0x10000u;
    float lo, hi;
    memcpy(&lo, &lo_bits, sizeof lo), memcpy(&hi, &hi_bits, sizeof hi);
    double below = fabs(x - lo), above = fabs(hi - x);
    if (below != above) return below < above ? lo : hi;
    return lo_bits & 0x10000u ? hi : lo;
}

// Values of every scale, with the ties of both parities and the values one float step beside
// them; n of them
static void rounding_cases(real *x, int n) {
    rng_fill_normal(x, (size_t)n, 77, 1, 0, 1);
    for (int i = 0; i < n; i++) {
        x[i] = (real)ldexp(x[i], i % 41 - 20);
        if (i % 4 == 0) { // a tie: a bf16 value and half its last place
            float f = (float)x[i];
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&f, &u, sizeof f);
            x[i] = i % 8 == 0 ? f : nextafterf(f, i % 16 == 4 ? 0.0f : INFINITY);
        }
    }
    x[0] = 0, x[1] = -0.0, x[2] = (real)INFINITY, x[3] = (real)-INFINITY;
}

START_TEST(bf16_rounding_is_to_the_nearest_even) {
    enum { N = 4000 };
    static real x[N], kernel[N];
    rounding_cases(x, N);
    round_bf16(kernel, x, N);
    int wrong = 0, ties = 0;
    for (int i = 0; i < N; i++) {
        double want = nearest_bf16(x[i]);
        ties += fabs(x[i] - real_to_bf16(x[i])) == fabs(want - x[i]) && i % 8 == 0;
        if (real_to_bf16(x[i]) != want || kernel[i] != want) {
            if (wrong++ < 5)
                printf("bf16 of %.9g: %.9g (kernel %.9g), the nearest even %.9g\n", (double)x[i],
                       (double)real_to_bf16(x[i]), (double)kernel[i], want);
        }
    }
    real nan = (real)NAN;
    ck_assert(isnan(real_to_bf16(nan)));
    printf("bf16 rounding: %d values (%d ties), %d wrong\n", N, ties, wrong);
    ck_assert_int_eq(wrong, 0);
    ck_assert_int_ge(ties, N / 8 - 1);
}
END_TEST

// y = x W^T + b with x and W rounded, in float64 (a, b: rows x k, n x k; out rows x n)
static void product(double *out, const double *a, const double *b, const real *bias, int rows, int n, int k) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < n; j++) {
            double s = bias ? bias[j] : 0;
            for (int c = 0; c < k; c++) s += a[i * k + c] * b[j * k + c];
            out[i * n + j] = s;
        }
}

static double worst(const real *got, const double *want, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    return w;
}

// A bf16 linear: the output and both gradients those of its rounded input and weight, in float;
// the bias and the output's gradient as they are. The same linear in fp32 departs from them by
// bf16's rounding (which shows the comparison can fail).
START_TEST(bf16_linear_computes_with_rounded_operands) {
    enum { R = 6, C = 37, O = 5 };
    Arena a = arena_create(1 << 20);
    double xr[R * C], wr[O * C], xt[C * R], dyt[O * R], y[R * O], dx[R * C], dw[O * C], wt[C * O];
    double worst_fp32 = 0;
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        Tape tp = tape_create(&a);
        tp.bf16 = bf16;
        Tensor *x = randn(&a, 1, 1, true, 2, (int[]){R, C}), *w = randn(&a, 2, 1, true, 2, (int[]){O, C});
        Tensor *b = randn(&a, 3, 1, true, 1, (int[]){O});
        Tensor *out = linear(&tp, x, w, b);
        real *dy = arena_alloc(&a, out->size * sizeof(real));
        rng_fill_normal(dy, out->size, 5, 5, 0, 1);
        backward_from(&tp, out, dy);
        for (int i = 0; i < R * C; i++) xr[i] = nearest_bf16(x->data[i]);
        for (int i = 0; i < O * C; i++) wr[i] = nearest_bf16(w->data[i]);
        for (int i = 0; i < R; i++)
            for (int c = 0; c < C; c++) xt[c * R + i] = xr[i * C + c];
        for (int i = 0; i < R; i++)
            for (int j = 0; j < O; j++) dyt[j * R + i] = dy[i * O + j];
        for (int j = 0; j < O; j++)
            for (int c = 0; c < C; c++) wt[c * O + j] = wr[j * C + c];
        double dyd[R * O];
        for (int i = 0; i < R * O; i++) dyd[i] = dy[i];
        product(y, xr, wr, b->data, R, O, C);  // x W^T + b
        product(dx, dyd, wt, NULL, R, C, O);   // dy W
        product(dw, dyt, xt, NULL, O, C, R);   // dy^T x
        double err = fmax(worst(out->data, y, R * O), fmax(worst(x->grad, dx, R * C), worst(w->grad, dw, O * C)));
        double db = 0;
        for (int j = 0; j < O; j++) {
            double s = 0;
            for (int i = 0; i < R; i++) s += dy[i * O + j];
            db = fmax(db, fabs(b->grad[j] - s));
        }
        printf("linear in %s against its bf16 operands in float64: worst %.2e (bias %.2e)\n",
               bf16 ? "bf16" : "fp32", err, db);
        if (bf16) ck_assert_double_lt(fmax(err, db), sizeof(real) == 8 ? 1e-13 : 2e-6);
        else worst_fp32 = err;
        tape_free(&tp);
    }
    ck_assert_double_gt(worst_fp32, 1e-4); // bf16's rounding shows: the comparison can fail
    arena_destroy(&a);
}
END_TEST

// A linear's input stored in 2 bytes (to_bf16_stored: GELU's output, N rows of C = 8192, which the
// linear unpacks 128 rows at a time, 3 blocks), against the same input rounded in place and kept in
// float (to_bf16_here: one GEMM): the stored values are the rounded ones (read from their bits
// here), the input's floats are freed, the output and the input's gradient the same bits, the
// weight's gradient (summed over the blocks) within float rounding
START_TEST(bf16_linear_of_a_stored_input) {
    enum { N = 300, C = 8192, O = 4 };
    Arena a = arena_create((size_t)N * C * sizeof(real) * 14); // two runs' x, its gradient, GELU's output
    real *y[2], *dx[2], *dw[2], *rounded = xmalloc((size_t)N * C * sizeof(real));
    for (int stored = 0; stored < 2; stored++) {
        Tape tp = tape_create(&a);
        tp.bf16 = true;
        Tensor *x = randn(&a, 7, 1, true, 2, (int[]){N, C}), *w = randn(&a, 8, 0.01, true, 2, (int[]){O, C});
        Tensor *g = gelu(&tp, x);
        size_t before = a.used;
        Tensor *h = stored ? to_bf16_stored(&tp, g) : to_bf16_here(&tp, g);
        if (!stored) memcpy(rounded, h->data, (size_t)N * C * sizeof(real));
        else {
            ck_assert(h->half && !h->data);
            ck_assert_uint_le(a.used, before - (size_t)N * C * sizeof(uint16_t)); // half its bytes freed
            for (size_t i = 0; i < h->size; i++) { // the bits of a float whose low 16 bits are zero
                uint32_t bits = (uint32_t)h->half[i] << 16;
                float v;
                memcpy(&v, &bits, sizeof v);
                ck_assert((real)v == rounded[i]);
            }
        }
        Tensor *out = linear(&tp, h, w, NULL);
        real *dy = arena_alloc(&a, out->size * sizeof(real));
        rng_fill_normal(dy, out->size, 9, 9, 0, 1);
        backward_from(&tp, out, dy);
        y[stored] = out->data, dx[stored] = x->grad, dw[stored] = w->grad;
        tape_free(&tp);
    }
    double *dw0 = xmalloc((size_t)O * C * sizeof(double));
    for (int i = 0; i < O * C; i++) dw0[i] = dw[0][i];
    double e = worst(dw[1], dw0, (size_t)O * C);
    printf("a linear's input stored in 2 bytes (3 blocks of rows): output and input gradient the same "
           "bits, weight gradient within %.1e\n", e);
    ck_assert(!memcmp(y[0], y[1], (size_t)N * O * sizeof(real)));
    ck_assert(!memcmp(dx[0], dx[1], (size_t)N * C * sizeof(real)));
    ck_assert_double_le(e, sizeof(real) == 8 ? 1e-13 : 1e-4);
    free(dw0), free(rounded);
    arena_destroy(&a);
}
END_TEST

// GELU of an input stored in 2 bytes (fc1's output under bf16): a block of its values unpacked at
// a time, 3 blocks here, against GELU of the same rounded values kept in float: the output and
// the input's gradient the same bits
START_TEST(bf16_gelu_of_a_stored_input) {
    enum { N = 2 * UNPACK_VALUES + 12345 };
    Arena a = arena_create((size_t)N * sizeof(real) * 12);
    real *y[2], *dx[2], *xs = NULL;
    for (int stored = 0; stored < 2; stored++) {
        Tape tp = tape_create(&a);
        tp.bf16 = true;
        Tensor *x = randn(&a, 11, 2, true, 1, (int[]){N});
        xs = x->data;
        Tensor *h = add(&tp, x, x); // a value that is not an input: its producer's output
        h = stored ? to_bf16_stored(&tp, h) : to_bf16_here(&tp, h);
        ck_assert(!stored || (h->half && !h->data));
        Tensor *out = gelu(&tp, h);
        real *dy = arena_alloc(&a, out->size * sizeof(real));
        rng_fill_normal(dy, out->size, 12, 12, 0, 1);
        backward_from(&tp, out, dy);
        y[stored] = out->data, dx[stored] = x->grad;
        tape_free(&tp);
    }
    double e = 0; // and GELU's formula (tanh form) of the rounded values, in the last block too
    for (int i = 0; i < N; i += 97) {
        double v = nearest_bf16(2 * xs[i]), g = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        e = fmax(e, fabs(y[1][i] - g));
    }
    printf("GELU of an input stored in 2 bytes (3 blocks): output and input gradient the same bits, "
           "output within %.1e of the formula\n", e);
    ck_assert_double_le(e, sizeof(real) == 8 ? 1e-12 : 1e-5);
    ck_assert(!memcmp(y[0], y[1], (size_t)N * sizeof(real)));
    ck_assert(!memcmp(dx[0], dx[1], (size_t)N * sizeof(real)));
    arena_destroy(&a);
}
END_TEST

// to_bf16: rounded values, the gradient handed through unchanged; nothing in an fp32 tape
START_TEST(to_bf16_rounds_and_passes_the_gradient) {
    Arena a = arena_create(1 << 20);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 4, 1, true, 2, (int[]){3, 11});
    ck_assert_ptr_eq(to_bf16(&tp, x), x);
    tp.bf16 = true;
    Tensor *y = to_bf16(&tp, x);
    real *dy = arena_alloc(&a, y->size * sizeof(real));
    rng_fill_normal(dy, y->size, 6, 6, 0, 1);
    backward_from(&tp, y, dy);
    int changed = 0;
    for (size_t i = 0; i < x->size; i++) {
        ck_assert(y->data[i] == nearest_bf16(x->data[i]));
        ck_assert(x->grad[i] == dy[i]);
        changed += y->data[i] != x->data[i];
    }
    ck_assert_int_gt(changed, (int)x->size / 2);
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

Suite *precision_suite(void) {
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, bf16_rounding_is_to_the_nearest_even);
    tcase_add_test(tc, bf16_linear_computes_with_rounded_operands);
    tcase_add_test(tc, bf16_linear_of_a_stored_input);
    tcase_add_test(tc, bf16_gelu_of_a_stored_input);
    tcase_add_test(tc, to_bf16_rounds_and_passes_the_gradient);
    suite_add_tcase(s, tc);
    return s;
}
