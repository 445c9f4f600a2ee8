// tapedump.h: probe --dump-tape: every named tensor of one step (tape_name: the embeddings, each
// block's adaLN vectors, norms, q, k, v, attention output, projections, MLP and residuals, the
// final layer and the loss) and, in backward, each one's gradient, in execution order, written
// in the one-rank layout: the tokens of every rank of the sequence group in order with the
// padding dropped, the images of every data group in order. Tensor names are "NNNN name" or
// "NNNN grad.name" with NNNN the position; __metadata__ holds the layout (ranks, tokens, padded
// tokens, exact) that `train locate` reports positions in.
#pragma once
#include "../core/safetensors.h"
#include "../parallel/mesh/sp.h"

typedef struct TapeDump {
    SeqParallel *sp;
    StWriter *w; // rank 0's; NULL elsewhere
    int index;
    real **kept; // rank 0: the tensors' values, until the dump is written
    real loss;
} TapeDump;

// Starts watching sp's steps (one micro-batch: --grad-accum 1); rank 0 collects the tensors
void tape_dump_start(TapeDump *d, SeqParallel *sp, int rank);
// After the step's gradients are summed: every parameter's gradient (grad.<name>), last
void tape_dump_params(TapeDump *d, const ParamStore *ps);
// Writes the dump (rank 0) with the layout in __metadata__; -1 with a message on failure
int tape_dump_write(TapeDump *d, const char *path, const char *layout, char *err, size_t len);
