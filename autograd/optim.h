// optim.h: AdamW over the parameter store's flat buffers, with optional global gradient-norm
// clipping. DiT trains with lr 1e-4, betas (0.9, 0.999), no weight decay.
#pragma once
#include "params.h"

typedef struct AdamW {
    double lr, beta1, beta2, eps, weight_decay;
    double clip_norm; // clip the global gradient norm to this; 0 = no clipping
    int step;         // updates done so far
} AdamW;

AdamW adamw_default(double lr); // betas (0.9, 0.999), eps 1e-8, no decay, no clipping
// One update from the gradients (ps->slice) of a whole store; returns the gradient norm before clipping.
double adamw_step(AdamW *opt, ParamStore *ps);
// The two halves, for a store that is one of several (--zero, parallel/mesh/zero.c):
// The sum of squares of the gradients of the store's slice (ps->slice): a double sum, or
// under --exact (an exact store) added into *squares (1 element), an order-independent sum of
// the rounded squares, and 0 returned.
double adamw_squares(const ParamStore *ps, ExactSum *squares);
// The update of the store's pieces of the parameters and their moments, clipped by the global
// gradient norm `norm`.
void adamw_update_slice(AdamW *opt, ParamStore *ps, double norm);
// The EMA's decay for the update after optimizer step `step`: `target`, but at most
// (1 + step) / (10 + step), so that early on the average is not dominated by the initial weights.
double ema_decay(double target, int step);
