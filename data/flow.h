// flow.h: the training objective and the sampler: rectified flow (Liu et al. 2022, with the
// logit-normal timesteps of Esser et al. 2024). An image x0 and noise eps are joined by the
// straight path x_t = (1 - t) x0 + t eps, t in [0, 1]; the model predicts the velocity
// v = eps - x0 (MSE on v). Sampling integrates dx/dt = v from t = 1 (noise) to 0 with Euler steps,
// with classifier-free guidance on v. The DiT sees the timestep as 1000 t, the range of its
// integer DDPM timesteps, so its sinusoidal embedding is used as designed.
#pragma once
#include "../core/real.h"
#include <stddef.h>
#include <stdint.h>

#define FLOW_T_SCALE 1000.0

// t = sigmoid(z), z ~ N(0, 1) drawn at (seed, stream, index): most steps train the middle of the
// path, where the image takes shape.
double flow_sample_t(uint64_t seed, uint64_t stream, uint64_t index);
// xt = (1 - t) x0 + t eps and the target v = eps - x0, elementwise over n values; v may be eps
void flow_interpolate(real *xt, real *v, const real *x0, const real *eps, double t, size_t n);
// The k-th of `steps` uniform times from 1 (k = 0) down to 0 (k = steps).
double flow_time(int k, int steps);
