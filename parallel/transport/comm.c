// comm.c: see comm.h.
#include "comm.h"
#include "../../core/check.h"
#include "../../core/cpu.h"
#include "../../core/device.h"
#include "../../kernels/kernels.h"
#include <mpi.h>
#ifdef USE_NCCL
#include <nccl.h>
#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) FATAL("%s failed: %s", #call, ncclGetErrorString(r_));              \
    } while (0)
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#ifdef REAL_F64
#define MPI_REAL_T MPI_DOUBLE
#define NCCL_REAL ncclFloat64
#else
#define MPI_REAL_T MPI_FLOAT
#define NCCL_REAL ncclFloat32
#endif

// ---- the kinds of values (comm.h): size, addition, MPI's type and sum (set by comm_init) ------
static void add_reals(void *out, const void *a, const void *b, size_t n) {
    real *o = out;
    const real *x = a, *y = b;
    for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

static void add_doubles(void *out, const void *a, const void *b, size_t n) {
    double *o = out;
    const double *x = a, *y = b;
    for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

static void add_fronts(void *out, const void *a, const void *b, size_t n) { exact_fronts_add(out, a, b, n); }
static void add_parts(void *out, const void *a, const void *b, size_t n) { exact_parts_add(out, a, b, n); }

static struct {
    const char *name; // in --check-collectives' messages
    size_t size;
    void (*add)(void *out, const void *a, const void *b, size_t n); // out = a + b
    MPI_Datatype type;
    MPI_Op sum;
} kinds[COMM_KINDS] = {
    [COMM_REAL] = {"real", sizeof(real), add_reals},
    [COMM_DOUBLE] = {"double", sizeof(double), add_doubles},
    [COMM_FRONTS] = {"exact front", sizeof(ExactFront), add_fronts},
    [COMM_EXACT] = {"exact part", sizeof(ExactPart), add_parts},
};

size_t comm_kind_size(CommKind k) { return kinds[k].size; }

// MPI's sums of the exact kinds: inout = in + inout
static void mpi_add_fronts(void *in, void *inout, int *n, MPI_Datatype *t) {
    (void)t, add_fronts(inout, in, inout, (size_t)*n);
}
static void mpi_add_parts(void *in, void *inout, int *n, MPI_Datatype *t) {
    (void)t, add_parts(inout, in, inout, (size_t)*n);
}

static void make_kinds(void) {
    static bool made;
    if (made) return;
    made = true;
    kinds[COMM_REAL].type = MPI_REAL_T, kinds[COMM_REAL].sum = MPI_SUM;
    kinds[COMM_DOUBLE].type = MPI_DOUBLE, kinds[COMM_DOUBLE].sum = MPI_SUM;
    MPI_User_function *add[2] = {mpi_add_fronts, mpi_add_parts};
    for (int i = 0; i < 2; i++) { // contiguous bytes; the additions commute
        CommKind k = i ? COMM_EXACT : COMM_FRONTS;
        MPI_CHECK(MPI_Type_contiguous((int)kinds[k].size, MPI_BYTE, &kinds[k].type));
        MPI_CHECK(MPI_Type_commit(&kinds[k].type));
        MPI_CHECK(MPI_Op_create(add[i], 1, &kinds[k].sum));
    }
}

// The exact sums' host buffers (their fronts, the slow ones' indices, their parts), and the
// partner's half of a two-rank sum (pair_sum), kept from call to call and grown when a call needs
// more: the gradients' parts are 10 times their bytes, and fresh pages every step would cost their
// faults and zeroing. Freed by comm_finalize.
enum { KEPT_FRONTS, KEPT_SLOW, KEPT_PARTS, KEPT_PAIR, KEPT_COUNT };
static struct {
    void *p;
    size_t bytes;
} kept_buffers[KEPT_COUNT];

static void *kept(int which, size_t bytes) {
    if (bytes > kept_buffers[which].bytes) {
        free(kept_buffers[which].p);
        kept_buffers[which].p = xmalloc(bytes + 1), kept_buffers[which].bytes = bytes;
    }
    return kept_buffers[which].p;
}

// --check-collectives: the group's ranks compare this call's fingerprint first (check_collectives.h)
static void check(const Comm *c, const char *op, CommSite at, size_t n, const char *value) {
    if (c->size > 1) check_collective(c->channel, c->who, op, at, n, value, false);
}

void comm_stop_all(const char *msg, int code) {
    int started = 0, done = 0, world_rank = 0, world_size = 1;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) {
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    }
    if (world_size <= 1) { // nobody to stop, or no MPI at all: spare the user MPI's abort banner
        fprintf(stderr, "error: %s\n", msg);
        comm_finalize();
        exit(code);
    }
    fprintf(stderr, "error (rank %d of %d): %s\n", world_rank, world_size, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static void abort_all(const char *msg) { comm_stop_all(msg, 1); }

// MPI granted MPI_THREAD_FUNNELED: the attention kernels may call it on the main thread while a
// ring step is in flight (comm_shift_start); mpi_thread is that thread, which started MPI
static bool funneled;
static pthread_t mpi_thread;

void comm_init(Comm *world, int *argc, char ***argv) {
    int ready = 0, level = MPI_THREAD_SINGLE;
    MPI_Initialized(&ready);
    // one process that no launcher started talks to nobody: Open MPI then starts no daemon beside
    // it and loads its shared-memory transport instead of probing UCX's devices (0.2-0.3 s less
    // for every `train/train --help`, usage error, compare-sized run); a user's own setting wins
    if (!ready && !getenv("OMPI_COMM_WORLD_RANK") && !getenv("PMIX_RANK")) {
        setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
        setenv("OMPI_MCA_pml", "ob1", 0);
    }
    if (!ready) MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &level));
    else MPI_Query_thread(&level);
    funneled = level >= MPI_THREAD_FUNNELED, mpi_thread = pthread_self();
    *world = (Comm){.group = MPI_COMM_WORLD};
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);
    check_collectives_init();
    world->channel = check_collectives_channel(MPI_COMM_WORLD, world->who, sizeof world->who);
    if (!funneled && world->size > 1 && world->rank == 0)
        fprintf(stderr, "warning: MPI grants thread level %d, below MPI_THREAD_FUNNELED (%d): the "
                "ring's transfers move only while each step waits for them, not during its attention; "
                "an MPI built with thread support overlaps them\n", level, MPI_THREAD_FUNNELED);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    set_fatal_handler(abort_all);
    make_kinds();
}

void comm_split_at(Comm *parent, int color, int key, Comm *out, CommSite at) {
    check(parent, "split", at, 1, "group");
    *out = (Comm){0};
    MPI_CHECK(MPI_Comm_split(parent->group, color, key, &out->group));
    MPI_Comm_rank(out->group, &out->rank);
    MPI_Comm_size(out->group, &out->size);
    out->channel = check_collectives_channel(out->group, out->who, sizeof out->who);
}

void comm_free_nccl(Comm *c) {
#ifdef USE_NCCL
    if (c->nccl) ncclCommDestroy(c->nccl);
#endif
    c->nccl = NULL;
}

void comm_free(Comm *c) {
    comm_free_nccl(c);
    if (c->channel != MPI_COMM_NULL && c->group != MPI_COMM_WORLD) MPI_Comm_free(&c->channel);
    if (c->group != MPI_COMM_WORLD) MPI_Comm_free(&c->group);
}

#ifdef USE_NCCL
bool comm_have_nccl(void) { return true; }

bool comm_use_nccl_at(Comm *c, CommSite at) {
    check(c, "nccl setup", at, 1, "id");
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->group));
    ncclComm_t nc;
    NCCL_CHECK(ncclCommInitRank(&nc, c->size, id, c->rank));
    c->nccl = nc;
    return true;
}

// NCCL serves this call: the group has it and the buffer is on the device
static bool over_nccl(const Comm *c, const void *buf) { return c->nccl && device_pointer(buf); }
#else
bool comm_have_nccl(void) { return false; }
bool comm_use_nccl_at(Comm *c, CommSite at) { return (void)c, (void)at, false; }
#endif

// MPI's view of a call's buffers: the buffers themselves on the host, else host copies of them
// (host-staged), the input copied in before the call and the output copied back after it
typedef struct Staged {
    const void *in;
    void *out, *dev_out;
    size_t out_bytes;
} Staged;

static Staged stage(const void *in, size_t in_bytes, void *out, size_t out_bytes) {
    if (!device_pointer(in) && !device_pointer(out)) return (Staged){in, out, NULL, 0};
    char *host = xmalloc((in == out ? out_bytes : in_bytes + out_bytes) + 1);
    copy_bytes(host, in, in_bytes);
    return (Staged){host, in == out ? host : host + in_bytes, out, out_bytes};
}

static void unstage(Staged *s) {
    if (!s->dev_out) return;
    copy_bytes(s->dev_out, s->out, s->out_bytes);
    free((void *)s->in);
}

void comm_finalize(void) {
    int running = 0, ended = 0;
    MPI_Initialized(&running);
    MPI_Finalized(&ended);
    if (running && !ended) check_collectives_finalize();
    for (int i = 0; i < KEPT_COUNT; i++) free(kept_buffers[i].p), kept_buffers[i].p = NULL, kept_buffers[i].bytes = 0;
    int started = 0, done = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) MPI_Finalize(); // compare and verify run without MPI
}

static int count(size_t n) {
    CHECK(n <= 0x7fffffff, "a collective of %zu elements is larger than MPI's int count", n);
    return (int)n;
}

// A group of one rank: each collective is a copy (on the device, where the buffers are; no
// staging) or nothing
static bool alone(const Comm *c, void *out, const void *in, size_t bytes) {
    if (c->size > 1) return false;
    if (out != in) copy_bytes(out, in, bytes);
    return true;
}

#ifdef USE_NCCL
// NCCL's type of a kind's values (device buffers hold reals and doubles only)
static ncclDataType_t nccl_type(CommKind k) {
    CHECK(k == COMM_REAL || k == COMM_DOUBLE, "NCCL sums reals and doubles, not exact sums (host memory)");
    return k == COMM_REAL ? NCCL_REAL : ncclFloat64;
}
#endif

void comm_all_gather_at(Comm *c, real *out, const real *in, size_t n, CommSite at) {
    check(c, "all_gather", at, n, kinds[COMM_REAL].name);
    if (alone(c, out, in, n * sizeof(real))) return;
    c->bytes_sent += (size_t)(c->size - 1) * n * sizeof(real);
#ifdef USE_NCCL
    if (over_nccl(c, in)) {
        NCCL_CHECK(ncclAllGather(in, out, n, NCCL_REAL, c->nccl, 0));
        return;
    }
#endif
    size_t all = (size_t)c->size * n * sizeof(real);
    if (in == out + (size_t)c->rank * n) { // in place (on the host, or a host copy of all of out)
        Staged s = stage(out, all, out, all);
        MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_REAL_T, s.out, count(n), MPI_REAL_T, c->group));
        unstage(&s);
        return;
    }
    Staged s = stage(in, n * sizeof(real), out, all);
    MPI_CHECK(MPI_Allgather(s.in, count(n), MPI_REAL_T, s.out, count(n), MPI_REAL_T, c->group));
    unstage(&s);
}

void comm_all_gather_start_at(Comm *c, CommGather *g, real *out, const real *in, size_t n, CommSite at) {
    g->posted = false;
    if (c->size == 1 || device_pointer(in) || device_pointer(out)) return comm_all_gather_at(c, out, in, n, at);
    check(c, "all_gather", at, n, kinds[COMM_REAL].name);
    c->bytes_sent += (size_t)(c->size - 1) * n * sizeof(real);
    MPI_CHECK(MPI_Iallgather(in, count(n), MPI_REAL_T, out, count(n), MPI_REAL_T, c->group, &g->req));
    g->posted = true;
}

void comm_all_gather_wait(CommGather *g) {
    if (g->posted) MPI_CHECK(MPI_Wait(&g->req, MPI_STATUS_IGNORE));
    g->posted = false;
}

void comm_gather_at(Comm *c, real *out, const real *in, size_t n, CommSite at) {
    check(c, "gather", at, n, kinds[COMM_REAL].name);
    if (alone(c, out, in, n * sizeof(real))) return;
    CHECK(!device_pointer(in) && !device_pointer(out), "comm_gather: host buffers only");
    if (c->rank) c->bytes_sent += n * sizeof(real);
    MPI_CHECK(MPI_Gather(in, count(n), MPI_REAL_T, out, count(n), MPI_REAL_T, 0, c->group));
}

// ---- a reduce-scatter over two ranks ----------------------------------------------------------
// Each rank sums its own part: mine + the partner's copy of it, which arrives in one exchange.
// The kinds' additions commute, so every element is the same a + b that any MPI algorithm
// computes for two ranks: the same bits as MPI's sum. It is here for speed: Open MPI 4.1's
// MPI_Reduce_scatter_block took 29 us for the 106 KB of a K or V gradient of the default model on
// 2 ranks, this 17 us (the fastest of 400 calls each, 2-core AMD EPYC). Its MPI_Allreduce of the
// gradients (1.3 MB) was faster than the same exchange of halves (123 us against 195), so that
// stays MPI's.
static void pair_sum(Comm *c, CommKind k, void *out, const void *mine, const void *theirs, size_t n) {
    int other = 1 - c->rank;
    void *got = kept(KEPT_PAIR, n * kinds[k].size);
    MPI_CHECK(MPI_Sendrecv(theirs, count(n), kinds[k].type, other, 0, got, count(n), kinds[k].type,
                           other, 0, c->group, MPI_STATUS_IGNORE));
    kinds[k].add(out, mine, got, n);
}

void comm_reduce_scatter_at(Comm *c, CommKind k, void *out, const void *in, size_t n, CommSite at) {
    check(c, "reduce_scatter", at, n, kinds[k].name);
    size_t size = kinds[k].size, part = n * size;
    if (alone(c, out, in, part)) return;
    c->bytes_sent += (size_t)(c->size - 1) * part;
#ifdef USE_NCCL
    if (over_nccl(c, in)) {
        NCCL_CHECK(ncclReduceScatter(in, out, n, nccl_type(k), ncclSum, c->nccl, 0));
        return;
    }
#endif
    size_t mine = (size_t)c->rank * part, theirs = (size_t)(1 - c->rank) * part; // theirs: 2 ranks
    if (out == (const char *)in + mine) { // in place (on the host, or a host copy of all of in)
        Staged s = stage(in, c->size * part, (void *)in, c->size * part);
        char *all = s.out;
        if (c->size == 2) pair_sum(c, k, all + mine, all + mine, all + theirs, n);
        else {
            MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, all, count(n), kinds[k].type, kinds[k].sum, c->group));
            memmove(all + mine, all, part); // the sum lands first
        }
        unstage(&s);
        return;
    }
    Staged s = stage(in, c->size * part, out, part);
    if (c->size == 2) pair_sum(c, k, s.out, (const char *)s.in + mine, (const char *)s.in + theirs, n);
    else MPI_CHECK(MPI_Reduce_scatter_block(s.in, s.out, count(n), kinds[k].type, kinds[k].sum, c->group));
    unstage(&s);
}

void comm_all_reduce_at(Comm *c, CommKind k, void *buf, size_t n, CommSite at) {
    check(c, "all_reduce", at, n, kinds[k].name);
    size_t bytes = n * kinds[k].size;
    if (alone(c, buf, buf, bytes)) return;
    c->bytes_sent += 2 * (size_t)(c->size - 1) * bytes / (size_t)c->size;
#ifdef USE_NCCL
    if (over_nccl(c, buf)) {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(k), ncclSum, c->nccl, 0));
        return;
    }
#endif
    Staged s = stage(buf, bytes, buf, bytes);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, s.out, count(n), kinds[k].type, kinds[k].sum, c->group));
    unstage(&s);
}

// ---- exact sums through the reductions above --------------------------------------------------
void comm_all_reduce_sums_at(Comm *c, ExactSum *s, size_t n, CommSite at) {
    CHECK(n <= s->n, "comm_all_reduce_sums: %zu of %zu sums", n, s->n);
    if (c->size == 1) return;
    ExactFront *fronts = kept(KEPT_FRONTS, n * sizeof *fronts);
    exact_fronts(fronts, s, 0, n);
    comm_all_reduce_at(c, COMM_FRONTS, fronts, n, at);
    size_t *slow = kept(KEPT_SLOW, n * sizeof *slow), m = exact_take_fronts(s, fronts, n, slow);
    if (!m) return;
    ExactPart *parts = kept(KEPT_PARTS, m * sizeof *parts);
    exact_parts(parts, s, 0, slow, m);
    comm_all_reduce_at(c, COMM_EXACT, parts, m, at);
    exact_put_parts(s, 0, slow, parts, m);
}

void comm_reduce_scatter_sums_at(Comm *c, ExactSum *s, size_t n, CommSite at) {
    size_t all = n * (size_t)c->size, mine = (size_t)c->rank * n;
    CHECK(all <= s->n, "comm_reduce_scatter_sums: %d slices of %zu of %zu sums", c->size, n, s->n);
    if (c->size == 1) return;
    ExactPart *parts = kept(KEPT_PARTS, all * sizeof *parts);
    exact_parts(parts, s, 0, NULL, all);
    comm_reduce_scatter_at(c, COMM_EXACT, parts + mine, parts, n, at);
    exact_put_parts(s, mine, NULL, parts + mine, n);
}

void comm_all_reduce_sum_at(Comm *c, CommSum v, size_t n, CommSite at) {
    if (v.exact) comm_all_reduce_sums_at(c, v.exact, n, at);
    else comm_all_reduce_at(c, v.kind, v.plain, n, at);
}

void comm_all_reduce_double_at(Comm *c, double *v, ExactSum *exact, CommSite at) {
    comm_all_reduce_sum_at(c, (CommSum){COMM_DOUBLE, v, exact}, 1, at);
    if (exact) exact_result_double(v, exact, 0, 1);
}

void comm_reduce_scatter_sum_at(Comm *c, CommSum v, size_t n, CommSite at) {
    if (v.exact) comm_reduce_scatter_sums_at(c, v.exact, n, at);
    else comm_reduce_scatter_at(c, v.kind, (char *)v.plain + (size_t)c->rank * n * comm_kind_size(v.kind), v.plain,
                                n, at);
}

// ---- ring steps ---------------------------------------------------------------------------------
void comm_shift_at(Comm *c, void *out, const void *in, size_t bytes, int shift, CommSite at) {
    check(c, "shift", at, bytes, "byte");
    int to = ((c->rank + shift) % c->size + c->size) % c->size;
    int from = ((c->rank - shift) % c->size + c->size) % c->size;
    if (alone(c, out, in, bytes)) return;
    if (to != c->rank) c->bytes_sent += bytes;
#ifdef USE_NCCL
    if (over_nccl(c, in)) {
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(in, bytes, ncclUint8, to, c->nccl, 0));
        NCCL_CHECK(ncclRecv(out, bytes, ncclUint8, from, c->nccl, 0));
        NCCL_CHECK(ncclGroupEnd());
        return;
    }
#endif
    Staged s = stage(in, bytes, out, bytes);
    MPI_CHECK(MPI_Sendrecv(s.in, count(bytes), MPI_BYTE, to, 0, s.out, count(bytes), MPI_BYTE, from, 0,
                           c->group, MPI_STATUS_IGNORE));
    unstage(&s);
}

// DIT_RING_BLOCKING=1: each ring step whole in comm_shift_start, nothing overlaps (the overlap
// bench's baseline; the same bits)
static bool ring_blocking(void) {
    const char *e = getenv("DIT_RING_BLOCKING");
    return e && !strcmp(e, "1");
}

const char *comm_env_error(void) {
    static char why[256];
    const char *e = getenv("DIT_RING_BLOCKING");
    if (!e || !*e || !strcmp(e, "0") || !strcmp(e, "1")) return NULL;
    snprintf(why, sizeof why, "DIT_RING_BLOCKING=%.64s is neither 0 nor 1: set 1 for a ring whose "
             "transfers finish before the attention (the overlap bench's baseline), or unset it", e);
    return why;
}

// The ring steps in flight, which the attention kernels move on between their tiles (comm.h)
enum { IN_FLIGHT_MAX = 4 };
static CommShift *in_flight[IN_FLIGHT_MAX];
static int in_flight_n;

// The kernels call this on thread 0 of their team, which inside a parallel region of jobs (--exact's
// attention) every thread is: MPI is called from its own thread alone
static void progress_in_flight(void) {
    if (!pthread_equal(pthread_self(), mpi_thread)) return;
    for (int i = 0; i < in_flight_n; i++) {
        CommShift *s = in_flight[i];
        int done = s->done;
        if (!done) MPI_CHECK(MPI_Testall(s->n, s->req, &done, MPI_STATUSES_IGNORE));
        s->done = done;
    }
}

void comm_shift_start_at(Comm *c, CommShift *s, void *out, const void *in, size_t bytes, int shift, CommSite at) {
    s->n = 0, s->done = false;
    if (c->size == 1 || ring_blocking() || device_pointer(in) || device_pointer(out)) {
        comm_shift_at(c, out, in, bytes, shift, at);
        s->done = true;
        return;
    }
    int to = ((c->rank + shift) % c->size + c->size) % c->size;
    int from = ((c->rank - shift) % c->size + c->size) % c->size;
    check(c, "shift", at, bytes, "byte");
    c->bytes_sent += bytes;
    MPI_CHECK(MPI_Irecv(out, count(bytes), MPI_BYTE, from, 1, c->group, &s->req[0]));
    MPI_CHECK(MPI_Isend(in, count(bytes), MPI_BYTE, to, 1, c->group, &s->req[1]));
    s->n = 2;
    if (!funneled) return;
    CHECK(in_flight_n < IN_FLIGHT_MAX, "comm_shift_start: more than %d ring steps in flight", IN_FLIGHT_MAX);
    in_flight[in_flight_n++] = s;
    attention_progress = progress_in_flight;
}

void comm_shift_wait(CommShift *s) {
    if (!s->n) return;
    MPI_CHECK(MPI_Waitall(s->n, s->req, MPI_STATUSES_IGNORE));
    s->n = 0;
    for (int i = 0; i < in_flight_n; i++)
        if (in_flight[i] == s) in_flight[i] = in_flight[--in_flight_n];
    if (!in_flight_n) attention_progress = NULL;
}

void comm_all_to_all_at(Comm *c, real *out, const size_t *out_counts, const real *in,
                        const size_t *in_counts, CommSite at) {
    if (c->size > 1) { // the counts are the values this rank sends: ranks may send different counts
        size_t sent = 0;
        for (int r = 0; r < c->size; r++) sent += in_counts[r];
        check_collective(c->channel, c->who, "all_to_all", at, sent, kinds[COMM_REAL].name, true);
    }
    if (alone(c, out, in, in_counts[0] * sizeof(real))) return;
    int P = c->size, *n = xmalloc(4 * (size_t)P * sizeof(int)); // counts and offsets, in and out
    int *in_n = n, *in_at = n + P, *out_n = n + 2 * P, *out_at = n + 3 * P;
    size_t in_off = 0, out_off = 0;
    for (int r = 0; r < P; r++) {
        in_n[r] = count(in_counts[r]), in_at[r] = count(in_off), in_off += in_counts[r];
        out_n[r] = count(out_counts[r]), out_at[r] = count(out_off), out_off += out_counts[r];
        if (r != c->rank) c->bytes_sent += in_counts[r] * sizeof(real);
    }
#ifdef USE_NCCL
    if (over_nccl(c, in)) { // one send and one receive per rank, grouped
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < P; r++) {
            NCCL_CHECK(ncclSend(in + in_at[r], in_counts[r], NCCL_REAL, r, c->nccl, 0));
            NCCL_CHECK(ncclRecv(out + out_at[r], out_counts[r], NCCL_REAL, r, c->nccl, 0));
        }
        NCCL_CHECK(ncclGroupEnd());
        free(n);
        return;
    }
#endif
    Staged s = stage(in, in_off * sizeof(real), out, out_off * sizeof(real));
    MPI_CHECK(MPI_Alltoallv(s.in, in_n, in_at, MPI_REAL_T, s.out, out_n, out_at, MPI_REAL_T, c->group));
    unstage(&s);
    free(n);
}

void comm_barrier_at(Comm *c, CommSite at) {
    check(c, "barrier", at, 0, "");
    MPI_CHECK(MPI_Barrier(c->group));
}

// The space-separated word of a that holds the first character where a and b differ.
static void first_difference(const char *a, const char *b, char *out, size_t len) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    while (i > 0 && a[i - 1] != ' ') i--;
    snprintf(out, len, "%.*s", (int)strcspn(a + i, " "), a + i);
}

void comm_check_same_at(Comm *c, const char *what, const char *text, CommSite at) {
    check(c, "check_same", at, 1, "text");
    int len = (int)strlen(text) + 1, max = 0;
    MPI_CHECK(MPI_Allreduce(&len, &max, 1, MPI_INT, MPI_MAX, c->group));
    char *root = xcalloc((size_t)max, 1), *other = xcalloc((size_t)max, 1);
    memcpy(root, text, (size_t)len);
    MPI_CHECK(MPI_Bcast(root, max, MPI_CHAR, 0, c->group));
    int differs = strcmp(text, root) != 0 ? c->rank : c->size, first = 0;
    MPI_CHECK(MPI_Allreduce(&differs, &first, 1, MPI_INT, MPI_MIN, c->group));
    if (first < c->size) { // every rank learns what the first differing rank has, and says it
        memcpy(other, text, (size_t)len);
        MPI_CHECK(MPI_Bcast(other, max, MPI_CHAR, first, c->group));
        char theirs[256], ours[256], msg[1024];
        first_difference(other, root, theirs, sizeof theirs);
        first_difference(root, other, ours, sizeof ours);
        snprintf(msg, sizeof msg, "ranks disagree on the %s: rank %d has %s where rank 0 has %s; "
                 "start every rank with the same arguments", what, first, theirs, ours);
        comm_stop_all(msg, 2); // bad arguments: a usage error's exit code
    }
    free(root);
    free(other);
}

void comm_agree_cpu_at(Comm *c, CommSite at) {
    check(c, "agree_cpu", at, 2, "int");
    const CpuPlan *p = cpu_plan();
    int mine[2] = {p->width, p->bq}, least[2];
    MPI_CHECK(MPI_Allreduce(mine, least, 2, MPI_INT, MPI_MIN, c->group));
    cpu_use(least[0], least[1], 2 * least[1]);
}

int comm_node_size_at(const Comm *c, CommSite at) { return comm_node_place_at(c, NULL, at); }

int comm_node_place_at(const Comm *c, int *local_rank, CommSite at) {
    check(c, "node_place", at, 1, "group");
    int n = 1, r = 0;
    MPI_Comm node;
    if (c->size > 1 &&
        MPI_Comm_split_type(c->group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        MPI_Comm_rank(node, &r);
        MPI_Comm_free(&node);
    }
    if (local_rank) *local_rank = r;
    return n;
}

void print0(const Comm *c, const char *fmt, ...) {
    if (c->rank) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void comm_print_peak_memory_at(Comm *c, CommSite at) {
    check(c, "print_peak_memory", at, 1, "double");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mine = ru.ru_maxrss / 1024.0, most = mine; // kB
    MPI_CHECK(MPI_Reduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, 0, c->group));
    print0(c, "process: peak resident memory %.1f MiB on the largest rank (the libraries and MPI's "
           "buffers included)\n", most);
}
