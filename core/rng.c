// rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// Counter = (index lo, index hi, stream lo, stream hi), key = (seed lo, seed hi).
#include "rng.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void block(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    philox4x32(ctr, key, out);
}

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    block(seed, stream, index, r);
    return r[0];
}

// 53 random bits mapped to the open interval (0, 1)
static double to_unit(uint32_t hi, uint32_t lo) {
    uint64_t bits = ((uint64_t)hi << 21) ^ (lo >> 11);
    return ((double)bits + 0.5) / 9007199254740992.0;
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    block(seed, stream, index, r);
    return to_unit(r[0], r[1]);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    block(seed, stream, index, r);
    double u1 = to_unit(r[0], r[1]), u2 = to_unit(r[2], r[3]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void rng_fill_uniform(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset, double lo,
                      double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(lo + (hi - lo) * rng_uniform(seed, stream, offset + i));
}

void rng_fill_normal(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                     double std) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(std * rng_normal(seed, stream, offset + i));
}
