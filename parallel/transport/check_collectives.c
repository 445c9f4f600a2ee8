// check_collectives.c: see check_collectives.h.
#include "check_collectives.h"
#include "../../core/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPORT_AFTER 0.5       // seconds a rank waits before it tells every rank where it waits
#define WATCHDOG_SECONDS 300.0 // the watchdog's bound unless DIT_COLLECTIVE_TIMEOUT sets one
#define REPORT_TAG 7

// A rank's call: what its fingerprint compares, and what a report says
typedef struct Record {
    int rank;        // in the world
    int waiting;     // in a report: 1 = waits in this call, 0 = has gone on
    int line, counts_vary;
    long long count; // values per rank
    char op[24], value[16], file[64], who[64];
} Record;

static bool on;
static double bound = WATCHDOG_SECONDS;
static MPI_Comm board = MPI_COMM_NULL; // the world's channel of reports
static int world_rank, world_size;
static Record *known;   // every rank's last report (waiting 0: none, or gone on)
static double changed;  // when `known` last changed
static Record sent;     // this rank's last report, and its sends to every other rank
static MPI_Request *sends;

// ---- the environment ----------------------------------------------------------------------------
static bool env_timeout(double *s) {
    const char *e = getenv("DIT_COLLECTIVE_TIMEOUT");
    char *end = NULL;
    if (!e || !*e) return true;
    *s = strtod(e, &end);
    return end != e && !*end && *s > 0 && *s <= 1e6;
}

const char *check_collectives_env_error(void) {
    static char why[256];
    const char *e = getenv("DIT_CHECK_COLLECTIVES");
    double s;
    if (e && *e && strcmp(e, "0") && strcmp(e, "1"))
        snprintf(why, sizeof why, "DIT_CHECK_COLLECTIVES=%.64s is neither 0 nor 1: set 1 (or pass "
                 "--check-collectives) to compare every collective's fingerprint across its group, or unset it", e);
    else if (!env_timeout(&s))
        snprintf(why, sizeof why, "DIT_COLLECTIVE_TIMEOUT=%.64s is not a number of seconds above 0 "
                 "(at most 1e6): the longest wait in a collective before the job stops", getenv("DIT_COLLECTIVE_TIMEOUT"));
    else return NULL;
    return why;
}

void check_collectives_init(void) {
    const char *e = getenv("DIT_CHECK_COLLECTIVES");
    int mine = e && !strcmp(e, "1"), any = 0;
    double s = WATCHDOG_SECONDS;
    env_timeout(&s);
    MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&s, &bound, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
    on = any;
    if (!on) return;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &board));
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    known = xcalloc((size_t)world_size, sizeof *known);
    sends = xmalloc((size_t)world_size * sizeof *sends);
    for (int r = 0; r < world_size; r++) sends[r] = MPI_REQUEST_NULL;
}

bool check_collectives_on(void) { return on; }

MPI_Comm check_collectives_channel(MPI_Comm group, char *who, size_t len) {
    MPI_Comm channel = MPI_COMM_NULL;
    if (!on) return channel;
    MPI_CHECK(MPI_Comm_dup(group, &channel));
    int size;
    MPI_Comm_size(group, &size);
    if (group == MPI_COMM_WORLD) {
        snprintf(who, len, "the world (%d ranks)", size);
        return channel;
    }
    MPI_Group g, w;
    int *in = xmalloc(2 * (size_t)size * sizeof(int)), *out = in + size;
    for (int i = 0; i < size; i++) in[i] = i;
    MPI_Comm_group(group, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_translate_ranks(g, size, in, w, out);
    size_t n = (size_t)snprintf(who, len, "the group of ranks");
    for (int i = 0; i < size && n < len; i++) n += (size_t)snprintf(who + n, len - n, " %d", out[i]);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    free(in);
    return channel;
}

// ---- reports ---------------------------------------------------------------------------------------
static double now(void) { return MPI_Wtime(); }

// Every report that has arrived, into `known`
static void read_reports(void) {
    for (;;) {
        int arrived = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, REPORT_TAG, board, &arrived, &st));
        if (!arrived) return;
        MPI_CHECK(MPI_Recv(&known[st.MPI_SOURCE], (int)sizeof(Record), MPI_BYTE, st.MPI_SOURCE, REPORT_TAG,
                           board, MPI_STATUS_IGNORE));
        changed = now();
    }
}

// Tells every other rank that this rank waits in `r` (or, waiting 0, has gone on)
static void report(const Record *r, int waiting) {
    MPI_CHECK(MPI_Waitall(world_size, sends, MPI_STATUSES_IGNORE)); // the last report's (small: sent at once)
    sent = *r, sent.waiting = waiting;
    known[world_rank] = sent;
    for (int to = 0; to < world_size; to++)
        if (to != world_rank)
            MPI_CHECK(MPI_Isend(&sent, (int)sizeof sent, MPI_BYTE, to, REPORT_TAG, board, &sends[to]));
}

static int record_line(char *buf, size_t len, const Record *r) {
    char count[64] = ""; // a barrier has none
    if (r->value[0]) snprintf(count, sizeof count, ", %lld value%s of %s", r->count, r->count == 1 ? "" : "s", r->value);
    return snprintf(buf, len, "  rank %d is in %s (%s:%d%s) over %s\n", r->rank, r->op, r->file, r->line,
                    count, r->who);
}

// Prints `head` and the lines, one write (mpirun's own lines cannot split it), and ends the job
static _Noreturn void stop(const char *head, const Record *rs, int n, bool every_rank) {
    size_t len = 256 + (size_t)world_size * 256, at;
    char *msg = xmalloc(len);
    at = (size_t)snprintf(msg, len, "error (--check-collectives): %s\n", head);
    for (int i = 0; i < n && at < len; i++) {
        if (!every_rank || rs[i].waiting) at += (size_t)record_line(msg + at, len - at, &rs[i]);
        else at += (size_t)snprintf(msg + at, len - at, "  rank %d has not said that it waits: it computes, "
                                    "or waits outside the collectives this check covers\n", i);
    }
    fputs(msg, stderr);
    fflush(stderr);
    free(msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

// Every rank waits, and none has gone on for REPORT_AFTER: nothing can complete
static bool all_wait(void) {
    for (int r = 0; r < world_size; r++)
        if (!known[r].waiting) return false;
    return now() - changed > REPORT_AFTER;
}

// A short pause between polls: a yield at first, then sleeps up to a millisecond (the ranks of an
// oversubscribed machine share its cores)
static void pause_a_little(double waited) {
    struct timespec ts = {0, waited < 1e-3 ? 0 : waited < 0.1 ? 20000 : 1000000};
    if (ts.tv_nsec) nanosleep(&ts, NULL);
}

// ---- the fingerprint ----------------------------------------------------------------------------
void check_collective(MPI_Comm channel, const char *who, const char *op, CommSite at, size_t count,
                      const char *value, bool counts_vary) {
    if (!on || channel == MPI_COMM_NULL) return;
    read_reports();
    Record me = {.rank = world_rank, .line = at.line, .counts_vary = counts_vary, .count = (long long)count};
    snprintf(me.op, sizeof me.op, "%s", op);
    snprintf(me.value, sizeof me.value, "%s", value);
    snprintf(me.file, sizeof me.file, "%s", at.file);
    snprintf(me.who, sizeof me.who, "%s", who);
    int size, mine;
    MPI_Comm_size(channel, &size);
    MPI_Comm_rank(channel, &mine);
    Record *all = xmalloc((size_t)size * sizeof *all);
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, channel, &req));
    double t0 = now(), deadline = t0 + bound;
    bool reported = false;
    for (int done = 0;;) {
        MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        double t = now();
        if (t - t0 < REPORT_AFTER) {
            pause_a_little(t - t0);
            continue;
        }
        read_reports();
        if (!reported) report(&me, 1), reported = true, changed = now();
        if (world_rank == 0 && all_wait()) // each waits for a group whose other ranks wait in another
            stop("every rank waits in a collective that some rank of its group never reaches, so none "
                 "can complete: the ranks must call the same collectives in the same order", known,
                 world_size, false);
        if (t > deadline) {
            int lowest = 0; // of the ranks that wait: it speaks for them (another, 10 s later)
            while (lowest < world_rank && !known[lowest].waiting) lowest++;
            if (lowest == world_rank || t > deadline + 10) {
                char head[256];
                snprintf(head, sizeof head, "rank %d has waited %.0f s in a collective (the bound: "
                         "--collective-timeout, DIT_COLLECTIVE_TIMEOUT); where each rank is:", world_rank, t - t0);
                stop(head, known, world_size, true);
            }
        }
        pause_a_little(t - t0);
    }
    if (reported) report(&me, 0);
    int differs = -1;
    for (int r = 1; r < size && differs < 0; r++)
        if (strcmp(all[r].op, all[0].op) || strcmp(all[r].value, all[0].value) || strcmp(all[r].file, all[0].file) ||
            all[r].line != all[0].line || (!counts_vary && all[r].count != all[0].count))
            differs = r;
    if (differs >= 0) {
        if (mine == 0) {
            for (int r = 0; r < size; r++) all[r].waiting = 1;
            stop("the ranks of one group reached different collectives, or the same one with "
                 "different counts:", all, size, false);
        }
        struct timespec ts = {10, 0}; // the group's first rank speaks and ends the job
        nanosleep(&ts, NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(all);
}

void check_collectives_finalize(void) {
    if (!on) return;
    read_reports();
    MPI_CHECK(MPI_Waitall(world_size, sends, MPI_STATUSES_IGNORE));
}
