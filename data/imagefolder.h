// imagefolder.h: an image folder loader: PNG/JPEG files directly in a folder (one class) or in
// one subfolder per class, centre-cropped and resized to (3, size, size) in [-1, 1]. Functions
// that can fail on user input return 0 / -1 and write a sentence into err.
#pragma once
#include "../core/real.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int size;           // images come out as (3, size, size)
    int n;              // number of images
    int n_classes;      // 1 when the images sit directly in the folder
    char **class_names; // [n_classes] subfolder names, sorted; the folder's own name when flat
    char **paths;       // [n] file paths, by class then by sorted name
    int64_t *labels;    // [n] in [0, n_classes)
    int *widths, *heights; // [n] each file's own size in pixels
    uint8_t *cache;     // [n, size, size, 3] decoded images, or NULL when too big to keep
    bool *cached;       // [n] whether cache holds image i
} ImageFolder;

// Lists *.png, *.jpg, *.jpeg (any case) directly in path, or in its subfolders (one class each,
// label = index in sorted name order; hidden entries are skipped) and reads every file's header.
// Returns 0, or -1 with a message naming the folder or file and what to do.
int image_folder_open(ImageFolder *f, const char *path, int size, char *err, size_t err_size);
// img is (3, size, size) CHW in [-1, 1]: image i centre-cropped to a square and resized.
// Decoded images are cached while the cache fits in IMAGE_FOLDER_CACHE_BYTES.
// Returns 0, or -1 with the file name and stb_image's reason in err.
int image_folder_load(ImageFolder *f, int i, real *img, char *err, size_t err_size);
// img is (3, h, w) CHW in [-1, 1]: image i whole, resized to h x w (its own aspect when h x w
// follows it; not cached). Returns 0, or -1 with the file name and the reason in err.
int image_folder_load_size(ImageFolder *f, int i, int h, int w, real *img, char *err, size_t err_size);
void image_folder_close(ImageFolder *f);

#define IMAGE_FOLDER_CACHE_BYTES ((size_t)512 << 20)

// A folder of clips: one subfolder per class, in each one subfolder per clip holding its frames
// (PNG/JPEG files, in sorted name order), each frame read as image folders read images
// (centre-cropped to a square, resized to size x size). A clip takes its first `frames` frames;
// one with fewer, or whose frames differ in size, is an error that names it.
typedef struct {
    int size, frames;   // clips come out as (3, frames * size, size), the frames stacked
    int n, n_classes;   // clips, classes
    char **class_names; // [n_classes] subfolder names, sorted
    int64_t *labels;    // [n] in [0, n_classes)
    ImageFolder *clips; // [n] each clip's frames, a folder of one class
} ClipFolder;

// Returns 0, or -1 with a message naming the folder, clip or file and what to do.
int clip_folder_open(ClipFolder *f, const char *path, int size, int frames, char *err, size_t err_size);
// img is (3, frames * size, size) in [-1, 1]: clip i's first frames. 0, or -1 with the reason.
int clip_folder_load(ClipFolder *f, int i, real *img, char *err, size_t err_size);
void clip_folder_close(ClipFolder *f);
