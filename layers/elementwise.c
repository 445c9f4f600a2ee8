// elementwise.c: residual/bias add with repetition, GELU and SiLU.
#include "common.h"

static void add_bwd(Node *n) {
    real *da = node_grad_take(n, 0) ? NULL : node_grad(n, 0); // da = dout: the same buffer
    RUN(node_on_device(n), add_backward, da, node_grad(n, 1), n->out->grad, n->out->size, n->in[1]->size);
}

// b repeats over a: its shape must equal a trailing part of a's shape (leading 1s allowed)
Tensor *add(Tape *tp, Tensor *a, Tensor *b) {
    char as[64], bs[64];
    int lead = 0; // leading dims of b that are 1
    while (lead < b->ndim - 1 && b->shape[lead] == 1) lead++;
    bool ok = b->ndim - lead <= a->ndim;
    for (int i = 0; ok && i < b->ndim - lead; i++)
        ok = b->shape[b->ndim - 1 - i] == a->shape[a->ndim - 1 - i];
    CHECK(ok, "add: %s cannot be added to %s (it must match the trailing dims)",
          tensor_shape_str(b, bs, sizeof bs), tensor_shape_str(a, as, sizeof as));
    Tensor *out = tensor_empty_like(tp->arena, a);
    RUN(on_device(tp), add_forward, out->data, a->data, b->data, a->size, b->size);
    tape_record(tp, "add", add_bwd, out, 2, a, b);
    return out;
}

// GELU's input may be stored in 2 bytes a value (to_bf16_stored: under bf16, a linear's output
// rounded as autocast rounds it): its values then unpacked a block at a time (UNPACK_VALUES)
static size_t unpack_block(const Tensor *x) { return x->half ? UNPACK_VALUES : x->size; }

static void gelu_bwd(Node *n) {
    Tensor *x = n->in[0];
    real *dx = node_grad(n, 0);
    for (size_t i = 0, U = unpack_block(x); dx && i < x->size; i += U) {
        size_t k = x->size - i < U ? x->size - i : U, mark = arena_mark(n->arena);
        RUN(node_on_device(n), gelu_backward, dx + i, n->out->grad + i, bf16_values(n->arena, x, i, k), k);
        arena_release(n->arena, mark);
    }
}

Tensor *gelu(Tape *tp, Tensor *x) {
    Tensor *out = tensor_empty_like(tp->arena, x);
    for (size_t i = 0, U = unpack_block(x); i < x->size; i += U) {
        size_t k = x->size - i < U ? x->size - i : U, mark = arena_mark(tp->arena);
        RUN(on_device(tp), gelu_forward, out->data + i, bf16_values(tp->arena, x, i, k), k);
        arena_release(tp->arena, mark);
    }
    tape_record(tp, "gelu", gelu_bwd, out, 1, x);
    return out;
}

static void silu_bwd(Node *n) {
    real *dx = node_grad(n, 0);
    if (dx) RUN(node_on_device(n), silu_backward, dx, n->out->grad, n->in[0]->data, n->out->size);
}

Tensor *silu(Tape *tp, Tensor *x) {
    Tensor *out = tensor_empty_like(tp->arena, x);
    RUN(on_device(tp), silu_forward, out->data, x->data, x->size);
    tape_record(tp, "silu", silu_bwd, out, 1, x);
    return out;
}
