// autograd_collectives.c: see autograd_collectives.h. MPI and NCCL exchange contiguous per-rank
// blocks, so the sequence layout (B, P*n, D) is packed to and from rank-major blocks (P, B, n, D)
// around each call, on the host or the device, where the tensors are: a send buffer is a strided
// copy (slice_forward) into unzeroed scratch, what arrives is added (add_rows) into the output.
// Under --exact a gradient held as exact sums takes the same path (packed as sums on their own).
#include "autograd_collectives.h"
#include "../../core/check.h"
#include "../../core/device.h"
#include "../../kernels/run.h"
#include <stdlib.h>
#include <string.h>

// seq (B, P*n, D) += blocks (P, B, n, D): rank r's rows are B rows of n*D values, P*n*D apart in
// seq and n*D apart in blocks
static void from_blocks(bool dev, real *seq, const real *blocks, int P, int B, int n, int D) {
    size_t row = (size_t)n * D;
    for (int r = 0; r < P; r++) RUN(dev, add_rows, seq + r * row, P * row, blocks + r * B * row, row, row, B);
}

// ---- what travels: the values, or values that are bf16 values (Tensor's bf16) in 2 bytes each,
// packed into whole reals (an odd count's last half zero)
static size_t wire_reals(size_t n) { return (n * sizeof(uint16_t) + sizeof(real) - 1) / sizeof(real); }

static real *pack(Arena *a, real *wire, const real *x, size_t n) {
    size_t w = wire_reals(n);
    if (w) zero_bytes(wire + w - 1, sizeof(real));
    RUN(a->device, pack_bf16, (uint16_t *)wire, x, n);
    return wire + w;
}

// out (P n) = every rank's n values of in (comm_all_gather)
static void all_gather_values(Comm *c, Arena *a, real *out, const real *in, size_t n, bool bf16) {
    if (!bf16) {
        comm_all_gather(c, out, in, n);
        return;
    }
    size_t w = wire_reals(n), mark = arena_mark(a);
    real *wire = arena_alloc_empty(a, (size_t)(c->size + 1) * w * sizeof(real)), *mine = wire + c->size * w;
    pack(a, mine, in, n);
    comm_all_gather(c, wire, mine, w);
    for (int r = 0; r < c->size; r++) RUN(a->device, unpack_bf16, out + r * n, (const uint16_t *)(wire + r * w), n);
    arena_release(a, mark);
}

// comm_all_to_all of blocks of values
static void all_to_all_values(Comm *c, Arena *a, real *recv, const size_t *recv_counts, const real *send,
                              const size_t *send_counts, bool bf16) {
    if (!bf16) {
        comm_all_to_all(c, recv, recv_counts, send, send_counts);
        return;
    }
    int P = c->size;
    size_t *ws = xmalloc(2 * (size_t)P * sizeof(size_t)), *wr = ws + P, sent = 0, got = 0, mark = arena_mark(a);
    for (int p = 0; p < P; p++) ws[p] = wire_reals(send_counts[p]), wr[p] = wire_reals(recv_counts[p]), sent += ws[p], got += wr[p];
    real *out = arena_alloc_empty(a, (sent + got) * sizeof(real)), *in = out + sent, *at = out;
    for (int p = 0; p < P; send += send_counts[p++]) at = pack(a, at, send, send_counts[p]);
    comm_all_to_all(c, in, wr, out, ws);
    for (int p = 0; p < P; in += wr[p], recv += recv_counts[p++])
        RUN(a->device, unpack_bf16, recv, (const uint16_t *)in, recv_counts[p]);
    free(ws);
    arena_release(a, mark);
}

// gather: seq (B,P*n,D) += every rank's local (B,n,D)
static void gather(Comm *c, Arena *a, real *seq, const real *local, int B, int n, int D, bool bf16) {
    size_t mark = arena_mark(a), size = (size_t)B * n * D;
    real *blocks = arena_alloc_empty(a, (size_t)c->size * size * sizeof(real));
    all_gather_values(c, a, blocks, local, size, bf16);
    from_blocks(a->device, seq, blocks, c->size, B, n, D);
    arena_release(a, mark);
}

// --exact: n values of kind k, summed over the ranks of c, rounded to reals where the arena keeps
// them; NULL for fronts of which some, on any rank, did not add in a front
static const real *rounded(Comm *c, Arena *a, CommKind k, const void *sums, size_t n) {
    real *host = arena_alloc(arena_host(a), n * sizeof(real));
    double left = 0;
    if (k == COMM_EXACT) exact_parts_result(host, sums, n);
    else left = (double)exact_fronts_result(host, sums, n);
    if (k == COMM_FRONTS) comm_all_reduce(c, COMM_DOUBLE, &left, 1);
    if (left) return NULL;
    if (!a->device) return host;
    real *dev = arena_alloc(a, n * sizeof(real));
    copy_bytes(dev, host, n * sizeof(real));
    return dev;
}

// reduce-scatter: local (B,n,D) += sum over ranks of this rank's rows of seq (B,P*n,D), the values
// exchanged as kind k: the gradient's reals (COMM_REAL, where the arena keeps them), or under
// --exact its exact sums (host memory; seq unused) as their fronts (COMM_FRONTS) or whole
// (COMM_EXACT), rounded once summed. The same blocks, exchange and rows for every kind. Returns
// false, nothing added, where fronts fall short (rounded).
static bool scatter_kind(Comm *c, Arena *a, CommKind k, real *local, const real *seq, const ExactSum *sums,
                         int B, int n, int D) {
    Arena *side = k == COMM_REAL ? a : arena_host(a); // where the blocks are
    size_t mark = arena_mark(a), hmark = arena_mark(arena_host(a)), size = (size_t)B * n * D;
    size_t row = (size_t)n * D, bytes = size * comm_kind_size(k);
    int P = c->size;
    char *blocks = arena_alloc_empty(side, (size_t)(P + 1) * bytes), *mine = blocks + (size_t)P * bytes;
    for (int r = 0; r < P; r++) { // rank r's rows, B of n*D values P*n*D apart, into block r
        char *block = blocks + (size_t)r * bytes;
        size_t from = (size_t)r * row; // in each image
        if (k == COMM_REAL) RUN(a->device, slice_forward, (real *)block, seq, B, (int)(P * row), (int)from, (int)row);
        else
            for (int b = 0; b < B; b++) {
                size_t at = (size_t)b * P * row + from;
                if (k == COMM_FRONTS) exact_fronts((ExactFront *)block + b * row, sums, at, row);
                else exact_parts((ExactPart *)block + b * row, sums, at, NULL, row);
            }
    }
    comm_reduce_scatter(c, k, mine, blocks, size);
    const real *sum = k == COMM_REAL ? (const real *)mine : rounded(c, a, k, mine, size);
    if (sum) RUN(a->device, add_rows, local, size, sum, size, size, 1);
    arena_release(arena_host(a), hmark);
    arena_release(a, mark);
    return sum != NULL;
}

// The reduce-scatter of partials that are sent as bf16 values (--grad-wire bf16): each rank's
// partial of rank r's rows rounded and sent to rank r (an all-to-all: P - 1 blocks sent, as by the
// reduce-scatter), the P that arrive added here in rank order, in float
static void scatter_bf16(Comm *c, Arena *a, real *local, const real *seq, int B, int n, int D) {
    int P = c->size;
    size_t mark = arena_mark(a), size = (size_t)B * n * D, row = (size_t)n * D, w = wire_reals(size);
    real *out = arena_alloc_empty(a, (2 * P * w + size) * sizeof(real)), *in = out + P * w, *block = in + P * w;
    size_t *counts = xmalloc((size_t)P * sizeof(size_t));
    for (int r = 0; r < P; r++) { // rank r's rows, B of n*D values P*n*D apart
        counts[r] = w;
        RUN(a->device, slice_forward, block, seq, B, (int)(P * row), (int)(r * row), (int)row);
        pack(a, out + r * w, block, size);
    }
    comm_all_to_all(c, in, counts, out, counts);
    for (int r = 0; r < P; r++) {
        RUN(a->device, unpack_bf16, block, (const uint16_t *)(in + r * w), size);
        RUN(a->device, add_rows, local, size, block, size, size, 1);
    }
    free(counts);
    arena_release(a, mark);
}

// --exact: the fronts first (10 bytes a value), the sums whole (40) only where they fall short;
// bf16: the partials in 2 bytes a value
static void scatter_add(Comm *c, Arena *a, real *local, const real *seq, const ExactSum *sums, int B,
                        int n, int D, bool bf16) {
    if (bf16) scatter_bf16(c, a, local, seq, B, n, D);
    else if (!sums) scatter_kind(c, a, COMM_REAL, local, seq, NULL, B, n, D);
    else if (!scatter_kind(c, a, COMM_FRONTS, local, NULL, sums, B, n, D))
        scatter_kind(c, a, COMM_EXACT, local, NULL, sums, B, n, D);
}

static void all_gather_bwd(Node *nd) {
    real *dx = node_grad(nd, 0);
    if (dx) scatter_add((Comm *)nd->ptr, nd->arena, dx, nd->out->grad, NULL, nd->iarg[0], nd->iarg[1], nd->iarg[2], nd->iarg[3]);
}

Tensor *seq_all_gather(Tape *tp, Comm *c, Tensor *x) {
    char s[64];
    CHECK(x->ndim == 3, "seq_all_gather: x must be [B, n, D], got %s", tensor_shape_str(x, s, sizeof s));
    int B = x->shape[0], n = x->shape[1], D = x->shape[2];
    Tensor *out = tensor_new(tp->arena, 3, B, c->size * n, D);
    gather(c, tp->arena, out->data, x->data, B, n, D, x->bf16);
    out->bf16 = x->bf16;
    Node *nd = tape_record(tp, "seq_all_gather", all_gather_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = D, nd->iarg[3] = x->bf16 && tp->bf16_grads, nd->ptr = c;
    return out;
}

static void reduce_scatter_bwd(Node *nd) {
    real *dx = node_grad(nd, 0);
    if (dx) gather((Comm *)nd->ptr, nd->arena, dx, nd->out->grad, nd->iarg[0], nd->iarg[1], nd->iarg[2], false);
}

Tensor *seq_reduce_scatter(Tape *tp, Comm *c, Tensor *x) {
    char s[64];
    CHECK(x->ndim == 3 && x->shape[1] % c->size == 0,
          "seq_reduce_scatter: x %s must be [B, P*n, D] with P = %d ranks",
          tensor_shape_str(x, s, sizeof s), c->size);
    int B = x->shape[0], n = x->shape[1] / c->size, D = x->shape[2];
    Tensor *out = tensor_new(tp->arena, 3, B, n, D);
    scatter_add(c, tp->arena, out->data, x->data, NULL, B, n, D, false);
    Node *nd = tape_record(tp, "seq_reduce_scatter", reduce_scatter_bwd, out, 1, x);
    if (nd) nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = D, nd->ptr = c;
    return out;
}

void seq_reduce_scatter_sums(Comm *c, Arena *a, real *local, const ExactSum *seq, int B, int n, int D) {
    scatter_add(c, a, local, NULL, seq, B, n, D, false);
}

typedef struct Spread {
    Comm *c;
    const int64_t *of; // (rows): the row of x each row of the output is
} Spread;

static void spread_bwd(Node *nd) {
    real *dx = node_grad(nd, 0);
    if (!dx) return;
    int B = nd->in[0]->shape[0], rows = nd->out->shape[0], K = nd->out->shape[1];
    const Spread *sp = nd->ptr;
    const int64_t *of = sp->of;
    Arena *a = nd->arena, *host = arena_host(a); // the sums are host memory: a device gradient is staged there
    size_t mark = arena_mark(a), hmark = arena_mark(host), n = (size_t)B * K;
    ExactSum s = exact_view(arena_alloc(host, exact_bytes(n)), n);
    size_t all = (size_t)rows * K;
    real *dout = nd->out->grad, *sum = arena_alloc(host, (all > n ? all : n) * sizeof(real));
    if (a->device) copy_bytes(sum, dout, all * sizeof(real)), dout = sum;
    for (int r = 0; r < rows; r++) exact_add(&s, (size_t)of[r] * K, dout + (size_t)r * K, (size_t)K);
    comm_all_reduce_sums(sp->c, &s, n);
    exact_result(sum, &s, 0, n);
    real *add = sum;
    if (a->device) add = arena_alloc(a, n * sizeof(real)), copy_bytes(add, sum, n * sizeof(real));
    RUN(a->device, add_rows, dx, n, add, n, n, 1);
    arena_release(host, hmark);
    arena_release(a, mark);
}

Tensor *seq_spread_exact(Tape *tp, Comm *c, Tensor *x, const int64_t *of, int rows) {
    char s[64];
    CHECK(x->ndim == 2 && rows > 0, "seq_spread_exact: x must be [B, K], got %s",
          tensor_shape_str(x, s, sizeof s));
    int K = x->shape[1];
    Tensor *out = tensor_new(tp->arena, 2, rows, K);
    for (int r = 0; r < rows; r++) {
        CHECK(of[r] >= 0 && of[r] < x->shape[0], "seq_spread_exact: row %d takes row %lld of %d", r,
              (long long)of[r], x->shape[0]);
        copy_bytes(out->data + (size_t)r * K, x->data + (size_t)of[r] * K, (size_t)K * sizeof(real));
    }
    Node *nd = tape_record(tp, "seq_spread_exact", spread_bwd, out, 1, x);
    if (nd) {
        Spread *sp = arena_alloc(arena_host(tp->arena), sizeof *sp);
        *sp = (Spread){c, of};
        nd->ptr = sp;
    }
    return out;
}

// ---- all-to-all between the sequence and the head layout -------------------------------------
// Both directions ADD into their output (zero for a forward), so each serves as the other's
// backward. Blocks exchanged are (B, n, h dh): rows of one rank, columns of one rank's heads; the
// token shard's block for rank p holds rank p's heads, the head shard's blocks this rank's.

int seq_first_head(int H, int P, int r) { return r * (H / P) + (r < H % P ? r : H % P); }

int seq_heads(int H, int P, int r) { return seq_first_head(H, P, r + 1) - seq_first_head(H, P, r); }

double seq_all_to_all_values(int H, int P, int r, double rows, int dh, A2ADir dir) {
    int h = seq_heads(H, P, r);
    return rows * dh * (dir == TO_HEAD_SHARD ? H - h : (P - 1) * h);
}

typedef struct Heads { // one exchange: H heads of dh columns over the ranks of c, B n rows each
    Comm *c;
    int B, n, H, dh;
    const size_t *theirs, *mine; // per rank p: values in a block of rank p's heads, of this rank's
    bool bf16;                   // the values are bf16 values
} Heads;

// local (B, n, D) -> seq (B, P*n, h_r dh): every rank's tokens of this rank's heads
static void to_head_shard(const Heads *e, Arena *a, real *seq, const real *local) {
    int P = e->c->size, D = e->H * e->dh, w = seq_heads(e->H, P, e->c->rank) * e->dh;
    size_t rows = (size_t)e->B * e->n, block = (size_t)e->n * w, mark = arena_mark(a);
    real *send = arena_alloc_empty(a, rows * (D + (size_t)P * w) * sizeof(real)), *recv = send + rows * D;
    real *to = send;
    for (int p = 0; p < P; p++) { // rank p's heads of this rank's rows
        int at = seq_first_head(e->H, P, p) * e->dh, wp = seq_heads(e->H, P, p) * e->dh;
        RUN(a->device, slice_forward, to, local, (int)rows, D, at, wp);
        to += rows * wp;
    }
    all_to_all_values(e->c, a, recv, e->mine, send, e->theirs, e->bf16);
    for (int s = 0; s < P; s++) // rank s's rows: each image's n rows are one run of n*w
        RUN(a->device, add_rows, seq + s * block, P * block, recv + s * e->B * block, block, block, e->B);
    arena_release(a, mark);
}

// seq (B, P*n, h_r dh) -> local (B, n, D): this rank's tokens of every rank's heads
static void to_token_shard(const Heads *e, Arena *a, real *local, const real *seq) {
    int P = e->c->size, D = e->H * e->dh, w = seq_heads(e->H, P, e->c->rank) * e->dh;
    size_t rows = (size_t)e->B * e->n, block = (size_t)e->n * w, mark = arena_mark(a);
    real *send = arena_alloc_empty(a, rows * (D + (size_t)P * w) * sizeof(real));
    real *recv = send + (size_t)P * rows * w;
    for (int s = 0; s < P; s++) // rank s's rows of this rank's heads
        RUN(a->device, slice_forward, send + s * e->B * block, seq, e->B, (int)(P * block), (int)(s * block), (int)block);
    all_to_all_values(e->c, a, recv, e->theirs, send, e->mine, e->bf16);
    const real *from = recv;
    for (int p = 0; p < P; p++) {
        int at = seq_first_head(e->H, P, p) * e->dh, wp = seq_heads(e->H, P, p) * e->dh;
        RUN(a->device, add_rows, local + at, D, from, wp, wp, rows);
        from += rows * wp;
    }
    arena_release(a, mark);
}

static void exchange(Comm *c, Arena *a, real *out, const real *x, A2ADir dir, const int dims[4], bool bf16) {
    int B = dims[0], n = dims[1], H = dims[2], dh = dims[3];
    size_t *theirs = xmalloc(2 * (size_t)c->size * sizeof(size_t)), *mine = theirs + c->size;
    for (int p = 0; p < c->size; p++) {
        theirs[p] = (size_t)B * n * dh * seq_heads(H, c->size, p);
        mine[p] = (size_t)B * n * dh * seq_heads(H, c->size, c->rank);
    }
    Heads e = {c, B, n, H, dh, theirs, mine, bf16};
    if (dir == TO_HEAD_SHARD) to_head_shard(&e, a, out, x);
    else to_token_shard(&e, a, out, x);
    free(theirs);
}

// iarg: B, n (rows per rank), H, dh, direction, the early bug, the gradient in bf16
static void all_to_all_bwd(Node *nd) {
    real *dx = node_grad(nd, 0);
    const int *i = nd->iarg;
    A2ADir back = i[4] == TO_HEAD_SHARD ? TO_TOKEN_SHARD : TO_HEAD_SHARD;
    if (!dx) return;
    Comm *c = (Comm *)nd->ptr;
    if (!i[5]) {
        exchange(c, nd->arena, dx, nd->out->grad, back, i, i[6]);
        return;
    }
    int B = i[0], n = i[1], H = i[2], dh = i[3], P = c->size, mine = seq_heads(H, P, c->rank);
    for (int b = 0; b < B; b++) // the early bug: this rank's own block only
        RUN(nd->arena->device, add_rows, dx + (size_t)b * n * H * dh + (size_t)seq_first_head(H, P, c->rank) * dh,
            (size_t)H * dh, nd->out->grad + ((size_t)b * P + c->rank) * n * mine * dh, (size_t)mine * dh,
            (size_t)mine * dh, (size_t)n);
}

static Tensor *all_to_all(Tape *tp, Comm *c, Tensor *x, int heads, A2ADir dir, bool early);

Tensor *seq_all_to_all(Tape *tp, Comm *c, Tensor *x, int heads, A2ADir dir) {
    return all_to_all(tp, c, x, heads, dir, false);
}

Tensor *seq_all_to_all_early(Tape *tp, Comm *c, Tensor *x, int heads) {
    return all_to_all(tp, c, x, heads, TO_HEAD_SHARD, true);
}

static Tensor *all_to_all(Tape *tp, Comm *c, Tensor *x, int heads, A2ADir dir, bool early) {
    char s[64];
    int P = c->size, mine = seq_heads(heads, P, c->rank);
    bool head = dir == TO_HEAD_SHARD;
    CHECK(x->ndim == 3 && heads >= P &&
          (head ? x->shape[2] % heads == 0 : x->shape[1] % P == 0 && x->shape[2] % mine == 0),
          "seq_all_to_all: x %s must be [B, n, D] with D a multiple of the %d heads (to the head "
          "shard) or [B, P*n, %d heads' columns] (to the token shard), with %d ranks, at most one "
          "per head", tensor_shape_str(x, s, sizeof s), heads, mine, P);
    int B = x->shape[0], n = head ? x->shape[1] : x->shape[1] / P;
    int dh = head ? x->shape[2] / heads : x->shape[2] / mine;
    Tensor *out = head ? tensor_new(tp->arena, 3, B, P * n, mine * dh)
                       : tensor_new(tp->arena, 3, B, n, heads * dh);
    exchange(c, tp->arena, out->data, x->data, dir, (int[]){B, n, heads, dh}, x->bf16);
    out->bf16 = x->bf16;
    Node *nd = tape_record(tp, "seq_all_to_all", all_to_all_bwd, out, 1, x);
    if (nd)
        nd->iarg[0] = B, nd->iarg[1] = n, nd->iarg[2] = heads, nd->iarg[3] = dh, nd->iarg[4] = dir,
        nd->iarg[5] = early, nd->iarg[6] = x->bf16 && tp->bf16_grads, nd->ptr = c;
    return out;
}
