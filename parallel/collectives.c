// collectives.c: see collectives.h. MPI exchanges contiguous per-rank blocks, so the sequence
// layout (B, P*n, D) is packed to and from rank-major blocks (P, B, n, D) around each call.
#include "collectives.h"
#include "../core/check.h"
#include <string.h>

// seq (B, P*n, D) <-> blocks (P, B, n, D)
static void to_blocks(real *blocks, const real *seq, int P, int B, int n, int D) {
    size_t row = (size_t)n * D;
    for (int r = 0; r < P; r++)
        for (int b = 0; b < B; b++)
            memcpy(blocks + ((size_t)r * B + b) * row, seq + ((size_t)b * P + r) * row,
                   row * sizeof(real));
}

static void from_blocks(real *seq, const real *blocks, int P, int B, int n, int D) {
    size_t row = (size_t)n * D;
    for (int r = 0; r < P; r++)
        for (int b = 0; b < B; b++)
            memcpy(seq + ((size_t)b * P + r) * row, blocks + ((size_t)r * B + b) * row,
                   row * sizeof(real));
}

// gather: local (B,n,D) -> seq (B,P*n,D)
static void gather(Comm *c, Arena *a, real *seq, const real *local, int B, int n, int D) {
    size_t mark = arena_mark(a), size = (size_t)B * n * D;
    real *blocks = arena_alloc(a, (size_t)c->size * size * sizeof(real));
    comm_all_gather(c, blocks, local, size);
    from_blocks(seq, blocks, c->size, B, n, D);
    arena_release(a, mark);
}

// reduce-scatter: seq (B,P*n,D) -> local (B,n,D) += sum over ranks of this rank's rows
static void scatter_add(Comm *c, Arena *a, real *local, const real *seq, int B, int n, int D) {
    size_t mark = arena_mark(a), size = (size_t)B * n * D;
    real *blocks = arena_alloc(a, (size_t)(c->size + 1) * size * sizeof(real));
    real *mine = blocks + (size_t)c->size * size;
    to_blocks(blocks, seq, c->size, B, n, D);
    comm_reduce_scatter(c, mine, blocks, size);
    for (size_t i = 0; i < size; i++) local[i] += mine[i];
    arena_release(a, mark);
}

static void all_gather_bwd(Node *nd) {
    real *dx = node_grad(nd, 0);
    if (dx) scatter_add((Comm *)nd->ptr, nd->arena, dx, nd->out->grad, nd->iarg[0], nd->iarg[1], nd->iarg[2]);
}

Tensor *seq_all_gather(Tape *tp, Comm *c, Tensor *x) {
    char s[64];
    CHECK(x->ndim == 3, "seq_all_gather: x must be [B, n, D], got %s", tensor_shape_str(x, s, sizeof s));
    int B = x->shape[0], n = x->shape[1], D = x->shape[2];
    Tensor *out = tensor_new(tp->arena, 3, B, c->size * n, D);
    gather(c, tp->arena, out->data, x->data, B, n, D);
    Node *nd = tape_record(tp, "seq_all_gather", all_gather_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = D, nd->ptr = c;
    return out;
}

static void reduce_scatter_bwd(Node *nd) {
    Comm *c = (Comm *)nd->ptr;
    real *dx = node_grad(nd, 0);
    int B = nd->iarg[0], n = nd->iarg[1], D = nd->iarg[2];
    if (!dx) return;
    size_t mark = arena_mark(nd->arena);
    real *full = arena_alloc(nd->arena, (size_t)c->size * B * n * D * sizeof(real));
    gather(c, nd->arena, full, nd->out->grad, B, n, D);
    for (size_t i = 0; i < (size_t)c->size * B * n * D; i++) dx[i] += full[i];
    arena_release(nd->arena, mark);
}

Tensor *seq_reduce_scatter(Tape *tp, Comm *c, Tensor *x) {
    char s[64];
    CHECK(x->ndim == 3 && x->shape[1] % c->size == 0,
          "seq_reduce_scatter: x %s must be [B, P*n, D] with P = %d ranks",
          tensor_shape_str(x, s, sizeof s), c->size);
    int B = x->shape[0], n = x->shape[1] / c->size, D = x->shape[2];
    Tensor *out = tensor_new(tp->arena, 3, B, n, D);
    scatter_add(c, tp->arena, out->data, x->data, B, n, D);
    Node *nd = tape_record(tp, "seq_reduce_scatter", reduce_scatter_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = D, nd->ptr = c;
    return out;
}

// ---- all-to-all between the sequence and the head layout -------------------------------------
// Both directions ADD into their output (zero for a forward), so each serves as the other's
// backward. Blocks exchanged are (B, n, Dp): rows of one rank, columns of one head group.

// local (B, n, P*Dp) -> seq (B, P*n, Dp): every rank's tokens of this rank's head group
static void to_head_shard(Comm *c, Arena *a, real *seq, const real *local, int B, int n, int Dp) {
    int P = c->size;
    size_t blk = (size_t)B * n * Dp, mark = arena_mark(a);
    real *send = arena_alloc(a, 2 * P * blk * sizeof(real)), *recv = send + P * blk;
    for (int p = 0; p < P; p++)
        for (size_t bi = 0; bi < (size_t)B * n; bi++)
            memcpy(send + p * blk + bi * Dp, local + bi * P * Dp + (size_t)p * Dp, Dp * sizeof(real));
    comm_all_to_all(c, recv, send, blk);
    for (int s = 0; s < P; s++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++) {
                real *dst = seq + ((size_t)b * P * n + (size_t)s * n + i) * Dp;
                const real *src = recv + s * blk + ((size_t)b * n + i) * Dp;
                for (int j = 0; j < Dp; j++) dst[j] += src[j];
            }
    arena_release(a, mark);
}

// seq (B, P*n, Dp) -> local (B, n, P*Dp): this rank's tokens of every head group
static void to_token_shard(Comm *c, Arena *a, real *local, const real *seq, int B, int n, int Dp) {
    int P = c->size;
    size_t blk = (size_t)B * n * Dp, mark = arena_mark(a);
    real *send = arena_alloc(a, 2 * P * blk * sizeof(real)), *recv = send + P * blk;
    for (int s = 0; s < P; s++)
        for (int b = 0; b < B; b++)
            memcpy(send + s * blk + (size_t)b * n * Dp, seq + ((size_t)b * P * n + (size_t)s * n) * Dp,
                   (size_t)n * Dp * sizeof(real));
    comm_all_to_all(c, recv, send, blk);
    for (int p = 0; p < P; p++)
        for (size_t bi = 0; bi < (size_t)B * n; bi++) {
            real *dst = local + bi * P * Dp + (size_t)p * Dp;
            const real *src = recv + p * blk + bi * Dp;
            for (int j = 0; j < Dp; j++) dst[j] += src[j];
        }
    arena_release(a, mark);
}

// iarg: B, n (rows per rank), Dp (columns per head group), direction
static void all_to_all_bwd(Node *nd) {
    Comm *c = (Comm *)nd->ptr;
    real *dx = node_grad(nd, 0);
    int B = nd->iarg[0], n = nd->iarg[1], Dp = nd->iarg[2];
    if (!dx) return;
    if (nd->iarg[3] == TO_HEAD_SHARD) to_token_shard(c, nd->arena, dx, nd->out->grad, B, n, Dp);
    else to_head_shard(c, nd->arena, dx, nd->out->grad, B, n, Dp);
}

Tensor *seq_all_to_all(Tape *tp, Comm *c, Tensor *x, A2ADir dir) {
    char s[64];
    int P = c->size;
    CHECK(x->ndim == 3 && (dir == TO_TOKEN_SHARD ? x->shape[1] % P == 0 : x->shape[2] % P == 0),
          "seq_all_to_all: x %s must be [B, n, D] with D divisible by %d ranks (to the head shard) "
          "or [B, P*n, Dp] (to the token shard)", tensor_shape_str(x, s, sizeof s), P);
    int B = x->shape[0], n, Dp;
    Tensor *out;
    if (dir == TO_HEAD_SHARD) {
        n = x->shape[1], Dp = x->shape[2] / P;
        out = tensor_new(tp->arena, 3, B, P * n, Dp);
        to_head_shard(c, tp->arena, out->data, x->data, B, n, Dp);
    } else {
        n = x->shape[1] / P, Dp = x->shape[2];
        out = tensor_new(tp->arena, 3, B, n, P * Dp);
        to_token_shard(c, tp->arena, out->data, x->data, B, n, Dp);
    }
    Node *nd = tape_record(tp, "seq_all_to_all", all_to_all_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = Dp, nd->iarg[3] = dir, nd->ptr = c;
    return out;
}
