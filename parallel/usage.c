// usage.c: see usage.h.
#include "usage.h"
#include "comm.h"
#include <stdarg.h>
#include <stdio.h>

static UsageHandler usage_handler;

static char usage_before[1024], usage_after[256];

void set_usage_handler(UsageHandler h) { usage_handler = h; }

void set_usage_context(const char *before, const char *after) {
    snprintf(usage_before, sizeof usage_before, "%s", before ? before : "");
    snprintf(usage_after, sizeof usage_after, "%s", after ? after : "");
}

void usage_error(const char *fmt, ...) {
    char what[2048], msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int n = snprintf(msg, sizeof msg, "%s%s%s", usage_before, what, usage_after);
    set_usage_context(NULL, NULL);
    if (usage_handler) usage_handler(msg);
    if (n >= 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, "\n(see --help)");
    // the other ranks may not have hit the same error (a file one node lacks): stop them all
    comm_stop_all(msg, 2);
}
