// collectives.h: collectives along the sequence dimension as autograd ops, so the backward of a
// parallel layer is derived rather than hand-written: the adjoint of an all-gather is a
// reduce-scatter (sum) and vice versa; the adjoint of an all-to-all is the inverse all-to-all.
#pragma once
#include "../autograd/tape.h"
#include "comm.h"

// x (B, n, D) on each of P ranks -> (B, P*n, D): rank r's rows land at [r*n, (r+1)*n).
// Backward: reduce-scatter (sum) of the gradient, each rank keeping its own rows. The node's
// iarg are B, n, D and its ptr the Comm.
Tensor *seq_all_gather(Tape *tp, Comm *c, Tensor *x);
// x (B, P*n, D) -> (B, n, D): the sum over ranks of rows [rank*n, (rank+1)*n).
// Backward: all-gather.
Tensor *seq_reduce_scatter(Tape *tp, Comm *c, Tensor *x);

typedef enum { TO_HEAD_SHARD, TO_TOKEN_SHARD } A2ADir;
// TO_HEAD_SHARD: x (B, n, D) -> (B, P*n, D/P): rank r gets column group r (its heads) of every
// rank's rows, rows of rank s at [s*n, (s+1)*n). TO_TOKEN_SHARD: (B, P*n, D/P) -> (B, n, D), the
// inverse. Backward: the other direction.
Tensor *seq_all_to_all(Tape *tp, Comm *c, Tensor *x, A2ADir dir);
