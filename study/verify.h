// verify.h: `train verify --ranks N [training flags]`: trains the same run (same seed) with N
// ranks and with one rank, then compares the loss curves (compare.h). The one command that shows
// whether the sequence-parallel run reproduces the single-rank one. Runs outside mpirun; it
// starts mpirun itself.
#pragma once

int verify_main(int argc, char **argv);
