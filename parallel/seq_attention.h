// seq_attention.h: the attention layouts by number (their names and table: layouts.c, sp.h), on
// their own so that the bug table (inject.c) can name a bug's layout without the rest of sp.h.
#pragma once

// SP_AUTO is --sp-attention auto, which training resolves (plan/plan.c) before sp_init
typedef enum { SP_GATHER, SP_ALL_TO_ALL, SP_RING, SP_HYBRID, SP_LAYOUTS, SP_AUTO = SP_LAYOUTS } SeqAttention;
