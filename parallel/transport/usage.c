// usage.c: see usage.h.
#include "usage.h"
#include "comm.h"
#include <stdarg.h>
#include <stdio.h>

static UsageHandler usage_handler;

void set_usage_handler(UsageHandler h) { usage_handler = h; }

void usage_error(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (usage_handler) usage_handler(msg);
    if (n >= 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, "\n(see --help)");
    // the other ranks may not have hit the same error (a file one node lacks): stop them all
    comm_stop_all(msg, 2);
}
