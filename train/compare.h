// compare.h: `train compare A B`: two training runs (folders with loss.csv) by their loss curves,
// or two probe results (.safetensors) tensor by tensor. Prints the largest relative difference
// and where it first exceeds the tolerance, writes a plot for runs, and exits 0 when within
// tolerance, 1 otherwise (2 for usage errors).
#pragma once

// Default tolerance of the per-step relative loss difference between two runs.
// A correct run differs from one rank by float rounding only: ~5e-7 over 1000 steps of the demo.
#define COMPARE_LOSS_TOL 1e-5

int compare_main(int argc, char **argv, int rank);
// The run comparison used by compare_main and verify: 0 within tolerance, 1 otherwise.
int compare_runs(const char *a, const char *b, double tol, const char *plot, const char *label_a,
                 const char *label_b);
