// gradchecked.h: every op that has a gradient check, and where. Central differences in
// tests/test_ops.c (a row of its table whose name starts with the op's name; that file fails when
// a name here has no row), or adjoint tests under mpirun in tests/mpi/test_parallel.c (the
// collectives). The tape-walk test in test_parallel.c fails when a DiT step of any layout or
// injected bug records an op missing here.
#pragma once
#include <stdbool.h>
#include <string.h>

static const char *const gradchecked_ops[] = {
    "linear", "patchify", "unpatchify", "add", "gelu", "silu", "layernorm", "modulate",
    "gated_add", "embedding", "timestep_embedding", "attention", "slice_last", "concat_last", "mse_loss",
    "qk_norm_rope", "layernorm_modulate",
};
static const char *const adjoint_checked_ops[] = {"seq_all_gather", "seq_reduce_scatter",
                                                  "seq_all_to_all"};
// checked under mpirun: the ring against the single-rank model's gradients (its own backward over
// the ring, built from the fused kernel that tests/test_attention.c checks by central
// differences); --recompute's half blocks against their own ops, bit for bit (recompute_is_bitwise)
static const char *const parallel_checked_ops[] = {"ring_attention", "half block (recomputed)"};
// --precision bf16's rounding, whose gradient is taken as 1 (tests/test_precision.c)
static const char *const passthrough_ops[] = {"bf16"};

static inline bool has_gradient_check(const char *op) {
    for (size_t i = 0; i < sizeof gradchecked_ops / sizeof *gradchecked_ops; i++)
        if (!strcmp(op, gradchecked_ops[i])) return true;
    for (size_t i = 0; i < sizeof adjoint_checked_ops / sizeof *adjoint_checked_ops; i++)
        if (!strcmp(op, adjoint_checked_ops[i])) return true;
    for (size_t i = 0; i < sizeof parallel_checked_ops / sizeof *parallel_checked_ops; i++)
        if (!strcmp(op, parallel_checked_ops[i])) return true;
    for (size_t i = 0; i < sizeof passthrough_ops / sizeof *passthrough_ops; i++)
        if (!strcmp(op, passthrough_ops[i])) return true;
    return false;
}
