// flags.h: command-line parsing helpers. Every flag value is validated; a bad one is a usage
// error (parallel/transport/usage.h): one sentence naming the flag and what it accepts, and exit code 2.
#pragma once
#include "../parallel/transport/usage.h"
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

// --dry-run, which every command takes: check every flag and what it sets (for training: the
// mesh, the memory check, the run folder), print what would run, and exit 0 having run nothing
// and written nothing. main.c takes it out of argv before the command parses its flags.
extern bool dry_run;
void dry_run_take(int *argc, char **argv);
// --check-collectives and --collective-timeout S, which every command takes too: main.c takes them
// out of argv and sets DIT_CHECK_COLLECTIVES and DIT_COLLECTIVE_TIMEOUT for this process and the
// ranks verify and bugs start (parallel/transport/check_collectives.h)
void collective_flags_take(int *argc, char **argv);
#define EVERY_COMMAND_HELP                                                                         \
    "  --dry-run             check every flag, print what would run; run and write nothing\n"      \
    "  --check-collectives   the ranks of a group compare each collective's call site, count and\n" \
    "                        kind first: a mismatch, or ranks waiting in different groups'\n"     \
    "                        collectives, stops the job naming each rank's call (slower)\n"        \
    "  --collective-timeout S  with that: a wait in a collective longer than S seconds (default\n" \
    "                        300) prints where every rank is and stops the job\n"
// Under --dry-run, an input `path` that is not there (yet): says so (when `say`) and returns true,
// and the command goes on without it; else false.
bool dry_run_missing(const char *flag, const char *path, bool say);
