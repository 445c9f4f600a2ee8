// seq_attention.h: the attention layouts by number (their names and table: layouts.c, layouts.h), on
// their own so that the bug table (inject.c) can name a bug's layout without the rest of layouts.h.
#pragma once

// SP_LAYOUTS counts the built-in layouts; a build may add rows after them (layouts.c: the test
// build's), which sp_layouts() counts too. SP_AUTO is --sp-attention auto, which training
// resolves (plan/plan.c) before sp_init: no row's number.
typedef enum { SP_GATHER, SP_ALL_TO_ALL, SP_RING, SP_HYBRID, SP_LAYOUTS, SP_AUTO = 64 } SeqAttention;
#define SP_DEFAULT_LAYOUT SP_GATHER // --sp-attention's default
