// embedding.c: class-label lookup and the sinusoidal timestep embedding (max period 10000).
#include "common.h"

static void embedding_bwd(Node *n) {
    Tensor *table = n->in[0];
    if (n->exact && table->exact) { // a parameter's: image by image into its exact sums, this rank's images (tape.h)
        ExactSum *e = node_exact(n, 0);
        if (!e) return;
        ArenaMarks mark = arena_marks(n->arena);
        const int64_t *idx = n->ptr;
        const real *dout = host_reals(n->arena, n->out->grad, n->out->size);
        int D = table->shape[1];
        for (int b = n->exact->rank; b < n->out->shape[0]; b += n->exact->ranks)
            exact_add(e, table->exact_at + (size_t)idx[b] * D, dout + (size_t)b * D, (size_t)D);
        arena_release_marks(n->arena, mark);
        return;
    }
    real *dtable = node_grad(n, 0);
    if (dtable) RUN(node_on_device(n), embedding_backward, dtable, n->out->grad, n->ptr,
                    n->out->shape[0], table->shape[0], table->shape[1]);
}

// idx (on the host) must stay valid until backward has run. A table that is no parameter (rows
// gathered, such as a pack's captions) gets its gradient as without --exact: every rank runs it
// alike on the same rows.
Tensor *embedding(Tape *tp, Tensor *table, const int64_t *idx, int B) {
    CHECK(table->ndim == 2, "embedding: table must be [V, D]");
    for (int b = 0; b < B; b++)
        CHECK(idx[b] >= 0 && idx[b] < table->shape[0],
              "embedding: index %lld at position %d is outside the table's %d rows",
              (long long)idx[b], b, table->shape[0]);
    Tensor *out = tensor_new(tp->arena, 2, B, table->shape[1]);
    const int64_t *kernel_idx = op_input(tp->arena, idx, (size_t)B * sizeof(int64_t));
    RUN(on_device(tp), embedding_forward, out->data, table->data, kernel_idx, B, table->shape[0],
        table->shape[1]);
    Node *n = tape_record(tp, "embedding", embedding_bwd, out, 1, table);
    if (n) n->ptr = tp->exact && table->exact ? idx : kernel_idx; // --exact adds a parameter's rows on the host
    return out;
}

#define MAX_PERIOD 10000

static void timestep_bwd(Node *n) {
    real *dt = node_grad(n, 0);
    if (dt) RUN(node_on_device(n), timestep_embedding_backward, dt, n->out->grad, n->in[0]->data,
                n->out->shape[0], n->out->shape[1], MAX_PERIOD);
}

Tensor *timestep_embedding(Tape *tp, Tensor *t, int dim) {
    CHECK(t->ndim == 1 && dim > 1, "timestep_embedding: t must be [B] and dim > 1");
    Tensor *out = tensor_new(tp->arena, 2, t->shape[0], dim);
    RUN(on_device(tp), timestep_embedding_forward, out->data, t->data, t->shape[0], dim, MAX_PERIOD);
    tape_record(tp, "timestep_embedding", timestep_bwd, out, 1, t);
    return out;
}
