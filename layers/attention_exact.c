// attention_exact.c: attention under --exact (tape.h), the same bits for any split of the queries
// and keys over ranks and any layout (see attention_exact.h for the pieces). The op here has all
// the keys its queries see; `reduce` completes the sums of dK and dV over the other ranks'
// queries, and this rank's rows go to k's and v's gradients. The saved log-sum-exp is
// (B, query blocks, H, block).
#include "attention_exact.h"

static int tile(int blk, int max) { return blk < max ? blk : max; }

// The jobs of a pass (images, or pairs of blocks) run on the OpenMP threads when there are at
// least as many as threads, each thread with its own buffers and the small attention calls inside
// on that thread alone; else one after another, the calls on every thread. A job adds into sums
// no other job touches, each element's terms in the order of the loops before they ran in
// parallel (and the kernels give the same bits on any number of threads), so the sums are the same.
typedef struct Jobs {
    long n;
    int threads;
    size_t per; // reals of a thread's buffers: `own` of the caller's, then the attention scratch
    real *buf;
} Jobs;

static Jobs jobs(const ExactAttn *g, Arena *a, long n, size_t own) {
    int threads = kernel_threads();
    Jobs j = {.n = n, .threads = n >= threads ? threads : 1,
              .per = own + attention_tiled_scratch_count(tile(g->blk, ATTN_BQ), tile(g->blk, ATTN_BK), g->dh, threads)};
    j.buf = arena_alloc(a, (size_t)j.threads * j.per * sizeof(real));
    return j;
}

// the calling thread's buffers, and its attention scratch `own` reals on
static real *mine(const Jobs *j) { return j->buf + (size_t)(j->threads > 1 ? omp_thread() : 0) * j->per; }

// offsets: query block qb of image b in q (B, Tq, D); its log-sum-exp rows in (B, nqb, H, blk)
static size_t q_at(const ExactAttn *g, int b, int qb) { return ((size_t)b * g->Tq + (size_t)qb * g->blk) * g->H * g->dh; }
static size_t l_at(const ExactAttn *g, int b, int qb) { return ((size_t)b * (g->Tq / g->blk) + qb) * g->H * g->blk; }

void exact_attn_lse(const ExactAttn *g, Arena *a, real *lparts, const real *q, const real *k,
                    const real *v, int nk, int kb0) {
    size_t mark = arena_mark(a), D = (size_t)g->H * g->dh, lsize = (size_t)g->B * g->Tq * g->H;
    int nj = nk / g->blk;
    Jobs J = jobs(g, a, (long)g->B * nj, (size_t)g->blk * D);
#pragma omp parallel for schedule(dynamic) if (J.threads > 1)
    for (long job = 0; job < J.n; job++) { // (image, key block)
        int b = (int)(job / nj), j = (int)(job % nj), kb = kb0 + j;
        real *o = mine(&J), *scr = o + (size_t)g->blk * D;
        size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
        for (int qb = 0; qb < g->Tq / g->blk; qb++)
            attention_forward_tiled(o, lparts + kb * lsize + l_at(g, b, qb), scr, q + q_at(g, b, qb), k + ko,
                              v + ko, g->mask ? g->mask + (size_t)kb * g->blk : NULL, 1, g->blk,
                              g->blk, g->H, g->dh, tile(g->blk, ATTN_BQ), tile(g->blk, ATTN_BK));
    }
    arena_release(a, mark);
}

void exact_attn_combine(const ExactAttn *g, real *lse, const real *lparts) {
    size_t lsize = (size_t)g->B * g->Tq * g->H;
#pragma omp parallel for if (lsize * g->nkb > PAR_MIN)
    for (size_t r = 0; r < lsize; r++) {
        double m = -INFINITY, s = 0;
        for (int kb = 0; kb < g->nkb; kb++) m = fmax(m, lparts[kb * lsize + r]);
        for (int kb = 0; m > -INFINITY && kb < g->nkb; kb++) s += exp(lparts[kb * lsize + r] - m);
        lse[r] = m > -INFINITY ? (real)(m + log(s)) : -INFINITY; // no key at all: -inf, output 0
    }
}

void exact_attn_out(const ExactAttn *g, Arena *a, ExactSum *o, const real *lse, const real *q,
                    const real *k, const real *v, int nk, int kb0) {
    size_t mark = arena_mark(a), D = (size_t)g->H * g->dh, part = (size_t)g->blk * D;
    int nqb = g->Tq / g->blk;
    Jobs J = jobs(g, a, (long)g->B * nqb, 2 * part + (size_t)g->H * g->blk);
#pragma omp parallel for schedule(dynamic) if (J.threads > 1)
    for (long job = 0; job < J.n; job++) { // (image, query block): its outputs' sums
        int b = (int)(job / nqb), qb = (int)(job % nqb);
        real *ob = mine(&J), *term = ob + part, *lb = term + part, *scr = lb + (size_t)g->H * g->blk;
        const real *L = lse + l_at(g, b, qb);
        for (int j = 0; j < nk / g->blk; j++) {
            int kb = kb0 + j;
            size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
            attention_forward_tiled(ob, lb, scr, q + q_at(g, b, qb), k + ko, v + ko,
                              g->mask ? g->mask + (size_t)kb * g->blk : NULL, 1, g->blk, g->blk,
                              g->H, g->dh, tile(g->blk, ATTN_BQ), tile(g->blk, ATTN_BK));
            for (int h = 0; h < g->H; h++) // (B=1, H, blk) log-sum-exp of the block
                for (int i = 0; i < g->blk; i++) {
                    real lkb = lb[(size_t)h * g->blk + i], l = L[(size_t)h * g->blk + i];
                    double w = lkb == -INFINITY ? 0 : g->mean_merge ? 1.0 / g->nkb : exp((double)lkb - l);
                    for (int d = 0; d < g->dh; d++) {
                        size_t x = (size_t)i * D + (size_t)h * g->dh + d;
                        term[x] = (real)(w * ob[x]);
                    }
                }
            exact_add(o, q_at(g, b, qb), term, part);
        }
    }
    arena_release(a, mark);
}

void exact_attn_grad(const ExactAttn *g, Arena *a, ExactSum *dq, ExactSum *dk, ExactSum *dv,
                     const real *dout, const real *out, const real *lse, const real *q,
                     const real *k, const real *v, int nk, int kb0) {
    size_t mark = arena_mark(a), D = (size_t)g->H * g->dh, part = (size_t)g->blk * D;
    int nqb = g->Tq / g->blk;
    // per image (its dQ's terms come from every key block); a key block's shares from every query
    // block, then into the sums in one pass
    Jobs J = jobs(g, a, g->B, (2 * (size_t)nqb + 2) * part + (size_t)g->H * g->blk);
#pragma omp parallel for schedule(dynamic) if (J.threads > 1)
    for (long b = 0; b < J.n; b++) {
        real *pq = mine(&J), *pk = pq + part, *pv = pk + nqb * part, *ob = pv + nqb * part;
        real *lb = ob + part, *scr = lb + (size_t)g->H * g->blk;
        for (int j = 0; j < nk / g->blk; j++) {
            int kb = kb0 + j;
            size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
            memset(pk, 0, 2 * nqb * part * sizeof(real));
            for (int qb = 0; qb < nqb; qb++) {
                size_t qo = q_at(g, (int)b, qb);
                const uint8_t *mask = g->mask ? g->mask + (size_t)kb * g->blk : NULL;
                if (g->block_delta) // the block's own partial output in place of the merged one
                    attention_forward_tiled(ob, lb, scr, q + qo, k + ko, v + ko, mask, 1, g->blk, g->blk,
                                      g->H, g->dh, tile(g->blk, ATTN_BQ), tile(g->blk, ATTN_BK));
                memset(pq, 0, part * sizeof(real));
                attention_backward_tiled(pq, pk + qb * part, pv + qb * part, scr, dout + qo, g->block_delta ? ob : out + qo,
                                   lse + l_at(g, (int)b, qb), q + qo, k + ko, v + ko, mask, 1, g->blk, g->blk,
                                   g->H, g->dh, tile(g->blk, ATTN_BQ), tile(g->blk, ATTN_BK));
                if (dq) exact_add(dq, qo, pq, part);
            }
            if (dk) exact_add_terms(dk, ko, pk, part, nqb, part);
            if (dv) exact_add_terms(dv, ko, pv, part, nqb, part);
        }
    }
    arena_release(a, mark);
}

void exact_add_into(real *dst, ExactSum *s, size_t at, size_t n, Arena *a) {
    size_t mark = arena_mark(a);
    real *r = arena_alloc(a, n * sizeof(real));
    exact_result(r, s, at, n);
    add_rows(dst, n, r, n, n, 1);
    arena_release(a, mark);
}

// ---- the op: every key here ------------------------------------------------------------------
typedef struct ExactOp {
    ExactAttn g;
    const real *k_all, *v_all; // (B, Tk, D)
    int Tk, kfirst;
    ExactReduceFn reduce;
    void *ctx;
} ExactOp;

static ExactSum sums(Arena *a, size_t n) { return exact_view(arena_alloc(a, exact_bytes(n)), n); }

static void exact_attention_bwd(Node *n) {
    const ExactOp *e = n->ptr;
    const ExactAttn *g = &e->g;
    Arena *a = n->arena;
    real *dq = node_grad(n, 0), *dk = node_grad(n, 1), *dv = node_grad(n, 2);
    size_t mark = arena_mark(a), D = (size_t)g->H * g->dh, all = (size_t)g->B * e->Tk * D;
    ExactSum sq = sums(a, (size_t)g->B * g->Tq * D), sk = sums(a, all), sv = sums(a, all);
    exact_attn_grad(g, a, &sq, &sk, &sv, n->out->grad, n->out->data, n->saved->data, n->in[0]->data,
                    e->k_all, e->v_all, e->Tk, 0);
    if (dq) exact_add_into(dq, &sq, 0, sq.n, a);
    if (e->reduce) e->reduce(&sk, e->ctx), e->reduce(&sv, e->ctx);
    size_t own = (size_t)n->in[1]->shape[1] * D;
    for (int b = 0; b < g->B; b++) { // this rank's rows
        size_t from = ((size_t)b * e->Tk + e->kfirst) * D;
        if (dk) exact_add_into(dk + b * own, &sk, from, own, a);
        if (dv) exact_add_into(dv + b * own, &sv, from, own, a);
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
    Arena *a = tp->arena;
    ExactAttn g = {B, Tq, heads, D / heads, blk, Tk / blk, key_mask, false, false};
    Tensor *out = tensor_like(a, q), *lse = tensor_new(a, 1, B * Tq * heads);
    size_t mark = arena_mark(a);
    real *lparts = arena_alloc(a, (size_t)g.nkb * lse->size * sizeof(real));
    exact_attn_lse(&g, a, lparts, q->data, k_all->data, v_all->data, Tk, 0);
    exact_attn_combine(&g, lse->data, lparts);
    ExactSum o = sums(a, out->size);
    exact_attn_out(&g, a, &o, lse->data, q->data, k_all->data, v_all->data, Tk, 0);
    exact_result(out->data, &o, 0, out->size);
    arena_release(a, mark);
    Node *n = tape_record(tp, "attention_exact", exact_attention_bwd, out, 3, q, k, v);
    if (n) {
        ExactOp *e = arena_alloc(arena_host(a), sizeof *e);
        *e = (ExactOp){g, k_all->data, v_all->data, Tk, kfirst, reduce, ctx};
        n->ptr = e, n->saved = lse;
    }
    return out;
}
