// flags.h: command-line parsing helpers. Every flag value is validated; a bad one is a usage
// error: one sentence on rank 0 naming the flag and what it accepts, then exit code 2 on every
// rank (all ranks parse the same arguments, so they all stop together).
#pragma once
#include <stdbool.h>
#include <stdint.h>

_Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int flag_int(const char *flag, const char *text, long min, long max);
double flag_double(const char *flag, const char *text, double min, double max);
uint64_t flag_u64(const char *flag, const char *text);
// argv[*i] is the flag; returns argv[*i + 1] and advances *i, or a usage error if missing.
const char *flag_value(int argc, char **argv, int *i);
