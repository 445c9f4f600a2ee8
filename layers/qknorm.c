// qknorm.c: what video DiTs do to queries and keys before attention (kernels/qknorm.c), as one op
// that reads its input once and writes one tensor, forward and back: RMSNorm with a learned scale
// over groups of columns, then rotary positions; either may be left out. Under --exact (tape.h)
// the scale's gradient is a sum over tokens: each canonical block's share goes into the
// parameter's order-independent sums, as linear.c's weight gradients do; rows that every rank holds
// whole (x 2-D, a joint block's caption) are blocks of one row, each added by one rank.
#include "common.h"

// iarg: N rows, C columns, G the norm's groups, S the scale's size, dh a head's width, A the rows
// of angles, R the rows of an --exact block; saved: 1/rms (N, C/G) or NULL; in[2]: the angles or NULL
static void qk_norm_rope_bwd(Node *n) {
    Tensor *x = n->in[0], *s = n->in[1], *cs = n->in[2];
    int N = n->iarg[0], C = n->iarg[1], G = n->iarg[2], S = n->iarg[3], dh = n->iarg[4], A = n->iarg[5],
        R = n->iarg[6];
    bool dev = node_on_device(n);
    real *rstd = n->saved ? n->saved->data : NULL, *dout = n->out->grad, *sd = s ? s->data : NULL,
         *a = cs ? cs->data : NULL;
    ExactSum *es = s && n->exact ? node_exact(n, 1) : NULL;
    CHECK(!s || !n->exact || es || !s->requires_grad,
          "qk_norm_rope: --exact needs the scale to be a parameter of the store");
    RUN(dev, qk_norm_rope_backward, node_grad(n, 0), es || !s ? NULL : node_grad(n, 1), dout, x->data,
        sd, rstd, a, N, C, G, S, dh, A);
    if (!es) return;
    ArenaMarks mark = arena_marks(n->arena); // each block's share of the scale's gradient
    // the blocks this rank adds: every one, or of rows every rank holds whole (x 2-D: a caption's
    // tokens) its share, as linear.c's
    int first = x->ndim == 2 ? n->exact->rank : 0, step = x->ndim == 2 ? n->exact->ranks : 1;
    int blocks = N / R > first ? (N / R - first + step - 1) / step : 0;
    real *ds = tensor_new(n->arena, 1, (blocks ? blocks : 1) * S)->data;
    for (int j = 0; j < blocks; j++) { // a block lies in one row of tokens: its angles from row k R mod A
        size_t k = (size_t)(first + j * step);
        RUN(dev, qk_norm_rope_backward, NULL, ds + (size_t)j * S, dout + k * R * C, x->data + k * R * C, sd,
            rstd + k * R * (C / G), a ? a + k * R % A * dh : NULL, R, C, G, S, dh, R);
    }
    if (blocks) exact_add_terms(es, s->exact_at, host_reals(n->arena, ds, (size_t)blocks * S), (size_t)S, blocks, (size_t)S);
    arena_release_marks(n->arena, mark);
}

Tensor *qk_norm_rope(Tape *tp, Tensor *x, Tensor *scale, int group, real eps, Tensor *angles, int heads) {
    char xs[64], ss[64], as[64];
    int N = rows_of(x), C = last_dim(x), S = scale ? (int)scale->size : 0;
    CHECK(!scale || (scale->ndim == 1 && group > 0 && C % group == 0 && S % group == 0 && C % S == 0),
          "qk_norm_rope: input %s, scale %s and groups of %d columns: the groups and the scale must "
          "divide the width, the groups the scale", tensor_shape_str(x, xs, sizeof xs),
          tensor_shape_str(scale, ss, sizeof ss), group);
    int T = x->ndim == 3 ? x->shape[1] : 0, dh = angles && heads > 0 ? C / heads : 0;
    CHECK(!angles || (x->ndim == 3 && heads > 0 && C % heads == 0 && dh % 2 == 0 && angles->ndim == 3 &&
                      (angles->shape[0] == 1 || angles->shape[0] == x->shape[0]) && angles->shape[1] == T &&
                      angles->shape[2] == dh && (!scale || group % 2 == 0)),
          "qk_norm_rope: x %s must be [B, T, heads x dh] with dh even, angles %s [1 or B, T, dh], and "
          "the norm's groups (%d) even, so that each holds whole pairs", tensor_shape_str(x, xs, sizeof xs),
          angles ? tensor_shape_str(angles, as, sizeof as) : "none", group);
    int A = angles ? angles->shape[0] * T : 0;
    int R = !tp->exact ? N : x->ndim == 3 ? tp->exact->block : 1;
    CHECK(N % R == 0, "qk_norm_rope: --exact runs over (B, n, C) with n a multiple of %d; got %s", R,
          tensor_shape_str(x, xs, sizeof xs));
    Tensor *out = tensor_empty_like(tp->arena, x), *rstd = scale ? tensor_empty(tp->arena, 1, N * (C / group)) : NULL;
    RUN(on_device(tp), qk_norm_rope_forward, out->data, rstd ? rstd->data : NULL, x->data,
        scale ? scale->data : NULL, angles ? angles->data : NULL, N, C, group, S, dh, A, eps);
    Node *n = tape_record(tp, "qk_norm_rope", qk_norm_rope_bwd, out, 3, x, scale, angles);
    if (n) {
        int args[] = {N, C, group, S, dh, A, R};
        memcpy(n->iarg, args, sizeof args), n->saved = rstd;
    }
    return out;
}
