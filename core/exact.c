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

// a += b limbwise, in the window of the larger
static inline void merge_limbs(Elem *a, Elem b) {
    if (b.top == EXACT_EMPTY || a->top == EXACT_NONFINITE) return;
    int64_t to = a->top == EXACT_EMPTY || b.top > a->top ? b.top : a->top;
    raise_to(a, to), raise_to(&b, to);
    for (int j = 0; j < EXACT_LIMBS; j++) a->l[j] += b.l[j];
}

void exact_merge(ExactSum *dst, size_t at, ExactSum *src) {
    exact_flush(src);
#pragma omp parallel for if (src->n > PAR_EXACT)
    for (size_t i = 0; i < src->n; i++) {
        Elem a = load(dst, at + i);
        merge_limbs(&a, load(src, i));
        store(dst, at + i, &a);
    }
}

// The window's integer (limbs at weights 2^64, 2^32, 1; |limb| < 2^62 keeps it in 128 bits),
// rounded once to a double, then scaled: the bin of limb 2 starts at bit 32 (top - 2) - 1074.
// The front is added on the way (as exact_flush would, the sum unchanged); with no limbs it is the
// result itself: flushed alone, its at most 84 bits (53 shifted by p mod 32) lie in the three bins
// of its own window, so the window's integer is the front's exact value.
static double value(Elem e, double front) {
    if (e.top == EXACT_EMPTY) return front;
    add_double(&e, front);
    if (e.top == EXACT_NONFINITE) return NAN;
    __int128 v = 0;
    for (int j = 0; j < EXACT_LIMBS; j++) v = v * ((__int128)1 << 32) + e.l[j];
    return ldexp((double)v, (int)(32 * (e.top - (EXACT_LIMBS - 1)) - 1074));
}

static double result_one(const ExactSum *s, size_t i) { return value(load(s, i), s->front[i]); }

void exact_result_double(double *out, ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = result_one(s, at + i);
}

void exact_result(real *out, ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t i = 0; i < n; i++) out[i] = (real)result_one(s, at + i);
}

// ---- sums on their own (exact.h) ------------------------------------------------------------
// A part or a front without limbs carries the span of the fronts added into it: the least bin of
// their lowest significand bits (p >> 5, split_double's p) and the greatest bin of their top bits
// ((p + 52) >> 5); a zero front spans nothing (NO_LOW, NO_TOP: no test fails on it, and the least
// and the greatest ignore it). Two add as fronts while their double sum is exact and the span fits
// one window (the least bin at most EXACT_LIMBS - 1 below the greatest): the test of an
// all-reduce of fronts (its sum is then the one the limbs would hold, the same for any grouping).
// Else they go to the limbs, where a front's window starts at its span's greatest bin, as its
// fronts' own would have, even where they cancelled.
#define NO_LOW 255
#define NO_TOP 0

static inline void front_span(double x, int64_t *low, int64_t *top) {
    int p;
    split_double(x, &p);
    *low = x == 0 ? NO_LOW : p >> 5, *top = x == 0 ? NO_TOP : (p + 52) >> 5;
}

// *a += b with the spans joined, branch-free (the loops over fronts vectorize); false where the sum
// would leave the fronts (nothing changed then)
static inline bool add_front_pair(double *a, int64_t *alow, int64_t *atop, double b, int64_t blow, int64_t btop) {
    double sum = *a + b, bb = sum - *a;
    int64_t low = blow < *alow ? blow : *alow, top = btop > *atop ? btop : *atop;
    bool fits = (*a - (sum - bb)) + (b - bb) == 0 && low >= top - (EXACT_LIMBS - 1); // false for NaN
    *a = fits ? sum : *a, *alow = fits ? low : *alow, *atop = fits ? top : *atop;
    return fits;
}

// A part's limbs with its front added (a front alone in the window of its span's greatest bin)
static inline Elem part_limbs(const ExactPart *p) {
    Elem e = {.top = p->top};
    if (p->top != EXACT_EMPTY) memcpy(e.l, p->limb, sizeof e.l);
    else if (p->limb[1] != NO_TOP) raise_to(&e, p->limb[1]);
    add_double(&e, p->front);
    return e;
}

void exact_parts(ExactPart *parts, const ExactSum *s, size_t at, const size_t *idx, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : at + k;
        ExactPart *p = &parts[k];
        p->top = s->top[i], p->front = s->front[i];
        if (p->top != EXACT_EMPTY)
            for (int j = 0; j < EXACT_LIMBS; j++) p->limb[j] = LIMB(s, j, i);
        else front_span(p->front, &p->limb[0], &p->limb[1]);
    }
}

void exact_put_parts(ExactSum *s, size_t at, const size_t *idx, const ExactPart *parts, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : at + k;
        const ExactPart *p = &parts[k];
        s->top[i] = p->top, s->front[i] = p->front;
        for (int j = 0; j < EXACT_LIMBS; j++) LIMB(s, j, i) = p->top == EXACT_EMPTY ? 0 : p->limb[j];
    }
}

void exact_parts_add(ExactPart *out, const ExactPart *a, const ExactPart *b, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        ExactPart x = a[k];
        const ExactPart *y = &b[k];
        if (x.top == EXACT_EMPTY && y->top == EXACT_EMPTY &&
            add_front_pair(&x.front, &x.limb[0], &x.limb[1], y->front, y->limb[0], y->limb[1])) {
            out[k] = x;
            continue;
        }
        Elem e = part_limbs(&x);
        merge_limbs(&e, part_limbs(y));
        out[k] = (ExactPart){.top = e.top}; // e has a term: never empty
        memcpy(out[k].limb, e.l, sizeof e.l);
    }
}

void exact_parts_result(real *out, const ExactPart *parts, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        Elem e = {.top = parts[k].top};
        memcpy(e.l, parts[k].limb, sizeof e.l);
        out[k] = (real)value(e, parts[k].front);
    }
}

void exact_fronts(ExactFront *fronts, const ExactSum *s, size_t at, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        int64_t low, top;
        bool limbs = s->top[at + k] != EXACT_EMPTY;
        front_span(limbs ? 0 : s->front[at + k], &low, &top);
        fronts[k] = (ExactFront){limbs ? NAN : s->front[at + k], (uint8_t)low, (uint8_t)top};
    }
}

void exact_fronts_add(ExactFront *out, const ExactFront *a, const ExactFront *b, size_t n) {
#pragma omp parallel for if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) {
        double sum = a[k].sum;
        int64_t low = a[k].low, top = a[k].top;
        if (!add_front_pair(&sum, &low, &top, b[k].sum, b[k].low, b[k].top)) sum = NAN;
        out[k] = (ExactFront){sum, (uint8_t)low, (uint8_t)top};
    }
}

size_t exact_fronts_result(real *out, const ExactFront *fronts, size_t n) {
    size_t left = 0;
#pragma omp parallel for reduction(+ : left) if (n > PAR_EXACT)
    for (size_t k = 0; k < n; k++) out[k] = (real)fronts[k].sum, left += isnan(fronts[k].sum);
    return left;
}

size_t exact_take_fronts(ExactSum *s, const ExactFront *f, size_t n, size_t *slow) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isnan(f[i].sum)) slow[k++] = i;
        else s->front[i] = f[i].sum; // no rank had limbs: neither has this one
    return k;
}
