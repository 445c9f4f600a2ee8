// comm.h: the raw collectives (MPI, NCCL) on plain buffers, not differentiated
// (autograd_collectives.h makes autograd ops of them). A communicator owns its group: the world,
// or a group split from it (sequence-parallel and data-parallel groups), and every call goes over
// that group.
// Every collective counts the bytes this rank sends, as a ring implementation would: (P-1)/P of
// the gathered or reduced data, so communication volume can be checked against a formula.
// Buffers may be host or device memory (core/device.h). Device buffers go over NCCL when the
// communicator has it (comm_use_nccl: every rank its own GPU), else over MPI through host copies
// (host-staged): the same collectives either way.
// Errors on any rank abort the whole job with the message (comm_init installs that handler).
#pragma once
#include "../../core/exact.h"
#include "check_collectives.h"
#include "../../core/real.h"
#include <stdbool.h>
#include <mpi.h>
#include <stddef.h>

typedef struct Comm {
    MPI_Comm group;    // the ranks this communicator talks to
    int rank, size;    // this rank's place in the group, and the group's size
    size_t bytes_sent; // since comm_init or the last reset
    void *nccl;        // its NCCL communicator (ncclComm_t) once comm_use_nccl ran; else NULL
    MPI_Comm channel;  // --check-collectives: its fingerprints' (check_collectives.h); else MPI_COMM_NULL
    char who[64];      // its ranks in the check's messages
} Comm;

// Every collective below is a macro that passes its call site (COMM_HERE) to the function of its
// name with _at, for --check-collectives (check_collectives.h) to name it.

// NULL when the environment's DIT_RING_BLOCKING is unset, empty, 0 or 1; else the sentence that
// names it and the fix (main stops every subcommand with it)
const char *comm_env_error(void);

void comm_init(Comm *world, int *argc, char ***argv); // MPI's world
// The group of the ranks of `parent` that pass the same color, ordered by key (MPI_Comm_split).
void comm_split_at(Comm *parent, int color, int key, Comm *out, CommSite at);
#define comm_split(parent, color, key, out) comm_split_at(parent, color, key, out, COMM_HERE)
void comm_free(Comm *c); // a split group (not the world), and its NCCL communicator
// Device buffers of this group go over NCCL from now on: rank 0's unique id is broadcast over MPI
// (collective). Every rank must have its own GPU; false (nothing changed) in builds without NCCL.
bool comm_use_nccl_at(Comm *c, CommSite at);
#define comm_use_nccl(c) comm_use_nccl_at(c, COMM_HERE)
void comm_free_nccl(Comm *c); // back to MPI only (NCCL's communicator freed)
bool comm_have_nccl(void); // this build has NCCL
void comm_finalize(void);
// Says msg on this rank ("error (rank r of n): msg") and ends every rank with exit code `code`:
// a rank that stopped alone would leave the others waiting in a collective. Without MPI, or with
// one rank, it prints "error: msg" and exits.
_Noreturn void comm_stop_all(const char *msg, int code);
// out (size * n) = the n values of every rank, in rank order; in may be out + rank * n (in place)
void comm_all_gather_at(Comm *c, real *out, const real *in, size_t n, CommSite at);
#define comm_all_gather(c, out, in, n) comm_all_gather_at(c, out, in, n, COMM_HERE)
// comm_all_gather in two halves, so that work runs while the values travel (a block's parameters
// while the block before it computes): comm_all_gather_start posts it (MPI_Iallgather; device
// buffers make the whole gather in it), comm_all_gather_wait completes it; until then neither
// buffer may be touched. in must not lie in out.
typedef struct CommGather {
    MPI_Request req;
    bool posted;
} CommGather;
void comm_all_gather_start_at(Comm *c, CommGather *g, real *out, const real *in, size_t n, CommSite at);
#define comm_all_gather_start(c, g, out, in, n) comm_all_gather_start_at(c, g, out, in, n, COMM_HERE)
void comm_all_gather_wait(CommGather *g);
// The same into rank 0's out only (the other ranks' out is not used); host memory
void comm_gather_at(Comm *c, real *out, const real *in, size_t n, CommSite at);
#define comm_gather(c, out, in, n) comm_gather_at(c, out, in, n, COMM_HERE)
// What a reduction's values are: each kind has its size, its MPI type and sum (comm.c's table),
// and an addition for the sums this file makes itself. The default runs sum reals and doubles;
// --exact sums exact sums on their own (exact.h), the same values through the same calls: whole
// (COMM_EXACT), or first their fronts alone (COMM_FRONTS, comm_all_reduce_sums). The exact kinds
// are host memory; the others may be device memory (NCCL or host-staged).
typedef enum {
    COMM_REAL,   // real
    COMM_DOUBLE, // double
    COMM_FRONTS, // ExactFront: fronts add while they stay a front, else NaN
    COMM_EXACT,  // ExactPart: added exactly
    COMM_KINDS
} CommKind;
size_t comm_kind_size(CommKind k); // bytes of a value
// out (n) = sum over ranks of their in[rank * n .. (rank + 1) * n); out may be in + rank * n (in
// place: the rest of in is then overwritten). Two ranks exchange the halves and add them here
// (the kind's addition); more go through MPI_Reduce_scatter_block (or NCCL).
void comm_reduce_scatter_at(Comm *c, CommKind k, void *out, const void *in, size_t n, CommSite at);
#define comm_reduce_scatter(c, k, out, in, n) comm_reduce_scatter_at(c, k, out, in, n, COMM_HERE)
// buf (n) = sum over ranks, in place
void comm_all_reduce_at(Comm *c, CommKind k, void *buf, size_t n, CommSite at);
#define comm_all_reduce(c, k, buf, n) comm_all_reduce_at(c, k, buf, n, COMM_HERE)
// Exact sums (host memory) through those two, in place, with the same bits for any number of
// ranks and any split of the terms; n counts as it does for the reals. All-reduced, s's first n:
// the fronts first (COMM_FRONTS, 10 bytes a value), then whole (COMM_EXACT) only the values some
// rank holds limbs of, or whose fronts do not add in a front.
void comm_all_reduce_sums_at(Comm *c, ExactSum *s, size_t n, CommSite at);
#define comm_all_reduce_sums(c, s, n) comm_all_reduce_sums_at(c, s, n, COMM_HERE)
// Reduce-scattered whole (COMM_EXACT): of s's first size * n sums, this rank's [rank * n,
// (rank + 1) * n) hold the sums over every rank; the other elements are left as they are
void comm_reduce_scatter_sums_at(Comm *c, ExactSum *s, size_t n, CommSite at);
#define comm_reduce_scatter_sums(c, s, n) comm_reduce_scatter_sums_at(c, s, n, COMM_HERE)
// The values of one sum, in one form: plain values of a kind (COMM_REAL, device or host memory;
// COMM_DOUBLE) or, under --exact, their exact sums (host memory). The two calls below take either,
// so that a sum's count, slice and group are written once for the plain run and the exact one,
// and --exact checks the line the plain run uses
typedef struct CommSum {
    CommKind kind;   // plain's
    void *plain;     // when exact is NULL
    ExactSum *exact; // --exact
} CommSum;
// v's first n values summed over the ranks, in place
void comm_all_reduce_sum_at(Comm *c, CommSum v, size_t n, CommSite at);
#define comm_all_reduce_sum(c, v, n) comm_all_reduce_sum_at(c, v, n, COMM_HERE)
// of v's first size * n values, this rank's [rank n, (rank + 1) n) become the sums over the ranks
void comm_reduce_scatter_sum_at(Comm *c, CommSum v, size_t n, CommSite at);
#define comm_reduce_scatter_sum(c, v, n) comm_reduce_scatter_sum_at(c, v, n, COMM_HERE)
// *v summed over the ranks; under --exact (exact: its exact sum, one value) exactly, *v its rounding
void comm_all_reduce_double_at(Comm *c, double *v, ExactSum *exact, CommSite at);
#define comm_all_reduce_double(c, v, exact) comm_all_reduce_double_at(c, v, exact, COMM_HERE)
// Every rank sends a block to every rank: in holds this rank's blocks in rank order, in_counts[r]
// values for rank r; out receives them in rank order, out_counts[r] values from rank r (what rank
// r sent this rank). Counts may differ from rank to rank (MPI_Alltoallv); the bytes counted are
// the blocks sent to the other ranks.
void comm_all_to_all_at(Comm *c, real *out, const size_t *out_counts, const real *in,
                        const size_t *in_counts, CommSite at);
#define comm_all_to_all(c, out, out_counts, in, in_counts) comm_all_to_all_at(c, out, out_counts, in, in_counts, COMM_HERE)
// A ring step: sends `bytes` bytes to rank (rank + shift) mod size and receives as many from
// (rank - shift)
void comm_shift_at(Comm *c, void *out, const void *in, size_t bytes, int shift, CommSite at);
#define comm_shift(c, out, in, bytes, shift) comm_shift_at(c, out, in, bytes, shift, COMM_HERE)
// A ring step in two halves, so that work on `in` runs while it travels: comm_shift_start posts
// the send and the receive (MPI_Isend, MPI_Irecv) and comm_shift_wait completes them; until then
// `in` may be read but not written, and `out` neither. Device buffers make the whole step in
// comm_shift_start (NCCL orders it on the stream with the kernels), and so does DIT_RING_BLOCKING=1
// in the environment, which tests/bench/bench_overlap.sh sets to time the ring without overlap
// (the same values travel: the same bits). While a step is in flight the CPU attention kernels
// call MPI_Testall on it between their query tiles (kernels.h's attention_progress): Open MPI's
// TCP and shared-memory transports move a message above their eager limit (64 KiB, 4 KiB) only
// inside MPI calls, so without them the transfer would wait for comm_shift_wait. That needs
// MPI_THREAD_FUNNELED, which comm_init asks for (where MPI grants less it says so, and the
// transfers move in comm_shift_wait).
typedef struct CommShift {
    MPI_Request req[2];
    int n;     // requests posted
    bool done; // complete before comm_shift_wait: whole in comm_shift_start, or by the attention's MPI_Testall
} CommShift;
void comm_shift_start_at(Comm *c, CommShift *s, void *out, const void *in, size_t bytes, int shift, CommSite at);
#define comm_shift_start(c, s, out, in, bytes, shift) comm_shift_start_at(c, s, out, in, bytes, shift, COMM_HERE)
void comm_shift_wait(CommShift *s);
void comm_barrier_at(Comm *c, CommSite at);
#define comm_barrier(c) comm_barrier_at(c, COMM_HERE)
// How many ranks of the job share this rank's machine (collective).
int comm_node_size_at(const Comm *c, CommSite at);
#define comm_node_size(c) comm_node_size_at(c, COMM_HERE)
// The same, and this rank's place among them (its local rank) into *local_rank when not NULL.
int comm_node_place_at(const Comm *c, int *local_rank, CommSite at);
#define comm_node_place(c, local_rank) comm_node_place_at(c, local_rank, COMM_HERE)
// Every rank passes its own text; when they do not all agree, every rank says so, naming `what`
// and the first rank that differs from rank 0, and the job ends with exit code 2 (bad arguments).
void comm_check_same_at(Comm *c, const char *what, const char *text, CommSite at);
#define comm_check_same(c, what, text) comm_check_same_at(c, what, text, COMM_HERE)
// Every rank runs the least vector width and attention tiles of the group's CPUs (core/cpu.h), so
// that ranks on different machines compute alike (collective).
void comm_agree_cpu_at(Comm *c, CommSite at);
#define comm_agree_cpu(c) comm_agree_cpu_at(c, COMM_HERE)
// printf on rank 0 only
void print0(const Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Prints on rank 0 the process's peak resident memory (getrusage) on the largest rank: all a rank
// held at once since it started, loading included, with the libraries and MPI's buffers
// (collective)
void comm_print_peak_memory_at(Comm *c, CommSite at);
#define comm_print_peak_memory(c) comm_print_peak_memory_at(c, COMM_HERE)
