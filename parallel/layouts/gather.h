// gather.h: the gather layout (gather.c): K and V all-gathered along the sequence; its row.
#pragma once
#include "row.h"

extern const SpLayout sp_gather;
