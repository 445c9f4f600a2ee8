// usage.h: usage errors, the user's mistakes (a bad flag, a missing file, options that cannot run
// together): one sentence naming the problem and the fix, and exit code 2 on every rank (under
// mpirun the whole job is aborted with code 2, so a rank that alone hits the error cannot leave
// the others waiting).
#pragma once

_Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A handler usage_error calls with its message before it stops the job; one that does not return
// (the fuzz targets' longjmp, tests/fuzz/) takes over from there, so a parser can be run on any
// input in one process. NULL (the default): none; usage_error prints and exits.
typedef void (*UsageHandler)(const char *msg);
void set_usage_handler(UsageHandler h);
