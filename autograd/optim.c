// optim.c: see optim.h.
#include "optim.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include <math.h>

AdamW adamw_default(double lr) {
    return (AdamW){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

// the sum of squares of x (n), on the host or the device
static double squares(const real *x, size_t n, bool device) {
#ifdef USE_CUDA
    if (device) {
        static double *sum; // one value on the device, for the process
        if (!sum) sum = device_alloc(sizeof(double));
        double s;
        sum_squares_cuda(sum, x, n, 0);
        device_copy(&s, sum, sizeof s);
        return s;
    }
#endif
    return (void)device, sum_squares(x, n);
}

double adamw_step(AdamW *opt, ParamStore *ps) {
    double norm = sqrt(squares(ps->grads, ps->total, ps->device));
    double scale = (opt->clip_norm > 0 && norm > opt->clip_norm) ? opt->clip_norm / norm : 1;
    opt->step++;
    RUN(ps->device, adamw_update, ps->params, ps->grads, ps->m, ps->v, ps->total, (real)opt->lr,
        (real)opt->beta1, (real)opt->beta2, (real)opt->eps, (real)opt->weight_decay, (real)scale,
        opt->step);
    return norm;
}
