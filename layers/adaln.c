// adaln.c: adaLN modulation and the gated residual of a DiT block. Per-sample vectors (B,D)
// broadcast over the T tokens of x (B,T,D).
#include "common.h"

static void check_broadcast(const char *op, const Tensor *x, const Tensor *v, const char *vname) {
    char xs[64], vs[64];
    CHECK(x->ndim == 3 && v->ndim == 2 && v->shape[0] == x->shape[0] && v->shape[1] == x->shape[2],
          "%s: %s %s must be [B, D] for x %s of shape [B, T, D]", op, vname,
          tensor_shape_str(v, vs, sizeof vs), tensor_shape_str(x, xs, sizeof xs));
}

static void modulate_bwd(Node *n) {
    Tensor *x = n->in[0], *scale = n->in[2];
    RUN(node_on_device(n), modulate_backward, node_grad(n, 0), node_grad(n, 1), node_grad(n, 2),
        n->out->grad, x->data, scale->data, x->shape[0], x->shape[1], x->shape[2]);
}

Tensor *modulate(Tape *tp, Tensor *x, Tensor *shift, Tensor *scale) {
    check_broadcast("modulate", x, shift, "shift");
    check_broadcast("modulate", x, scale, "scale");
    Tensor *out = tensor_like(tp->arena, x);
    RUN(on_device(tp), modulate_forward, out->data, x->data, shift->data, scale->data, x->shape[0],
        x->shape[1], x->shape[2]);
    tape_record(tp, "modulate", modulate_bwd, out, 3, x, shift, scale);
    return out;
}

static void gated_add_bwd(Node *n) {
    Tensor *x = n->in[0], *gate = n->in[1], *y = n->in[2];
    real *dx = node_grad_take(n, 0) ? NULL : node_grad(n, 0); // dx = dout: the same buffer
    RUN(node_on_device(n), gated_add_backward, dx, node_grad(n, 1), node_grad(n, 2), n->out->grad,
        gate->data, y->data, x->shape[0], x->shape[1], x->shape[2]);
}

Tensor *gated_add(Tape *tp, Tensor *x, Tensor *gate, Tensor *y) {
    char xs[64], ys[64];
    check_broadcast("gated_add", x, gate, "gate");
    CHECK(tensor_same_shape(x, y), "gated_add: x %s and y %s must have the same shape",
          tensor_shape_str(x, xs, sizeof xs), tensor_shape_str(y, ys, sizeof ys));
    Tensor *out = tensor_like(tp->arena, x);
    RUN(on_device(tp), gated_add_forward, out->data, x->data, gate->data, y->data, x->shape[0],
        x->shape[1], x->shape[2]);
    tape_record(tp, "gated_add", gated_add_bwd, out, 3, x, gate, y);
    return out;
}
