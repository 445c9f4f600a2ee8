// optim.c: see optim.h.
#include "optim.h"
#include "../kernels/run.h"
#include <math.h>

AdamW adamw_default(double lr) {
    return (AdamW){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

double adamw_step(AdamW *opt, ParamStore *ps) {
    double norm = sqrt(RUN(ps->device, sum_squares, ps->grads, ps->total));
    double scale = (opt->clip_norm > 0 && norm > opt->clip_norm) ? opt->clip_norm / norm : 1;
    opt->step++;
    RUN(ps->device, adamw_update, ps->params, ps->grads, ps->m, ps->v, ps->total, (real)opt->lr,
        (real)opt->beta1, (real)opt->beta2, (real)opt->eps, (real)opt->weight_decay, (real)scale,
        opt->step);
    return norm;
}

double ema_decay(double target, int step) { return fmin(target, (1.0 + step) / (10.0 + step)); }
