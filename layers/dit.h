// dit.h: the DiT model (Peebles & Xie, "Scalable Diffusion Models with Transformers"), with the
// parameter names and layouts of the public reference so checkpoints are interchangeable.
// Parameters live in one ParamStore; pos_embed is a fixed, stored, non-trainable table.
//
// The forward pass works on a shard of the token sequence (all of it on one rank): a DiTShard
// says which tokens this rank holds and how attention reaches the other ranks' keys, so nothing
// here knows about MPI.
#pragma once
#include "../autograd/params.h"
#include "layers.h"

// Positions: the stored 2-D sin-cos table added to the patch embedding (the DiT paper's), or rotary
// positions on q and k of every head (dit_rope_angles) and no table added
typedef enum { DIT_POS_SINCOS, DIT_POS_ROPE } DiTPos;
// QK-norm: none, or RMSNorm with a learned scale on q and k before attention, over each head's
// dimensions (Flux, HunyuanVideo: scale of dh) or over the full width before the heads are split
// (Wan2.1: scale of D)
typedef enum { DIT_QK_NONE, DIT_QK_HEAD, DIT_QK_FULL } DiTQKNorm;
#define DIT_QK_EPS 1e-6
#define DIT_ROPE_THETA 10000.0 // Wan2.1's base

typedef struct DiTConfig {
    int input_size, patch_size, in_channels, hidden_size, depth, num_heads;
    double mlp_ratio;
    int num_classes;
    bool learn_sigma;
    double class_dropout_prob; // > 0 adds the null-class row used for classifier-free guidance
    // In-context conditioning (the DiT paper's Table 4): the timestep and class embeddings are two
    // tokens in front of the sequence, every rank holding them, instead of adaLN: plain blocks
    // (no adaLN_modulation, no gates), dropped before a final layer without adaLN
    bool in_context;
    // Text conditioning (docs/text.md; false: class labels): y holds each image's caption, text_len
    // token ids (data/caption.h, 0 padding); a text encoder of text_depth pre-norm transformer
    // layers; each block attends to it by text_attn; c is the timestep's embedding alone
    bool text;
    int text_len, text_depth;
    int text_attn; // DIT_TEXT_CROSS or DIT_TEXT_JOINT
    // Clips (Latte, Open-Sora): a sample is a clip of `frames` frames of input_size^2, cut into
    // patches of patch_t frames x patch_size^2 pixels, its tokens frame-major (frame, row,
    // column). 0 means 1: frames 1 is an image model, today's DiT.
    int frames, patch_t;
    DiTPos pos;
    DiTQKNorm qk_norm;
} DiTConfig;

enum { DIT_TEXT_CROSS, DIT_TEXT_JOINT };
#define DIT_MAX_TEXT_LEN 256
#define DIT_MAX_TEXT_DEPTH 16
#define DIT_TEXT_VOCAB 53 // rows of the word embedding: padding, then the captions' 52 words
                          // (data/caption.h holds them to it)

typedef struct DiTBlock {
    Tensor *qkv_w, *qkv_b;   // (3D, D), (3D): attn.qkv
    Tensor *proj_w, *proj_b; // (D, D), (D): attn.proj
    Tensor *fc1_w, *fc1_b;   // (M, D), (M): mlp.fc1, M = D * mlp_ratio
    Tensor *fc2_w, *fc2_b;   // (D, M), (D): mlp.fc2
    Tensor *ada_w, *ada_b;   // (6D, D), (6D): adaLN_modulation.1; NULL in-context
    // --text-attn cross (PixArt-alpha's names): cross_attn.q_linear (D, D), cross_attn.kv_linear
    // (2D, D), cross_attn.proj (D, D); NULL otherwise
    Tensor *xq_w, *xq_b, *xkv_w, *xkv_b, *xproj_w, *xproj_b;
    Tensor *q_norm, *k_norm; // (dh) or (D): attn.q_norm.weight, attn.k_norm.weight; NULL without QK-norm
    const char *stream; // what its tensors' names carry after blocks.<i>.: "" the image's, "txt."
                        // a joint block's text stream
} DiTBlock;

// Config limits, shared by the training flags and checkpoints' metadata; they keep every
// derived size (tokens, widths, output rows) within an int.
#define DIT_MAX_DEPTH 64
#define DIT_MAX_INPUT_SIZE 4096
#define DIT_MAX_PATCH 256
#define DIT_MAX_HIDDEN 65536
#define DIT_MAX_HEADS 4096
#define DIT_MAX_MLP_RATIO 64
#define DIT_MAX_CHANNELS 4096
#define DIT_MAX_CLASSES (1 << 20)
#define DIT_MAX_FRAMES 4096
#define DIT_MAX_VALUES (1L << 30) // a sample's output values (tokens x pt p p x C_out)
#define DIT_FREQ_DIM 256 // timestep frequency embedding size

typedef struct DiT {
    DiTConfig cfg;
    ParamStore ps;
    Tensor pos_embed;          // (1, T, D), fixed 2-D (clips: 3-D) sin-cos, stored in checkpoints
    Tensor *x_w, *x_b;         // (D, C, p, p) or (D, C, pt, p, p) for pt > 1, (D): x_embedder.proj
    Tensor *t0_w, *t0_b;       // (D, 256), (D): t_embedder.mlp.0
    Tensor *t2_w, *t2_b;       // (D, D), (D): t_embedder.mlp.2
    Tensor *y_table;           // (classes [+1], D): y_embedder.embedding_table; NULL with text
    // --cond text: the caption's encoder, text_embedder.embedding_table (words + 1, D; row 0 the
    // padding's) and text_encoder.layers.<j>, plain pre-norm blocks (no adaLN)
    Tensor *w_table;
    DiTBlock text_layers[DIT_MAX_TEXT_DEPTH];
    DiTBlock blocks[DIT_MAX_DEPTH];
    // --text-attn joint (SD3's MMDiT): the text stream of block i, blocks.<i>.txt.{attn.qkv,
    // attn.proj, mlp.fc1, mlp.fc2, adaLN_modulation.1}; the last block's has its adaLN's shift and
    // scale (2D rows) and qkv only: its text output is dropped (SD3's context_pre_only)
    DiTBlock txt[DIT_MAX_DEPTH];
    Tensor *f_w, *f_b;         // (pt*p*p*C_out, D), (pt*p*p*C_out): final_layer.linear
    Tensor *f_ada_w, *f_ada_b; // (2D, D), (2D): final_layer.adaLN_modulation.1; NULL in-context
} DiT;

// A token grid: frames x rows x cols patches, the tokens frame-major (frame, row, column). The
// one place positions read a token's coordinates from: a model's clip (dit_grid), a pack's
// image (dit_image_grid); a token's index t is relative to its clip's first token.
typedef struct DiTGrid {
    int frames, rows, cols;
} DiTGrid;
static inline long dit_grid_tokens(DiTGrid g) { return (long)g.frames * g.rows * g.cols; }
static inline void dit_grid_coords(DiTGrid g, int t, int *f, int *i, int *j) {
    *f = t / (g.rows * g.cols), *i = t / g.cols % g.rows, *j = t % g.cols;
}

// A batch of packs: each row of the batch is a sequence of T tokens that holds several images
// (or clips) of their own sizes one after another (NaViT's packing); tokens that no image covers
// are padding. Image i is the gf x gh x gw patch grid (frame-major) at tokens
// [start, start + gf gh gw) of row `row`. A pack's pixels travel as a strip clip (B, C, pt p, T p)
// of pt frames of p rows: token t of a row is the patch at column t of the strip
// (dit_pack_image), so the patch embedding, the targets and the outputs are those of a
// 1 x 1 x T patch grid. Each image has its own sin-cos positions, timestep and label (its adaLN
// vectors reach its tokens alone), a token attends only to its own image's tokens, and the loss
// is the mean over the real elements of all images.
#define DIT_PACK_MAX 256 // images in a batch of packs
typedef struct DiTImage {
    int row, start, gh, gw;
    int gf; // patch frames (0 means 1: an image)
} DiTImage;
static inline DiTGrid dit_image_grid(const DiTImage *a) {
    return (DiTGrid){a->gf > 0 ? a->gf : 1, a->gh, a->gw};
}
typedef struct DiTPack {
    int B, T; // rows, and tokens per row (the token budget)
    int n;    // images
    DiTImage img[DIT_PACK_MAX];
} DiTPack;

#define DIT_CONTEXT_TOKENS 2 // in-context: the timestep's token, then the class's

// Attention of every block: local queries (B,n,D) against keys and values; returns (B,n,D).
// seg (B, T_pad): the image of every token of the padded sequence (-1: padding) when the rows
// are packs, else NULL; on the side of the tape's arena. With in-context conditioning the first
// DIT_CONTEXT_TOKENS rows of each are the conditioning tokens, the same on every rank, and the
// shard's n tokens follow them. Joint attention: the first R rows are the caption's (every rank
// holds them whole; R = the rows less the shard's n), and seg is a row of 2 R + T_pad images for
// each (kernels/segments.h's joint_image), on the host.
typedef Tensor *(*AttendFn)(Tape *tp, Tensor *q, Tensor *k, Tensor *v, int heads,
                            const int32_t *seg, void *ctx);

typedef struct DiTShard {
    int t0, n;       // this rank's tokens [t0, t0 + n) of the (padded) sequence
    int T_pad;       // the padded sequence's length (0: t0 + n)
    const DiTPack *pack; // the rows are packs (NULL: one square image each)
    // the pack-positions-from-shard bug: a pack's positions count from the shard's first token
    // too, as if each shard began an image
    bool positions_from_shard;
    // the rope-local-positions bug: rotary positions from the shard's own token index, as if it
    // began the sequence; the rope-pack-positions bug: a pack's rotary positions run on along the
    // row instead of restarting at each image
    bool rope_local, rope_pack_run_on;
    // the qk-norm-head-shard bug: the full-width QK-norm over each of this many equal parts of
    // the width (the heads one all-to-all rank holds), as if computed after the exchange; 0: none
    int qk_norm_parts;
    // the cross-kv-all-to-all bug: the caption's keys and values this many times over, one after
    // another, as the all-to-all of a tensor every rank holds whole leaves them in a head shard
    // (each rank's copy); 0: once
    int cross_kv_copies;
    bool first_positions; // add the position embeddings of tokens [0, n), not [t0, t0 + n) (the
                          // shard-pos-embed bug)
    AttendFn attend; // NULL: plain attention of the n local tokens to themselves
    void *attend_ctx; // passed to attend and spread
    // --exact: the adaLN vectors per image (images, K) -> (B, G, K) over this rank's G canonical
    // blocks, or with packs (image_of: the image of each of the B x n tokens) (B, n, K), one row
    // per token; backward sums their gradients exactly (autograd_collectives.h,
    // seq_spread_exact); NULL: used as they are
    Tensor *(*spread)(Tape *tp, Tensor *per_image, const int64_t *image_of, int B, int n, void *ctx);
    // dit_loss divides by images x tokens x the values of a token: the global batch and all T
    // tokens (other ranks' too), so the ranks' losses add up to the mean; 0: this batch, T
    int images, tokens;
    // packs: dit_loss divides by pack_tokens x the values of a token instead: the real tokens of
    // all images of the global batch (other micro-batches' and data groups' too); 0: this pack's
    long pack_tokens;
    // --exact: adds exact sums over the sequence group's ranks (each gets the sum), for the
    // gradients of what every rank holds whole (a caption's keys and values); ctx attend_ctx
    ExactSumFn sum_group;
    // --recompute: a step with gradients keeps the input of each block's attention and MLP
    // halves only and runs the half's forward again in backward, with the same kernels in the
    // same order (the same gradients)
    bool recompute;
} DiTShard;

// NULL if pack p fits B rows of T tokens (every image inside its row, none overlapping another,
// at least one, the images in row order); else the sentence naming the image.
const char *dit_pack_error(const DiTPack *p, char *buf, size_t len);
// The images of rows [first, first + n) of pack p as a pack of n rows (renumbered from 0), into
// sub; returns the index in p of its first image: as p's images are in row order, sub's image j
// is p's image (that index + j), whose time and label it keeps.
int dit_pack_rows(const DiTPack *p, int first, int n, DiTPack *sub);
// The image of every token of rows of T_pad >= p->T tokens: id (p->B, T_pad), -1 for padding.
void dit_pack_ids(const DiTPack *p, int32_t *id, int T_pad);
// The real tokens of all images of pack p.
long dit_pack_tokens(const DiTPack *p);
// Image i of pack p, a clip img (C, gf pt, gh p, gw p) of gf pt frames, into the strip
// (B, C, pt p, T p) of the pack (pack true), or back out of it (pack false); pt = patch_t
void dit_pack_image(const DiTPack *p, int i, real *strip, real *img, int C, int pt, int patch, bool pack);
// The 2-D sin-cos position embedding (D values) of the patch at row i, column j of any grid:
// [sincos(j) over D/2, sincos(i) over D/2], sincos(x) over d = [sin(x w_k), cos(x w_k)] for
// k < d/2, w_k = 10000^(-k / (d/2)): the reference's get_2d_sincos_pos_embed, which for a
// non-square gh x gw grid puts the column (of gw) first and the row (of gh) second.
void dit_pos_embed_at(real *e, int i, int j, int D);
// The 3-D sin-cos position embedding of a clip's token at frame f, row i, column j, as
// CogVideoX's get_3d_sincos_pos_embed splits it: [sincos(f) over D/4, dit_pos_embed_at(i, j) over
// 3D/4] (D a multiple of 16). A model of one frame keeps the 2-D table (its checkpoints and
// results do not change); a clip model gives every clip, single frames too, the 3-D one.
void dit_pos_embed_clip(real *e, int f, int i, int j, int D);
// The position of token t of grid g in model c: the 2-D or 3-D table as above
void dit_position(real *e, const DiTConfig *c, DiTGrid g, int t);
// The text encoder's positions, e (L, D): place j of a caption is the 2-D table's row 0, column j
// (dit_pos_embed_at(e, 0, j, D), in image and clip models alike): sincos(j) over D/2, then D/4
// zeros and D/4 ones (sin 0 and cos 0 of the row half)
void dit_caption_positions(real *e, int L, int D);

// Rotary positions (--pos rope), axial in 3-D as Wan2.1 splits a head's dh dimensions (dh / 2
// pairs c): the first c - 2 floor(c/3) pairs turn with the frame, the next floor(c/3) with the
// row, the last floor(c/3) with the column; pair k of an axis of m pairs turns by
// x theta^(-k/m), x the token's coordinate on that axis, theta DIT_ROPE_THETA. cs (dh) gets
// [cos, sin] of each pair's angle for token t, its global index in a clip of frames x gh x gw
// tokens (frame-major, then rows, then columns): coordinates (t / (gh gw), t / gw mod gh,
// t mod gw). Tokens past the clip (padding) are not turned: their keys are masked and their
// outputs dropped, so their positions never matter.
void dit_rope_angles(real *cs, int t, int frames, int gh, int gw, int dh);
// The head width that --pos rope can split (even, at least one pair for each axis)
bool dit_rope_fits(int dh);

// Derived sizes.
int dit_tokens(const DiTConfig *c);       // T = (frames / patch_t) (input_size / patch_size)^2
DiTGrid dit_grid(const DiTConfig *c);     // frames / patch_t, input_size / patch_size twice
int dit_frames(const DiTConfig *c);       // frames of a sample (1: images)
int dit_patch_t(const DiTConfig *c);      // frames of a patch
int dit_patch_values(const DiTConfig *c); // pt p p: pixels a token covers in each channel
int dit_out_channels(const DiTConfig *c); // C_out = 2C with learn_sigma, else C
int dit_mlp_hidden(const DiTConfig *c);
// The tokens every rank holds in front of its shard's in each block: in-context conditioning's
// DIT_CONTEXT_TOKENS, joint attention's caption (text_len); 0 otherwise
int dit_front_tokens(const DiTConfig *c);
// NULL if valid; else a sentence naming the bad field and what would fix it.
const char *dit_config_error(const DiTConfig *c, char *buf, size_t len);
// Presets: "DiT-S/2", "DiT-XL/8", ... and "DiT-tiny/2", "DiT-mini/2" for tests and demos.
// Returns false for an unknown name. Sets the architecture fields only.
bool dit_preset(const char *name, DiTConfig *c);
const char *dit_preset_names(void); // one line: "DiT-{S,B,L,XL,mini,tiny}/{2,4,8}"
// The preset spelled like `name` but for letter case ("dit-mini/4" -> "DiT-mini/4"), or NULL.
const char *dit_preset_like(const char *name, char *buf, size_t len);

// One block's attention as a sequence-parallel layout runs it: the reals per image its tape keeps
// (gathered or exchanged tensors, the output, the log-sum-exp), the largest buffer per image its
// collectives hold for a moment, and the queries and keys one attention call sees. Joint attention:
// how many n D (n: the shard's tokens and the caption's) its backward holds besides the lines of
// dit.c, the gradients of q, k, v joined and of the output taken apart and what the stack of
// gradient buffers keeps between the two streams (measured per layout; forward holds none of it).
typedef struct AttnMemory {
    double kept, transient, joint_held;
    int queries, keys;
} AttnMemory;
// What a step runs: a forward without gradients (sampling), a forward and backward that keeps
// every block's activations, or one that keeps each half block's input only (--recompute)
typedef enum { DIT_FORWARD, DIT_BACKWARD, DIT_RECOMPUTE } DiTPass;
// and how: under --precision bf16 (layers/precision.c: values stored in 2 bytes, rounded copies)
// and --exact (stored values unpacked whole)
typedef struct DiTStep {
    DiTPass pass;
    bool bf16, exact;
} DiTStep;
// Arena bytes of one pass of B images on a shard of n tokens: a table of the tensors a step
// allocates (dit_memory.c), for sizing the arena and the memory check. Linear in the sequence
// (attention is fused).
size_t dit_step_bytes(const DiTConfig *c, int B, int n, AttnMemory attn, DiTStep step);

// The store's units (autograd/params.h): 0 the embeddings, 1 + i block i (scoped: dit_forward
// opens and closes it around the block), then the final layer
static inline int dit_block_unit(int i) { return 1 + i; }
// Registers every parameter (reference names) and allocates the store; weights are zero.
void dit_create(DiT *m, const DiTConfig *cfg);
// dit_create in two steps, so a checkpoint's shapes are checked before its model's memory is
// taken: dit_layout registers every parameter and pos_embed's shape with no data (dit_free
// frees such a model), dit_alloc allocates them.
void dit_layout(DiT *m, const DiTConfig *cfg);
void dit_alloc(DiT *m, bool device, bool ema); // zero-filled, on the host or the device (ps_alloc)
// Where a model runs: host itself, or (device) a copy of it (its store's slices: parameters,
// gradients, Adam moments and the EMA if it has one; pos_embed) on the GPU in *dev, freed with
// dit_free. dit_copy: dst's store = src's (ps_copy), either side.
DiT *dit_place(DiT *host, DiT *dev, bool device);
void dit_copy(DiT *dst, const DiT *src);
// The reference initialization (xavier-uniform linears, N(0, 0.02) embeddings, adaLN-Zero),
// every value a pure function of seed; pos_embed from the sin-cos formula; the image stream's
// attention qkv weights times qkv_gain (--qkv-gain; 1: the reference). A unit at a time, into a
// whole store or a split one (ps_keep_unit); the EMA, if the store has one, starts at them.
void dit_init(DiT *m, uint64_t seed, double qkv_gain);
void dit_free(DiT *m);

// img (B,C,F*H,W) (clips of F frames stacked along the height; F = 1: images), t (B), y (B)
// (with text conditioning y is (B, text_len): each image's caption as token ids, 0 padding) ->
// tokens (B, n, pt*p*p*C_out) for the shard's tokens, rows laid out (a, i, j, c). Tokens past T
// are padding: their outputs are meaningless and must be masked. With shard->pack, img is the
// packs' strip (B, C, pt p, T p), t and y are per image of the pack (its
// order), and padding is every token of no image.
Tensor *dit_forward(DiT *m, Tape *tp, Tensor *img, Tensor *t, const int64_t *y,
                    const DiTShard *shard);
// Tokens of in-context sequences: x (B, a, D), y (B, b, D) -> (B, a + b, D), x's first; and
// x (B, T, D) -> its tokens [first, first + n)
Tensor *dit_join_tokens(Tape *tp, Tensor *x, Tensor *y);
// Joint attention (--text-attn joint): Segments (kernels/segments.h) in a's host side for the
// queries [caption (R); image tokens [q0, q0 + nq)] against `copies` key sets one after another
// (a bug's keys; else 1), set c [caption (R); image tokens [k0 + c nk, k0 + (c + 1) nk)]; B rows of
// ids, joint images of R caption and T image tokens (joint_image)
Segments dit_joint_segments(Arena *a, const int32_t *ids, int B, int R, int T, int q0, int nq, int copies,
                            int k0, int nk);
Tensor *dit_tokens_of(Tape *tp, Tensor *x, int first, int n);
// mean((out - target)^2) over the real tokens of all shards: out (B, n, pt*p*p*C_out) from
// dit_forward, target (B, Ct, F*H, W) with Ct <= C_out compared with the first Ct output channels
// (training a learn_sigma model compares only the noise channels). Divides by the element count
// images * tokens * pt*p*p*Ct of the shard (by default B * T); with the global batch of every data
// group and T, per-rank and per-micro-batch losses and gradients add up to the single-rank ones.
// With shard->pack, target is the strip (B, Ct, pt p, T p) and the count is the real elements of all
// the pack's images.
Tensor *dit_loss(DiT *m, Tape *tp, Tensor *out, Tensor *target, const DiTShard *shard);
