// atomic.c: see atomic.h.
#include "atomic.h"
#include "check.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int atomic_open(AtomicFile *a, const char *path, char *err, size_t len) {
    size_t n = strlen(path);
    *a = (AtomicFile){.path = xmalloc(n + 1), .tmp = xmalloc(n + 5)};
    memcpy(a->path, path, n + 1);
    memcpy(a->tmp, path, n);
    memcpy(a->tmp + n, ".tmp", 5);
    a->f = fopen(a->tmp, "wb");
    if (a->f) return 0;
    snprintf(err, len, "cannot create %s: %s; check that the folder exists and is writable",
             a->tmp, strerror(errno));
    free(a->path), free(a->tmp);
    *a = (AtomicFile){0};
    return -1;
}

int atomic_commit(AtomicFile *a, bool writes_ok, char *err, size_t len) {
    int e = errno;
    bool ok = writes_ok && fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    if (!ok && writes_ok) e = errno;
    if (fclose(a->f) != 0 && ok) ok = false, e = errno;
    int rc = 0;
    if (!ok) {
        snprintf(err, len, "writing %s failed: %s; is the disk full?", a->tmp, strerror(e));
        rc = -1;
    } else if (rename(a->tmp, a->path) != 0) {
        snprintf(err, len, "cannot rename %s onto %s: %s", a->tmp, a->path, strerror(errno));
        rc = -1;
    }
    if (rc) remove(a->tmp);
    free(a->path), free(a->tmp);
    *a = (AtomicFile){0};
    return rc;
}
