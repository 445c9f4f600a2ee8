// slice.c: a column range of the last dim, to chunk the adaLN output into shift/scale/gate and
// the qkv projection into q, k, v; and its adjoint, two tensors side by side in the last dim, to
// put the in-context conditioning tokens in front of the sequence.
#include "common.h"

static void slice_bwd(Node *n) {
    real *dx = node_grad(n, 0);
    if (dx) RUN(node_on_device(n), slice_backward, dx, n->out->grad, n->iarg[0], n->iarg[1], n->iarg[2],
                n->iarg[3]);
}

Tensor *slice_last(Tape *tp, Tensor *x, int off, int len) {
    int N = rows_of(x), C = last_dim(x);
    CHECK(off >= 0 && len > 0 && off + len <= C,
          "slice_last: columns [%d, %d) are outside the last dim of size %d", off, off + len, C);
    Tensor *out = with_last_dim(tp->arena, x, len, false);
    RUN(on_device(tp), slice_forward, out->data, x->data, N, C, off, len);
    out->bf16 = x->bf16; // moved, not computed: bf16 values stay so
    Node *n = tape_record(tp, "slice_last", slice_bwd, out, 1, x);
    if (n) n->iarg[0] = N, n->iarg[1] = C, n->iarg[2] = off, n->iarg[3] = len;
    return out;
}

static void concat_bwd(Node *n) {
    size_t rows = (size_t)n->iarg[0], ca = (size_t)n->iarg[1], cb = (size_t)n->iarg[2];
    real *da = node_grad(n, 0), *db = node_grad(n, 1);
    if (da) RUN(node_on_device(n), add_rows, da, ca, n->out->grad, ca + cb, ca, rows);
    if (db) RUN(node_on_device(n), add_rows, db, cb, n->out->grad + ca, ca + cb, cb, rows);
}

Tensor *concat_last(Tape *tp, Tensor *a, Tensor *b) {
    int N = rows_of(a), ca = last_dim(a), cb = last_dim(b);
    CHECK(rows_of(b) == N && a->ndim == b->ndim, "concat_last: %d rows and %d rows do not match",
          N, rows_of(b));
    Tensor *out = with_last_dim(tp->arena, a, ca + cb, true); // the halves add into it
    RUN(on_device(tp), add_rows, out->data, (size_t)ca + cb, a->data, ca, ca, N);
    RUN(on_device(tp), add_rows, out->data + ca, (size_t)ca + cb, b->data, cb, cb, N);
    out->bf16 = a->bf16 && b->bf16;
    Node *n = tape_record(tp, "concat_last", concat_bwd, out, 2, a, b);
    if (n) n->iarg[0] = N, n->iarg[1] = ca, n->iarg[2] = cb;
    return out;
}
