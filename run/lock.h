// lock.h: a run folder has one writer. A command that writes a folder (training and --resume,
// verify, bugs; sample into a folder a job wrote) holds an exclusive lock (flock) on DIR/.lock
// from before its first write until it exits. The kernel drops the lock with the process, so a
// job killed with kill -9 never blocks the next one. The file holds the holder's process id, host
// and start time, for the sentence that refuses a second job. Under mpirun only rank 0 locks: a
// refusal is a usage error, which stops every rank before anything is written.
#pragma once
#include <stdbool.h>

// When another live process holds dir's lock: a usage error (exit 2) naming the folder, the holder
// and what to do; `flag` names the option. Otherwise, with `hold`, makes the folder (and its
// parents) and the lock file as needed and keeps the lock for the rest of this process (again
// for the same dir: nothing to do); without, lets go of it at once and writes nothing (a check
// before the folder's other checks). Under --dry-run `hold` is ignored.
void run_folder_lock(const char *flag, const char *dir, bool hold);
