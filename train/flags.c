// flags.c: see flags.h.
#include "flags.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

// strtol and friends skip leading spaces (and strtoull accepts "-1"): a value may not start
// with white space
static bool starts_number(const char *text) {
    return text[0] && !isspace((unsigned char)text[0]);
}

int flag_int(const char *flag, const char *text, long min, long max) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || !starts_number(text))
        usage_error("%s expects a whole number, got '%s'", flag, text);
    if (v < min || v > max) usage_error("%s must be between %ld and %ld, got %ld", flag, min, max, v);
    return (int)v;
}

double flag_double(const char *flag, const char *text, double min, double max) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || !starts_number(text))
        usage_error("%s expects a number, got '%s'", flag, text);
    if (v < min || v > max) usage_error("%s must be between %g and %g, got %g", flag, min, max, v);
    return v;
}

uint64_t flag_u64(const char *flag, const char *text) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end || errno || !starts_number(text) || text[0] == '-')
        usage_error("%s expects a non-negative whole number, got '%s'", flag, text);
    return (uint64_t)v;
}

const char *flag_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) usage_error("%s needs a value", argv[*i]);
    return argv[++*i];
}
