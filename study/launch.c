// launch.c: see launch.h.
#include "launch.h"
#include "../core/check.h"
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int launch(char **argv, const char *log) {
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

static void add_word(Command *c, const char *word) {
    if (c->n + 2 > c->cap) c->cap = 2 * c->cap + 16, c->argv = xrealloc(c->argv, (size_t)c->cap, sizeof *c->argv);
    c->argv[c->n] = xmalloc(strlen(word) + 1);
    strcpy(c->argv[c->n++], word);
    c->argv[c->n] = NULL;
}

void command_add(Command *c, ...) {
    va_list ap;
    va_start(ap, c);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *)) add_word(c, w);
    va_end(ap);
}

void command_start(Command *c, int ranks, const char *self) {
    *c = (Command){0};
    if (ranks > 1) {
        char np[16];
        snprintf(np, sizeof np, "%d", ranks);
        command_add(c, "mpirun", "-np", np, NULL);
        if (geteuid() == 0) command_add(c, "--allow-run-as-root", NULL);
        if (ranks > sysconf(_SC_NPROCESSORS_ONLN)) command_add(c, "--oversubscribe", NULL);
        // the ranks run on this machine: Open MPI's shared memory (pml ob1) carries them, without
        // UCX's probe of network devices (0.2 s a launch); a user's OMPI_MCA_pml still chooses
        if (!getenv("OMPI_MCA_pml")) command_add(c, "--mca", "pml", "ob1", NULL);
    }
    command_add(c, self, NULL);
}

void command_add_words(Command *c, const char *text) {
    char *copy = xmalloc(strlen(text) + 1), *save = NULL;
    strcpy(copy, text);
    for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) add_word(c, w);
    free(copy);
}

int command_run(Command *c, const char *log) {
    int rc = launch(c->argv, log);
    for (int i = 0; i < c->n; i++) free(c->argv[i]);
    free(c->argv);
    *c = (Command){0};
    return rc;
}
