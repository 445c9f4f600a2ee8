// attention_mma.cu: the attention forward of attention.cu on tensor cores (float32 build), in
// FlashAttention-2's shape, with the same semantics (key masks, packs with their q0/k0 offsets and
// tile skipping, -inf log-sum-exp for a query whose keys are all masked, the LSE the ring merges).
// A block of WARPS warps takes 16 query rows a warp of one head. The keys and values come through
// shared memory KT rows at a time by cp.async into two buffers: the next tile lands while this
// one is used. Each warp computes its S = Q K^T on mma.sync (m16n8k8, TF32), runs the online
// softmax on the accumulators (a row's values lie in a group of 4 lanes: its max and sum by
// __shfl_xor_sync), and adds P V on mma.sync with P taken from S's registers as they are.
//
// P without a shuffle: lane (g, t) holds S's columns 2t and 2t + 1 of each 8 keys, where an A
// fragment wants columns t and t + 4. So P V takes each 8 keys in the order 0 2 4 6 1 3 5 7 (the
// mma's k index x is key 2 (x % 4) + x / 4) and reads V's fragment in that order too.
//
// Precision: 3xTF32 by default (each factor x split into h = tf32(x) and l = tf32(x - h); the
// product is h h' + h l' + l h'), float32's accuracy as PyTorch's float32 attention on tensor
// cores; with --tf32 one product h h' (about 1e-3 relative).
//
// Head widths are padded with zeros to DP, the first of 8, 16, 32, 64, 72, 128 that holds dh. A
// shared-memory row is STRIDE floats, DP padded to 4 mod 8 words: then K's fragment reads (rows
// g = 0..7 at one column) fall in 8 different groups of 4 banks and V's (rows 2t, 2t + 1 at
// columns g) in 4 different groups of 8, so no read of a fragment waits on a bank.
#include "attention.cuh"
#include "tensorcore.cuh"
#include <type_traits>

#ifndef REAL_F64
#define WARPS 4              // warps a block
#define QROWS (16 * WARPS)   // query rows a block
#define KT 32                // keys a tile
#define NT (KT / 8)          // mma n-tiles (S) or k-steps (P V) a tile

// Q's fragments sit in registers; at width 128 (3xTF32 would spill) in shared memory, where each
// lane reads back only what it wrote itself (no barrier)
template <int DP> struct Padded {
    static constexpr int STRIDE = DP + ((DP / 4) % 2 ? 0 : 4);
    static constexpr bool Q_SHARED = DP > 72;
    // 2 buffers of K and V, then Q's rows where shared
    static constexpr size_t SMEM = (2 * 2 * KT + (Q_SHARED ? QROWS : 0)) * (size_t)STRIDE * sizeof(float);
};

// x as TF32 parts: hi = tf32(x) and, for 3xTF32, lo = tf32(x - hi) (else 0)
template <bool THREE> static __device__ inline void split(float x, uint32_t &hi, uint32_t &lo) {
    float h = tf32_round(x);
    hi = float_bits(h);
    lo = THREE ? float_bits(tf32_round(x - h)) : 0;
}
template <bool THREE, int N> static __device__ inline void split_all(const float *x, uint32_t *hi, uint32_t *lo) {
#pragma unroll
    for (int i = 0; i < N; i++) split<THREE>(x[i], hi[i], lo[i]);
}

// d += a b: a given split (ah, al), b as floats; 3xTF32 adds the small products first
template <bool THREE>
static __device__ inline void mma_split(float d[4], const uint32_t ah[4], const uint32_t al[4], const float b[2]) {
    uint32_t bh[2], bl[2];
    split_all<THREE, 2>(b, bh, bl);
    if (THREE) {
        mma_tf32_m16n8k8(d, al, bh, d);
        mma_tf32_m16n8k8(d, ah, bl, d);
    }
    mma_tf32_m16n8k8(d, ah, bh, d);
}

// K and V rows [j0, j0 + KT) of the block's head into a buffer, zero past Tk: 16 bytes at a time
// by cp.async where rows are 16-byte aligned (vec), else by plain loads. Columns past dh were
// zeroed at the start and stay so.
template <int DP>
static __device__ void load_tile(float *ks, float *vs, const AttentionArgs &a, int b, int h, int j0, bool vec) {
    constexpr int S = Padded<DP>::STRIDE;
    int nk = a.Tk - j0 < KT ? a.Tk - j0 : KT, D = a.H * a.dh, per = vec ? a.dh / 4 : a.dh;
    for (int e = threadIdx.x; e < KT * per; e += blockDim.x) {
        int r = e / per, c = (vec ? 4 : 1) * (e % per);
        size_t at = row_at(b, a.Tk, j0 + r, D, h, a.dh) + c;
        if (vec && r < nk) {
            cp_async_16(ks + r * S + c, a.k + at);
            cp_async_16(vs + r * S + c, a.v + at);
        } else
            for (int i = 0; i < (vec ? 4 : 1); i++) {
                ks[r * S + c + i] = r < nk ? a.k[at + i] : 0;
                vs[r * S + c + i] = r < nk ? a.v[at + i] : 0;
            }
    }
}

// the first key tile from j that one of the block's query rows [i0, i0 + nq) can see
static __device__ int next_tile(const AttentionArgs &a, int b, int i0, int nq, int j) {
    while (j < a.Tk && !meet(a.seg, b, a.seg.q0 + i0, nq, a.seg.k0 + j, a.Tk - j < KT ? a.Tk - j : KT)) j += KT;
    return j;
}

// out, lse: grid (query blocks, B*H), WARPS warps a block
template <int DP, bool THREE> static __global__ void forward_mma_kernel(AttentionArgs a, bool vec) {
    constexpr int S = Padded<DP>::STRIDE, KS = DP / 8;
    constexpr bool QSH = Padded<DP>::Q_SHARED;
    extern __shared__ double smem_d[]; // double: aligned for cp.async's 16 bytes too
    float *tiles = (float *)smem_d;    // buffer u: K at tiles + 2 u KT S, V after it
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int b = blockIdx.y / a.H, h = blockIdx.y % a.H, D = a.H * a.dh;
    const int i0 = blockIdx.x * QROWS, nq = a.Tq - i0 < QROWS ? a.Tq - i0 : QROWS;
    const bool busy = i0 + 16 * warp < a.Tq; // the warp has rows (warp-uniform)
    int row[2] = {i0 + 16 * warp + g, i0 + 16 * warp + g + 8}; // this lane's rows: g and g + 8
    int32_t img[2];
    for (int r = 0; r < 2; r++) img[r] = row[r] < a.Tq ? image_of(a.seg, b, a.seg.q0 + row[r]) : 0;
    float qa[QSH ? 1 : KS][4], o[KS][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    float *qs = tiles + 4 * KT * S + 16 * warp * S; // Q_SHARED: the warp's 16 rows
    for (int e = threadIdx.x; e < 4 * KT * S; e += blockDim.x) tiles[e] = 0;
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) { // A: row g + 8 (i & 1), column t + 4 (i >> 1)
            int r = row[i & 1], c = 8 * kk + t + 4 * (i >> 1);
            float x = r < a.Tq && c < a.dh ? a.q[row_at(b, a.Tq, r, D, h, a.dh) + c] : 0;
            if constexpr (QSH) qs[(g + 8 * (i & 1)) * S + c] = x;
            else qa[kk][i] = x;
            o[kk][i] = 0;
        }
    __syncthreads();

    int j0 = next_tile(a, b, i0, nq, 0);
    if (j0 < a.Tk) load_tile<DP>(tiles, tiles + KT * S, a, b, h, j0, vec);
    cp_async_commit();
    for (int u = 0; j0 < a.Tk; u ^= 1) {
        int jn = next_tile(a, b, i0, nq, j0 + KT);
        float *ks = tiles + 2 * u * KT * S, *vs = ks + KT * S;
        if (jn < a.Tk) load_tile<DP>(tiles + 2 * (u ^ 1) * KT * S, tiles + (2 * (u ^ 1) + 1) * KT * S, a, b, h, jn, vec);
        cp_async_commit();
        cp_async_wait<1>(); // all but the newest group: this tile has landed
        __syncthreads();
        if (busy) {
            float s[NT][4];
#pragma unroll
            for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) { // S = Q K^T: B (k = d, n = key) row t + 4 i, column g
                uint32_t qh[4], ql[4];
                if constexpr (QSH) {
                    const float *qr = qs + g * S + 8 * kk + t;
                    float qf[4] = {qr[0], qr[8 * S], qr[4], qr[8 * S + 4]};
                    split_all<THREE, 4>(qf, qh, ql);
                } else
                    split_all<THREE, 4>(qa[kk], qh, ql);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const float *kr = ks + (8 * n + g) * S + 8 * kk + t;
                    float bk[2] = {kr[0], kr[4]};
                    mma_split<THREE>(s[n], qh, ql, bk);
                }
            }
            float mx[2] = {m[0], m[1]}; // C: row g + 8 (i >> 1), key 2 t + (i & 1)
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int j = j0 + 8 * n + 2 * t + (i & 1), r = i >> 1;
                    bool off = j >= a.Tk || (a.mask && !a.mask[j]) || image_of(a.seg, b, a.seg.k0 + j) != img[r];
                    s[n][i] = off ? -INFINITY : s[n][i] * a.scale;
                    mx[r] = fmaxf(mx[r], s[n][i]);
                }
            float alpha[2];
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
#pragma unroll
            for (int kk = 0; kk < NT; kk++) { // O += P V over keys 8 kk .. 8 kk + 7, in the order above
                float pa[4] = {s[kk][0], s[kk][2], s[kk][1], s[kk][3]};
                uint32_t ph[4], pl[4];
                split_all<THREE, 4>(pa, ph, pl);
#pragma unroll
                for (int n = 0; n < KS; n++) { // B (k = key, n = d): keys 2 t, 2 t + 1; column g
                    const float *vr = vs + (8 * kk + 2 * t) * S + 8 * n + g;
                    float bv[2] = {vr[0], vr[S]};
                    mma_split<THREE>(o[n], ph, pl, bv);
                }
            }
        }
        __syncthreads(); // every warp is done with this buffer before it is loaded again
        j0 = jn;
    }
    cp_async_wait<0>();
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int n = 0; n < KS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = row[i >> 1], c = 8 * n + 2 * t + (i & 1);
            float inv = l[i >> 1] > 0 ? 1 / l[i >> 1] : 0;
            if (r < a.Tq && c < a.dh) a.out[row_at(b, a.Tq, r, D, h, a.dh) + c] = o[n][i] * inv;
        }
    for (int r = 0; r < 2; r++)
        if (t == 0 && row[r] < a.Tq)
            a.lse[(size_t)blockIdx.y * a.Tq + row[r]] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
}

// launch(w) with w the padded width DP for dh, a compile-time constant
template <typename F> static void with_padded_width(int dh, F launch) {
    if (dh <= 8) launch(std::integral_constant<int, 8>());
    else if (dh <= 16) launch(std::integral_constant<int, 16>());
    else if (dh <= 32) launch(std::integral_constant<int, 32>());
    else if (dh <= 64) launch(std::integral_constant<int, 64>());
    else if (dh <= 72) launch(std::integral_constant<int, 72>());
    else launch(std::integral_constant<int, 128>());
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

void attention_forward_mma(const AttentionArgs &a, int B, bool tf32, cudaStream_t stream) {
    bool vec = a.dh % 4 == 0 && aligned16(a.k) && aligned16(a.v);
    dim3 grid((a.Tq + QROWS - 1) / QROWS, B * a.H);
    with_padded_width(a.dh, [&](auto w) {
        constexpr int DP = decltype(w)::value;
        size_t smem = Padded<DP>::SMEM;
        if (tf32) {
            CUDA_CHECK(cudaFuncSetAttribute(forward_mma_kernel<DP, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            forward_mma_kernel<DP, false><<<grid, 32 * WARPS, smem, stream>>>(a, vec);
        } else {
            CUDA_CHECK(cudaFuncSetAttribute(forward_mma_kernel<DP, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            forward_mma_kernel<DP, true><<<grid, 32 * WARPS, smem, stream>>>(a, vec);
        }
    });
    CUDA_CHECK(cudaGetLastError());
}
#endif
