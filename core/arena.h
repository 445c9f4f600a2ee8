// arena.h: bump allocator for activations and gradients of one step. Allocations are 64-byte
// aligned, never NULL, and zero-filled unless asked for empty (arena_alloc_empty); arena_reset
// frees everything at once. `peak` is the most bytes ever in use, which is how memory is
// measured in this project. A device arena holds its bytes on the GPU (core/device.h); what the
// host must read or write (tensor headers, masks, labels) goes to its host side, arena_host(a),
// which is emptied with it by arena_reset only.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARENA_ALIGN 64

typedef struct Arena {
    uint8_t *base;
    size_t cap;  // bytes
    size_t used; // bytes in use, including alignment padding
    size_t peak; // max of used since creation or arena_reset_peak
    bool device;        // base is device memory
    struct Arena *host; // device arenas: the host side; NULL otherwise
} Arena;

Arena arena_create(size_t cap_bytes);
// arena_create, or on the device: cap_bytes of device memory, and a host side of 256 MiB plus
// host_bytes (--exact adds its sums there)
Arena arena_create_on(bool device, size_t cap_bytes, size_t host_bytes);
Arena *arena_host(Arena *a); // where host records go: a itself, or a device arena's host side
void arena_destroy(Arena *a);
void *arena_alloc(Arena *a, size_t bytes); // aborts with bytes needed vs available on overflow
// Like arena_alloc but not zeroed on the host (a device arena still zeroes): for a buffer whose
// every element is written before it is read, such as an op's output; what accumulates (+=), a
// gradient above all, takes arena_alloc. With arena_poison set the bytes are 0xff instead, a NaN
// in float and double, so that reading an element nobody wrote shows in every result after it.
void *arena_alloc_empty(Arena *a, size_t bytes);
extern bool arena_poison; // false; the unit and MPI test programs set it
void arena_reset(Arena *a);                // used = 0; peak kept
void arena_reset_peak(Arena *a);           // peak = used
size_t arena_mark(const Arena *a);         // for scoped scratch: arena_release(a, mark)
void arena_release(Arena *a, size_t mark);
// Whether an allocation of `bytes` at p is the last one in a (nothing allocated after it)
bool arena_is_top(const Arena *a, const void *p, size_t bytes);
// arena_release(a, mark), then a new allocation holding a copy of src's bytes (src may lie in the
// part just freed): keeps one result of a scope and drops the rest.
void *arena_keep(Arena *a, size_t mark, const void *src, size_t bytes);
