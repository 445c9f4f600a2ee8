// batch.h: a batch over the mesh (batch.c): the slices and micro-batches, the loss's denominator,
// the outputs gathered, the gradients summed, and --exact's tapes and loss.
#pragma once
#include "sp.h"

// ---- a batch over the mesh (batch.c) ---------------------------------------------------------
// This rank's images of a global batch of B: [*first, *first + *count); NULL, or the sentence
// when the data groups do not divide B or a group has fewer images than micro-batches.
const char *sp_batch_slice(const SeqParallel *sp, int B, int *first, int *count, char *buf, size_t len);
// Micro-batch i of a data group's `count` images: [*first, *first + *n). The first count % K are
// one image larger (8 images, K = 3: 3, 3 and 2), so micro-batch 0 is the largest.
void sp_micro_batch(const SeqParallel *sp, int count, int i, int *first, int *n);
// sp_dit_shard for a micro-batch of `images` images (rows) of a step whose global batch is
// `batch`, with the count its loss divides by: batch x T tokens, the same for every rank and
// micro-batch (the accum-unweighted and local-mean-loss bugs choose theirs here). Packs: pack is
// the micro-batch's, and the count the real tokens of the global batch, batch_tokens (under
// accum-unweighted, the micro-batch's own times the micro-batches and data groups); else NULL, 0.
DiTShard sp_loss_shard(SeqParallel *sp, int images, int batch, const DiTPack *pack, long batch_tokens);
// The loss-times-sp bug: what turns this rank's share of the global mean into the mean over its
// own real tokens (T over their count; 0 for a rank of padding only), so that the ranks' logged
// losses add up to about P times the loss
double sp_local_mean_scale(const SeqParallel *sp);
// The full output images (B, C_out, S, S) from every rank's tokens (B, n, p*p*C_out): tokens are
// all-gathered, padding dropped, and unpatchified; for rows of packs (strip true) the strips
// (B, C_out, p, T p) of their T tokens (layers/dit.h). Not differentiated.
Tensor *sp_gather_image(Tape *tp, SeqParallel *sp, Tensor *tokens, const DiTConfig *c, bool strip);
// Every data group's images (B, ...) of `size` values each, in data-group order, into out
// (dp * B, ...). Not differentiated.
void sp_gather_batch(SeqParallel *sp, real *out, const real *in, size_t size);
// One all-reduce (sum) of the flat gradient buffer over every rank; under --exact, of the store's
// exact sums, rounded into the buffer. For a split store (--zero) a reduce-scatter of each unit:
// the sums of this rank's slice only, into ps->slice; at level 2 of the units that are not scoped,
// the blocks' having gone as backward finished each (sp_store_hook).
void sp_sync_grads(SeqParallel *sp, ParamStore *ps);
// A split store's unit u: its gradients summed over the ranks and this rank's piece added into the
// slice (a reduce-scatter over the world)
void sp_sum_unit(SeqParallel *sp, ParamStore *ps, int u);

// tp computes as the run does: in bf16 under --precision bf16 (tape.h), and under --exact in exact
// mode with *em (this rank's canonical block size, whether it repeats another rank's per-image
// work), which `first` makes anew (a step's micro-batches add into one loss sum)
void sp_tape_arithmetic(const SeqParallel *sp, Tape *tp, ExactMode *em, bool first);
// --exact: the loss of a step from the tapes' exact sums, summed over every rank
double sp_exact_loss(SeqParallel *sp, ExactMode *em);
