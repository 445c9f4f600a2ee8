// hybrid.h: the hybrid layout (USP, hybrid.c): all-to-all in head groups, the ring across them; its row.
#pragma once
#include "row.h"

extern const SpLayout sp_hybrid;
