// fuzz_flags.c: the training flag parser (train_config_parse, run/config.c, with the helpers of
// run/flags.c) on arbitrary command lines: the input split at NUL bytes into at most 64
// arguments. Each command line either parses into a valid configuration, whose text (the rank
// check's line) can be made, or stops with a usage error.
#include "fuzz.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = xmalloc(size + 1), *args[MAX_ARGS + 1];
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i += strlen(buf + i) + 1) args[argc++] = buf + i;
    args[argc] = NULL;
    fuzz_train_flags(argc, args);
    free(buf);
    return 0;
}
