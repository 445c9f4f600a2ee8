// exact.c: see exact.h. limb is stored limb by limb: limb[j * n + i] is element i's limb j.
#include "exact.h"
#include "cpu.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PAR_EXACT 32768 // element-terms from which the loops run on the OpenMP threads
#define LIMB(s, j, i) (s)->limb[(size_t)(j) * (s)->n + (i)]

size_t exact_bytes(size_t n) { return n * ((EXACT_LIMBS + 1) * sizeof(int64_t) + sizeof(double)); }

// n elements' arrays in mem, as they are
static ExactSum layout(void *mem, size_t n) {
    ExactSum s = {.n = n, .top = mem, .limb = (int64_t *)mem + n};
    s.front = (double *)(s.limb + EXACT_LIMBS * n);
    return s;
}

ExactSum exact_view(void *mem, size_t n) {
    ExactSum s = layout(mem, n);
    exact_clear(&s);
    return s;
}

ExactSum exact_view_zeroed(void *mem, size_t n) { // limbs and fronts are 0 already
    ExactSum s = layout(mem, n);
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) s.top[i] = EXACT_EMPTY;
    return s;
}

void exact_clear(ExactSum *s) {
#pragma omp parallel for if (s->n > PAR_EXACT)
    for (size_t i = 0; i < s->n; i++) {
        s->top[i] = EXACT_EMPTY, s->front[i] = 0;
        for (int j = 0; j < EXACT_LIMBS; j++) LIMB(s, j, i) = 0;
    }
}

// An element held in registers: its top and limbs
typedef struct Elem {
    int64_t top, l[EXACT_LIMBS];
} Elem;

static inline Elem load(const ExactSum *s, size_t i) {
    Elem e = {.top = s->top[i]};
    for (int j = 0; j < EXACT_LIMBS; j++) e.l[j] = LIMB(s, j, i);
    return e;
}

static inline void store(ExactSum *s, size_t i, const Elem *e) {
    s->top[i] = e->top;
    for (int j = 0; j < EXACT_LIMBS; j++) LIMB(s, j, i) = e->l[j];
}

// The element moved up to the window of top `to` (>= its own)
static inline void raise_to(Elem *e, int64_t to) {
    if (e->top == to) return;
    if (e->top == EXACT_EMPTY || to == EXACT_NONFINITE) { // nothing to keep
        for (int j = 0; j < EXACT_LIMBS; j++) e->l[j] = 0;
    } else {
        int64_t d = to - e->top;
        for (int j = EXACT_LIMBS - 1; j >= 0; j--) e->l[j] = j >= d ? e->l[j - d] : 0;
    }
    e->top = to;
}

// Adds the 32-bit pieces of `wide` (bins low, low + 1, low + 2; the highest nonzero one `high`),
// the window raised first when the term reaches above it
static inline void add_pieces(Elem *e, unsigned __int128 wide, int64_t low, int64_t high, bool negative) {
    if (e->top == EXACT_NONFINITE) return;
    if (e->top == EXACT_EMPTY || high > e->top) raise_to(e, high);
    for (int k = 0; k < 3; k++) {
        int64_t j = e->top - (low + k);
        int64_t piece = (int64_t)(uint32_t)(wide >> (32 * k));
        if (j >= 0 && j < EXACT_LIMBS) e->l[j] += negative ? -piece : piece;
    }
}

// A finite double's significand (the hidden bit included) and, in *p, the global bit position of
// its lowest bit (weight 2^(p - 1074))
static inline uint64_t split_double(double x, int *p) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int ex = (int)(bits >> 52 & 0x7ff);
    uint64_t mant = bits & ((UINT64_C(1) << 52) - 1);
    *p = 0;
    if (ex) mant |= UINT64_C(1) << 52, *p = ex - 1;
    return mant;
}

// One double: its 53-bit significand at global bit position p (weight 2^(p - 1074)) spans at
// most three bins
static inline void add_double(Elem *e, double x) {
    if (x == 0) return;
    if (!isfinite(x)) return raise_to(e, EXACT_NONFINITE);
    int p;
    uint64_t mant = split_double(x, &p);
    unsigned __int128 wide = (unsigned __int128)mant << (p & 31);
    int64_t low = p >> 5, high = low;
    for (unsigned __int128 w = wide >> 32; w; w >>= 32) high++;
    add_pieces(e, wide, low, high, signbit(x));
}

void exact_add_double(ExactSum *s, size_t at, const double *x, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) {
        Elem e = load(s, at + i);
        add_double(&e, x[i]);
        store(s, at + i, &e);
    }
}

// Terms go first into `front`, a double per element, as long as each addition is exact there
// (TwoSum's error term is zero: the double holds the exact sum of its terms); a term that would
// round goes to the limbs instead. exact_flush moves the doubles into the limbs. Either way the
// element's total is the exact sum of its terms, so the split does not depend on the order.
// A front's sum drops no bit only while its terms lie inside the window: float32 terms within 2^40
// of the element's largest do. A double term can have bits below the window; alone they are
// dropped, but in a front's sum their carries reach the window, and which terms share a front
// depends on the order. So the float64 build's terms all go to the limbs.
#ifdef REAL_F64
#define FRONT 0
#else
#define FRONT 1
#endif
#define CHUNK 2048 // elements at a time, so that a chunk's sums stay in cache over its terms
// *slow set when a term went to rest (the flags as ints and an OR: the loop takes the widest vectors)
SIMD_BODY void add_front(double *front, const real *x, size_t n, uint8_t *rest, int *slow) {
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        double a = front[i], b = x[i], sum = a + b, bb = sum - a;
        int exact = (a - (sum - bb)) + (b - bb) == 0; // false for NaN and infinities too
        front[i] = exact ? sum : a;
        rest[i] = (uint8_t)(1 - exact);
        any |= 1 - exact;
    }
    *slow = any;
}
SIMD_CLONES(add_front, (double *front, const real *x, size_t n, uint8_t *rest, int *slow),
            (front, x, n, rest, slow))

// One element's terms (a sum of squares, a loss) in the same order, each into the front or the
// limbs as add_front and exact_add_terms put it: a branch instead of add_front's select keeps the
// front's chain at one addition a term, the test running beside it, and no call a term
static void add_series(ExactSum *s, size_t at, const real *x, size_t stride, int count) {
    double a = s->front[at];
    for (int k = 0; k < count; k++) {
        double b = x[(size_t)k * stride], sum = a + b, bb = sum - a;
        if ((a - (sum - bb)) + (b - bb) == 0) {
            a = sum;
            continue;
        }
        Elem e = load(s, at);
        add_double(&e, b);
        store(s, at, &e);
    }
    s->front[at] = a;
}

void exact_add_terms(ExactSum *s, size_t at, const real *x, size_t stride, int count, size_t n) {
    if (FRONT && n == 1) return add_series(s, at, x, stride, count);
#pragma omp parallel for if (n * (size_t)count > PAR_EXACT)
    for (size_t c = 0; c < n; c += CHUNK) {
        uint8_t rest[CHUNK];
        size_t len = n - c < CHUNK ? n - c : CHUNK;
        for (int k = 0; k < count; k++) {
            const real *xk = x + (size_t)k * stride + c;
            int slow = 1;
            if (FRONT) add_front_simd(s->front + at + c, xk, len, rest, &slow);
            if (!slow) continue;
            for (size_t i = 0; i < len; i++)
                if (!FRONT || rest[i]) {
                    Elem e = load(s, at + c + i);
                    add_double(&e, xk[i]);
                    store(s, at + c + i, &e);
                }
        }
    }
}

void exact_flush(ExactSum *s) {
#pragma omp parallel for if (s->n > PAR_EXACT)
    for (size_t i = 0; i < s->n; i++)
        if (s->front[i] != 0) {
            Elem e = load(s, i);
            add_double(&e, s->front[i]);
            store(s, i, &e);
            s->front[i] = 0;
        }
}

void exact_add(ExactSum *s, size_t at, const real *x, size_t n) { exact_add_terms(s, at, x, n, 1, n); }

void exact_merge(ExactSum *dst, size_t at, ExactSum *src) {
    exact_flush(src);
#pragma omp parallel for if (src->n > PAR_EXACT)
    for (size_t i = 0; i < src->n; i++) {
        Elem a = load(dst, at + i), b = load(src, i);
        if (b.top == EXACT_EMPTY || a.top == EXACT_NONFINITE) continue;
        int64_t to = a.top == EXACT_EMPTY || b.top > a.top ? b.top : a.top;
        raise_to(&a, to), raise_to(&b, to);
        for (int j = 0; j < EXACT_LIMBS; j++) a.l[j] += b.l[j];
        store(dst, at + i, &a);
    }
}

void exact_align(ExactSum *s, const int64_t *to) {
    exact_flush(s);
#pragma omp parallel for if (s->n > PAR_EXACT)
    for (size_t i = 0; i < s->n; i++) {
        Elem e = load(s, i);
        raise_to(&e, to[i]);
        store(s, i, &e);
    }
}

// The window's integer (limbs at weights 2^64, 2^32, 1; |limb| < 2^62 keeps it in 128 bits),
// rounded once to a double, then scaled: the bin of limb 2 starts at bit 32 (top - 2) - 1074.
// The front is added on the way (as exact_flush would, s unchanged); with no limbs it is the
// result itself: flushed alone, its at most 84 bits (53 shifted by p mod 32) lie in the three bins
// of its own window, so the window's integer is the front's exact value.
static double result_one(const ExactSum *s, size_t i) {
    if (s->top[i] == EXACT_EMPTY) return s->front[i];
    Elem e = load(s, i);
    add_double(&e, s->front[i]);
    if (e.top == EXACT_NONFINITE) return NAN;
    __int128 v = 0;
    for (int j = 0; j < EXACT_LIMBS; j++) v = v * ((__int128)1 << 32) + e.l[j];
    return ldexp((double)v, (int)(32 * (e.top - (EXACT_LIMBS - 1)) - 1074));
}

void exact_result_double(double *out, ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = result_one(s, at + i);
}

void exact_result(real *out, ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = (real)result_one(s, at + i);
}

void exact_fronts(const ExactSum *s, double *out) {
#pragma omp parallel for if (s->n > PAR_EXACT)
    for (size_t i = 0; i < s->n; i++) out[i] = s->top[i] == EXACT_EMPTY ? s->front[i] : NAN;
}

static bool any_nan(const double *fronts, size_t n, int count, size_t i) {
    bool any = false;
    for (int r = 0; r < count; r++) any |= isnan(fronts[(size_t)r * n + i]);
    return any;
}

// Global bit positions (weight 2^(pos - 1074), as in add_double) of the highest and the lowest
// set bit of a nonzero finite double
static void bit_span(double x, int *top, int *bottom) {
    int p;
    uint64_t mant = split_double(x, &p);
    *top = p + 63 - __builtin_clzll(mant), *bottom = p + __builtin_ctzll(mant);
}

// The fronts' sum kept as a front, when that is the value the window would hold: no front has a
// set bit below the window of the highest (whose top bin is the highest bit's), so none is dropped,
// and their double sum is exact at every step. Then the window's integer is that sum, and its
// rounding (exact_result) is the sum itself, as for any front.
static bool fronts_in_front(const double *fronts, size_t n, int count, size_t i, double *sum) {
    int top = INT32_MIN, bottom = INT32_MAX;
    double s = 0;
    for (int r = 0; r < count; r++) {
        double b = fronts[(size_t)r * n + i], t = s + b, bb = t - s;
        if ((s - (t - bb)) + (b - bb) != 0) return false;
        s = t;
        if (b == 0) continue;
        int hi, lo;
        bit_span(b, &hi, &lo);
        top = hi > top ? hi : top, bottom = lo < bottom ? lo : bottom;
    }
    if (top != INT32_MIN && bottom >> 5 < (top >> 5) - (EXACT_LIMBS - 1)) return false;
    *sum = s;
    return true;
}

// One rank's fronts x[i] added to the running sums sum[i] of a run of elements, vectorized: bad[i]
// set where an addition rounds (or meets a NaN or an infinity), low[i] and high[i] the least and
// the greatest significand position p (split_double) of the nonzero fronts so far
SIMD_BODY void sum_front_pass(double *sum, int64_t *low, int64_t *high, int64_t *bad, const double *x,
                              size_t n) {
    for (size_t i = 0; i < n; i++) {
        double a = sum[i], b = x[i], t = a + b, bb = t - a;
        bad[i] |= (a - (t - bb)) + (b - bb) != 0; // NaN too
        sum[i] = t;
        uint64_t bits;
        memcpy(&bits, &b, sizeof bits);
        int64_t ex = (int64_t)(bits >> 52 & 0x7ff), p = ex ? ex - 1 : 0;
        bool nonzero = b != 0;
        low[i] = nonzero && p < low[i] ? p : low[i];
        high[i] = nonzero && p > high[i] ? p : high[i];
    }
}
SIMD_CLONES(sum_front_pass, (double *sum, int64_t *low, int64_t *high, int64_t *bad, const double *x,
                             size_t n), (sum, low, high, bad, x, n))

// Else each front goes into the window as exact_flush would put it into its own sum, and the pieces
// of every front add there at once: the highest front sets the window, and a piece kept is one at
// or above its lowest bin, as after exact_align to the highest window and the limbs' SUM.
// Most elements pass fronts_in_front's test by their exponents alone, which a vectorized pass over
// a run of elements checks first: every addition exact, and the lowest significand position at or
// above the window of the highest front's top bit (p + 52, or above it for a subnormal); a front's
// lowest set bit is at or above its p, so fronts_in_front keeps the same sum there. The others take
// fronts_in_front itself.
#define RUN_FRONTS 512
size_t exact_sum_fronts(ExactSum *s, const double *fronts, int count) {
    size_t slow = 0, n = s->n;
#pragma omp parallel for reduction(+ : slow) if (n * (size_t)count > PAR_EXACT)
    for (size_t c = 0; c < n; c += RUN_FRONTS) {
        size_t len = n - c < RUN_FRONTS ? n - c : RUN_FRONTS;
        double sum[RUN_FRONTS];
        int64_t low[RUN_FRONTS], high[RUN_FRONTS], bad[RUN_FRONTS];
        for (size_t k = 0; k < len; k++) sum[k] = 0, low[k] = INT64_MAX, high[k] = -1, bad[k] = 0;
        for (int r = 0; r < count; r++)
            sum_front_pass_simd(sum, low, high, bad, fronts + (size_t)r * n + c, len);
        for (size_t k = 0, i = c; k < len; k++, i++) {
            if (!bad[k] && (high[k] < 0 || low[k] >> 5 >= ((high[k] + 52) >> 5) - (EXACT_LIMBS - 1))) {
                s->front[i] = sum[k];
                continue;
            }
            if (any_nan(fronts, n, count, i)) {
                slow++;
                continue;
            }
            if (fronts_in_front(fronts, n, count, i, &s->front[i])) continue; // no limbs here
            Elem e = {.top = EXACT_EMPTY};
            for (int r = 0; r < count; r++) add_double(&e, fronts[(size_t)r * n + i]);
            store(s, i, &e);
            s->front[i] = 0;
        }
    }
    return slow;
}

void exact_slow_fronts(const double *fronts, size_t n, int count, size_t *idx) {
    for (size_t i = 0, k = 0; i < n; i++)
        if (any_nan(fronts, n, count, i)) idx[k++] = i;
}

void exact_pick(ExactSum *dst, const ExactSum *src, const size_t *idx) {
    for (size_t k = 0; k < dst->n; k++) {
        Elem e = load(src, idx[k]);
        store(dst, k, &e);
        dst->front[k] = src->front[idx[k]];
    }
}

void exact_put(ExactSum *dst, const ExactSum *src, const size_t *idx) {
    for (size_t k = 0; k < src->n; k++) {
        Elem e = load(src, k);
        store(dst, idx[k], &e);
        dst->front[idx[k]] = src->front[k];
    }
}
