// outfile.h: checks on a file or run folder a command will write, made before any work so that a bad path
// costs nothing and cannot overwrite an input. Each failure is a usage error naming the flag.
#pragma once

// `path` must be writable as a file: not empty, not an existing folder or other non-regular
// file, in a folder that exists, and ending in `ext` (any case) unless ext is NULL.
void out_file_check(const char *flag, const char *path, const char *ext);
// `path` must not be the input `in_path` (given with `in_flag`): compared by device and inode, so
// any spelling of the same file, or a link to it, is refused too.
void out_file_not_input(const char *flag, const char *path, const char *in_flag, const char *in_path);
// `dir` is the run folder a training run writes: not empty and not a file; a folder that already
// holds a run (model.safetensors or loss.csv) is refused unless it is `resume`, the run continued.
void out_folder_check(const char *flag, const char *dir, const char *resume);
// `dir` is the folder a command (verify, bugs) writes its own runs and plots to: not empty, not a
// file, and not a training run itself (its earlier results there are the command's to replace).
void out_runs_folder_check(const char *flag, const char *dir, const char *command);
// Removes the files a training run writes in dir (and any .tmp left by a killed save); returns
// how many were there. verify uses it to replace its own earlier runs.
int run_folder_clear(const char *dir);
