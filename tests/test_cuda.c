// test_cuda.c: device kernels against the CPU kernels, by normalized error. Skipped, saying so,
// when the build has no CUDA or the machine has no GPU.
#include <check.h>
#include <stdio.h>

#ifndef USE_CUDA
START_TEST(cuda_skipped) { printf("cuda: skipped (built without CUDA: no nvcc, or USE_CUDA=0)\n"); }
END_TEST
Suite *cuda_suite(void) {
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda");
    tcase_add_test(tc, cuda_skipped);
    suite_add_tcase(s, tc);
    return s;
}
#endif
