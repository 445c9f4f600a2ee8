// rng.h: counter-based random numbers (Philox4x32-10). Every value is a pure function of
// (seed, stream, index): no state, no dependence on call order or on the number of ranks.
// Streams separate uses (weights of each tensor, data, timesteps, noise, ...).
#pragma once
#include "real.h"
#include <stddef.h>
#include <stdint.h>

void philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); // in (0, 1)
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);  // N(0, 1), Box-Muller

// x[i] = value at index offset + i, for i in [0, n)
void rng_fill_uniform(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset, double lo,
                      double hi);
void rng_fill_normal(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                     double std);
