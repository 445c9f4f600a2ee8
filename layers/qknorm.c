// qknorm.c: the ops video DiTs put on queries and keys (kernels/qknorm.c): RMSNorm with a learned
// scale over groups of columns, and rotary positions. Under --exact (tape.h) the scale's gradient
// is a sum over tokens: each canonical block's share goes into the parameter's order-independent
// sums, as linear.c's weight gradients do.
#include "common.h"

static void rmsnorm_bwd(Node *n) {
    Tensor *x = n->in[0], *s = n->in[1];
    int N = n->iarg[0], C = n->iarg[1], G = n->iarg[2], S = n->iarg[3], R = n->iarg[4];
    bool dev = node_on_device(n);
    real *rstd = n->saved->data, *dout = n->out->grad;
    if (!n->exact) {
        RUN(dev, rmsnorm_backward, node_grad(n, 0), node_grad(n, 1), dout, x->data, s->data, rstd, N, C, G, S);
        return;
    }
    RUN(dev, rmsnorm_backward, node_grad(n, 0), NULL, dout, x->data, s->data, rstd, N, C, G, S);
    ExactSum *es = node_exact(n, 1);
    CHECK(es || !s->requires_grad, "rmsnorm: --exact needs the scale to be a parameter of the store");
    if (!es) return;
    ArenaMarks mark = arena_marks(n->arena); // each block's share of the scale's gradient
    int blocks = N / R;
    real *ds = tensor_new(n->arena, 1, blocks * S)->data;
    for (int k = 0; k < blocks; k++)
        RUN(dev, rmsnorm_backward, NULL, ds + (size_t)k * S, dout + (size_t)k * R * C,
            x->data + (size_t)k * R * C, s->data, rstd + (size_t)k * R * (C / G), R, C, G, S);
    exact_add_terms(es, s->exact_at, host_reals(n->arena, ds, (size_t)blocks * S), (size_t)S, blocks, (size_t)S);
    arena_release_marks(n->arena, mark);
}

Tensor *rmsnorm(Tape *tp, Tensor *x, Tensor *scale, int group, real eps) {
    char xs[64], ss[64];
    int N = rows_of(x), C = last_dim(x), S = (int)scale->size;
    CHECK(scale->ndim == 1 && group > 0 && C % group == 0 && S % group == 0 && C % S == 0,
          "rmsnorm: input %s, scale %s and groups of %d columns: the groups and the scale must "
          "divide the width, the groups the scale", tensor_shape_str(x, xs, sizeof xs),
          tensor_shape_str(scale, ss, sizeof ss), group);
    int R = !tp->exact ? N : x->ndim == 3 ? tp->exact->block : 1;
    CHECK(N % R == 0, "rmsnorm: --exact runs over (B, n, C) with n a multiple of %d; got %s", R,
          tensor_shape_str(x, xs, sizeof xs));
    Tensor *out = tensor_empty_like(tp->arena, x), *rstd = tensor_empty(tp->arena, 1, N * (C / group));
    RUN(on_device(tp), rmsnorm_forward, out->data, rstd->data, x->data, scale->data, N, C, group, S, eps);
    Node *n = tape_record(tp, "rmsnorm", rmsnorm_bwd, out, 2, x, scale);
    if (n) n->iarg[0] = N, n->iarg[1] = C, n->iarg[2] = group, n->iarg[3] = S, n->iarg[4] = R, n->saved = rstd;
    return out;
}

static void rope_bwd(Node *n) {
    Tensor *x = n->in[0];
    RUN(node_on_device(n), rope_backward, node_grad(n, 0), n->out->grad, n->saved->data, x->shape[0],
        x->shape[1], n->iarg[0], x->shape[2] / n->iarg[0], n->iarg[1]);
}

Tensor *rope(Tape *tp, Tensor *x, Tensor *angles, int heads) {
    char xs[64], as[64];
    int B = x->shape[0], T = x->ndim == 3 ? x->shape[1] : 0, dh = x->ndim == 3 ? x->shape[2] / heads : 0;
    CHECK(x->ndim == 3 && heads > 0 && x->shape[2] % heads == 0 && dh % 2 == 0 && angles->ndim == 3 &&
              (angles->shape[0] == 1 || angles->shape[0] == B) && angles->shape[1] == T &&
              angles->shape[2] == dh,
          "rope: x %s must be [B, T, heads x dh] with dh even, angles %s [1 or B, T, dh]",
          tensor_shape_str(x, xs, sizeof xs), tensor_shape_str(angles, as, sizeof as));
    bool per_image = angles->shape[0] > 1;
    Tensor *out = tensor_empty_like(tp->arena, x);
    RUN(on_device(tp), rope_forward, out->data, x->data, angles->data, B, T, heads, dh, per_image);
    Node *n = tape_record(tp, "rope", rope_bwd, out, 1, x);
    if (n) n->iarg[0] = heads, n->iarg[1] = per_image, n->saved = angles;
    return out;
}
