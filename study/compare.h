// compare.h: `train compare A B`: two training runs (folders with loss.csv) by their loss curves,
// or two probe results (.safetensors) tensor by tensor. Prints the largest relative difference
// and where it first exceeds the tolerance, writes a plot for runs, and exits 0 when within
// tolerance, 1 otherwise (2 for usage errors).
#pragma once
#include <stdbool.h>
#include <stddef.h>

// Default tolerance of the per-step relative loss difference between two runs.
// A correct run differs from one rank by float rounding only: ~5e-7 over 1000 steps of the demo.
#define COMPARE_LOSS_TOL 1e-5
// Under --precision bf16 a rank count sums in another order, and a value that rounds to another
// bf16 value sets the runs apart: 2 ranks against 1 over 300 steps of the default model differed
// by up to 8.3e-3 (gather), 6.4e-3 (all-to-all), 6.2e-3 (ring) and 8.5e-3 (hybrid, 4 ranks)
// (docs/precision.md); verify's default for bf16 runs, about twice the largest
#define COMPARE_BF16_LOSS_TOL 2e-2

// Default tolerances of probe results (||a - b|| / ||b||): output and loss, and gradients; the
// float64 build is held to rounding of its own precision.
#ifdef REAL_F64
#define PROBE_OUT_TOL 1e-10
#define PROBE_GRAD_TOL 1e-10
#else
#define PROBE_OUT_TOL 1e-5
#define PROBE_GRAD_TOL 1e-4
#endif

// verify's tape check under --precision bf16: a value whose float sums differ in the last bit
// between rank counts (the ring's merged output) may round to the other bf16 neighbour, 2^-8 of
// it, and --grad-wire bf16 rounds the gradients an N-rank run sends (one rank sends none). 2
// to 4 ranks against 1 in every layout (the default model, 300 steps, docs/precision.md): worst
// forward tensor 9.8e-5 (ring, 2 ranks), worst gradient 4.8e-7 with the float wire and 2.7e-3
// with the bf16 wire; about 10x and 4x those
#define PROBE_BF16_OUT_TOL 1e-3
#define PROBE_BF16_GRAD_TOL 1e-2

// What our default check allows a run of either precision: verify's loss curves and tape check,
// compare's default for two runs, the bugs catalogue and the regimes' "ours" column take their
// bounds from here
typedef struct OurBounds {
    double loss, out, grad; // the loss curve's per-step relative difference; one step's forward
                            // tensors' and gradients' ||a - b|| / ||b||
} OurBounds;
static inline OurBounds our_bounds(bool bf16) {
    return bf16 ? (OurBounds){COMPARE_BF16_LOSS_TOL, PROBE_BF16_OUT_TOL, PROBE_BF16_GRAD_TOL}
                : (OurBounds){COMPARE_LOSS_TOL, PROBE_OUT_TOL, PROBE_GRAD_TOL};
}

int compare_main(int argc, char **argv);
// Two probe results: the relative error of 'out' and the worst of the 'grad.*' tensors (a missing
// or reshaped tensor is an infinite error); -1 with a message when a file cannot be read.
int compare_probe_errors(const char *a, const char *b, double *out_err, double *grad_err, char *err,
                         size_t len);
// The run comparison used by compare_main and verify: 0 within tolerance, 1 otherwise.
int compare_runs(const char *a, const char *b, double tol, const char *plot, const char *label_a,
                 const char *label_b);
