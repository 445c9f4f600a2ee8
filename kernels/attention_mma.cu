// attention_mma.cu: the attention of attention.cu on tensor cores (float32 build), forward and
// backward in FlashAttention-2's shape, with the same semantics (key masks, packs with their
// q0/k0 offsets and tile skipping, -inf log-sum-exp for a query whose keys are all masked, the
// LSE the ring merges, gradients added with +=).
//
// A block of WARPS warps owns 16 rows a warp: query rows (forward, dQ) or key rows (dK, dV). The
// other side's rows come through shared memory KT at a time by cp.async into two buffers, the
// next tile landing while this one is used (pipeline). Each warp's products run on mma.sync
// (m16n8k8, TF32): mma_rows forms a 16 x KT block of scores (S = Q K^T, dP = dO V^T, or their
// transposes for the key side), mma_cols adds such a block times the tile's rows into a 16 x DP
// accumulator (O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q). The online softmax works on the
// accumulators (a row's values lie in a group of 4 lanes: max and sum by __shfl_xor_sync).
// Backward: the key side's kernel recomputes P once per pair from the LSE and the delta
// (rowsum(dO * O), computed once) for dK and dV; dQ is a separate pass of the query side, so no
// two blocks add into one place: no atomics, the same bits every run.
//
// A block of scores goes from accumulators to an A operand without a shuffle: lane (g, t) holds
// columns 2t and 2t + 1 of each 8 where an A fragment wants columns t and t + 4, so mma_cols takes
// each 8 columns in the order 0 2 4 6 1 3 5 7 (its k index x is column 2 (x % 4) + x / 4) and
// reads the tile's rows in that order too.
//
// Precision (AttentionMode), always accumulating in float32 with the softmax and LSE in float32:
// 3xTF32 by default (each factor x split into h = tf32(x) and l = tf32(x - h); the product is
// l h' + h l' + h h'), float32's accuracy as PyTorch's float32 attention on tensor cores; with
// --tf32 one product h h' (ATTN_TF32_TOL); bf16 products (m16n8k16, inputs and P rounded to
// bf16 as they enter a fragment; ATTN_BF16_TOL) for mixed precision. In bf16 an accumulator's
// two 8-column blocks are an A operand as they are, so the key order below is TF32's alone, and
// widths are padded to a multiple of 16 (16, 32, 64, 80, 128).
//
// Head widths are padded with zeros to DP, the first of 8, 16, 32, 64, 72, 128 that holds dh. A
// shared-memory row is STRIDE floats, DP padded to 4 mod 8 words: then mma_rows' reads (rows
// g = 0..7 at one column) fall in 8 different groups of 4 banks and mma_cols' (rows 2t, 2t + 1 at
// columns g) in 4 different groups of 8, so no fragment read waits on a bank. A warp's own rows
// sit in registers, or where 3xTF32 would spill (the forward's past width 72, the backward's two
// tensors past 32) in shared memory, where each lane reads back only what it wrote itself (no
// barrier).
#include "attention.cuh"
#include "tensorcore.cuh"
#include <type_traits>

#ifndef REAL_F64
#define WARPS 4            // warps a block
#define ROWS (16 * WARPS)  // a block's own rows
#define KT 32              // rows a tile of the other side
#define NT (KT / 8)        // 8-column blocks of a 16 x KT block of scores

template <int DP> struct Padded {
    static constexpr int STRIDE = DP + ((DP / 4) % 2 ? 0 : 4);
    // whether a kernel with one (the forward) or two tensors of its own rows (the backward) keeps
    // them in shared memory
    static constexpr bool OWN_SHARED_1 = DP > 72, OWN_SHARED_2 = DP > 32;
    // Shared memory, in floats: two buffers of two tiles; in the backward each buffer's 2 KT row
    // terms (the LSE and delta of the key side's query tiles); then the block's own rows if
    // shared, from OWN_AT. The forward at width 128 takes 101,376 bytes, what sm_86 and sm_89
    // give a block at most.
    static constexpr int OWN_AT_1 = 4 * KT * STRIDE, OWN_AT_2 = 4 * KT * STRIDE + 4 * KT;
    static constexpr size_t floats(int sets) {
        return (sets == 1 ? OWN_AT_1 : OWN_AT_2) +
               ((sets == 1 ? OWN_SHARED_1 : OWN_SHARED_2) ? (size_t)sets * ROWS * STRIDE : 0);
    }
};

// ---- TF32 products -----------------------------------------------------------------------------

// x as TF32 parts: hi = tf32(x) and, for 3xTF32, lo = tf32(x - hi) (else 0)
template <bool THREE, int N> static __device__ inline void split(const float *x, uint32_t *hi, uint32_t *lo) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        float h = tf32_round(x[i]);
        hi[i] = float_bits(h);
        lo[i] = THREE ? float_bits(tf32_round(x[i] - h)) : 0;
    }
}

// d += a b: a given split (ah, al), b as floats; 3xTF32 adds the small products first
template <bool THREE>
static __device__ inline void mma_split(float d[4], const uint32_t ah[4], const uint32_t al[4], const float b[2]) {
    uint32_t bh[2], bl[2];
    split<THREE, 2>(b, bh, bl);
    if (THREE) {
        mma_tf32_m16n8k8(d, al, bh, d);
        mma_tf32_m16n8k8(d, ah, bl, d);
    }
    mma_tf32_m16n8k8(d, ah, bh, d);
}

// ---- a warp's own 16 rows, as A fragments ----------------------------------------------------------
template <int DP, bool SH> struct WarpRows {
    float reg[SH ? 1 : DP / 8][4]; // slots (kk, i), where slot_at places them
    float *sh;                     // SH: the 16 rows, STRIDE apart
};

// where slot (kk, i) of a lane's own-row fragments lies in the warp's 16 rows. TF32 (k 8): A's
// register i of k-step kk, row g + 8 (i & 1), column 8 kk + t + 4 (i >> 1). bf16 (k 16): slots
// (2 k, 0..3) and (2 k + 1, 0..3) are the halves e = 0..7 of A's registers for k-step k, register
// e / 2 (row g + 8 (r & 1), columns 16 k + 2 t + 8 (r >> 1)), half e % 2 (the column + 1)
template <bool BF> static __device__ inline void slot_at(int kk, int i, int g, int t, int &r, int &c) {
    if (!BF) {
        r = g + 8 * (i & 1), c = 8 * kk + t + 4 * (i >> 1);
        return;
    }
    int e = 4 * (kk & 1) + i, reg = e >> 1;
    r = g + 8 * (reg & 1), c = 16 * (kk >> 1) + 2 * t + (e & 1) + 8 * (reg >> 1);
}

// rows r0 .. r0 + 15 of head h in row b of x (T rows), zero past T and dh; sh: their place in
// shared memory if they go there
template <bool BF, int DP, bool SH>
static __device__ void rows_load(WarpRows<DP, SH> &w, float *sh, const real *x, int b, int T, int r0, int H, int h, int dh) {
    constexpr int S = Padded<DP>::STRIDE;
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    w.sh = sh;
#pragma unroll
    for (int kk = 0; kk < DP / 8; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r, c;
            slot_at<BF>(kk, i, g, t, r, c);
            float v = r0 + r < T && c < dh ? x[row_at(b, T, r0 + r, H * dh, h, dh) + c] : 0;
            if constexpr (SH) sh[r * S + c] = v;
            else w.reg[kk][i] = v;
        }
}

template <bool BF, int DP, bool SH> static __device__ inline void rows_frag(const WarpRows<DP, SH> &w, int kk, float f[4]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    for (int i = 0; i < 4; i++) {
        int r, c;
        slot_at<BF>(kk, i, g, t, r, c);
        f[i] = SH ? w.sh[r * Padded<DP>::STRIDE + c] : w.reg[kk][i];
    }
}

// two floats as a register of two bf16 (x the low half)
static __device__ inline uint32_t bf16x2(float x, float y) { return bf16x2_from_floats(x, y); }

// acc (16 x KT, C layout: row g + 8 (i >> 1), column 8 n + 2 t + (i & 1)) = A tile^T: A the warp's
// rows (16 x DP), the tile KT rows (KT x DP) in shared memory
template <int DP, int MODE, bool SH>
static __device__ void mma_rows(float acc[NT][4], const WarpRows<DP, SH> &a, const float *tile) {
    constexpr int S = Padded<DP>::STRIDE;
    constexpr bool THREE = MODE == ATTN_3XTF32;
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    if constexpr (MODE == ATTN_BF16) {
#pragma unroll
        for (int k = 0; k < DP / 16; k++) {
            float f[8];
            rows_frag<true>(a, 2 * k, f), rows_frag<true>(a, 2 * k + 1, f + 4);
            uint32_t ar[4] = {bf16x2(f[0], f[1]), bf16x2(f[2], f[3]), bf16x2(f[4], f[5]), bf16x2(f[6], f[7])};
#pragma unroll
            for (int n = 0; n < NT; n++) { // B (k = column, n = tile row): columns 2 t (+1), + 8; row g
                const float *r = tile + (8 * n + g) * S + 16 * k + 2 * t;
                uint32_t b[2] = {bf16x2(r[0], r[1]), bf16x2(r[8], r[9])};
                mma_bf16_m16n8k16(acc[n], ar, b, acc[n]);
            }
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < DP / 8; kk++) {
            float f[4];
            uint32_t ah[4], al[4];
            rows_frag<false>(a, kk, f);
            split<THREE, 4>(f, ah, al);
#pragma unroll
            for (int n = 0; n < NT; n++) { // B (k = column, n = tile row): row t + 4 i, column g
                const float *r = tile + (8 * n + g) * S + 8 * kk + t;
                float b[2] = {r[0], r[4]};
                mma_split<THREE>(acc[n], ah, al, b);
            }
        }
    }
}

// acc (16 x DP) += P tile: P (16 x KT) in C layout as mma_rows leaves it, the tile KT rows
// (KT x DP); TF32: each 8 of P's columns in the order of the header; bf16: two 8-column blocks of
// P make an A operand as they are
template <int DP, int MODE>
static __device__ void mma_cols(float acc[DP / 8][4], const float p[NT][4], const float *tile) {
    constexpr int S = Padded<DP>::STRIDE;
    constexpr bool THREE = MODE == ATTN_3XTF32;
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    if constexpr (MODE == ATTN_BF16) {
#pragma unroll
        for (int k = 0; k < NT / 2; k++) {
            const float *p0 = p[2 * k], *p1 = p[2 * k + 1];
            uint32_t ar[4] = {bf16x2(p0[0], p0[1]), bf16x2(p0[2], p0[3]), bf16x2(p1[0], p1[1]), bf16x2(p1[2], p1[3])};
#pragma unroll
            for (int n = 0; n < DP / 8; n++) { // B (k = tile row, n = column): rows 16 k + 2 t (+1), + 8; column g
                const float *r = tile + (16 * k + 2 * t) * S + 8 * n + g;
                uint32_t b[2] = {bf16x2(r[0], r[S]), bf16x2(r[8 * S], r[9 * S])};
                mma_bf16_m16n8k16(acc[n], ar, b, acc[n]);
            }
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < NT; kk++) {
            float pa[4] = {p[kk][0], p[kk][2], p[kk][1], p[kk][3]};
            uint32_t ah[4], al[4];
            split<THREE, 4>(pa, ah, al);
#pragma unroll
            for (int n = 0; n < DP / 8; n++) { // B (k = tile row, n = column): rows 2 t, 2 t + 1; column g
                const float *r = tile + (8 * kk + 2 * t) * S + 8 * n + g;
                float b[2] = {r[0], r[S]};
                mma_split<THREE>(acc[n], ah, al, b);
            }
        }
    }
}

// ---- tiles of the other side -------------------------------------------------------------------------

// rows [j0, j0 + KT) of head h of x and y (T rows) into xs, ys, zero past T: 16 bytes at a time
// by cp.async where rows are 16-byte aligned (vec), else by plain loads. Columns past dh were
// zeroed at the start and stay so.
template <int DP>
static __device__ void load_tile(float *xs, float *ys, const real *x, const real *y, int b, int T, int j0,
                                 int H, int h, int dh, bool vec) {
    constexpr int S = Padded<DP>::STRIDE;
    int n = T - j0 < KT ? T - j0 : KT, per = vec ? dh / 4 : dh;
    for (int e = threadIdx.x; e < KT * per; e += blockDim.x) {
        int r = e / per, c = (vec ? 4 : 1) * (e % per);
        size_t at = row_at(b, T, j0 + r, H * dh, h, dh) + c;
        if (vec && r < n) {
            cp_async_16(xs + r * S + c, x + at);
            cp_async_16(ys + r * S + c, y + at);
        } else
            for (int i = 0; i < (vec ? 4 : 1); i++) {
                xs[r * S + c + i] = r < n ? x[at + i] : 0;
                ys[r * S + c + i] = r < n ? y[at + i] : 0;
            }
    }
}

// use(u, j0) for each tile j0 = 0, KT, ... below T that sees(j0) keeps, in order, the tile loaded
// into buffer u by load(u, j0) while the previous one is in use: two buffers, a barrier after a
// tile lands and after it is used
template <typename Sees, typename Load, typename Use>
static __device__ void pipeline(int T, Sees sees, Load load, Use use) {
    auto next = [&](int j) {
        while (j < T && !sees(j)) j += KT;
        return j;
    };
    int j0 = next(0);
    if (j0 < T) load(0, j0);
    cp_async_commit();
    for (int u = 0; j0 < T; u ^= 1) {
        int jn = next(j0 + KT);
        if (jn < T) load(u ^ 1, jn);
        cp_async_commit();
        cp_async_wait<1>(); // all but the newest group: this tile has landed
        __syncthreads();
        use(u, j0);
        __syncthreads(); // every warp is done with this buffer before it is loaded again
        j0 = jn;
    }
    cp_async_wait<0>();
}

// The block's place: its head, its own rows from r0 (ROWS of T), the warp's 16 and the lane's
// two (g and g + 8 of them)
struct Place {
    int b, h, r0, n, lane, warp, g, t, row[2];
    bool busy; // the warp has rows (warp-uniform)
};
static __device__ Place place(int H, int T) {
    Place p;
    p.b = blockIdx.y / H, p.h = blockIdx.y % H, p.r0 = blockIdx.x * ROWS;
    p.n = T - p.r0 < ROWS ? T - p.r0 : ROWS;
    p.lane = threadIdx.x % 32, p.warp = threadIdx.x / 32, p.g = p.lane / 4, p.t = p.lane % 4;
    p.row[0] = p.r0 + 16 * p.warp + p.g, p.row[1] = p.row[0] + 8;
    p.busy = p.r0 + 16 * p.warp < T;
    return p;
}

// the tile buffers of a block, zeroed (their padding columns stay 0), then its own rows' places
static __device__ float *tiles_zeroed(int S) {
    extern __shared__ double smem_d[]; // double: aligned for cp.async's 16 bytes too
    float *tiles = (float *)smem_d;    // buffer u: x rows at 2 u KT S, y rows after them
    for (int e = threadIdx.x; e < 4 * KT * S; e += blockDim.x) tiles[e] = 0;
    return tiles;
}

// whether query q (of the call) may see key j: inside both, the key not masked, one image
static __device__ bool may_see(const AttentionArgs &a, int b, int q, int j) {
    return q < a.Tq && j < a.Tk && !(a.mask && !a.mask[j]) &&
           image_of(a.seg, b, a.seg.q0 + q) == image_of(a.seg, b, a.seg.k0 + j);
}

// The query side's tiles (forward, dQ): the key and value rows that one of the block's query rows
// can see, use(ks, vs, j0) on each by the warps that have rows
template <int DP, typename Use>
static __device__ void key_tiles(const AttentionArgs &a, const Place &p, float *tiles, bool vec, Use use) {
    constexpr int S = Padded<DP>::STRIDE;
    pipeline(
        a.Tk, [&](int j) { return meet(a.seg, p.b, a.seg.q0 + p.r0, p.n, a.seg.k0 + j, a.Tk - j < KT ? a.Tk - j : KT); },
        [&](int u, int j) { load_tile<DP>(tiles + 2 * u * KT * S, tiles + (2 * u + 1) * KT * S, a.k, a.v, p.b, a.Tk, j, a.H, p.h, a.dh, vec); },
        [&](int u, int j0) {
            if (p.busy) use(tiles + 2 * u * KT * S, tiles + (2 * u + 1) * KT * S, j0);
        });
}

// ---- forward: out, lse; grid (query blocks, B*H) -------------------------------------------------
template <int DP, int MODE> static __global__ void forward_mma_kernel(AttentionArgs a, real *out, real *lse, bool vec) {
    constexpr int S = Padded<DP>::STRIDE, KS = DP / 8;
    Place p = place(a.H, a.Tq);
    float *tiles = tiles_zeroed(S);
    WarpRows<DP, Padded<DP>::OWN_SHARED_1> q;
    rows_load<MODE == ATTN_BF16>(q, tiles + Padded<DP>::OWN_AT_1 + 16 * p.warp * S, a.q, p.b, a.Tq, p.r0 + 16 * p.warp, a.H, p.h, a.dh);
    float o[KS][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    for (int n = 0; n < KS; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    __syncthreads();
    key_tiles<DP>(a, p, tiles, vec, [&](const float *ks, const float *vs, int j0) {
            float s[NT][4], mx[2] = {m[0], m[1]}, alpha[2];
            mma_rows<DP, MODE>(s, q, ks);
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) { // row g + 8 (i >> 1), key 2 t + (i & 1)
                    int j = j0 + 8 * n + 2 * p.t + (i & 1);
                    s[n][i] = may_see(a, p.b, p.row[i >> 1], j) ? s[n][i] * a.scale : -INFINITY;
                    mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
                }
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                alpha[r] = mx[r] == -INFINITY ? 1 : expf(m[r] - mx[r]); // rescales what earlier tiles summed
                l[r] *= alpha[r], m[r] = mx[r];
            }
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) { // masked: exactly 0; this lane's part of the row sum
                    s[n][i] = m[i >> 1] == -INFINITY ? 0 : expf(s[n][i] - m[i >> 1]);
                    l[i >> 1] += s[n][i];
                }
#pragma unroll
            for (int n = 0; n < KS; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) o[n][i] *= alpha[i >> 1];
            mma_cols<DP, MODE>(o, s, vs);
        });
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    int D = a.H * a.dh;
#pragma unroll
    for (int n = 0; n < KS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = p.row[i >> 1], c = 8 * n + 2 * p.t + (i & 1);
            float inv = l[i >> 1] > 0 ? 1 / l[i >> 1] : 0;
            if (r < a.Tq && c < a.dh) out[row_at(p.b, a.Tq, r, D, p.h, a.dh) + c] = o[n][i] * inv;
        }
    for (int r = 0; r < 2; r++)
        if (p.t == 0 && p.row[r] < a.Tq)
            lse[(size_t)blockIdx.y * a.Tq + p.row[r]] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
}

// ---- backward, the query side: dq += scale dS K; grid (query blocks, B*H) ------------------------
template <int DP, int MODE>
static __global__ void dq_mma_kernel(AttentionArgs a, real *dq, const real *dout, const real *lse, const real *delta, bool vec) {
    constexpr int S = Padded<DP>::STRIDE, KS = DP / 8;
    Place p = place(a.H, a.Tq);
    float *tiles = tiles_zeroed(S), *own = tiles + Padded<DP>::OWN_AT_2 + 16 * p.warp * S;
    WarpRows<DP, Padded<DP>::OWN_SHARED_2> q, g;
    rows_load<MODE == ATTN_BF16>(q, own, a.q, p.b, a.Tq, p.r0 + 16 * p.warp, a.H, p.h, a.dh);
    rows_load<MODE == ATTN_BF16>(g, own + ROWS * S, dout, p.b, a.Tq, p.r0 + 16 * p.warp, a.H, p.h, a.dh);
    float L[2], dl[2], acc[KS][4];
    for (int r = 0; r < 2; r++) {
        bool in = p.row[r] < a.Tq;
        L[r] = in ? lse[(size_t)blockIdx.y * a.Tq + p.row[r]] : -INFINITY;
        dl[r] = in ? delta[(size_t)blockIdx.y * a.Tq + p.row[r]] : 0;
    }
    for (int n = 0; n < KS; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    __syncthreads();
    key_tiles<DP>(a, p, tiles, vec, [&](const float *ks, const float *vs, int j0) {
            float s[NT][4], dp[NT][4];
            mma_rows<DP, MODE>(s, q, ks);  // S = Q K^T
            mma_rows<DP, MODE>(dp, g, vs); // dP = dO V^T
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) { // dS = P (dP - delta), P from the LSE
                    int r = i >> 1, j = j0 + 8 * n + 2 * p.t + (i & 1);
                    float pr = L[r] == -INFINITY || !may_see(a, p.b, p.row[r], j) ? 0 : expf(a.scale * s[n][i] - L[r]);
                    s[n][i] = pr * (dp[n][i] - dl[r]);
                }
            mma_cols<DP, MODE>(acc, s, ks);
        });
    int D = a.H * a.dh;
#pragma unroll
    for (int n = 0; n < KS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = p.row[i >> 1], c = 8 * n + 2 * p.t + (i & 1);
            if (r < a.Tq && c < a.dh) dq[row_at(p.b, a.Tq, r, D, p.h, a.dh) + c] += a.scale * acc[n][i];
        }
}

// ---- backward, the key side: dk += scale dS^T Q, dv += P^T dO; grid (key blocks, B*H) -------------
template <int DP, int MODE>
static __global__ void dkv_mma_kernel(AttentionArgs a, real *dk, real *dv, const real *dout, const real *lse,
                                      const real *delta, bool vec) {
    constexpr int S = Padded<DP>::STRIDE, KS = DP / 8;
    Place p = place(a.H, a.Tk);
    float *tiles = tiles_zeroed(S), *terms = tiles + 4 * KT * S; // buffer u's LSE at 2 u KT, delta after
    float *own = terms + 4 * KT + 16 * p.warp * S;
    WarpRows<DP, Padded<DP>::OWN_SHARED_2> k, v;
    rows_load<MODE == ATTN_BF16>(k, own, a.k, p.b, a.Tk, p.r0 + 16 * p.warp, a.H, p.h, a.dh);
    rows_load<MODE == ATTN_BF16>(v, own + ROWS * S, a.v, p.b, a.Tk, p.r0 + 16 * p.warp, a.H, p.h, a.dh);
    float gk[KS][4], gv[KS][4];
    for (int n = 0; n < KS; n++)
        for (int i = 0; i < 4; i++) gk[n][i] = gv[n][i] = 0;
    __syncthreads();
    pipeline(
        a.Tq, [&](int i) { return meet(a.seg, p.b, a.seg.k0 + p.r0, p.n, a.seg.q0 + i, a.Tq - i < KT ? a.Tq - i : KT); },
        [&](int u, int i0) {
            load_tile<DP>(tiles + 2 * u * KT * S, tiles + (2 * u + 1) * KT * S, a.q, dout, p.b, a.Tq, i0, a.H, p.h, a.dh, vec);
            for (int r = threadIdx.x; r < KT; r += blockDim.x) {
                bool in = i0 + r < a.Tq;
                terms[2 * u * KT + r] = in ? lse[(size_t)blockIdx.y * a.Tq + i0 + r] : -INFINITY;
                terms[(2 * u + 1) * KT + r] = in ? delta[(size_t)blockIdx.y * a.Tq + i0 + r] : 0;
            }
        },
        [&](int u, int i0) {
            if (!p.busy) return;
            const float *qs = tiles + 2 * u * KT * S, *gs = qs + KT * S, *L = terms + 2 * u * KT, *dl = L + KT;
            float s[NT][4], dp[NT][4];
            mma_rows<DP, MODE>(s, k, qs);  // S^T = K Q^T
            mma_rows<DP, MODE>(dp, v, gs); // dP^T = V dO^T
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) { // key row g + 8 (i >> 1), query 2 t + (i & 1)
                    int c = 8 * n + 2 * p.t + (i & 1);
                    bool on = L[c] != -INFINITY && may_see(a, p.b, i0 + c, p.row[i >> 1]);
                    s[n][i] = on ? expf(a.scale * s[n][i] - L[c]) : 0;
                    dp[n][i] = s[n][i] * (dp[n][i] - dl[c]);
                }
            mma_cols<DP, MODE>(gv, s, gs);  // dV += P^T dO
            mma_cols<DP, MODE>(gk, dp, qs); // dK += dS^T Q
        });
    int D = a.H * a.dh;
#pragma unroll
    for (int n = 0; n < KS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) { // a masked key has no gradient
            int j = p.row[i >> 1], c = 8 * n + 2 * p.t + (i & 1);
            if (j >= a.Tk || c >= a.dh || (a.mask && !a.mask[j])) continue;
            size_t at = row_at(p.b, a.Tk, j, D, p.h, a.dh) + c;
            if (dk) dk[at] += a.scale * gk[n][i];
            if (dv) dv[at] += gv[n][i];
        }
}

// ---- launchers ---------------------------------------------------------------------------------------

// launch(w, m) with w the padded width for dh (a multiple of the mode's k: 8, or 16 in bf16) and m
// the mode, compile-time constants
template <typename F> static void with_shape(int dh, AttentionMode mode, F launch) {
    auto widths = [&](auto m) {
        if constexpr (decltype(m)::value == ATTN_BF16) {
            if (dh <= 16) launch(std::integral_constant<int, 16>(), m);
            else if (dh <= 32) launch(std::integral_constant<int, 32>(), m);
            else if (dh <= 64) launch(std::integral_constant<int, 64>(), m);
            else if (dh <= 80) launch(std::integral_constant<int, 80>(), m);
            else launch(std::integral_constant<int, 128>(), m);
        } else {
            if (dh <= 8) launch(std::integral_constant<int, 8>(), m);
            else if (dh <= 16) launch(std::integral_constant<int, 16>(), m);
            else if (dh <= 32) launch(std::integral_constant<int, 32>(), m);
            else if (dh <= 64) launch(std::integral_constant<int, 64>(), m);
            else if (dh <= 72) launch(std::integral_constant<int, 72>(), m);
            else launch(std::integral_constant<int, 128>(), m);
        }
    };
    if (mode == ATTN_BF16) widths(std::integral_constant<int, ATTN_BF16>());
    else if (mode == ATTN_TF32) widths(std::integral_constant<int, ATTN_TF32>());
    else widths(std::integral_constant<int, ATTN_3XTF32>());
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// the shared memory a kernel asks for, allowed past the default 48 KiB; a clear error where the
// GPU gives a block less (sm_86 and sm_89: 101,376 bytes, less than the backward's at width 128)
template <typename K> static size_t shared_bytes(K kernel, size_t floats, const char *pass, int dh) {
    size_t bytes = floats * sizeof(float);
    int dev, most;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CHECK(bytes <= (size_t)most, "the attention %s on tensor cores at head width %d needs %zu bytes of "
          "shared memory a block, and this GPU gives at most %d: use heads of at most 64 (--heads), "
          "or an sm_80 or sm_90 GPU", pass, dh, bytes, most);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return bytes;
}

void attention_forward_mma(const AttentionArgs &a, real *out, real *lse, int B, AttentionMode mode, cudaStream_t stream) {
    bool vec = a.dh % 4 == 0 && aligned16(a.k) && aligned16(a.v);
    dim3 grid((a.Tq + ROWS - 1) / ROWS, B * a.H);
    with_shape(a.dh, mode, [&](auto w, auto m) {
        constexpr int DP = decltype(w)::value, M = decltype(m)::value;
        size_t smem = shared_bytes(forward_mma_kernel<DP, M>, Padded<DP>::floats(1), "forward", a.dh);
        forward_mma_kernel<DP, M><<<grid, 32 * WARPS, smem, stream>>>(a, out, lse, vec);
    });
    CUDA_CHECK(cudaGetLastError());
}

void attention_backward_mma(const AttentionArgs &a, real *dq, real *dk, real *dv, const real *dout,
                            const real *lse, const real *delta, int B, AttentionMode mode, cudaStream_t stream) {
    bool vec_kv = a.dh % 4 == 0 && aligned16(a.k) && aligned16(a.v);
    bool vec_q = a.dh % 4 == 0 && aligned16(a.q) && aligned16(dout);
    dim3 qgrid((a.Tq + ROWS - 1) / ROWS, B * a.H), kgrid((a.Tk + ROWS - 1) / ROWS, B * a.H);
    with_shape(a.dh, mode, [&](auto w, auto m) {
        constexpr int DP = decltype(w)::value, M = decltype(m)::value;
        if (dk || dv) {
            size_t smem = shared_bytes(dkv_mma_kernel<DP, M>, Padded<DP>::floats(2), "backward", a.dh);
            dkv_mma_kernel<DP, M><<<kgrid, 32 * WARPS, smem, stream>>>(a, dk, dv, dout, lse, delta, vec_q);
            CUDA_CHECK(cudaGetLastError());
        }
        if (dq) {
            size_t smem = shared_bytes(dq_mma_kernel<DP, M>, Padded<DP>::floats(2), "backward", a.dh);
            dq_mma_kernel<DP, M><<<qgrid, 32 * WARPS, smem, stream>>>(a, dq, dout, lse, delta, vec_kv);
            CUDA_CHECK(cudaGetLastError());
        }
    });
}
#endif
