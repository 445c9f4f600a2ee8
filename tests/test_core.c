// test_core.c: the GEMM kernels chosen by CPU features, arena accounting and overflow, Philox known answers and order independence,
// tensor views and shape errors, the float32 exp, atomic file groups and deferred interrupts.
#include "testutil.h"
#include "../core/safefile.h"
#include "../core/blas.h"
#include "../layers/dit.h"
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(arena_peak_is_exact) {
    Arena a = arena_create(4096);
    ck_assert_uint_eq(a.cap, 4096);
    arena_alloc(&a, 1);   // rounds up to 64
    arena_alloc(&a, 64);  // 64
    arena_alloc(&a, 100); // 128
    ck_assert_uint_eq(a.used, 256);
    ck_assert_uint_eq(a.peak, 256);
    size_t mark = arena_mark(&a);
    arena_alloc(&a, 1000); // 1024
    ck_assert_uint_eq(a.peak, 1280);
    arena_release(&a, mark);
    ck_assert_uint_eq(a.used, 256);
    arena_reset(&a);
    arena_alloc(&a, 200); // 256: below the old peak
    ck_assert_uint_eq(a.used, 256);
    ck_assert_uint_eq(a.peak, 1280);
    arena_reset_peak(&a);
    ck_assert_uint_eq(a.peak, 256);
    arena_destroy(&a);
}
END_TEST

START_TEST(arena_is_aligned_and_zeroed) {
    Arena a = arena_create(1024);
    unsigned char *p = arena_alloc(&a, 10);
    memset(p, 0xff, 10);
    arena_reset(&a);
    unsigned char *q = arena_alloc(&a, 10);
    ck_assert_ptr_eq(p, q);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(q[i], 0);
    ck_assert_uint_eq((uintptr_t)arena_alloc(&a, 3) % ARENA_ALIGN, 0);
    arena_destroy(&a);
}
END_TEST

// The tests run poisoned (test_main.c): empty memory reads as NaN until written, zeroed as 0.
START_TEST(arena_empty_is_poisoned_in_tests) {
    ck_assert(arena_poison);
    Arena a = arena_create(1024);
    Tensor *e = tensor_empty(&a, 2, 3, 5), *z = tensor_new(&a, 1, 7);
    for (size_t i = 0; i < e->size; i++) ck_assert(isnan(e->data[i]));
    for (size_t i = 0; i < z->size; i++) ck_assert(z->data[i] == 0);
    arena_destroy(&a);
}
END_TEST

START_TEST(arena_overflow_names_sizes) {
    Arena a = arena_create(1024);
    arena_alloc(&a, 64);
    EXPECT_FATAL(arena_alloc(&a, 1000), "need 1024 bytes but only 960 of 1024 are available");
    arena_destroy(&a);
}
END_TEST

// Known-answer vectors of the Random123 distribution (tests/kat_vectors, "philox4x32 10").
START_TEST(philox_known_answers) {
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        philox4x32(kat[v], kat[v] + 4, out);
        for (int i = 0; i < 4; i++) ck_assert_uint_eq(out[i], kat[v][6 + i]);
    }
}
END_TEST

START_TEST(rng_is_order_independent) {
    enum { N = 1000 };
    static double fwd[N];
    for (int i = 0; i < N; i++) fwd[i] = rng_normal(42, 7, i);
    for (int i = N - 1; i >= 0; i--) ck_assert(rng_normal(42, 7, i) == fwd[i]);
    for (int k = 0; k < N; k++) { // a scattered order
        int i = (k * 389) % N;
        ck_assert(rng_normal(42, 7, i) == fwd[i]);
    }
    real buf[10];
    rng_fill_normal(buf, 10, 42, 7, 500, 1.0); // a fill at an offset sees the same values
    for (int i = 0; i < 10; i++) ck_assert(buf[i] == (real)fwd[500 + i]);
    ck_assert(rng_normal(43, 7, 0) != fwd[0]); // seed and stream both matter
    ck_assert(rng_normal(42, 8, 0) != fwd[0]);
}
END_TEST

// Moments against the formulas: U(0,1) has mean 1/2, variance 1/12; N(0,1) mean 0, variance 1.
START_TEST(rng_moments) {
    enum { N = 200000 };
    double su = 0, su2 = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
    for (int i = 0; i < N; i++) {
        double u = rng_uniform(1, 2, i), n = rng_normal(1, 3, i);
        su += u, su2 += u * u, sn += n, sn2 += n * n;
        umin = fmin(umin, u), umax = fmax(umax, u);
    }
    ck_assert(umin > 0 && umax < 1);
    ck_assert_double_eq_tol(su / N, 0.5, 0.005);
    ck_assert_double_eq_tol(su2 / N - (su / N) * (su / N), 1.0 / 12, 0.002);
    ck_assert_double_eq_tol(sn / N, 0.0, 0.01);
    ck_assert_double_eq_tol(sn2 / N, 1.0, 0.01);
}
END_TEST

START_TEST(tensor_views_share_storage) {
    Arena a = arena_create(1 << 16);
    Tensor *t = tensor_new(&a, 3, 4, 2, 3);
    for (size_t i = 0; i < t->size; i++) t->data[i] = (real)i;
    Tensor *m = tensor_reshape(&a, t, 2, (int[]){8, 3});
    ck_assert_ptr_eq(m->data, t->data);
    real *g = tensor_grad(&a, m); // a view's gradient is its base's
    ck_assert_ptr_eq(g, t->grad);
    EXPECT_FATAL(tensor_reshape(&a, t, 2, (int[]){5, 5}), "cannot reshape [4, 2, 3]");
    EXPECT_FATAL(tensor_new(&a, 2, 3, 0), "dim 1 must be positive");
    EXPECT_FATAL(tensor_check_shape(t, "x", 2, (int[]){4, 6}), "x has shape [4, 2, 3] but [4, 6]");
    arena_destroy(&a);
}
END_TEST

#ifndef REAL_F64
// the float32 build's own exp (core/real.h) against libm's exp in double, over 1.8 million points
// of [-90, 90] and the special values; rtanh, built on it, against tanh
START_TEST(rexp_matches_libm) {
    double worst = 0, worst_tanh = 0;
    for (int i = 0; i <= 1800000; i++) {
        float x = -90.0f + (float)i * 1e-4f;
        double ref = exp((double)x), got = rexp(x);
        if (x >= -86.5f && x <= 88.7f) worst = fmax(worst, fabs(got - ref) / ref);
        else if (x < -86.5f) ck_assert_msg(got == 0, "rexp(%g) = %g, expected 0", x, got);
        else if (x > 88.73f) ck_assert_msg(isinf(got), "rexp(%g) = %g, expected +inf", x, got);
        if (fabsf(x) < 20) worst_tanh = fmax(worst_tanh, fabs(rtanh(x) - tanh((double)x)));
    }
    ck_assert_msg(worst < 1.2e-7, "rexp relative error %.3g (1 ulp is 1.19e-7)", worst);
    ck_assert_msg(worst_tanh < 2e-7, "rtanh absolute error %.3g", worst_tanh);
    ck_assert(isnan(rexp(NAN)) && isinf(rexp(INFINITY)) && rexp(-INFINITY) == 0 && rexp(0) == 1);
}
END_TEST
#endif

static bool exists(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    SafeFile a;
    ck_assert_msg(!safefile_open(&a, path, err, sizeof err), "%s", err);
    fputs(text, a.f);
    ck_assert_msg(!safefile_commit(&a, true, err, sizeof err), "%s", err);
}

// a group's files appear together at its end, and an interrupt during the group takes effect only
// after they are all in place
START_TEST(safefile_group_publishes_together) {
    char dir[256], err[256];
    test_tmpdir(dir, sizeof dir);
    safefile_group_begin();
    write_file(dir, "a", "one");
    write_file(dir, "b", "two");
    ck_assert(!exists(dir, "a") && !exists(dir, "b") && exists(dir, "a.tmp") && exists(dir, "b.tmp"));
    ck_assert(!safefile_group_end(err, sizeof err));
    ck_assert(exists(dir, "a") && exists(dir, "b") && !exists(dir, "a.tmp") && !exists(dir, "b.tmp"));
    write_file(dir, "c", "alone"); // outside a group a file is in place at its commit
    ck_assert(exists(dir, "c"));
    pid_t pid = fork();
    if (pid == 0) { // SIGTERM while a group is open: the child must finish the group, then die
        signal(SIGTERM, SIG_DFL); // the test harness handles SIGTERM itself; a program does not
        safefile_group_begin();
        write_file(dir, "d", "three");
        raise(SIGTERM);
        write_file(dir, "e", "four");
        if (safefile_group_end(err, sizeof err)) _exit(3);
        _exit(0); // not reached when the deferred SIGTERM is delivered
    }
    int status;
    ck_assert(waitpid(pid, &status, 0) == pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "the child was not ended by "
                  "the deferred SIGTERM (status %d)", status);
    ck_assert(exists(dir, "d") && exists(dir, "e") && !exists(dir, "d.tmp") && !exists(dir, "e.tmp"));
    test_rm_rf(dir);
}
END_TEST

static void plain_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static bool holds(const char *dir, const char *name, const char *text) {
    char path[512], buf[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, sizeof buf, f) && !strcmp(buf, text);
    fclose(f);
    return ok;
}

// What a kill leaves, recovered: a committed group (its manifest in place) killed between renames
// is finished; temporaries of a group that never committed, and stray ones, are removed
START_TEST(safefile_recover_finishes_or_rolls_back) {
    char dir[256], err[256];
    int finished, removed;
    test_tmpdir(dir, sizeof dir);
    plain_file(dir, "a", "old"), plain_file(dir, "b", "old"); // step 1's files
    plain_file(dir, "a.tmp", "new"), plain_file(dir, "b.tmp", "new");
    plain_file(dir, SAFEFILE_MANIFEST, "a.tmp a\nb.tmp b\n");
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/a.tmp", dir), snprintf(to, sizeof to, "%s/a", dir);
    ck_assert(!rename(from, to)); // killed after the first rename
    ck_assert(!safefile_recover(dir, &finished, &removed, err, sizeof err));
    ck_assert_int_eq(finished, 1);
    ck_assert(holds(dir, "a", "new") && holds(dir, "b", "new") && !exists(dir, SAFEFILE_MANIFEST));
    plain_file(dir, "a.tmp", "newer"), plain_file(dir, "c.tmp", "stray"); // never committed
    ck_assert(!safefile_recover(dir, &finished, &removed, err, sizeof err));
    ck_assert_int_eq(finished, 0);
    ck_assert_int_eq(removed, 2);
    ck_assert(holds(dir, "a", "new") && !exists(dir, "a.tmp") && !exists(dir, "c.tmp"));
    plain_file(dir, SAFEFILE_MANIFEST, "../../etc/passwd x\n"); // a manifest names folder members only
    ck_assert_int_eq(safefile_recover(dir, &finished, &removed, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is not a save manifest"), "%s", err);
    snprintf(from, sizeof from, "%s/%s", dir, SAFEFILE_MANIFEST);
    remove(from);
    // a group in progress leaves its manifest only between commit and the last rename
    safefile_group_begin();
    write_file(dir, "d", "one");
    ck_assert(!exists(dir, SAFEFILE_MANIFEST));
    ck_assert(!safefile_group_end(err, sizeof err));
    ck_assert(exists(dir, "d") && !exists(dir, SAFEFILE_MANIFEST));
    test_rm_rf(dir);
}
END_TEST

// OpenBLAS's kernels are chosen by instruction set where its own detection falls short
START_TEST(blas_kernels_by_cpu_features) {
    ck_assert_str_eq(blas_choice("Prescott", BLAS_ISA_AVX512, false), "SkylakeX");
    ck_assert_str_eq(blas_choice("Prescott", BLAS_ISA_AVX512_BF16, false), "Cooperlake");
    ck_assert_str_eq(blas_choice("Sandybridge", BLAS_ISA_AVX2, false), "Haswell");
    ck_assert_ptr_null(blas_choice("Prescott", BLAS_ISA_AVX512, true));        // the user's choice
    ck_assert_ptr_null(blas_choice("Cooperlake", BLAS_ISA_AVX512_BF16, false)); // already right
    ck_assert_ptr_null(blas_choice("Zen", BLAS_ISA_AVX2, false));
    ck_assert_ptr_null(blas_choice("SapphireRapids", BLAS_ISA_AVX512, false)); // newer than the table
    ck_assert_ptr_null(blas_choice("Prescott", BLAS_ISA_NEW, false));           // not x86-64
    // the switch itself (core/blas.c calls OpenBLAS internals, not its public API: this fails
    // when an OpenBLAS changes them): to the oldest kernels, to those blas_setup would choose for
    // this CPU, and back, with the same products
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "gotoblas_dynamic_quit" : "gotoblas_dynamic_init";
        ck_assert_msg(dlsym(RTLD_DEFAULT, name), "%sno longer exports %s, which core/blas.c "
                      "switches kernels with; adapt blas_use_core", &OPENBLAS_VERSION[1], name);
    }
    char before[64];
    snprintf(before, sizeof before, "%s", openblas_get_corename());
    const char *cores[] = {"Prescott", blas_core_for(blas_cpu_level()), before};
    bool env_set = getenv("OPENBLAS_CORETYPE");
    enum { n = 96 };
    static real a[n * n], c[3][n * n];
    rng_fill_normal(a, n * n, 1, 1, 0, 1);
    for (int k = 0; k < 3; k++) {
        ck_assert(blas_use_core(cores[k]));
        ck_assert_msg(!strcasecmp(openblas_get_corename(), cores[k]), "%sruns %s kernels after "
                      "blas_use_core(\"%s\"): its kernel switch changed; adapt core/blas.c",
                      &OPENBLAS_VERSION[1], openblas_get_corename(), cores[k]);
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, a, n, 0, c[k], n);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n * n; i++) ck_assert(fabs(c[k][i] - c[2][i]) <= 1e-4 * (1 + fabs(c[2][i])));
    if (!env_set) unsetenv("OPENBLAS_CORETYPE");
}
END_TEST

// The bf16 line names the bf16 instructions the kernel says the CPU has (/proc/cpuinfo's flags,
// read here apart from the program's cpuid), and says why they do not run the products
START_TEST(bf16_line_names_the_cpus_instructions) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return; // not Linux: nothing independent to compare with
    char line[8192], text[256];
    bool avx512 = false, amx = false;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            avx512 = strstr(line, " avx512_bf16") != NULL, amx = strstr(line, " amx_bf16") != NULL;
            break;
        }
    fclose(f);
    blas_bf16_text(text, sizeof text);
    printf("bf16: %s\n", text);
    ck_assert(strstr(text, "float32 GEMMs of bf16-rounded operands") == text);
    ck_assert_msg((strstr(text, "AVX512-BF16") != NULL) == avx512, "%s (cpuinfo: avx512_bf16 %d)", text, avx512);
    ck_assert_msg((strstr(text, "AMX-BF16") != NULL) == amx, "%s (cpuinfo: amx_bf16 %d)", text, amx);
    ck_assert((strstr(text, "sbgemm") != NULL) == (avx512 || amx));
}
END_TEST

// Random streams cannot collide: the named ones lie below STREAM_NAMED_END, and the parameter
// streams of the largest model the flags allow (the most blocks) lie above them without wrapping
START_TEST(rng_streams_are_disjoint) {
    DiTConfig c = {.input_size = 2, .patch_size = 1, .in_channels = 1, .hidden_size = 4,
                   .depth = DIT_MAX_DEPTH, .num_heads = 1, .mlp_ratio = 1, .num_classes = 1,
                   .class_dropout_prob = 0.5};
    DiT m;
    dit_layout(&m, &c);
    printf("random streams: %d named, %d parameter tensors at most (depth %d)\n",
           STREAM_NAMED_END - 1, m.ps.n, DIT_MAX_DEPTH);
    ck_assert_uint_le(STREAM_NAMED_END, STREAM_PARAM(0));
    ck_assert_uint_lt((uint64_t)m.ps.n, STREAM_PARAM_MAX);
    ck_assert_uint_gt(STREAM_PARAM(m.ps.n - 1), STREAM_PARAM(0));
    // the old scheme (parameter i on stream i, data from 101) failed here from depth 10 on
    ck_assert_uint_gt((uint64_t)m.ps.n, 101);
    dit_free(&m);
}
END_TEST

Suite *core_suite(void) {
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, blas_kernels_by_cpu_features);
    tcase_add_test(tc, bf16_line_names_the_cpus_instructions);
    tcase_add_test(tc, rng_streams_are_disjoint);
    tcase_add_test(tc, arena_peak_is_exact);
    tcase_add_test(tc, arena_is_aligned_and_zeroed);
    tcase_add_test(tc, arena_empty_is_poisoned_in_tests);
    tcase_add_test(tc, arena_overflow_names_sizes);
    tcase_add_test(tc, philox_known_answers);
    tcase_add_test(tc, rng_is_order_independent);
    tcase_add_test(tc, rng_moments);
    tcase_add_test(tc, tensor_views_share_storage);
    tcase_add_test(tc, safefile_group_publishes_together);
    tcase_add_test(tc, safefile_recover_finishes_or_rolls_back);
#ifndef REAL_F64
    tcase_add_test(tc, rexp_matches_libm);
#endif
    suite_add_tcase(s, tc);
    return s;
}
