// identical.h: `verify --exact`'s check: two runs the same to the last bit.
#pragma once

// Compares run folders a and b bit for bit: every logged loss of loss.csv, and every value of
// every tensor of model.safetensors, ema.safetensors and optimizer.safetensors (the files a
// holds). Prints "identical: 0 of N values differ", or the first differing step or tensor and
// how many values differ. 0 identical, 1 different, 2 when a file cannot be read or the files
// hold different tensors.
int runs_identical(const char *a, const char *b);
