// layouts.c: the table of attention layouts (one file each: gather.c, all_to_all.c, ring.c,
// hybrid.c) and what a rank asks of its layout: its name, whether it can run, its arena bytes and
// its attention.
#include "sp.h"
#include <stdio.h>
#include <string.h>

static const SpLayout *const layouts[SP_LAYOUTS] = {
    [SP_GATHER] = &sp_gather, [SP_ALL_TO_ALL] = &sp_all_to_all, [SP_RING] = &sp_ring,
    [SP_HYBRID] = &sp_hybrid};

bool seq_attention_from_name(const char *name, SeqAttention *out) {
    for (int a = 0; a < SP_LAYOUTS; a++)
        if (!strcmp(layouts[a]->name, name)) return *out = (SeqAttention)a, true;
    return false;
}

const char *seq_attention_name(SeqAttention a) { return layouts[a]->name; }

const char *seq_attention_names(void) {
    static char names[128];
    size_t n = 0;
    for (int a = 0; a < SP_LAYOUTS; a++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", a ? ", " : "", layouts[a]->name);
    return names;
}

const char *sp_layout_error(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    return layouts[o->layout]->validate(o, heads, P, buf, len);
}

size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    return layouts[sp->layout]->step_bytes(sp, c, B, backward);
}

DiTShard sp_dit_shard(SeqParallel *sp) {
    return (DiTShard){.t0 = sp->shard.t0, .n = sp->shard.n, .attend = layouts[sp->layout]->attend,
                      .attend_ctx = sp};
}

const uint8_t *sp_key_mask(const SeqParallel *sp) {
    return (sp->bugs & BUG_NO_PAD_MASK) ? NULL : sp->key_mask_device ? sp->key_mask_device : sp->shard.key_mask;
}
