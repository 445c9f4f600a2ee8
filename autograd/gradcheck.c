// gradcheck.c: see gradcheck.h.
#include "gradcheck.h"
#include "../core/check.h"
#include "../core/rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>


// sum(R * f(in)), R ~ N(0,1) from (seed, STREAM_GRAD_PROJECTION); no tape is kept
static double project(GradFn f, Tensor **in, void *ctx, Arena *a, uint64_t seed) {
    size_t mark = arena_mark(a);
    Tape tp = tape_create(a);
    tp.grad_enabled = false;
    Tensor *out = f(&tp, in, ctx);
    double s = 0;
    for (size_t i = 0; i < out->size; i++)
        s += rng_normal(seed, STREAM_GRAD_PROJECTION, i) * out->data[i];
    tape_free(&tp);
    arena_release(a, mark);
    return s;
}

// Autograd gradients of sum(R * f(in)), copied into grads[k] (malloc'ed, NULL if not needed).
// Input gradients start from random values and the increment is what counts, so a backward that
// overwrites (=) instead of accumulating (+=) is caught.
static void analytic(GradFn f, Tensor **in, int n_in, void *ctx, Arena *a, uint64_t seed,
                     real **grads) {
    size_t mark = arena_mark(a);
    Tape tp = tape_create(a);
    real *start[NODE_MAX_IN * 4] = {0};
    for (int k = 0; k < n_in; k++) {
        in[k]->grad = NULL;
        if (!in[k]->requires_grad) continue;
        start[k] = arena_alloc(a, in[k]->size * sizeof(real));
        rng_fill_normal(start[k], in[k]->size, seed, STREAM_GRAD_PREFILL, (uint64_t)k << 32, 1.0);
        in[k]->grad = arena_alloc(a, in[k]->size * sizeof(real));
        memcpy(in[k]->grad, start[k], in[k]->size * sizeof(real));
    }
    Tensor *out = f(&tp, in, ctx);
    real *r = arena_alloc(a, out->size * sizeof(real));
    for (size_t i = 0; i < out->size; i++) r[i] = (real)rng_normal(seed, STREAM_GRAD_PROJECTION, i);
    backward_from(&tp, out, r);
    for (int k = 0; k < n_in; k++) {
        grads[k] = NULL;
        if (!in[k]->requires_grad) continue;
        grads[k] = xcalloc(in[k]->size, sizeof(real));
        for (size_t i = 0; i < in[k]->size; i++) grads[k][i] = in[k]->grad[i] - start[k][i];
        in[k]->grad = NULL;
    }
    tape_free(&tp);
    arena_release(a, mark);
}

GradCheck gradcheck(GradFn f, Tensor **in, int n_in, void *ctx, Arena *a, double eps,
                    uint64_t seed) {
    real *grads[NODE_MAX_IN * 4] = {0};
    CHECK(n_in <= NODE_MAX_IN * 4, "gradcheck: at most %d inputs", NODE_MAX_IN * 4);
    analytic(f, in, n_in, ctx, a, seed, grads);
    GradCheck each[NODE_MAX_IN * 4] = {0}; // per input: max_rel_err holds the max difference
    double scale[NODE_MAX_IN * 4] = {0}, largest = 0;
    for (int k = 0; k < n_in; k++) {
        if (!grads[k]) continue;
        for (size_t i = 0; i < in[k]->size; i++) {
            real x0 = in[k]->data[i];
            in[k]->data[i] = x0 + (real)eps;
            double fp = project(f, in, ctx, a, seed);
            in[k]->data[i] = x0 - (real)eps;
            double fm = project(f, in, ctx, a, seed);
            in[k]->data[i] = x0;
            double num = (fp - fm) / (2 * eps), diff = fabs(num - grads[k][i]);
            if (!isfinite(diff)) diff = INFINITY; // a NaN or an overflow fails (fmax drops NaNs)
            else scale[k] = fmax(scale[k], fmax(fabs(num), fabs(grads[k][i])));
            if (diff >= each[k].max_rel_err) each[k] = (GradCheck){diff, k, i, grads[k][i], num};
        }
        largest = fmax(largest, scale[k]);
        free(grads[k]);
    }
    GradCheck res = {0};
    for (int k = 0; k < n_in; k++) { // a zero gradient's rounding noise is of the largest's scale
        double s = fmax(scale[k], 1e-3 * largest);
        GradCheck r = each[k];
        r.max_rel_err = s > 0 ? r.max_rel_err / s : r.max_rel_err; // 0, or infinite
        if (r.max_rel_err >= res.max_rel_err) res = r;
    }
    return res;
}

double gradcheck_direction(GradFn f, Tensor **in, int n_in, void *ctx, Arena *a, double eps,
                           uint64_t seed) {
    real *grads[NODE_MAX_IN * 4] = {0};
    real *saved[NODE_MAX_IN * 4] = {0};
    CHECK(n_in <= NODE_MAX_IN * 4, "gradcheck: at most %d inputs", NODE_MAX_IN * 4);
    analytic(f, in, n_in, ctx, a, seed, grads);
    double gd = 0;
    uint64_t idx = 0;
    for (int k = 0; k < n_in; k++) {
        if (!grads[k]) continue;
        saved[k] = xmalloc(in[k]->size * sizeof(real));
        memcpy(saved[k], in[k]->data, in[k]->size * sizeof(real));
        for (size_t i = 0; i < in[k]->size; i++)
            gd += grads[k][i] * rng_normal(seed, STREAM_GRAD_DIRECTION, idx++);
    }
    double fx[2];
    for (int side = 0; side < 2; side++) {
        idx = 0;
        for (int k = 0; k < n_in; k++)
            for (size_t i = 0; grads[k] && i < in[k]->size; i++)
                in[k]->data[i] = saved[k][i] + (real)((side ? -eps : eps) *
                                                      rng_normal(seed, STREAM_GRAD_DIRECTION, idx++));
        fx[side] = project(f, in, ctx, a, seed);
    }
    for (int k = 0; k < n_in; k++) {
        if (!grads[k]) continue;
        memcpy(in[k]->data, saved[k], in[k]->size * sizeof(real));
        free(saved[k]);
        free(grads[k]);
    }
    double num = (fx[0] - fx[1]) / (2 * eps);
    return fabs(gd - num) / fmax(fmax(fabs(gd), fabs(num)), 1e-300);
}
