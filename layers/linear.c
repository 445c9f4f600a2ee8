// linear.c: y = x W^T + b over the last dim (PyTorch Linear layout).
#include "common.h"

static void linear_bwd(Node *n) {
    Tensor *x = n->in[0], *w = n->in[1];
    RUN(node_on_device(n), linear_backward, node_grad(n, 0), node_grad(n, 1),
        n->in[2] ? node_grad(n, 2) : NULL, n->out->grad, x->data, w->data, n->iarg[0], n->iarg[1],
        n->iarg[2]);
}

// x is (..., C), w is (OC, C), b is (OC) or NULL
Tensor *linear(Tape *tp, Tensor *x, Tensor *w, Tensor *b) {
    char xs[64], ws[64];
    CHECK(w->ndim == 2 && last_dim(x) == w->shape[1],
          "linear: input %s does not match weight %s (weight must be [out, %d])",
          tensor_shape_str(x, xs, sizeof xs), tensor_shape_str(w, ws, sizeof ws), last_dim(x));
    CHECK(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]),
          "linear: bias must have shape [%d] to match weight %s", w->shape[0],
          tensor_shape_str(w, ws, sizeof ws));
    int N = rows_of(x), C = w->shape[1], OC = w->shape[0];
    Tensor *out = with_last_dim(tp->arena, x, OC);
    RUN(on_device(tp), linear_forward, out->data, x->data, w->data, b ? b->data : NULL, N, C, OC);
    Node *n = tape_record(tp, "linear", linear_bwd, out, 3, x, w, b);
    if (n) n->iarg[0] = N, n->iarg[1] = C, n->iarg[2] = OC;
    return out;
}
