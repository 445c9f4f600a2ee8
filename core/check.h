// check.h: the one place errors are raised. Every failure goes through fatal(), which formats
// "file:line: message" and hands it to the installed handler (default: print to stderr, exit 1).
// The parallel layer installs a handler that aborts every rank; tests install one that longjmps,
// so that error messages themselves can be asserted.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef void (*FatalHandler)(const char *msg); // must not return
void set_fatal_handler(FatalHandler h);        // NULL restores the default
void fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define FATAL(...) fatal(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) fatal(__FILE__, __LINE__, __VA_ARGS__);                                       \
    } while (0)
#define ALLOC_CHECK(ptr)                                                                           \
    do {                                                                                           \
        if ((ptr) == NULL) fatal(__FILE__, __LINE__, "out of host memory: %s", #ptr);              \
    } while (0)
// The library macros below expand only where used, so this header needs none of their headers.
#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != MPI_SUCCESS) fatal(__FILE__, __LINE__, "%s failed with MPI error %d", #call, e_);\
    } while (0)
#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            fatal(__FILE__, __LINE__, "%s failed: %s", #call, cudaGetErrorString(e_));             \
    } while (0)

void *xmalloc(size_t bytes); // malloc that never returns NULL
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n, size_t size); // to n elements of size bytes; never NULL
#ifdef __cplusplus
}
#endif
