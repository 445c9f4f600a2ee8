// canvas.h: an RGB canvas for sample grids and plots: rectangles, anti-aliased lines, text
// (stb_easy_font, scaled by an integer factor), pasting (3, H, W) images in [-1, 1], and atomic
// PNG writing.
#pragma once
#include "../core/real.h"
#include <stddef.h>
#include <stdint.h>

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
// img is (3, ih, iw) CHW in [-1, 1] (clamped; a value that is not finite is an error, not a
// colour); its top-left goes to (x, y), each pixel drawn as upscale x upscale pixels.
void canvas_paste(Canvas *c, int x, int y, const real *img, int ih, int iw, int upscale);
// Writes "<path>.tmp" then renames it onto path, so readers never see a partial file.
// Returns 0, or -1 with the reason in err (and no file left behind).
int canvas_write_png(const Canvas *c, const char *path, char *err, size_t err_size);
// An animated GIF (looping, delay_cs hundredths of a second a frame) of n canvases of one size,
// written with giflib: one 256-colour palette quantized from all frames, so a colour stays the
// same from frame to frame. The same writing rules as canvas_write_png.
int canvas_write_gif(const Canvas *frames, int n, int delay_cs, const char *path, char *err,
                     size_t err_size);
