// all_to_all.h: the all-to-all layout (DeepSpeed-Ulysses, all_to_all.c), its row, and its exchange
// of the tokens every rank holds in front of its shard (the hybrid layout's too).
#pragma once
#include "row.h"

extern const SpLayout sp_all_to_all;
// The R tokens every rank holds in front of its shard (context.h's context) under a head-sharding exchange
// over c (all_to_all.c): x (B, R + n, D) -> (B, R + P n, h dh), this rank's h heads' columns of
// the front tokens taken from its own copy (no exchange), then every rank's tokens to the head
// shard; and back, o (B, R + P n, h dh) -> (B, R + n, D): the front tokens' output whole on every
// rank (each rank sends its heads' columns, one copy to each other rank: an all-gather of the
// heads, whose adjoint sums the copies' gradients) and the tokens' output to the token shard.
// whole_grads (--exact, where the front's gradients are whole on every rank): the front's gradient
// going in is summed over the ranks (each holds its heads' columns), and coming out each rank keeps
// its own copy's (the others' are the same).
Tensor *seq_front_to_heads(Tape *tp, Comm *c, Tensor *x, int R, int heads, bool whole_grads);
// The attention's output o (B, P n, h dh) of this rank's heads back to the token shard (B, n, D).
// Under --precision bf16 it travels as bf16 values (and so do the front tokens' outputs of
// seq_front_from_heads): what comes back goes into the projection, a linear, which rounds its input
// to bf16 anyway (layers/precision.c), so the step is the same bits in half the bytes; the
// attention's backward keeps its own float output, and the output's gradient travels in float.
Tensor *seq_output_to_tokens(Tape *tp, Comm *c, Tensor *o, int heads);
Tensor *seq_front_from_heads(Tape *tp, Comm *c, Tensor *o, int R, int heads, bool whole_grads);
