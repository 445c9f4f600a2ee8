// fuzz_resume.c: the flag parser's --resume path (train_config_parse, run/config.c) on arbitrary
// run folders: the input is written as DIR/config.json, which --resume DIR reads to take the
// run's settings, then the flags given on the command line are checked against them. Two command
// lines per input: --resume DIR alone, and with flags that override or contradict the run.
#include "fuzz.h"
#include <sys/stat.h>

static char dir[512], out[512];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    fuzz_path(dir, "run");
    fuzz_path(out, "elsewhere");
    if (mkdir(dir, 0700)) {
        perror(dir);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_file(path, "run/config.json", data, size);
    fuzz_train_flags(2, (char *[]){"--resume", dir, NULL});
    fuzz_train_flags(12, (char *[]){"--resume", dir, "--hidden", "32", "--seed", "7", "--steps", "9", "--ema",
                         "0", "--out", out, NULL});
    return 0;
}
