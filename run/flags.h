// flags.h: command-line parsing helpers. Every flag value is validated; a bad one is a usage
// error (parallel/usage.h): one sentence naming the flag and what it accepts, and exit code 2.
#pragma once
#include "../parallel/usage.h"
#include <stdbool.h>
#include <stdint.h>

// A value is the whole text, without white space before it: false if text is not one (a double
// must also be finite, a u64 unsigned).
bool text_long(const char *text, long *v);
bool text_double(const char *text, double *v);
bool text_u64(const char *text, uint64_t *v);
// The value of a flag within [min, max], or a usage error that names the flag.
int flag_int(const char *flag, const char *text, long min, long max);
double flag_double(const char *flag, const char *text, double min, double max);
// argv[*i] is the flag; returns argv[*i + 1] and advances *i, or a usage error if missing.
const char *flag_value(int argc, char **argv, int *i);
