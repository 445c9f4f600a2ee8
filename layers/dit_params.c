// dit_params.c: a DiT's parameters (see dit.h): their layout in the store, module by module as in
// the reference, allocation, placement on the device, and initialization.
#include "dit.h"
#include "common.h"
#include "../core/rng.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- parameters -------------------------------------------------------------------------------
static Tensor *param(DiT *m, const char *name, int ndim, int d0, int d1, int d2, int d3) {
    return ps_add(&m->ps, name, ndim, (int[]){d0, d1, d2, d3});
}
// x_embedder.proj.weight: a 2-D conv's (D, C, p, p), or a 3-D conv's (D, C, pt, p, p) for
// patches of pt > 1 frames (Open-Sora's PatchEmbed3D)
static Tensor *patch_weight(DiT *m, int D, int C, int pt, int p) {
    if (pt == 1) return param(m, "x_embedder.proj.weight", 4, D, C, p, p);
    return ps_add(&m->ps, "x_embedder.proj.weight", 5, (int[]){D, C, pt, p, p});
}

void dit_layout(DiT *m, const DiTConfig *cfg) {
    char err[256], name[96];
    const char *why = dit_config_error(cfg, err, sizeof err);
    CHECK(!why, "invalid DiT config: %s", why);
    *m = (DiT){.cfg = *cfg};
    int D = cfg->hidden_size, C = cfg->in_channels, p = cfg->patch_size, M = dit_mlp_hidden(cfg);
    int rows = cfg->num_classes + (cfg->class_dropout_prob > 0);
    ps_unit(&m->ps, false); // the embeddings, each block, the final layer: units of the store
    m->x_w = patch_weight(m, D, C, dit_patch_t(cfg), p);
    m->x_b = param(m, "x_embedder.proj.bias", 1, D, 0, 0, 0);
    m->t0_w = param(m, "t_embedder.mlp.0.weight", 2, D, DIT_FREQ_DIM, 0, 0);
    m->t0_b = param(m, "t_embedder.mlp.0.bias", 1, D, 0, 0, 0);
    m->t2_w = param(m, "t_embedder.mlp.2.weight", 2, D, D, 0, 0);
    m->t2_b = param(m, "t_embedder.mlp.2.bias", 1, D, 0, 0, 0);
    if (!cfg->text) m->y_table = param(m, "y_embedder.embedding_table.weight", 2, rows, D, 0, 0);
#define BLOCK_PARAM(field, suffix, ndim, d0, d1)                                                   \
    snprintf(name, sizeof name, "%s.%d.%s", prefix, i, suffix);                                    \
    b->field = param(m, name, ndim, d0, d1, 0, 0)
#define PLAIN_BLOCK                                                                                \
        BLOCK_PARAM(qkv_w, "attn.qkv.weight", 2, 3 * D, D);                                        \
        BLOCK_PARAM(qkv_b, "attn.qkv.bias", 1, 3 * D, 0);                                          \
        BLOCK_PARAM(proj_w, "attn.proj.weight", 2, D, D);                                          \
        BLOCK_PARAM(proj_b, "attn.proj.bias", 1, D, 0);                                            \
        BLOCK_PARAM(fc1_w, "mlp.fc1.weight", 2, M, D);                                             \
        BLOCK_PARAM(fc1_b, "mlp.fc1.bias", 1, M, 0);                                               \
        BLOCK_PARAM(fc2_w, "mlp.fc2.weight", 2, D, M);                                             \
        BLOCK_PARAM(fc2_b, "mlp.fc2.bias", 1, D, 0)
    if (cfg->text) {
        m->w_table = param(m, "text_embedder.embedding_table.weight", 2, DIT_TEXT_VOCAB, D, 0, 0);
        const char *prefix = "text_encoder.layers";
        for (int i = 0; i < cfg->text_depth; i++) {
            DiTBlock *b = &m->text_layers[i];
            PLAIN_BLOCK;
        }
    }
    for (int i = 0; i < cfg->depth; i++) {
        DiTBlock *b = &m->blocks[i];
        ps_unit(&m->ps, true);
        const char *prefix = "blocks";
        PLAIN_BLOCK;
        if (cfg->qk_norm != DIT_QK_NONE) {
            int width = cfg->qk_norm == DIT_QK_HEAD ? D / cfg->num_heads : D;
            BLOCK_PARAM(q_norm, "attn.q_norm.weight", 1, width, 0);
            BLOCK_PARAM(k_norm, "attn.k_norm.weight", 1, width, 0);
        }
        if (cfg->text && cfg->text_attn == DIT_TEXT_CROSS) {
            BLOCK_PARAM(xq_w, "cross_attn.q_linear.weight", 2, D, D);
            BLOCK_PARAM(xq_b, "cross_attn.q_linear.bias", 1, D, 0);
            BLOCK_PARAM(xkv_w, "cross_attn.kv_linear.weight", 2, 2 * D, D);
            BLOCK_PARAM(xkv_b, "cross_attn.kv_linear.bias", 1, 2 * D, 0);
            BLOCK_PARAM(xproj_w, "cross_attn.proj.weight", 2, D, D);
            BLOCK_PARAM(xproj_b, "cross_attn.proj.bias", 1, D, 0);
        }
        b->stream = "";
        if (cfg->in_context) continue;
        BLOCK_PARAM(ada_w, "adaLN_modulation.1.weight", 2, 6 * D, D);
        BLOCK_PARAM(ada_b, "adaLN_modulation.1.bias", 1, 6 * D, 0);
        if (!cfg->text || cfg->text_attn != DIT_TEXT_JOINT) continue;
        b = &m->txt[i], b->stream = "txt.";
        bool last = i == cfg->depth - 1; // its text output is dropped: qkv and its modulation only
        BLOCK_PARAM(qkv_w, "txt.attn.qkv.weight", 2, 3 * D, D);
        BLOCK_PARAM(qkv_b, "txt.attn.qkv.bias", 1, 3 * D, 0);
        if (!last) {
            BLOCK_PARAM(proj_w, "txt.attn.proj.weight", 2, D, D);
            BLOCK_PARAM(proj_b, "txt.attn.proj.bias", 1, D, 0);
            BLOCK_PARAM(fc1_w, "txt.mlp.fc1.weight", 2, M, D);
            BLOCK_PARAM(fc1_b, "txt.mlp.fc1.bias", 1, M, 0);
            BLOCK_PARAM(fc2_w, "txt.mlp.fc2.weight", 2, D, M);
            BLOCK_PARAM(fc2_b, "txt.mlp.fc2.bias", 1, D, 0);
        }
        if (cfg->qk_norm != DIT_QK_NONE) {
            int width = cfg->qk_norm == DIT_QK_HEAD ? D / cfg->num_heads : D;
            BLOCK_PARAM(q_norm, "txt.attn.q_norm.weight", 1, width, 0);
            BLOCK_PARAM(k_norm, "txt.attn.k_norm.weight", 1, width, 0);
        }
        BLOCK_PARAM(ada_w, "txt.adaLN_modulation.1.weight", 2, (last ? 2 : 6) * D, D);
        BLOCK_PARAM(ada_b, "txt.adaLN_modulation.1.bias", 1, (last ? 2 : 6) * D, 0);
    }
#undef PLAIN_BLOCK
#undef BLOCK_PARAM
    int out = dit_patch_values(cfg) * dit_out_channels(cfg);
    ps_unit(&m->ps, false);
    m->f_w = param(m, "final_layer.linear.weight", 2, out, D, 0, 0);
    m->f_b = param(m, "final_layer.linear.bias", 1, out, 0, 0, 0);
    if (!cfg->in_context) {
        m->f_ada_w = param(m, "final_layer.adaLN_modulation.1.weight", 2, 2 * D, D, 0, 0);
        m->f_ada_b = param(m, "final_layer.adaLN_modulation.1.bias", 1, 2 * D, 0, 0, 0);
    }
    int T = dit_tokens(cfg);
    m->pos_embed = (Tensor){.ndim = 3, .shape = {1, T, D}, .size = (size_t)T * D, .name = "pos_embed"};
}

void dit_alloc(DiT *m, bool device, bool ema) {
    ps_alloc(&m->ps, device, ema);
    size_t bytes = m->pos_embed.size * sizeof(real);
    m->pos_embed.data = device ? device_alloc(bytes) : xcalloc(m->pos_embed.size, sizeof(real));
    m->pos_embed.device = device;
}

void dit_create(DiT *m, const DiTConfig *cfg) {
    dit_layout(m, cfg);
    dit_alloc(m, false, false);
}

DiT *dit_place(DiT *host, DiT *dev, bool device) {
    if (!device) return host;
    dit_layout(dev, &host->cfg);
    const ParamStore *h = &host->ps; // split as the host's (--zero)
    dev->ps.shards = h->shards, dev->ps.shard = h->shard, dev->ps.level = h->level;
    dev->ps.hook = h->hook, dev->ps.hook_ctx = h->hook_ctx;
    dit_alloc(dev, true, h->ema != NULL);
    copy_bytes(dev->pos_embed.data, host->pos_embed.data, host->pos_embed.size * sizeof(real));
    dit_copy(dev, host);
    return dev;
}

void dit_copy(DiT *dst, const DiT *src) { ps_copy(&dst->ps, &src->ps); }

void dit_free(DiT *m) {
    if (m->pos_embed.device) device_free(m->pos_embed.data);
    else free(m->pos_embed.data);
    ps_free(&m->ps);
}

static bool plain_linear(const DiTBlock *b, const Tensor *w) {
    return w == b->qkv_w || w == b->proj_w || w == b->fc1_w || w == b->fc2_w;
}

// weights the reference initializes xavier-uniform: the patch embedding and the block linears
// (the text encoder's, and the cross-attention's but its output projection, zero as PixArt-alpha's)
static bool is_xavier(const DiT *m, const Tensor *w) {
    if (w == m->x_w) return true;
    for (int i = 0; i < m->cfg.depth; i++) {
        const DiTBlock *b = &m->blocks[i];
        if (plain_linear(b, w) || (w && (w == b->xq_w || w == b->xkv_w))) return true;
        if (w && plain_linear(&m->txt[i], w)) return true;
    }
    for (int i = 0; i < (m->cfg.text ? m->cfg.text_depth : 0); i++)
        if (plain_linear(&m->text_layers[i], w)) return true;
    return false;
}

static bool is_qk_norm(const DiT *m, const Tensor *w) {
    for (int i = 0; i < m->cfg.depth; i++)
        if (w == m->blocks[i].q_norm || w == m->blocks[i].k_norm || w == m->txt[i].q_norm ||
            w == m->txt[i].k_norm)
            return w != NULL;
    return false;
}

void dit_init(DiT *m, uint64_t seed, double qkv_gain) {
    const DiTConfig *c = &m->cfg;
    for (int t = 0; t < dit_tokens(c) && c->pos == DIT_POS_SINCOS; t++) // rope: the table stays zero
        dit_position(m->pos_embed.data + (size_t)t * c->hidden_size, c, dit_grid(c), t);
    ParamStore *ps = &m->ps;
    for (int u = 0; u < ps->units; u++) { // a unit at a time: a split store has one place a unit
        int end = u + 1 < ps->units ? ps->unit[u + 1].first : ps->n;
        for (int i = ps->unit[u].first; i < end; i++) { // parameter i draws from STREAM_PARAM(i)
            Tensor *w = ps->t[i];
            int fan_out = w->shape[0], fan_in = (int)(w->size / (size_t)fan_out);
            double a = sqrt(6.0 / (fan_in + fan_out));
            if (is_xavier(m, w)) rng_fill_uniform(w->data, w->size, seed, STREAM_PARAM(i), 0, -a, a);
            else if (w == m->t0_w || w == m->t2_w || w == m->y_table || w == m->w_table)
                rng_fill_normal(w->data, w->size, seed, STREAM_PARAM(i), 0, 0.02);
            else if (is_qk_norm(m, w))
                for (size_t k = 0; k < w->size; k++) w->data[k] = 1;
            else memset(w->data, 0, w->size * sizeof(real)); // biases, adaLN-Zero, final layer
        }
        int b = u - dit_block_unit(0);
        if (qkv_gain != 1 && b >= 0 && b < c->depth)
            for (size_t k = 0; k < m->blocks[b].qkv_w->size; k++) m->blocks[b].qkv_w->data[k] *= (real)qkv_gain;
        ps_keep_unit(ps, u, true, true);
    }
}
