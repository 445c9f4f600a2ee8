// probe.h: `train probe`: one forward and backward of mean((model(x, t, y) - target)^2) with a
// checkpoint's weights on a given batch, written out for comparison with other implementations
// and with other rank counts. The result is the same for every number of ranks.
#pragma once
#include "../core/safetensors.h"
#include "../layers/dit.h"
#include "../parallel/comm.h"

int probe_main(int argc, char **argv, Comm *c);

// A batch file's tensors (read from `path` into st), checked against model m, in the arena:
// x (B,C,H,W), t (B), target (B,C_out,H,W) and the labels y (B). Or a batch of packs (layers/dit.h),
// when the file has `images` (n, 4), each image's row, first token, and patch rows and columns:
// x (B,C,p,T p) and target (B,C_out,p,T p) are the rows' strips, t (n) and y (n) per image, and
// T is at most the tokens of the model's input size. Any mismatch is a usage error naming the
// tensor (tests/fuzz/fuzz_probe_batch.c runs it on arbitrary files).
#define PROBE_MAX_BATCH (1 << 20) // images in one batch file
typedef struct ProbeBatch {
    Tensor *x, *t, *target;
    int64_t *y;
    DiTPack pack; // pack.n images when the rows are packs; 0: square images
} ProbeBatch;
ProbeBatch probe_load_batch(const DiT *m, const char *path, const SafeTensors *st, Arena *arena);
// A probe batch for the checkpoint ckpt into path: B images of step `step` of the shapes data
// (seed 0), with their times, labels and velocity targets (probe --make-batch; train bugs).
#define PROBE_BATCH_STEP 1000 // a step no test run trains on
void probe_write_batch(const char *ckpt, const char *path, int B, int step);
