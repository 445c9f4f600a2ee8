// fuzz.h: what the libFuzzer targets (tests/fuzz/fuzz_*.c) share. A fatal error (core/check.h)
// reached from an input is a finding: it prints and aborts, and libFuzzer keeps the input. A
// usage error (run/flags.c) is the product's answer to a bad input: FUZZ_TRY runs a parser and
// comes back when it rejects the input with one (a longjmp out of usage_error's handler).
// Readers that take a path get the input written to a file in a per-process folder (fuzz_file).
#pragma once
#include "../../core/check.h"
#include "../../run/config.h"
#include "../../run/flags.h"
#include <ftw.h>
#include <stdarg.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fuzz_verbose_;

// With FUZZ_VERBOSE=1 in the environment, says what became of an input (for triage: run a target
// on a few files to see which are accepted and why the others are not).
__attribute__((format(printf, 1, 2))) static inline void fuzz_say(const char *fmt, ...) {
    if (!fuzz_verbose_) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static inline void fuzz_fatal_(const char *msg) {
    fprintf(stderr, "fuzz: fatal error reached from the input: %s\n", msg);
    abort();
}

static jmp_buf fuzz_usage_jmp_;
static int fuzz_trying_;
static inline void fuzz_usage_(const char *msg) {
    fuzz_say("usage error: %s", msg);
    if (!fuzz_trying_) { // a usage error where the target expects none
        fprintf(stderr, "fuzz: usage error outside FUZZ_TRY: %s\n", msg);
        abort();
    }
    longjmp(fuzz_usage_jmp_, 1);
}

// Runs the statements given; a usage error in them (the input rejected) returns here, skipping
// the rest.
#define FUZZ_TRY(...)                                                                              \
    do {                                                                                           \
        fuzz_trying_ = 1;                                                                          \
        if (!setjmp(fuzz_usage_jmp_)) { __VA_ARGS__; }                                             \
        fuzz_trying_ = 0;                                                                          \
    } while (0)

static char fuzz_dir_[256];

static inline int fuzz_rm_(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}
static inline void fuzz_cleanup_(void) {
    if (fuzz_dir_[0]) nftw(fuzz_dir_, fuzz_rm_, 16, FTW_DEPTH | FTW_PHYS);
}

// Handlers and the process's folder (in FUZZ_TMPDIR, which fuzz.sh sets and removes, else in
// /dev/shm when there is one); call once, from LLVMFuzzerInitialize. A process that crashes
// leaves its folder behind.
static inline void fuzz_setup(void) {
    fuzz_verbose_ = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE"));
    set_fatal_handler(fuzz_fatal_);
    set_usage_handler(fuzz_usage_);
    const char *tmp = getenv("FUZZ_TMPDIR") ? getenv("FUZZ_TMPDIR")
                      : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/dit-fuzz-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir_)) {
        perror("fuzz: cannot create a temporary folder");
        exit(1);
    }
    atexit(fuzz_cleanup_);
}

// fuzz_dir_/name (path has room for 512 bytes)
static inline const char *fuzz_path(char *path, const char *name) {
    snprintf(path, 512, "%s/%s", fuzz_dir_, name);
    return path;
}

// Writes the input to fuzz_dir_/name; returns the path (path has room for 512 bytes).
static inline const char *fuzz_file(char *path, const char *name, const uint8_t *data, size_t size) {
    fuzz_path(path, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) {
        perror(path);
        abort();
    }
    return path;
}

// The model the checkpoint seeds hold (the EMA ckpt_load_ema and the moments ckpt_load_optimizer
// are loaded into) and the run their optimizer state is for; the model probe batches are
// checked against (C_out = 2C, a null class).
#define FUZZ_CKPT_MODEL                                                                            \
    {.input_size = 4, .patch_size = 2, .in_channels = 3, .hidden_size = 4, .depth = 1,             \
     .num_heads = 1, .mlp_ratio = 1, .num_classes = 3, .class_dropout_prob = 0.1}
#define FUZZ_CKPT_RUN "seed=0 batch=2"
#define FUZZ_BATCH_MODEL                                                                           \
    {.input_size = 4, .patch_size = 2, .in_channels = 2, .hidden_size = 4, .depth = 1,             \
     .num_heads = 1, .mlp_ratio = 1, .num_classes = 3, .learn_sigma = true,                       \
     .class_dropout_prob = 0.1}

// train's flags (argv without the program name): an accepted set must hold a valid model
static inline void fuzz_train_flags(int argc, char **argv) {
    static TrainConfig tc; // static: a usage error leaves it half set, which is fine
    FUZZ_TRY({
        if (train_config_parse(&tc, argc, argv, 1)) {
            char why[256], text[8192];
            if (dit_config_error(&tc.model, why, sizeof why)) abort(); // accepted an invalid model
            train_config_text(&tc, text, sizeof text);
            fuzz_say("accepted: %s", text);
        }
    });
}
