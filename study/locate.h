// locate.h: `train locate A B`: where two dumps of one step (probe --dump-tape) part. Tensors are
// compared in execution order (forward, then backward): bit for bit when both dumps are --exact,
// else by ||a - b|| / ||b|| over the whole tensor (||a - b|| where b is all zeros: compare's rule
// for probe results) beyond a tolerance (PROBE_OUT_TOL forward, PROBE_GRAD_TOL for gradients). The
// first that differs is named with its block and op, the token range where it differs and the ranks
// that own those tokens in each dump's layout, the size of the difference, and how many later
// tensors differ too. Tape order is the "NNNN " prefix of the names (names without one come
// last); a tensor one tape lacks is counted and named in the verdict, the others compared. Owning
// ranks: the metadata's "shards" (each rank's token runs, "0-13,13-25", written by
// python/ditsp_tape.py), else rank r holds [r T_pad/P, (r+1) T_pad/P).
#pragma once
#include <stdbool.h>
#include <stddef.h>

int locate_main(int argc, char **argv);

// What every tensor of two dumps says: how many were compared and how many differ (beyond their
// tolerance, or under --exact in any bit), and the worst: the tensor whose ||a - b|| / ||b|| is
// largest for its tolerance (under --exact, the largest among those that differ), described as
// "grad.blocks.3.attn.v (backward, block 3, op attn.v)", its error and its tolerance (0: bit for bit)
typedef struct TapeSummary {
    int tensors, over;
    bool exact;
    char worst[256];
    double worst_err, worst_tol;
} TapeSummary;

// The verdict for dumps a and b into buf (one line); 0 the same, 1 parted, -1 on a read error
// (the message in buf). tol and grad_tol, the values' and the gradients' (0: the probe's
// tolerances, above). With sum, what every tensor says.
int locate_dumps(const char *a, const char *b, double tol, double grad_tol, char *buf, size_t len, TapeSummary *sum);
