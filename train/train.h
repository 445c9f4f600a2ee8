// train.h: the `train` program's training run: config and flags, toy or folder data, the
// rectified-flow objective, AdamW (+ optional EMA), sequence-parallel steps over MPI ranks,
// progress lines, loss.csv, checkpoints, sample grids and the loss plot.
#pragma once
#include "../parallel/transport/comm.h"
#include "../run/config.h"

int train_main(int argc, char **argv, Comm *c);
