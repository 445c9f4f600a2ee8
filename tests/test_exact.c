// test_exact.c: the order-independent sums of --exact (core/exact.h) against an independent
// integer sum, and their independence of order and grouping.
#include "../core/exact.h"
#include "testutil.h"

enum { TERMS = 4000, ELEMS = 3 };

// Terms of float values m 2^e with |m| < 2^23 and e in [-63, -13]: multiples of 2^-63 below 2^10,
// so their sum is exact in 128-bit integers of unit 2^-63 (the independent reference)
static void terms(double *x, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        double m = (double)(rng_u32(seed, 77, 2 * (uint64_t)i) % (1u << 24)) - (1 << 23);
        x[i] = (double)(float)ldexp(m, (int)(rng_u32(seed, 77, 2 * (uint64_t)i + 1) % 51) - 63);
    }
}

static double reference(const double *x, int n) {
    __int128 s = 0;
    for (int i = 0; i < n; i++) s += (__int128)ldexp(x[i], 63);
    return ldexp((double)s, -63);
}

START_TEST(exact_sum_is_the_rounded_true_sum) {
    static double x[TERMS];
    for (uint64_t seed = 1; seed <= 5; seed++) {
        terms(x, TERMS, seed);
        int64_t mem[EXACT_LIMBS + 2];
        ExactSum s = exact_view(mem, 1);
        exact_add_double(&s, 0, x, 0); // no terms: zero
        double got;
        exact_result_double(&got, &s, 0, 1);
        ck_assert(got == 0);
        for (int i = 0; i < TERMS; i++) exact_add_double(&s, 0, x + i, 1);
        exact_result_double(&got, &s, 0, 1);
        double want_terms;
        exact_clear(&s);
        for (int i = 0; i < TERMS; i++) { // the real path: the double front, and limbs past it
            real r = (real)x[i];
            exact_add(&s, 0, &r, 1);
        }
        exact_result_double(&want_terms, &s, 0, 1);
        ck_assert_msg(got == want_terms, "seed %llu: reals sum to %.17g, doubles to %.17g",
                      (unsigned long long)seed, want_terms, got);
        static real r[TERMS]; // and all of them in one call: one element's series
        for (int i = 0; i < TERMS; i++) r[i] = (real)x[i];
        exact_clear(&s);
        exact_add_terms(&s, 0, r, 1, TERMS, 1);
        exact_result_double(&want_terms, &s, 0, 1);
        ck_assert_msg(got == want_terms, "seed %llu: reals in one call sum to %.17g, doubles to %.17g",
                      (unsigned long long)seed, want_terms, got);
        double want = reference(x, TERMS);
        ck_assert_msg(got == want, "seed %llu: exact sum %.17g, integer reference %.17g",
                      (unsigned long long)seed, got, want);
    }
}
END_TEST

// Any order, and any split into partial sums that merge (or add as sums on their own, as a
// reduction over ranks does), gives the same bits, while a plain double sum does not
START_TEST(exact_sum_ignores_order_and_grouping) {
    static double x[TERMS], y[TERMS];
    terms(x, TERMS, 9);
    for (int i = 0; i < TERMS; i++) x[i] *= i % 7 == 0 ? 0x1p40 : 1; // wide dynamic range, still floats
    static int64_t mem[4][(EXACT_LIMBS + 2) * ELEMS];
    ExactSum whole = exact_view(mem[0], ELEMS);
    for (int e = 0; e < ELEMS; e++)
        for (int i = 0; i < TERMS; i++) exact_add_double(&whole, (size_t)e, x + i, 1);
    double want[ELEMS], plain_first = 0;
    exact_result_double(want, &whole, 0, ELEMS);
    for (int i = 0; i < TERMS; i++) plain_first += x[i];
    bool plain_differed = false;
    for (uint64_t trial = 0; trial < 20; trial++) {
        for (int i = 0; i < TERMS; i++) y[i] = x[i]; // a random permutation
        for (int i = TERMS - 1; i > 0; i--) {
            int j = (int)(rng_u32(trial, 78, (uint64_t)i) % (uint32_t)(i + 1));
            double t = y[i];
            y[i] = y[j], y[j] = t;
        }
        double plain = 0;
        for (int i = 0; i < TERMS; i++) plain += y[i];
        plain_differed |= plain != plain_first;
        // three parts of random sizes: part 0 merged into part 1, part 2 added as a reduction would
        int cut1 = (int)(trial * 97 % TERMS), cut2 = cut1 + (TERMS - cut1) / 2;
        ExactSum p[3] = {exact_view(mem[1], ELEMS), exact_view(mem[2], ELEMS), exact_view(mem[3], ELEMS)};
        // element 0 by doubles one at a time, the others as reals (float32 terms are floats), in
        // groups of up to 5 terms through the exact double front
        for (int i = 0; i < TERMS; i++) exact_add_double(&p[i < cut1 ? 0 : i < cut2 ? 1 : 2], 0, y + i, 1);
        for (int i = 0; i < TERMS;) {
            int part = i < cut1 ? 0 : i < cut2 ? 1 : 2, end = part == 0 ? cut1 : part == 1 ? cut2 : TERMS;
            int count = end - i < 5 ? end - i : 5;
            real r[5][ELEMS - 1];
            for (int k = 0; k < count; k++)
                for (int e = 0; e < ELEMS - 1; e++) r[k][e] = (real)y[i + k];
            exact_add_terms(&p[part], 1, r[0], ELEMS - 1, count, ELEMS - 1);
            i += count;
        }
        exact_merge(&p[1], 0, &p[0]);
        if (trial % 2) exact_flush(&p[1]), exact_flush(&p[2]); // the parts' limbs' way, else fronts where they can
        ExactPart a[ELEMS], b[ELEMS];
        exact_parts(a, &p[1], 0, NULL, ELEMS), exact_parts(b, &p[2], 0, NULL, ELEMS);
        exact_parts_add(a, a, b, ELEMS);
        exact_put_parts(&p[1], 0, NULL, a, ELEMS);
        double got[ELEMS];
        exact_result_double(got, &p[1], 0, ELEMS);
        for (int e = 0; e < ELEMS; e++)
            ck_assert_msg(!memcmp(&got[e], &want[e], sizeof got[e]),
                          "trial %llu: %.17g differs from %.17g", (unsigned long long)trial, got[e], want[e]);
    }
    ck_assert_msg(plain_differed, "the terms are too easy: plain double sums never differed");
}
END_TEST

// Terms with bits below the window: 2^13 twice beside 2^100 and -2^100, whose window ends at 2^14.
// Each 2^13 alone is dropped, so the sum is 0; in the float64 build no order lets their carry in
// (a double front would, when the two shared one). The float32 build promises this only within
// 2^40 of the largest (exact.h).
START_TEST(exact_sum_drops_bits_below_the_window_in_any_order) {
#ifdef REAL_F64
    const real orders[2][4] = {{0x1p100, 0x1p13, -0x1p100, 0x1p13}, {0x1p13, 0x1p13, 0x1p100, -0x1p100}};
    for (int k = 0; k < 2; k++) {
        int64_t mem[EXACT_LIMBS + 2];
        ExactSum s = exact_view(mem, 1);
        exact_add_terms(&s, 0, orders[k], 1, 4, 1);
        double got;
        exact_result_double(&got, &s, 0, 1);
        ck_assert_msg(got == 0, "order %d: 2^100 - 2^100 + 2^13 + 2^13 summed to %a, not 0", k, got);
    }
#endif
}
END_TEST

START_TEST(exact_sum_of_nonfinite_is_nan) {
    int64_t mem[(EXACT_LIMBS + 2) * 2];
    ExactSum s = exact_view(mem, 2);
    real x[2] = {1, (real)INFINITY}, out[2];
    exact_add(&s, 0, x, 2);
    exact_add(&s, 0, x, 1);
    exact_result(out, &s, 0, 2);
    ck_assert(out[0] == 2 && isnan(out[1]));
}
END_TEST

Suite *exact_suite(void) {
    Suite *s = suite_create("exact");
    TCase *tc = tcase_create("sums");
    tcase_add_test(tc, exact_sum_is_the_rounded_true_sum);
    tcase_add_test(tc, exact_sum_ignores_order_and_grouping);
    tcase_add_test(tc, exact_sum_drops_bits_below_the_window_in_any_order);
    tcase_add_test(tc, exact_sum_of_nonfinite_is_nan);
    suite_add_tcase(s, tc);
    return s;
}
