// step.h: the gradients of one step, which training and probe share. A rank runs its shard of its
// data group's images in --grad-accum micro-batches; each micro-batch's loss divides by the global
// element count (sp_loss_shard), so it weighs by its real elements and the accumulated gradients
// are those of the mean over the whole batch, whatever K, the layout and the rank count.
#pragma once
#include "sp.h"

// Zeroes m's gradients; forward and backward of this data group's n images of a global batch of
// `batch`, x (n, C, S, S), t (n), y (n; with text conditioning (n, text_len)) against target (n, Ct, S, S), one micro-batch at a time in
// `arena` (each freed before the next); then the gradients summed over every rank. Returns the
// global mean loss. out, when not NULL, receives the data group's output images (n, C_out, S, S),
// or with packs their strips (n, C_out, p, T p), zero where no image is.
// The batch and out are on the host; with a device arena (and m on the device) the batch is
// copied up first, and the arena must have room for it. pack: the data group's n rows are packs
// (x and target strips, t and y per image, layers/dit.h), each micro-batch whole rows,
// and every loss divides by the real tokens of all data groups' packs; or NULL.
double step_gradients(DiT *m, SeqParallel *sp, Arena *arena, Tensor *x, Tensor *t,
                      const int64_t *y, Tensor *target, int batch, const DiTPack *pack, real *out);
