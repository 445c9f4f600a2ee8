// safefile.h: crash-safe file writes: files that appear whole or not at all. Writes go to
// "<path>.tmp", which is flushed, synced and renamed onto path only when everything was written;
// on any failure the temporary is removed and an older file at path is left untouched.
//
// Files that belong together (a checkpoint, its optimizer state and its loss log) are written as
// a group, all in one folder: every member is written and synced first; then a manifest naming
// them is written, synced and renamed into place (the commit point); then all are renamed in one
// burst and the manifest removed. A process killed at any moment leaves a folder that
// safefile_recover brings to one group's files: it finishes a committed group's renames, or removes
// the temporaries of one that never committed. SIGINT, SIGTERM and SIGHUP that arrive while a file
// or group is open take effect at its end.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct SafeFile {
    FILE *f;          // write here between open and commit
    char *path, *tmp; // owned
} SafeFile;

// 0, or -1 with "cannot create <tmp>: <reason>; check that the folder exists and is writable".
int safefile_open(SafeFile *a, const char *path, char *err, size_t len);
// Finishes the file: writes_ok says whether the caller's own writes succeeded. 0 when the file is
// in place (inside a group: written and queued for the group's end); -1 with the reason otherwise
// (the temporary is removed either way).
int safefile_commit(SafeFile *a, bool writes_ok, char *err, size_t len);

// Groups nest; the end of the outermost one renames every queued file: 0, or -1 with the reason.
void safefile_group_begin(void);
int safefile_group_end(char *err, size_t len);

#define SAFEFILE_MANIFEST ".group" // in the group's folder while its members are being renamed
// Brings a folder left by a killed process to whole groups: finishes the renames of a committed
// group (*finished of them) and removes every other "*.tmp" (*removed). 0, or -1 with the reason.
int safefile_recover(const char *dir, int *finished, int *removed, char *err, size_t len);
