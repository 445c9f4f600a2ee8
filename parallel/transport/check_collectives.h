// check_collectives.h: --check-collectives, a debug mode (always on in make test's suites) that
// names a mismatch of collectives instead of hanging in it.
// - A fingerprint first: before each collective (comm.h), the ranks of its group exchange what
//   each is about to call: the kind of call, its call site (file:line of the caller), its element
//   count and its kind of value. Ranks whose fingerprints differ stop the job at once, one line
//   per rank ("rank 2 is in all_reduce (train/sample.c:207, 12000 values of real) over ...").
// - Groups waiting on each other: ranks that wait in collectives of different groups (ranks 0
//   and 1 in a gather over the world, ranks 2 and 3 in a sum over their data groups) never
//   complete their exchanges. A rank that has waited REPORT_AFTER tells every rank where it waits
//   (and again when it goes on); once every rank has said it waits, and none has gone on for
//   REPORT_AFTER more, rank 0 prints every rank's call and stops the job.
// - A watchdog: a rank that waits longer than the bound (DIT_COLLECTIVE_TIMEOUT seconds, default
//   300) prints where every rank is, as far as their reports say, and stops the job (exit 1).
// The environment turns it on, so that the ranks verify and bugs start take it too:
// DIT_CHECK_COLLECTIVES=1 (main's --check-collectives sets it), DIT_COLLECTIVE_TIMEOUT=S (main's
// --collective-timeout S). Off, a collective pays one test of a flag.
#pragma once
#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

// Where a collective was called from: comm.h's macros pass the caller's file and line
typedef struct CommSite {
    const char *file;
    int line;
} CommSite;
#define COMM_HERE ((CommSite){__FILE__, __LINE__})

// NULL when DIT_CHECK_COLLECTIVES and DIT_COLLECTIVE_TIMEOUT are unset or valid; else the
// sentence that names the variable and the fix
const char *check_collectives_env_error(void);
// Collective over the world, once MPI runs: on when any rank's environment turns it on
void check_collectives_init(void);
bool check_collectives_on(void);
// A group's channel of fingerprints (a duplicate of `group`, so that they never meet its own
// messages), and its words in messages ("the world (4 ranks)", "the group of ranks 0 2") into who; collective
// over group. MPI_COMM_NULL (nothing made) when the check is off.
MPI_Comm check_collectives_channel(MPI_Comm group, char *who, size_t len);
// Before a collective of `op` over the group whose channel is `channel`: count values of kind
// `value` ("": none; the count per rank; counts_vary: ranks may pass different counts, as an all-to-all's)
void check_collective(MPI_Comm channel, const char *who, const char *op, CommSite at, size_t count,
                      const char *value, bool counts_vary);
// Before MPI_Finalize: the reports still on their way are received
void check_collectives_finalize(void);
