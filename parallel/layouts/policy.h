// policy.h: the sequence-parallel policy (the C counterpart of UlyssesContextParallelPolicy) and
// the shard it gives each rank. T tokens over P ranks: without auto-pad T must be divisible by P;
// with it T_pad = ceil(T / (P * pad_multiple)) * P * pad_multiple and the padded tokens are zeros
// whose keys are masked, excluded from the loss, and given zero gradient. Under --exact the unit
// is V * pad_multiple instead, V canonical blocks that P must divide, so that T_pad and the blocks
// do not depend on P.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Ulysses' require_divisible has no field: it is always so (T_pad is a multiple of P, the shards
// are equal).
typedef struct SeqPolicy {
    bool auto_pad;    // pad T up instead of refusing it
    int pad_multiple; // pad to a multiple of P * pad_multiple
    int exact_blocks; // --exact: V canonical blocks (a multiple of P); T_pad is a multiple of
                      // V * pad_multiple, the same for every P. 0: not exact (sp_init sets it
                      // from the options)
} SeqPolicy;

typedef struct SeqShard {
    int T, T_pad, P, rank;
    int t0, n;              // this rank's tokens [t0, t0 + n), n = T_pad / P
    uint8_t *key_mask;      // (T_pad): 1 for real tokens, 0 for padding
} SeqShard;

SeqPolicy seq_policy_default(void); // auto-pad, pad_multiple 1
int seq_padded_len(const SeqPolicy *p, int T, int P);
// NULL if T tokens can be split over P ranks; else a sentence naming T, P and the fix.
const char *seq_validate(const SeqPolicy *p, int T, int P, char *buf, size_t len);
// Aborts with seq_validate's message when invalid.
SeqShard seq_shard(const SeqPolicy *p, int T, int P, int rank);
void seq_shard_free(SeqShard *s);
