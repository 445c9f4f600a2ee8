// policy.c: see policy.h.
#include "policy.h"
#include "../../core/check.h"
#include <stdio.h>
#include <stdlib.h>

SeqPolicy seq_policy_default(void) {
    return (SeqPolicy){.auto_pad = true, .pad_multiple = 1};
}

int seq_padded_len(const SeqPolicy *p, int T, int P) {
    if (!p->auto_pad) return T;
    int unit = (p->exact_blocks ? p->exact_blocks : P) * p->pad_multiple;
    return (T + unit - 1) / unit * unit;
}

const char *seq_validate(const SeqPolicy *p, int T, int P, char *buf, size_t len) {
    if (T <= 0 || P <= 0 || p->pad_multiple <= 0)
        snprintf(buf, len, "sequence length %d, rank count %d and pad multiple %d must be positive",
                 T, P, p->pad_multiple);
    else if (!p->auto_pad && p->pad_multiple != 1)
        snprintf(buf, len, "pad_multiple %d applies only with auto-pad; drop --pad-multiple or "
                 "--no-auto-pad", p->pad_multiple);
    else if (p->exact_blocks && p->exact_blocks % P)
        snprintf(buf, len, "--exact splits the sequence into %d canonical blocks, which %d ranks per "
                 "sequence group cannot share equally; use a rank count that divides %d, or "
                 "--virtual-shards a multiple of %d", p->exact_blocks, P, p->exact_blocks, P);
    else if (!p->auto_pad && p->exact_blocks && T % p->exact_blocks)
        snprintf(buf, len, "--exact splits the sequence into %d canonical blocks, but sequence length "
                 "%d is not divisible by it; pad to %d or enable auto-pad (drop --no-auto-pad)",
                 p->exact_blocks, T, (T + p->exact_blocks - 1) / p->exact_blocks * p->exact_blocks);
    else if (!p->auto_pad && T % P)
        snprintf(buf, len, "context_parallel_size=%d but sequence length %d is not divisible by it; "
                 "pad to %d or enable auto-pad (drop --no-auto-pad)", P, T, (T + P - 1) / P * P);
    else
        return NULL;
    return buf;
}

SeqShard seq_shard(const SeqPolicy *p, int T, int P, int rank) {
    char buf[256];
    const char *why = seq_validate(p, T, P, buf, sizeof buf);
    CHECK(!why, "%s", why);
    SeqShard s = {.T = T, .T_pad = seq_padded_len(p, T, P), .P = P, .rank = rank};
    s.n = s.T_pad / P;
    s.t0 = rank * s.n;
    s.key_mask = xmalloc((size_t)s.T_pad);
    for (int j = 0; j < s.T_pad; j++) s.key_mask[j] = j < T;
    return s;
}

void seq_shard_free(SeqShard *s) {
    free(s->key_mask);
    s->key_mask = NULL;
}
