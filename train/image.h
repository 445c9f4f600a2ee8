// image.h: (a) an RGB canvas for sample grids and plots: rectangles, anti-aliased lines,
// text (stb_easy_font, scaled by an integer factor), pasting (3, H, W) images in [-1, 1], and
// atomic PNG writing. (b) an image folder loader: PNG/JPEG files directly in a folder (one class)
// or in one subfolder per class, centre-cropped and resized to (3, size, size) in [-1, 1].
// Functions that can fail on user input return 0 / -1 and write a sentence into err.
#pragma once
#include "../core/real.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- canvas ------------------------------------------------------------------------------------

typedef struct {
    int w, h;
    uint8_t *px; // (h, w, 3) RGB, row-major
} Canvas;

Canvas canvas_create(int w, int h, const uint8_t rgb[3]); // filled with rgb
void canvas_free(Canvas *c);

// All drawing is clipped to the canvas.
void canvas_fill_rect(Canvas *c, int x, int y, int w, int h, const uint8_t rgb[3]);
// A line of the given width (pixels) between points in pixel coordinates (pixel (i, j) covers
// [i, i+1) x [j, j+1)), anti-aliased by blending over what is already there.
void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, double width,
                 const uint8_t rgb[3]);
// Text with its top-left corner at (x, y); '\n' starts a new line. At scale 1 a capital is
// about 7 pixels high; each pixel of the font becomes scale x scale pixels.
void canvas_text(Canvas *c, int x, int y, const char *text, int scale, const uint8_t rgb[3]);
int canvas_text_width(const char *text, int scale); // pixels, widest line with its spacing
// pixels from the top of the first line's capitals to the bottom of the last line's descenders
int canvas_text_height(const char *text, int scale);
// img is (3, ih, iw) CHW in [-1, 1] (clamped); its top-left goes to (x, y), each pixel drawn as
// upscale x upscale pixels.
void canvas_paste(Canvas *c, int x, int y, const real *img, int ih, int iw, int upscale);
// Writes "<path>.tmp" then renames it onto path, so readers never see a partial file.
// Returns 0, or -1 with the reason in err (and no file left behind).
int canvas_write_png(const Canvas *c, const char *path, char *err, size_t err_size);

// ---- image folder ------------------------------------------------------------------------------

typedef struct {
    int size;           // images come out as (3, size, size)
    int n;              // number of images
    int n_classes;      // 1 when the images sit directly in the folder
    char **class_names; // [n_classes] subfolder names, sorted; the folder's own name when flat
    char **paths;       // [n] file paths, by class then by sorted name
    int64_t *labels;    // [n] in [0, n_classes)
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
void image_folder_close(ImageFolder *f);

#define IMAGE_FOLDER_CACHE_BYTES ((size_t)512 << 20)
