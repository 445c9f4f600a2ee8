// params.c: see params.h.
#include "params.h"
#include "tape.h"
#include "../kernels/run.h"
#include "../core/check.h"
#include "../core/device.h"
#include <stdlib.h>
#include <string.h>

Tensor *ps_add(ParamStore *ps, const char *name, int ndim, const int *shape) {
    CHECK(ps->params == NULL, "ps_add('%s') after ps_alloc: register every parameter first", name);
    CHECK(ps->n < MAX_PARAMS, "too many parameters (at most %d)", MAX_PARAMS);
    CHECK(ps_find(ps, name) == NULL, "parameter '%s' is registered twice", name);
    Tensor *t = xcalloc(1, sizeof(Tensor));
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] > 0, "parameter '%s' dim %d must be positive, got %d", name, i, shape[i]);
        t->shape[i] = shape[i];
        t->size *= (size_t)shape[i];
    }
    char *copy = xmalloc(strlen(name) + 1);
    strcpy(copy, name);
    t->name = copy;
    t->requires_grad = true;
    ps->offset[ps->n] = ps->total;
    ps->t[ps->n++] = t;
    ps->total += t->size;
    return t;
}

void ps_unit(ParamStore *ps, bool scoped) {
    CHECK(ps->params == NULL && ps->units < PS_MAX_UNITS && (ps->units || ps->n == 0),
          "ps_unit: units are registered before ps_alloc, from the first parameter on, at most %d",
          PS_MAX_UNITS);
    ps->unit[ps->units++] = (PsUnit){.first = ps->n, .scoped = scoped};
}

// The reals of the flat buffer: parameters, gradients, the slice's when split, the two moments
// and the EMA
static size_t flat_size(const ParamStore *ps, bool ema) {
    size_t own = ps->level >= 3 ? ps->chunk : 0;
    return ps->padded + ps->work + (ps->shards > 1) * ps->chunk + 2 * ps->chunk + own +
           ema * (own ? own : ps->padded);
}

// Points the slices and the tensors into flat (flat_size reals) on the store's side
static void point(ParamStore *ps, real *flat, bool ema) {
    ps->params = flat;
    ps->grads = flat + ps->padded;
    ps->slice = ps->shards > 1 ? ps->grads + ps->work : ps->grads;
    ps->m = ps->grads + ps->work + (ps->shards > 1) * ps->chunk;
    ps->v = ps->m + ps->chunk;
    ps->own = ps->level >= 3 ? ps->v + ps->chunk : ps->params;
    ps->ema = ema ? ps->v + ps->chunk + (ps->level >= 3) * ps->chunk : NULL;
    for (int u = 0; u < ps->units; u++) {
        const PsUnit *U = &ps->unit[u];
        int end = u + 1 < ps->units ? ps->unit[u + 1].first : ps->n;
        for (int i = U->first; i < end; i++) {
            size_t within = ps->offset[i] - U->at;
            ps->t[i]->data = ps->params + ps->offset[i];
            ps->t[i]->grad = ps->grads + U->grad + within;
            ps->t[i]->device = ps->device;
            if (ps->exact_mem) ps->t[i]->exact = &ps->sums[U->sums], ps->t[i]->exact_at = within;
        }
    }
}

// n zero reals on the host or the device
static real *zeros(size_t n, bool device) {
    if (!device) return xcalloc(n + 1, sizeof(real));
    real *p = device_alloc(n * sizeof(real));
    zero_bytes(p, n * sizeof(real));
    return p;
}

static void free_flat(real *flat, bool device) {
    if (device) device_free(flat);
    else free(flat);
}

// Level 2's scoped units share the gradients' place after every other unit's; level 3's share two
// places of the whole buffer after every other unit's, unit u the (u mod 2)th: a block and the next
void ps_split(ParamStore *ps, int shard, int shards, int level) {
    if (!ps->units) ps->unit[ps->units++] = (PsUnit){.first = 0};
    ps->shards = shards, ps->shard = shard, ps->level = shards > 1 ? level : 0;
    ps->padded = ps->chunk = ps->work = 0;
    size_t shared = 0; // the largest scoped unit, level 2 and 3
    for (int u = 0; u < ps->units; u++) {
        PsUnit *U = &ps->unit[u];
        U->slice = ps->chunk, U->len = 0;
        for (int i = U->first; i < (u + 1 < ps->units ? ps->unit[u + 1].first : ps->n); i++)
            U->len += ps->t[i]->size;
        U->piece = (U->len + (size_t)shards - 1) / (size_t)shards;
        size_t whole = (size_t)shards * U->piece;
        ps->chunk += U->piece;
        if (ps->level >= 2 && U->scoped) shared = whole > shared ? whole : shared;
        else U->grad = ps->work, ps->work += whole;
        if (ps->level < 3 || !U->scoped) U->at = ps->padded, ps->padded += whole;
    }
    ps->n_sums = 0;
    for (int u = 0; u < ps->units; u++) { // the shared places last
        PsUnit *U = &ps->unit[u];
        if (ps->level >= 2 && U->scoped) U->grad = ps->work;
        else U->sums = ps->n_sums++;
        if (ps->level >= 3 && U->scoped) U->at = ps->padded + (size_t)(u % 2) * shared;
    }
    for (int u = 0; u < ps->units; u++)
        if (ps->level >= 2 && ps->unit[u].scoped) ps->unit[u].sums = ps->n_sums;
    if (shared) ps->n_sums++;
    ps->work += shared;
    if (ps->level >= 3) ps->padded += 2 * shared;
    for (int u = 0; u < ps->units; u++)
        for (int i = ps->unit[u].first, at = 0; i < (u + 1 < ps->units ? ps->unit[u + 1].first : ps->n); i++)
            ps->offset[i] = ps->unit[u].at + at, at += ps->t[i]->size;
}

real *ps_piece(ParamStore *ps, int u) {
    const PsUnit *U = &ps->unit[u];
    return ps->level >= 3 ? ps->own + U->slice : ps->params + U->at + (size_t)ps->shard * U->piece;
}

void ps_unpad(const ParamStore *ps, real *out, const real *whole) {
    for (int u = 0, at = 0; u < ps->units; at += ps->unit[u++].len)
        copy_bytes(out + at, whole + ps->unit[u].at, ps->unit[u].len * sizeof(real));
}

size_t ps_own_len(const ParamStore *ps) { return ps->level >= 3 ? ps->chunk : ps->padded; }

size_t ps_weight_reals(const ParamStore *ps) {
    return ps->padded + ps->work + (ps->shards > 1) * ps->chunk + (ps->level >= 3) * ps->chunk;
}

void ps_alloc(ParamStore *ps, bool device, bool ema) {
    ps_split(ps, ps->shards ? ps->shard : 0, ps->shards ? ps->shards : 1, ps->level);
    ps->device = device;
    point(ps, zeros(flat_size(ps, ema), device), ema);
}

size_t ps_piece_of(const ParamStore *ps, int u, size_t *from) {
    const PsUnit *U = &ps->unit[u];
    *from = (size_t)ps->shard * U->piece;
    size_t left = *from < U->len ? U->len - *from : 0; // the last pieces hold padding only, or partly
    return left < U->piece ? left : U->piece;
}

void ps_shard(ParamStore *ps, int shard, int shards, int level) {
    CHECK(ps->params && ps->shards == 1 && !ps->exact_mem && shard >= 0 && shard < shards && level >= 1,
          "ps_shard: the store is not allocated whole, or shard %d of %d does not exist", shard, shards);
    ParamStore old = *ps;
    ps_split(ps, shard, shards, level);
    real *flat = zeros(flat_size(ps, old.ema), ps->device);
    point(ps, flat, old.ema);
    for (int u = 0; u < ps->units; u++) {
        const PsUnit *U = &ps->unit[u], *O = &old.unit[u];
        size_t from, mine = ps_piece_of(ps, u, &from);
        if (ps->level < 3 || !U->scoped) copy_bytes(ps->params + U->at, old.params + O->at, U->len * sizeof(real));
        if (ps->level >= 3) copy_bytes(ps->own + U->slice, old.params + O->at + from, mine * sizeof(real));
        if (old.ema && ps->level >= 3) copy_bytes(ps->ema + U->slice, old.ema + O->at + from, mine * sizeof(real));
        else if (old.ema) copy_bytes(ps->ema + U->at, old.ema + O->at, U->len * sizeof(real));
        copy_bytes(ps->m + U->slice, old.m + O->at + from, mine * sizeof(real));
        copy_bytes(ps->v + U->slice, old.v + O->at + from, mine * sizeof(real));
    }
    free_flat(old.params, ps->device);
}

void ps_keep_unit(ParamStore *ps, int u, bool params, bool ema) {
    const PsUnit *U = &ps->unit[u];
    size_t from, mine = ps_piece_of(ps, u, &from);
    const real *values = ps->params + U->at;
    if (params && ps->level >= 3) copy_bytes(ps->own + U->slice, values + from, mine * sizeof(real));
    if (ema && ps->ema && ps->level >= 3) copy_bytes(ps->ema + U->slice, values + from, mine * sizeof(real));
    else if (ema && ps->ema) copy_bytes(ps->ema + U->at, values, U->len * sizeof(real));
}

void ps_copy(ParamStore *dst, const ParamStore *src) {
    CHECK(dst->n == src->n && dst->total == src->total && !dst->ema == !src->ema &&
          dst->shards == src->shards && dst->shard == src->shard && dst->level == src->level,
          "ps_copy: the stores hold different parameters (%d, %zu values%s, %d shards vs %d, %zu%s, "
          "%d)", dst->n, dst->total, dst->ema ? " and an EMA" : "", dst->shards, src->n, src->total,
          src->ema ? " and an EMA" : "", src->shards);
    copy_bytes(dst->params, src->params, flat_size(src, src->ema) * sizeof(real)); // in one piece
}

void ps_free(ParamStore *ps) {
    for (int i = 0; i < ps->n; i++) {
        free((char *)ps->t[i]->name);
        free(ps->t[i]);
    }
    free(ps->exact_mem);
    free_flat(ps->params, ps->device);
    *ps = (ParamStore){0};
}

Tensor *ps_find(const ParamStore *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->t[i]->name, name) == 0) return ps->t[i];
    return NULL;
}

void ps_use_exact(ParamStore *ps) {
    CHECK(ps->params, "--exact needs the parameters allocated");
    if (ps->exact_mem) return;
    size_t n[PS_MAX_UNITS + 1], bytes = 0; // each place's sums, then the slice's
    int places = ps->n_sums;
    for (int u = 0; u < ps->units; u++) n[ps->unit[u].sums] = ps->unit[u].piece * ps->shards;
    if (ps->shards > 1) n[places++] = ps->chunk;
    for (int k = 0; k < places; k++) bytes += exact_bytes(n[k]);
    char *mem = ps->exact_mem = xmalloc(bytes);
    for (int k = 0; k < places; k++) ps->sums[k] = exact_view(mem, n[k]), mem += exact_bytes(n[k]);
    point(ps, ps->params, ps->ema != NULL);
}

ExactSum *ps_unit_sums(ParamStore *ps, int u) { return &ps->sums[ps->unit[u].sums]; }

void ps_exact_slice(ParamStore *ps) {
    ExactSum *s = &ps->sums[ps->shards > 1 ? ps->n_sums : 0];
    real *g = ps->device ? xmalloc(ps->chunk * sizeof(real)) : ps->slice; // the sums are on the host
    if (ps->shards > 1) exact_result(g, s, 0, ps->chunk);
    else // a whole store: each unit's sums
        for (int u = 0; u < ps->units; u++)
            exact_result(g + ps->unit[u].at, ps_unit_sums(ps, u), 0, ps->unit[u].len);
    if (g != ps->slice) copy_bytes(ps->slice, g, ps->chunk * sizeof(real)), free(g);
}

void ps_zero_grad(ParamStore *ps) {
    if (ps->exact_mem)
        for (int k = 0; k < ps->n_sums + (ps->shards > 1); k++) exact_clear(&ps->sums[k]);
    zero_bytes(ps->grads, ps->work * sizeof(real));
    if (ps->shards > 1) zero_bytes(ps->slice, ps->chunk * sizeof(real));
    for (int i = 0; i < ps->n; i++) ps->t[i]->got_grad = false;
}

void ps_check_reached(const ParamStore *ps) {
    for (int i = 0; i < ps->n; i++)
        CHECK(ps->t[i]->got_grad,
              "no gradient reached parameter '%s': it is not used by the forward pass that "
              "produced the loss (is it wired into the model, with gradients enabled?)",
              ps->t[i]->name);
}

// ---- scoped units on the tape ------------------------------------------------------------------
// The node ps_open or ps_close records: x passed through; backward calls the hook (iarg: the
// unit, and whether it opens), then hands the gradient on
static void unit_bwd(Node *nd) {
    ParamStore *ps = (ParamStore *)nd->ptr;
    ps->hook(ps, nd->iarg[0], nd->iarg[1], true, ps->hook_ctx);
    if (node_grad_take(nd, 0)) return;
    real *dx = node_grad(nd, 0);
    if (dx) RUN(nd->out->device, add_rows, dx, nd->out->size, nd->out->grad, nd->out->size, nd->out->size, 1);
}

static Tensor *pass(ParamStore *ps, Tape *tp, int u, Tensor *x, bool open) {
    CHECK(u >= 0 && u < ps->units && ps->unit[u].scoped, "unit %d is not a scoped unit of the store", u);
    if (!ps->hook) return x;
    ps->hook(ps, u, open, false, ps->hook_ctx);
    if (!tp->grad_enabled || !x->requires_grad) return x;
    Tensor *y = arena_alloc(arena_host(tp->arena), sizeof *y);
    *y = (Tensor){.ndim = x->ndim, .size = x->size, .data = x->data, .device = x->device};
    memcpy(y->shape, x->shape, sizeof y->shape);
    Node *nd = tape_record(tp, open ? "open unit" : "close unit", unit_bwd, y, 1, x);
    nd->iarg[0] = u, nd->iarg[1] = !open; // backward runs the other way
    nd->ptr = ps;
    return y;
}

Tensor *ps_open(ParamStore *ps, Tape *tp, int u, Tensor *x) { return pass(ps, tp, u, x, true); }
Tensor *ps_close(ParamStore *ps, Tape *tp, int u, Tensor *x) { return pass(ps, tp, u, x, false); }
