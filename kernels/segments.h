// segments.h: the images of packed sequences, for the attention kernels (CPU and CUDA). A pack
// holds several images one after another (cu_seqlens style), given here as the image of every
// token: id (B, T) for each row's T tokens of the padded pack, -1 for padding. Query i of a call
// is token q0 + i of its row, key j token k0 + j (a rank's shard, a visiting ring block). A query
// attends only to keys of its own image (the block-diagonal mask), and the kernels skip every
// block of keys that none of a tile's queries can see. id NULL: one image, no such mask.
#pragma once
#include <stdint.h>

typedef struct Segments {
    const int32_t *id; // (B, T), on the kernel's side (host or device)
    int T, q0, k0;
} Segments;

#define NO_SEGMENTS ((Segments){0})
