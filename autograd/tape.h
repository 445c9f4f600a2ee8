// tape.h: reverse-mode autograd. Ops append a Node to the tape during forward when any input
// requires a gradient; backward() replays the tape in reverse. Backward functions accumulate
// (+=) into input gradients, which are allocated (zeroed) in the arena on first use.
#pragma once
#include "../core/exact.h"
#include "../core/tensor.h"

#define NODE_MAX_IN 4
#define NODE_MAX_INT 10

typedef struct Node Node;
typedef struct ExactMode ExactMode;
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
    ExactMode *exact;        // the tape's, when the op was recorded
};

// --exact: per-token work runs on canonical blocks of `block` tokens of one image, whatever the
// rank count, and every sum over blocks, images or ranks is an order-independent one (exact.h):
// parameter gradients go into the store's ExactSum, the loss's partial sums into `loss`. The
// conditioning path (2-D, one row per image) runs row by row; every rank of a sequence group
// repeats it with the same inputs, so each image's share of its parameters' gradients is added
// by one of them: image b by the group's rank b mod ranks.
struct ExactMode {
    int block;       // tokens per canonical block
    int rank, ranks; // this rank in its sequence group, and the group's size
    ExactSum loss; // 1 element: the loss, each block's share added
    int64_t loss_mem[EXACT_LIMBS + 2]; // exact_bytes(1): top, limbs and front
};

// Watches a step (probe --dump-tape): called with each tensor named by tape_name as it is made
// (grad false), and with its gradient (t->grad, grad true) once complete, just before its
// producer's backward runs (a view's: its base's producer's; the last named first). It may run collectives and allocate in the tape's arena, releasing
// what it took.
typedef struct Tape Tape;
typedef void (*TapeWatch)(Tape *tp, Tensor *t, bool grad, void *ctx);

struct Tape {
    Arena *arena;       // activations, gradients and saved buffers of this step
    Node *nodes;
    int n, cap;
    bool grad_enabled;  // false: ops record nothing (sampling, finite differences)
    ExactMode *exact;   // NULL unless --exact
    bool bf16;          // --precision bf16: the linears and the attention take their inputs rounded
                        // to bf16 and accumulate in float (layers/precision.c says where)
    bool bf16_grads;    // --grad-wire bf16: the gradients of bf16 values that a layout moves
                        // (dQ, dK, dV, the output's) travel in 2 bytes a value too
    TapeWatch watch;    // NULL unless the step is watched
    void *watch_ctx;
    Tensor **views;     // watched: the views named, whose gradients backward hands on with their base's
    int n_views, cap_views;
};

Tape tape_create(Arena *a);
void tape_free(Tape *tp);

// For ops: record `out` = op(inputs). Returns NULL (and records nothing) when gradients are off
// or no input requires one; otherwise out->requires_grad is set and the node is returned so the
// op can fill its arguments. n_in inputs follow; NULL inputs are allowed.
Node *tape_record(Tape *tp, const char *op, BackwardFn fn, Tensor *out, int n_in, ...);
// Names t (printf-style; a stable name such as "blocks.3.attn.k") for a watched tape and hands it
// to the watcher; nothing when the tape is not watched. Returns t.
Tensor *tape_name(Tape *tp, Tensor *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// For backward functions: the gradient buffer of input k, or NULL if it needs none.
real *node_grad(Node *n, int k);
// Under --exact, for a parameter input k: its ExactSum (its elements from in[k]->exact_at on),
// marked as reached; NULL if it needs none or is not a parameter of an exact store.
ExactSum *node_exact(Node *n, int k);

// For backward functions of ops whose input k gets exactly the output's gradient (a residual
// add): when that input has no gradient yet and both are plain tensors of one size, it takes over
// the output's gradient buffer, which dies with the op, and true is returned (nothing to add).
bool node_grad_take(Node *n, int k);

// loss must be a scalar; its gradient is seeded with 1.
void backward(Tape *tp, Tensor *loss);
// Any output, with its gradient seeded by a copy of dout [out->size].
void backward_from(Tape *tp, Tensor *out, const real *dout);
// Any output whose gradient buffer out->grad is set already and belongs to someone else (an
// outer tape): backward neither frees it nor keeps it beyond the op that takes it over.
void backward_given(Tape *tp, Tensor *out);
