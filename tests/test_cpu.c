// test_cpu.c: the kernels at every vector width this CPU has (core/cpu.h) against the same
// kernels at 128 bits (SSE2, the code any x86-64 runs), and the attention tiles chosen from the
// cache. Products and sums are never contracted into FMAs, so every loop that is elementwise, or
// sums in a fixed order, must give the same bits at every width; only the attention's softmax sums
// are split across the vector's lanes, and there the outputs must agree within the bound of two
// summation orders of Tk positive terms: 2 Tk eps relative.
#include "../core/cpu.h"
#include "../kernels/kernels.h"
#include "testutil.h"
#include <float.h>
#include <math.h>

#ifdef REAL_F64
#define EPS DBL_EPSILON
#else
#define EPS FLT_EPSILON
#endif

enum { MAX_RESULTS = 32 };
typedef struct {
    const char *name[MAX_RESULTS];
    real *v[MAX_RESULTS];
    size_t n[MAX_RESULTS];
    bool exact[MAX_RESULTS]; // the same bits at every width, or within 2 Tk eps (attention)
    int count;
    double squares; // sum_squares
} Results;

// a buffer of n values for one kernel's output, filled from stream (outputs the kernel adds into
// start from these values)
static real *result(Results *r, const char *name, size_t n, bool exact, uint64_t stream) {
    ck_assert_int_lt(r->count, MAX_RESULTS);
    real *v = malloc(n * sizeof(real));
    rng_fill_normal(v, n, 7, stream, 0, 1);
    r->name[r->count] = name, r->v[r->count] = v, r->n[r->count] = n, r->exact[r->count] = exact;
    r->count++;
    return v;
}

static real *input(size_t n, uint64_t stream, double std) {
    real *v = malloc(n * sizeof(real));
    rng_fill_normal(v, n, 11, stream, 0, std);
    return v;
}

// Tk of the attention case: its keys, 300, over blocks of 128 (the last one partly masked)
enum { ATT_B = 2, ATT_TQ = 150, ATT_TK = 300, ATT_H = 2, ATT_DH = 24 };

// Every cloned kernel at `width` on the same inputs. Sizes are odd and past PAR_MIN, so the
// vector loops' tails and the threads both run.
static void run_kernels(int width, Results *r) {
    cpu_use(width, 0, 0);
    memset(r, 0, sizeof *r);
    const size_t n = 70001, inputs = 80000; // the larger cases read up to 77952 values of x and g
    real *x = input(inputs, 1, 2), *g = input(inputs, 2, 1);
    gelu_forward(result(r, "gelu forward", n, true, 10), x, n);
    gelu_backward(result(r, "gelu backward", n, true, 11), g, x, n);
    silu_forward(result(r, "silu forward", n, true, 12), x, n);
    silu_backward(result(r, "silu backward", n, true, 13), g, x, n);
    add_rows(result(r, "add_rows", 300 * 80, true, 14), 80, x, 77, 77, 300);

    const int N = 203, C = 384, B = 3, T = 37, D = 390; // D: not a multiple of a column block
    real *w = input((size_t)C * 77, 5, 0.1);
    linear_forward(result(r, "linear forward (bias)", (size_t)N * 77, true, 36), x, w, g, N, C, 77);
    linear_backward(NULL, NULL, result(r, "linear dbias", 77, true, 37), x, x, w, N, C, 77);
    real *mean = result(r, "layernorm mean", N, true, 15), *rstd = result(r, "layernorm rstd", N, true, 16);
    layernorm_forward(result(r, "layernorm forward", (size_t)N * C, true, 17), mean, rstd, x, N, C, 1e-6);
    layernorm_backward(result(r, "layernorm backward", (size_t)N * C, true, 18), g, x, mean, rstd, N, C);

    size_t btd = (size_t)B * T * D, bd = (size_t)B * D;
    real *shift = input(bd, 3, 0.5), *scale = input(bd, 4, 0.5);
    modulate_forward(result(r, "modulate forward", btd, true, 19), x, shift, scale, B, T, D);
    modulate_backward(result(r, "modulate dx", btd, true, 20), result(r, "modulate dshift", bd, true, 21),
                      result(r, "modulate dscale", bd, true, 22), g, x, scale, B, T, D);
    gated_add_forward(result(r, "gated_add forward", btd, true, 23), x, shift, g, B, T, D);
    gated_add_backward(result(r, "gated_add dx", btd, true, 24), result(r, "gated_add dgate", bd, true, 25),
                       result(r, "gated_add dy", btd, true, 26), g, shift, x, B, T, D);

    real *p = result(r, "adamw params", n, true, 27), *m = result(r, "adamw m", n, true, 28);
    real *v = result(r, "adamw v", n, true, 29);
    for (size_t i = 0; i < n; i++) v[i] = fabs(v[i]);
    for (int step = 1; step <= 2; step++) adamw_update(p, g, m, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5, step);
    ema_update(result(r, "ema", n, true, 30), x, n, 0.9999);
    r->squares = sum_squares(x, n);

    const int Da = ATT_H * ATT_DH, bq = 64, bk = 128;
    size_t nq = (size_t)ATT_B * ATT_TQ * Da, nk = (size_t)ATT_B * ATT_TK * Da;
    uint8_t mask[ATT_TK];
    for (int j = 0; j < ATT_TK; j++) mask[j] = j % 7 != 3 && j < ATT_TK - 5;
    real *scratch = malloc(attention_tiled_scratch_count(bq, bk, ATT_DH, kernel_threads()) * sizeof(real));
    real *o = result(r, "attention forward", nq, false, 31);
    real *lse = result(r, "attention lse", (size_t)ATT_B * ATT_H * ATT_TQ, false, 32);
    attention_forward_tiled(o, lse, scratch, x, x + nq, x + nq + nk, mask, NO_SEGMENTS, ATT_B,
                            ATT_TQ, ATT_TK, ATT_H, ATT_DH, bq, bk);
    attention_backward_tiled(result(r, "attention dq", nq, false, 33), result(r, "attention dk", nk, false, 34),
                             result(r, "attention dv", nk, false, 35), scratch, g, o, lse, x, x + nq,
                             x + nq + nk, mask, NO_SEGMENTS, ATT_B, ATT_TQ, ATT_TK, ATT_H, ATT_DH,
                             bq, bk);
    free(scratch), free(x), free(g), free(shift), free(scale), free(w);
}

static void free_results(Results *r) {
    for (int i = 0; i < r->count; i++) free(r->v[i]);
}

START_TEST(kernels_agree_across_widths) {
    static const int widths[] = {256, 512};
    Results base, at;
    run_kernels(128, &base);
    int compared = 0;
    double worst = 0; // attention's largest relative difference
    for (int w = 0; w < 2; w++) {
        if (widths[w] > cpu_plan()->widest) continue;
        run_kernels(widths[w], &at);
        double tol = 2.0 * ATT_TK * EPS;
        for (int i = 0; i < base.count; i++) {
            double diff = 0, norm = 0;
            for (size_t j = 0; j < base.n[i]; j++) {
                double d = (double)at.v[i][j] - base.v[i][j];
                diff += d * d, norm += (double)base.v[i][j] * base.v[i][j];
            }
            double rel = sqrt(diff / (norm > 0 ? norm : 1));
            if (base.exact[i])
                ck_assert_msg(!memcmp(at.v[i], base.v[i], base.n[i] * sizeof(real)),
                              "%s: %d-bit vectors differ from 128-bit ones (relative %.3g), where "
                              "the bits must be the same", base.name[i], widths[w], rel);
            else {
                worst = fmax(worst, rel);
                ck_assert_msg(rel <= tol, "%s: %d-bit vectors differ from 128-bit ones by %.3g "
                              "relative, over 2 Tk eps = %.3g", base.name[i], widths[w], rel, tol);
            }
        }
        ck_assert_msg(at.squares == base.squares, "sum_squares: %d-bit %.17g, 128-bit %.17g",
                      widths[w], at.squares, base.squares);
        free_results(&at);
        compared++;
    }
    if (!compared) // make test's summary counts the line as a skip
        printf("skipped: the kernels at vector widths wider than 128 bits (this CPU has none)\n");
    else
        printf("kernels at %d vector width%s wider than 128 bits: the same bits; attention within "
               "%.2g relative, bound 2 Tk eps = %.2g (this CPU's widest: %d-bit)\n", compared,
               compared == 1 ? "" : "s", worst, 2.0 * ATT_TK * EPS, cpu_plan()->widest);
    free_results(&base);
}
END_TEST

// The tiles for the two machines measured (issue 19): on AMD EPYC Zen 4 (1 MiB L2 per core)
// 128 x 256 were the fastest of make bench's three; on Zen 3 (512 KiB) 64 x 128 ran 1.15x faster
// than 128 x 256. A cache too small for 16 x 32 keeps the smallest; an unknown one the default.
START_TEST(tiles_follow_the_l2_cache) {
    static const struct { long l2; int bq, bk; } cases[] = {
        {1 << 20, 128, 256}, {512 << 10, 64, 128}, {256 << 10, 32, 64}, {32 << 10, 16, 32}, {0, 128, 256}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int bq, bk;
        cpu_tiles_for(cases[i].l2, &bq, &bk);
        ck_assert_msg(bq == cases[i].bq && bk == cases[i].bk, "L2 of %ld bytes: tiles %d x %d, "
                      "expected %d x %d", cases[i].l2, bq, bk, cases[i].bq, cases[i].bk);
    }
}
END_TEST

Suite *cpu_suite(void) {
    Suite *s = suite_create("cpu");
    TCase *tc = tcase_create("widths");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, kernels_agree_across_widths);
    tcase_add_test(tc, tiles_follow_the_l2_cache);
    suite_add_tcase(s, tc);
    return s;
}
