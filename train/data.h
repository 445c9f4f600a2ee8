// data.h: training batches. Every rank builds the same batch from the counter-based RNG, so the
// batch of step s is a pure function of (seed, s) whatever the number of ranks:
//   image i of step s is dataset item k = s * B + i (shapes: generated from k; a folder: item
//   rng_u32(seed, STREAM_PICK, k) mod n), its time flow_sample_t(seed, STREAM_T, k), its noise
//   rng_normal(seed, STREAM_NOISE, k * C*H*W + j), and its label is replaced by the null class
//   when rng_uniform(seed, STREAM_DROP, k) < class_dropout_prob.
#pragma once
#include "config.h"
#include "flow.h"
#include "imagefolder.h"
#include "../core/rng.h"
#include "../core/tensor.h"

typedef struct Data {
    bool shapes;        // procedural shapes, else a folder
    ImageFolder folder;
    int size, classes;
} Data;

// Opens the data source named by tc->data and checks it against the model (size, classes);
// -1 with a message on failure.
int data_open(Data *d, const TrainConfig *tc, char *err, size_t len);
void data_close(Data *d);
const char *data_class_name(const Data *d, int c);

typedef struct Batch {
    int B;
    Arena arena;    // holds the tensors below for the whole run
    Tensor *x0;     // (B, C, H, W) clean images in [-1, 1]
    Tensor *xt;     // (B, C, H, W) points on the path, fed to the model
    Tensor *v;      // (B, C, H, W) the velocity eps - x0: the training target
    Tensor *t;      // (B) model timesteps, 1000 t
    int64_t *y;     // (B) labels, the null class where dropped
} Batch;

Batch batch_alloc(int B, int C, int S);
void batch_free(Batch *b);
void batch_make(Batch *b, Data *d, const TrainConfig *tc, int step);
