// lock.c: see lock.h.
#include "lock.h"
#include "../core/check.h"
#include "flags.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// the folders this process holds (a test process runs several trainings)
static char held[16][4096];
static int n_held;

static void make_dirs(const char *flag, const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) break;
            *p = '/';
        }
    if (mkdir(buf, 0755) && errno != EEXIST)
        usage_error("%s: cannot create the folder %s: %s; pass a folder you can write to", flag,
                    dir, strerror(errno));
}

void run_folder_lock(const char *flag, const char *dir, bool hold) {
    for (int i = 0; i < n_held; i++)
        if (!strcmp(held[i], dir)) return;
    if (dry_run) hold = false;
    CHECK(!hold || n_held < 16, "run_folder_lock: this process holds 16 folders already, not %s too", dir);
    if (hold) make_dirs(flag, dir);
    char path[4096 + 8];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC | (hold ? O_CREAT : 0), 0644);
    if (fd < 0) {
        if (!hold && (errno == ENOENT || errno == ENOTDIR)) return; // no job has written it
        usage_error("%s: cannot open the lock file %s: %s; pass a folder you can write to", flag,
                    path, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        usage_error("%s: the folder %s is being written by another job (%s); wait for it to end, "
                    "or pass another folder (a job that was killed holds no lock)", flag, dir,
                    holder[0] ? holder : "its process id is not written yet");
    }
    if (!hold) { // free again: nothing written
        close(fd);
        return;
    }
    char host[256] = "?", when[64] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
    char text[512];
    int len = snprintf(text, sizeof text, "process %ld on host %s, since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)len, 0) != len)
        usage_error("%s: cannot write the lock file %s: %s", flag, path, strerror(errno));
    snprintf(held[n_held++], sizeof held[0], "%s", dir); // fd stays open: the lock lasts as long as the process
}
