// lock.h: a run folder has one writer. A command that writes a folder (training and --resume,
// verify, bugs; sample into a folder a job wrote) holds an exclusive lock (flock) on DIR/.lock
// from before its first write until it exits. The kernel drops the lock with the process, so a
// job killed with kill -9 never blocks the next one. The file holds the holder's process id, host
// and start time, for the sentence that refuses a second job. Under mpirun only rank 0 locks: a
// refusal is a usage error, which stops every rank before anything is written.
#pragma once
#include <stdbool.h>

// Takes dir's lock for the rest of this process (again for the same dir: nothing to do). With
// `create`, makes the folder (and its parents) and the lock file as needed; without, locks only
// where the lock file exists (a folder some job wrote). When another live process holds it: a
// usage error (exit 2) naming the folder, the holder and what to do; `flag` names the option.
// Under --dry-run it only tries the lock of a folder that is there, and writes nothing.
void run_folder_lock(const char *flag, const char *dir, bool create);
