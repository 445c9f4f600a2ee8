// settings.c: see settings.h.
#include "settings.h"
#include "flags.h"
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---- kinds: how a value is read and written ----------------------------------------------------
// The fewest significant digits that read back as exactly v
static int shortest_digits(double v) {
    char text[32];
    int digits = 1;
    while (digits < 17 && (snprintf(text, sizeof text, "%.*g", digits, v), strtod(text, NULL) != v))
        digits++;
    return digits;
}

void double_text(char *buf, size_t len, double v) { snprintf(buf, len, "%.*g", shortest_digits(v), v); }

// The flag of a row, or its key when it has none
static const char *name_of(const Setting *s) { return s->flag ? s->flag : s->key; }

static const char *expects(const Setting *s, const char *text, char *buf, size_t len) {
    snprintf(buf, len, "%s expects %s, got '%s'", name_of(s), s->kind->takes, text);
    return buf;
}

static const char *unknown(const Setting *s, const char *noun, const char *text, char *buf, size_t len) {
    snprintf(buf, len, "%s: unknown %s '%s' (known: %s)", name_of(s), noun, text, s->kind->names());
    return buf;
}

static const char *parse_int(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    long v;
    if (!text_long(text, &v) || v < INT_MIN || v > INT_MAX) return expects(s, text, buf, len);
    *(int *)field = (int)v;
    return NULL;
}
static void format_int(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%d", *(const int *)field);
}

static const char *parse_double(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    double v;
    if (!text_double(text, &v)) return expects(s, text, buf, len);
    *(double *)field = v;
    return NULL;
}
static void format_double(const void *field, char *buf, size_t len) {
    double_text(buf, len, *(const double *)field);
}

static const char *parse_u64(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    uint64_t v;
    if (!text_u64(text, &v)) return expects(s, text, buf, len);
    *(uint64_t *)field = v;
    return NULL;
}
static void format_u64(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
}

// also Python's spelling, and 1 / 0
static const char *parse_bool(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    bool yes = !strcmp(text, "true") || !strcmp(text, "True") || !strcmp(text, "1");
    bool no = !strcmp(text, "false") || !strcmp(text, "False") || !strcmp(text, "0");
    if (!yes && !no) return expects(s, text, buf, len);
    *(bool *)field = yes;
    return NULL;
}
static void format_bool(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
}

// A path: config.json holds it, so it must be UTF-8 (control characters are escaped there)
static const char *parse_path(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    if (strlen(text) >= PATH_LEN) {
        snprintf(buf, len, "%s: the path is longer than %d characters", name_of(s), PATH_LEN - 1);
        return buf;
    }
    json_t *utf8 = json_string(text); // NULL if it is not UTF-8
    json_decref(utf8);
    if (!utf8) {
        snprintf(buf, len, "%s: the path is not UTF-8 text, which config.json cannot hold; rename it",
                 name_of(s));
        return buf;
    }
    strcpy(field, text);
    return NULL;
}
static void format_text(const void *field, char *buf, size_t len) { snprintf(buf, len, "%s", (const char *)field); }

// A preset's name, or "custom" (sizes of no preset), which config.json may hold
static const char *parse_preset(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    DiTConfig sizes;
    if (strcmp(text, "custom") && (strlen(text) >= sizeof ((TrainConfig *)0)->preset || !dit_preset(text, &sizes)))
        return unknown(s, "preset", text, buf, len);
    strcpy(field, text);
    return NULL;
}

// a layout, or auto: training asks the planner (plan.c)
static const char *layout_names(void) {
    static char names[160];
    snprintf(names, sizeof names, "%s, auto", seq_attention_names());
    return names;
}
static const char *parse_layout(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    if (!strcmp(text, "auto")) return *(SeqAttention *)field = SP_AUTO, NULL;
    return seq_attention_from_name(text, field) ? NULL : unknown(s, "layout", text, buf, len);
}
static void format_layout(const void *field, char *buf, size_t len) {
    SeqAttention a = *(const SeqAttention *)field;
    snprintf(buf, len, "%s", a == SP_AUTO ? "auto" : seq_attention_name(a));
}

// An enum's value by name: the index of text in names (count of them)
static const char *parse_choice(const Setting *s, int *field, const char *text, const char *const *names,
                                int count, const char *noun, char *buf, size_t len) {
    for (int i = 0; i < count; i++)
        if (!strcmp(text, names[i])) return *field = i, NULL;
    return unknown(s, noun, text, buf, len);
}
static const char *const pos_list[] = {"sincos", "rope"}, *const qk_norm_list[] = {"none", "head", "full"};
static const char *pos_names(void) { return "sincos, rope"; }
static const char *parse_pos(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_choice(s, field, text, pos_list, 2, "position kind", buf, len);
}
static void format_pos(const void *field, char *buf, size_t len) { snprintf(buf, len, "%s", pos_list[*(const DiTPos *)field]); }
static const char *qk_norm_names(void) { return "none, head, full"; }
static const char *parse_qk_norm(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_choice(s, field, text, qk_norm_list, 3, "QK-norm", buf, len);
}
static void format_qk_norm(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", qk_norm_list[*(const DiTQKNorm *)field]);
}

// A switch named by one of two words (names[1]: true)
static const char *parse_pair(const Setting *s, bool *field, const char *text, const char *const *names,
                              const char *noun, char *buf, size_t len) {
    int i = 0;
    const char *why = parse_choice(s, &i, text, names, 2, noun, buf, len);
    if (!why) *field = i;
    return why;
}
static const char *const device_list[] = {"cpu", "cuda"};
static const char *const precision_list[] = {"fp32", "bf16"};
static const char *precision_names(void) { return "fp32, bf16"; }
// fp32 or bf16, of the thing the row's kind names ("a precision": "unknown precision 'x'")
static const char *parse_precision(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_pair(s, field, text, precision_list, s->kind->takes + 2, buf, len);
}
static void format_precision(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", precision_list[*(const bool *)field]);
}

static const char *device_names(void) { return "cpu, cuda"; }
static const char *parse_device(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_pair(s, field, text, device_list, "device", buf, len);
}
static void format_device(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", device_list[*(const bool *)field]);
}

// Bug names, comma-separated, or "none": each is added to the set (--inject-bug may repeat)
static const char *parse_bugs(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    BugMask set = 0;
    for (const char *b = strcmp(text, "none") ? text : NULL; b;) {
        char name[64];
        size_t n = strcspn(b, ",");
        snprintf(name, sizeof name, "%.*s", (int)n, b);
        BugMask bug = n < sizeof name ? bug_from_name(name) : 0;
        if (!bug) return unknown(s, "bug", n < sizeof name ? name : text, buf, len);
        set |= bug;
        b = b[n] ? b + n + 1 : NULL;
    }
    *(BugMask *)field |= set;
    return NULL;
}
static void format_bugs(const void *field, char *buf, size_t len) { bug_list(*(const BugMask *)field, buf, len); }

// Pixel sizes "HxW,HxW,...", or "" (none)
static const char *parse_sizes(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    SampleSizes z = {0};
    for (const char *at = *text ? text : NULL; at;) {
        int h, w, used = 0;
        if (sscanf(at, "%dx%d%n", &h, &w, &used) != 2 || (at[used] && at[used] != ',') || h < 1 ||
            w < 1 || h > DIT_MAX_INPUT_SIZE || w > DIT_MAX_INPUT_SIZE || z.n == SAMPLE_SIZES_MAX)
            return snprintf(buf, len, "%s '%s': expects 1 to %d sizes HEIGHTxWIDTH in pixels (1 to "
                            "%d each) separated by commas, e.g. 16x16,8x24", name_of(s), text,
                            SAMPLE_SIZES_MAX, DIT_MAX_INPUT_SIZE), buf;
        z.h[z.n] = h, z.w[z.n++] = w;
        at = at[used] ? at + used + 1 : NULL;
    }
    *(SampleSizes *)field = z;
    return NULL;
}
static void format_sizes(const void *field, char *buf, size_t len) {
    const SampleSizes *z = field;
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < z->n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%dx%d", i ? "," : "", z->h[i], z->w[i]);
}

static const char *const cond_list[] = {"class", "text"};
static const char *cond_names(void) { return "class, text"; }
static const char *parse_cond(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_pair(s, field, text, cond_list, "conditioning", buf, len);
}
static void format_cond(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", cond_list[*(const bool *)field]);
}

static const char *const text_attn_list[] = {[DIT_TEXT_CROSS] = "cross", [DIT_TEXT_JOINT] = "joint"};
static const char *text_attn_names(void) { return "cross, joint"; }
static const char *parse_text_attn(const Setting *s, void *field, const char *text, char *buf, size_t len) {
    return parse_choice(s, field, text, text_attn_list, 2, "text attention", buf, len);
}
static void format_text_attn(const void *field, char *buf, size_t len) {
    snprintf(buf, len, "%s", text_attn_list[*(const int *)field]);
}

static const SettingKind INT_TEXT = {sizeof(int), AS_INTEGER, "%.0f", "a whole number", NULL, parse_int, format_int},
    DOUBLE_TEXT = {sizeof(double), AS_REAL, "%g", "a number", NULL, parse_double, format_double},
    U64_TEXT = {sizeof(uint64_t), AS_INTEGER, NULL, "a non-negative whole number", NULL, parse_u64, format_u64},
    BOOL_TEXT = {sizeof(bool), AS_BOOLEAN, NULL, "true or false", NULL, parse_bool, format_bool},
    PATH_TEXT = {PATH_LEN, AS_STRING, NULL, "a path", NULL, parse_path, format_text},
    PRESET_NAME = {sizeof((TrainConfig *)0)->preset, AS_STRING, NULL, "a preset", dit_preset_names,
                   parse_preset, format_text},
    LAYOUT_NAME = {sizeof(SeqAttention), AS_STRING, NULL, "a layout", layout_names,
                   parse_layout, format_layout},
    POS_NAME = {sizeof(DiTPos), AS_STRING, NULL, "a position kind", pos_names, parse_pos, format_pos},
    QK_NORM_NAME = {sizeof(DiTQKNorm), AS_STRING, NULL, "a QK-norm", qk_norm_names, parse_qk_norm, format_qk_norm},
    DEVICE_NAME = {sizeof(bool), AS_STRING, NULL, "a device", device_names, parse_device, format_device},
    PRECISION_NAME = {sizeof(bool), AS_STRING, NULL, "a precision", precision_names, parse_precision,
                      format_precision},
    DTYPE_NAME = {sizeof(bool), AS_STRING, NULL, "a dtype", precision_names, parse_precision, format_precision},
    WIRE_NAME = {sizeof(bool), AS_STRING, NULL, "a gradient wire", precision_names, parse_precision, format_precision},
    BUG_NAMES = {sizeof(BugMask), AS_STRING, NULL, "bug names", bug_names, parse_bugs, format_bugs},
    SIZES_TEXT = {sizeof(SampleSizes), AS_STRING, NULL, "pixel sizes", NULL, parse_sizes, format_sizes},
    COND_NAME = {sizeof(bool), AS_STRING, NULL, "class or text", cond_names, parse_cond, format_cond},
    TEXT_ATTN_NAME = {sizeof(int), AS_STRING, NULL, "cross or joint", text_attn_names, parse_text_attn,
                      format_text_attn};

// --device cuda needs a GPU here: said before any work
static const char *device_check(const TrainConfig *tc, char *buf, size_t len) {
    return tc->parallel.cuda ? sp_device_error(&tc->parallel, buf, len) : NULL;
}

// ---- the table ---------------------------------------------------------------------------------
// Each row: key, flag, the value's name in --help (NULL: a switch), kind, field, range (min, max);
// the commands that take the flag, the rules, the check run when the flag is given, the --help
// heading it starts; the --help text. The order is that of --help and config.json; the model's
// rows come in DiTConfig's order (checkpoint metadata).
#define OFF(field) offsetof(TrainConfig, field)
#define PARALLEL (FOR_TRAIN | FOR_PROBE) // the flags of the parallel layout and the micro-batches
enum { FIRST_MODEL_ROW = 1 };
const Setting settings[] = {
    {"preset", "--model", "NAME", &PRESET_NAME, OFF(preset), 0, 0,
     FOR_TRAIN, RESUMED | AGREED, NULL, "model",
     "preset (default {default}): {names};\n"
     "width/depth/heads S 384/12/6, B 768/12/12, L 1024/24/16,\n"
     "XL 1152/28/16, mini 64/4/4, tiny 32/2/2"},
    {"input_size", "--input-size", "S", &INT_TEXT, OFF(model.input_size), 1, DIT_MAX_INPUT_SIZE,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "image size in pixels (default {default}; a multiple of the patch)"},
    {"patch_size", "--patch", "P", &INT_TEXT, OFF(model.patch_size), 1, DIT_MAX_PATCH,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "patch size in pixels (default: the preset's)"},
    {"in_channels", NULL, NULL, &INT_TEXT, OFF(model.in_channels), 0, 0,
     FOR_TRAIN, AGREED, NULL, NULL,
     NULL},
    {"hidden_size", "--hidden", "D", &INT_TEXT, OFF(model.hidden_size), 4, DIT_MAX_HIDDEN,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "width (default: the preset's)"},
    {"depth", "--depth", "L", &INT_TEXT, OFF(model.depth), 1, DIT_MAX_DEPTH,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "blocks (default: the preset's)"},
    {"num_heads", "--heads", "H", &INT_TEXT, OFF(model.num_heads), 1, DIT_MAX_HEADS,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "attention heads, which divide the width (default: the preset's)"},
    {"mlp_ratio", "--mlp-ratio", "R", &DOUBLE_TEXT, OFF(model.mlp_ratio), 0.01, DIT_MAX_MLP_RATIO,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "MLP width over the width (default: the preset's)"},
    {"num_classes", "--num-classes", "N", &INT_TEXT, OFF(model.num_classes), 1, DIT_MAX_CLASSES,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "class labels (default {default}; at least the classes of the data)"},
    {"learn_sigma", "--learn-sigma", NULL, &BOOL_TEXT, OFF(model.learn_sigma), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "output 2C channels as the reference does (only the velocity half is trained)"},
    {"class_dropout_prob", "--class-dropout", "P", &DOUBLE_TEXT, OFF(model.class_dropout_prob), 0, 0.99,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "label dropout for classifier-free guidance (default {default}; 0 = none)"},
    {"in_context", "--in-context", NULL, &BOOL_TEXT, OFF(model.in_context), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "condition by two tokens (time, class) in front of the sequence, held\n"
     "by every rank, instead of adaLN: DiT's in-context variant (layouts\n"
     "gather and all-to-all)"},
    {"cond", "--cond", "class|text", &COND_NAME, OFF(model.text), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "condition on class labels or on captions (default {default}; text:\n"
     "the shapes' captions, or a .txt beside each image of a folder;\n"
     "docs/text.md)"},
    {"text_len", "--text-len", "L", &INT_TEXT, OFF(model.text_len), 1, DIT_MAX_TEXT_LEN,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "--cond text: tokens a caption is padded to (default {default})"},
    {"text_depth", "--text-depth", "N", &INT_TEXT, OFF(model.text_depth), 0, DIT_MAX_TEXT_DEPTH,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "--cond text: pre-norm transformer layers of the text encoder, after\n"
     "its token embeddings (default {default})"},
    {"text_attn", "--text-attn", "cross|joint", &TEXT_ATTN_NAME, OFF(model.text_attn), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "--cond text: cross-attention to the caption after each block's\n"
     "self-attention (PixArt-alpha), or joint attention over [caption;\n"
     "image] with weights per stream (SD3's MMDiT) (default {default})"},
    {"frames", "--frames", "F", &INT_TEXT, OFF(model.frames), 1, DIT_MAX_FRAMES,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "frames of a sample (default {default}: images); more: clips, their\n"
     "tokens frame by frame, with a 3-D sin-cos position table\n"
     "(--data moving-shapes)"},
    {"patch_t", "--patch-t", "PT", &INT_TEXT, OFF(model.patch_t), 1, DIT_MAX_FRAMES,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "frames of a patch, dividing --frames (default {default})"},
    {"pos", "--pos", "KIND", &POS_NAME, OFF(model.pos), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "positions: sincos, the 2-D table added to the patch embedding\n"
     "(default {default}), or rope: rotary positions on q and k, a head's\n"
     "dims split between frame, row and column as in Wan2.1 (head width\n"
     "even, at least 6; docs/video.md)"},
    {"qk_norm", "--qk-norm", "KIND", &QK_NORM_NAME, OFF(model.qk_norm), 0, 0,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "RMSNorm with a learned scale on q and k before attention: head, over\n"
     "each head's dims (Flux, HunyuanVideo); full, over the whole width\n"
     "(Wan2.1); or none (default {default})"},

    {"steps", "--steps", "N", &INT_TEXT, OFF(steps), 1, 1 << 30,
     FOR_TRAIN, RESUMED | NOT_COMPARED | AGREED, NULL, "training",
     "optimizer steps (default {default})"},
    {"batch", "--batch", "B", &INT_TEXT, OFF(batch), 1, 1 << 16,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "images per step, the same on every rank (default {default})"},
    {"lr", "--lr", "LR", &DOUBLE_TEXT, OFF(lr), 1e-12, 10,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "AdamW learning rate (default {default}; DiT uses 1e-4 at scale)"},
    {"weight_decay", "--weight-decay", "W", &DOUBLE_TEXT, OFF(weight_decay), 0, 10,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "decoupled weight decay (default {default})"},
    {"clip_norm", "--clip-norm", "C", &DOUBLE_TEXT, OFF(clip_norm), 0, 1e12,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "clip the global gradient norm (default {default}; 0 = off)"},
    {"ema", "--ema", "DECAY", &DOUBLE_TEXT, OFF(ema), 0, 0.999999,
     FOR_TRAIN, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "EMA of the weights, decay min(DECAY, (1+step)/(10+step)), used for\n"
     "samples (default {default}; 0 = off)"},
    {"seed", "--seed", "S", &U64_TEXT, OFF(seed), 0, 0,
     FOR_TRAIN | FOR_SAMPLE, FIXED | AGREED, NULL, NULL,
     "every random value is a function of the seed (default {default})"},
    {"qkv_gain", "--qkv-gain", "G", &DOUBLE_TEXT, OFF(qkv_gain), 0.001, 1000,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "multiply the initial attention qkv weights by G, for attention logits\n"
     "G^2 times larger (default {default})"},
    {"data", "--data", "shapes|moving-shapes|DIR", &PATH_TEXT, OFF(data), 0, 0,
     FOR_TRAIN | FOR_PROBE | FOR_SAMPLE, FIXED | AGREED, NULL, NULL,
     "procedural shapes (10 classes; moving-shapes: clips of them moving,\n"
     "turning or growing, for --frames > 1) or a folder of PNG/JPEG images,\n"
     "one subfolder per class (default {default}; probe: the images of\n"
     "--make-batch)"},
    {"max_tokens", "--max-tokens", "N", &INT_TEXT, OFF(max_tokens), 0, 1 << 24,
     FOR_TRAIN | FOR_PROBE, FIXED | AGREED, NULL, NULL,
     "pack the --data folder's images at their own sizes (sides rounded to\n"
     "the patch, shrunk to N tokens at most) into rows of N tokens, each\n"
     "image with its own positions and attending only to itself; at most\n"
     "the tokens of --input-size (default {default}: square images; probe:\n"
     "--make-batch writes rows of packs)"},
    {"text_dropout", "--text-dropout", "P", &DOUBLE_TEXT, OFF(text_dropout), 0, 0.99,
     FOR_TRAIN, FIXED | AGREED, NULL, NULL,
     "--cond text: replace a caption by the empty one with probability P,\n"
     "for classifier-free guidance (default {default})"},
    {"threads", "--threads", "T", &INT_TEXT, OFF(threads), 1, 1024,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, NULL,
     "threads per rank, GEMM and other loops (default: cores / ranks\n"
     "on this machine)"},

    {"out", "--out", "DIR", &PATH_TEXT, OFF(out), 0, 0,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, "output",
     "run folder: config.json, loss.csv, model.safetensors,\n"
     "optimizer.safetensors, ema.safetensors (unless --ema 0), samples.png\n"
     "(unless --samples-per-class 0), loss.png (default runs/<yyyymmdd>-<n>,\n"
     "the first n not yet there)"},
    {"log_every", "--log-every", "N", &INT_TEXT, OFF(log_every), 1, 1 << 30,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, NULL,
     "progress line every N steps (default: 20 lines per run)"},
    {"sample_every", "--sample-every", "N", &INT_TEXT, OFF(sample_every), 1, 1 << 30,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, NULL,
     "write samples.png every N steps (default: at the end)"},
    {"save_every", "--save-every", "N", &INT_TEXT, OFF(save_every), 0, 1 << 30,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, NULL,
     "write the checkpoint every N steps; 0 = only at the end (default:\n"
     "every 10 minutes of wall time, and at the end)"},
    {"save_dtype", "--save-dtype", "fp32|bf16", &DTYPE_NAME, OFF(save_bf16), 0, 0,
     FOR_TRAIN, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "bf16: model.safetensors and ema.safetensors in BF16, to share (half\n"
     "the bytes); their float values go to optimizer.safetensors, which\n"
     "--resume reads, so a resumed run goes on bit for bit (default {default})"},
    {"resume", "--resume", "DIR", &PATH_TEXT, OFF(resume), 0, 0,
     FOR_TRAIN, NOT_COMPARED | AGREED, NULL, NULL,
     "continue the run in DIR from its checkpoint, with its settings from\n"
     "DIR/config.json: give only what changes (--steps, logging,\n"
     "sampling); a flag that defines the run must agree with it"},
    {"sample_steps", "--sample-steps", "N", &INT_TEXT, OFF(sample_steps), 1, 1000,
     FOR_TRAIN | FOR_SAMPLE, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "Euler steps for samples (default {default})"},
    {"samples_per_class", "--samples-per-class", "K", &INT_TEXT, OFF(samples_per_class), 0, 64,
     FOR_TRAIN | FOR_SAMPLE, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "columns of samples.png (default {default}; 0 = no samples)"},
    {"sample_sizes", "--sample-sizes", "HxW,...", &SIZES_TEXT, OFF(sample_sizes), 0, 0,
     FOR_TRAIN | FOR_SAMPLE, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "pixel sizes of the samples' columns, in turn (e.g. 16x16,8x24): each\n"
     "image drawn at its own size (sides multiples of the patch, at most the\n"
     "tokens of --input-size), several to a sequence, each attending to\n"
     "itself only (default: square images of --input-size)"},
    {"cfg_scale", "--cfg-scale", "S", &DOUBLE_TEXT, OFF(cfg_scale), 0, 100,
     FOR_TRAIN | FOR_SAMPLE, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "classifier-free guidance scale (default {default}; 1 = off)"},

    {"sp", "--sp", "N", &INT_TEXT, OFF(parallel.sp), 0, 1 << 20,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED | LAYOUT, NULL, "sequence parallelism and micro-batches",
     "ranks per sequence group; the ranks / N groups are data parallel,\n"
     "each training on its slice of --batch (default {default}: every rank)"},
    {"sp_attention", "--sp-attention", "NAME", &LAYOUT_NAME, OFF(parallel.layout), 0, 0,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED | LAYOUT, NULL, NULL,
     "{layouts};\n"
     "auto: the planner's fastest mesh for these ranks (layout, U and --sp\n"
     "unless given; train/train plan shows its table)"},
    {"ulysses_degree", "--ulysses-degree", "U", &INT_TEXT, OFF(parallel.ulysses), 0, 1 << 20,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED | LAYOUT, NULL, NULL,
     "hybrid: ranks per all-to-all group (divides --sp, at most the heads)"},
    {"auto_pad", "--no-auto-pad", NULL, &BOOL_TEXT, OFF(parallel.policy.auto_pad), 0, 0,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "refuse a token count that the rank count does not divide"},
    {"pad_multiple", "--pad-multiple", "N", &INT_TEXT, OFF(parallel.policy.pad_multiple), 1, 1 << 20,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "pad tokens to a multiple of N * ranks (default {default})"},
    {"grad_accum", "--grad-accum", "K", &INT_TEXT, OFF(parallel.grad_accum), 1, 1 << 16,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "run each data group's images as K micro-batches (sizes differ by at\n"
     "most one) and add up their gradients; each loss divides by the whole\n"
     "batch's element count, so any K gives one batch's gradient, with the\n"
     "activation memory of the largest micro-batch (default {default})"},
    {"recompute", "--recompute", NULL, &BOOL_TEXT, OFF(parallel.recompute), 0, 0,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "keep the input of each block's attention and MLP halves only and run\n"
     "the half's forward again in backward: the activations of those inputs\n"
     "and of one half, the same gradients (bit for bit), one more forward"},
    {"zero", "--zero", "STAGE", &INT_TEXT, OFF(parallel.zero), 0, 3,
     FOR_TRAIN | FOR_PROBE | FOR_SAMPLE, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "1: ZeRO stage 1, each rank keeps the Adam moments of 1/ranks of the\n"
     "parameters (gradients reduce-scattered, parameters all-gathered);\n"
     "2: stage 2, the summed gradients too (a block's reduce-scattered as\n"
     "its backward ends); 3: stage 3, the parameters and the EMA too (a\n"
     "block's all-gathered as it opens, forward and backward, the next one's\n"
     "on its way meanwhile); the same checkpoint files, and a resumed run\n"
     "may change the stage (probe: its gradients summed as at that stage;\n"
     "sample: at 3 each rank reads and keeps its pieces of the weights);\n"
     "0: whole on every rank (default {default})"},
    {"exact", "--exact", NULL, &BOOL_TEXT, OFF(parallel.exact), 0, 0,
     FOR_ALL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "the same bits as one rank for every rank count per sequence group that\n"
     "divides --virtual-shards, every layout, data groups and micro-batches:\n"
     "per-token work on canonical blocks, every sum over tokens, images or\n"
     "ranks order-independent (on the device: N ranks the same bits as the\n"
     "device's one rank, not the CPU's; 2-5x the step time on the CPU)"},
    {"virtual_shards", "--virtual-shards", "V", &INT_TEXT, OFF(parallel.virtual_shards), 1, 4096,
     FOR_ALL, RESUMED | NOT_COMPARED | AGREED, NULL, NULL,
     "--exact: canonical blocks of the sequence, which pads to a multiple\n"
     "of V (default {default}: 1, 2, 3, 4, 6 or 12 ranks per sequence group)"},
    {"injected_bugs", "--inject-bug", "NAME", &BUG_NAMES, OFF(parallel.bugs), 0, 0,
     PARALLEL, RESUMED | NOT_COMPARED | AGREED | LAYOUT, NULL, NULL,
     "reproduce a classic bug on purpose (repeatable; where each runs):\n{bugs}"},
    {"device", "--device", "cpu|cuda", &DEVICE_NAME, OFF(parallel.cuda), 0, 0,
     FOR_ALL, NOT_COMPARED | AGREED, device_check, NULL,
     "where the step runs (default {default}); cuda: each rank on GPU local rank\n"
     "mod the GPUs of its machine"},
    {"tf32", "--tf32", NULL, &BOOL_TEXT, OFF(parallel.tf32), 0, 0,
     FOR_ALL, NOT_COMPARED | AGREED, NULL, NULL,
     "cuda: float32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)"},
    {"precision", "--precision", "fp32|bf16", &PRECISION_NAME, OFF(parallel.bf16), 0, 0,
     FOR_ALL, RESUMED | FIXED | AGREED, NULL, NULL,
     "bf16: every linear's input and weight and the attention's Q, K and V\n"
     "rounded to bf16, accumulated in float; norms, softmax, loss, gradient\n"
     "sums, AdamW and the EMA in float, the weights kept in float\n"
     "(default {default})"},
    {"grad_wire", "--grad-wire", "fp32|bf16", &WIRE_NAME, OFF(parallel.bf16_grads), 0, 0,
     PARALLEL, RESUMED | FIXED | AGREED, NULL, NULL,
     "bf16 (with --precision bf16, not --exact): the attention's gradients\n"
     "that the layout moves (dQ, dK, dV, the output's) travel in bf16 too,\n"
     "each sender rounding what it sends, partial sums of dK and dV\n"
     "included; parameter gradients and ZeRO stay float (default {default})"},

    {"ranks", NULL, NULL, &INT_TEXT, OFF(ranks), 0, 0,
     FOR_TRAIN, NOT_COMPARED, NULL, NULL,
     NULL},
};
_Static_assert(sizeof settings / sizeof settings[0] == SETTINGS, "SETTINGS must count the rows of settings[]");

void train_config_defaults(TrainConfig *tc) {
    *tc = (TrainConfig){
        .model = {.input_size = 20, .in_channels = 3, .num_classes = 10, .class_dropout_prob = 0.1,
                  .text_len = 12, .text_depth = 1, .frames = 1, .patch_t = 1},
        .steps = 8000, .batch = 32, .lr = 1e-3, .clip_norm = 1.0, .ema = 0.999, .seed = 0, .qkv_gain = 1,
        .log_every = 0, .save_every = -1, .sample_steps = 25, .samples_per_class = 8, .cfg_scale = 3.0,
        .parallel = sp_options_default(),
    };
    strcpy(tc->preset, "DiT-mini/4");
    dit_preset(tc->preset, &tc->model);
    tc->out[0] = 0; // settle picks a fresh runs/<yyyymmdd>-<n> unless --out or --resume names one
    strcpy(tc->data, "shapes");
}

// ---- a row ------------------------------------------------------------------------------------
static const TrainConfig *defaults(void) {
    static TrainConfig d;
    static bool made;
    if (!made) train_config_defaults(&d), made = true;
    return &d;
}

static void *field_of(const Setting *s, TrainConfig *tc) { return (char *)tc + s->off; }
static const void *cfield_of(const Setting *s, const TrainConfig *tc) {
    return (const char *)tc + s->off;
}

const Setting *setting_by_key(const char *key) {
    for (int i = 0; i < SETTINGS; i++)
        if (!strcmp(settings[i].key, key)) return &settings[i];
    return NULL;
}

const Setting *setting_by_flag(const char *flag, unsigned command) {
    for (int i = 0; i < SETTINGS; i++)
        if (settings[i].flag && (settings[i].commands & command) && !strcmp(settings[i].flag, flag))
            return &settings[i];
    return NULL;
}

void setting_text(const Setting *s, const TrainConfig *tc, char *buf, size_t len) {
    s->kind->format(cfield_of(s, tc), buf, len);
}

const char *setting_set(const Setting *s, TrainConfig *tc, const char *text, char *buf, size_t len) {
    const char *why = s->kind->parse(s, field_of(s, tc), text, buf, len);
    if (why || !s->kind->range_format || !(s->min < s->max)) return why;
    double v = strtod(text, NULL);
    if (v >= s->min && v <= s->max) return NULL;
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, s->kind->range_format, s->min);
    snprintf(hi, sizeof hi, s->kind->range_format, s->max);
    snprintf(buf, len, "%s must be between %s and %s, got %s", name_of(s), lo, hi, text);
    return buf;
}

void setting_copy(const Setting *s, TrainConfig *dst, const TrainConfig *src) {
    memcpy(field_of(s, dst), cfield_of(s, src), s->kind->size);
}

// ---- the command line --------------------------------------------------------------------------
const Setting *settings_flag(TrainConfig *tc, unsigned command, int argc, char **argv, int *i) {
    const Setting *s = setting_by_flag(argv[*i], command);
    if (!s) return NULL;
    char buf[1024];
    if (s->arg) {
        const char *why = setting_set(s, tc, flag_value(argc, argv, i), buf, sizeof buf);
        if (why) usage_error("%s", why);
    } else { // a switch: the opposite of the default
        *(bool *)field_of(s, tc) = !*(const bool *)cfield_of(s, defaults());
    }
    const char *why = s->check ? s->check(tc, buf, sizeof buf) : NULL;
    if (why) usage_error("%s", why);
    return s;
}

// The help text of s with {default} and {names} filled in, into buf
// A flag's help text with its values filled in: {default}, {names} (its kind's), {bugs} (each bug
// and where it runs), {layouts} (each layout and what it does), HELP_WIDTH characters a line
enum { HELP_LEN = 4096, HELP_WIDTH = 68 };
static void help_text(const Setting *s, char *buf, size_t len) {
    size_t n = 0;
    for (const char *h = s->help; *h && n < len;) {
        char value[HELP_LEN];
        if (!strncmp(h, "{default}", 9)) setting_text(s, defaults(), value, sizeof value), h += 9;
        else if (!strncmp(h, "{names}", 7)) snprintf(value, sizeof value, "%s", s->kind->names()), h += 7;
        else if (!strncmp(h, "{bugs}", 6)) bug_help(value, sizeof value, HELP_WIDTH), h += 6; // inject.c's table
        else if (!strncmp(h, "{layouts}", 9)) sp_layouts_help(value, sizeof value, HELP_WIDTH), h += 9; // layouts.c's
        else {
            buf[n++] = *h++;
            continue;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s", value);
    }
    buf[n < len ? n : len - 1] = 0;
}

void settings_help(FILE *f, unsigned command) {
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        if (!s->flag || !(s->commands & command)) continue;
        if (s->section && command == FOR_TRAIN) fprintf(f, "\n%s:\n", s->section);
        char left[64], text[HELP_LEN];
        snprintf(left, sizeof left, "%s%s%s", s->flag, s->arg ? " " : "", s->arg ? s->arg : "");
        help_text(s, text, sizeof text);
        fprintf(f, "  %-21s ", left);
        for (const char *line = text; *line;) { // continuation lines under the first
            int n = (int)strcspn(line, "\n");
            fprintf(f, "%s%.*s\n", line == text ? "" : "                        ", n, line);
            line += n + (line[n] == '\n');
        }
    }
}

void settings_text(const TrainConfig *tc, unsigned command, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < SETTINGS && used < len; i++) {
        const Setting *s = &settings[i];
        if (!(s->rules & AGREED) || !(s->commands & command)) continue;
        char value[PATH_LEN];
        setting_text(s, tc, value, sizeof value);
        used += (size_t)snprintf(buf + used, len - used, "%s%s=%s", used ? " " : "", s->key, value);
    }
}

int settings_args(const TrainConfig *tc, unsigned command, char **args, int max, char *store,
                  size_t cap) {
    int n = 0;
    size_t used = 0;
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        char value[PATH_LEN], plain[PATH_LEN];
        if (!s->flag || !(s->commands & command)) continue;
        setting_text(s, tc, value, sizeof value);
        setting_text(s, defaults(), plain, sizeof plain);
        if (!strcmp(value, plain)) continue;
        size_t k = strlen(value) + 1;
        if (n + 2 > max || (s->arg && k > cap - used)) return -1;
        args[n++] = (char *)s->flag;
        if (s->arg) args[n++] = memcpy(store + used, value, k), used += k;
    }
    return n;
}

// ---- config.json --------------------------------------------------------------------------------
int settings_to_json(const TrainConfig *tc, json_t *obj, char *err, size_t len) {
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        char text[PATH_LEN];
        setting_text(s, tc, text, sizeof text);
        json_t *v = NULL;
        switch (s->kind->json) {
        case AS_INTEGER: { // a seed beyond jansson's signed 64 bits is written as text
            errno = 0;
            long long n = strtoll(text, NULL, 10);
            v = errno ? json_string(text) : json_integer(n);
            break;
        }
        case AS_REAL: v = json_real(strtod(text, NULL)); break;
        case AS_BOOLEAN: v = json_boolean(!strcmp(text, "true")); break;
        case AS_STRING: v = json_string(text); break;
        }
        if (json_object_set_new(obj, s->key, v)) {
            snprintf(err, len, "config.json cannot hold %s = '%s' (not UTF-8 text)", s->key, text);
            return -1;
        }
    }
    return 0;
}

int settings_json_digits(const TrainConfig *tc) {
    int most = 1;
    for (int i = 0; i < SETTINGS; i++) {
        if (settings[i].kind->json != AS_REAL) continue;
        int digits = shortest_digits(*(const double *)cfield_of(&settings[i], tc));
        most = digits > most ? digits : most;
    }
    return most;
}

json_t *settings_load(const char *dir, char *path, size_t path_len, char *err, size_t len) {
    snprintf(path, path_len, "%s/config.json", dir);
    err[0] = 0;
    if (access(path, F_OK)) return NULL;
    json_error_t e;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (json_is_object(root)) return root;
    if (root) snprintf(err, len, "%s is not a JSON object", path);
    else snprintf(err, len, "%s is not valid JSON (line %d: %s)", path, e.line, e.text);
    json_decref(root);
    return NULL;
}

// A config.json value as the text a row reads ("none" when absent); false for an array, an
// object or null, which no row takes (then their JSON, shortened)
static bool json_text(const json_t *v, char *buf, size_t len) {
    if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) double_text(buf, len, json_real_value(v));
    else if (json_is_boolean(v)) snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
    else if (!v) snprintf(buf, len, "none");
    else {
        char *dump = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(buf, len, "%.60s", dump ? dump : "?");
        free(dump);
        return false;
    }
    return true;
}

const char *settings_read(TrainConfig *tc, const json_t *root, const char *path, char *buf,
                          size_t len) {
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        const json_t *v = json_object_get(root, s->key);
        if (!(s->rules & RESUMED) || !v) continue;
        char text[PATH_LEN + 1], why[1024]; // room for one character more than a path may hold
        if (!json_text(v, text, sizeof text))
            snprintf(buf, len, "%s has %s = %s, which is not valid for %s (it takes %s)", path,
                     s->key, text, name_of(s), s->kind->takes);
        else if (setting_set(s, tc, text, why, sizeof why))
            snprintf(buf, len, "%s has %s = '%.200s', which is not valid for %s (%s)", path, s->key,
                     text, name_of(s), why);
        else continue;
        return buf;
    }
    return NULL;
}

int settings_differ(const json_t *a, const json_t *b, char *list, size_t len) {
    size_t used = 0;
    int n = 0;
    list[0] = 0;
    for (int side = 0; side < 2; side++) { // keys of a, then keys only b has
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)(side ? b : a), key, v) {
            const Setting *s = setting_by_key(key);
            const json_t *va = side ? json_object_get(a, key) : v, *vb = side ? v : json_object_get(b, key);
            char ta[PATH_LEN + 1], tb[PATH_LEN + 1];
            json_text(va, ta, sizeof ta);
            json_text(vb, tb, sizeof tb);
            // a row's values as it reads them (4 and 4.0 are one double); other keys as JSON
            bool same = s ? !strcmp(ta, tb) : json_equal((json_t *)va, (json_t *)vb);
            if ((s && (s->rules & NOT_COMPARED)) || (side && va) || same) continue;
            if (used < len)
                used += (size_t)snprintf(list + used, len - used, "%s%s (%.100s vs %.100s)",
                                         n ? ", " : "", key, ta, tb);
            n++;
        }
    }
    return n;
}

// ---- checkpoint metadata -------------------------------------------------------------------------
// A DiTConfig field of row FIRST_MODEL_ROW + i
static const Setting *model_row(int i) { return &settings[FIRST_MODEL_ROW + i]; }
static size_t model_off(int i) { return model_row(i)->off - offsetof(TrainConfig, model); }

const char *dit_config_key(int i) { return model_row(i)->key; }

void dit_config_value(const DiTConfig *c, int i, char *buf, size_t len) {
    model_row(i)->kind->format((const char *)c + model_off(i), buf, len);
}

int dit_config_set(DiTConfig *c, int i, const char *text) {
    char why[256];
    return model_row(i)->kind->parse(model_row(i), (char *)c + model_off(i), text, why, sizeof why) ? -1 : 0;
}
