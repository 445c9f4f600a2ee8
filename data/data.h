// data.h: training batches. Every rank builds the same batch (or the pixel rows of it that its
// tokens cover) from the counter-based RNG, so the batch of step s is a pure function of (seed, s)
// whatever the number of ranks:
//   image i of step s is dataset item k = s * B + i (B the global batch; a data group builds its
//   own slice of it, images first .. first + count - 1) (shapes: generated from k; a folder: item
//   rng_u32(seed, STREAM_PICK, k) mod n), its time flow_sample_t(seed, STREAM_T, k), its noise
//   rng_normal(seed, STREAM_NOISE, k * C*H*W + j), and its label is replaced by the null class
//   when rng_uniform(seed, STREAM_DROP, k) < label_dropout (the model's class_dropout_prob).
#pragma once
#include "flow.h"
#include "imagefolder.h"
#include "../core/rng.h"
#include "../core/tensor.h"
#include "../layers/dit.h"

typedef struct Data {
    bool shapes;        // procedural shapes (moving ones for clips), else a folder
    ImageFolder folder; // a folder of images (frames 1)
    ClipFolder clips;   // a folder of clips (frames > 1)
    int size, classes;
    int frames;         // of a sample: 1 images, more clips (frames stacked along the height)
    int max_tokens, patch; // packs (--max-tokens): tokens a row, and the patch (0: square images)
    int text_len;          // captions of text_len token ids instead of labels (0: labels)
    int64_t *captions;     // a folder's: (images, text_len), each from the .txt beside its image
} Data;

// Opens the data source ("shapes", "moving-shapes" or an image folder) as samples of
// (channels, frames * size, size): images (frames 1) or clips of `frames` frames, and checks it
// against the model: RGB, at most num_classes classes, images or clips as frames says; -1 with a
// message on failure.
int data_open(Data *d, const char *source, int size, int frames, int channels, int num_classes,
              char *err, size_t len);
void data_close(Data *d);
// Captions instead of labels, of L token ids each (data/caption.h): the shapes' own
// (shapes_caption), or for a folder the text of the .txt file beside each image (the image's
// name with .txt for its extension). -1 with a sentence naming the file that is missing or the
// word outside the vocabulary.
int data_captions(Data *d, int L, char *err, size_t len);
// True for the procedural sources ("shapes", "moving-shapes"), which are not paths
bool data_procedural(const char *source);
// Packs: image `item` of the folder as a gh x gw patch grid: its own aspect, each side rounded to
// the patch (at least one), shrunk with its aspect kept when it holds more than max_tokens
void data_image_grid(const Data *d, int item, int *gh, int *gw);
// Packs: the most images a row of max_tokens tokens can hold, from the folder's smallest grid (at
// most DIT_PACK_MAX); 0 without an open folder
int data_pack_images(const Data *d);
const char *data_class_name(const Data *d, int c);

typedef struct Batch {
    int B;          // the images built here: [first, first + B) of the step's `total`
    int first, total;
    int row0, row1; // the pixel rows built (all by default): the rest stay 0
    Arena arena;    // holds the tensors below for the whole run
    Tensor *x0;     // (B, C, F H, W) clean images (clips: F frames) in [-1, 1]
    Tensor *xt;     // (B, C, F H, W) points on the path, fed to the model
    Tensor *v;      // (B, C, F H, W) the velocity eps - x0: the training target
    Tensor *t;      // (B) model timesteps, 1000 t
    int64_t *y;     // (B) labels, the null class where dropped; with captions (B, text_len) token
                    // ids, the empty caption where dropped
    // packs (--max-tokens): x0, xt, v are strips (B, C, p, T p) of rows that pack several images
    // at their own sizes (layers/dit.h), t and y are per image (the first pack->n); NULL: one
    // square image per row
    DiTPack *pack;
} Batch;

// A batch of B samples of F frames of S x S; per: the values of y per sample, 1 (a label) or the
// captions' text_len
Batch batch_alloc(int first, int B, int total, int C, int F, int S, int per);
// A batch of B packed rows of T tokens of patch pt x p x p (Batch.pack); per as batch_alloc's
Batch batch_alloc_packs(int first, int B, int total, int C, int pt, int p, int T, int per);
// Builds only the pixel rows (of the frames stacked along the height) that the tokens
// [t0, t0 + n) of T (patches of pt x p x p, frame-major; those past T are padding) cover, or a
// few more: the rows a rank of a sequence group reads.
void batch_rows_of_tokens(Batch *b, int t0, int n, int T, int pt, int p);
void batch_free(Batch *b);
// The batch of step `step` (see the top of this file): labels are dropped to null_class (the
// model's num_classes) with probability label_dropout, or with captions (d->text_len) a caption
// to the empty one. Packs: row i is item k's, its first image
// picked as above and image j > 0 by rng_u32(seed, STREAM_PACK, k * DIT_PACK_MAX + j), while they
// fit in the row; image j's time and dropout draw at index k * DIT_PACK_MAX + j, and the noise of
// strip row i at k times the size of a row.
void batch_make(Batch *b, Data *d, uint64_t seed, double label_dropout, int null_class, int step);
