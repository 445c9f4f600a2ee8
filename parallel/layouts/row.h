// row.h: what a layout is: its row (SpLayout), which its own file defines and layouts.c's table
// lists, and what it sends in one attention layer (SpTraffic).
#pragma once
#include "context.h"

// What one attention layer of a layout sends (SpLayout's traffic; sp_layer_traffic, layouts.h)
typedef struct SpTraffic {
    double values, messages;
} SpTraffic;
// A layout is a row: everything the rest of the code asks of a layout is a member here, and no code
// outside the layouts' own files and their table (layouts.c) branches on which layout it is
// (tests/layering.py counts such sites). A NULL function or a false flag is the default.
typedef struct SpLayout {
    const char *name;
    const char *does; // in --help: "all-gather K/V"
    // NULL if `heads` heads can run over a sequence group of P ranks; else the sentence
    const char *(*validate)(const SpOptions *o, int heads, int P, char *buf, size_t len);
    // arena bytes of a step (dit_step_bytes with the queries and keys one layer's attention has)
    size_t (*step_bytes)(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);
    SpTraffic (*traffic)(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);
    AttendFn attend; // ctx is the SeqParallel
    // The ranks whose shards' queries a rank attends for its heads (all-to-all: the group; hybrid:
    // its head group); NULL: 1, its own shard
    int (*head_group)(const SeqParallel *sp);
    // The --ulysses-degree values a mesh of P ranks can take (hybrid: each divisor strictly between
    // 1 and P), into U (room for max); their count. NULL: the layout takes none
    int (*degrees)(int P, int *U, int max);
    bool overlaps;           // its transfers run during the attention, a block a step (the ring)
    bool reduce_scatters_kv; // its backward reduce-scatters dK and dV of the gathered keys (gather)
    bool ring_path;          // it runs ring attention (ring.c): the ring's bugs live in it too
    bool in_context;         // it runs in-context conditioning's tokens
} SpLayout;
