// regimes.h: `train bugs --regimes`: which bugs the field's own tests would let through. Each
// regime is the comparison against one device that a library's own test files make (the same
// tensors, the same torch.allclose tolerances), applied to the catalogue's runs of every bug: the
// N-rank probe, its tape (probe --dump-tape: attention outputs and the gradients of q, k and v),
// its loss curve and its --exact probe, each against the 1-rank reference's. The result is a
// table with one row per run (each bug, each bug where it hides, the correct code in each layout)
// and one column per regime, each cell caught or missed, with every measured error beside it: DIR/regimes.md, DIR/regimes.csv (what tests/regimes_check.sh
// recomputes the cells from) and DIR/regimes.png (a heat map).
#pragma once
#include <stdbool.h>
#include <stddef.h>

// The files of a run folder the regimes read, beside loss.csv: the probe, its tape, and the
// same in exact mode
#define REGIMES_PROBE "probe.safetensors"
#define REGIMES_TAPE "tape.safetensors"
#define REGIMES_EXACT_PROBE "exact-probe.safetensors"
#define REGIMES_EXACT_TAPE "exact-tape.safetensors"

enum { REGIMES_CHECKS = 19 }; // the rows of regimes.c's table of checks

typedef struct RegimeRow {
    char name[160];             // the bug and where it hides, or the correct code and its layout
    char flags[128];            // what the N-rank runs were given: layout and further flags (a
                                // correct run's and a bug's in the same layout are the same)
    bool bug, hidden;           // a bug (else the correct code); run where it hides (bug->hides)
    bool rounding;              // a bug right in exact arithmetic (bug->rounding)
    bool bf16;                  // the runs' --precision bf16: "ours" takes verify's bf16 bounds
    double err[REGIMES_CHECKS]; // each check's measured error; -1: not measured (no tape)
} RegimeRow;

// Check k's name in the CSV, "REGIME/WHAT" ("forward-only/attn.out"), into buf
const char *regimes_check_name(int k, char *buf, size_t len);
// Measures every check for the run in folder dir against the reference in ref_dir (the files
// above and loss.csv in each; `tape`: whether the runs wrote tapes). A file that cannot be read is
// a fatal error: the catalogue has just written them.
void regimes_measure(RegimeRow *r, const char *dir, const char *ref_dir, bool tape);
// Prints the verdict table and writes DIR/regimes.md, .csv and .png; -1 with a message in err
int regimes_write(const RegimeRow *rows, int n, int ranks, int steps, const char *dir, char *err, size_t len);
