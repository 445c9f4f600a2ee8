// dit_memory.c: the memory model of a step (see dit.h): one named line per tensor a step
// allocates, summed as the arena holds them.
#include "dit.h"
#include "common.h"
#include <math.h>
#include <stdint.h>

// ---- memory: one named line per tensor, as a step allocates them (reals per image) ----------
typedef struct Line {
    const char *name;
    double reals;
} Line;

// Under --precision bf16 (layers/precision.c) the share of a real's bytes that a value stored in 2
// bytes takes (to_bf16_stored), 1 otherwise: `s`, the linears' inputs from the norms, modulations
// and GELU; `fc1`, fc1's output (GELU's input), which under --exact blocks of plain and joint
// caption rows (token_linear's views) round in place; `copy`, a block's rounded copy of the
// attention's output (its backward reads the float one): 0 or s; `norm`, a norm's output: adaLN
// blocks keep none (layernorm_modulate), in-context blocks theirs (s)
typedef struct Stored { double s, fc1, copy, norm; } Stored;

static Stored stored(const DiTConfig *c, DiTStep step) {
    double s = step.bf16 ? 2.0 / sizeof(real) : 1;
    bool views = step.exact && (c->in_context || (c->text && c->text_attn == DIT_TEXT_JOINT));
    return (Stored){s, views ? 1 : s, step.bf16 ? s : 0, c->in_context ? s : 0};
}

// The gradients of the same lines, float: a norm's output's, or layernorm_modulate's backward's
// normalized x and its gradient (2)
static Stored gradients(const DiTConfig *c, DiTStep step) {
    return (Stored){1, 1, step.bf16 ? stored(c, step).s : 0, c->in_context ? 1 : 2};
}

// One block (the attention's own tensors come from its layout): the modulation and the attention
// half are lines [0, *mlp), the MLP half the rest; in-context blocks have no adaLN (their norms'
// outputs go into the linears: stored as the modulations' are)
static int block_lines(Line *l, const DiTConfig *c, double n, int *mlp, Stored st) {
    double D = c->hidden_size, M = dit_mlp_hidden(c), ada = !c->in_context;
    int k = 0;
    l[k++] = (Line){"adaLN modulation and its 6 slices", ada * 12 * D};
    l[k++] = (Line){"layernorm 1 and its mean, rstd", n * (st.norm * D + 2)};
    l[k++] = (Line){"modulate 1", ada * n * D * st.s};
    l[k++] = (Line){"qkv: q, k and v (linear_parts: no copies)", 3 * n * D};
    double norm_groups = c->qk_norm == DIT_QK_HEAD ? c->num_heads : c->qk_norm == DIT_QK_FULL ? 1 : 0;
    l[k++] = (Line){"QK-norm and rotary positions: q and k normed and turned (one op), their 1/rms",
                    (c->qk_norm != DIT_QK_NONE || c->pos == DIT_POS_ROPE) * 2 * n * D + 2 * n * norm_groups};
    l[k++] = (Line){"in-context: K and V apart from the conditioning tokens", !ada * 2 * n * D};
    l[k++] = (Line){"the attention output's rounded copy", st.copy * n * D};
    l[k++] = (Line){"attention projection", n * D};
    l[k++] = (Line){"gated residual 1", n * D};
    // text: the cross-attention's q, output, log-sum-exp, projection and residual, and the
    // caption's K and V (L tokens)
    double H = c->num_heads, L = c->text ? c->text_len : 0, joint = c->text && c->text_attn == DIT_TEXT_JOINT;
    // joint (n counts the caption's tokens too): the text stream's modulation, q, k, v joined and
    // the output taken apart (backward holds 8 n D more: dit_step_bytes)
    l[k++] = (Line){"joint attention", joint * (24 * D + 6 * n * D)};
    // cross: q, the attention's output (and its rounded copy) and log-sum-exp, the projection, the
    // sum; the caption's k, v; and one n D more, measured (config L, 1 rank: the step's peak stood
    // 1.6 n D above the lines without it, and its arena overflowed)
    l[k++] = (Line){"cross-attention", !!c->text * !joint * (n * ((5 + st.copy) * D + H) + 2 * L * D)};
    *mlp = k;
    l[k++] = (Line){"layernorm 2 and its mean, rstd", n * (st.norm * D + 2)};
    l[k++] = (Line){"modulate 2", ada * n * D * st.s};
    l[k++] = (Line){"fc1", n * M * st.fc1};
    l[k++] = (Line){"gelu", n * M * st.s};
    l[k++] = (Line){"fc2", n * D};
    l[k++] = (Line){"gated residual 2", n * D};
    return k;
}

// The embeddings, the conditioning, the final layer, the loss and the step's inputs: lines
// [0, *fixed) get no gradient in backward (the inputs, the patches, the fixed tables, the angles)
static int rest_lines(Line *l, const DiTConfig *c, double n, double B, int *fixed, Stored st) {
    double D = c->hidden_size, p2 = dit_patch_values(c), M = dit_mlp_hidden(c);
    double S2 = (double)dit_frames(c) * c->input_size * c->input_size; // a sample's pixels
    double C = c->in_channels, Co = dit_out_channels(c);
    int k = 0;
    l[k++] = (Line){"inputs: image, time, target", C * S2 + 1 + Co * S2};
    l[k++] = (Line){"patches, pos_embed", n * p2 * C + n * D / B};
    l[k++] = (Line){"loss: target patches, mask", n * p2 * C * (1 + 1.0 / sizeof(real))};
    // one image's angles for every image (packs: each its own; B = 1 bounds it above)
    l[k++] = (Line){"rotary angles", (c->pos == DIT_POS_ROPE) * (n + c->in_context * DIT_CONTEXT_TOKENS) *
                                         ((double)D / c->num_heads)};
    *fixed = k;
    l[k++] = (Line){"the patches' embedding, the sum", 2 * n * D};
    l[k++] = (Line){"timestep and label embeddings, c", DIT_FREQ_DIM + 6 * D};
    // (in-context: a layernorm, its output kept)
    l[k++] = (Line){"final adaLN, layernorm and modulate (one op)", 4 * D + n * ((1 + !!c->in_context) * D + 2)};
    l[k++] = (Line){"output tokens", n * p2 * Co};
    l[k++] = (Line){"loss: output slice", n * p2 * C};
    if (c->in_context)
        l[k++] = (Line){"in-context: the conditioning tokens, the joined and the final sequence",
                        (2 * DIT_CONTEXT_TOKENS + n) * D + n * D};
    // embeddings, positions, and per layer what a plain block keeps (block_lines; its fc1 output
    // under --exact a view, rounded in place)
    if (c->text)
        l[k++] = (Line){"text encoder", c->text_len * (3 * D + c->text_depth *
                        (2 * (st.s * D + 2) + (7 + st.copy) * D + M * (st.fc1 + st.s) + c->num_heads))};
    return k;
}

static double sum_lines(const Line *l, int k) {
    double s = 0;
    for (int i = 0; i < k; i++) s += l[i].reals;
    return s;
}

// One block's halves: the attention's (with the attention's own, `kept`) and the MLP's
static void halves(const DiTConfig *c, double nb, double kept, Stored st, double *attn_half, double *mlp_half,
                   double *cross) {
    Line l[32];
    int mlp, k = block_lines(l, c, nb, &mlp, st);
    *attn_half = sum_lines(l, mlp) + kept, *mlp_half = sum_lines(l + mlp, k - mlp);
    *cross = l[mlp - 1].reals;
}

// Under bf16 the transients of a linear (layers/linear.c): the largest linear's rounded weight (the
// MLP's, or adaLN's 6 D x D: one, whatever the batch), the rounded copy of an input that is not
// rounded already (the patches' for their embedding, the encoded caption's for its keys and
// values, the timestep's frequencies: per image), and a stored input unpacked: a block of rows
// (UNPACK_VALUES, or UNPACK_ROWS rows) or fewer, or under --exact whole
static double bf16_transients(const DiTConfig *c, double b, double n, double nb, bool exact) {
    double D = c->hidden_size, M = dit_mlp_hidden(c), L = c->text ? c->text_len : 0;
    double patches = n * dit_patch_values(c) * c->in_channels;
    double weight = fmax(M, 6 * D) * D, input = fmax(patches, fmax(L * D, DIT_FREQ_DIM));
    double whole = b * nb * fmax(D, M);
    double unpacked = exact ? whole : fmin(whole, fmax(UNPACK_VALUES, UNPACK_ROWS * fmax(D, M)));
    return b * input + weight + unpacked;
}

size_t dit_step_bytes(const DiTConfig *c, int B, int n, AttnMemory attn, DiTStep step) {
    Line l[32];
    DiTPass pass = step.pass;
    Stored st = stored(c, step), floats = gradients(c, step);
    // in double: sizes of configs that cannot fit anywhere must not wrap around
    // in-context: the blocks run on the conditioning tokens too
    double nb = n + dit_front_tokens(c), b = B;
    // what --recompute keeps of a block besides its halves' inputs: the cross-attention's line
    // less two n D (its residual sum, the MLP half's input, counted with the halves' inputs; and
    // one measured: model 6 of memory_estimate_holds at 2 threads stood at x1.32 without it), or
    // a joint block's whole attention half but backward's gradients (only its MLP halves run again)
    bool joint = c->text && c->text_attn == DIT_TEXT_JOINT;
    double held = joint && pass != DIT_FORWARD ? attn.joint_held * nb * c->hidden_size : 0;
    // the halves as stored, and their gradients: float, as the float step's values
    double attn_half, mlp_half, cross, attn_grads, mlp_grads, unused;
    halves(c, nb, attn.kept + held, st, &attn_half, &mlp_half, &cross);
    halves(c, nb, attn.kept + held, floats, &attn_grads, &mlp_grads, &unused);
    cross -= (c->text && !joint) * 2 * nb * c->hidden_size;
    double block = attn_half + mlp_half;
    if (joint) cross = attn_half - held;
    int fixed, r = rest_lines(l, c, n, b, &fixed, st);
    double rest = sum_lines(l, r), rest_grads = sum_lines(l + fixed, r - fixed);
    int dh = c->hidden_size / c->num_heads, tiles = 30 * c->depth + 40; // allocations, headers
    double scratch = (double)attention_scratch_count(B, attn.queries, attn.keys, c->num_heads, dh,
                                                     pass != DIT_FORWARD);
    // what backward holds of the blocks' forward: every block's activations, or under recompute
    // the input of every block's two halves and one half's activations, run again; and the
    // gradients of one block (tape.c frees the rest as it goes), or of one half (the one run again)
    bool again = pass == DIT_RECOMPUTE;
    double blocks = again ? c->depth * (2 * (double)n * c->hidden_size + cross) +
                              (joint ? mlp_half + fmax(attn_grads, mlp_grads) : fmax(attn_half + attn_grads, mlp_half + mlp_grads))
                        : c->depth * block + attn_grads + mlp_grads;
    double reals;
    if (pass != DIT_FORWARD) // the blocks' activations and gradients, the residual stream's
        // gradient, and the largest transient
        reals = b * (blocks + rest + rest_grads + (double)n * c->hidden_size) +
                fmax(scratch, b * attn.transient);
    else // without gradients dit_forward keeps one block's intermediates at a time, and its input
        // (the block before's output, kept); the attention's transient lives during its half only;
        // and a layernorm_modulate's normalized x while it runs (joint: with the other stream's q, k, v)
        reals = b * (rest + (double)n * c->hidden_size) +
                fmax(b * block, b * attn_half + fmax(scratch, b * attn.transient)) + b * nb * c->hidden_size;
    if (step.bf16) reals += bf16_transients(c, b, n, nb, step.exact);
    double bytes = reals * sizeof(real) + tiles * 2.0 * ARENA_ALIGN + step.bf16 * 2.0 * ARENA_ALIGN * (3 * c->depth + 4);
    return bytes < (double)SIZE_MAX ? (size_t)bytes : SIZE_MAX;
}
