// formulas.h: the pieces of a training step and of a sampling step that no comparison between
// runs can check (runs of the same code agree with each other whatever the formula), each
// against its formula written out here in double: AdamW with weight decay and clipping (the
// learning rate's use included), the EMA update and its warm-up, and the sampler's guided Euler
// step. On the host (test_autograd.c, test_train.c) and on the device (test_cuda.c).
#pragma once
#include "../autograd/optim.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include "testutil.h"
#include <math.h>

// n reals from the doubles v, on the device or the host
static inline real *formula_buffer(const double *v, size_t n, bool device) {
    real *h = xmalloc(n * sizeof(real));
    for (size_t i = 0; i < n; i++) h[i] = (real)v[i];
    if (!device) return h;
    real *d = device_alloc(n * sizeof(real));
    copy_bytes(d, h, n * sizeof(real));
    free(h);
    return d;
}

// v (n) = buf (n), from wherever buf is
static inline void formula_read(double *v, const real *buf, size_t n) {
    real *h = xmalloc(n * sizeof(real));
    copy_bytes(h, buf, n * sizeof(real));
    for (size_t i = 0; i < n; i++) v[i] = h[i];
    free(h);
}

static inline void formula_free(real *buf, bool device) {
    if (device) device_free(buf);
    else free(buf);
}

// AdamW over three steps with weight decay, every one clipped (the norm is above clip_norm);
// then, from fresh moments and no decay, a first step moves each parameter by lr against its
// gradient's sign.
static inline void check_adamw_formula(bool device) {
    ParamStore ps = {0};
    ps_add(&ps, "w", 1, (int[]){3});
    ps_alloc(&ps, device, false);
    double p[3] = {0.5, -1.0, 2.0}, m[3] = {0}, v[3] = {0}, got[3];
    real pr[3], gr[3];
    for (int i = 0; i < 3; i++) pr[i] = (real)p[i];
    copy_bytes(ps.params, pr, sizeof pr);
    AdamW opt = adamw_default(0.1);
    opt.weight_decay = 0.01;
    opt.clip_norm = 1.0;
    for (int step = 1; step <= 3; step++) {
        double g[3] = {0.3 * step, -2.0, 0.01}, norm = 0;
        for (int i = 0; i < 3; i++) gr[i] = (real)g[i], norm += g[i] * g[i];
        copy_bytes(ps.grads, gr, sizeof gr);
        norm = sqrt(norm);
        double got_norm = adamw_step(&opt, &ps), s = norm > 1 ? 1 / norm : 1;
        ck_assert_double_eq_tol(got_norm, norm, 1e-6);
        copy_bytes(pr, ps.params, sizeof pr);
        for (int i = 0; i < 3; i++) {
            m[i] = 0.9 * m[i] + 0.1 * g[i] * s;
            v[i] = 0.999 * v[i] + 0.001 * g[i] * s * g[i] * s;
            double mh = m[i] / (1 - pow(0.9, step)), vh = v[i] / (1 - pow(0.999, step));
            p[i] -= 0.1 * (mh / (sqrt(vh) + 1e-8) + 0.01 * p[i]);
            got[i] = pr[i];
        }
        for (int i = 0; i < 3; i++)
            ck_assert_msg(fabs(got[i] - p[i]) <= 1e-5, "AdamW step %d, parameter %d: %.9g, formula %.9g%s",
                          step, i, got[i], p[i], device ? " (device)" : "");
    }
    AdamW fresh = adamw_default(0.01);
    real zero[3] = {0}, g4[3] = {-4, 0.5, 3};
    copy_bytes(ps.params, zero, sizeof zero);
    copy_bytes(ps.m, zero, sizeof zero);
    copy_bytes(ps.v, zero, sizeof zero);
    copy_bytes(ps.grads, g4, sizeof g4);
    adamw_step(&fresh, &ps);
    copy_bytes(pr, ps.params, sizeof pr);
    for (int i = 0; i < 3; i++) ck_assert_double_eq_tol(pr[i], g4[i] > 0 ? -0.01 : 0.01, 1e-6);
    ps_free(&ps);
}

// ema = decay ema + (1 - decay) params, at the decays of a run's warm-up (ema_decay) and after it
static inline void check_ema_formula(bool device) {
    ck_assert_double_eq_tol(ema_decay(0.9999, 1), 2.0 / 11, 1e-15); // (1 + step) / (10 + step)
    ck_assert_double_eq_tol(ema_decay(0.9999, 1000), 1001.0 / 1010, 1e-15);
    ck_assert_double_eq(ema_decay(0.5, 100), 0.5);
    enum { N = 5 };
    const double e0[N] = {1, -2, 0.5, 3, 0}, p[N] = {0.25, 4, -1, 3, 7};
    const double decays[] = {ema_decay(0.9999, 1), 0.9, 0.999};
    for (int k = 0; k < 3; k++) {
        double d = decays[k], got[N];
        real *e = formula_buffer(e0, N, device), *pb = formula_buffer(p, N, device);
        RUN(device, ema_update, e, pb, N, d);
        formula_read(got, e, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(fabs(got[i] - (d * e0[i] + (1 - d) * p[i])) <= 1e-6 * (1 + fabs(p[i])),
                          "ema_update%s, decay %g, element %d: %.9g, formula %.9g",
                          device ? " (device)" : "", d, i, got[i], d * e0[i] + (1 - d) * p[i]);
        formula_read(got, pb, N); // params untouched
        for (int i = 0; i < N; i++) ck_assert_double_eq(got[i], p[i]);
        formula_free(e, device), formula_free(pb, device);
    }
}

// The sampler's step: two images of 2 values, predictions of 3 values each (the third not a
// velocity), conditional first, then unconditional: x += dt (u + s (c - u)); and without
// guidance x += dt c
static inline void check_euler_formula(bool device) {
    const double x0[4] = {1, 2, 3, 4}, pred[12] = {1, 2, 9, 3, 4, 9, 0.5, 1, 9, -1, 2, 9};
    const double s = 3, dt = -0.5;
    for (int guided = 0; guided < 2; guided++) {
        double got[4];
        real *x = formula_buffer(x0, 4, device), *pr = formula_buffer(pred, 12, device);
        RUN(device, euler_step, x, pr, 2, 2, 3, guided, (real)s, dt);
        formula_read(got, x, 4);
        formula_free(x, device), formula_free(pr, device);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                double c = pred[3 * i + j], u = pred[3 * (2 + i) + j];
                double want = x0[2 * i + j] + dt * (guided ? u + s * (c - u) : c);
                ck_assert_msg(fabs(got[2 * i + j] - want) <= 1e-6, "euler_step%s%s [%d][%d]: %.9g, formula %.9g",
                              guided ? ", guided" : "", device ? " (device)" : "", i, j,
                              got[2 * i + j], want);
            }
    }
}
