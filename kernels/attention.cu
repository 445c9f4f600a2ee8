// attention.cu: the fused attention of attention.c on the device, with its semantics: heads are
// column blocks of width dh in rows of width D = H*dh, masked keys weigh exactly 0, a query whose
// keys are all masked outputs 0 with log-sum-exp -inf, a query sees only its own image's keys
// in a pack (segments.h), and backward adds into the gradients.
// The float32 build runs on tensor cores (attention_mma.cu); the float64 build on the CUDA-core
// kernels here: one thread per query row (forward, dQ) or key row (dK, dV); the other side's rows
// are staged in shared memory, TILE rows at a time, and the online softmax runs over each tile,
// so no Tq x Tk buffer exists. The backward recomputes the probabilities P = exp(S - L) twice:
// once per key row for dK and dV, once per query row for dQ, so no thread adds into another's
// rows (no atomics: the result does not depend on scheduling). Both share the launchers, the
// delta rowsum(dO * O) and the ring's merge.
#include "attention.cuh"
#include <math.h>

#define MAX_DH ATTN_CUDA_MAX_DH

// delta (B*H, Tq) = rowsum(dO * O) per head, in double as on the CPU
static __global__ void delta_kernel(real *delta, const real *dout, const real *out, int B, int Tq,
                                    int H, int dh) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= (size_t)B * H * Tq) return;
    int i = (int)(x % Tq), h = (int)(x / Tq % H), b = (int)(x / ((size_t)Tq * H));
    size_t at = row_at(b, Tq, i, H * dh, h, dh);
    double s = 0;
    for (int d = 0; d < dh; d++) s += (double)dout[at + d] * out[at + d];
    delta[x] = (real)s;
}

#ifdef REAL_F64 // the CUDA-core kernels: the float64 build's (float32's run on tensor cores)
#define ROWS 64 // threads (rows) per block
#define TILE 16 // rows staged at a time

// stages rows [j0, j0 + n) of head h of x (and y) into shared memory, n x dh each
__device__ static void stage(real *xs, real *ys, const real *x, const real *y, int b, int T, int j0,
                             int n, int D, int h, int dh) {
    for (int e = threadIdx.x; e < n * dh; e += blockDim.x) {
        size_t at = row_at(b, T, j0 + e / dh, D, h, dh) + e % dh;
        xs[e] = x[at];
        if (ys) ys[e] = y[at];
    }
}

__device__ static real dot(const real *a, const real *b, int dh) {
    real s = 0;
    for (int d = 0; d < dh; d++) s += a[d] * b[d];
    return s;
}

// out, lse: grid (query blocks, B*H), one thread per query row
static __global__ void forward_kernel(AttentionArgs a, real *out, real *lse) {
    const real *q = a.q, *k = a.k, *v = a.v;
    const uint8_t *mask = a.mask;
    Segments seg = a.seg;
    int Tq = a.Tq, Tk = a.Tk, H = a.H, dh = a.dh;
    real scale = a.scale;
    extern __shared__ double smem_d[]; // double: aligned for either real
    real *Ks = (real *)smem_d, *Vs = Ks + TILE * dh;
    int b = blockIdx.y / H, h = blockIdx.y % H, D = H * dh, i = blockIdx.x * ROWS + threadIdx.x;
    int i0 = blockIdx.x * ROWS, nq = Tq - i0 < ROWS ? Tq - i0 : ROWS;
    bool active = i < Tq;
    int32_t img = active ? image_of(seg, b, seg.q0 + i) : 0;
    real qr[MAX_DH], acc[MAX_DH], m = -INFINITY, l = 0;
    for (int d = 0; d < dh; d++)
        qr[d] = active ? q[row_at(b, Tq, i, D, h, dh) + d] : 0, acc[d] = 0;
    for (int j0 = 0; j0 < Tk; j0 += TILE) {
        int nk = Tk - j0 < TILE ? Tk - j0 : TILE;
        if (!meet(seg, b, seg.q0 + i0, nq, seg.k0 + j0, nk)) continue;
        stage(Ks, Vs, k, v, b, Tk, j0, nk, D, h, dh);
        __syncthreads();
        if (active) {
            real s[TILE], mx = m;
            for (int r = 0; r < TILE; r++) { // past nk: -inf, weight exactly 0
                bool masked = (mask && !mask[j0 + r]) || image_of(seg, b, seg.k0 + j0 + r) != img;
                s[r] = r >= nk || masked ? -INFINITY : scale * dot(qr, Ks + r * dh, dh);
                mx = s[r] > mx ? s[r] : mx;
            }
            if (mx != -INFINITY) { // else every key so far masked: this tile adds nothing
                real alpha = exp(m - mx), sum = 0; // rescales what earlier tiles summed
                for (int d = 0; d < dh; d++) acc[d] *= alpha;
                for (int r = 0; r < TILE; r++) {
                    if (r >= nk) break;
                    real p = exp(s[r] - mx); // masked: exactly 0
                    sum += p;
                    for (int d = 0; d < dh; d++) acc[d] += p * Vs[r * dh + d];
                }
                l = l * alpha + sum;
                m = mx;
            }
        }
        __syncthreads();
    }
    if (!active) return;
    real inv = l > 0 ? 1 / l : 0;
    for (int d = 0; d < dh; d++) out[row_at(b, Tq, i, D, h, dh) + d] = acc[d] * inv;
    lse[(size_t)blockIdx.y * Tq + i] = l > 0 ? m + log(l) : -INFINITY;
}

// the probability of query row (qr, L) for key row kr: exp(scale q.k - L), 0 for a query whose
// keys are all masked (L = -inf)
__device__ static real prob(const real *qr, const real *kr, real L, int dh, real scale) {
    return L == -INFINITY ? 0 : exp(scale * dot(qr, kr, dh) - L);
}

// dk, dv += for every key row (one thread each): sum over queries of P dO, scale dS Q. The key
// and value rows are read where they are (global memory, cached); the sums stay in registers.
static __global__ void dkv_kernel(AttentionArgs a, real *dk, real *dv, const real *dout, const real *lse,
                                  const real *delta) {
    const real *q = a.q, *k = a.k, *v = a.v;
    const uint8_t *mask = a.mask;
    Segments seg = a.seg;
    int Tq = a.Tq, Tk = a.Tk, H = a.H, dh = a.dh;
    real scale = a.scale;
    extern __shared__ double smem_d[];
    real *Qs = (real *)smem_d, *dOs = Qs + TILE * dh, *Ls = dOs + TILE * dh, *Ds = Ls + TILE;
    int b = blockIdx.y / H, h = blockIdx.y % H, D = H * dh, j = blockIdx.x * ROWS + threadIdx.x;
    int j0 = blockIdx.x * ROWS, nk = Tk - j0 < ROWS ? Tk - j0 : ROWS;
    bool active = j < Tk && !(mask && !mask[j]); // a masked key has no gradient
    int32_t img = active ? image_of(seg, b, seg.k0 + j) : 0;
    const real *kr = k + row_at(b, Tk, active ? j : 0, D, h, dh);
    const real *vr = v + row_at(b, Tk, active ? j : 0, D, h, dh);
    real dkr[MAX_DH], dvr[MAX_DH];
    for (int d = 0; d < dh; d++) dkr[d] = dvr[d] = 0;
    for (int i0 = 0; i0 < Tq; i0 += TILE) {
        int nq = Tq - i0 < TILE ? Tq - i0 : TILE;
        if (!meet(seg, b, seg.k0 + j0, nk, seg.q0 + i0, nq)) continue;
        stage(Qs, dOs, q, dout, b, Tq, i0, nq, D, h, dh);
        for (int r = threadIdx.x; r < nq; r += blockDim.x) {
            Ls[r] = lse[(size_t)blockIdx.y * Tq + i0 + r];
            Ds[r] = delta[(size_t)blockIdx.y * Tq + i0 + r];
        }
        __syncthreads();
        for (int r = 0; active && r < nq; r++) {
            if (image_of(seg, b, seg.q0 + i0 + r) != img) continue;
            const real *qr = Qs + r * dh, *g = dOs + r * dh;
            real p = prob(qr, kr, Ls[r], dh, scale);
            if (p == 0) continue;
            real ds = p * (dot(g, vr, dh) - Ds[r]);
            for (int d = 0; d < dh; d++) dvr[d] += p * g[d], dkr[d] += scale * ds * qr[d];
        }
        __syncthreads();
    }
    if (!active) return;
    for (int d = 0; d < dh; d++) {
        if (dk) dk[row_at(b, Tk, j, D, h, dh) + d] += dkr[d];
        if (dv) dv[row_at(b, Tk, j, D, h, dh) + d] += dvr[d];
    }
}

// dq += for every query row (one thread each): sum over keys of scale dS K. The query and dO
// rows are read where they are (global memory, cached); the sum stays in registers.
static __global__ void dq_kernel(AttentionArgs a, real *dq, const real *dout, const real *lse, const real *delta) {
    const real *q = a.q, *k = a.k, *v = a.v;
    const uint8_t *mask = a.mask;
    Segments seg = a.seg;
    int Tq = a.Tq, Tk = a.Tk, H = a.H, dh = a.dh;
    real scale = a.scale;
    extern __shared__ double smem_d[];
    real *Ks = (real *)smem_d, *Vs = Ks + TILE * dh;
    int b = blockIdx.y / H, h = blockIdx.y % H, D = H * dh, i = blockIdx.x * ROWS + threadIdx.x;
    int i0 = blockIdx.x * ROWS, nq = Tq - i0 < ROWS ? Tq - i0 : ROWS;
    bool active = i < Tq;
    int32_t img = active ? image_of(seg, b, seg.q0 + i) : 0;
    const real *qr = q + row_at(b, Tq, active ? i : 0, D, h, dh);
    const real *g = dout + row_at(b, Tq, active ? i : 0, D, h, dh);
    real L = active ? lse[(size_t)blockIdx.y * Tq + i] : -INFINITY;
    real dl = active ? delta[(size_t)blockIdx.y * Tq + i] : 0;
    real dqr[MAX_DH];
    for (int d = 0; d < dh; d++) dqr[d] = 0;
    for (int j0 = 0; j0 < Tk; j0 += TILE) {
        int nk = Tk - j0 < TILE ? Tk - j0 : TILE;
        if (!meet(seg, b, seg.q0 + i0, nq, seg.k0 + j0, nk)) continue;
        stage(Ks, Vs, k, v, b, Tk, j0, nk, D, h, dh);
        __syncthreads();
        for (int r = 0; active && r < nk; r++) {
            if ((mask && !mask[j0 + r]) || image_of(seg, b, seg.k0 + j0 + r) != img) continue;
            real p = prob(qr, Ks + r * dh, L, dh, scale);
            if (p == 0) continue;
            real ds = p * (dot(g, Vs + r * dh, dh) - dl);
            for (int d = 0; d < dh; d++) dqr[d] += scale * ds * Ks[r * dh + d];
        }
        __syncthreads();
    }
    if (active)
        for (int d = 0; d < dh; d++) dq[row_at(b, Tq, i, D, h, dh) + d] += dqr[d];
}

#endif

// ---- launchers -----------------------------------------------------------------------------------

static void check_shape(int B, int Tq, int Tk, int H, int dh) {
    CHECK(B > 0 && Tq > 0 && Tk > 0 && H > 0 && dh > 0 && dh <= MAX_DH,
          "attention_cuda: bad shape B %d, Tq %d, Tk %d, H %d, dh %d (dh at most %d)", B, Tq, Tk,
          H, dh, MAX_DH);
    CHECK((long)B * H <= 65535, "attention_cuda: B * H = %ld above the grid's 65535", (long)B * H);
}

static real scale_of(int dh) { return (real)(1 / sqrt((double)dh)); }

#ifndef REAL_F64
static bool bf16_products;
void attention_set_bf16_cuda(bool on) { bf16_products = on; }
static AttentionMode mode(void) { return bf16_products ? ATTN_BF16 : device_tf32() ? ATTN_TF32 : ATTN_3XTF32; }
#else
void attention_set_bf16_cuda(bool on) { CHECK(!on, "bf16 attention: the float32 build's (tensor cores)"); }
#endif

size_t attention_scratch_count_cuda(int B, int Tq, int Tk, int H, int dh, bool backward) {
    (void)Tk, (void)dh;
    return backward ? (size_t)B * H * Tq : 0;
}

void attention_forward_cuda(real *out, real *lse, real *scratch, const real *q, const real *k,
                            const real *v, const uint8_t *key_mask, Segments seg,
                            int B, int Tq, int Tk, int H, int dh, cudaStream_t stream) {
    (void)scratch; // none needed: the argument is the CPU kernel's
    check_shape(B, Tq, Tk, H, dh);
#ifndef REAL_F64 // float32: on tensor cores
    attention_forward_mma(AttentionArgs{q, k, v, key_mask, seg, Tq, Tk, H, dh, scale_of(dh)}, out, lse, B,
                          mode(), stream);
#else
    dim3 grid((Tq + ROWS - 1) / ROWS, B * H);
    size_t smem = 2 * (size_t)TILE * dh * sizeof(real);
    forward_kernel<<<grid, ROWS, smem, stream>>>(AttentionArgs{q, k, v, key_mask, seg, Tq, Tk, H, dh, scale_of(dh)},
                                                 out, lse);
    CUDA_CHECK(cudaGetLastError());
#endif
}

void attention_backward_cuda(real *dq, real *dk, real *dv, real *scratch, const real *dout,
                             const real *out, const real *lse, const real *q, const real *k,
                             const real *v, const uint8_t *key_mask, Segments seg,
                             int B, int Tq, int Tk, int H, int dh, cudaStream_t stream) {
    check_shape(B, Tq, Tk, H, dh);
    size_t rows = (size_t)B * H * Tq;
    delta_kernel<<<cuda_blocks(rows), CUDA_BLOCK, 0, stream>>>(scratch, dout, out, B, Tq, H, dh);
    CUDA_CHECK(cudaGetLastError());
    AttentionArgs args = {q, k, v, key_mask, seg, Tq, Tk, H, dh, scale_of(dh)};
#ifndef REAL_F64 // float32: on tensor cores
    attention_backward_mma(args, dq, dk, dv, dout, lse, scratch, B, mode(), stream);
#else
    if (dk || dv) {
        dim3 grid((Tk + ROWS - 1) / ROWS, B * H);
        size_t smem = (2 * (size_t)TILE * dh + 2 * TILE) * sizeof(real);
        dkv_kernel<<<grid, ROWS, smem, stream>>>(args, dk, dv, dout, lse, scratch);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dq) {
        dim3 grid((Tq + ROWS - 1) / ROWS, B * H);
        size_t smem = 2 * (size_t)TILE * dh * sizeof(real);
        dq_kernel<<<grid, ROWS, smem, stream>>>(args, dq, dout, lse, scratch);
        CUDA_CHECK(cudaGetLastError());
    }
#endif
}

// a partial attention output and its log-sum-exp: the one merged into, and a block's
struct Partial {
    real *o, *lse;
};
struct BlockPartial {
    const real *o, *lse;
};

// one thread per (b, h, i) row: the merge of attention.c, in double
static __global__ void merge_kernel(Partial held, BlockPartial blk, int B, int n, int H, int dh, AttnMerge m) {
    real *o = held.o, *lse = held.lse;
    const real *o_blk = blk.o, *lse_blk = blk.lse;
    size_t row = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (row >= (size_t)B * H * n) return;
    size_t i = row % n, b = row / n / H, h = row / n % H, D = (size_t)H * dh;
    double la = lse[row], lb = lse_blk[row], wa, wb, lnew;
    if (lb == -INFINITY) return;
    merge_weights(la, lb, m, &wa, &wb, &lnew);
    real *oa = o + (b * n + i) * D + h * dh;
    const real *ob = o_blk + (b * n + i) * D + h * dh;
    for (int d = 0; d < dh; d++) oa[d] = (real)(wa * oa[d] + wb * ob[d]);
    lse[row] = (real)lnew;
}

void attention_merge_cuda(real *o, real *lse, const real *o_blk, const real *lse_blk, int B, int n,
                          int H, int dh, AttnMerge m, cudaStream_t stream) {
    size_t rows = (size_t)B * H * n;
    if (rows == 0) return;
    merge_kernel<<<cuda_blocks(rows), CUDA_BLOCK, 0, stream>>>(Partial{o, lse}, BlockPartial{o_blk, lse_blk}, B, n, H,
                                                              dh, m);
    CUDA_CHECK(cudaGetLastError());
}
