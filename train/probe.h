// probe.h: `train probe`: one forward and backward of mean((model(x, t, y) - target)^2) with a
// checkpoint's weights on a given batch, written out for comparison with other implementations
// and with other rank counts. The result is the same for every number of ranks.
#pragma once
#include "../parallel/comm.h"

int probe_main(int argc, char **argv, Comm *c);
