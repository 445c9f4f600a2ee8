// ulysses.h: sequence-parallel attention. Each rank holds the queries, keys and values of its
// own tokens, and the output is the local shard (B, n, D) again. Two variants:
//  - gather (default): K and V are all-gathered along the sequence, so local queries attend to
//    all T_pad keys (padded keys masked). Backward: the all-gather's adjoint reduce-scatters dK
//    and dV to their owners. Sends 4 B T_pad D (P-1)/P values per layer and rank.
//  - all-to-all (DeepSpeed-Ulysses): Q, K and V go through an all-to-all from the token shard to
//    a head shard (all T_pad tokens, H/P heads), attention runs per head group, and the output
//    comes back with the inverse all-to-all. Needs P to divide the heads. Sends
//    8 B T_pad D (P-1)/P^2 values per layer and rank: less than the gather for P > 2.
// Parameter gradients are partial per rank: seq_sync_grads sums them.
//
// The classic bugs can be injected on purpose (--inject-bug), each a real code path, so that a
// comparison against one rank can be seen catching them.
#pragma once
#include "../autograd/params.h"
#include "../layers/dit.h"
#include "comm.h"
#include "policy.h"

enum {
    BUG_LOCAL_KV = 1 << 0,              // attend only to local keys: policy kv_must_be_global off
    BUG_NO_DKV_REDUCE_SCATTER = 1 << 1, // keep only the local part of dK/dV
    BUG_NO_GRAD_ALLREDUCE = 1 << 2,     // parameter gradients stay per-rank partial sums
    BUG_NO_PAD_MASK = 1 << 3,           // padded keys take part in attention
    BUG_WRONG_RESTORE = 1 << 4,         // output taken from the wrong rows (not sliced back)
};
// Parses a bug name ("local-kv", ...) into its flag; 0 if unknown.
unsigned bug_from_name(const char *name);
// Adds a bug to a run's set; local-kv is the policy's kv_must_be_global turned off.
void bug_inject(unsigned bug, unsigned *bugs, SeqPolicy *policy);
const char *bug_names(void); // for --help and error messages
// The names of the bugs in a set, comma-separated, or "none", into buf.
const char *bug_list(unsigned bugs, char *buf, size_t len);

typedef enum { SP_GATHER, SP_ALL_TO_ALL } SeqAttention;
// "gather" or "all-to-all"; returns false for another name.
bool seq_attention_from_name(const char *name, SeqAttention *out);
const char *seq_attention_name(SeqAttention a);

typedef struct Ulysses {
    Comm *comm;
    const SeqShard *shard;
    const SeqPolicy *policy;
    SeqAttention variant;
    unsigned bugs;
} Ulysses;

// NULL if the variant can run `heads` heads over P ranks with these bugs; else the sentence.
const char *ulysses_validate(SeqAttention variant, int heads, int P, unsigned bugs, char *buf,
                             size_t len);

// Arena bytes for one forward + backward (or forward only) of B images on this rank
// (dit_step_bytes with the queries this rank's attention really uses: all of them under the
// wrong-restore bug).
size_t ulysses_step_bytes(const Ulysses *u, const DiTConfig *c, int B, bool backward);
// An AttendFn (see dit.h); ctx is a Ulysses.
Tensor *ulysses_attend(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads, void *ctx);
// The DiTShard that runs a DiT forward on this rank's tokens with Ulysses attention.
DiTShard ulysses_dit_shard(Ulysses *u);
// The full output images (B, C_out, S, S) from every rank's tokens (B, n, p*p*C_out): tokens are
// all-gathered, padding dropped, and unpatchified. Not differentiated.
Tensor *ulysses_gather_image(Tape *tp, Ulysses *u, Tensor *tokens, const DiTConfig *c);
// One all-reduce (sum) of the flat gradient buffer over the group (skipped by the injected bug).
void seq_sync_grads(Ulysses *u, ParamStore *ps);
