// test_main.c: runs every Check suite; exit status is non-zero when any test fails.
#include "../core/arena.h"
#include "../core/blas.h"
#include "../core/cpu.h"
#include "../core/real.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

Suite *core_suite(void);
Suite *safetensors_suite(void);
Suite *autograd_suite(void);
Suite *ops_suite(void);
Suite *attention_suite(void);
Suite *cuda_suite(void);
Suite *train_suite(void);
Suite *data_suite(void);
Suite *exact_suite(void);
Suite *cpu_suite(void);
Suite *precision_suite(void);

int main(void) {
    arena_poison = true; // every op that takes empty memory must write all of it (arena.h)
    char cpu[256];
    printf("real type: %s; GEMM: %s\nCPU: %s\n", REAL_NAME, blas_setup(), cpu_text(cpu, sizeof cpu));
    SRunner *sr = srunner_create(core_suite());
    srunner_add_suite(sr, safetensors_suite());
    srunner_add_suite(sr, autograd_suite());
    srunner_add_suite(sr, ops_suite());
    srunner_add_suite(sr, attention_suite());
    srunner_add_suite(sr, cuda_suite());
    srunner_add_suite(sr, train_suite());
    srunner_add_suite(sr, data_suite());
    srunner_add_suite(sr, exact_suite());
    srunner_add_suite(sr, cpu_suite());
    srunner_add_suite(sr, precision_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
