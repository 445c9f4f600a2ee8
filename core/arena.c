// arena.c: see arena.h.
#include "arena.h"
#include "check.h"
#include <stdlib.h>
#include <string.h>

Arena arena_create(size_t cap_bytes) {
    Arena a = {0};
    a.cap = (cap_bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    a.base = aligned_alloc(ARENA_ALIGN, a.cap ? a.cap : ARENA_ALIGN);
    if (!a.base)
        FATAL("cannot reserve %zu bytes (%.1f GiB) for activations: lower the batch size or the "
              "image size, or spread the sequence over more ranks", cap_bytes, cap_bytes / 1073741824.0);
    return a;
}

void arena_destroy(Arena *a) {
    free(a->base);
    *a = (Arena){0};
}

void *arena_alloc(Arena *a, size_t bytes) {
    size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (need > a->cap - a->used)
        FATAL("arena overflow: need %zu bytes but only %zu of %zu are available; the arena was "
              "sized too small for this step (a bug worth reporting); lower the batch size meanwhile",
              need, a->cap - a->used, a->cap);
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    memset(p, 0, need);
    return p;
}

void arena_reset(Arena *a) { a->used = 0; }
void arena_reset_peak(Arena *a) { a->peak = a->used; }
size_t arena_mark(const Arena *a) { return a->used; }

void arena_release(Arena *a, size_t mark) {
    CHECK(mark <= a->used, "arena_release: mark %zu is past the %zu bytes in use", mark, a->used);
    a->used = mark;
}

void *arena_keep(Arena *a, size_t mark, const void *src, size_t bytes) {
    arena_release(a, mark);
    size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    CHECK(need <= a->cap - a->used, "arena_keep: %zu bytes do not fit", need); // they did before
    void *p = a->base + a->used;
    memmove(p, src, bytes); // src may lie in what was just freed, at or above p
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}
