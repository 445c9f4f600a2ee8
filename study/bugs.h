// bugs.h: `train bugs`: the catalogue of injectable sequence-parallel bugs (parallel/layouts/inject.c's
// table), each reproduced on N ranks in the layout it lives in and compared with one rank, by its
// loss curve (the step verify flags it at) and by a probe (output and gradient errors); the
// correct code is the first row. Each config a bug needs (its further flags) gets its own 1-rank
// reference. --regimes adds the --exact probes, the bugs where they hide, the correct code in
// every layout, and the table of which other libraries' checks catch which bug (regimes.h).
// Runs outside mpirun; it starts mpirun itself.
#pragma once

int bugs_main(int argc, char **argv);
