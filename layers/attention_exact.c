// attention_exact.c: attention under --exact (tape.h), the same bits for any split of the queries
// over ranks and any layout. Queries and keys go in canonical blocks of ex->block tokens. Forward:
// each query block attends to each key block alone with the fused kernel, and the partial outputs
// merge by log-sum-exp in key-block order. Backward: for each key block in order, the fused
// backward with the merged output and log-sum-exp gives the block's exact share of dQ (added in
// order) and of dK, dV, which go into order-independent sums over all query blocks; `reduce`
// completes those over the other ranks' queries, and this rank's rows go to k's and v's
// gradients. The saved log-sum-exp is (B, query blocks, H, block).
#include "common.h"

typedef struct ExactAttention { // what backward needs besides q, k, v and the output
    const real *k_all, *v_all;   // (B, Tk, D)
    const uint8_t *mask;         // (Tk) or NULL
    int B, Tq, Tk, H, dh, blk, kfirst;
    ExactReduceFn reduce;
    void *ctx;
} ExactAttention;

// scratch for one block pair's kernels
static real *pair_scratch(Arena *a, int blk, int dh) {
    int bq = blk < ATTN_BQ ? blk : ATTN_BQ, bk = blk < ATTN_BK ? blk : ATTN_BK;
    return arena_alloc(a, attention_scratch_count(bq, bk, dh, kernel_threads()) * sizeof(real));
}

static void exact_attention_bwd(Node *n) {
    const ExactAttention *g = n->ptr;
    Arena *a = n->arena;
    int D = g->H * g->dh, blk = g->blk, bq = blk < ATTN_BQ ? blk : ATTN_BQ, bk = blk < ATTN_BK ? blk : ATTN_BK;
    real *dq = node_grad(n, 0), *dk = node_grad(n, 1), *dv = node_grad(n, 2);
    size_t mark = arena_mark(a), all = (size_t)g->B * g->Tk * D, part = (size_t)blk * D;
    int nqb = g->Tq / blk;
    ExactSum sk = exact_view(arena_alloc(a, exact_bytes(all)), all);
    ExactSum sv = exact_view(arena_alloc(a, exact_bytes(all)), all);
    // a key block's shares from every query block, then into the sums in one pass
    real *pk = arena_alloc(a, 2 * nqb * part * sizeof(real)), *pv = pk + nqb * part;
    real *scr = pair_scratch(a, blk, g->dh);
    const real *q = n->in[0]->data, *o = n->out->data, *dout = n->out->grad, *lse = n->saved->data;
    for (int b = 0; b < g->B; b++)
        for (int kb = 0; kb < g->Tk / blk; kb++) { // each query block sees the key blocks in order
            size_t ko = ((size_t)b * g->Tk + (size_t)kb * blk) * D;
            memset(pk, 0, 2 * nqb * part * sizeof(real));
            for (int qb = 0; qb < nqb; qb++) {
                size_t qo = ((size_t)b * g->Tq + (size_t)qb * blk) * D;
                const real *L = lse + ((size_t)b * nqb + qb) * g->H * blk;
                attention_backward(dq ? dq + qo : NULL, pk + qb * part, pv + qb * part, scr, dout + qo,
                                   o + qo, L, q + qo, g->k_all + ko, g->v_all + ko,
                                   g->mask ? g->mask + (size_t)kb * blk : NULL, 1, blk, blk, g->H,
                                   g->dh, bq, bk);
            }
            exact_add_terms(&sk, ko, pk, part, nqb, part);
            exact_add_terms(&sv, ko, pv, part, nqb, part);
        }
    if (g->reduce) g->reduce(&sk, g->ctx), g->reduce(&sv, g->ctx);
    int n_own = n->in[1]->shape[1];
    real *row = arena_alloc(a, (size_t)n_own * D * sizeof(real));
    for (int b = 0; b < g->B; b++) { // this rank's rows, added into the gradients
        size_t from = ((size_t)b * g->Tk + g->kfirst) * D, to = (size_t)b * n_own * D, len = (size_t)n_own * D;
        if (dk) exact_result(row, &sk, from, len), add_rows(dk + to, len, row, len, len, 1);
        if (dv) exact_result(row, &sv, from, len), add_rows(dv + to, len, row, len, len, 1);
    }
    arena_release(a, mark);
}

Tensor *attention_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, Tensor *k_all, Tensor *v_all,
                        int kfirst, int heads, const uint8_t *key_mask, ExactReduceFn reduce,
                        void *ctx) {
    char qs[64], ks[64];
    int B = q->shape[0], Tq = q->shape[1], D = q->shape[2], Tk = k_all->shape[1], blk = tp->exact->block;
    CHECK(!on_device(tp) && q->ndim == 3 && k_all->ndim == 3 && k_all->shape[0] == B &&
              k_all->shape[2] == D && tensor_same_shape(k, v) && tensor_same_shape(k_all, v_all) &&
              heads > 0 && D % heads == 0 && Tq % blk == 0 && Tk % blk == 0 &&
              kfirst + k->shape[1] <= Tk,
          "attention_exact: q %s and keys %s must be host tensors [B, n, D] in blocks of %d tokens",
          tensor_shape_str(q, qs, sizeof qs), tensor_shape_str(k_all, ks, sizeof ks), blk);
    int H = heads, dh = D / heads, nqb = Tq / blk, nkb = Tk / blk;
    int bq = blk < ATTN_BQ ? blk : ATTN_BQ, bk = blk < ATTN_BK ? blk : ATTN_BK;
    Arena *a = tp->arena;
    Tensor *out = tensor_like(a, q), *lse = tensor_new(a, 1, B * nqb * H * blk);
    size_t mark = arena_mark(a), part = (size_t)blk * D;
    real *po = arena_alloc(a, (part + (size_t)H * blk) * sizeof(real)), *pl = po + part;
    real *scr = pair_scratch(a, blk, dh);
    for (int b = 0; b < B; b++)
        for (int qb = 0; qb < nqb; qb++) {
            size_t qo = ((size_t)b * Tq + (size_t)qb * blk) * D;
            real *L = lse->data + ((size_t)b * nqb + qb) * H * blk;
            for (int kb = 0; kb < nkb; kb++) {
                size_t ko = ((size_t)b * Tk + (size_t)kb * blk) * D;
                attention_forward(kb ? po : out->data + qo, kb ? pl : L, scr, q->data + qo,
                                  k_all->data + ko, v_all->data + ko,
                                  key_mask ? key_mask + (size_t)kb * blk : NULL, 1, blk, blk, H, dh, bq, bk);
                if (kb) attention_merge(out->data + qo, L, po, pl, 1, blk, H, dh, 0);
            }
        }
    arena_release(a, mark);
    Node *n = tape_record(tp, "attention_exact", exact_attention_bwd, out, 3, q, k, v);
    if (n) {
        ExactAttention *g = arena_alloc(arena_host(a), sizeof *g);
        *g = (ExactAttention){k_all->data, v_all->data, key_mask, B, Tq, Tk, H, dh, blk, kfirst, reduce, ctx};
        n->ptr = g, n->saved = lse;
    }
    return out;
}
