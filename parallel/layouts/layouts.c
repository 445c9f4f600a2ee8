// layouts.c: the table of attention layouts (one file each: gather.c, all_to_all.c, ring.c,
// hybrid.c) and what a rank asks of its layout: its name, whether it can run, its arena bytes and
// its attention.
#include "../transport/autograd_collectives.h"
#include "layouts.h"
#include "all_to_all.h"
#include "gather.h"
#include "hybrid.h"
#include "ring.h"
#include "shared.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef SP_TEST_LAYOUT // the test build's layout (tests/layout_all_queries.c): one file and this row
extern const SpLayout SP_TEST_LAYOUT;
#endif
static const SpLayout *const layouts[] = {
    [SP_GATHER] = &sp_gather, [SP_ALL_TO_ALL] = &sp_all_to_all, [SP_RING] = &sp_ring, [SP_HYBRID] = &sp_hybrid,
#ifdef SP_TEST_LAYOUT
    &SP_TEST_LAYOUT,
#endif
};
#define N_LAYOUTS (int)(sizeof layouts / sizeof *layouts)
_Static_assert(N_LAYOUTS >= SP_LAYOUTS && N_LAYOUTS < SP_AUTO, "a row for each built-in layout, below auto's number");

int sp_layouts(void) { return N_LAYOUTS; }

bool seq_attention_from_name(const char *name, SeqAttention *out) {
    for (int a = 0; a < N_LAYOUTS; a++)
        if (!strcmp(layouts[a]->name, name)) return *out = (SeqAttention)a, true;
    return false;
}

const char *seq_attention_name(SeqAttention a) { return layouts[a]->name; }

const SpLayout *sp_layout_row(SeqAttention a) { return layouts[a]; }

const char *sp_layouts_with(size_t flag, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int a = 0, k = 0; a < N_LAYOUTS && n < len; a++)
        if (*(const bool *)((const char *)layouts[a] + flag))
            n += (size_t)snprintf(buf + n, len - n, "%s%s", k++ ? " or " : "", layouts[a]->name);
    return buf;
}

const char *sp_layouts_help(char *buf, size_t len, int width) {
    size_t n = 0, line = 0; // where the current line starts
    buf[0] = 0;
    for (int a = 0; a < N_LAYOUTS && n < len; a++) {
        char item[256];
        snprintf(item, sizeof item, "%s%s (%s%s)%s", a && a + 1 == N_LAYOUTS ? "or " : "", layouts[a]->name,
                 layouts[a]->does, a == (int)SP_DEFAULT_LAYOUT ? ", default" : "",
                 a + 2 < N_LAYOUTS ? "," : "");
        bool wrap = n > line && n - line + 1 + strlen(item) > (size_t)width;
        n += (size_t)snprintf(buf + n, len - n, "%s%s", wrap ? "\n" : n > line ? " " : "", item);
        if (wrap) line = n - strlen(item);
    }
    return buf;
}

int sp_head_group(const SeqParallel *sp) {
    return layouts[sp->layout]->head_group ? layouts[sp->layout]->head_group(sp) : 1;
}

const char *seq_attention_names(void) {
    static char names[128];
    size_t n = 0;
    for (int a = 0; a < N_LAYOUTS; a++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", a ? ", " : "", layouts[a]->name);
    return names;
}

const char *sp_layout_error(const SpOptions *o, int heads, int P, char *buf, size_t len) {
    return layouts[o->layout]->validate(o, heads, P, buf, len);
}

// With packs a row holds a caption for each of its images (the table counts one a row): as many
// as the folder's images fit (pack_images), or each image a token at least: the model as the
// layouts see it
static DiTConfig row_captions(const SeqParallel *sp, const DiTConfig *c) {
    DiTConfig rows = *c;
    int most = sp->shard.T < DIT_PACK_MAX ? sp->shard.T : DIT_PACK_MAX;
    if (sp->packs && c->text) rows.text_len *= sp->pack_images ? sp->pack_images : most;
    return rows;
}

// Packs add the adaLN vectors per token, and with captions a row's captions (row_captions).
// --exact adds: K and V of all tokens (kept), the exact sums of their gradients, of dQ and of the
// output (the ring's: dQ, dK and dV travelling and arriving, and those kept; the gather's: the
// rank-major blocks of dK or dV reduce-scattered), the key blocks' log-sum-exp and the blocks'
// shares (transient), the adaLN vectors once per canonical block, and a linear's block gradients
// (the largest, the adaLN modulation's 6D x D)
size_t sp_step_bytes(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    DiTConfig rows = row_captions(sp, c);
    size_t bytes = layouts[sp->layout]->step_bytes(sp, &rows, B, backward);
    if (sp->packs) // each block's 6 adaLN vectors and the final layer's 2 per token, gathered and
        // sliced, and as much again for their gradients
        bytes += (size_t)((double)B * sp->shard.n * c->hidden_size * (12.0 * c->depth + 4) *
                          (backward ? 2 : 1) * sizeof(real));
    if (!sp->exact) return bytes;
    double T = sp->shard.T_pad, D = c->hidden_size, V = sp->policy_blocks, G = V / sp->shard.P;
    double n = sp->shard.n, linear = 6 * D * D + 6 * D; // the largest linear's block gradient
    double reals = 2 * B * T * D * (c->depth + 1) + B * (G - 1) * 12 * D * (c->depth + 1) +
                   fmax(fmin(LINEAR_EXACT_BLOCKS * linear, LINEAR_EXACT_TERMS), linear) +
                   V * B * T * c->num_heads + 6 * B * T * D;
    double sums = 2 * B * T * D + 7 * B * n * D;
    if (layouts[sp->layout]->reduce_scatters_kv) sums += B * T * D; // dK or dV, rank-major
    return bytes + exact_bytes((size_t)sums) + (size_t)(reals * sizeof(real));
}

SpTraffic sp_layer_traffic(const SeqParallel *sp, const DiTConfig *c, int B, bool backward) {
    DiTConfig rows = row_captions(sp, c);
    return layouts[sp->layout]->traffic(sp, &rows, B, backward);
}


// --exact: the adaLN vectors of each image spread over this rank's canonical blocks, or with
// packs over its tokens
static Tensor *spread(Tape *tp, Tensor *per_image, const int64_t *image_of, int B, int n, void *ctx) {
    SeqParallel *sp = ctx;
    int G = image_of ? n : sp->policy_blocks / sp->comm->size;
    if (!image_of) { // image b's row for each of its G blocks
        int64_t *of = arena_alloc(arena_host(tp->arena), (size_t)B * G * sizeof(int64_t));
        for (int r = 0; r < B * G; r++) of[r] = r / G;
        image_of = of;
    }
    Tensor *rows = seq_spread_exact(tp, sp->comm, per_image, image_of, B * G);
    return tensor_reshape(tp->arena, rows, 3, (int[]){B, G, per_image->shape[1]});
}

DiTShard sp_dit_shard(SeqParallel *sp) {
    return (DiTShard){.t0 = sp->shard.t0, .n = sp->shard.n, .T_pad = sp->shard.T_pad,
                      .positions_from_shard = sp->bugs & BUG_PACK_POSITIONS_FROM_SHARD,
                      .attend = layouts[sp->layout]->attend, .attend_ctx = sp,
                      .spread = sp->exact ? spread : NULL, .recompute = sp->recompute,
                      .sum_group = sp->exact ? sp_sum_group : NULL,
                      .first_positions = sp->bugs & BUG_SHARD_POS_EMBED,
                      .rope_local = sp->bugs & BUG_ROPE_LOCAL_POSITIONS,
                      .rope_pack_run_on = sp->bugs & BUG_ROPE_PACK_POSITIONS,
                      .qk_norm_parts = sp->bugs & BUG_QK_NORM_HEAD_SHARD ? sp->shard.P : 0,
                      .cross_kv_copies = sp->bugs & BUG_CROSS_KV_ALL_TO_ALL ? sp->shard.P : 0};
}
