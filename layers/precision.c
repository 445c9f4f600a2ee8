// precision.c: --precision bf16 (tape.h's bf16), all in float storage. Where a value is rounded:
//  - every linear's input and weight, as the linear runs (linear.c: transient copies, made again
//    for backward, so nothing more is kept); the GEMMs accumulate in float, the bias is added in
//    float, the output and both gradients stay float. PyTorch's autocast also rounds the input
//    and the weight; it rounds the output and the gradients to bf16 as well, which this does not,
//    but for fc1's output (GELU's input: layers/dit.c's fc1_output, stored in 2 bytes).
//  - the attention's Q, K and V (to_bf16, before the layout's exchange: they travel as bf16
//    values); the scores, the softmax and its log-sum-exp and every gradient float, as autocast's
//    scaled_dot_product_attention accumulates; its output rounded as it leaves (layers/dit.c), as
//    autocast's is: before the all-to-all's return, which it crosses in 2 bytes, and at one rank
//    alike. It goes into the projection, which would round it anyway: the step's other values are
//    those of an unrounded output. Under --grad-wire bf16 (tape.h's bf16_grads) the gradients of
//    these values that a layout moves are rounded by their sender too.
//  - nothing else: LayerNorm, QK-norm, adaLN, GELU, the embeddings, the loss, the summed
//    gradients, AdamW, its moments and the EMA are float, as under autocast (which keeps the
//    norms and the loss in float, and whose master weights and optimizer are float).
// Every rounding is of one value to its nearest bf16 (real_to_bf16, core/real.h), whatever the
// rank holding it: so --exact gives one rank's bits in bf16 too.
#include "common.h"

static void to_bf16_bwd(Node *n) { // the rounding's gradient is taken as 1: dx = dy
    if (node_grad_take(n, 0)) return;
    real *dx = node_grad(n, 0);
    if (dx) RUN(node_on_device(n), add_forward, dx, dx, n->out->grad, n->out->size, n->out->size);
}

Tensor *to_bf16(Tape *tp, Tensor *x) {
    if (!tp->bf16 || x->bf16) return x; // bf16 values round to themselves
    Tensor *out = tensor_empty_like(tp->arena, x);
    RUN(on_device(tp), round_bf16, out->data, x->data, x->size);
    out->bf16 = true;
    tape_record(tp, "bf16", to_bf16_bwd, out, 1, x);
    return out;
}

Tensor *to_bf16_here(Tape *tp, Tensor *x) {
    if (!tp->bf16 || x->bf16) return x;
    RUN(on_device(tp), round_bf16, x->data, x->data, x->size);
    x->bf16 = true;
    if (x->base && x->base->size == x->size) x->base->bf16 = true; // the whole of it (a part: its own)
    return x;
}

Tensor *to_bf16_stored(Tape *tp, Tensor *x) {
    x = to_bf16_here(tp, x);
    Arena *a = tp->arena;
    if (!tp->bf16 || x->base || x->half || x->grad || !arena_is_top(a, x->data, x->size * sizeof(real)))
        return x; // not the top of the arena: where it is
    size_t at = (size_t)((uint8_t *)x->data - a->base);
    uint16_t *h = arena_alloc_empty(a, x->size * sizeof(uint16_t));
    RUN(a->device, pack_bf16, h, x->data, x->size);
    x->half = arena_keep(a, at, h, x->size * sizeof(uint16_t)); // down where its floats were
    x->data = NULL;
    return x;
}

const real *bf16_values(Arena *a, const Tensor *x, size_t first, size_t n) {
    if (!x->half) return x->data + first;
    real *out = arena_alloc_empty(a, n * sizeof(real)); // every element written
    RUN(a->device, unpack_bf16, out, x->half + first, n);
    return out;
}

const real *bf16_copy(Arena *a, const real *x, size_t n) {
    real *out = arena_alloc_empty(a, n * sizeof(real)); // every element written
    RUN(a->device, round_bf16, out, x, n);
    return out;
}
