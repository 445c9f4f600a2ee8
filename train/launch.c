// launch.c: see launch.h.
#include "launch.h"
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int launch(char **argv, const char *log) {
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log) {
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    int failed = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (failed) {
        fprintf(stderr, "error: cannot start %s: is Open MPI installed (make deps)?\n", argv[0]);
        return -1;
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool launch_self(char *buf, size_t len) {
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) return false;
    buf[n] = 0;
    return true;
}

int launch_lead(char **lead, int ranks, char *self, char *np_buf, size_t np_len) {
    int n = 0;
    if (ranks > 1) {
        snprintf(np_buf, np_len, "%d", ranks);
        lead[n++] = "mpirun", lead[n++] = "-np", lead[n++] = np_buf;
        if (geteuid() == 0) lead[n++] = "--allow-run-as-root";
        if (ranks > sysconf(_SC_NPROCESSORS_ONLN)) lead[n++] = "--oversubscribe";
    }
    lead[n++] = self;
    return n;
}
