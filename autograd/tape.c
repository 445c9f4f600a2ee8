// tape.c: see tape.h.
#include "tape.h"
#include "../core/check.h"
#include "../core/device.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Tape tape_create(Arena *a) { return (Tape){.arena = a, .grad_enabled = true}; }

void tape_free(Tape *tp) {
    free(tp->nodes);
    free(tp->views);
    *tp = (Tape){0};
}

Node *tape_record(Tape *tp, const char *op, BackwardFn fn, Tensor *out, int n_in, ...) {
    CHECK(n_in <= NODE_MAX_IN, "op %s has %d inputs; at most %d are supported", op, n_in,
          NODE_MAX_IN);
    Tensor *in[NODE_MAX_IN] = {0};
    bool needed = false;
    va_list ap;
    va_start(ap, n_in);
    for (int k = 0; k < n_in; k++) {
        in[k] = va_arg(ap, Tensor *);
        needed |= in[k] && in[k]->requires_grad;
    }
    va_end(ap);
    out->requires_grad = needed && tp->grad_enabled;
    if (!out->requires_grad) return NULL;
    if (tp->n == tp->cap) {
        tp->cap = tp->cap ? 2 * tp->cap : 256;
        tp->nodes = xrealloc(tp->nodes, (size_t)tp->cap, sizeof(Node));
    }
    Node *n = &tp->nodes[tp->n++];
    *n = (Node){.op = op, .backward = fn, .arena = tp->arena, .out = out, .exact = tp->exact};
    memcpy(n->in, in, sizeof in);
    return n;
}

Tensor *tape_name(Tape *tp, Tensor *t, const char *fmt, ...) {
    if (!tp->watch) return t;
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *name = arena_alloc(arena_host(tp->arena), strlen(buf) + 1);
    t->name = strcpy(name, buf);
    tp->watch(tp, t, false, tp->watch_ctx);
    if (t->base) { // its gradient: with its base's (run_backward)
        if (tp->n_views == tp->cap_views) {
            tp->cap_views = tp->cap_views ? 2 * tp->cap_views : 64;
            tp->views = xrealloc(tp->views, (size_t)tp->cap_views, sizeof(Tensor *));
        }
        tp->views[tp->n_views++] = t;
    }
    return t;
}

// Marks input k as reached, for the exact path that adds into the parameter's ExactSum instead
ExactSum *node_exact(Node *n, int k) {
    Tensor *t = n->in[k];
    if (!t || !t->requires_grad || !t->exact) return NULL;
    for (Tensor *u = t; u; u = u->base) u->got_grad = true;
    return t->exact;
}

real *node_grad(Node *n, int k) {
    Tensor *t = n->in[k];
    if (!t || !t->requires_grad) return NULL;
    for (Tensor *u = t; u; u = u->base) u->got_grad = true;
    return tensor_grad(n->arena, t);
}

// Gradients of intermediate results die once their producer's backward has run. Backward keeps
// the gradient buffers it allocates as a stack, in arena order, and pops dead ones off the top of
// the arena, so it holds about one block's gradients at a time instead of all of them. Leaves'
// gradients (and anything below them) stay; a view's gradient is part of its base's.
typedef struct Live {
    size_t start; // arena offset of the buffer
    Tensor *t;    // whose gradient it is (a base, never a view)
    bool dead;
} Live;

static Tensor *root_of(Tensor *t) {
    while (t->base) t = t->base;
    return t;
}

static void push(Live *stack, int *top, Arena *a, Tensor *t) {
    Live e = {.start = (size_t)((uint8_t *)t->grad - a->base), .t = t};
    int i = (*top)++;
    for (; i > 0 && stack[i - 1].start > e.start; i--) stack[i] = stack[i - 1]; // keep arena order
    stack[i] = e;
}

bool node_grad_take(Node *n, int k) {
    Tensor *t = n->in[k], *o = n->out;
    if (!t || !t->requires_grad || t->grad || t->base || o->base || !o->grad || t->size != o->size)
        return false;
    t->got_grad = true;
    t->grad = o->grad;
    return true;
}

// A watched tape: the gradients of the views named of `base`, complete now (their base's producer
// is next), the last named first
static void watch_views(Tape *tp, const Tensor *base) {
    for (int i = tp->n_views - 1; i >= 0; i--) {
        Tensor *v = tp->views[i];
        if (v->base != base || !base->grad) continue;
        v->grad = base->grad + (v->data - base->data);
        tp->watch(tp, v, true, tp->watch_ctx);
    }
}

// The tape in reverse from out, whose gradient is set; `owned`: the buffer is backward's to free
static void run_backward(Tape *tp, Tensor *out, bool owned) {
    CHECK(out->requires_grad,
          "backward: the output does not depend on anything that requires a gradient; "
          "mark the parameters or inputs with requires_grad and keep gradients enabled");
    Arena *a = tp->arena;
    Live *stack = xmalloc(((size_t)tp->n * NODE_MAX_IN + 1) * sizeof(Live));
    int top = 0;
    if (owned) push(stack, &top, a, root_of(out));
    for (int i = tp->n - 1; i >= 0; i--) {
        Node *n = &tp->nodes[i];
        if (!n->out->grad) continue;
        bool had[NODE_MAX_IN];
        for (int k = 0; k < NODE_MAX_IN; k++) had[k] = !n->in[k] || root_of(n->in[k])->grad;
        if (tp->watch && n->out->name && n->out->size > 1) tp->watch(tp, n->out, true, tp->watch_ctx);
        if (tp->watch && !n->out->base) watch_views(tp, n->out);
        n->backward(n);
        Tensor *heir = NULL; // the input that took over the output's buffer (node_grad_take)
        for (int k = 0; k < NODE_MAX_IN; k++) {
            Tensor *r = had[k] ? NULL : root_of(n->in[k]);
            bool seen = false; // two inputs may share a base
            for (int j = 0; j < k; j++) seen |= !had[j] && root_of(n->in[j]) == r;
            if (r && r->grad == n->out->grad && !n->out->base) heir = r;
            else if (r && r->grad && !seen) push(stack, &top, a, r);
        }
        if (n->out->base) continue; // a view's gradient lives as long as its base's
        for (int j = top - 1; j >= 0; j--)
            if (stack[j].t == n->out) {
                if (heir) stack[j].t = heir;
                else stack[j].dead = true;
                break;
            }
        if (heir) n->out->grad = NULL;
        while (top > 0 && stack[top - 1].dead) {
            arena_release(a, stack[--top].start);
            stack[top].t->grad = NULL;
        }
    }
    free(stack);
}

void backward_from(Tape *tp, Tensor *out, const real *dout) {
    bool fresh = !root_of(out)->grad;
    copy_bytes(tensor_grad(tp->arena, out), dout, out->size * sizeof(real)); // host dout, onto the device too
    run_backward(tp, out, fresh);
}

void backward_given(Tape *tp, Tensor *out) {
    CHECK(out->grad, "backward_given: the output has no gradient");
    run_backward(tp, out, false);
}

void backward(Tape *tp, Tensor *loss) {
    char buf[64];
    CHECK(loss->size == 1,
          "backward: the loss must be a scalar but has shape %s; reduce it first (e.g. mse_loss)",
          tensor_shape_str(loss, buf, sizeof buf));
    real one = 1;
    backward_from(tp, loss, &one);
}
