// sp.h: the parallel context of one rank: its sequence group, its token shard, the attention
// layout, its data group, and the bugs injected on purpose. The ranks form a mesh: --sp N ranks
// per sequence group (default: all of them), ranks / N data groups, each training on its own slice
// of the global batch. Within a sequence group each rank holds the queries, keys and values of its
// own tokens, and every layout returns the local shard (B, n, D) again; parameter gradients are
// partial per rank and sp_sync_grads sums them over every rank (the loss is the mean over the
// global batch, so the sum is its gradient). With --grad-accum K a data group runs its images as K
// micro-batches, each loss divided by the same global element count (sp_loss_shard), so their
// gradients add up to the batch's. The layouts (one file each, one row each in layouts.c's table):
//  - gather (gather.c, default): K and V are all-gathered along the sequence, so local queries
//    attend to all T_pad keys (padded keys masked). Backward: the all-gather's adjoint
//    reduce-scatters dK and dV to their owners. Sends 4 B T_pad D (P-1)/P values per layer and
//    rank.
//  - all-to-all (all_to_all.c, DeepSpeed-Ulysses): Q, K and V go from the token shard to a head
//    shard (all T_pad tokens, this rank's h_r heads), attention runs per head group, and the
//    output comes back the inverse way. The heads need not divide: of H heads over P ranks the
//    first H mod P ranks take ceil(H/P), the others floor(H/P); every rank needs one (H >= P).
//    Each exchange to the head shard sends the other ranks their heads of this rank's tokens, each
//    one back this rank's heads of the other ranks' tokens, four of each per layer: 4 B T_pad D
//    (H + (P-2) h_r) / (P H) values per layer for rank r, which is 8 B T_pad D (P-1)/P^2 when P
//    divides the heads: less than the gather for P > 2.
//  - ring (ring.c, ring attention): each rank's K/V block travels the ring; every step attends the
//    local queries to the visiting block and merges by log-sum-exp; in backward dK/dV travel with
//    their block back to its owner. Sends 2 B T_pad D (P-1)/P values per layer and rank forward,
//    twice that backward, and never holds more than one other rank's block.
//  - hybrid (hybrid.c, USP): U = --ulysses-degree consecutive ranks exchange heads all-to-all, so
//    each holds U shards' tokens for its h_r heads (the heads split over the U ranks as above), and
//    those blocks run the ring over the P/U such groups. U must divide P and be at most H. Sends
//    the sum of its two parts per layer for rank r: 4 B T_pad D (H + (U-2) h_r) / (P H) values for
//    the all-to-all and 6 B T_pad D U h_r (P/U-1) / (P H) for the ring; when U divides the heads,
//    8 B T_pad D (U-1)/(U P) and 6 B T_pad D (P/U-1)/P.
// The classic bugs can be injected (--inject-bug, inject.h), each a real code path.
//
// The files: sp.c the context (its groups, their backend, what they sent), layouts.c the table of
// layouts, batch.c a batch over the mesh (slices, micro-batches, the loss's denominator, gathering
// outputs and summing gradients), inject.c the table of bugs.
#pragma once
#include "../autograd/optim.h"
#include "../layers/dit.h"
#include "comm.h"
#include "inject.h"
#include "policy.h"
#include "seq_attention.h"

// layouts.c: the layouts' names (SeqAttention: seq_attention.h)
// The layout of a name ("gather", "all-to-all", ...); false for another name.
bool seq_attention_from_name(const char *name, SeqAttention *out);
const char *seq_attention_name(SeqAttention a);
const char *seq_attention_names(void); // "gather, all-to-all, ..."

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
    bool exact;     // --exact: the same bits for every rank count that divides virtual_shards
    int virtual_shards; // --virtual-shards: the canonical blocks V of --exact (default 12)
    bool packs;         // the rows are packs of images (--max-tokens): the pack bugs can show
    int pack_images;    // packs: the most images a row holds (the folder's), for the memory
                        // estimate of their captions; 0: as many as its tokens
    bool recompute;     // --recompute: keep each half block's input only, run it again in backward
    int zero;           // --zero: 1 = the Adam moments sharded over every rank (ZeRO stage 1), 2 =
                        // the gradients too (stage 2), 3 = the parameters too; 0 = whole
} SpOptions;
// gather, every rank one sequence group, the default policy, one micro-batch
SpOptions sp_options_default(void);
// "dp 2 x sp 2, hybrid (ulysses 2 x ring 1)", or "sp 4, ring" without data parallelism, with
// ", grad-accum K" for K > 1 micro-batches (and ", exact (V blocks)", ", recompute"), into buf
const char *sp_layout_text(const SpOptions *o, int ranks, char *buf, size_t len);

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

// ---- the context (sp.c) -----------------------------------------------------------------------
// Checks that T tokens and `heads` heads can run over `ranks` ranks with these options (NULL, and
// *sp set up for rank `rank`, its groups split from `world` when that is not NULL, a collective;
// or the sentence naming the problem and the fix). With --device cuda and a world, it also picks
// this rank's GPU and the collectives' backend: NCCL when every rank of a machine has a GPU of
// its own and the build has NCCL, else MPI on host copies.
const char *sp_init(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o, int T,
                    int heads, char *buf, size_t len);
// sp_init for model m, or a usage error (usage.h) that names the problem; world may be NULL for a
// context that only sizes memory. An in-context model runs with the gather and all-to-all layouts,
// not under --exact.
void sp_setup(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
              const DiTConfig *m);
// sp_setup for sequences of T tokens (packs of images) instead of the model's square images
void sp_setup_tokens(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
                     const DiTConfig *m, int T);
// NULL when every bug that o injects can run with these options on `ranks` ranks and, when m is
// not NULL, on model m (inject.h: each bug's layout and needs; sp_setup checks it first, sp_init
// the options' part); else the sentence naming what the first needs. Without m, the needs of the
// model and of packs are not asked (a probe's checkpoint and batch give them)
const char *sp_bugs_error(const SpOptions *o, const DiTConfig *m, int ranks, char *buf, size_t len);
// Where bug b runs: its layout and its needs ("all-to-all, --cond text"; "any layout")
const char *bug_where(const BugInfo *b, char *buf, size_t len);
// Every bug with where it runs ("local-kv (gather), ..., no-dp-allreduce (--sp below the ranks),
// ..."), in lines of at most `width` characters: the --help lists
const char *bug_help(char *buf, size_t len, int width);
// After sp_init, for model m: the tokens every rank holds in front of its shard in every block
// (in-context conditioning's, or joint attention's caption: dit_front_tokens); NULL,
// or the sentence when the options cannot run them (what sp_setup checks), sp_context_error's.
const char *sp_init_context(SeqParallel *sp, const SpOptions *o, const DiTConfig *m, char *buf, size_t len);
const char *sp_context_error(const SpOptions *o, const DiTConfig *m, char *buf, size_t len);
void sp_free(SeqParallel *sp);
// NULL when the device options can run here (a GPU for --device cuda, --tf32 only with cuda);
// else the sentence. sp_init checks it first; the flags' parser too.
const char *sp_device_error(const SpOptions *o, char *buf, size_t len);
// NULL when the --exact options can run (--virtual-shards only with
// --exact); else the sentence. sp_init checks it (and the policy, that the ranks divide the
// blocks); so does bugs before its first run.
const char *sp_exact_error(const SpOptions *o, char *buf, size_t len);
// "cpu", or "cuda (NVIDIA H200, collectives over NCCL)" and the like, into buf
const char *sp_device_text(const SeqParallel *sp, char *buf, size_t len);
// Bytes this rank sent over its groups (the layout's exchanges, and the images the probe gathers)
// and over the world (gradients and the loss) since sp_init or the last sp_reset_bytes
size_t sp_layout_bytes(const SeqParallel *sp);
size_t sp_world_bytes(const SeqParallel *sp);
void sp_reset_bytes(SeqParallel *sp);

// ---- a batch over the mesh (batch.c) ---------------------------------------------------------
// This rank's images of a global batch of B: [*first, *first + *count); NULL, or the sentence
// when the data groups do not divide B or a group has fewer images than micro-batches.
const char *sp_batch_slice(const SeqParallel *sp, int B, int *first, int *count, char *buf, size_t len);
// Micro-batch i of a data group's `count` images: [*first, *first + *n). The first count % K are
// one image larger (8 images, K = 3: 3, 3 and 2), so micro-batch 0 is the largest.
void sp_micro_batch(const SeqParallel *sp, int count, int i, int *first, int *n);
// sp_dit_shard for a micro-batch of `images` images (rows) of a step whose global batch is
// `batch`, with the count its loss divides by: batch x T tokens, the same for every rank and
// micro-batch (the accum-unweighted and local-mean-loss bugs choose theirs here). Packs: pack is
// the micro-batch's, and the count the real tokens of the global batch, batch_tokens (under
// accum-unweighted, the micro-batch's own times the micro-batches and data groups); else NULL, 0.
DiTShard sp_loss_shard(SeqParallel *sp, int images, int batch, const DiTPack *pack, long batch_tokens);
// The loss-times-sp bug: what turns this rank's share of the global mean into the mean over its
// own real tokens (T over their count; 0 for a rank of padding only), so that the ranks' logged
// losses add up to about P times the loss
double sp_local_mean_scale(const SeqParallel *sp);
// The full output images (B, C_out, S, S) from every rank's tokens (B, n, p*p*C_out): tokens are
// all-gathered, padding dropped, and unpatchified; for rows of packs (strip true) the strips
// (B, C_out, p, T p) of their T tokens (layers/dit.h). Not differentiated.
Tensor *sp_gather_image(Tape *tp, SeqParallel *sp, Tensor *tokens, const DiTConfig *c, bool strip);
// Every data group's images (B, ...) of `size` values each, in data-group order, into out
// (dp * B, ...). Not differentiated.
void sp_gather_batch(SeqParallel *sp, real *out, const real *in, size_t size);
// One all-reduce (sum) of the flat gradient buffer over every rank; under --exact, of the store's
// exact sums, rounded into the buffer. For a split store (--zero) a reduce-scatter of each unit:
// the sums of this rank's slice only, into ps->slice; at level 2 of the units that are not scoped,
// the blocks' having gone as backward finished each (sp_store_hook).
void sp_sync_grads(SeqParallel *sp, ParamStore *ps);
// A split store's unit u: its gradients summed over the ranks and this rank's piece added into the
// slice (a reduce-scatter over the world)
void sp_sum_unit(SeqParallel *sp, ParamStore *ps, int u);

// ---- the optimizer over the mesh (zero.c) -----------------------------------------------------
// The AdamW update of ps after sp_sync_grads; returns the global gradient norm. A whole store
// updates itself; a split one (ps_shard, --zero: ZeRO over every rank) updates its pieces, from a
// norm summed over the ranks (under --exact, exactly), and each unit's parameters are
// all-gathered.
double sp_optimizer_step(SeqParallel *sp, AdamW *opt, ParamStore *ps);
// --zero 1 to 3: splits the store ps over the world at `level`: an allocated whole store in place
// (ps_shard), or one laid out but not yet allocated before its memory is taken (ps_split; then
// ps_alloc and dit_init a unit at a time: no rank ever holds the whole model). Makes sp its
// hook (autograd/params.h): before a block's backward its gradients' place is cleared, after it
// they are summed into the slice; at level 3 a block's parameters are all-gathered into their
// place as it opens, forward or backward, and the next block's gather is posted (one ahead).
// sp must outlive the store's use.
void sp_split_store(SeqParallel *sp, ParamStore *ps, int level);
// A forward of this store all-gathers its blocks over the world (--zero 3 over several ranks): code
// that runs forwards per group (sampling) must then run as many on every group
bool sp_forward_spans_world(const ParamStore *ps);
// The units whole in the parameters' buffer all-gathered from the ranks' pieces (after an update,
// or after the pieces were swapped with the EMA's)
void sp_gather_params(SeqParallel *sp, ParamStore *ps);
// The summed gradients of a store split over the world (its slice) whole on every rank, in a whole
// store's layout (total values: the parameters in the order registered), a unit at a time (probe)
void sp_whole_grads(SeqParallel *sp, const ParamStore *ps, real *out);
// --exact (batch.c): tp runs in exact mode with *em (this rank's canonical block size, whether it
// repeats another rank's per-image work); nothing otherwise
void sp_exact_tape(const SeqParallel *sp, Tape *tp, ExactMode *em);
// --exact: the loss of a step from the tapes' exact sums, summed over every rank
double sp_exact_loss(SeqParallel *sp, ExactMode *em);

// ---- the layouts (layouts.c) -----------------------------------------------------------------
// NULL if the layout can run `heads` heads over a sequence group of P ranks; else the sentence.
const char *sp_layout_error(const SpOptions *o, int heads, int P, char *buf, size_t len);
// Arena bytes for one forward + backward (or forward only) of B images on this rank.
size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);
// The pass a step with (or without) backward runs: DIT_RECOMPUTE for a backward under --recompute
DiTPass sp_pass(const SeqParallel *sp, bool backward);
// --exact: sums over the sequence group (ctx the SeqParallel), every rank getting them
void sp_sum_group(ExactSum *s, void *ctx);
// The DiTShard that runs a DiT forward on this rank's tokens with the layout's attention.
DiTShard sp_dit_shard(SeqParallel *sp);
// What this rank sends in one attention layer of B images, forward or backward (default mode,
// no bug): the values its counters count, and the messages it waits for one after the other
// (each costs the link's latency once); the planner's communication model (plan/plan.c)
typedef struct SpTraffic {
    double values, messages;
} SpTraffic;
SpTraffic sp_layer_traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);

// for the layout files
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
extern const SpLayout sp_gather, sp_all_to_all, sp_ring, sp_hybrid;
// The row of layout a (layouts.c's table), and the table's rows: SP_LAYOUTS, and those a build
// adds after them
const SpLayout *sp_layout_row(SeqAttention a);
int sp_layouts(void);
// Every layout with what it does ("gather (all-gather K/V, default), ..."), in lines of at most
// `width` characters: --sp-attention's --help
const char *sp_layouts_help(char *buf, size_t len, int width);
// The layouts whose row has `flag` set (its offset in SpLayout), by name: "gather or all-to-all"
const char *sp_layouts_with(size_t flag, char *buf, size_t len);
// The ranks whose shards' queries this rank attends for its heads (the row's head_group, or 1)
int sp_head_group(const SeqParallel *sp);
// Ring attention (ring.c) of q, k, v (B, front + n, D) over the ring `c`: rank r's block is the
// tokens [r n, (r + 1) n) of `key_mask` (all tokens; NULL: none masked) and of the image ids `seg`
// (B, P n) of a pack (NULL: none). The `front` tokens before them are every rank's own (joint
// attention's caption; seg then its joint images, kernels/segments.h): their queries go round the
// ring with the block's, their keys are attended once, with the rank's own block, and never sent.
// The ring-* bugs apply.
Tensor *ring_attention(Tape *tp, Comm *c, Tensor *q, Tensor *k, Tensor *v, int heads,
                       const uint8_t *key_mask, const int32_t *seg, int front, BugMask bugs);
// The R tokens every rank holds in front of its shard (sp.h's context) under a head-sharding exchange
// over c (all_to_all.c): x (B, R + n, D) -> (B, R + P n, h dh), this rank's h heads' columns of
// the front tokens taken from its own copy (no exchange), then every rank's tokens to the head
// shard; and back, o (B, R + P n, h dh) -> (B, R + n, D): the front tokens' output whole on every
// rank (each rank sends its heads' columns, one copy to each other rank: an all-gather of the
// heads, whose adjoint sums the copies' gradients) and the tokens' output to the token shard.
// whole_grads (--exact, where the front's gradients are whole on every rank): the front's gradient
// going in is summed over the ranks (each holds its heads' columns), and coming out each rank keeps
// its own copy's (the others' are the same).
Tensor *seq_front_to_heads(Tape *tp, Comm *c, Tensor *x, int R, int heads, bool whole_grads);
Tensor *seq_front_from_heads(Tape *tp, Comm *c, Tensor *o, int R, int heads, bool whole_grads);
// The key mask of all T_pad tokens (NULL under the no-pad-mask bug), on the device with cuda.
const uint8_t *sp_key_mask(const SeqParallel *sp);
// The images of a pack's tokens for the attention: seg (B, T_pad) as the layout got it, or NULL
// under the pack-mask-crosses-images bug (the block-diagonal mask dropped)
const int32_t *sp_images(const SeqParallel *sp, const int32_t *seg);
// Joint attention's images ids (AttendFn) of B rows, R caption tokens each; under the
// pack-mask-crosses-images bug as if each row held one image: every caption's words and every image
// token seen by every query (in a's host side)
const int32_t *sp_joint_images(Arena *a, const SeqParallel *sp, const int32_t *ids, int B, int R);
// Segments (kernels/segments.h) of seg as sp_images gives it, for queries from token q0 and keys
// from token k0 of the padded sequence
Segments sp_segments(const SeqParallel *sp, const int32_t *seg, int q0, int k0);
// The shard's key mask of all T_pad tokens on the host (NULL under the no-pad-mask bug); and the
// key mask of R tokens in front (in-context, joint), then all T_pad tokens, in a's host side
const uint8_t *sp_host_key_mask(const SeqParallel *sp);
const uint8_t *sp_front_mask(Arena *a, const SeqParallel *sp, int R);
