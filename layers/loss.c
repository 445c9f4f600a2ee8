// loss.c: masked mean squared error. denom is the count of real elements the mean is over;
// in sequence-parallel runs it is the global count, so per-rank losses and gradients add up.
#include "common.h"

static void mse_bwd(Node *n) {
    Tensor *pred = n->in[0], *target = n->in[1];
    real dloss;
    copy_bytes(&dloss, n->out->grad, sizeof dloss);
    RUN(node_on_device(n), mse_backward, node_grad(n, 0), node_grad(n, 1), dloss, pred->data,
        target->data, n->ptr, pred->size, n->farg[0]);
}

Tensor *mse_loss(Tape *tp, Tensor *pred, Tensor *target, const uint8_t *mask, double denom) {
    char ps[64], ts[64];
    CHECK(tensor_same_shape(pred, target), "mse_loss: prediction %s and target %s differ in shape",
          tensor_shape_str(pred, ps, sizeof ps), tensor_shape_str(target, ts, sizeof ts));
    CHECK(denom > 0, "mse_loss: the element count must be positive, got %g", denom);
    Tensor *out = tensor_new(tp->arena, 1, 1);
    mask = op_input(tp->arena, mask, pred->size);
    real loss = (real)RUN(on_device(tp), mse_forward, pred->data, target->data, mask, pred->size, denom);
    if (tp->exact) { // each canonical block's share into the order-independent sum
        size_t part = (size_t)tp->exact->block * last_dim(pred);
        CHECK(pred->ndim == 3 && pred->size % part == 0,
              "mse_loss: --exact needs predictions [B, n, C] in blocks of %d tokens", tp->exact->block);
        for (size_t i = 0; i < pred->size; i += part) {
            double share = RUN(on_device(tp), mse_forward, pred->data + i, target->data + i,
                               mask ? mask + i : NULL, part, denom);
            exact_add_double(&tp->exact->loss, 0, &share, 1);
        }
    }
    copy_bytes(out->data, &loss, sizeof loss);
    Node *n = tape_record(tp, "mse_loss", mse_bwd, out, 2, pred, target);
    if (n) n->ptr = mask, n->farg[0] = denom;
    return out;
}
