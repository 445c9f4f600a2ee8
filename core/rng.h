// rng.h: counter-based random numbers (Philox4x32-10). Every value is a pure function of
// (seed, stream, index): no state, no dependence on call order or on the number of ranks.
// Streams separate uses (weights of each tensor, data, timesteps, noise, ...).
#pragma once
#include "real.h"
#include <stddef.h>
#include <stdint.h>

// Every use draws from streams of its own, disjoint by construction: the named streams are small
// numbers, and parameter tensor i of a model draws from STREAM_PARAM(i), at 2^32 and above, with
// room for 2^32 tensors. tests/test_core.c checks this for the largest model the flags allow.
enum {
    STREAM_PICK = 1,        // which image of a folder an item is (data/data.c)
    STREAM_T,               // an item's flow time
    STREAM_NOISE,           // an item's noise
    STREAM_DROP,            // an item's label dropout
    STREAM_SAMPLE,          // the starting noise of samples
    STREAM_SHAPE_LABEL,     // a procedural shape's class (data/shapes.c)
    STREAM_SHAPE_GEOM,      // its geometry and colours
    STREAM_GRAD_PROJECTION, // the gradient checker's random projection (autograd/gradcheck.c)
    STREAM_GRAD_DIRECTION,  // its random direction
    STREAM_GRAD_PREFILL,    // its random starting gradients
    STREAM_PACK,            // the further images of a pack (data/data.c, --max-tokens)
    STREAM_SHAPE_MOTION,    // a moving shape's motion across a clip's frames (data/shapes.c)
    STREAM_NAMED_END,       // the first number no named stream uses
};
#define STREAM_PARAM(i) (((uint64_t)1 << 32) + (uint64_t)(i))
#define STREAM_PARAM_MAX ((uint64_t)1 << 32) // parameter tensors a model may have

void philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); // in (0, 1)
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);  // N(0, 1), Box-Muller

// x[i] = value at index offset + i, for i in [0, n)
void rng_fill_uniform(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset, double lo,
                      double hi);
void rng_fill_normal(real *x, size_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                     double std);
