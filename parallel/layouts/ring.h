// ring.h: ring attention (ring.c): K/V blocks travel the ring, merged by log-sum-exp; its row.
#pragma once
#include "row.h"

extern const SpLayout sp_ring;
// Ring attention (ring.c) of q, k, v (B, front + n, D) over the ring `c`: rank r's block is the
// tokens [r n, (r + 1) n) of `key_mask` (all tokens; NULL: none masked) and of the image ids `seg`
// (B, P n) of a pack (NULL: none). The `front` tokens before them are every rank's own (joint
// attention's caption; seg then its joint images, kernels/segments.h): their queries go round the
// ring with the block's, their keys are attended once, with the rank's own block, and never sent.
// The ring-* bugs apply.
Tensor *ring_attention(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                       const uint8_t *key_mask, const int32_t *seg, int front, BugMask bugs);
