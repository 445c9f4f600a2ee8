// outfile.c: see outfile.h.
#include "outfile.h"
#include "flags.h"
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

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
    struct stat out, in;
    if (stat(path, &out) == 0 && stat(in_path, &in) == 0 && out.st_dev == in.st_dev &&
        out.st_ino == in.st_ino)
        usage_error("%s %s is the same file as %s %s, which writing the result would destroy; "
                    "pass another path", flag, path, in_flag, in_path);
}
