// atomic.c: see atomic.h.
#include "atomic.h"
#include "check.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Interrupts are deferred by a handler, not by blocking them: OpenBLAS and MPI run threads of
// their own, and a signal blocked in this thread alone would go to one of those and kill the
// process at once. The handler is installed only where the signal has its default action (a
// program or test harness that handles it itself keeps its handler).
static volatile sig_atomic_t held, pending; // open files and groups; a signal that arrived meanwhile
static int grouped;                          // depth of atomic_group_begin
static struct { char *tmp, *path; } queue[16]; // written and synced, to be renamed
static int queued;

static void defer(int sig) {
    if (held) {
        pending = sig;
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void hold(void) {
    if (held == 0) { // (re)installed where the signal has its default action now
        const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
        for (int i = 0; i < 3; i++) {
            struct sigaction old, sa = {.sa_handler = defer, .sa_flags = SA_RESTART};
            sigemptyset(&sa.sa_mask);
            if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_DFL) sigaction(sigs[i], &sa, NULL);
        }
    }
    held++;
}

static void release(void) {
    if (--held == 0 && pending) {
        signal(pending, SIG_DFL);
        raise(pending);
    }
}

void atomic_group_begin(void) {
    hold();
    grouped++;
}

int atomic_group_end(char *err, size_t len) {
    CHECK(grouped > 0, "atomic_group_end without a matching atomic_group_begin");
    int rc = 0;
    if (--grouped == 0) {
        for (int i = 0; i < queued; i++) {
            if (!rc && rename(queue[i].tmp, queue[i].path) != 0)
                rc = -1, snprintf(err, len, "cannot rename %s onto %s: %s", queue[i].tmp,
                                  queue[i].path, strerror(errno));
            if (rc) remove(queue[i].tmp);
            free(queue[i].tmp), free(queue[i].path);
        }
        queued = 0;
    }
    release();
    return rc;
}

int atomic_open(AtomicFile *a, const char *path, char *err, size_t len) {
    size_t n = strlen(path);
    *a = (AtomicFile){.path = xmalloc(n + 1), .tmp = xmalloc(n + 5)};
    memcpy(a->path, path, n + 1);
    memcpy(a->tmp, path, n);
    memcpy(a->tmp + n, ".tmp", 5);
    hold();
    a->f = fopen(a->tmp, "wb");
    if (a->f) return 0;
    release();
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
    } else if (grouped) { // renamed with the rest of its group
        CHECK(queued < 16, "more than 16 files in one atomic group");
        queue[queued].tmp = a->tmp, queue[queued++].path = a->path;
        a->tmp = a->path = NULL;
    } else if (rename(a->tmp, a->path) != 0) {
        snprintf(err, len, "cannot rename %s onto %s: %s", a->tmp, a->path, strerror(errno));
        rc = -1;
    }
    if (rc) remove(a->tmp);
    free(a->path), free(a->tmp);
    *a = (AtomicFile){0};
    release();
    return rc;
}
