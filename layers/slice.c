// slice.c: a column range of the last dim, to chunk the adaLN output into shift/scale/gate and
// the qkv projection into q, k, v.
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
    Tensor *out = with_last_dim(tp->arena, x, len);
    RUN(on_device(tp), slice_forward, out->data, x->data, N, C, off, len);
    Node *n = tape_record(tp, "slice_last", slice_bwd, out, 1, x);
    if (n) n->iarg[0] = N, n->iarg[1] = C, n->iarg[2] = off, n->iarg[3] = len;
    return out;
}
