// arena.c: see arena.h.
#include "arena.h"
#include "check.h"
#include "device.h"
#include <stdlib.h>
#include <string.h>

static size_t rounded(size_t bytes) { return (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

Arena arena_create(size_t cap_bytes) {
    Arena a = {0};
    a.cap = rounded(cap_bytes);
    a.base = aligned_alloc(ARENA_ALIGN, a.cap ? a.cap : ARENA_ALIGN);
    if (!a.base)
        FATAL("cannot reserve %zu bytes (%.1f GiB) for activations: lower the batch size or the "
              "image size, or spread the sequence over more ranks", cap_bytes, cap_bytes / 1073741824.0);
    return a;
}

// the host side of a device arena: tensor headers, masks and labels of a step
#define ARENA_HOST_SIDE ((size_t)256 << 20)

Arena arena_create_on(bool device, size_t cap_bytes, size_t host_bytes) {
    if (!device) return arena_create(cap_bytes);
    Arena a = {.device = true};
    a.cap = rounded(cap_bytes);
    a.base = device_alloc(a.cap ? a.cap : ARENA_ALIGN);
    a.host = xmalloc(sizeof(Arena));
    *a.host = arena_create(ARENA_HOST_SIDE + host_bytes); // address space: pages are touched as used
    return a;
}

Arena *arena_host(Arena *a) { return a->host ? a->host : a; }

void arena_destroy(Arena *a) {
    if (a->device) {
        device_free(a->base);
        arena_destroy(a->host);
        free(a->host);
    } else free(a->base);
    *a = (Arena){0};
}

bool arena_poison;

// `need` (rounded) bytes from the top of a, as they are
static void *bump(Arena *a, size_t need) {
    if (need > a->cap - a->used)
        FATAL("arena overflow: need %zu bytes but only %zu of %zu are available; the arena was "
              "sized too small for this step (a bug worth reporting); lower the batch size meanwhile",
              need, a->cap - a->used, a->cap);
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

void *arena_alloc(Arena *a, size_t bytes) {
    size_t need = rounded(bytes);
    void *p = bump(a, need);
    if (a->device) zero_bytes(p, need);
    else memset(p, 0, need);
    return p;
}

void *arena_alloc_empty(Arena *a, size_t bytes) {
    size_t need = rounded(bytes);
    void *p = bump(a, need);
    if (a->device) zero_bytes(p, need);
    else if (arena_poison) memset(p, 0xff, need);
    return p;
}

void arena_reset(Arena *a) {
    a->used = 0;
    if (a->host) arena_reset(a->host);
}
void arena_reset_peak(Arena *a) { a->peak = a->used; }
size_t arena_mark(const Arena *a) { return a->used; }

void arena_release(Arena *a, size_t mark) {
    CHECK(mark <= a->used, "arena_release: mark %zu is past the %zu bytes in use", mark, a->used);
    a->used = mark;
}

bool arena_is_top(const Arena *a, const void *p, size_t bytes) {
    return (const uint8_t *)p + rounded(bytes) == a->base + a->used;
}

void *arena_keep(Arena *a, size_t mark, const void *src, size_t bytes) {
    arena_release(a, mark);
    size_t need = rounded(bytes);
    CHECK(need <= a->cap - a->used, "arena_keep: %zu bytes do not fit", need); // they did before
    void *p = a->base + a->used;
    // src may lie in what was just freed, at or above p: a device copies forward in pieces no
    // longer than the gap, which never overlap
    size_t gap = (size_t)((const uint8_t *)src - (uint8_t *)p);
    if (!a->device) memmove(p, src, bytes);
    else if (gap)
        for (size_t at = 0; at < bytes; at += gap)
            copy_bytes((uint8_t *)p + at, (const uint8_t *)src + at, at + gap < bytes ? gap : bytes - at);
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}
