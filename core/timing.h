// timing.h: wall-clock time for progress lines (training, sampling): seconds on a monotonic clock,
// and a duration as people read it.
#pragma once
#include <stddef.h>

double now_seconds(void); // monotonic: only differences mean anything
// "42s", "3m05s" or "2h07m", into buf
const char *duration_text(double seconds, char *buf, size_t len);
