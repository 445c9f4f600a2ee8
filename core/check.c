// check.c: fatal error reporting with a replaceable handler.
#include "check.h"
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void default_handler(const char *msg) {
    fprintf(stderr, "error: %s\n", msg);
    exit(1);
}

static FatalHandler handler = default_handler;

void set_fatal_handler(FatalHandler h) { handler = h ? h : default_handler; }

void fatal(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    handler(msg);
    abort(); // a handler that returns is a bug; never continue past a fatal error
}

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) FATAL("out of host memory allocating %zu bytes", bytes);
    return p;
}

void *xrealloc(void *p, size_t n, size_t size) {
    if (n != 0 && size > SIZE_MAX / n) FATAL("allocation of %zu x %zu bytes overflows", n, size);
    size_t bytes = n * size;
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) FATAL("out of host memory reallocating %zu x %zu bytes", n, size);
    return q;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) FATAL("out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}
