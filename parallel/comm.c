// comm.c: see comm.h.
#include "comm.h"
#include "../core/check.h"
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef REAL_F64
#define MPI_REAL_T MPI_DOUBLE
#else
#define MPI_REAL_T MPI_FLOAT
#endif

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

void comm_init(Comm *world, int *argc, char ***argv) {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) MPI_CHECK(MPI_Init(argc, argv));
    *world = (Comm){.group = MPI_COMM_WORLD};
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    set_fatal_handler(abort_all);
}

void comm_split(Comm *parent, int color, int key, Comm *out) {
    *out = (Comm){0};
    MPI_CHECK(MPI_Comm_split(parent->group, color, key, &out->group));
    MPI_Comm_rank(out->group, &out->rank);
    MPI_Comm_size(out->group, &out->size);
}

void comm_free(Comm *c) {
    if (c->group != MPI_COMM_WORLD) MPI_Comm_free(&c->group);
}

void comm_finalize(void) {
    int started = 0, done = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) MPI_Finalize(); // compare and verify run without MPI
}

static int count(size_t n) {
    CHECK(n <= 0x7fffffff, "a collective of %zu elements is larger than MPI's int count", n);
    return (int)n;
}

void comm_all_gather(Comm *c, real *out, const real *in, size_t n) {
    c->bytes_sent += (size_t)(c->size - 1) * n * sizeof(real);
    MPI_CHECK(MPI_Allgather(in, count(n), MPI_REAL_T, out, count(n), MPI_REAL_T, c->group));
}

void comm_reduce_scatter(Comm *c, real *out, const real *in, size_t n) {
    c->bytes_sent += (size_t)(c->size - 1) * n * sizeof(real);
    MPI_CHECK(MPI_Reduce_scatter_block(in, out, count(n), MPI_REAL_T, MPI_SUM, c->group));
}

void comm_all_reduce(Comm *c, real *buf, size_t n) {
    c->bytes_sent += 2 * (size_t)(c->size - 1) * n * sizeof(real) / (size_t)c->size;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count(n), MPI_REAL_T, MPI_SUM, c->group));
}

void comm_all_reduce_double(Comm *c, double *buf, size_t n) {
    c->bytes_sent += 2 * (size_t)(c->size - 1) * n * sizeof(double) / (size_t)c->size;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count(n), MPI_DOUBLE, MPI_SUM, c->group));
}

void comm_shift(Comm *c, real *out, const real *in, size_t n, int shift) {
    int to = ((c->rank + shift) % c->size + c->size) % c->size;
    int from = ((c->rank - shift) % c->size + c->size) % c->size;
    if (to != c->rank) c->bytes_sent += n * sizeof(real);
    MPI_CHECK(MPI_Sendrecv(in, count(n), MPI_REAL_T, to, 0, out, count(n), MPI_REAL_T, from, 0,
                           c->group, MPI_STATUS_IGNORE));
}

void comm_all_to_all(Comm *c, real *out, const size_t *out_counts, const real *in,
                     const size_t *in_counts) {
    int P = c->size, *n = xmalloc(4 * (size_t)P * sizeof(int)); // counts and offsets, in and out
    int *in_n = n, *in_at = n + P, *out_n = n + 2 * P, *out_at = n + 3 * P;
    size_t in_off = 0, out_off = 0;
    for (int r = 0; r < P; r++) {
        in_n[r] = count(in_counts[r]), in_at[r] = count(in_off), in_off += in_counts[r];
        out_n[r] = count(out_counts[r]), out_at[r] = count(out_off), out_off += out_counts[r];
        if (r != c->rank) c->bytes_sent += in_counts[r] * sizeof(real);
    }
    MPI_CHECK(MPI_Alltoallv(in, in_n, in_at, MPI_REAL_T, out, out_n, out_at, MPI_REAL_T, c->group));
    free(n);
}

void comm_barrier(Comm *c) {
    (void)c;
    MPI_CHECK(MPI_Barrier(c->group));
}

// The space-separated word of a that holds the first character where a and b differ.
static void first_difference(const char *a, const char *b, char *out, size_t len) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    while (i > 0 && a[i - 1] != ' ') i--;
    snprintf(out, len, "%.*s", (int)strcspn(a + i, " "), a + i);
}

void comm_check_same(Comm *c, const char *what, const char *text) {
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

int comm_node_size(const Comm *c) {
    int n = 1;
    MPI_Comm node;
    if (c->size > 1 &&
        MPI_Comm_split_type(c->group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        MPI_Comm_free(&node);
    }
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
