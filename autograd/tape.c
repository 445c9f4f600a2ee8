// tape.c: see tape.h.
#include "tape.h"
#include "../core/check.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

Tape tape_create(Arena *a) { return (Tape){.arena = a, .grad_enabled = true}; }

void tape_free(Tape *tp) {
    free(tp->nodes);
    *tp = (Tape){0};
}

Node *tape_record(Tape *tp, const char *op, BackwardFn fn, Tensor *out, int n_in, ...) {
    CHECK(n_in <= NODE_MAX_IN, "op %s has %d inputs; at most %d are supported", op, n_in,
          NODE_MAX_IN);
    Tensor *in[NODE_MAX_IN] = {0};
    bool needed = false;
    va_list ap;
    va_start(ap, n_in);
    for (int k = 0; k < n_in; k++) {
        in[k] = va_arg(ap, Tensor *);
        needed |= in[k] && in[k]->requires_grad;
    }
    va_end(ap);
    out->requires_grad = needed && tp->grad_enabled;
    if (!out->requires_grad) return NULL;
    if (tp->n == tp->cap) {
        tp->cap = tp->cap ? 2 * tp->cap : 256;
        tp->nodes = xrealloc(tp->nodes, (size_t)tp->cap, sizeof(Node));
    }
    Node *n = &tp->nodes[tp->n++];
    *n = (Node){.op = op, .backward = fn, .arena = tp->arena, .out = out};
    memcpy(n->in, in, sizeof in);
    return n;
}

real *node_grad(Node *n, int k) {
    Tensor *t = n->in[k];
    if (!t || !t->requires_grad) return NULL;
    for (Tensor *u = t; u; u = u->base) u->got_grad = true;
    return tensor_grad(n->arena, t);
}

void backward_from(Tape *tp, Tensor *out, const real *dout) {
    CHECK(out->requires_grad,
          "backward: the output does not depend on anything that requires a gradient; "
          "mark the parameters or inputs with requires_grad and keep gradients enabled");
    memcpy(tensor_grad(tp->arena, out), dout, out->size * sizeof(real));
    for (int i = tp->n - 1; i >= 0; i--) {
        Node *n = &tp->nodes[i];
        if (n->out->grad) n->backward(n);
    }
}

void backward(Tape *tp, Tensor *loss) {
    char buf[64];
    CHECK(loss->size == 1,
          "backward: the loss must be a scalar but has shape %s; reduce it first (e.g. mse_loss)",
          tensor_shape_str(loss, buf, sizeof buf));
    real one = 1;
    backward_from(tp, loss, &one);
}
