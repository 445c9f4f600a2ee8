// exact.c: see exact.h.
#include "exact.h"
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define PAR_EXACT 32768 // elements from which the loops run on the OpenMP threads

size_t exact_bytes(size_t n) { return n * (EXACT_LIMBS + 1) * sizeof(int64_t); }

ExactSum exact_view(void *mem, size_t n) {
    ExactSum s = {.n = n, .top = mem, .limb = (int64_t *)mem + n};
    exact_clear(&s);
    return s;
}

void exact_clear(ExactSum *s) {
    for (size_t i = 0; i < s->n; i++) s->top[i] = EXACT_EMPTY;
    memset(s->limb, 0, s->n * EXACT_LIMBS * sizeof(int64_t));
}

// Element with top *top and limbs l moved up to the window of top `to` (>= *top)
static inline void raise_to(int64_t *top, int64_t *l, int64_t to) {
    if (*top == to) return;
    if (*top == EXACT_EMPTY || to == EXACT_NONFINITE) { // nothing to keep
        for (int j = 0; j < EXACT_LIMBS; j++) l[j] = 0;
    } else {
        int64_t d = to - *top;
        for (int j = EXACT_LIMBS - 1; j >= 0; j--) l[j] = j >= d ? l[j - d] : 0;
    }
    *top = to;
}

// Adds the 32-bit pieces of `wide` (bins low, low + 1, low + 2; the highest nonzero one `high`)
// into one element, its window raised first when the term reaches above it
static inline void add_pieces(int64_t *top, int64_t *l, unsigned __int128 wide, int64_t low,
                              int64_t high, bool negative) {
    if (*top == EXACT_NONFINITE) return;
    if (*top == EXACT_EMPTY || high > *top) raise_to(top, l, high);
    for (int k = 0; k < 3; k++) {
        int64_t j = *top - (low + k);
        int64_t piece = (int64_t)(uint32_t)(wide >> (32 * k));
        if (j >= 0 && j < EXACT_LIMBS) l[j] += negative ? -piece : piece;
    }
}

// One double into one element: its 53-bit significand at global bit position p (weight
// 2^(p - 1074)) spans at most three bins
static inline void add_one(int64_t *top, int64_t *l, double x) {
    if (x == 0) return;
    if (!isfinite(x)) {
        raise_to(top, l, EXACT_NONFINITE);
        return;
    }
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)(bits >> 52 & 0x7ff);
    uint64_t mant = bits & ((UINT64_C(1) << 52) - 1);
    int p = 0;
    if (e) mant |= UINT64_C(1) << 52, p = e - 1;
    unsigned __int128 wide = (unsigned __int128)mant << (p & 31);
    int64_t low = p >> 5, high = low;
    for (unsigned __int128 w = wide >> 32; w; w >>= 32) high++;
    add_pieces(top, l, wide, low, high, bits >> 63);
}

// One float: the same grid (a float's bit position is a double's), its 24-bit significand
// shifted within a bin fits 64 bits, two pieces. Normal floats take the short way; the rest
// (zero, subnormal, non-finite) the double's.
static inline void add_float(int64_t *top, int64_t *l, float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)(bits >> 23 & 0xff);
    if (e == 0 || e == 0xff) return add_one(top, l, x);
    int p = e - 127 - 23 + 1074; // the double grid's position of the significand's lowest bit
    uint64_t wide = (uint64_t)((bits & 0x7fffff) | 0x800000) << (p & 31);
    int64_t low = p >> 5, high = low + (wide >> 32 != 0);
    bool negative = bits >> 31;
    if (*top != EXACT_EMPTY && *top != EXACT_NONFINITE && high <= *top && *top - low < EXACT_LIMBS + 1) {
        int64_t j = *top - low, lo = (int64_t)(uint32_t)wide, hi = (int64_t)(wide >> 32);
        if (j < EXACT_LIMBS) l[j] += negative ? -lo : lo;
        if (j >= 1) l[j - 1] += negative ? -hi : hi; // j - 1 < EXACT_LIMBS as j <= EXACT_LIMBS
        return;
    }
    add_pieces(top, l, wide, low, high, negative);
}

void exact_add_double(ExactSum *s, size_t at, const double *x, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) add_one(s->top + at + i, s->limb + (at + i) * EXACT_LIMBS, x[i]);
}

#ifdef REAL_F64
#define ADD_REAL add_one
#else
#define ADD_REAL add_float
#endif

void exact_add(ExactSum *s, size_t at, const real *x, size_t n) { exact_add_terms(s, at, x, n, 1, n); }

// Each element's window stays in registers while its `count` terms go in
void exact_add_terms(ExactSum *s, size_t at, const real *x, size_t stride, int count, size_t n) {
#pragma omp parallel for if (n * (size_t)count > PAR_EXACT)
    for (size_t i = 0; i < n; i++) {
        int64_t top = s->top[at + i], l[EXACT_LIMBS];
        memcpy(l, s->limb + (at + i) * EXACT_LIMBS, sizeof l);
        for (int k = 0; k < count; k++) ADD_REAL(&top, l, x[(size_t)k * stride + i]);
        s->top[at + i] = top;
        memcpy(s->limb + (at + i) * EXACT_LIMBS, l, sizeof l);
    }
}

void exact_merge(ExactSum *dst, size_t at, const ExactSum *src) {
#pragma omp parallel for if (src->n > PAR_EXACT)
    for (size_t i = 0; i < src->n; i++) {
        int64_t st = src->top[i], *dt = dst->top + at + i, *dl = dst->limb + (at + i) * EXACT_LIMBS;
        if (st == EXACT_EMPTY || *dt == EXACT_NONFINITE) continue;
        int64_t sl[EXACT_LIMBS];
        memcpy(sl, src->limb + i * EXACT_LIMBS, sizeof sl);
        int64_t to = *dt == EXACT_EMPTY || st > *dt ? st : *dt;
        raise_to(&st, sl, to);
        raise_to(dt, dl, to);
        for (int j = 0; j < EXACT_LIMBS; j++) dl[j] += sl[j];
    }
}

void exact_align(ExactSum *s, const int64_t *to) {
#pragma omp parallel for if (s->n > PAR_EXACT)
    for (size_t i = 0; i < s->n; i++) raise_to(s->top + i, s->limb + i * EXACT_LIMBS, to[i]);
}

// The window's integer (limbs at weights 2^64, 2^32, 1; |limb| < 2^62 keeps it in 128 bits),
// rounded once to a double, then scaled: the bin of limb 2 starts at bit 32 (top - 2) - 1074
static double result_one(int64_t top, const int64_t *l) {
    if (top == EXACT_EMPTY) return 0;
    if (top == EXACT_NONFINITE) return NAN;
    __int128 v = 0;
    for (int j = 0; j < EXACT_LIMBS; j++) v = v * ((__int128)1 << 32) + l[j];
    return ldexp((double)v, (int)(32 * (top - (EXACT_LIMBS - 1)) - 1074));
}

void exact_result_double(double *out, const ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = result_one(s->top[at + i], s->limb + (at + i) * EXACT_LIMBS);
}

void exact_result(real *out, const ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = (real)result_one(s->top[at + i], s->limb + (at + i) * EXACT_LIMBS);
}
