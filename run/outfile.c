// outfile.c: see outfile.h.
#include "outfile.h"
#include "flags.h"
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void out_file_check(const char *flag, const char *path, const char *ext) {
    size_t n = strlen(path), e = ext ? strlen(ext) : 0;
    if (!n) usage_error("%s is empty; pass the path of the file to write", flag);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (path[n - 1] == '/' || (exists && S_ISDIR(sb.st_mode)))
        usage_error("%s %s is a folder; pass the path of a file to write (it may be inside that "
                    "folder)", flag, path);
    if (exists && !S_ISREG(sb.st_mode))
        usage_error("%s %s exists and is not a regular file; pass the path of a file to write",
                    flag, path);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    if (stat(dir, &sb) != 0 && dry_run_missing(flag, dir, true)) return;
    if (stat(dir, &sb) != 0)
        usage_error("%s %s: the folder %s does not exist; create it first or pass a path in an "
                    "existing folder", flag, path, dir);
    if (!S_ISDIR(sb.st_mode))
        usage_error("%s %s: %s is not a folder; pass a path in an existing folder", flag, path, dir);
    if (ext && (n < e || strcasecmp(path + n - e, ext)))
        usage_error("%s %s: the file written is in the %s format, so pass a path ending in %s",
                    flag, path, ext, ext);
}

void out_file_not_input(const char *flag, const char *path, const char *in_flag, const char *in_path) {
    if (same_file(path, in_path))
        usage_error("%s %s is the same file as %s %s, which writing the result would destroy; "
                    "pass another path", flag, path, in_flag, in_path);
}

// The file in dir that marks it as a training run, or NULL
static const char *run_mark(const char *dir) {
    static const char *const marks[] = {"model.safetensors", "loss.csv"};
    struct stat sb;
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, marks[i]);
        if (stat(path, &sb) == 0) return marks[i];
    }
    return NULL;
}

// dir is not empty and not a file; `what` names what goes there
static void folder_check(const char *flag, const char *dir, const char *what) {
    struct stat sb;
    if (!dir[0]) usage_error("%s is empty; pass the folder %s", flag, what);
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        usage_error("%s %s is a file, not a folder; pass the folder %s", flag, dir, what);
}

void out_folder_check(const char *flag, const char *dir, const char *resume) {
    folder_check(flag, dir, "the run should be written to");
    if (resume[0] && same_file(dir, resume)) return;
    const char *mark = run_mark(dir);
    if (mark)
        usage_error("%s %s already holds a run (%s); continue it with --resume %s, or pass "
                    "another --out (or remove the folder) to start a new one",
                    flag, dir, mark, dir);
}

void out_runs_folder_check(const char *flag, const char *dir, const char *command) {
    char what[96];
    snprintf(what, sizeof what, "%s should write its runs to", command);
    folder_check(flag, dir, what);
    const char *mark = run_mark(dir);
    if (mark)
        usage_error("%s %s holds a training run (%s), which %s's runs and plot would overwrite; "
                    "pass a new folder, or an earlier %s's", flag, dir, mark, command, command);
}

int run_folder_clear(const char *dir) {
    static const char *const files[] = {"config.json", "loss.csv", "loss.png", "model.safetensors",
                                        "optimizer.safetensors", "ema.safetensors", "samples.png",
                                        "samples.gif"};
    int removed = 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        for (int tmp = 0; tmp < 2; tmp++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s%s", dir, files[i], tmp ? ".tmp" : "");
            removed += remove(path) == 0;
        }
    return removed;
}
