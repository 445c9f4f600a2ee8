// plan.c: see plan.h.
#include "plan.h"
#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../parallel/transport/autograd_collectives.h"
#include "budget.h"
#include "../run/allowed.h"
#include "../run/flags.h"
#include "../core/timing.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The memory options a mesh is tried with: each --zero level (above 0 with more than one rank),
// without and with --recompute
static const struct {
    bool recompute;
    int zero;
} memory_options[] = {{false, 0}, {true, 0}, {false, 1}, {true, 1}, {false, 2}, {true, 2}, {false, 3}, {true, 3}};

enum { MAX_ROWS = 256 }; // of a table: meshes x memory options

// The bytes a rank's share of the link carries for one reduce-scatter of `block` bytes a rank over
// P ranks, beyond the formula's (P - 1) blocks. Open MPI (4.1's tuned collectives) reduce-scatters
// blocks of 128 KiB or more over 2 or 3 ranks as a reduce to one rank and a scatter from it: the
// others send it all P blocks, it sends each its own, (P - 1)(P + 1) blocks in all where the
// formula has P (P - 1). On the shaped loopback, whose rate the ranks share, 128 KiB blocks took
// 1.48 times an all-gather of theirs over 2 ranks (4 bytes less: 1.00), 1.33 times over 3. Over 2
// ranks comm_reduce_scatter exchanges the halves itself (the formula's bytes), so only 3 remain.
static double reduce_scatter_extra(int P, double block) {
    return P == 3 && block >= 131072 ? (P - 1.0) / P * block : 0;
}

// The seconds of a ring layer's transfers (`t`: forward or backward) that run while it attends
// (comm_shift_start before a step's attention, its wait after; `flops` the layer's attention):
// forward, each of the P - 1 steps that has a next block hides that block's transfer behind its
// own attention; backward, a step hides the next block's K and V (all but the last step) and the
// sums of dK and dV the step before made (all but the first). Other layouts hide nothing.
static double ring_hidden(const SeqParallel *sp, SpTraffic t, double flops, const PlanRates *rates,
                          const PlanLink *link, bool backward) {
    int P = sp->shard.P;
    if (!sp_layout_row(sp->layout)->overlaps || P < 2) return 0;
    double step = flops / P / rates->attention, shift = t.values * sizeof(real) / link->bandwidth / (P - 1);
    if (!backward) return (P - 1) * fmin(shift, step);
    shift /= 2; // K and V, or dK and dV
    return 2 * fmin(shift, step) + (P - 2) * fmin(2 * shift, step);
}

// ---- the prediction ----------------------------------------------------------------------------
PlanRow plan_predict(const TrainConfig *tc, int ranks, const SpOptions *o, bool recompute, int zero,
                     const PlanRates *rates, const PlanLink *link, double memory) {
    TrainConfig run = *tc;
    run.parallel = *o;
    run.parallel.recompute = recompute, run.parallel.zero = zero;
    const DiTConfig *c = &tc->model;
    RankMemory need;
    char err[512];
    CHECK(!budget_rank_memory(&run, ranks, &need, err, sizeof err), "plan: %s", err); // meshes() ran it
    PlanRow row = {.parallel = *o, .recompute = recompute, .zero = zero, .arena = need.arena,
                   .memory = need.arena + need.weights + need.optimizer + need.ema + need.pos_embed +
                             need.host};
    row.fits = memory <= 0 || row.memory <= memory;
    SeqParallel sp; // rank 0: it holds the most heads
    sp_setup(&sp, NULL, ranks, 0, o, c);
    double images = (double)tc->batch / sp.dp, n = sp.shard.n, T = sp.shard.T_pad, rows = images * n;
    double D = c->hidden_size, M = dit_mlp_hidden(c), L = c->depth, dh = D / c->num_heads;
    double p2 = (double)c->patch_size * c->patch_size, params = need.params;
    // each GEMM runs forward and twice as much backward (2 flops a multiply-add, 3 passes);
    // recompute runs the blocks' forward twice, their adaLN modulation once
    double again = recompute ? 4.0 / 3 : 1;
    double block_gemm = 6 * rows * D * (4 * D + 2 * M) * again + 6 * images * 6 * D * D;
    double gemm = L * block_gemm + 6 * rows * D * p2 * (c->in_channels + dit_out_channels(c)) +
                  6 * images * (2 * D * D + DIT_FREQ_DIM * D + D * D);
    // the attention's queries x keys x heads: a head group of G ranks (all-to-all: all of them,
    // hybrid: U) gives each its G shards' queries for its heads; forward 2 matrix products,
    // backward 5
    int G = sp_head_group(&sp);
    double work = images * n * G * T * dh * seq_heads(c->num_heads, G, 0);
    double attention = L * work * (recompute ? 18 : 14);
    row.compute = gemm / rates->gemm + attention / rates->attention + L * rows * again / rates->rest +
                  params * (zero ? 1.0 / ranks : 1) / rates->optimizer;
    // the layout's exchanges in every block (forward twice with recompute; messages per
    // micro-batch), then the all-reduce of the gradients and of the loss over every rank; with
    // --zero each unit's reduce-scatter and all-gather of its pieces instead, and the norm's
    // all-reduce: at level 2 the blocks' gradients a micro-batch, at level 3 the blocks'
    // parameters twice a micro-batch (forward, backward) and the rest's after the update
    SpTraffic f = sp_layer_traffic(&sp, c, (int)images, false), b = sp_layer_traffic(&sp, c, (int)images, true);
    double passes = recompute ? 2 : 1;
    row.sent = L * (passes * f.values + b.values) * sizeof(real);
    row.messages = L * sp.accum * (passes * f.messages + b.messages);
    double P = ranks, K = sp.accum, R = sizeof(real), rest = need.slice - need.blocks;
    if (ranks > 1 && !zero) {
        row.sent += 2 * (P - 1) / P * (params * R + sizeof(double));
        row.messages += 4 * (P - 1);
    } else if (ranks > 1) {
        double scattered = zero >= 2 ? K * need.blocks + rest : need.slice;
        double gathered = zero >= 3 ? 2 * K * need.blocks + rest : need.slice;
        double calls = zero >= 2 ? (K + (zero >= 3 ? 2 * K : 1)) * L + 4 : 2 * (L + 2);
        row.sent += (P - 1) * (scattered + gathered) * R + 2 * 2 * (P - 1) / P * sizeof(double);
        row.messages += (P - 1) * calls + 4 * (P - 1);
    }
    // what the link carries beyond the bytes sent: the gather layout's backward reduce-scatters
    // dK and dV (a block a micro-batch), --zero 1 the gradients (a slice a rank)
    double wire = row.sent;
    if (sp_layout_row(o->layout)->reduce_scatters_kv)
        wire += L * 2 * sp.accum * reduce_scatter_extra(sp.shard.P, images / sp.accum * n * D * R);
    if (zero) wire += reduce_scatter_extra(ranks, need.slice * R);
    row.comm = row.messages * link->latency + wire / link->bandwidth -
               L * (passes * ring_hidden(&sp, f, 4 * work, rates, link, false) +
                    ring_hidden(&sp, b, 10 * work, rates, link, true));
    sp_free(&sp);
    row.time = row.compute + row.comm;
    return row;
}

static int better(const void *a, const void *b) {
    const PlanRow *x = a, *y = b;
    if (x->fits != y->fits) return x->fits ? -1 : 1;
    return (x->time > y->time) - (x->time < y->time);
}

// The meshes over P ranks per sequence group: each layout, hybrid with every U that divides P
// strictly between 1 and P (U = 1 is the ring, U = P the all-to-all); one rank needs no layout.
// Those that training would refuse (run_refusal: in-context conditioning runs gather and
// all-to-all only, a bug its own layout, ...) are left out.
static int meshes(const TrainConfig *tc, int ranks, int P, SpOptions *out, int max) {
    int k = 0;
    for (int a = 0; a < sp_layouts() && k < max; a++) {
        const SpLayout *row = sp_layout_row((SeqAttention)a);
        int U[64] = {0}, degrees = row->degrees ? row->degrees(P, U, 64) : 1; // U 0: none to take
        for (int d = 0; d < degrees && k < max; d++) {
            TrainConfig run = *tc;
            run.parallel.sp = P, run.parallel.layout = (SeqAttention)a, run.parallel.ulysses = U[d];
            char why[1024];
            if ((P == 1 && a != (int)sp_options_default().layout) || run_refusal(&run, FOR_TRAIN, ranks, why, sizeof why))
                continue;
            out[k++] = run.parallel;
        }
    }
    return k;
}

int plan_rows(const TrainConfig *tc, int ranks, const PlanRates *rates, const PlanLink *link,
              double memory, PlanRow *rows, int max) {
    int k = 0;
    SpOptions o[64];
    for (int P = 1; P <= ranks; P++) {
        if (ranks % P || (tc->parallel.sp && P != tc->parallel.sp)) continue;
        int m = meshes(tc, ranks, P, o, 64);
        for (int i = 0; i < m; i++)
            for (size_t j = 0; j < sizeof memory_options / sizeof *memory_options && k < max; j++) {
                TrainConfig run = *tc;
                run.parallel = o[i];
                run.parallel.recompute = memory_options[j].recompute, run.parallel.zero = memory_options[j].zero;
                char err[1024];
                // on one rank --zero changes nothing; what training refuses (in-context
                // conditioning has no --recompute, a --zero bug its levels) is left out
                if ((ranks > 1 || !memory_options[j].zero) && !run_refusal(&run, FOR_TRAIN, ranks, err, sizeof err))
                    rows[k++] = plan_predict(tc, ranks, &o[i], memory_options[j].recompute,
                                             memory_options[j].zero, rates, link, memory);
            }
    }
    qsort(rows, (size_t)k, sizeof *rows, better);
    return k;
}

// ---- measuring ---------------------------------------------------------------------------------
// Seconds per call of f, every rank of c timing at once: one call to warm up, then `windows`
// windows of calls each until 0.05 s have passed (at least 2, as many as the first call's time
// says); the least window's mean, averaged over the ranks
static double per_call(Comm *c, void (*f)(void *), void *ctx, int windows) {
    double t0 = now_seconds();
    f(ctx);
    double t = now_seconds() - t0;
    comm_all_reduce(c, COMM_DOUBLE, &t, 1); // every rank then makes the same number of calls
    int calls = (int)fmin(fmax(0.05 * c->size / t, 2), 1e5);
    double least = INFINITY;
    for (int w = 0; w < windows; w++) {
        comm_barrier(c);
        t0 = now_seconds();
        for (int i = 0; i < calls; i++) f(ctx);
        least = fmin(least, (now_seconds() - t0) / calls);
    }
    comm_all_reduce(c, COMM_DOUBLE, &least, 1);
    return least / c->size;
}

typedef struct Bench { // buffers of the measured kernels
    int rows, D, OC, M, Tq, Tk, heads, dh;
    size_t params;
    real *a, *b, *w, *dw, *o, *d, *x, *y, *scratch, *stats;
} Bench;

static void gemm_pass(void *ctx) {
    Bench *k = ctx;
    linear_forward(k->o, k->a, k->w, k->w, k->rows, k->D, k->OC);
    linear_backward(k->b, k->dw, k->dw + (size_t)k->OC * k->D, k->o, k->a, k->w, k->rows, k->D, k->OC);
}

static void attention_pass(void *ctx) {
    Bench *k = ctx;
    int w = k->heads * k->dh;
    real *q = k->a, *kk = k->a + (size_t)k->Tq * w, *v = kk + (size_t)k->Tk * w;
    real *dq = k->b, *dk = k->b + (size_t)k->Tq * w, *dv = dk + (size_t)k->Tk * w;
    attention_forward(k->o, k->stats, k->scratch, q, kk, v, NULL, NO_SEGMENTS, 1, k->Tq, k->Tk,
                      k->heads, k->dh);
    attention_backward(dq, dk, dv, k->scratch, k->d, k->o, k->stats, q, kk, v, NULL, NO_SEGMENTS, 1,
                       k->Tq, k->Tk, k->heads, k->dh);
}

// a block's ops that are not GEMMs or the attention, on `rows` tokens
static void rest_pass(void *ctx) {
    Bench *k = ctx;
    int N = k->rows, D = k->D;
    real *mean = k->stats, *rstd = k->stats + N, *shift = k->w, *scale = k->w + D;
    for (int i = 0; i < 2; i++) {
        layernorm_forward(k->o, mean, rstd, k->a, N, D, 1e-6f);
        layernorm_backward(k->b, k->d, k->a, mean, rstd, N, D);
        modulate_forward(k->o, k->a, shift, scale, 1, N, D);
        modulate_backward(k->b, k->dw, k->dw + D, k->d, k->a, scale, 1, N, D);
        gated_add_forward(k->o, k->a, scale, k->d, 1, N, D);
        gated_add_backward(k->b, k->dw, k->x, k->d, scale, k->a, 1, N, D);
    }
    gelu_forward(k->y, k->x, (size_t)N * k->M);
    gelu_backward(k->y, k->x, k->x, (size_t)N * k->M);
    for (int s = 0; s < 3; s++) {
        slice_forward(k->o, k->x, N, 3 * D, s * D, D);
        slice_backward(k->x, k->o, N, 3 * D, s * D, D);
    }
}

static void optimizer_pass(void *ctx) {
    Bench *k = ctx;
    adamw_update(k->a, k->b, k->x, k->y, k->params, 1e-4f, 0.9f, 0.999f, 1e-8f, 0, 1, 1);
    volatile double norm = sum_squares(k->b, k->params);
    (void)norm;
    ema_update(k->o, k->a, k->params, 0.999);
}

static real *filled(size_t n) {
    real *p = xcalloc(n ? n : 1, sizeof(real));
    for (size_t i = 0; i < n; i++) p[i] = (real)(((i * 2654435761u) % 1000) / 1000.0 - 0.5);
    return p;
}

PlanRates plan_measure_rates(const TrainConfig *tc, int ranks, Comm *c) {
    // the shapes of the sequence split over every rank: this rank's tokens of the batch (at most
    // 2048 rows), its queries against the keys (at most 512 x 2048, two heads)
    const DiTConfig *m = &tc->model;
    double T = dit_tokens(m), rows = fmin(fmax(tc->batch * T / ranks, 64), 2048);
    DiT shape;
    dit_layout(&shape, m);
    Bench k = {.rows = (int)rows, .D = m->hidden_size, .OC = 4 * m->hidden_size, .M = dit_mlp_hidden(m),
               .Tq = (int)fmin(fmax(T / ranks, 16), 512), .Tk = (int)fmin(T, 2048),
               .heads = m->num_heads < 2 ? m->num_heads : 2, .dh = m->hidden_size / m->num_heads,
               .params = shape.ps.total < (1 << 22) ? shape.ps.total : (1 << 22)};
    dit_free(&shape);
    size_t wide = (size_t)k.rows * (k.OC > k.M ? k.OC : k.M), att = (size_t)(k.Tq + 2 * k.Tk) * k.heads * k.dh;
    size_t big = wide > att ? wide : att;
    big = big > k.params ? big : k.params;
    k.a = filled(big), k.b = filled(big), k.o = filled(big), k.d = filled(big), k.x = filled(big), k.y = filled(big);
    k.w = filled((size_t)k.OC * k.D + k.OC), k.dw = filled((size_t)k.OC * k.D + k.OC);
    k.stats = filled(2 * (size_t)(k.rows > k.Tq * k.heads ? k.rows : k.Tq * k.heads));
    k.scratch = filled(attention_scratch_count(1, k.Tq, k.Tk, k.heads, k.dh, true));
    PlanRates r;
    r.gemm = 6.0 * k.rows * k.D * k.OC / per_call(c, gemm_pass, &k, 1);
    r.attention = 14.0 * k.Tq * k.Tk * k.heads * k.dh / per_call(c, attention_pass, &k, 1);
    r.rest = k.rows / per_call(c, rest_pass, &k, 1);
    r.optimizer = k.params / per_call(c, optimizer_pass, &k, 1);
    real *bufs[] = {k.a, k.b, k.o, k.d, k.x, k.y, k.w, k.dw, k.stats, k.scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    return r;
}

typedef struct Shift {
    Comm *c;
    real *out, *in;
    size_t n;
} Shift;

static void shift_pass(void *ctx) {
    Shift *s = ctx;
    comm_shift(s->c, s->out, s->in, s->n * sizeof(real), 1);
}

PlanLink plan_measure_link(Comm *c) {
    // latency: one value to the next rank; bandwidth: blocks from 64 KiB up, doubled until a step
    // takes 50 ms or 16 MiB (every rank decides alike: per_call's times are the ranks' mean), from
    // the last doubling's extra time, which leaves out what every step pays whatever its size (a
    // shaper's burst, the latency); when the first block already takes that long, from its time
    // less the latency
    enum { MOST = 1 << 22 };
    Shift s = {c, xcalloc(MOST, sizeof(real)), xcalloc(MOST, sizeof(real)), 1};
    // the latency: the least of 3 windows, as ranks that wait for cores other jobs hold make a
    // window's one-value messages take milliseconds (0.5 to 9.6 ms in single windows, 11 to 216 us
    // in the least of 3, with 12 other jobs on 2 cores; 5 to 20 us with none)
    PlanLink link = {.latency = per_call(c, shift_pass, &s, 3)};
    double t = 0, before = -1; // before: the time of n / 2 values, once measured
    for (s.n = 16384; s.n <= MOST; s.n *= 2) {
        if ((t = per_call(c, shift_pass, &s, 1)) >= 0.05 || s.n == MOST) break;
        before = t;
    }
    link.bandwidth = before >= 0 && t > before ? s.n / 2 * sizeof(real) / (t - before)
                                               : s.n * sizeof(real) / fmax(t - link.latency, 1e-9);
    free(s.out), free(s.in);
    return link;
}

// ---- the table ---------------------------------------------------------------------------------
// "--sp 4 --sp-attention hybrid --ulysses-degree 2"
static const char *mesh_flags(const SpOptions *o, char *buf, size_t len) {
    int n = snprintf(buf, len, "--sp %d --sp-attention %s", o->sp, seq_attention_name(o->layout));
    if (o->ulysses) snprintf(buf + n, len - (size_t)n, " --ulysses-degree %d", o->ulysses);
    return buf;
}

static void print_rows(const PlanRow *rows, int k) {
    printf("%4s %9s %5s %12s %12s %9s %10s %9s %9s  %s\n", "rank", "recompute", "zero", "memory MiB",
           "sent MiB", "messages", "compute s", "comm s", "step s", "mesh");
    for (int i = 0; i < k; i++) {
        const PlanRow *r = &rows[i];
        char mesh[128];
        printf("%4d %9s %5d %12.1f %12.3f %9.0f %10.4f %9.4f %9.4f  %s%s\n", i + 1,
               r->recompute ? "yes" : "no", r->zero, r->memory / 1048576.0, r->sent / 1048576.0,
               r->messages, r->compute, r->comm, r->time, mesh_flags(&r->parallel, mesh, sizeof mesh),
               r->fits ? "" : " (does not fit)");
    }
}

// The mesh flags --sp-attention auto and plan leave to the planner, and the runs it does not model;
// `or` says what else the user may do
static void refuse_mesh_flags(const TrainConfig *tc, const char *who, const char *or) {
    if (tc->parallel.ulysses)
        usage_error("%s picks --ulysses-degree itself; leave it out (--sp fixes the sequence group)", who);
    if (tc->parallel.cuda)
        usage_error("%s measures the CPU's rates; the device's are not modelled yet: drop --device "
                    "cuda, or give --sp-attention a layout", who);
    if (tc->parallel.exact)
        usage_error("%s predicts the default mode; --exact's sums travel as 64-bit integers and its "
                    "GEMMs run on canonical blocks, which it does not model: drop --exact%s", who, or);
}

// No mesh of `ranks` can run these settings (plan_rows found none): the sentence of the default
// layout's run, as a usage error of `who`
static _Noreturn void refuse_every_mesh(const TrainConfig *tc, int ranks, const char *who) {
    TrainConfig run = *tc;
    run.parallel.layout = sp_options_default().layout;
    char why[1024];
    if (!run_refusal(&run, FOR_TRAIN, ranks, why, sizeof why))
        snprintf(why, sizeof why, "no mesh of %d ranks can run this batch and model", ranks);
    usage_error("%s: %s", who, why);
}

void plan_choose(TrainConfig *tc, Comm *c) {
    refuse_mesh_flags(tc, "--sp-attention auto", ", or give --sp-attention a layout");
    PlanRates rates = plan_measure_rates(tc, c->size, c);
    PlanLink link = {1e300, 0}; // one rank sends nothing
    if (c->size > 1) link = plan_measure_link(c);
    static PlanRow rows[MAX_ROWS];
    Memory have = budget_memory(false, comm_node_size(c));
    int all = plan_rows(tc, c->size, &rates, &link, have.bytes / have.sharing, rows, MAX_ROWS), k = 0;
    if (!all) refuse_every_mesh(tc, c->size, "--sp-attention auto");
    for (int i = 0; i < all; i++) // the meshes with the run's own --recompute and --zero, in order
        if (rows[i].recompute == tc->parallel.recompute && rows[i].zero == tc->parallel.zero) rows[k++] = rows[i];
    if (!k || !rows[0].fits)
        usage_error("--sp-attention auto: no mesh of %d ranks %s; train/train plan --ranks %d shows "
                    "them", c->size, k ? "fits this machine's memory" : "runs with this --recompute and --zero",
                    c->size);
    tc->parallel = rows[0].parallel;
    char mesh[128], next[160] = "";
    if (k > 1)
        snprintf(next, sizeof next, "; next: %s, %.3f s", mesh_flags(&rows[1].parallel, mesh, sizeof mesh),
                 rows[1].time);
    mesh_flags(&rows[0].parallel, mesh, sizeof mesh);
    print0(c, "--sp-attention auto: %s, the fastest of %d meshes the planner predicts (%.3f s/step: "
           "compute %.3f, communication %.3f; %.1f MiB per rank)%s; link %s: %.3g MB/s per rank, "
           "%.3g us a message\n", mesh, k, rows[0].time, rows[0].compute, rows[0].comm,
           rows[0].memory / 1048576.0, next, c->size > 1 ? "measured" : "unused",
           c->size > 1 ? link.bandwidth / 1e6 : 0, link.latency * 1e6);
}

// ---- train plan --------------------------------------------------------------------------------
static void help(void) {
    printf("usage: [mpirun -np N] train/train plan [--ranks N] [--measure | --link-bandwidth MB/s "
           "--link-latency US] [training flags]\n"
           "Predicts, for every mesh of N ranks (--sp, --sp-attention, --ulysses-degree), the peak\n"
           "memory per rank, the bytes each rank sends per step and the step time, ranks them and\n"
           "prints the command line of the best. The compute rates (GEMM, attention, the rest) are\n"
           "measured here, by every rank of the job at once: under mpirun -np N ranks share this\n"
           "machine as the run's ranks would.\n"
           "  --ranks N              ranks to plan for (default: the job's ranks)\n"
           "  --measure              measure the link between the job's ranks (mpirun -np 2 or more)\n"
           "  --link-bandwidth MB/s  a rank's bandwidth while every rank sends (10^6 bytes/s)\n"
           "  --link-latency US      microseconds a message waits before its bytes\n"
           "  training flags         the model, --input-size, --batch, --grad-accum, --sp (fixes the\n"
           "                         sequence group); see train/train --help\n" EVERY_COMMAND_HELP);
}

int plan_main(int argc, char **argv, Comm *c) {
    int ranks = 0, np = 0;
    double bandwidth = 0, latency = -1;
    bool measure = false;
    char **pass = xcalloc((size_t)argc + 1, sizeof *pass); // the training flags
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (c->rank == 0) help();
            return free(pass), 0;
        } else if (!strcmp(argv[i], "--ranks")) ranks = flag_int("--ranks", flag_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(argv[i], "--measure")) measure = true;
        else if (!strcmp(argv[i], "--link-bandwidth"))
            bandwidth = 1e6 * flag_double("--link-bandwidth", flag_value(argc, argv, &i), 1e-6, 1e9);
        else if (!strcmp(argv[i], "--link-latency"))
            latency = 1e-6 * flag_double("--link-latency", flag_value(argc, argv, &i), 0, 1e9);
        else if (!strcmp(argv[i], "--sp-attention") || !strcmp(argv[i], "--resume"))
            usage_error("plan tries every layout of a fresh run; leave out %s", argv[i]);
        else pass[np++] = argv[i];
    }
    if (!ranks) ranks = c->size;
    if (measure && (bandwidth > 0 || latency >= 0))
        usage_error("plan: --measure measures the link that --link-bandwidth and --link-latency "
                    "give; pass one or the other");
    if (measure && c->size < 2)
        usage_error("plan --measure measures the link between the job's ranks: start it with mpirun "
                    "-np %d train/train plan --measure ..., or give --link-bandwidth and "
                    "--link-latency", ranks > 1 ? ranks : 2);
    if (!measure && ranks > 1 && (bandwidth <= 0 || latency < 0))
        usage_error("plan needs the link of %d ranks: --link-bandwidth MB/s and --link-latency US, "
                    "or --measure under mpirun -np %d", ranks, ranks);
    TrainConfig tc;
    if (!train_config_parse(&tc, np, pass, c->rank)) return free(pass), 0;
    refuse_mesh_flags(&tc, "plan", "");
    tc.parallel.layout = SP_AUTO; // what train refuses whatever its layout, plan refuses too
    run_check(&tc, FOR_TRAIN, ranks);
    if (dry_run) {
        print0(c, "dry run: plan would measure this machine's rates and rank every mesh of %d rank%s "
               "for %s\ndry run: every flag checked; nothing run\n", ranks, ranks > 1 ? "s" : "", tc.preset);
        return free(pass), 0;
    }
    PlanRates rates = plan_measure_rates(&tc, ranks, c);
    PlanLink link = measure ? plan_measure_link(c) : (PlanLink){bandwidth > 0 ? bandwidth : 1e300, latency > 0 ? latency : 0};
    static PlanRow rows[MAX_ROWS];
    Memory have = budget_memory(false, ranks); // the ranks share this machine
    double memory = have.bytes / have.sharing;
    int k = plan_rows(&tc, ranks, &rates, &link, memory, rows, MAX_ROWS);
    if (!k) refuse_every_mesh(&tc, ranks, "plan"); // as --sp-attention auto does
    if (c->rank == 0) {
        printf("plan: %s, %d tokens per image, batch %d, %d rank%s; rates per rank (measured, %d "
               "rank%s at once): GEMM %.3g GFLOP/s, attention %.3g GFLOP/s, rest %.3g M tokens/s "
               "per block, optimizer %.3g M parameters/s; link %s: %.3g MB/s per rank, %.3g us a "
               "message; memory %.1f GiB per rank\n", tc.preset, dit_tokens(&tc.model), tc.batch,
               ranks, ranks > 1 ? "s" : "", c->size, c->size > 1 ? "s" : "", rates.gemm / 1e9,
               rates.attention / 1e9, rates.rest / 1e6, rates.optimizer / 1e6,
               measure ? "measured" : "given", ranks > 1 ? link.bandwidth / 1e6 : 0, link.latency * 1e6,
               memory / 1073741824.0);
        print_rows(rows, k);
        if (tc.model.in_context)
            printf("in-context conditioning runs with gather or all-to-all and without --recompute: "
                   "the ring, hybrid and --recompute are left out\n");
        if (!rows[0].fits) printf("no mesh fits: lower --batch, --input-size or the model size\n");
        else {
            char mesh[128], lead[32] = "";
            if (ranks > 1) snprintf(lead, sizeof lead, "mpirun -np %d ", ranks);
            printf("best: %strain/train", lead);
            for (int i = 0; i < np; i++) // the flags given, but --sp, which the mesh names
                if (!strcmp(pass[i], "--sp")) i++;
                else printf(" %s", pass[i]);
            printf(" %s%s%s\n", mesh_flags(&rows[0].parallel, mesh, sizeof mesh),
                   rows[0].recompute && !tc.parallel.recompute ? " --recompute" : "",
                   rows[0].zero && !tc.parallel.zero ? (const char *[]){"", " --zero 1", " --zero 2", " --zero 3"}[rows[0].zero] : "");
        }
    }
    free(pass);
    return 0;
}
