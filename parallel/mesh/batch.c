// batch.c: a batch over the mesh: the images of each data group, their micro-batches, the count
// each loss divides by, and putting the results back together (output images gathered over the
// sequence group and the data groups, gradients summed over every rank).
#include "../../core/check.h"
#include "../../core/device.h"
#include "../../kernels/run.h"
#include "../transport/autograd_collectives.h"
#include "batch.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_batch_slice(const SeqParallel *sp, int B, int *first, int *count, char *buf, size_t len) {
    if (B % sp->dp)
        return snprintf(buf, len, "the batch of %d images does not split over the %d data groups "
                        "(ranks / --sp); pass a --batch that %d divides, or another --sp", B,
                        sp->dp, sp->dp), buf;
    *count = B / sp->dp;
    *first = (sp->bugs & BUG_SAME_DATA_ALL_DP) ? 0 : sp->dp_rank * *count;
    if (sp->accum > *count) {
        char whose[96] = "the batch";
        if (sp->dp > 1)
            snprintf(whose, sizeof whose, "each data group (the batch of %d over %d groups)", B, sp->dp);
        return snprintf(buf, len, "--grad-accum %d is more than the %d images of %s, so a "
                        "micro-batch would be empty; pass --grad-accum at most %d, or a larger "
                        "--batch", sp->accum, *count, whose, *count), buf;
    }
    return NULL;
}

void sp_micro_batch(const SeqParallel *sp, int count, int i, int *first, int *n) {
    // split as heads are over ranks: the first count mod K micro-batches take one image more
    *first = seq_first_head(count, sp->accum, i);
    *n = seq_heads(count, sp->accum, i);
}

// This rank's real tokens [t0, T) of its shard
static int real_tokens(const SeqParallel *sp) {
    int n = sp->shard.T - sp->shard.t0;
    return n < 0 ? 0 : n > sp->shard.n ? sp->shard.n : n;
}

DiTShard sp_loss_shard(SeqParallel *sp, int images, int batch, const DiTPack *pack, long batch_tokens) {
    DiTShard sh = sp_dit_shard(sp);
    sh.images = batch, sh.tokens = sp->shard.T;
    sh.pack = pack, sh.pack_tokens = batch_tokens;
    if (sp->bugs & BUG_ACCUM_UNWEIGHTED) { // 1/K each
        sh.images = images * sp->accum * sp->dp;
        if (pack) sh.pack_tokens = dit_pack_tokens(pack) * sp->accum * sp->dp;
    }
    if (sp->bugs & BUG_LOCAL_MEAN_LOSS) { // this rank's images and its real tokens
        sh.images = images;
        sh.tokens = real_tokens(sp) > 0 ? real_tokens(sp) : 1; // a rank of padding only: 0 / 1
        sh.pack_tokens = (long)sh.images * sh.tokens; // packs: their padding counted too
    }
    return sh;
}

double sp_local_mean_scale(const SeqParallel *sp) {
    return real_tokens(sp) ? (double)sp->shard.T / real_tokens(sp) : 0;
}

Tensor *sp_gather_image(Tape *tp, SeqParallel *sp, Tensor *tokens, const DiTConfig *c, bool strip) {
    bool grad = tp->grad_enabled;
    tp->grad_enabled = false;
    int B = tokens->shape[0], row = tokens->shape[2], T = sp->shard.T, Tp = sp->shard.T_pad;
    Tensor *all = seq_all_gather(tp, sp->comm, tokens);
    Tensor *real_tokens = tensor_new(tp->arena, 3, B, T, row);
    RUN(real_tokens->device, add_rows, real_tokens->data, (size_t)T * row, all->data,
        (size_t)Tp * row, (size_t)T * row, B);
    int p = c->patch_size, pt = dit_patch_t(c), Co = dit_out_channels(c), S = c->input_size;
    Tensor *img = strip ? unpatchify(tp, real_tokens, Co, pt, p, T * p, pt, p)
                        : unpatchify(tp, real_tokens, Co, dit_frames(c), S, S, pt, p);
    tp->grad_enabled = grad;
    return img;
}

void sp_gather_batch(SeqParallel *sp, real *out, const real *in, size_t size) {
    if (sp->data) comm_all_gather(sp->data, out, in, size);
    else copy_bytes(out, in, size * sizeof(real));
}

// The group gradients are summed over: every rank; under no-dp-allreduce each data group keeps
// the gradient of its own images, under no-grad-allreduce each rank its partial sums (NULL)
static Comm *grad_group(const SeqParallel *sp) {
    return (sp->bugs & BUG_NO_GRAD_ALLREDUCE) ? NULL : (sp->bugs & BUG_NO_DP_ALLREDUCE) ? sp->comm : sp->world;
}

// dst's elements [at, at + n) += src's [from, from + n), exactly
static void add_sums(ExactSum *dst, size_t at, ExactSum *src, size_t from, size_t n) {
    ExactPart *a = xmalloc(2 * n * sizeof *a + 1), *b = a + n;
    exact_parts(a, dst, at, NULL, n);
    exact_parts(b, src, from, NULL, n);
    exact_parts_add(a, a, b, n);
    exact_put_parts(dst, at, NULL, a, n);
    free(a);
}

// Over the world a reduce-scatter of the unit's place (under --exact of its exact sums); over a
// smaller group (the allreduce bugs) an all-reduce, and none without one.
void sp_sum_unit(SeqParallel *sp, ParamStore *ps, int u) {
    const PsUnit *U = &ps->unit[u];
    Comm *over = grad_group(sp);
    // the zero-outer-grads-unsummed bug: a reduce-scatter hooked to the blocks alone, the units used
    // outside them (the embeddings, the final layer) never summed: each rank keeps its own share
    if ((sp->bugs & BUG_ZERO_OUTER_UNSUMMED) && ps->level >= 2 && !U->scoped) over = NULL;
    size_t n = U->piece, mine = (size_t)ps->shard * n;
    real *g = ps->grads + U->grad;
    ExactSum *s = ps->exact_mem ? ps_unit_sums(ps, u) : NULL;
    CommSum v = {COMM_REAL, g, s};
    if (over == sp->world) comm_reduce_scatter_sum(over, v, n); // ps->shard is its rank
    else if (over) comm_all_reduce_sum(over, v, ps->shards * n);
    if (s) add_sums(&ps->sums[ps->n_sums], U->slice, s, mine, n);
    else RUN(ps->device, add_rows, ps->slice + U->slice, n, g + mine, n, n, 1);
}

// The text encoder's parameters (text_embedder.*, text_encoder.*, registered one after another) as
// the range [*at, *at + *n) of the flat buffer; n 0 when the model has none
static void text_range(const ParamStore *ps, size_t *at, size_t *n) {
    *at = *n = 0;
    for (int i = 0; i < ps->n; i++)
        if (!strncmp(ps->t[i]->name, "text_", 5)) {
            if (!*n) *at = ps->offset[i];
            *n = ps->offset[i] + ps->t[i]->size - *at;
        }
}

void sp_sync_grads(SeqParallel *sp, ParamStore *ps) {
    // the text-grad-unsummed bug: the text encoder, which every rank of a sequence group runs on the
    // whole caption, taken for a module whose gradient each rank holds whole (as if its rows were
    // not the rank's image tokens' share): summed over the data groups only
    size_t t_at, t_n = 0;
    real *text = NULL;
    if (sp->bugs & BUG_TEXT_GRAD_UNSUMMED) text_range(ps, &t_at, &t_n);
    if (t_n) {
        CHECK(ps->shards == 1, "the text-grad-unsummed bug runs with a whole store: leave out --zero");
        text = xmalloc(t_n * sizeof(real));
        copy_bytes(text, ps->grads + t_at, t_n * sizeof(real));
        if (sp->data) comm_all_reduce(sp->data, COMM_REAL, text, t_n);
    }
    Comm *over = grad_group(sp);
    for (int u = 0; u < ps->units; u++) {
        const PsUnit *U = &ps->unit[u];
        if (ps->shards > 1) { // at level 2 those that backward has not summed as it went
            if (ps->level < 2 || !U->scoped) sp_sum_unit(sp, ps, u);
        } else if (over) { // a whole store: each unit's place, its reals or under --exact its sums
            CommSum v = {COMM_REAL, ps->grads + U->grad, sp->exact ? ps_unit_sums(ps, u) : NULL};
            comm_all_reduce_sum(over, v, U->piece); // the unit whole
        }
    }
    if (sp->exact) ps_exact_slice(ps);
    if ((sp->bugs & BUG_ZERO_GRAD_AVERAGED) && ps->shards > 1) { // the zero-grad-averaged bug: a
        // data-parallel mean over the ranks, though each rank's loss divides by the global count
        size_t bytes = ps->chunk * sizeof(real);
        real *none = ps->device ? device_alloc(bytes) : xmalloc(bytes);
        zero_bytes(none, bytes);
        RUN(ps->device, ema_update, ps->slice, none, ps->chunk, 1.0 / ps->shards); // slice / ranks
        if (ps->device) device_free(none);
        else free(none);
    }
    if (text) copy_bytes(ps->grads + t_at, text, t_n * sizeof(real));
    free(text);
}

void sp_tape_arithmetic(const SeqParallel *sp, Tape *tp, ExactMode *em, bool first) {
    tp->bf16 = sp->bf16, tp->bf16_grads = sp->bf16_grads;
    if (!sp->exact) return;
    if (first) {
        *em = (ExactMode){.block = sp->shard.T_pad / sp->policy_blocks, .rank = sp->comm->rank,
                          .ranks = sp->comm->size};
        em->loss = exact_view(em->loss_mem, 1);
    }
    tp->exact = em;
}

double sp_exact_loss(SeqParallel *sp, ExactMode *em) {
    double loss = 0;
    comm_all_reduce_double(sp->world, &loss, &em->loss);
    return loss;
}
