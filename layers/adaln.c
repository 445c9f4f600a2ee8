// adaln.c: adaLN modulation and the gated residual of a DiT block. Per-sample vectors (B,D)
// broadcast over the T tokens of x (B,T,D); under --exact they are (B,G,D), one row per
// canonical block of T/G tokens, so that their gradients are per-block sums. The kernels see
// that as B*G samples of T/G tokens each.
#include "common.h"

// samples of the kernels' view: B, or B*G for (B,G,D) vectors
static int samples(const char *op, const Tensor *x, const Tensor *v, const char *vname) {
    char xs[64], vs[64];
    int G = v->ndim == 3 ? v->shape[1] : 1;
    CHECK(x->ndim == 3 && (v->ndim == 2 || v->ndim == 3) && v->shape[0] == x->shape[0] &&
              v->shape[v->ndim - 1] == x->shape[2] && G > 0 && x->shape[1] % G == 0,
          "%s: %s %s must be [B, D] or [B, G, D] (G dividing T) for x %s of shape [B, T, D]", op,
          vname, tensor_shape_str(v, vs, sizeof vs), tensor_shape_str(x, xs, sizeof xs));
    return x->shape[0] * G;
}

static void modulate_bwd(Node *n) {
    Tensor *x = n->in[0], *scale = n->in[2];
    int S = n->iarg[0];
    RUN(node_on_device(n), modulate_backward, node_grad(n, 0), node_grad(n, 1), node_grad(n, 2),
        n->out->grad, x->data, scale->data, S, (int)(x->size / x->shape[2]) / S, x->shape[2]);
}

Tensor *modulate(Tape *tp, Tensor *x, Tensor *shift, Tensor *scale) {
    int S = samples("modulate", x, shift, "shift");
    CHECK(samples("modulate", x, scale, "scale") == S, "modulate: shift and scale differ in blocks");
    Tensor *out = tensor_empty_like(tp->arena, x);
    RUN(on_device(tp), modulate_forward, out->data, x->data, shift->data, scale->data, S,
        (int)(x->size / x->shape[2]) / S, x->shape[2]);
    Node *n = tape_record(tp, "modulate", modulate_bwd, out, 3, x, shift, scale);
    if (n) n->iarg[0] = S;
    return out;
}

// modulate(layernorm(x, eps), shift, scale) as one op that keeps x's mean and 1/std only, not the
// normalized copy: backward normalizes x again (the same kernel: the same values) into a
// transient, and runs modulate's and LayerNorm's backward kernels as the two ops would (the same
// bits). x, the block's input, is kept anyway.
static void layernorm_modulate_bwd(Node *n) {
    Tensor *x = n->in[0], *scale = n->in[2];
    int S = n->iarg[0], N = rows_of(x), C = x->shape[2];
    bool dev = node_on_device(n);
    real *dx = node_grad(n, 0), *dshift = node_grad(n, 1), *dscale = node_grad(n, 2);
    real *mean = n->saved->data, *rstd = mean + N;
    size_t at = arena_mark(n->arena); // after the gradients' buffers
    real *h = arena_alloc_empty(n->arena, x->size * sizeof(real));
    real *dh = dx ? arena_alloc(n->arena, x->size * sizeof(real)) : NULL; // zeroed: modulate's backward adds
    RUN(dev, layernorm_forward, h, mean, rstd, x->data, N, C, (real)n->farg[0]); // the saved statistics again
    RUN(dev, modulate_backward, dh, dshift, dscale, n->out->grad, h, scale->data, S, N / S, C);
    if (dx) RUN(dev, layernorm_backward, dx, dh, x->data, mean, rstd, N, C);
    arena_release(n->arena, at);
}

Tensor *layernorm_modulate(Tape *tp, Tensor *x, Tensor *shift, Tensor *scale, real eps) {
    int S = samples("layernorm_modulate", x, shift, "shift"), N = rows_of(x), C = x->shape[2];
    CHECK(samples("layernorm_modulate", x, scale, "scale") == S, "layernorm_modulate: shift and scale differ in blocks");
    Tensor *stats = tensor_empty(tp->arena, 2, 2, N), *out = tensor_empty_like(tp->arena, x);
    size_t at = arena_mark(tp->arena);
    real *h = arena_alloc_empty(tp->arena, x->size * sizeof(real));
    RUN(on_device(tp), layernorm_forward, h, stats->data, stats->data + N, x->data, N, C, eps);
    RUN(on_device(tp), modulate_forward, out->data, h, shift->data, scale->data, S, N / S, C);
    arena_release(tp->arena, at);
    Node *n = tape_record(tp, "layernorm_modulate", layernorm_modulate_bwd, out, 3, x, shift, scale);
    if (n) n->iarg[0] = S, n->farg[0] = eps, n->saved = stats;
    return out;
}

static void gated_add_bwd(Node *n) {
    Tensor *x = n->in[0], *gate = n->in[1], *y = n->in[2];
    int S = n->iarg[0];
    real *dx = node_grad_take(n, 0) ? NULL : node_grad(n, 0); // dx = dout: the same buffer
    RUN(node_on_device(n), gated_add_backward, dx, node_grad(n, 1), node_grad(n, 2), n->out->grad,
        gate->data, y->data, S, (int)(x->size / x->shape[2]) / S, x->shape[2]);
}

Tensor *gated_add(Tape *tp, Tensor *x, Tensor *gate, Tensor *y) {
    char xs[64], ys[64];
    int S = samples("gated_add", x, gate, "gate");
    CHECK(tensor_same_shape(x, y), "gated_add: x %s and y %s must have the same shape",
          tensor_shape_str(x, xs, sizeof xs), tensor_shape_str(y, ys, sizeof ys));
    Tensor *out = tensor_empty_like(tp->arena, x);
    RUN(on_device(tp), gated_add_forward, out->data, x->data, gate->data, y->data, S,
        (int)(x->size / x->shape[2]) / S, x->shape[2]);
    Node *n = tape_record(tp, "gated_add", gated_add_bwd, out, 3, x, gate, y);
    if (n) n->iarg[0] = S;
    return out;
}
