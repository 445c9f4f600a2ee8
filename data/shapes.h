// shapes.h: a procedural, class-conditional toy dataset that needs no download. Ten classes of
// shapes, each drawn anti-aliased in a random bright colour on a random dark background, at a
// random position and size; the shape always lies inside the image with a 1-pixel background
// frame, and is scaled with the image so it stays recognisable from 8x8 up.
//
// Every image and label is a pure function of (seed, index), through core/rng.h:
//   stream STREAM_SHAPE_LABEL: label = floor(10 * rng_uniform(seed, stream, index))
//   stream STREAM_SHAPE_GEOM:  u_k = rng_uniform(seed, stream, 8 * index + k), k = 0..7 gives
//                               radius, centre x, centre y, hue, saturation, value, background
//                               level, background hue
// so sample i is the same whatever the batch, rank count or call order.
//
// Moving shapes (clips): sample i is the same shape, colours and class, moving, turning or
// growing across the frames; its motion draws from stream STREAM_SHAPE_MOTION:
//   v_k = rng_uniform(seed, stream, 4 * index + k), k = 0..3: the kind (move, turn, grow), the
//   direction (an angle for a move, the sense of a turn, growing or shrinking), and the start
//   along the path of a move (across the frame, perpendicular to it)
// Frame f of F is the shape at s = f / (F - 1) of its path (s = 0 for one frame): a move goes
// 0.9 of the room the shape has along its direction, a turn rotates it by a quarter turn, a
// growth scales its radius from 0.55 to 1 of its largest (or back). The shape stays inside the
// image with its 1-pixel frame in every frame.
#pragma once
#include "../core/real.h"
#include <stddef.h>
#include <stdint.h>

#define SHAPES_CLASSES 10
#define SHAPES_MIN_SIZE 8
#define SHAPES_MAX_SIZE 4096

// circle, square, triangle, cross, ring, diamond, hbar, vbar, x, two dots (fatal if c is out of range)
const char *shapes_class_name(int c);

// The label of sample `index`, without drawing it (the same one shapes_sample returns).
int64_t shapes_label(uint64_t seed, uint64_t index);

// The caption of sample `index` (data/caption.h's words), a pure function of (seed, index) like
// its image: "a <size> <colour> <class>", then for a small shape its place, e.g. "a small red
// triangle at the top left". size: small when the radius is in the lower half of its range;
// colour: the hue in eight bins (red orange yellow green cyan blue purple pink); place: the
// centre's third of the range it can take, across and down ("in the centre" for the middle of
// both). The hbar and vbar classes read "horizontal bar" and "vertical bar".
void shapes_caption(char *buf, size_t len, uint64_t seed, uint64_t index);
#define SHAPES_CAPTION_WORDS 9 // the longest: "a small red horizontal bar at the top left"

// img is (3, size, size) CHW with values in [-1, 1]; *label in [0, SHAPES_CLASSES).
// size must be in [SHAPES_MIN_SIZE, SHAPES_MAX_SIZE]; any value, odd ones included.
void shapes_sample(real *img, int64_t *label, int size, uint64_t seed, uint64_t index);
// The same image's rows [y0, y1) only (the others are left as they are): what a rank whose
// tokens cover those rows needs.
void shapes_sample_rows(real *img, int64_t *label, int size, uint64_t seed, uint64_t index, int y0,
                        int y1);

// Clip of `frames` frames: img is (3, frames * size, size), the frames stacked along the height;
// its rows [y0, y1) only (of frames * size), the others left as they are.
void shapes_clip_rows(real *img, int64_t *label, int size, int frames, uint64_t seed,
                      uint64_t index, int y0, int y1);
