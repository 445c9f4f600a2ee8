// linear.c: y = x W^T + b over the last dim (PyTorch Linear layout). Under --exact (tape.h) the
// rows go in canonical blocks: ex->block tokens of one image for x (B, n, C), one image's row
// for the conditioning's x (B, C); each block's weight and bias gradients are added into the
// parameters' order-independent sums (on the device: computed there, added on the host).
#include "common.h"

// rows per call: N (one call) unless exact
static int block_rows(const Tape *tp, const Tensor *x) {
    return !tp->exact ? rows_of(x) : x->ndim == 3 ? tp->exact->block : 1;
}

// Calls on blocks run on the OpenMP threads, each call on one thread, when there are at least as
// many as threads (on the host): the kernels give the same bits on any number of threads
static bool blocks_on_threads(bool dev, int calls) { return !dev && calls > 1 && calls >= kernel_threads(); }

// The values a linear computes with: x's and w's, or under --precision bf16 their roundings, made
// in a (transient: released at the mark the caller took; made again for backward); an x of bf16
// values as it is. An x stored in 2 bytes a value (to_bf16_stored): unpacked whole under --exact,
// else NULL: the linear unpacks a block of its rows at a time (unpack_rows), so that no float copy
// of it is ever whole
typedef struct Operands { const real *x, *w; } Operands;
static Operands operands(Arena *a, const Tensor *x, const Tensor *w, bool bf16, bool exact) {
    if (!bf16) return (Operands){x->data, w->data};
    const real *xv = x->half ? (exact ? bf16_values(a, x, 0, x->size) : NULL)
                             : x->bf16 ? x->data : bf16_copy(a, x->data, x->size);
    return (Operands){xv, bf16_copy(a, w->data, w->size)};
}

// rows of a stored x of C columns unpacked at once (layers.h)
static int unpack_rows(int C) { return UNPACK_VALUES / C > UNPACK_ROWS ? UNPACK_VALUES / C : UNPACK_ROWS; }

// Under `parts` P (linear_parts) the output's column groups are stored one after another: part j,
// x W_j^T + b_j of w's rows [j O, (j + 1) O) (O = OC / P), is (N, O) at out + j N O; its weight
// and bias gradients are w's and b's rows there, its dX adds into the one dX. Part j's rows from r
// of an output (or its gradient) p, its rows of a weight (or dW) p, of a bias (or dB) p or NULL:
#define PART_ROWS(p, j, r) ((p) + (size_t)(j) * N * O + (size_t)(r) * O)
#define W_OF(p, j) ((p) + (size_t)(j) * O * C)
#define B_OF(p, j) ((p) ? (p) + (size_t)(j) * O : NULL)
static void linear_bwd(Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    int N = n->iarg[0], C = n->iarg[1], OC = n->iarg[2], R = n->iarg[3], P = n->iarg[5], O = OC / P;
    real *dx = node_grad(n, 0), *dout = n->out->grad;
    real *dw = n->exact ? NULL : node_grad(n, 1), *db = b && !n->exact ? node_grad(n, 2) : NULL;
    size_t at = arena_mark(n->arena); // after the gradients' buffers
    Operands v = operands(n->arena, x, w, n->iarg[4], n->exact);
    bool dev = node_on_device(n);
    if (!n->exact) {
        for (int j = 0; j < P; j++)
            RUN(dev, linear_backward, dx, v.x && dw ? W_OF(dw, j) : NULL, B_OF(db, j), PART_ROWS(dout, j, 0), v.x, W_OF(v.w, j), N, C, O);
        for (int r0 = 0, U = unpack_rows(C); !v.x && dw && r0 < N; r0 += U) { // x stored: dW by blocks
            int rows = N - r0 < U ? N - r0 : U;
            size_t mark = arena_mark(n->arena);
            const real *xs = bf16_values(n->arena, x, (size_t)r0 * C, (size_t)rows * C);
            for (int j = 0; j < P; j++)
                RUN(dev, linear_backward, NULL, W_OF(dw, j), NULL, PART_ROWS(dout, j, r0), xs, W_OF(v.w, j), rows, C, O);
            arena_release(n->arena, mark);
        }
        arena_release(n->arena, at);
        return;
    }
    ExactSum *ew = node_exact(n, 1), *eb = b ? node_exact(n, 2) : NULL;
    CHECK(ew || !w->requires_grad, "linear: --exact needs the weight to be a parameter of the store");
    if (dx)
        FOR_ON_THREADS(blocks_on_threads(dev, N / R), , for (int r0 = 0; r0 < N; r0 += R) for (int j = 0; j < P; j++)
            RUN(dev, linear_backward, dx + (size_t)r0 * C, NULL, NULL, PART_ROWS(dout, j, r0), NULL, W_OF(v.w, j), R, C, O););
    // the blocks this rank adds: every one, or of the conditioning's rows its images (tape.h)
    int first = x->ndim == 2 ? n->exact->rank : 0, step = x->ndim == 2 ? n->exact->ranks : 1;
    int blocks = N / R > first ? (N / R - first + step - 1) / step : 0;
    if (!ew || !blocks) {
        arena_release(n->arena, at);
        return;
    }
    // the blocks' gradients a few at a time, then into the sums
    ArenaMarks mark = arena_marks(n->arena);
    size_t part = (size_t)OC * C + OC;
    int per = (int)(LINEAR_EXACT_TERMS / part);
    per = per > LINEAR_EXACT_BLOCKS ? LINEAR_EXACT_BLOCKS : per;
    per = per < 1 ? 1 : per > blocks ? blocks : per;
    real *parts = arena_alloc(n->arena, (size_t)per * part * sizeof(real));
    for (int k0 = 0; k0 < blocks; k0 += per) {
        int count = blocks - k0 < per ? blocks - k0 : per;
        FOR_ON_THREADS(blocks_on_threads(dev, count), , for (int k = 0; k < count; k++) {
            size_t r0 = (size_t)(first + (k0 + k) * step) * R;
            real *dwk = parts + (size_t)k * part;
            zero_bytes(dwk, part * sizeof(real)); // by the thread that adds into it
            for (int j = 0; j < P; j++)
                RUN(dev, linear_backward, NULL, W_OF(dwk, j), eb ? B_OF(dwk + (size_t)OC * C, j) : NULL,
                    PART_ROWS(dout, j, r0), v.x + r0 * C, W_OF(v.w, j), R, C, O);
        });
        ArenaMarks staged = arena_marks(n->arena);
        const real *h = host_reals(n->arena, parts, (size_t)count * part);
        exact_add_terms(ew, w->exact_at, h, part, count, (size_t)OC * C);
        if (eb) exact_add_terms(eb, b->exact_at, h + (size_t)OC * C, part, count, (size_t)OC);
        arena_release_marks(n->arena, staged);
    }
    arena_release_marks(n->arena, mark);
    arena_release(n->arena, at);
}

// x (..., C) -> out (P, ..., OC / P): part j after part j - 1 (linear_bwd)
static Tensor *linear_run(Tape *tp, Tensor *x, Tensor *w, Tensor *b, int P) {
    char xs[64], ws[64];
    CHECK(w->ndim == 2 && last_dim(x) == w->shape[1],
          "linear: input %s does not match weight %s (weight must be [out, %d])",
          tensor_shape_str(x, xs, sizeof xs), tensor_shape_str(w, ws, sizeof ws), last_dim(x));
    CHECK(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]),
          "linear: bias must have shape [%d] to match weight %s", w->shape[0],
          tensor_shape_str(w, ws, sizeof ws));
    CHECK(P >= 1 && w->shape[0] % P == 0 && x->ndim < MAX_DIMS, "linear: %d outputs do not split into %d parts",
          w->shape[0], P);
    int N = rows_of(x), C = w->shape[1], OC = w->shape[0], O = OC / P, R = block_rows(tp, x);
    CHECK(!tp->exact || ((x->ndim == 2 || x->ndim == 3) && N % R == 0),
          "linear: --exact runs over (B, C) or (B, n, C) with n a multiple of %d; got %s",
          R, tensor_shape_str(x, xs, sizeof xs));
    int shape[MAX_DIMS] = {P};
    for (int d = 0; d < x->ndim; d++) shape[d + 1] = x->shape[d];
    shape[x->ndim] = O;
    Tensor *out = P == 1 ? with_last_dim(tp->arena, x, OC, false) : tensor_empty_shape(tp->arena, x->ndim + 1, shape);
    real *y = out->data, *bias = b ? b->data : NULL;
    size_t at = arena_mark(tp->arena);
    Operands v = operands(tp->arena, x, w, tp->bf16, tp->exact);
    if (v.x)
        FOR_ON_THREADS(blocks_on_threads(on_device(tp), N / R), , for (int r0 = 0; r0 < N; r0 += R) for (int j = 0; j < P; j++)
            RUN(on_device(tp), linear_forward, PART_ROWS(y, j, r0), v.x + (size_t)r0 * C, W_OF(v.w, j), B_OF(bias, j), R, C, O););
    for (int r0 = 0, U = unpack_rows(C); !v.x && r0 < N; r0 += U) { // x stored: a block of rows at a time
        int rows = N - r0 < U ? N - r0 : U;
        size_t mark = arena_mark(tp->arena);
        const real *xr = bf16_values(tp->arena, x, (size_t)r0 * C, (size_t)rows * C);
        for (int j = 0; j < P; j++)
            RUN(on_device(tp), linear_forward, PART_ROWS(y, j, r0), xr, W_OF(v.w, j), B_OF(bias, j), rows, C, O);
        arena_release(tp->arena, mark);
    }
    arena_release(tp->arena, at);
    Node *n = tape_record(tp, "linear", linear_bwd, out, 3, x, w, b);
    if (n) n->iarg[0] = N, n->iarg[1] = C, n->iarg[2] = OC, n->iarg[3] = R, n->iarg[4] = tp->bf16, n->iarg[5] = P;
    return out;
}
#undef PART_ROWS
#undef W_OF
#undef B_OF

Tensor *linear(Tape *tp, Tensor *x, Tensor *w, Tensor *b) { return linear_run(tp, x, w, b, 1); }

void linear_parts(Tape *tp, Tensor *x, Tensor *w, Tensor *b, int parts, Tensor **out) {
    Tensor *y = linear_run(tp, x, w, b, parts);
    if (parts == 1) { // the output itself, not a view
        out[0] = y;
        return;
    }
    for (int j = 0; j < parts; j++)
        out[j] = tensor_reshape(tp->arena, tensor_rows(tp->arena, y, j, 1), x->ndim, y->shape + 1);
}
