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
    Comm *c = (Comm *)nd->ptr;
    real *dx = node_grad(nd, 0);
    int B = nd->iarg[0], n = nd->iarg[1], D = nd->iarg[2];
    if (!dx) return;
    if (!nd->iarg[3]) {
        scatter_add(c, nd->arena, dx, nd->out->grad, B, n, D);
        return;
    }
    // injected bug: keep this rank's own rows of the gradient, dropping the other ranks' shares
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < (size_t)n * D; i++)
            dx[(size_t)b * n * D + i] +=
                nd->out->grad[((size_t)b * c->size + c->rank) * n * D + i];
}

Tensor *seq_all_gather(Tape *tp, Comm *c, Tensor *x, bool keep_local_grad) {
    char s[64];
    CHECK(x->ndim == 3, "seq_all_gather: x must be [B, n, D], got %s", tensor_shape_str(x, s, sizeof s));
    int B = x->shape[0], n = x->shape[1], D = x->shape[2];
    Tensor *out = tensor_new(tp->arena, 3, B, c->size * n, D);
    gather(c, tp->arena, out->data, x->data, B, n, D);
    Node *nd = tape_record(tp, "seq_all_gather", all_gather_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = D, nd->iarg[3] = keep_local_grad, nd->ptr = c;
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
