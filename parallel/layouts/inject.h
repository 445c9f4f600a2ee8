// inject.h: the classic sequence-parallel bugs, injected on purpose (--inject-bug) so that a
// comparison against one rank can be seen catching them. Each is a real code path of the layout,
// the data groups or the micro-batches it names; the bug mask alone decides. One row each in
// inject.c's table; `train bugs` runs them all.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// A set of bugs: one bit each, room for 64 (the table's count is BUG_COUNT, checked against it)
typedef uint64_t BugMask;
#define BUG_BIT(i) ((BugMask)1 << (i))
#define BUG_LOCAL_KV BUG_BIT(0)              // gather: attend only to local keys (no gather)
#define BUG_NO_DKV_REDUCE_SCATTER BUG_BIT(1) // gather: keep only the local part of dK/dV
#define BUG_NO_GRAD_ALLREDUCE BUG_BIT(2)     // any: parameter gradients stay per-rank partial sums
#define BUG_NO_PAD_MASK BUG_BIT(3)           // any: padded keys take part in attention
#define BUG_WRONG_RESTORE BUG_BIT(4)         // gather: output taken from the wrong rows
#define BUG_RING_WRONG_MERGE BUG_BIT(5)      // ring: partial outputs averaged, not merged by log-sum-exp
#define BUG_RING_DKV_NOT_RETURNED BUG_BIT(6) // ring: dK/dV kept where computed, not sent to the owner
#define BUG_NO_DP_ALLREDUCE BUG_BIT(7)       // data parallel: gradients summed in the sequence group only
#define BUG_SAME_DATA_ALL_DP BUG_BIT(8)      // data parallel: every data group trains on the first slice
#define BUG_RING_STALE_KV BUG_BIT(9)         // ring: backward recomputes against the local K/V every step
#define BUG_RING_BLOCK_DELTA BUG_BIT(10)     // ring: backward's row term from a block's partial output
#define BUG_ACCUM_UNWEIGHTED BUG_BIT(11)     // --grad-accum: each micro-batch's mean weighted 1/K
#define BUG_LOCAL_MEAN_LOSS BUG_BIT(12)      // any: each rank's loss the mean over its own real tokens
#define BUG_LOSS_TIMES_SP BUG_BIT(13)        // any: the logged loss the sum of the ranks' local means
#define BUG_SHARD_POS_EMBED BUG_BIT(14)      // any: every rank adds the position embeddings of shard 0
#define BUG_PAD_MASK_OFF_BY_ONE BUG_BIT(15)  // any: each shard's key mask from its local length, one
                                    // padded key too many let through
#define BUG_LSE_OVERFLOW BUG_BIT(16)         // ring: blocks merged by log(e^L1 + e^L2), no max subtracted
#define BUG_ULYSSES_REPLICATED_KV BUG_BIT(17) // all-to-all: the in-context tokens' K/V, which every rank
                                     // holds, exchanged again: counted P times
#define BUG_JOINT_TEXT_REPLICATED BUG_BIT(18) // all-to-all, --text-attn joint: the caption, which every
                                     // rank holds, exchanged with the image shard: P copies
#define BUG_RING_TEXT_EVERY_STEP BUG_BIT(19) // ring, --text-attn joint: the caption's K/V attended with
                                    // every visiting block, P times
#define BUG_PACK_MASK_CROSSES BUG_BIT(20)    // packs: images of a pack attend to each other
#define BUG_PACK_POSITIONS_FROM_SHARD BUG_BIT(21) // packs: positions restart at each shard
#define BUG_ROPE_LOCAL_POSITIONS BUG_BIT(22) // --pos rope: each shard's rotary positions start at 0
#define BUG_ROPE_PACK_POSITIONS BUG_BIT(23)  // --pos rope, packs: positions run on across the images
#define BUG_KNORM_GRAD_EARLY BUG_BIT(24)     // all-to-all, QK-norm: the k-norm's backward takes the key
                                    // gradient before the reverse exchange returned it
#define BUG_QK_NORM_HEAD_SHARD BUG_BIT(25)   // all-to-all, --qk-norm full: the norm over a rank's heads
#define BUG_TEXT_GRAD_UNSUMMED BUG_BIT(26)   // --cond text: the text encoder's gradients not summed over
                                    // the sequence group (each rank keeps its tokens' share)
#define BUG_ZERO_OUTER_UNSUMMED BUG_BIT(27)  // --zero 2, 3: only the blocks' gradients reduce-scattered;
                                    // the embeddings' and the final layer's keep each rank's share
#define BUG_ZERO_GRAD_AVERAGED BUG_BIT(28)   // --zero: the summed gradients divided by the ranks, as a
                                    // data-parallel average, though the loss is the global mean
#define BUG_CROSS_KV_ALL_TO_ALL BUG_BIT(29)  // all-to-all, --cond text: the caption's cross-attention
                                    // K/V, which every rank holds, exchanged with the queries:
                                    // P copies of the caption in every head shard
#define BUG_RING_DKV_AGAINST BUG_BIT(30)  // ring: the dK/dV sums travel the ring the way the K/V
                                    // blocks came, against their blocks: from 3 ranks on each adds
                                    // another block's share
#define BUG_COUNT 31 // the bits above, and the rows of inject.c's table (a static assert there)

// What a bug needs of a run besides its layout, to be a real code path (NEED_*): each has one
// sentence in inject.c's table of needs, which the refusals, --help and the catalogue all read
enum {
    NEED_DATA_PARALLEL = 1 << 0, // data groups: --sp below the ranks
    NEED_MICRO_BATCHES = 1 << 1, // --grad-accum 2 or more
    NEED_PACKS = 1 << 2,         // packs of images (--max-tokens)
    NEED_TEXT = 1 << 3,          // --cond text
    NEED_JOINT = 1 << 4,         // --cond text --text-attn joint
    NEED_IN_CONTEXT = 1 << 5,    // --in-context
    NEED_ROPE = 1 << 6,          // --pos rope
    NEED_QK_NORM = 1 << 7,       // --qk-norm head or full
    NEED_QK_FULL = 1 << 8,       // --qk-norm full
    NEED_HEADS_DIVIDE = 1 << 9,  // a head count the ranks of a sequence group divide
    NEED_ZERO = 1 << 10,         // --zero 1 to 3
    NEED_ZERO_GRADS = 1 << 11,   // --zero 2 or 3
    NEED_RING_OF_3 = 1 << 12,    // 3 ranks or more round the ring
    NEEDS = 13                   // the count
};
enum { BUG_ANY_LAYOUT = -1 };
typedef struct BugInfo { // a row of the bug table
    const char *name;
    BugMask flag;
    int layout;         // the SeqAttention whose code path it is (the ring's runs in hybrid too),
                        // or BUG_ANY_LAYOUT
    unsigned needs;     // NEED_*: what else it needs of a run
    const char *does;   // what the code then does, a phrase after "the NAME bug" (refusals)
    const char *report; // the public report it reproduces; NULL: one of this project's own
    const char *flags;  // the further training flags the catalogue gives it to show ("" if none)
    const char *hides;  // flags under which it hides, in place of `flags` (T divisible by P, small
                        // logits): a test that runs only those misses it; NULL: none
    bool exact_only;    // right in exact arithmetic, only its rounding differs: within every
                        // tolerance, so the catch expected is --exact's alone
} BugInfo;
const BugInfo *bug_info(int i);           // row i of the table; NULL past its end
BugMask bug_from_name(const char *name);  // a bug's flag from its name; 0 if unknown
const char *bug_names(void);              // for error messages
// The names of the bugs in a set, comma-separated, or "none", into buf.
const char *bug_list(BugMask bugs, char *buf, size_t len);
typedef struct BugNeed { // a row of the needs' table
    unsigned need;           // NEED_*
    const char *where, *fix; // in --help ("--max-tokens"); a refusal's fix when a run lacks it,
                             // a format given the ranks of a sequence group twice
} BugNeed;
const BugNeed *bug_need(int k); // row k of the needs' table (k < NEEDS); NULL past its end
