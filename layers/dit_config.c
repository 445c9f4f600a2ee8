// dit_config.c: a DiT's configuration (see dit.h): its frames, patches, grid and front tokens,
// the checks of a config, and the presets (DiT-S/2 ...).
#include "dit.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>

int dit_frames(const DiTConfig *c) { return c->frames > 0 ? c->frames : 1; }
int dit_patch_t(const DiTConfig *c) { return c->patch_t > 0 ? c->patch_t : 1; }
int dit_patch_values(const DiTConfig *c) { return dit_patch_t(c) * c->patch_size * c->patch_size; }
DiTGrid dit_grid(const DiTConfig *c) {
    int g = c->input_size / c->patch_size;
    return (DiTGrid){dit_frames(c) / dit_patch_t(c), g, g};
}
int dit_tokens(const DiTConfig *c) { return (int)dit_grid_tokens(dit_grid(c)); }
int dit_out_channels(const DiTConfig *c) { return c->learn_sigma ? 2 * c->in_channels : c->in_channels; }
int dit_mlp_hidden(const DiTConfig *c) { return (int)(c->hidden_size * c->mlp_ratio); }

int dit_front_tokens(const DiTConfig *c) {
    return c->in_context ? DIT_CONTEXT_TOKENS : c->text && c->text_attn == DIT_TEXT_JOINT ? c->text_len : 0;
}

// "NAME VALUE must be in 1..MAX" if value is out of that range
static bool out_of_range(const char *name, int value, int max, char *buf, size_t len) {
    if (value >= 1 && value <= max) return false;
    snprintf(buf, len, "%s %d must be in 1..%d", name, value, max);
    return true;
}

const char *dit_config_error(const DiTConfig *c, char *buf, size_t len) {
    if (out_of_range("input_size", c->input_size, DIT_MAX_INPUT_SIZE, buf, len) ||
        out_of_range("patch_size", c->patch_size, DIT_MAX_PATCH, buf, len) ||
        out_of_range("in_channels", c->in_channels, DIT_MAX_CHANNELS, buf, len) ||
        out_of_range("hidden_size", c->hidden_size, DIT_MAX_HIDDEN, buf, len) ||
        out_of_range("depth", c->depth, DIT_MAX_DEPTH, buf, len) ||
        out_of_range("num_heads", c->num_heads, DIT_MAX_HEADS, buf, len) ||
        out_of_range("num_classes", c->num_classes, DIT_MAX_CLASSES, buf, len) ||
        out_of_range("frames", dit_frames(c), DIT_MAX_FRAMES, buf, len) ||
        out_of_range("patch_t", dit_patch_t(c), DIT_MAX_FRAMES, buf, len))
        return buf;
    if (dit_frames(c) % dit_patch_t(c))
        snprintf(buf, len, "frames %d must be a multiple of patch_t %d (the frames of a patch); "
                 "pass --frames %d or --patch-t %d", dit_frames(c), dit_patch_t(c),
                 (dit_frames(c) / dit_patch_t(c) + 1) * dit_patch_t(c), 1);
    else if (dit_frames(c) > 1 && c->input_size % c->patch_size == 0 &&
             (double)dit_grid_tokens(dit_grid(c)) * dit_patch_values(c) * dit_out_channels(c) > DIT_MAX_VALUES)
        snprintf(buf, len, "a sample of %d frames of %dx%d pixels and %d channels is too large; "
                 "use fewer frames or smaller images", dit_frames(c), c->input_size, c->input_size,
                 dit_out_channels(c));
    else if (c->input_size % c->patch_size)
        snprintf(buf, len, "input_size %d must be a positive multiple of patch_size %d",
                 c->input_size, c->patch_size);
    else if (c->hidden_size % c->num_heads)
        snprintf(buf, len, "num_heads %d must divide hidden_size %d", c->num_heads, c->hidden_size);
    else if (c->pos == DIT_POS_SINCOS && c->hidden_size % 4)
        snprintf(buf, len, "hidden_size %d must be a multiple of 4 for the 2-D sin-cos position "
                           "embedding; change the width, or pass --pos rope", c->hidden_size);
    else if (c->pos == DIT_POS_ROPE && !dit_rope_fits(c->hidden_size / c->num_heads))
        snprintf(buf, len, "--pos rope splits a head's dimensions into pairs for frames, rows and "
                 "columns (Wan2.1's split), so the head width hidden_size / num_heads = %d / %d "
                 "must be even and at least 6; change --hidden or --heads, or pass --pos sincos",
                 c->hidden_size, c->num_heads);
    else if (c->pos == DIT_POS_SINCOS && dit_frames(c) > 1 && c->hidden_size % 16)
        snprintf(buf, len, "hidden_size %d must be a multiple of 16 for the 3-D sin-cos position "
                           "embedding of clips (D/4 for the frame, 3D/8 each for row and column); "
                           "change the width, or pass --pos rope", c->hidden_size);
    else if (!(c->mlp_ratio > 0 && c->mlp_ratio <= DIT_MAX_MLP_RATIO))
        snprintf(buf, len, "mlp_ratio %g must be in (0, %d]", c->mlp_ratio, DIT_MAX_MLP_RATIO);
    else if (dit_mlp_hidden(c) < 1)
        snprintf(buf, len, "mlp_ratio %g gives an MLP width of %d x %g < 1; raise it or the width",
                 c->mlp_ratio, c->hidden_size, c->mlp_ratio);
    else if (!(c->class_dropout_prob >= 0 && c->class_dropout_prob < 1)) // NaN too
        snprintf(buf, len, "class_dropout_prob %g must be in [0, 1)", c->class_dropout_prob);
    else if (c->text && (c->text_len < 1 || c->text_len > DIT_MAX_TEXT_LEN))
        snprintf(buf, len, "text_len %d must be in 1..%d", c->text_len, DIT_MAX_TEXT_LEN);
    else if (c->text && (c->text_depth < 0 || c->text_depth > DIT_MAX_TEXT_DEPTH))
        snprintf(buf, len, "text_depth %d must be in 0..%d", c->text_depth, DIT_MAX_TEXT_DEPTH);

    else
        return NULL;
    return buf;
}

// ---- presets ----------------------------------------------------------------------------------
static const struct { const char *name; int hidden, depth, heads; } sizes[] = {
    {"S", 384, 12, 6}, {"B", 768, 12, 12}, {"L", 1024, 24, 16}, {"XL", 1152, 28, 16},
    {"mini", 64, 4, 4}, {"tiny", 32, 2, 2},
};

bool dit_preset(const char *name, DiTConfig *c) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int p = 2; p <= 8; p *= 2) {
            char full[32];
            snprintf(full, sizeof full, "DiT-%s/%d", sizes[i].name, p);
            if (strcmp(full, name)) continue;
            c->hidden_size = sizes[i].hidden, c->depth = sizes[i].depth;
            c->num_heads = sizes[i].heads, c->patch_size = p, c->mlp_ratio = 4;
            return true;
        }
    return false;
}

const char *dit_preset_names(void) { return "DiT-{S,B,L,XL,mini,tiny}/{2,4,8}"; }

const char *dit_preset_like(const char *name, char *buf, size_t len) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int p = 2; p <= 8; p *= 2) {
            snprintf(buf, len, "DiT-%s/%d", sizes[i].name, p);
            if (!strcasecmp(buf, name)) return buf;
        }
    return NULL;
}
