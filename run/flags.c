// flags.c: see flags.h.
#include "flags.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// strtol and friends skip leading spaces (and strtoull accepts "-1"): a value may not start
// with white space
static bool starts_number(const char *text) {
    return text[0] && !isspace((unsigned char)text[0]);
}

bool text_long(const char *text, long *v) {
    char *end;
    errno = 0;
    *v = strtol(text, &end, 10);
    return end != text && !*end && !errno && starts_number(text);
}

bool text_double(const char *text, double *v) {
    char *end;
    errno = 0;
    *v = strtod(text, &end);
    return end != text && !*end && !errno && isfinite(*v) && starts_number(text);
}

bool text_u64(const char *text, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long u = strtoull(text, &end, 10);
    *v = (uint64_t)u;
    return end != text && !*end && !errno && starts_number(text) && text[0] != '-';
}

int flag_int(const char *flag, const char *text, long min, long max) {
    long v;
    if (!text_long(text, &v)) usage_error("%s expects a whole number, got '%s'", flag, text);
    if (v < min || v > max) usage_error("%s must be between %ld and %ld, got %ld", flag, min, max, v);
    return (int)v;
}

double flag_double(const char *flag, const char *text, double min, double max) {
    double v;
    if (!text_double(text, &v)) usage_error("%s expects a number, got '%s'", flag, text);
    if (v < min || v > max) usage_error("%s must be between %g and %g, got %g", flag, min, max, v);
    return v;
}

const char *flag_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) usage_error("%s needs a value", argv[*i]);
    return argv[++*i];
}

bool dry_run;

void dry_run_take(int *argc, char **argv) {
    int n = 0;
    for (int i = 0; i < *argc; i++)
        if (strcmp(argv[i], "--dry-run")) argv[n++] = argv[i];
        else dry_run = true;
    argv[n] = NULL;
    *argc = n;
}

void collective_flags_take(int *argc, char **argv) {
    int n = 0;
    for (int i = 0; i < *argc; i++)
        if (!strcmp(argv[i], "--check-collectives")) setenv("DIT_CHECK_COLLECTIVES", "1", 1);
        else if (!strcmp(argv[i], "--collective-timeout")) {
            const char *v = flag_value(*argc, argv, &i);
            flag_double("--collective-timeout", v, 1e-3, 1e6);
            setenv("DIT_CHECK_COLLECTIVES", "1", 1), setenv("DIT_COLLECTIVE_TIMEOUT", v, 1);
        } else argv[n++] = argv[i];
    argv[n] = NULL;
    *argc = n;
}

bool dry_run_missing(const char *flag, const char *path, bool say) {
    struct stat sb;
    if (!dry_run || !path || stat(path, &sb) == 0) return false;
    if (say) printf("dry run: %s %s is not there yet (the real command would stop on that)\n", flag, path);
    return true;
}
