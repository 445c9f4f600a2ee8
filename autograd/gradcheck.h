// gradcheck.h: compare autograd gradients with central finite differences. The function under
// test maps input tensors to an output tensor; it is reduced to the scalar sum(R * out) with a
// fixed random R, so every output element contributes. Run it in the float64 build.
#pragma once
#include "tape.h"
#include <stdint.h>

typedef Tensor *(*GradFn)(Tape *tp, Tensor **in, void *ctx);

typedef struct GradCheck {
    // max over inputs of max_i |analytic_i - numeric_i| / max_i max(|numeric_i|, |analytic_i|);
    // an input whose gradient is (near) zero, where the analytic value is rounding noise of the
    // computation's scale, is measured against a thousandth of the largest input's gradient
    double max_rel_err;
    int worst_input;    // where it occurred
    size_t worst_index;
    double analytic, numeric; // the two values there
} GradCheck;

// Element-by-element check of every input that has requires_grad. `a` is scratch memory for the
// evaluations; inputs must not live in it.
GradCheck gradcheck(GradFn f, Tensor **in, int n_in, void *ctx, Arena *a, double eps,
                    uint64_t seed);
// One random direction d over all inputs at once: relative difference between the directional
// derivative g.d from autograd and (f(x + eps d) - f(x - eps d)) / (2 eps).
double gradcheck_direction(GradFn f, Tensor **in, int n_in, void *ctx, Arena *a, double eps,
                           uint64_t seed);
