// attention.c: multi-head scaled dot-product attention of queries (B,Tq,D) over keys and values
// (B,Tk,D). Tq may differ from Tk: in sequence parallelism, local queries attend to all keys.
// Masked keys get weight exactly 0 and therefore exactly zero gradient; a query whose keys are all
// masked gets a zero output.
#include "common.h"
#include "../kernels/kernels.h"

static void attention_bwd(Node *n) {
    Tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    int B = n->iarg[0], Tq = n->iarg[1], Tk = n->iarg[2], H = n->iarg[3], dh = n->iarg[4];
    real *dq = node_grad(n, 0), *dk = node_grad(n, 1), *dv = node_grad(n, 2);
    size_t mark = arena_mark(n->arena); // scratch allocated after the gradients, freed after use
    real *scratch = arena_alloc(n->arena, (size_t)Tq * Tk * sizeof(real));
    attention_backward(dq, dk, dv, scratch, n->out->grad, n->saved->data, q->data, k->data,
                       v->data, B, Tq, Tk, H, dh);
    arena_release(n->arena, mark);
}

Tensor *attention(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const uint8_t *key_mask) {
    char qs[64], ks[64], vs[64];
    CHECK(q->ndim == 3 && k->ndim == 3 && tensor_same_shape(k, v) && q->shape[0] == k->shape[0] &&
              q->shape[2] == k->shape[2],
          "attention: q %s, k %s, v %s must be [B, Tq, D], [B, Tk, D], [B, Tk, D]",
          tensor_shape_str(q, qs, sizeof qs), tensor_shape_str(k, ks, sizeof ks),
          tensor_shape_str(v, vs, sizeof vs));
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], D = q->shape[2];
    CHECK(heads > 0 && D % heads == 0, "attention: %d heads do not divide the width %d", heads, D);
    Tensor *out = tensor_like(tp->arena, q), *probs = tensor_new(tp->arena, 4, B, heads, Tq, Tk);
    attention_forward(out->data, probs->data, q->data, k->data, v->data, key_mask, B, Tq, Tk,
                      heads, D / heads);
    Node *n = tape_record(tp, "attention", attention_bwd, out, 3, q, k, v);
    if (n) {
        n->iarg[0] = B, n->iarg[1] = Tq, n->iarg[2] = Tk, n->iarg[3] = heads, n->iarg[4] = D / heads;
        n->saved = probs;
    }
    return out;
}
