// layouts.h: the attention layouts, a row each in layouts.c's table (SpLayout), each in a file of
// its own, and what they share (the key masks, the pass, the DiTShard that runs a layout). The
// layouts (P ranks of a sequence group, T_pad padded tokens, B images of D channels):
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
#pragma once
#include "row.h"

// The layout of a name ("gather", "all-to-all", ...); false for another name.
bool seq_attention_from_name(const char *name, SeqAttention *out);
const char *seq_attention_name(SeqAttention a);
const char *seq_attention_names(void); // "gather, all-to-all, ..."

// ---- the layouts (layouts.c) -----------------------------------------------------------------
// NULL if the layout can run `heads` heads over a sequence group of P ranks; else the sentence.
const char *sp_layout_error(const SpOptions *o, int heads, int P, char *buf, size_t len);
// Arena bytes for one forward + backward (or forward only) of B images on this rank.
size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);
// The DiTShard that runs a DiT forward on this rank's tokens with the layout's attention.
DiTShard sp_dit_shard(SeqParallel *sp);
// What this rank sends in one attention layer of B images, forward or backward (default mode,
// no bug): the values its counters count, and the messages it waits for one after the other
// (each costs the link's latency once); the planner's communication model (plan/plan.c)
SpTraffic sp_layer_traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward);

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
