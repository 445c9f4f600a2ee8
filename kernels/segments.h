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

// Joint attention's images (--text-attn joint, layers/dit.h): for each of B rows, 2 R + T ids: its
// R caption tokens' images as keys (padding -1), the same tokens' as queries, then its T image
// tokens' (a pack's ids; 0 without packs, whose padding the key mask hides). Token x of row b
// (x < R: the caption's; else image token x - R) as a key or a query:
static inline int32_t joint_image(const int32_t *ids, int R, int T, int b, int x, int query) {
    const int32_t *row = ids + (size_t)b * (2 * R + T);
    return x < R ? row[x + (query ? R : 0)] : row[R + x];
}
