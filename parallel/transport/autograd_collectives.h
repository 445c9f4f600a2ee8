// autograd_collectives.h: the differentiable collectives: comm.h's raw collectives along the
// sequence dimension as autograd ops on tensors, so the backward of a parallel layer is derived
// rather than hand-written: the adjoint of an all-gather is a reduce-scatter (sum) and vice versa;
// the adjoint of an all-to-all is the inverse all-to-all.
#pragma once
#include "../../autograd/tape.h"
#include "comm.h"

// x (B, n, D) on each of P ranks -> (B, P*n, D): rank r's rows land at [r*n, (r+1)*n).
// Backward: reduce-scatter (sum) of the gradient, each rank keeping its own rows. The node's
// iarg are B, n, D and its ptr the Comm.
Tensor *seq_all_gather(Tape *tp, Comm *c, Tensor *x);
// x (B, P*n, D) -> (B, n, D): the sum over ranks of rows [rank*n, (rank+1)*n).
// Backward: all-gather.
Tensor *seq_reduce_scatter(Tape *tp, Comm *c, Tensor *x);
// --exact: seq_all_gather's backward for a gradient held as exact sums (host memory) of
// (B, P*n, D) values: local (B, n, D) += this rank's rows summed over the ranks, exactly (the
// same blocks and exchange, the sums travelling whole), then rounded.
void seq_reduce_scatter_sums(Comm *c, Arena *a, real *local, const ExactSum *seq, int B, int n, int D);

// --exact: x (B, K), one row per image, -> (rows, K): row r is x's row of[r] (of on the host,
// valid until backward): the row for each canonical block of this rank's tokens, or for each of
// its tokens of a pack. Backward: the rows' gradients summed exactly into their image's and over
// the group's ranks, so every rank gets the gradient of all of the image's tokens, with the same
// bits for any number of ranks.
Tensor *seq_spread_exact(Tape *tp, Comm *c, Tensor *x, const int64_t *of, int rows);

typedef enum { TO_HEAD_SHARD, TO_TOKEN_SHARD } A2ADir;
// The first of the heads rank r holds when H heads split over P ranks (r = P: H). Rank r holds
// heads [seq_first_head(H, P, r), seq_first_head(H, P, r + 1)): the first H mod P ranks take
// ceil(H/P) heads, the others floor(H/P).
int seq_first_head(int H, int P, int r);
int seq_heads(int H, int P, int r); // how many heads rank r holds
// With H heads of dh columns each (D = H dh) split over the P ranks as seq_heads says, and h_r
// this rank's heads: TO_HEAD_SHARD: x (B, n, D) -> (B, P*n, h_r dh): rank r gets its heads'
// columns of every rank's rows, rows of rank s at [s*n, (s+1)*n). TO_TOKEN_SHARD:
// (B, P*n, h_r dh) -> (B, n, D), the inverse. Every rank needs a head (H >= P). Backward: the other
// direction.
Tensor *seq_all_to_all(Tape *tp, Comm *c, Tensor *x, int heads, A2ADir dir);
// The knorm-grad-early bug: seq_all_to_all to the head shard whose backward hands x the gradient
// before the reverse exchange returned it: only the block this rank kept of itself (its heads of
// its own rows), the other ranks' parts missing.
Tensor *seq_all_to_all_early(Tape *tp, Comm *c, Tensor *x, int heads);
// The values rank r sends in one such exchange of `rows` rows (B n): to the head shard every other
// rank its heads' columns of r's rows, to the token shard every other rank r's heads of its rows.
double seq_all_to_all_values(int H, int P, int r, double rows, int dh, A2ADir dir);
