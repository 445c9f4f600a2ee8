// attention_exact.c: attention under --exact (tape.h), the same bits for any split of the queries
// and keys over ranks and any layout (see attention_exact.h for the pieces). The op here has all
// the keys its queries see; `reduce` sums this rank's rows of dK and dV over the other ranks'
// queries into k's and v's gradients (without it, its rows alone go there). The saved log-sum-exp is
// (B, query blocks, H, block).
#include "attention_exact.h"

// The fused kernels on one block pair: blk queries of one image against blk keys, on the device
// when the arena is a device arena (fixed shapes: the same bits for every split of the blocks)
static const uint8_t *pair_mask(const ExactAttn *g, int kb) { return g->mask ? g->mask + (size_t)kb * g->blk : NULL; }
// the images of query block qb of image (row) b and of key block kb, for a call of that one row
static Segments pair_segments(const ExactAttn *g, int b, int qb, int kb) {
    const Segments *s = &g->seg;
    return s->id ? (Segments){s->id + (size_t)b * s->T, s->T, s->q0 + qb * g->blk, kb * g->blk} : NO_SEGMENTS;
}

// The jobs of a pass (images, or pairs of blocks) run on the OpenMP threads when the arena is a
// host arena and there are at least as many jobs as threads, each thread with its own buffers and
// the kernels inside on that thread alone; else (and on a device arena, whose kernels queue on one
// stream) one after another, the kernels on every thread. A job adds into sums no other job
// touches, each element's terms in the order of the sequential loops, and the kernels give the
// same bits on any number of threads, so the sums are the same.
typedef struct Jobs {
    long n;
    int threads;
    size_t per, host_per; // a thread's reals: `per` in the arena (the last of them the kernels'
                          // scratch), `host_per` on its host side
    real *buf, *host_buf;
} Jobs;

static Jobs jobs(const ExactAttn *g, Arena *a, long n, size_t own, size_t host_own, bool backward) {
    int threads = kernel_threads();
    Jobs j = {.n = n, .threads = !a->device && n >= threads ? threads : 1, .host_per = host_own,
              .per = own + PICK(a->device, attention_scratch_count)(1, g->blk, g->blk, g->H, g->dh, backward)};
    j.buf = arena_alloc(a, (size_t)j.threads * j.per * sizeof(real));
    j.host_buf = arena_alloc(arena_host(a), (size_t)j.threads * j.host_per * sizeof(real));
    return j;
}
// the calling thread's buffers
static int job_thread(const Jobs *j) { return j->threads > 1 ? omp_thread() : 0; }
static real *mine(const Jobs *j) { return j->buf + (size_t)job_thread(j) * j->per; }
static real *mine_host(const Jobs *j) { return j->host_buf + (size_t)job_thread(j) * j->host_per; }
// n reals at src (memory of a's kind) for the host to read: src itself, or copied to `to`
static const real *staged(const Arena *a, const real *src, real *to, size_t n) {
    if (!a->device) return src;
    copy_bytes(to, src, n * sizeof(real));
    return to;
}

// offsets: query block qb of image b in q (B, Tq, D); its log-sum-exp rows in (B, nqb, H, blk)
static size_t q_at(const ExactAttn *g, int b, int qb) { return ((size_t)b * g->Tq + (size_t)qb * g->blk) * g->H * g->dh; }
static size_t l_at(const ExactAttn *g, int b, int qb) { return ((size_t)b * (g->Tq / g->blk) + qb) * g->H * g->blk; }

void exact_attn_lse(const ExactAttn *g, Arena *a, real *lparts, const real *q, const real *k,
                    const real *v, int nk, int kb0) {
    ArenaMarks mark = arena_marks(a);
    size_t D = (size_t)g->H * g->dh, lsize = (size_t)g->B * g->Tq * g->H, nl = (size_t)g->H * g->blk;
    size_t own = (size_t)g->blk * D + nl;
    int nj = nk / g->blk;
    Jobs J = jobs(g, a, (long)g->B * nj, own, 0, false);
    FOR_ON_THREADS(J.threads > 1, schedule(dynamic) num_threads(J.threads),
    for (long job = 0; job < J.n; job++) { // (image, key block)
        int b = (int)(job / nj), j = (int)(job % nj), kb = kb0 + j;
        real *o = mine(&J), *lb = o + (size_t)g->blk * D, *scr = o + own;
        size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
        for (int qb = 0; qb < g->Tq / g->blk; qb++) {
            RUN(a->device, attention_forward, o, lb, scr, q + q_at(g, b, qb), k + ko, v + ko,
                pair_mask(g, kb), pair_segments(g, b, qb, kb), 1, g->blk, g->blk, g->H, g->dh);
            copy_bytes(lparts + kb * lsize + l_at(g, b, qb), lb, nl * sizeof(real));
        }
    });
    arena_release_marks(a, mark);
}

void exact_attn_combine(const ExactAttn *g, real *lse, const real *lparts) {
    size_t lsize = (size_t)g->B * g->Tq * g->H;
#pragma omp parallel for if (lsize * g->nkb > PAR_MIN)
    for (size_t r = 0; r < lsize; r++) {
        double m = -INFINITY, s = 0;
        for (int kb = 0; kb < g->nkb; kb++) m = fmax(m, lparts[kb * lsize + r]);
        for (int kb = 0; m > -INFINITY && kb < g->nkb; kb++) s += exp(lparts[kb * lsize + r] - m);
        lse[r] = m > -INFINITY ? (real)(m + log(s)) : -INFINITY; // no key at all: -inf, output 0
        if (g->no_max && m > -INFINITY) {
            real e = 0;
            for (int kb = 0; kb < g->nkb; kb++) e += (real)exp(lparts[kb * lsize + r]);
            lse[r] = (real)log(e);
        }
    }
}

void exact_attn_out(const ExactAttn *g, Arena *a, ExactSum *o, const real *lse, const real *q,
                    const real *k, const real *v, int nk, int kb0) {
    ArenaMarks mark = arena_marks(a);
    size_t D = (size_t)g->H * g->dh, part = (size_t)g->blk * D, nl = (size_t)g->H * g->blk;
    int nqb = g->Tq / g->blk;
    // the host side: the weighted terms, then the block's output and log-sum-exp staged there
    Jobs J = jobs(g, a, (long)g->B * nqb, part + nl, part + (a->device ? part + nl : 0), false);
    FOR_ON_THREADS(J.threads > 1, schedule(dynamic) num_threads(J.threads),
    for (long job = 0; job < J.n; job++) { // (image, query block): its outputs' sums
        int b = (int)(job / nqb), qb = (int)(job % nqb);
        real *ob = mine(&J), *lb = ob + part, *scr = ob + part + nl, *term = mine_host(&J);
        const real *L = lse + l_at(g, b, qb);
        for (int j = 0; j < nk / g->blk; j++) {
            int kb = kb0 + j;
            size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
            RUN(a->device, attention_forward, ob, lb, scr, q + q_at(g, b, qb), k + ko, v + ko,
                pair_mask(g, kb), pair_segments(g, b, qb, kb), 1, g->blk, g->blk, g->H, g->dh);
            const real *oh = staged(a, ob, term + part, part + nl), *lh = oh + part;
            for (int h = 0; h < g->H; h++) // (B=1, H, blk) log-sum-exp of the block
                for (int i = 0; i < g->blk; i++) {
                    real lkb = lh[(size_t)h * g->blk + i], l = L[(size_t)h * g->blk + i];
                    double w = lkb == -INFINITY ? 0 : g->mean_merge ? 1.0 / g->nkb : exp((double)lkb - l);
                    for (int d = 0; d < g->dh; d++) {
                        size_t x = (size_t)i * D + (size_t)h * g->dh + d;
                        term[x] = (real)(w * oh[x]);
                    }
                }
            exact_add(o, q_at(g, b, qb), term, part);
        }
    });
    arena_release_marks(a, mark);
}

void exact_attn_grad(const ExactAttn *g, Arena *a, ExactSum *dq, ExactSum *dk, ExactSum *dv,
                     const real *dout, const real *out, const real *lse, const real *q,
                     const real *k, const real *v, int nk, int kb0) {
    ArenaMarks mark = arena_marks(a);
    size_t D = (size_t)g->H * g->dh, part = (size_t)g->blk * D, nl = (size_t)g->H * g->blk;
    int nqb = g->Tq / g->blk;
    // per image (its dQ's terms come from every key block): a key block's shares from every query
    // block, then into the sums in one pass; staged to the host side from a device arena
    size_t own = (2 * (size_t)nqb + 2) * part + nl;
    Jobs J = jobs(g, a, g->B, own, a->device ? (2 * (size_t)nqb + 1) * part : 0, true);
    FOR_ON_THREADS(J.threads > 1, schedule(dynamic) num_threads(J.threads),
    for (long job = 0; job < J.n; job++) {
        int b = (int)job;
        real *pq = mine(&J), *pk = pq + part, *pv = pk + nqb * part, *ob = pv + nqb * part;
        real *lb = ob + part, *scr = pq + own, *host = mine_host(&J);
        for (int j = 0; j < nk / g->blk; j++) {
            int kb = kb0 + j;
            size_t ko = ((size_t)b * nk + (size_t)j * g->blk) * D;
            zero_bytes(pk, 2 * nqb * part * sizeof(real));
            for (int qb = 0; qb < nqb; qb++) {
                size_t qo = q_at(g, b, qb);
                if (g->block_delta) // the block's own partial output in place of the merged one
                    RUN(a->device, attention_forward, ob, lb, scr, q + qo, k + ko, v + ko, pair_mask(g, kb),
                        pair_segments(g, b, qb, kb), 1, g->blk, g->blk, g->H, g->dh);
                zero_bytes(pq, part * sizeof(real));
                RUN(a->device, attention_backward, pq, pk + qb * part, pv + qb * part, scr, dout + qo,
                    g->block_delta ? ob : out + qo, lse + l_at(g, b, qb), q + qo, k + ko, v + ko,
                    pair_mask(g, kb), pair_segments(g, b, qb, kb), 1, g->blk, g->blk, g->H, g->dh);
                if (dq) exact_add(dq, qo, staged(a, pq, host, part), part);
            }
            const real *hk = dk || dv ? staged(a, pk, host + part, 2 * nqb * part) : NULL;
            if (dk) exact_add_terms(dk, ko, hk, part, nqb, part);
            if (dv) exact_add_terms(dv, ko, hk + nqb * part, part, nqb, part);
        }
    });
    arena_release_marks(a, mark);
}

void exact_add_into(real *dst, ExactSum *s, size_t at, size_t n, Arena *a) {
    ArenaMarks mark = arena_marks(a);
    real *r = arena_alloc(arena_host(a), n * sizeof(real));
    exact_result(r, s, at, n);
    RUN(a->device, add_rows, dst, n, op_input(a, r, n * sizeof(real)), n, n, 1);
    arena_release_marks(a, mark);
}

// ---- the op: every key here ------------------------------------------------------------------
typedef struct ExactOp {
    ExactAttn g;
    const real *k_all, *v_all; // (B, Tk, D)
    int Tk, kfirst;
    ExactReduceFn reduce;
    void *ctx;
} ExactOp;

static void exact_attention_bwd(Node *n) {
    const ExactOp *e = n->ptr;
    const ExactAttn *g = &e->g;
    Arena *a = n->arena;
    real *dq = node_grad(n, 0), *dk = node_grad(n, 1), *dv = node_grad(n, 2);
    ArenaMarks mark = arena_marks(a);
    size_t D = (size_t)g->H * g->dh, all = (size_t)g->B * e->Tk * D;
    ExactSum sq = exact_sums(a, (size_t)g->B * g->Tq * D), sk = exact_sums(a, all), sv = exact_sums(a, all);
    exact_attn_grad(g, a, &sq, &sk, &sv, n->out->grad, n->out->data, n->saved->data, n->in[0]->data,
                    e->k_all, e->v_all, e->Tk, 0);
    if (dq) exact_add_into(dq, &sq, 0, sq.n, a);
    int own = n->in[1]->shape[1];
    if (e->reduce) {
        if (dk) e->reduce(a, dk, &sk, g->B, own, (int)D, e->ctx);
        if (dv) e->reduce(a, dv, &sv, g->B, own, (int)D, e->ctx);
    } else
        for (int b = 0; b < g->B; b++) { // this rank's rows
            size_t from = ((size_t)b * e->Tk + e->kfirst) * D, rows = (size_t)own * D;
            if (dk) exact_add_into(dk + b * rows, &sk, from, rows, a);
            if (dv) exact_add_into(dv + b * rows, &sv, from, rows, a);
        }
    arena_release_marks(a, mark);
}

Tensor *attention_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, Tensor *k_all, Tensor *v_all,
                        int kfirst, int heads, const uint8_t *key_mask, Segments seg,
                        ExactReduceFn reduce, void *ctx) {
    char qs[64], ks[64];
    int B = q->shape[0], Tq = q->shape[1], D = q->shape[2], Tk = k_all->shape[1], blk = tp->exact->block;
    CHECK(q->ndim == 3 && k_all->ndim == 3 && k_all->shape[0] == B &&
              k_all->shape[2] == D && tensor_same_shape(k, v) && tensor_same_shape(k_all, v_all) &&
              heads > 0 && D % heads == 0 && Tq % blk == 0 && Tk % blk == 0 &&
              kfirst + k->shape[1] <= Tk,
          "attention_exact: q %s and keys %s must be [B, n, D] in blocks of %d tokens",
          tensor_shape_str(q, qs, sizeof qs), tensor_shape_str(k_all, ks, sizeof ks), blk);
    Arena *a = tp->arena;
    ExactAttn g = {B, Tq, heads, D / heads, blk, Tk / blk, key_mask, seg, false, false, false};
    Tensor *out = tensor_like(a, q), *lse = tensor_new(a, 1, B * Tq * heads);
    ArenaMarks mark = arena_marks(a);
    // the pieces' log-sum-exps, their combination and the output's sums on the host
    real *lparts = arena_alloc(arena_host(a), ((size_t)g.nkb + 1) * lse->size * sizeof(real));
    real *L = lparts + (size_t)g.nkb * lse->size, *o_host = arena_alloc(arena_host(a), out->size * sizeof(real));
    exact_attn_lse(&g, a, lparts, q->data, k_all->data, v_all->data, Tk, 0);
    exact_attn_combine(&g, L, lparts);
    ExactSum o = exact_sums(a, out->size);
    exact_attn_out(&g, a, &o, L, q->data, k_all->data, v_all->data, Tk, 0);
    exact_result(o_host, &o, 0, out->size);
    copy_bytes(out->data, o_host, out->size * sizeof(real));
    copy_bytes(lse->data, L, lse->size * sizeof(real));
    arena_release_marks(a, mark);
    Node *n = tape_record(tp, "attention_exact", exact_attention_bwd, out, 3, q, k, v);
    if (n) {
        ExactOp *e = arena_alloc(arena_host(a), sizeof *e);
        *e = (ExactOp){g, k_all->data, v_all->data, Tk, kfirst, reduce, ctx};
        n->ptr = e, n->saved = lse;
    }
    return out;
}

// ---- keys that every rank holds whole (a caption), queries in canonical blocks ------------------
typedef struct WholeKV {
    Segments seg;
    int blk, heads;
    ExactSumFn sum_group;
    void *ctx;
} WholeKV;

// the call of query block qb of image b: its images from token q0 + qb blk of row b
static Segments whole_kv_segments(const WholeKV *w, int b, int qb) {
    const Segments *s = &w->seg;
    return s->id ? (Segments){s->id + (size_t)b * s->T, s->T, s->q0 + qb * w->blk, s->k0} : NO_SEGMENTS;
}

static void whole_kv_bwd(Node *nd) {
    const WholeKV *w = nd->ptr;
    Tensor *q = nd->in[0], *k = nd->in[1], *v = nd->in[2];
    Arena *a = nd->arena;
    int B = q->shape[0], n = q->shape[1], L = k->shape[1], D = q->shape[2], nqb = n / w->blk;
    size_t kv = (size_t)L * D, all = (size_t)B * kv;
    real *dq = node_grad(nd, 0), *dk = node_grad(nd, 1), *dv = node_grad(nd, 2);
    ArenaMarks mark = arena_marks(a);
    ExactSum s = exact_view(arena_alloc(arena_host(a), exact_bytes(2 * all)), 2 * all);
    real *part = arena_alloc(a, 2 * kv * sizeof(real)), *scratch = dq ? NULL : arena_alloc(a, (size_t)w->blk * D * sizeof(real));
    for (int b = 0; b < B; b++)
        for (int qb = 0; qb < nqb; qb++) { // the block's share of dK and dV, whatever rank holds it
            size_t at = ((size_t)b * n + (size_t)qb * w->blk) * D;
            zero_bytes(part, 2 * kv * sizeof(real));
            if (scratch) zero_bytes(scratch, (size_t)w->blk * D * sizeof(real));
            attention_kernel_backward(a, dq ? dq + at : scratch, part, part + kv, nd->out->grad + at,
                                      nd->out->data + at, nd->saved->data + ((size_t)b * nqb + qb) * w->heads * w->blk,
                                      q->data + at, k->data + b * kv, v->data + b * kv, NULL,
                                      whole_kv_segments(w, b, qb), 1, w->blk, L, w->heads, D / w->heads);
            ArenaMarks staged = arena_marks(a);
            const real *h = host_reals(a, part, 2 * kv);
            exact_add(&s, b * kv, h, kv);
            exact_add(&s, all + b * kv, h + kv, kv);
            arena_release_marks(a, staged);
        }
    w->sum_group(&s, w->ctx); // every rank: every query's share
    if (dk) exact_add_into(dk, &s, 0, all, a);
    if (dv) exact_add_into(dv, &s, all, all, a);
    arena_release_marks(a, mark);
}

Tensor *attention_whole_kv_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, Segments seg,
                                 ExactSumFn sum_group, void *ctx) {
    int B = q->shape[0], n = q->shape[1], L = k->shape[1], D = q->shape[2], blk = tp->exact->block;
    CHECK(n % blk == 0 && D % heads == 0 && k->shape[0] == B && tensor_same_shape(k, v),
          "attention_whole_kv_exact: %d queries in blocks of %d, %d heads of width %d", n, blk, heads, D);
    Tensor *out = tensor_empty_like(tp->arena, q), *lse = tensor_empty(tp->arena, 3, B * (n / blk), heads, blk);
    seg.id = op_input(tp->arena, seg.id, (size_t)B * seg.T * sizeof(int32_t));
    WholeKV w = {seg, blk, heads, sum_group, ctx};
    size_t kv = (size_t)L * D;
    for (int b = 0; b < B; b++)
        for (int qb = 0; qb < n / blk; qb++) { // the same calls whatever rank holds the block
            size_t at = ((size_t)b * n + (size_t)qb * blk) * D;
            attention_kernel_forward(tp->arena, out->data + at, lse->data + ((size_t)b * (n / blk) + qb) * heads * blk,
                                     q->data + at, k->data + b * kv, v->data + b * kv, NULL,
                                     whole_kv_segments(&w, b, qb), 1, blk, L, heads, D / heads);
        }
    Node *nd = tape_record(tp, "attention (keys whole, exact)", whole_kv_bwd, out, 3, q, k, v);
    if (nd) {
        WholeKV *kept = arena_alloc(arena_host(tp->arena), sizeof *kept);
        *kept = w;
        nd->ptr = kept, nd->saved = lse;
    }
    return out;
}

// ---- joint attention: the caption's tokens in front of the image's, the caption whole here -----
ExactJointKeys exact_joint_keys(Arena *a, int B, int R, int Rp, int copies, int Tk, int q0, int nq,
                                const uint8_t *key_mask, const int32_t *ids) {
    int front = copies * Rp, keys = front + Tk, T = keys + Rp + nq;
    Arena *host = arena_host(a);
    uint8_t *mask = arena_alloc(host, (size_t)keys);
    memset(mask, 1, (size_t)keys);
    if (key_mask) memcpy(mask + front, key_mask, (size_t)Tk);
    int32_t *id = arena_alloc(host, (size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) { // the keys (the caption's copies), the caption's queries, the image's
            bool query = j >= keys, caption = query ? j - keys < Rp : j < front;
            int x = caption ? (query ? j - keys : j % Rp) : R + (query ? q0 + j - keys - Rp : j - front);
            id[(size_t)b * T + j] = !caption || x < R ? joint_image(ids, R, Tk, b, x, query) : query ? 0 : -1;
        }
    const int32_t *on = op_input(a, id, (size_t)B * T * sizeof(int32_t));
    return (ExactJointKeys){op_input(a, mask, (size_t)keys), {on, T, keys, 0}, {on, T, keys + Rp, 0}};
}

typedef struct JointOp {
    ExactAttn t, i;           // the caption's queries (Rp of them, padded), the image's (n)
    int R, Rp, copies;        // caption tokens (padded to Rp), the copies of its keys (a bug's: else 1)
    int n, Tk, kfirst;        // image queries, image keys, ours from
    const real *k_all, *v_all; // (B, Tk, D) every image key, ours among them
    Tensor *out_t, *out_i, *lse_t, *lse_i; // the outputs (B, Rp | n, D) and their log-sum-exps
    ExactReduceFn reduce;
    ExactSumFn sum_group;
    void *ctx;
    bool adds_caption_queries; // this rank adds the caption queries' shares of dK and dV
} JointOp;

real *exact_take_rows(Arena *a, const real *x, size_t stride, size_t first, int B, int len, int rows, size_t D) {
    real *dst = arena_alloc(a, (size_t)B * rows * D * sizeof(real)); // zeroed
    for (int b = 0; b < B; b++)
        copy_bytes(dst + (size_t)b * rows * D, x + b * stride + first * D, (size_t)len * D * sizeof(real));
    return dst;
}

void exact_add_rows(Arena *a, real *dst, size_t d_pitch, ExactSum *s, size_t s_pitch, size_t width, int B) {
    ArenaMarks mark = arena_marks(a);
    real *r = arena_alloc(arena_host(a), (size_t)B * s_pitch * sizeof(real));
    exact_result(r, s, 0, (size_t)B * s_pitch);
    RUN(a->device, add_rows, dst, d_pitch, op_input(a, r, (size_t)B * s_pitch * sizeof(real)), s_pitch, width, B);
    arena_release_marks(a, mark);
}

static void joint_bwd(Node *nd) {
    const JointOp *j = nd->ptr;
    Arena *a = nd->arena;
    int B = j->t.B, R = j->R, Rp = j->Rp, n = j->n, Tk = j->Tk, kb = j->copies * Rp / j->t.blk;
    size_t D = (size_t)j->t.H * j->t.dh, row = (size_t)(R + n) * D;
    real *dq = node_grad(nd, 0), *dk = node_grad(nd, 1), *dv = node_grad(nd, 2);
    ArenaMarks mark = arena_marks(a);
    const real *q = nd->in[0]->data, *k = nd->in[1]->data, *v = nd->in[2]->data, *g = nd->out->grad;
    real *qt = exact_take_rows(a, q, row, 0, B, R, Rp, D), *qi = exact_take_rows(a, q, row, R, B, n, n, D);
    real *kt = exact_take_rows(a, k, row, 0, B, R, Rp, D), *vt = exact_take_rows(a, v, row, 0, B, R, Rp, D);
    real *gt = exact_take_rows(a, g, row, 0, B, R, Rp, D), *gi = exact_take_rows(a, g, row, R, B, n, n, D);
    ExactSum sq_t = exact_sums(a, (size_t)B * Rp * D), sq_i = exact_sums(a, (size_t)B * n * D);
    ExactSum sk_t = exact_sums(a, (size_t)B * Rp * D), sv_t = exact_sums(a, (size_t)B * Rp * D);
    ExactSum sk_i = exact_sums(a, (size_t)B * Tk * D), sv_i = exact_sums(a, (size_t)B * Tk * D);
    // the image queries' shares of every key's gradient, then the caption queries' (the same on
    // every rank: one adds their shares of dK and dV); each copy of the caption's keys adds its own
    bool adds = j->adds_caption_queries;
    for (int c = 0; c < j->copies; c++) {
        int at = c * Rp / j->t.blk;
        exact_attn_grad(&j->i, a, &sq_i, &sk_t, &sv_t, gi, j->out_i->data, j->lse_i->data, qi, kt, vt, Rp, at);
        exact_attn_grad(&j->t, a, &sq_t, adds ? &sk_t : NULL, adds ? &sv_t : NULL, gt, j->out_t->data, j->lse_t->data,
                        qt, kt, vt, Rp, at);
    }
    exact_attn_grad(&j->i, a, &sq_i, &sk_i, &sv_i, gi, j->out_i->data, j->lse_i->data, qi, j->k_all, j->v_all, Tk, kb);
    exact_attn_grad(&j->t, a, &sq_t, adds ? &sk_i : NULL, adds ? &sv_i : NULL, gt, j->out_t->data, j->lse_t->data, qt,
                    j->k_all, j->v_all, Tk, kb);
    if (dq) exact_add_rows(a, dq, row, &sq_t, (size_t)Rp * D, (size_t)R * D, B), exact_add_rows(a, dq + (size_t)R * D, row, &sq_i, (size_t)n * D, (size_t)n * D, B);
    if (j->sum_group) j->sum_group(&sk_t, j->ctx), j->sum_group(&sv_t, j->ctx); // the caption's: whole on every rank
    if (dk) exact_add_rows(a, dk, row, &sk_t, (size_t)Rp * D, (size_t)R * D, B);
    if (dv) exact_add_rows(a, dv, row, &sv_t, (size_t)Rp * D, (size_t)R * D, B);
    real *own = arena_alloc(a, (size_t)B * n * D * sizeof(real));
    for (int x = 0; x < 2; x++) { // the image keys': this rank's rows, summed over the ranks' queries
        real *d = x ? dv : dk;
        ExactSum *s = x ? &sv_i : &sk_i;
        if (!d) continue;
        zero_bytes(own, (size_t)B * n * D * sizeof(real));
        if (j->reduce) j->reduce(a, own, s, B, n, (int)D, j->ctx);
        else for (int b = 0; b < B; b++) exact_add_into(own + (size_t)b * n * D, s, ((size_t)b * Tk + j->kfirst) * D, (size_t)n * D, a);
        RUN(a->device, add_rows, d + (size_t)R * D, row, own, (size_t)n * D, (size_t)n * D, B);
    }
    arena_release_marks(a, mark);
}

// One pass of a query set over both key groups (the caption's, each of its copies, then every
// image key): the log-sum-exp into lse, the output into out (B, Tq, D)
static void joint_forward(const ExactAttn *g, Arena *a, real *out, real *lse, const real *q, const real *kt,
                          const real *vt, int Rp, int copies, const real *k_all, const real *v_all, int Tk) {
    ArenaMarks mark = arena_marks(a);
    size_t lsize = (size_t)g->B * g->Tq * g->H, size = (size_t)g->B * g->Tq * g->H * g->dh;
    real *lparts = arena_alloc(arena_host(a), ((size_t)g->nkb + 1) * lsize * sizeof(real)), *L = lparts + (size_t)g->nkb * lsize;
    int kb = copies * Rp / g->blk; // the image keys' first block
    for (int c = 0; c < copies; c++) exact_attn_lse(g, a, lparts, q, kt, vt, Rp, c * Rp / g->blk);
    exact_attn_lse(g, a, lparts, q, k_all, v_all, Tk, kb);
    exact_attn_combine(g, L, lparts);
    ExactSum o = exact_sums(a, size);
    for (int c = 0; c < copies; c++) exact_attn_out(g, a, &o, L, q, kt, vt, Rp, c * Rp / g->blk);
    exact_attn_out(g, a, &o, L, q, k_all, v_all, Tk, kb);
    real *host = arena_alloc(arena_host(a), size * sizeof(real));
    exact_result(host, &o, 0, size);
    copy_bytes(out, host, size * sizeof(real));
    copy_bytes(lse, L, lsize * sizeof(real));
    arena_release_marks(a, mark);
}

Tensor *attention_joint_exact(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int R, int copies, Tensor *k_all, Tensor *v_all,
                              int kfirst, int heads, const uint8_t *key_mask, const int32_t *ids,
                              ExactReduceFn reduce, ExactSumFn sum_group, void *ctx) {
    int B = q->shape[0], n = q->shape[1] - R, D = q->shape[2], Tk = k_all->shape[1], blk = tp->exact->block;
    int Rp = (R + blk - 1) / blk * blk, keys = copies * Rp + Tk;
    CHECK(R >= 1 && copies >= 1 && n % blk == 0 && Tk % blk == 0 && D % heads == 0 && tensor_same_shape(q, k) &&
              tensor_same_shape(k, v) && tensor_same_shape(k_all, v_all) && k_all->shape[0] == B,
          "attention_joint_exact: %d caption and %d image queries, %d image keys, in blocks of %d", R, n, Tk, blk);
    Arena *a = tp->arena, *host = arena_host(a);
    ExactJointKeys jk = exact_joint_keys(a, B, R, Rp, copies, Tk, kfirst, n, key_mask, ids);
    int H = heads, dh = D / heads, nkb = keys / blk;
    JointOp j = {{B, Rp, H, dh, blk, nkb, jk.mask, jk.seg_t, false, false, false},
                 {B, n, H, dh, blk, nkb, jk.mask, jk.seg_i, false, false, false},
                 R, Rp, copies, n, Tk, kfirst, k_all->data, v_all->data, NULL, NULL, NULL, NULL, reduce, sum_group, ctx,
                 !sum_group || tp->exact->rank == 0};
    size_t row = (size_t)(R + n) * D;
    Tensor *out = tensor_like(a, q);
    j.out_t = tensor_new(a, 3, B, Rp, D), j.out_i = tensor_new(a, 3, B, n, D);
    j.lse_t = tensor_new(a, 1, B * Rp * H), j.lse_i = tensor_new(a, 1, B * n * H);
    ArenaMarks inputs = arena_marks(a);
    real *qt = exact_take_rows(a, q->data, row, 0, B, R, Rp, D), *qi = exact_take_rows(a, q->data, row, R, B, n, n, D);
    real *kt = exact_take_rows(a, k->data, row, 0, B, R, Rp, D), *vt = exact_take_rows(a, v->data, row, 0, B, R, Rp, D);
    joint_forward(&j.t, a, j.out_t->data, j.lse_t->data, qt, kt, vt, Rp, copies, k_all->data, v_all->data, Tk);
    joint_forward(&j.i, a, j.out_i->data, j.lse_i->data, qi, kt, vt, Rp, copies, k_all->data, v_all->data, Tk);
    arena_release_marks(a, inputs);
    for (int b = 0; b < B; b++) {
        copy_bytes(out->data + b * row, j.out_t->data + (size_t)b * Rp * D, (size_t)R * D * sizeof(real));
        copy_bytes(out->data + b * row + (size_t)R * D, j.out_i->data + (size_t)b * n * D, (size_t)n * D * sizeof(real));
    }
    Node *nd = tape_record(tp, "joint attention (exact)", joint_bwd, out, 3, q, k, v);
    if (!nd) return out;
    JointOp *kept = arena_alloc(host, sizeof *kept);
    *kept = j;
    nd->ptr = kept;
    return out;
}
