// attention.c: multi-head scaled dot-product attention of queries (B,Tq,D) over keys and values
// (B,Tk,D). Tq may differ from Tk: in sequence parallelism, local queries attend to all keys.
// Masked keys get weight exactly 0 and therefore exactly zero gradient; a query whose keys are all
// masked gets a zero output. In a pack of images a query sees only its own image's keys (seg,
// kernels/segments.h; its ids may be host memory, copied up like the mask). Fused
// (kernels/attention.c, and kernels/attention.cu on the device): the tape keeps the output and
// one log-sum-exp per query row and head, so memory grows linearly with the sequence.
#include "common.h"

// the kernels' scratch, taken from the arena for the duration of one call
static real *scratch(Arena *a, int B, int Tq, int Tk, int H, int dh, bool backward) {
    size_t n = PICK(a->device, attention_scratch_count)(B, Tq, Tk, H, dh, backward);
    return arena_alloc_empty(a, n * sizeof(real));
}

void attention_kernel_forward(Arena *a, real *out, real *lse, const real *q, const real *k,
                              const real *v, const uint8_t *key_mask, Segments seg,
                              int B, int Tq, int Tk, int H, int dh) {
    size_t mark = arena_mark(a);
    RUN(a->device, attention_forward, out, lse, scratch(a, B, Tq, Tk, H, dh, false), q, k, v,
        key_mask, seg, B, Tq, Tk, H, dh);
    arena_release(a, mark);
}

void attention_kernel_backward(Arena *a, real *dq, real *dk, real *dv, const real *dout,
                               const real *out, const real *lse, const real *q, const real *k,
                               const real *v, const uint8_t *key_mask, Segments seg,
                               int B, int Tq, int Tk, int H, int dh) {
    size_t mark = arena_mark(a);
    RUN(a->device, attention_backward, dq, dk, dv, scratch(a, B, Tq, Tk, H, dh, true), dout, out,
        lse, q, k, v, key_mask, seg, B, Tq, Tk, H, dh);
    arena_release(a, mark);
}

typedef struct Masks { // what the backward reads of the forward's masks
    const uint8_t *key_mask;
    Segments seg;
} Masks;

static void attention_bwd(Node *n) {
    Tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const Masks *m = n->ptr;
    int *i = n->iarg; // B, Tq, Tk, H, dh
    attention_kernel_backward(n->arena, node_grad(n, 0), node_grad(n, 1), node_grad(n, 2),
                              n->out->grad, n->out->data, n->saved->data, q->data, k->data, v->data,
                              m->key_mask, m->seg, i[0], i[1], i[2], i[3], i[4]);
}

Tensor *attention(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, const uint8_t *key_mask,
                  Segments seg) {
    char qs[64], ks[64], vs[64];
    CHECK(q->ndim == 3 && k->ndim == 3 && tensor_same_shape(k, v) && q->shape[0] == k->shape[0] &&
              q->shape[2] == k->shape[2],
          "attention: q %s, k %s, v %s must be [B, Tq, D], [B, Tk, D], [B, Tk, D]",
          tensor_shape_str(q, qs, sizeof qs), tensor_shape_str(k, ks, sizeof ks),
          tensor_shape_str(v, vs, sizeof vs));
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], D = q->shape[2];
    CHECK(heads > 0 && D % heads == 0, "attention: %d heads do not divide the width %d", heads, D);
    Tensor *out = tensor_empty_like(tp->arena, q), *lse = tensor_empty(tp->arena, 3, B, heads, Tq);
    key_mask = op_input(tp->arena, key_mask, (size_t)Tk);
    seg.id = op_input(tp->arena, seg.id, (size_t)B * seg.T * sizeof(int32_t));
    attention_kernel_forward(tp->arena, out->data, lse->data, q->data, k->data, v->data, key_mask,
                             seg, B, Tq, Tk, heads, D / heads);
    Node *n = tape_record(tp, "attention", attention_bwd, out, 3, q, k, v);
    if (n) {
        n->iarg[0] = B, n->iarg[1] = Tq, n->iarg[2] = Tk, n->iarg[3] = heads, n->iarg[4] = D / heads;
        n->saved = lse;
        Masks *m = arena_alloc(arena_host(tp->arena), sizeof *m);
        *m = (Masks){key_mask, seg};
        n->ptr = m;
    }
    return out;
}
