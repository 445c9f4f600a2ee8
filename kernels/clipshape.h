// clipshape.h: the shape of a batch of clips cut into patches, shared by the CPU kernels
// (kernels.h) and the CUDA launchers (cuda.h). img is (B, C, F, H, W); a patch spans pt frames
// and p x p pixels, so the token grid is (F/pt) x (H/p) x (W/p), frame-major. An image is a clip
// of one frame (F = pt = 1).
#pragma once

typedef struct ClipShape {
    int B, C, F, H, W; // clips, channels, frames, rows, columns
    int pt, p;         // a patch's frames and side
} ClipShape;
