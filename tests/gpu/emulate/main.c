// main.c: the device-vs-CPU suite of tests/test_cuda.c against the emulated device.
#include <check.h>
#include <stdlib.h>

Suite *cuda_suite(void);

int main(void) {
    SRunner *sr = srunner_create(cuda_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
