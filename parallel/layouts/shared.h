// shared.h: what every layout's attention takes from the context: the key masks (host and
// device, with the tokens in front), a pack's images and segments, and the pass it runs.
#pragma once
#include "context.h"

// --exact: sums over the sequence group (ctx the SeqParallel), every rank getting them
void sp_sum_group(ExactSum *s, void *ctx);
// The reals an attention input's value (Q, K, V) takes on the wire: 1, or under --precision bf16
// its 2 bytes' share of a real (the traffic formulas)
double sp_wire(const SeqParallel *sp);
// The same for their gradients (dQ, dK, dV, the output's): 1, or under --grad-wire bf16 sp_wire's
double sp_grad_wire(const SeqParallel *sp);
// What a step with (or without) backward runs (dit_step_bytes): DIT_RECOMPUTE for a backward under
// --recompute; under --precision bf16, --exact as the run's
DiTStep sp_step(const SeqParallel *sp, bool backward);
// The key mask of all T_pad tokens (NULL under the no-pad-mask bug), on the device with cuda.
const uint8_t *sp_key_mask(const SeqParallel *sp);
// The images of a pack's tokens for the attention: seg (B, T_pad) as the layout got it, or NULL
// under the pack-mask-crosses-images bug (the block-diagonal mask dropped)
const int32_t *sp_images(const SeqParallel *sp, const int32_t *seg);
// Joint attention's images ids (AttendFn) of B rows, R caption tokens each; under the
// pack-mask-crosses-images bug as if each row held one image: every caption's words and every image
// token seen by every query (in a's host side)
const int32_t *sp_joint_images(Arena *a, const SeqParallel *sp, const int32_t *ids, int B, int R);
// Segments (kernels/segments.h) of seg as sp_images gives it, for queries from token q0 and keys
// from token k0 of the padded sequence
Segments sp_segments(const SeqParallel *sp, const int32_t *seg, int q0, int k0);
// The shard's key mask of all T_pad tokens on the host (NULL under the no-pad-mask bug); and the
// key mask of R tokens in front (in-context, joint), then all T_pad tokens, in a's host side
const uint8_t *sp_host_key_mask(const SeqParallel *sp);
const uint8_t *sp_front_mask(Arena *a, const SeqParallel *sp, int R);
