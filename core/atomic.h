// atomic.h: files that appear whole or not at all. Writes go to "<path>.tmp", which is flushed,
// synced and renamed onto path only when everything was written; on any failure the temporary is
// removed and an older file at path is left untouched.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct AtomicFile {
    FILE *f;          // write here between open and commit
    char *path, *tmp; // owned
} AtomicFile;

// 0, or -1 with "cannot create <tmp>: <reason>; check that the folder exists and is writable".
int atomic_open(AtomicFile *a, const char *path, char *err, size_t len);
// Finishes the file: writes_ok says whether the caller's own writes succeeded. 0 when the file is
// in place; -1 with the reason otherwise (the temporary is removed either way).
int atomic_commit(AtomicFile *a, bool writes_ok, char *err, size_t len);
