// safefile.c: see safefile.h.
#include "safefile.h"
#include "check.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Interrupts are deferred by a handler, not by blocking them: OpenBLAS and MPI run threads of
// their own, and a signal blocked in this thread alone would go to one of those and kill the
// process at once. The handler is installed only where the signal has its default action (a
// program or test harness that handles it itself keeps its handler).
static volatile sig_atomic_t held, pending; // open files and groups; a signal that arrived meanwhile
static int grouped;                          // depth of safefile_group_begin
static struct { char *tmp, *path; } queue[16]; // written and synced, to be renamed
static int queued;

// fsync of a folder, so that renames in it are on disk
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

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

void safefile_group_begin(void) {
    hold();
    grouped++;
}

// The group's manifest: one line "<tmp> <path>" per member (names within the group's folder),
// written and synced as "<folder>/.group.tmp" and renamed to "<folder>/.group" before any member
// is renamed. Once it exists the group is committed, and safefile_recover finishes it.
static int write_manifest(const char *dir, char *err, size_t len) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, SAFEFILE_MANIFEST);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f != NULL;
    for (int i = 0; ok && i < queued; i++)
        ok = fprintf(f, "%s %s\n", strrchr(queue[i].tmp, '/') ? strrchr(queue[i].tmp, '/') + 1 : queue[i].tmp,
                     strrchr(queue[i].path, '/') ? strrchr(queue[i].path, '/') + 1 : queue[i].path) > 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) == 0 && sync_dir(dir) == 0) return 0;
    snprintf(err, len, "cannot write the save's manifest %s: %s; is the disk full?", path, strerror(errno));
    remove(tmp);
    return -1;
}

// the folder of a path ("." for a bare name), into buf
static const char *folder_of(const char *path, char *buf, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, len, ".");
    else snprintf(buf, len, "%.*s", (int)(slash - path) > 0 ? (int)(slash - path) : 1, path);
    return buf;
}

int safefile_group_end(char *err, size_t len) {
    CHECK(grouped > 0, "safefile_group_end without a matching safefile_group_begin");
    int rc = 0;
    if (--grouped == 0 && queued) {
        char dir[4096], other[4096];
        folder_of(queue[0].path, dir, sizeof dir);
        for (int i = 1; i < queued; i++)
            CHECK(!strcmp(folder_of(queue[i].path, other, sizeof other), dir),
                  "a file group spans folders %s and %s", dir, other);
        rc = write_manifest(dir, err, len);
        for (int i = 0; i < queued; i++) {
            if (!rc && rename(queue[i].tmp, queue[i].path) != 0)
                rc = -1, snprintf(err, len, "cannot rename %s onto %s: %s", queue[i].tmp,
                                  queue[i].path, strerror(errno));
            if (rc) remove(queue[i].tmp);
            free(queue[i].tmp), free(queue[i].path);
        }
        if (!rc) { // every member in place: the manifest has done its job
            char manifest[4200];
            snprintf(manifest, sizeof manifest, "%s/%s", dir, SAFEFILE_MANIFEST);
            sync_dir(dir);
            remove(manifest);
        }
        queued = 0;
    }
    release();
    return rc;
}

int safefile_recover(const char *dir, int *finished, int *removed, char *err, size_t len) {
    char path[4200], a[4700], b[4700], line[1024];
    *finished = *removed = 0;
    snprintf(path, sizeof path, "%s/%s", dir, SAFEFILE_MANIFEST);
    FILE *f = fopen(path, "rb");
    while (f && fgets(line, sizeof line, f)) { // roll forward: the group was committed
        char tmp[512], dst[512];
        if (sscanf(line, "%511s %511s", tmp, dst) != 2 || strchr(tmp, '/') || strchr(dst, '/')) {
            fclose(f);
            snprintf(err, len, "%s is not a save manifest (line '%.60s'); move it away and resume "
                     "again", path, line);
            return -1;
        }
        snprintf(a, sizeof a, "%s/%s", dir, tmp), snprintf(b, sizeof b, "%s/%s", dir, dst);
        if (access(a, F_OK) == 0 && rename(a, b) == 0) ++*finished;
    }
    if (f) fclose(f), sync_dir(dir), remove(path);
    DIR *d = opendir(dir); // roll back: temporaries of a group that never committed
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".tmp")) {
            snprintf(a, sizeof a, "%s/%s", dir, e->d_name);
            if (remove(a) == 0) ++*removed;
        }
    }
    if (d) closedir(d);
    return 0;
}

int safefile_open(SafeFile *a, const char *path, char *err, size_t len) {
    size_t n = strlen(path);
    *a = (SafeFile){.path = xmalloc(n + 1), .tmp = xmalloc(n + 5)};
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
    *a = (SafeFile){0};
    return -1;
}

int safefile_commit(SafeFile *a, bool writes_ok, char *err, size_t len) {
    int e = errno;
    bool ok = writes_ok && fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    if (!ok && writes_ok) e = errno;
    if (fclose(a->f) != 0 && ok) ok = false, e = errno;
    int rc = 0;
    if (!ok) {
        snprintf(err, len, "writing %s failed: %s; is the disk full?", a->tmp, strerror(e));
        rc = -1;
    } else if (grouped) { // renamed with the rest of its group
        CHECK(queued < 16, "more than 16 files in one file group");
        queue[queued].tmp = a->tmp, queue[queued++].path = a->path;
        a->tmp = a->path = NULL;
    } else if (rename(a->tmp, a->path) != 0) {
        snprintf(err, len, "cannot rename %s onto %s: %s", a->tmp, a->path, strerror(errno));
        rc = -1;
    }
    if (rc) remove(a->tmp);
    free(a->path), free(a->tmp);
    *a = (SafeFile){0};
    release();
    return rc;
}
