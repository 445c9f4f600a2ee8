// exact.h: sums whose result does not depend on the order of the terms, for --exact. Every term
// (a float or double) is cut into 32-bit pieces on one global grid of bit positions (bin b holds
// the bits of weight 2^(32 b - 1074) .. 2^(32 b - 1043)), and each element keeps the integer sums
// of its EXACT_LIMBS highest bins: `top`, the highest bin any term reached, and limb[i], the sum of
// the pieces of bin top - i. Pieces below the window are dropped. Integer addition is associative,
// and which bins survive depends only on the largest term, so any order, any grouping into partial
// sums (sums merge by aligning their windows) and any MPI reduction of them gives the same bits.
// The window covers 64 bits below the top bin's lowest: the sum is as accurate as a double sum
// (relative to the largest term), and exact for float32 terms within 2^40 of the largest.
// A non-finite term makes the element's result NaN.
// Most terms never reach the limbs: a double `front` per element takes them while its sum stays
// exact, and the result of an element without limbs is its front (exact_add_terms, result_one in
// exact.c). A reduction over ranks exchanges the fronts alone where no rank has limbs (8 bytes a
// value instead of 32; comm.h). Both give the bits of the limbs' arithmetic as long as no piece
// falls below a window. Where one does (terms that cancel down to more than 64 bits below the
// largest, e.g. 2^40, -2^40 and 2^-60), a front that already cancelled keeps the small term that
// the window of a grouping with the large term on its own drops: one rank gets 2^-60, three ranks
// holding one term each get 0.
#pragma once
#include "real.h"
#include <stddef.h>
#include <stdint.h>

#define EXACT_LIMBS 3
#define EXACT_EMPTY INT64_MIN  // top of an element no term has reached
#define EXACT_NONFINITE 1000   // top of an element a non-finite term reached (above every bin)

// n elements, struct of arrays so that a reduction is two plain MPI calls (MAX over top, then SUM
// over limb): top [n], limb [EXACT_LIMBS][n]
typedef struct ExactSum {
    size_t n;
    int64_t *top, *limb;
    double *front; // [n]: terms whose double sum is still exact (see exact_add_terms)
} ExactSum;

size_t exact_bytes(size_t n);                // memory for exact_view
ExactSum exact_view(void *mem, size_t n);    // n elements in mem (exact_bytes(n)), emptied
ExactSum exact_view_zeroed(void *mem, size_t n); // the same on memory of zero bytes: only the tops written
void exact_clear(ExactSum *s);               // every element empty (sum 0)
// s[i] += x[i] for i < n, starting at element `at`
void exact_add(ExactSum *s, size_t at, const real *x, size_t n);
// The same for `count` arrays of n terms, `stride` apart in x: one pass over the sums
void exact_add_terms(ExactSum *s, size_t at, const real *x, size_t stride, int count, size_t n);
void exact_add_double(ExactSum *s, size_t at, const double *x, size_t n);
// dst[i] += src[i] for the n elements of src, into dst starting at `at`
void exact_merge(ExactSum *dst, size_t at, ExactSum *src);
// Moves element i's limbs to the window of top `to[i]` (>= its own), dropping the bins below it:
// the step between the MAX and the SUM of a reduction.
void exact_align(ExactSum *s, const int64_t *to);
// out[i] = s[i] rounded (from the exact integer sum in the window) for i < n, from element `at`
void exact_result(real *out, ExactSum *s, size_t at, size_t n);
void exact_result_double(double *out, ExactSum *s, size_t at, size_t n);
// Moves the terms kept in `front` into the limbs (exact_align and exact_merge do it first; the limbs
// alone are what a reduction exchanges; exact_result reads both and leaves s as it is)
void exact_flush(ExactSum *s);

// ---- a reduction by fronts (comm.c): when no rank has limbs for an element, every rank's front
// (8 bytes) is all the reduction needs, and the sum is set from the fronts of all ranks with the
// bits a reduction of the limbs gives (see exact_sum_fronts in exact.c) ----
// out[i] = element i's front, or NaN (never a front: a non-finite term goes to the limbs) when it
// has limbs
void exact_fronts(const ExactSum *s, double *out);
// s[i] = the sum of fronts[r * n + i] over r < count, for each element i with no NaN among them;
// returns how many have one (left as they are)
size_t exact_sum_fronts(ExactSum *s, const double *fronts, int count);
// idx = those elements, in order
void exact_slow_fronts(const double *fronts, size_t n, int count, size_t *idx);
// dst[k] = src[idx[k]] for k < dst->n, and back: src[k] into dst[idx[k]] for k < src->n
void exact_pick(ExactSum *dst, const ExactSum *src, const size_t *idx);
void exact_put(ExactSum *dst, const ExactSum *src, const size_t *idx);
