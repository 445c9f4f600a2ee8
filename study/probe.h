// probe.h: `train probe`: one forward and backward of mean((model(x, t, y) - target)^2) with a
// checkpoint's weights on a given batch, written out for comparison with other implementations
// and with other rank counts. The result is the same for every number of ranks.
#pragma once
#include "../core/safetensors.h"
#include "../layers/dit.h"
#include "../parallel/transport/comm.h"

int probe_main(int argc, char **argv, Comm *c);

// A batch file's tensors (read from `path` into st), checked against model m, in the arena:
// x (B,C,H,W), t (B), target (B,C_out,H,W) and the labels y (B); or a batch of packs (the file
// has `pack`, I64 (n, 4): each image's row, first token and patch grid gh, gw; layers/dit.h): x
// and target strips (B, C or C_out, p, T p) of rows of T tokens (T at most the model's), t and y
// per image (n). Any mismatch is a usage error naming the tensor (tests/fuzz/fuzz_probe_batch.c
// runs it on arbitrary files).
#define PROBE_MAX_BATCH (1 << 20) // images in one batch file
typedef struct ProbeBatch {
    Tensor *x, *t, *target;
    int64_t *y;
    DiTPack *pack; // NULL: square images
} ProbeBatch;
ProbeBatch probe_load_batch(const DiT *m, const char *path, const SafeTensors *st, Arena *arena);
// A probe batch for the checkpoint ckpt into path: B images of step `step` of the data (seed 0:
// "shapes" or a folder), with their times, labels and velocity targets; max_tokens > 0: B rows
// of packs of the folder's images at their own sizes, as training builds them (probe
// --make-batch; train bugs).
#define PROBE_BATCH_STEP 1000 // a step no test run trains on
void probe_write_batch(const char *ckpt, const char *path, int B, int step, const char *data,
                       int max_tokens);
