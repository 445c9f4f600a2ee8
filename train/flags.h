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
// Where the values being parsed come from, when not the command line: while set, a usage error
// says "<before><its message><after>". Both are copied; (NULL, NULL) clears them, and so does the
// next usage error (a handler that jumps out of it leaves none behind).
void set_usage_context(const char *before, const char *after);
int flag_int(const char *flag, const char *text, long min, long max);
double flag_double(const char *flag, const char *text, double min, double max);
uint64_t flag_u64(const char *flag, const char *text);
// argv[*i] is the flag; returns argv[*i + 1] and advances *i, or a usage error if missing.
const char *flag_value(int argc, char **argv, int *i);

// The parallel context of rank `rank` of `ranks` for model m (sp_init), or a usage error that
// names the problem; world may be NULL for a context that only sizes memory.
void sp_setup(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
              const DiTConfig *m);
