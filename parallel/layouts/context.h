// context.h: the parallel context of one rank: its sequence group, its token shard, the attention
// layout, its data group, and the bugs injected on purpose. The ranks form a mesh: --sp N ranks
// per sequence group (default: all of them), ranks / N data groups, each training on its own slice
// of the global batch. Within a sequence group each rank holds the queries, keys and values of its
// own tokens, and every layout returns the local shard (B, n, D) again; parameter gradients are
// partial per rank and sp_sync_grads sums them over every rank (the loss is the mean over the
// global batch, so the sum is its gradient). With --grad-accum K a data group runs its images as K
// micro-batches, each loss divided by the same global element count (sp_loss_shard), so their
// gradients add up to the batch's.
// The layouts (layouts.h) read it; mesh/sp.c sets it up over the world. The types only: the
// context's functions live with the files that define them (one header each).
#pragma once
#include "../../layers/dit.h"
#include "../transport/comm.h"
#include "inject.h"
#include "policy.h"
#include "seq_attention.h"

#define EXACT_BLOCKS 12 // --exact's canonical blocks by default: 1, 2, 3, 4, 6 and 12 ranks divide it

// What the flags choose (sp.c)
typedef struct SpOptions {
    SeqPolicy policy;
    SeqAttention layout;
    int sp;         // ranks per sequence group (--sp); 0 = every rank, no data parallelism
    int ulysses;    // hybrid: ranks per all-to-all group (--ulysses-degree); 0 = not given
    int grad_accum; // micro-batches per optimizer step (--grad-accum, default 1)
    BugMask bugs;   // BUG_* injected on purpose
    bool cuda;      // --device cuda: tensors, parameters and kernels on the GPU
    bool tf32;      // --tf32: float32 GEMMs on TF32 tensor cores (cuda only)
    bool bf16;      // --precision bf16: the tapes' bf16 (autograd/tape.h, layers/precision.c)
    bool bf16_grads; // --grad-wire bf16: the attention's gradients travel in bf16 (tape.h)
    bool exact;     // --exact: the same bits for every rank count that divides virtual_shards
    int virtual_shards; // --virtual-shards: the canonical blocks V of --exact (default 12)
    bool packs;         // the rows are packs of images (--max-tokens): the pack bugs can show
    int pack_images;    // packs: the most images a row holds (the folder's), for the memory
                        // estimate of their captions; 0: as many as its tokens
    bool recompute;     // --recompute: keep each half block's input only, run it again in backward
    int zero;           // --zero: 1 = the Adam moments sharded over every rank (ZeRO stage 1), 2 =
                        // the gradients too (stage 2), 3 = the parameters too; 0 = whole
} SpOptions;

// The most groups a context splits from the world: the sequence group, the data group, and with
// the hybrid layout its head group and its ring
#define SP_MAX_GROUPS 4

typedef struct SeqParallel {
    Comm *comm;         // the sequence group (split from the world, even when it is all of it);
                        // NULL for a context that only sizes
    Comm *world;        // every rank: gradients are summed over it
    Comm *data;         // the ranks at this rank's place in every data group (NULL: one group)
    Comm *heads, *ring; // hybrid: this rank's all-to-all group and its ring
    SeqShard shard;     // this rank's tokens
    SeqAttention layout;
    int dp, dp_rank;    // data groups, and this rank's
    int ulysses;        // hybrid: ranks per head group (1 otherwise)
    int accum;          // micro-batches per step
    BugMask bugs;       // BUG_* injected on purpose
    bool cuda;          // the step runs on this rank's GPU (local rank mod the GPUs of its machine)
    bool nccl;          // and device buffers go over NCCL (every rank its own GPU); else host-staged
    bool exact;         // --exact: canonical blocks of T_pad / policy.exact_blocks tokens
    bool bf16;          // --precision bf16 (SpOptions')
    bool bf16_grads;    // --grad-wire bf16 (SpOptions')
    bool packs;         // the rows are packs: the adaLN vectors reach each token (arena bytes)
    int pack_images;    // packs: the most images a row holds (SpOptions')
    bool recompute;     // --recompute (DiTShard.recompute)
    uint8_t *key_mask_device; // cuda: the shard's key mask on the device (NULL without padding)
    int context;        // the tokens in front of every rank's sequence, which every rank holds
                        // (dit_front_tokens: in-context conditioning's, joint attention's
                        // caption); 0: none. The attention takes their count from its queries
                        // (with packs a row's captions, one for each of its images)
    bool joint;         // they are joint attention's caption, whose tensors the model keeps apart
                        // (no tensor of the shard's tokens has them in front, as in-context's do)
    int policy_blocks;  // --exact: the canonical blocks V of the sequence (0 otherwise)
    CommGather prefetch; // --zero 3: the next block's parameters on their way (zero.c)
    int prefetch_unit;   // its unit; 0: none (unit 0 is never a block)
    TapeWatch watch;    // a step's tapes are watched by this (probe --dump-tape); NULL: not
    void *watch_ctx;
    Comm groups[SP_MAX_GROUPS]; // split from the world, owned
    int n_groups;
} SeqParallel;
