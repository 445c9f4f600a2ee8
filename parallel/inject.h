// inject.h: the classic sequence-parallel bugs, injected on purpose (--inject-bug) so that a
// comparison against one rank can be seen catching them. Each is a real code path of the layout,
// the data groups or the micro-batches it names; the bug mask alone decides. One row each in
// inject.c's table; `train bugs` runs them all.
#pragma once
#include <stddef.h>

enum {
    BUG_LOCAL_KV = 1 << 0,              // gather: attend only to local keys (no gather)
    BUG_NO_DKV_REDUCE_SCATTER = 1 << 1, // gather: keep only the local part of dK/dV
    BUG_NO_GRAD_ALLREDUCE = 1 << 2,     // any: parameter gradients stay per-rank partial sums
    BUG_NO_PAD_MASK = 1 << 3,           // any: padded keys take part in attention
    BUG_WRONG_RESTORE = 1 << 4,         // gather: output taken from the wrong rows
    BUG_RING_WRONG_MERGE = 1 << 5,      // ring: partial outputs averaged, not merged by log-sum-exp
    BUG_RING_DKV_NOT_RETURNED = 1 << 6, // ring: dK/dV kept where computed, not sent to the owner
    BUG_NO_DP_ALLREDUCE = 1 << 7,       // data parallel: gradients summed in the sequence group only
    BUG_SAME_DATA_ALL_DP = 1 << 8,      // data parallel: every data group trains on the first slice
    BUG_RING_STALE_KV = 1 << 9,         // ring: backward recomputes against the local K/V every step
    BUG_RING_BLOCK_DELTA = 1 << 10,     // ring: backward's row term from a block's partial output
    BUG_ACCUM_UNWEIGHTED = 1 << 11,     // --grad-accum: each micro-batch's mean weighted 1/K
    BUG_LOCAL_MEAN_LOSS = 1 << 12,      // any: each rank's loss the mean over its own real tokens
    BUG_LOSS_TIMES_SP = 1 << 13,        // any: the logged loss the sum of the ranks' local means
    BUG_SHARD_POS_EMBED = 1 << 14,      // any: every rank adds the position embeddings of shard 0
    BUG_PAD_MASK_OFF_BY_ONE = 1 << 15,  // any: each shard's key mask from its local length, one
                                        // padded key too many let through
    BUG_LSE_OVERFLOW = 1 << 16,         // ring: blocks merged by log(e^L1 + e^L2), no max subtracted
    BUG_ULYSSES_REPLICATED_KV = 1 << 17, // all-to-all: the in-context tokens' K/V, which every rank
                                         // holds, exchanged again: counted P times
    BUG_JOINT_TEXT_REPLICATED = 1 << 18, // all-to-all, --text-attn joint: the caption, which every
                                         // rank holds, exchanged with the image shard: P copies
    BUG_RING_TEXT_EVERY_STEP = 1 << 19, // ring, --text-attn joint: the caption's K/V attended with
                                        // every visiting block, P times
    BUG_PACK_MASK_CROSSES = 1 << 20,    // packs: images of a pack attend to each other
    BUG_PACK_POSITIONS_FROM_SHARD = 1 << 21, // packs: positions restart at each shard
    BUG_ROPE_LOCAL_POSITIONS = 1 << 22, // --pos rope: each shard's rotary positions start at 0
    BUG_ROPE_PACK_POSITIONS = 1 << 23,  // --pos rope, packs: positions run on across the images
    BUG_KNORM_GRAD_EARLY = 1 << 24,     // all-to-all, QK-norm: the k-norm's backward takes the key
                                        // gradient before the reverse exchange returned it
    BUG_QK_NORM_HEAD_SHARD = 1 << 25,   // all-to-all, --qk-norm full: the norm over a rank's heads
    BUG_TEXT_GRAD_UNSUMMED = 1 << 26,   // --cond text: the text encoder's gradients not summed over
                                        // the sequence group (each rank keeps its tokens' share)
    BUG_ZERO_OUTER_UNSUMMED = 1 << 27,  // --zero 2, 3: only the blocks' gradients reduce-scattered;
                                        // the embeddings' and the final layer's keep each rank's share
    BUG_ZERO_GRAD_AVERAGED = 1 << 28,   // --zero: the summed gradients divided by the ranks, as a
                                        // data-parallel average, though the loss is the global mean
    BUG_CROSS_KV_ALL_TO_ALL = 1 << 29,  // all-to-all, --cond text: the caption's cross-attention
                                        // K/V, which every rank holds, exchanged with the queries:
                                        // P copies of the caption in every head shard
};
// The bugs that are right in exact arithmetic, only their rounding differing: within every
// tolerance, so that only a bit-for-bit check (--exact) sees them
enum { BUGS_ROUNDING = BUG_CROSS_KV_ALL_TO_ALL };
enum { BUG_ANY_LAYOUT = -1, BUG_DATA_PARALLEL = -2, BUG_MICRO_BATCHES = -3, BUG_PACKS = -4 };
typedef struct BugInfo { // a row of the bug table
    const char *name;
    unsigned flag;
    int layout;         // the SeqAttention whose code path it is, BUG_ANY_LAYOUT,
                        // BUG_DATA_PARALLEL (any layout with data groups) or BUG_MICRO_BATCHES
                        // (any layout with --grad-accum 2 or more) or BUG_PACKS (any layout
                        // over packs of images: --max-tokens)
    const char *report; // the public report it reproduces; NULL: one of this project's own
    const char *flags;  // the further training flags it needs to show ("" if none)
    const char *hides;  // flags under which it hides, in place of `flags` (T divisible by P, small
                        // logits): a test that runs only those misses it; NULL: none
} BugInfo;
const BugInfo *bug_info(int i);           // row i of the table; NULL past its end
unsigned bug_from_name(const char *name); // a bug's flag from its name; 0 if unknown
const char *bug_names(void);              // for --help and error messages
// The names of the bugs in a set, comma-separated, or "none", into buf.
const char *bug_list(unsigned bugs, char *buf, size_t len);
