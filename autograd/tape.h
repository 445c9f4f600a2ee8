// tape.h: reverse-mode autograd. Ops append a Node to the tape during forward when any input
// requires a gradient; backward() replays the tape in reverse. Backward functions accumulate
// (+=) into input gradients, which are allocated (zeroed) in the arena on first use.
#pragma once
#include "../core/tensor.h"

#define NODE_MAX_IN 4
#define NODE_MAX_INT 8

typedef struct Node Node;
typedef void (*BackwardFn)(Node *n);

struct Node {
    const char *op;          // name, for error messages
    BackwardFn backward;     // reads out->grad, adds into the inputs' grads
    Arena *arena;            // where input gradients are allocated
    Tensor *out;
    Tensor *in[NODE_MAX_IN]; // NULL entries allowed (e.g. a linear without bias)
    int iarg[NODE_MAX_INT];  // op-specific sizes
    double farg[2];          // op-specific scalars
    Tensor *saved;           // op-specific buffer kept from forward (e.g. attention's log-sum-exp)
    const void *ptr;         // op-specific read-only data (e.g. integer labels, masks)
};

typedef struct Tape {
    Arena *arena;       // activations, gradients and saved buffers of this step
    Node *nodes;
    int n, cap;
    bool grad_enabled;  // false: ops record nothing (sampling, finite differences)
} Tape;

Tape tape_create(Arena *a);
void tape_free(Tape *tp);

// For ops: record `out` = op(inputs). Returns NULL (and records nothing) when gradients are off
// or no input requires one; otherwise out->requires_grad is set and the node is returned so the
// op can fill its arguments. n_in inputs follow; NULL inputs are allowed.
Node *tape_record(Tape *tp, const char *op, BackwardFn fn, Tensor *out, int n_in, ...);
// For backward functions: the gradient buffer of input k, or NULL if it needs none.
real *node_grad(Node *n, int k);

// For backward functions of ops whose input k gets exactly the output's gradient (a residual
// add): when that input has no gradient yet and both are plain tensors of one size, it takes over
// the output's gradient buffer, which dies with the op, and true is returned (nothing to add).
bool node_grad_take(Node *n, int k);

// loss must be a scalar; its gradient is seeded with 1.
void backward(Tape *tp, Tensor *loss);
// Any output, with its gradient seeded by a copy of dout [out->size].
void backward_from(Tape *tp, Tensor *out, const real *dout);
