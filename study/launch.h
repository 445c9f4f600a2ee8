// launch.h: starting this program again, alone or under mpirun, and waiting for it: what verify
// and the bug catalogue run their training runs and probes with.
#pragma once
#include <stdbool.h>
#include <stddef.h>

// The path of this program; false if it cannot be found.
bool launch_self(char *buf, size_t len);

// A child's command line, built word by word (each word copied): command_start puts the lead
// that starts `self` on `ranks` ranks (mpirun and its options, then self; self alone for one
// rank), command_add the words up to a NULL, command_add_words each space-separated word of a
// text; command_run runs it to completion (argv[0] looked up in PATH; its output appended to the
// file log, NULL: this program's), frees it and returns its exit status, or -1 (with a sentence
// on stderr) if it could not start or did not exit.
typedef struct Command {
    char **argv; // NULL-terminated
    int n, cap;
} Command;
void command_start(Command *c, int ranks, const char *self);
void command_add(Command *c, ...) __attribute__((sentinel));
void command_add_words(Command *c, const char *text);
int command_run(Command *c, const char *log);
