// flags.h: command-line parsing helpers. Every flag value is validated; a bad one is a usage
// error: one sentence naming the flag and what it accepts, and exit code 2 (under mpirun the
// whole job is aborted with code 2, so a rank that alone hits the error cannot leave the others
// waiting).
#pragma once
#include "../parallel/sp.h"
#include <stdbool.h>
#include <stdint.h>

_Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A handler usage_error calls with its message before it stops the job; one that does not return
// (the fuzz targets' longjmp, tests/fuzz/) takes over from there, so a parser can be run on any
// input in one process. NULL (the default): none; usage_error prints and exits.
typedef void (*UsageHandler)(const char *msg);
void set_usage_handler(UsageHandler h);
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

// The parallel context of rank `rank` of `ranks` for model m (sp_init), or a usage error that
// names the problem; world may be NULL for a context that only sizes memory.
void sp_setup(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
              const DiTConfig *m);
