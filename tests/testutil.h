// testutil.h: helpers shared by the Check suites: asserting that a call raises a fatal error
// with a given message, random tensors, and temporary folders.
#pragma once
#include "../core/check.h"
#include "../core/rng.h"
#include "../core/tensor.h"
#include <check.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static jmp_buf fatal_jmp_;
static char fatal_msg_[1024];

static inline void capture_fatal_(const char *msg) {
    snprintf(fatal_msg_, sizeof fatal_msg_, "%s", msg);
    longjmp(fatal_jmp_, 1);
}

// Runs stmt; passes only if it raises a fatal error whose message contains substr.
#define EXPECT_FATAL(stmt, substr)                                                                 \
    do {                                                                                           \
        fatal_msg_[0] = 0;                                                                         \
        set_fatal_handler(capture_fatal_);                                                         \
        if (!setjmp(fatal_jmp_)) {                                                                 \
            stmt;                                                                                  \
            set_fatal_handler(NULL);                                                               \
            ck_abort_msg("expected an error containing \"%s\", got none", substr);                 \
        }                                                                                          \
        set_fatal_handler(NULL);                                                                   \
        ck_assert_msg(strstr(fatal_msg_, substr), "error \"%s\" does not contain \"%s\"",          \
                      fatal_msg_, substr);                                                         \
    } while (0)

// A tensor of N(0, std) values from (seed, stream), with requires_grad as given.
static inline Tensor *randn(Arena *a, uint64_t stream, double std, bool grad, int ndim,
                            const int *shape) {
    Tensor *t = tensor_new_shape(a, ndim, shape);
    rng_fill_normal(t->data, t->size, 1234, stream, 0, std);
    t->requires_grad = grad;
    return t;
}

// A fresh folder under /tmp; test_rm_rf removes it with everything in it.
static inline void test_tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/dit-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

static inline int rm_entry_(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static inline void test_rm_rf(const char *path) { nftw(path, rm_entry_, 16, FTW_DEPTH | FTW_PHYS); }
