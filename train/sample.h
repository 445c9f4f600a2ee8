// sample.h: class-conditional samples (Euler steps along the learned flow, classifier-free
// guidance on the velocity), drawn into a labelled grid (samples.png: one row per class).
#pragma once
#include "../parallel/mesh/sp.h"
#include "../plan/budget.h"
#include "../run/config.h"
#include "../data/data.h"

// out (n, C, S, S): one image per label (with text conditioning: per caption, labels (n, text_len)
// token ids), from noise rng_normal(seed, STREAM_SAMPLE, i*C*S*S + j).
// Runs on every rank (each computes its token shard); with data groups the forward passes go round
// them and every rank ends with all n images. cfg_scale 1 disables guidance. Works in `arena`
// (reset before and after), as many images per forward pass as fit in it. Sampling
// estimated to take more than 5 seconds (or $SAMPLE_QUIET_SECONDS) prints a line per Euler step
// with its ETA on rank 0 (at most one a second).
void sample_images(DiT *m, SeqParallel *sp, Arena *arena, const int64_t *labels, int n, int steps,
                   double cfg_scale, uint64_t seed, real *out);
// sample_images at mixed sizes: image i is (C, h[i], w[i]) pixels (multiples of the patch, at most
// the tokens of sp's sequence) at out + i C S S, from the first C h w values of square image i's
// noise (the rest of its slot is left as drawn). The images go several to a row of sp's T tokens,
// in order while they fit, as packs (layers/dit.h): each with its own positions, attending to
// itself only; as many rows per pass as sample_images takes images.
void sample_sized(DiT *m, SeqParallel *sp, Arena *arena, const int64_t *labels, const int *h,
                  const int *w, int n, int steps, double cfg_scale, uint64_t seed, real *out);
// Samples per_class images of each class and writes the grid PNG on rank 0: square, or column j at
// sizes (NULL or none: square) size j mod sizes->n, each image at its own size. Clips: each with
// its frames across, and an animated GIF of the grid, frame by frame, next to the PNG (its path
// with .gif for .png). Returns 0, or with
// the reason in err: SAMPLE_NOT_FINITE (on every rank) when an image holds NaN or an infinite
// value (nothing is written), SAMPLE_WRITE_FAILED when the PNG cannot be written (no file left).
// With text conditioning the rows are prompts (the empty caption guides), labelled with them:
// prompts[0 .. n_prompts), or NULL: sample_prompts's.
enum { SAMPLE_WRITE_FAILED = -1, SAMPLE_NOT_FINITE = -2 };
#define SAMPLE_GIF_DELAY_CS 25 // hundredths of a second a frame of the GIF
#define SAMPLE_PROMPT_LEN 256
#define SAMPLE_MAX_PROMPTS 64
int sample_grid(DiT *m, SeqParallel *sp, Arena *arena, const Data *data, const char (*prompts)[SAMPLE_PROMPT_LEN],
                int n_prompts, int per_class, const SampleSizes *sizes, int steps, double cfg_scale,
                uint64_t seed, const char *path, char *err, size_t len);
// The default prompts of a grid, into prompts (room for 10): the captions of the data's first
// items (the shapes' of index 0-9 under seed; a folder's first images'); their count
int sample_prompts(const Data *d, uint64_t seed, char (*prompts)[SAMPLE_PROMPT_LEN]);
// `train sample --ckpt M.safetensors --out S.png ...`: a sample grid from a checkpoint.
int sample_main(int argc, char **argv, Comm *c);
