// launch.h: starting this program again, alone or under mpirun, and waiting for it: what verify
// and the bug catalogue run their training runs and probes with.
#pragma once
#include <stdbool.h>
#include <stddef.h>

// Runs argv (argv[0] looked up in PATH) to completion, its output appended to the file `log`
// (NULL: this program's own output); its exit status, or -1 (with a sentence on stderr) if it
// could not start or did not exit.
int launch(char **argv, const char *log);
// The path of this program; false if it cannot be found.
bool launch_self(char *buf, size_t len);
// Fills lead with the command that starts `self` on `ranks` ranks (mpirun and its options, then
// self; just self for one rank); np_buf holds the rank count's text. Returns the words written
// (at most LAUNCH_LEAD).
#define LAUNCH_LEAD 6
int launch_lead(char **lead, int ranks, char *self, char *np_buf, size_t np_len);
