// tensorcore.cuh: the tensor-core instructions the kernels use, behind one header: the real PTX
// where nvcc compiles for the device (__CUDA_ARCH__ 800 and up), and an emulated form with the
// PTX ISA's fragment layouts on the emulated device (tests/gpu/emulate: EMULATED_DEVICE), so that
// make test runs every kernel that uses them before a GPU sees it. The warp-collective ones (mma,
// ldmatrix) must be reached by all 32 lanes of a warp, as on a GPU.
//
// Fragments (PTX ISA, "Matrix fragments for mma.m16n8k8 / m16n8k16"), with g = lane / 4 (the
// group) and t = lane % 4 (the thread in the group):
//   tf32 m16n8k8, A 16x8 row-major, 4 registers a[i]: row g + 8 (i & 1), column t + 4 (i >> 1);
//     B 8x8 (k x n), 2 registers b[i]: row t + 4 i, column g;
//   bf16 m16n8k16, A 16x16, 4 registers of 2 bf16 each, element e = 2 i + h (h the half, low
//     first): row g + 8 ((e >> 1) & 1), column 2 t + (e & 1) + 8 (e >> 2);
//     B 16x8 (k x n), 2 registers of 2 bf16, element e = 2 i + h: row 2 t + (e & 1) + 8 (e >> 1),
//     column g;
//   the accumulators C and D, 16x8 float, 4 each: row g + 8 (i >> 1), column 2 t + (i & 1).
//   ldmatrix .x1/.x2/.x4: lanes 8 j .. 8 j + 7 give the 8 row addresses of matrix j (16 bytes a
//     row: 8 b16); register j of every lane holds row lane / 4, columns 2 (lane % 4) and + 1 of
//     matrix j (with .trans: rows 2 (lane % 4) and + 1 of column lane / 4).
#pragma once
#include <cuda_runtime.h> // __device__, and on the emulated device its warp operations
#include <stdint.h>
#include <string.h>

// ---- tf32 and bf16 --------------------------------------------------------------------------------
// A bf16 value: the high 16 bits of a float
typedef struct bf16 {
    uint16_t bits;
} bf16;

static __device__ inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static __device__ inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// cvt.rna.tf32.f32: to 10 mantissa bits, ties away from zero (NaN and infinities as they are)
static __device__ inline float tf32_round(float x) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return bits_float(r);
#else
    uint32_t u = float_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    return bits_float((u + 0x1000u) & 0xffffe000u);
#endif
}

// float -> bf16, round to nearest even (a NaN stays a NaN)
static __device__ inline bf16 bf16_from_float(float x) {
    uint32_t u = float_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{(uint16_t)((u >> 16) | 0x40u)};
    return bf16{(uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
static __device__ inline float bf16_to_float(bf16 h) { return bits_float((uint32_t)h.bits << 16); }
// two bf16 in one register, lo in the low half (the lower column or row of a fragment)
static __device__ inline uint32_t bf16_pair(bf16 lo, bf16 hi) { return (uint32_t)lo.bits | ((uint32_t)hi.bits << 16); }
// two floats rounded to bf16 (nearest even) in one register, lo in the low half: one
// cvt.rn.bf16x2.f32 on the device (it puts its first source in the high half)
static __device__ inline uint32_t bf16x2_from_floats(float lo, float hi) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return bf16_pair(bf16_from_float(lo), bf16_from_float(hi));
#endif
}

// ---- mma ---------------------------------------------------------------------------------------------
#if defined(EMULATED_DEVICE)
// One lane's fragments of an emulated mma, published to its warp (parts: warp_publish's)
struct MmaLane {
    uint32_t a[4], b[2];
    float c[4];
};
static inline const MmaLane *mma_lane(const unsigned char *parts, int lane) {
    return (const MmaLane *)(parts + lane * WARP_PART);
}
// The value of A, B (TF32: the register's bits, low 13 ignored as the tensor cores do; BF16: the
// register's half) at a row and column, from the warp's fragments
static inline double mma_a(const unsigned char *w, bool bf, int row, int col) {
    if (!bf) // row g + 8 (i & 1), column t + 4 (i >> 1)
        return bits_float(mma_lane(w, 4 * (row % 8) + col % 4)->a[(row / 8) | 2 * (col / 4)] & 0xffffe000u);
    int e = (col % 2) | 2 * (row / 8) | 4 * (col / 8);
    uint32_t r = mma_lane(w, 4 * (row % 8) + (col % 8) / 2)->a[e / 2];
    return bf16_to_float(bf16{(uint16_t)(e % 2 ? r >> 16 : r & 0xffffu)});
}
static inline double mma_b(const unsigned char *w, bool bf, int row, int col) {
    if (!bf) return bits_float(mma_lane(w, 4 * col + row % 4)->b[row / 4] & 0xffffe000u); // row t + 4 i, column g
    int e = (row % 2) | 2 * (row / 8);
    uint32_t r = mma_lane(w, 4 * col + (row % 8) / 2)->b[e / 2];
    return bf16_to_float(bf16{(uint16_t)(e % 2 ? r >> 16 : r & 0xffffu)});
}
// D = A B + C for the warp, each lane its 4 accumulators; the products summed in double and
// rounded once (a GPU's order and rounding inside the mma differ by float rounding only)
static inline void mma_emulated(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], bool bf) {
    MmaLane mine;
    memcpy(mine.a, a, sizeof mine.a), memcpy(mine.b, b, sizeof mine.b), memcpy(mine.c, c, sizeof mine.c);
    const unsigned char *w = warp_publish(&mine, sizeof mine);
    int g = (int)lane_id() / 4, t = (int)lane_id() % 4, K = bf ? 16 : 8;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        double s = mine.c[i];
        for (int k = 0; k < K; k++) s += mma_a(w, bf, row, k) * mma_b(w, bf, k, col);
        d[i] = (float)s;
    }
}
#endif

// D (16x8 float) = A (16x8 tf32) B (8x8 tf32) + C, the warp's fragments (layouts above)
static __device__ inline void mma_tf32_m16n8k8(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#elif defined(EMULATED_DEVICE)
    mma_emulated(d, a, b, c, false);
#else
    (void)d, (void)a, (void)b, (void)c; // nvcc's host pass: device code only
#endif
}

// D (16x8 float) = A (16x16 bf16) B (16x8 bf16) + C, the warp's fragments (layouts above)
static __device__ inline void mma_bf16_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#elif defined(EMULATED_DEVICE)
    mma_emulated(d, a, b, c, true);
#else
    (void)d, (void)a, (void)b, (void)c;
#endif
}

// ---- ldmatrix: N (1, 2 or 4) 8x8 matrices of b16 from shared memory into N registers ---------------
// row: this lane's row address (lanes 8 j .. 8 j + 7: matrix j's rows; the others' unused)
template <int N, bool TRANS> static __device__ inline void ldmatrix(uint32_t r[N], const void *row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__)
    unsigned at = (unsigned)__cvta_generic_to_shared(row);
    if (N == 1 && !TRANS) asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(at));
    if (N == 1 && TRANS) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(at));
    if (N == 2 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
    if (N == 2 && TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
    if (N == 4 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    if (N == 4 && TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
#elif defined(EMULATED_DEVICE)
    const void *rows[32];
    warp_share(&row, sizeof row, rows);
    int lane = (int)lane_id();
    for (int j = 0; j < N; j++) {
        const uint16_t *m[8]; // matrix j's rows
        for (int i = 0; i < 8; i++) m[i] = (const uint16_t *)rows[8 * j + i];
        uint16_t lo = TRANS ? m[2 * (lane % 4)][lane / 4] : m[lane / 4][2 * (lane % 4)];
        uint16_t hi = TRANS ? m[2 * (lane % 4) + 1][lane / 4] : m[lane / 4][2 * (lane % 4) + 1];
        r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
#else
    (void)r, (void)row;
#endif
}

// ---- cp.async: 16 bytes from global to shared memory, in flight until a wait completes them -------
static __device__ inline void cp_async_16(void *shared, const void *global) {
#if defined(__CUDA_ARCH__)
    unsigned at = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at), "l"(global));
#elif defined(EMULATED_DEVICE)
    cp_async_copy(shared, global, 16);
#else
    (void)shared, (void)global;
#endif
}
// the copies since the last commit form a group
static __device__ inline void cp_async_commit(void) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;");
#elif defined(EMULATED_DEVICE)
    cp_async_commit_group();
#endif
}
// waits until at most N of this thread's newest committed groups are in flight
template <int N> static __device__ inline void cp_async_wait(void) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#elif defined(EMULATED_DEVICE)
    cp_async_wait_group(N);
#endif
}
