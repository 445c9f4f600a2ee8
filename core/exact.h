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
// exact.c). A reduction over ranks carries sums on their own (ExactPart: 40 bytes a value), or
// first their fronts alone (ExactFront: 10 bytes) where no rank has limbs (comm.h). Both give the
// bits of the limbs' arithmetic as long as no piece falls below a window. Where one does (terms
// that cancel down to more than 64 bits below the largest, e.g. 2^40, -2^40 and 2^-60), a front
// that already cancelled keeps the small term that the window of a grouping with the large term
// on its own drops: one rank gets 2^-60, three ranks holding one term each get 0.
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
// dst[i] += src[i] for the n elements of src, into dst starting at `at`, limbwise in the window of
// the larger (src's fronts moved into its limbs first)
void exact_merge(ExactSum *dst, size_t at, ExactSum *src);
// out[i] = s[i] rounded (from the exact integer sum in the window) for i < n, from element `at`
void exact_result(real *out, ExactSum *s, size_t at, size_t n);
void exact_result_double(double *out, ExactSum *s, size_t at, size_t n);
// Moves the terms kept in `front` into the limbs (exact_result reads both and leaves s as it is)
void exact_flush(ExactSum *s);

// ---- sums on their own, as a reduction carries them (comm.h) ----------------------------------
// One element's sum. A part without limbs (top EXACT_EMPTY) is its front alone, and limb[0] and
// limb[1] hold the span of the fronts added into it: the least bin of their lowest bits and the
// greatest of their top bits (see exact_parts_add), so that parts add in any grouping with the
// bits an all-reduce of the fronts gives.
typedef struct ExactPart {
    int64_t top, limb[EXACT_LIMBS];
    double front;
} ExactPart;
// One element's front and that span; sum NaN where the element has limbs, or where fronts no
// longer add in a front (exact_fronts_add). Packed: 10 bytes travel a value.
typedef struct __attribute__((packed)) ExactFront {
    double sum;
    uint8_t low, top;
} ExactFront;
// parts[k] = s's element at + k, or idx[k] where idx is not NULL, for k < n
void exact_parts(ExactPart *parts, const ExactSum *s, size_t at, const size_t *idx, size_t n);
// The other way: s's element at + k (or idx[k]) = parts[k], its span dropped (a complete sum's)
void exact_put_parts(ExactSum *s, size_t at, const size_t *idx, const ExactPart *parts, size_t n);
// out[k] = a[k] + b[k], exactly; out may be a or b. Two fronts stay a front while their sum is
// exact and their span fits one window (the greatest top bin and the two below it); else both go
// to the limbs, a front's window first raised to its span's greatest bin.
void exact_parts_add(ExactPart *out, const ExactPart *a, const ExactPart *b, size_t n);
void exact_parts_result(real *out, const ExactPart *parts, size_t n); // out[k] = parts[k] rounded
// fronts[k] = element at + k's front and its span, or sum NaN where it has limbs, for k < n
void exact_fronts(ExactFront *fronts, const ExactSum *s, size_t at, size_t n);
// out[k] = a[k] + b[k] as exact_parts_add adds fronts, or sum NaN where they would go to the
// limbs (or either is NaN)
void exact_fronts_add(ExactFront *out, const ExactFront *a, const ExactFront *b, size_t n);
// out[k] = fronts[k]'s sum rounded; returns how many are NaN (no front's sum)
size_t exact_fronts_result(real *out, const ExactFront *fronts, size_t n);
// s's front = f's sum for each of the first n elements where it is a number; slow = the others,
// in order; returns their count
size_t exact_take_fronts(ExactSum *s, const ExactFront *f, size_t n, size_t *slow);
