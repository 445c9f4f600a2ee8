// flags.h: command-line parsing helpers. Every flag value is validated; a bad one is a usage
// error (parallel/usage.h): one sentence naming the flag and what it accepts, and exit code 2.
#pragma once
#include "../parallel/usage.h"
#include <stdbool.h>
#include <stdint.h>

int flag_int(const char *flag, const char *text, long min, long max);
double flag_double(const char *flag, const char *text, double min, double max);
uint64_t flag_u64(const char *flag, const char *text);
// argv[*i] is the flag; returns argv[*i + 1] and advances *i, or a usage error if missing.
const char *flag_value(int argc, char **argv, int *i);
