// config.c: see config.h.
#include "config.h"
#include "../core/safefile.h"
#include "ditconfig.h"
#include "flags.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void defaults(TrainConfig *tc) {
    *tc = (TrainConfig){
        .model = {.input_size = 20, .in_channels = 3, .num_classes = 10, .class_dropout_prob = 0.1},
        .steps = 8000, .batch = 32, .lr = 1e-3, .clip_norm = 1.0, .ema = 0.999, .seed = 0,
        .log_every = 0, .save_every = -1, .sample_steps = 25, .samples_per_class = 8, .cfg_scale = 3.0,
        .parallel = sp_options_default(),
    };
    strcpy(tc->preset, "DiT-mini/4");
    dit_preset(tc->preset, &tc->model);
    tc->out[0] = 0; // settle picks a fresh runs/<yyyymmdd>-<n> unless --out or --resume names one
    strcpy(tc->data, "shapes");
}

static void help(void) {
    TrainConfig d;
    defaults(&d);
    printf(
        "usage: mpirun -np N train/train [flags]      train a DiT with sequence parallelism over N ranks\n"
        "       train/train probe --help               one forward+backward on a given batch\n"
        "       train/train compare RUN_A RUN_B         compare two runs' loss curves\n"
        "       train/train verify --ranks N [flags]    train with N ranks and with 1, then compare\n"
        "       train/train sample --help              a sample grid from a checkpoint\n"
        "       train/train bugs --help                every injectable bug caught, as a table\n"
        "\nmodel:\n"
        "  --model NAME          preset (default %s): %s;\n"
        "                        %s\n"
        "  --hidden D --depth L --heads H --patch P --mlp-ratio R   override the preset\n"
        "  --input-size S        image size in pixels (default %d; a multiple of the patch)\n"
        "  --learn-sigma         output 2C channels as the reference does (only the velocity half is trained)\n"
        "  --num-classes N       class labels (default %d; at least the classes of the data)\n"
        "  --class-dropout P     label dropout for classifier-free guidance (default %g; 0 = none)\n"
        "\ntraining:\n"
        "  --steps N             optimizer steps (default %d)\n"
        "  --batch B             images per step, the same on every rank (default %d)\n"
        "  --lr LR               AdamW learning rate (default %g; DiT uses 1e-4 at scale)\n"
        "  --weight-decay W      decoupled weight decay (default 0)\n"
        "  --clip-norm C         clip the global gradient norm (default %g; 0 = off)\n"
        "  --ema DECAY           EMA of the weights, decay min(DECAY, (1+step)/(10+step)), used for\n"
        "                        samples (default %g; 0 = off)\n"
        "  --seed S              every random value is a function of the seed (default %llu)\n"
        "  --data shapes|DIR     procedural shapes (10 classes) or a folder of PNG/JPEG images,\n"
        "                        one subfolder per class (default shapes)\n"
        "  --threads T           threads per rank, GEMM and other loops (default: cores / ranks\n"
        "                        on this machine)\n"
        "\noutput:\n"
        "  --out DIR             run folder: config.json, loss.csv, model.safetensors,\n"
        "                        optimizer.safetensors, ema.safetensors (unless --ema 0), samples.png\n"
        "                        (unless --samples-per-class 0), loss.png (default runs/<yyyymmdd>-<n>,\n"
        "                        the first n not yet there)\n"
        "  --log-every N         progress line every N steps (default: 20 lines per run)\n"
        "  --sample-every N      write samples.png every N steps (default: at the end)\n"
        "  --save-every N        write the checkpoint every N steps; 0 = only at the end (default:\n"
        "                        every 10 minutes of wall time, and at the end)\n"
        "  --resume DIR          continue the run in DIR from its checkpoint, with its settings from\n"
        "                        DIR/config.json: give only what changes (--steps, logging,\n"
        "                        sampling); a flag that defines the run must agree with it\n"
        "  --sample-steps N      Euler steps for samples (default %d)\n"
        "  --samples-per-class K columns of samples.png (default %d; 0 = no samples)\n"
        "  --cfg-scale S         classifier-free guidance scale (default %g; 1 = off)\n"
        "\nsequence parallelism and micro-batches:\n" SEQ_FLAGS_HELP,
        d.preset, dit_preset_names(), dit_preset_sizes(), d.model.input_size, d.model.num_classes, d.model.class_dropout_prob, d.steps,
        d.batch, d.lr, d.clip_norm, d.ema, (unsigned long long)d.seed, d.sample_steps,
        d.samples_per_class, d.cfg_scale);
}

bool device_flag(int argc, char **argv, int *i, SpOptions *o) {
    const char *f = argv[*i];
    if (!strcmp(f, "--device")) {
        const char *name = flag_value(argc, argv, i);
        if (strcmp(name, "cpu") && strcmp(name, "cuda"))
            usage_error("--device: unknown device '%s' (known: cpu, cuda)", name);
        o->cuda = !strcmp(name, "cuda");
        char buf[512];
        const char *why = o->cuda ? sp_device_error(o, buf, sizeof buf) : NULL;
        if (why) usage_error("%s", why); // before any work: no GPU here
    } else if (!strcmp(f, "--tf32")) o->tf32 = true;
    else return false;
    return true;
}

bool seq_flag(int argc, char **argv, int *i, SpOptions *o) {
    const char *f = argv[*i];
    if (device_flag(argc, argv, i, o)) return true;
    if (!strcmp(f, "--no-auto-pad")) o->policy.auto_pad = false;
    else if (!strcmp(f, "--pad-multiple"))
        o->policy.pad_multiple = flag_int(f, flag_value(argc, argv, i), 1, 1 << 20);
    else if (!strcmp(f, "--sp")) o->sp = flag_int(f, flag_value(argc, argv, i), 0, 1 << 20);
    else if (!strcmp(f, "--ulysses-degree")) o->ulysses = flag_int(f, flag_value(argc, argv, i), 0, 1 << 20);
    else if (!strcmp(f, "--grad-accum")) o->grad_accum = flag_int(f, flag_value(argc, argv, i), 1, 1 << 16);
    else if (!strcmp(f, "--sp-attention")) {
        const char *name = flag_value(argc, argv, i);
        if (!seq_attention_from_name(name, &o->layout))
            usage_error("--sp-attention: unknown layout '%s' (known: %s)", name, seq_attention_names());
    } else if (!strcmp(f, "--inject-bug")) {
        const char *name = flag_value(argc, argv, i);
        unsigned bug = bug_from_name(name);
        if (!bug) usage_error("--inject-bug: unknown bug '%s' (known: %s)", name, bug_names());
        o->bugs |= bug;
    } else return false;
    return true;
}

static void copy_path(char *dst, const char *flag, const char *src) {
    if (strlen(src) >= PATH_LEN) usage_error("%s: the path is longer than %d characters", flag, PATH_LEN - 1);
    strcpy(dst, src);
}

// The model flags (after --model, which the preset pass read): true when argv[*i] is one, its
// value consumed.
static bool model_flag(DiTConfig *m, int argc, char **argv, int *i) {
    const char *f = argv[*i];
#define VAL flag_value(argc, argv, i)
    if (!strcmp(f, "--model")) VAL;
    else if (!strcmp(f, "--hidden")) m->hidden_size = flag_int(f, VAL, 4, DIT_MAX_HIDDEN);
    else if (!strcmp(f, "--depth")) m->depth = flag_int(f, VAL, 1, DIT_MAX_DEPTH);
    else if (!strcmp(f, "--heads")) m->num_heads = flag_int(f, VAL, 1, DIT_MAX_HEADS);
    else if (!strcmp(f, "--patch")) m->patch_size = flag_int(f, VAL, 1, DIT_MAX_PATCH);
    else if (!strcmp(f, "--mlp-ratio")) m->mlp_ratio = flag_double(f, VAL, 0.01, DIT_MAX_MLP_RATIO);
    else if (!strcmp(f, "--input-size")) m->input_size = flag_int(f, VAL, 1, DIT_MAX_INPUT_SIZE);
    else if (!strcmp(f, "--learn-sigma")) m->learn_sigma = true;
    else if (!strcmp(f, "--num-classes")) m->num_classes = flag_int(f, VAL, 1, DIT_MAX_CLASSES);
    else if (!strcmp(f, "--class-dropout")) m->class_dropout_prob = flag_double(f, VAL, 0, 0.99);
    else return false;
#undef VAL
    return true;
}

// The training and output flags: true when argv[*i] is one, its value consumed; *out_given and
// *cfg_given note --out and --cfg-scale.
static bool run_flag(TrainConfig *tc, int argc, char **argv, int *i, bool *out_given,
                     bool *cfg_given) {
    const char *f = argv[*i];
#define VAL flag_value(argc, argv, i)
    if (!strcmp(f, "--steps")) tc->steps = flag_int(f, VAL, 1, 1 << 30);
    else if (!strcmp(f, "--batch")) tc->batch = flag_int(f, VAL, 1, 1 << 16);
    else if (!strcmp(f, "--lr")) tc->lr = flag_double(f, VAL, 1e-12, 10);
    else if (!strcmp(f, "--weight-decay")) tc->weight_decay = flag_double(f, VAL, 0, 10);
    else if (!strcmp(f, "--clip-norm")) tc->clip_norm = flag_double(f, VAL, 0, 1e12);
    else if (!strcmp(f, "--ema")) tc->ema = flag_double(f, VAL, 0, 0.999999);
    else if (!strcmp(f, "--seed")) tc->seed = flag_u64(f, VAL);
    else if (!strcmp(f, "--data")) copy_path(tc->data, f, VAL);
    else if (!strcmp(f, "--threads")) tc->threads = flag_int(f, VAL, 1, 1024);
    else if (!strcmp(f, "--out")) copy_path(tc->out, f, VAL), *out_given = true;
    else if (!strcmp(f, "--log-every")) tc->log_every = flag_int(f, VAL, 1, 1 << 30);
    else if (!strcmp(f, "--sample-every")) tc->sample_every = flag_int(f, VAL, 1, 1 << 30);
    else if (!strcmp(f, "--save-every")) tc->save_every = flag_int(f, VAL, 0, 1 << 30);
    else if (!strcmp(f, "--resume")) {
        copy_path(tc->resume, f, VAL);
        if (!tc->resume[0]) usage_error("--resume is empty; pass the folder of the run to continue");
    }
    else if (!strcmp(f, "--sample-steps")) tc->sample_steps = flag_int(f, VAL, 1, 1000);
    else if (!strcmp(f, "--samples-per-class")) tc->samples_per_class = flag_int(f, VAL, 0, 64);
    else if (!strcmp(f, "--cfg-scale")) tc->cfg_scale = flag_double(f, VAL, 0, 100), *cfg_given = true;
    else return false;
#undef VAL
    return true;
}

// The default --out: runs/<yyyymmdd>-<n> with the first n not there yet, so a second run gets a
// folder of its own. Every rank picks it from the file system before any rank creates it (rank 0
// makes the folder only after the ranks compared their settings, out among them), so ranks that
// share the file system agree; ranks that do not (machines without a shared runs/) are stopped by
// that comparison and need an explicit --out. Two jobs started at the same moment may pick the
// same name.
static void default_out(char *out) {
    time_t t = time(NULL);
    struct tm tm;
    char day[16] = "today";
    if (localtime_r(&t, &tm)) strftime(day, sizeof day, "%Y%m%d", &tm);
    struct stat sb;
    for (int n = 1;; n++) {
        snprintf(out, PATH_LEN, "runs/%s-%d", day, n);
        if (lstat(out, &sb) != 0) return;
    }
}

// The first few head counts that divide the width, as "1, 2, 4, 8 or 16"
static void head_counts(int width, char *buf, size_t len) {
    int d[5], n = 0;
    for (int h = 1; h <= width && h <= DIT_MAX_HEADS && n < 5; h++)
        if (width % h == 0) d[n++] = h;
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i == 0 ? "" : i == n - 1 ? " or " : ", ", d[i]);
}

// After every flag: the model must be valid, a preset whose sizes were overridden is "custom",
// --resume without --out continues in place (and no --out at all gets a fresh folder), guidance
// needs a null class, and --log-every defaults to 20 lines per run.
static void settle(TrainConfig *tc, bool out_given, bool cfg_given) {
    char why[256];
    const DiTConfig *m = &tc->model;
    if (m->num_heads >= 1 && m->hidden_size >= 1 && m->hidden_size % m->num_heads) {
        head_counts(m->hidden_size, why, sizeof why);
        usage_error("--heads %d does not divide the width %d (--hidden); pick heads that divide "
                    "it, e.g. %s", m->num_heads, m->hidden_size, why);
    }
    if (dit_config_error(&tc->model, why, sizeof why)) usage_error("invalid model: %s", why);
    DiTConfig preset = tc->model;
    dit_preset(tc->preset, &preset);
    if (preset.hidden_size != tc->model.hidden_size || preset.depth != tc->model.depth ||
        preset.num_heads != tc->model.num_heads || preset.patch_size != tc->model.patch_size ||
        preset.mlp_ratio != tc->model.mlp_ratio)
        strcpy(tc->preset, "custom");
    if (tc->resume[0] && !out_given) strcpy(tc->out, tc->resume);
    else if (!out_given) default_out(tc->out);
    if (tc->cfg_scale != 1 && tc->model.class_dropout_prob == 0) { // no null class to guide with
        if (cfg_given)
            usage_error("--cfg-scale %g needs the null class that label dropout trains; pass "
                        "--class-dropout above 0, or --cfg-scale 1", tc->cfg_scale);
        tc->cfg_scale = 1;
    }
    if (tc->log_every == 0) tc->log_every = tc->steps >= 20 ? tc->steps / 20 : 1;
}

// ---- --resume: the run's own settings first ------------------------------------------------------
// The flags that restore a run's settings from its config.json; `fixed` ones define the run (the
// model, the data and the optimizer), so a flag given again must agree with the run.
static const struct { const char *key, *flag; bool fixed; } restored[] = {
    {"input_size", "--input-size", true}, {"patch_size", "--patch", true},
    {"hidden_size", "--hidden", true}, {"depth", "--depth", true}, {"num_heads", "--heads", true},
    {"mlp_ratio", "--mlp-ratio", true}, {"num_classes", "--num-classes", true},
    {"class_dropout_prob", "--class-dropout", true}, {"batch", "--batch", true},
    {"lr", "--lr", true}, {"weight_decay", "--weight-decay", true}, {"clip_norm", "--clip-norm", true},
    {"ema", "--ema", false}, {"seed", "--seed", true}, {"data", "--data", true},
    {"steps", "--steps", false}, {"sample_steps", "--sample-steps", false},
    {"samples_per_class", "--samples-per-class", false}, {"cfg_scale", "--cfg-scale", false},
    {"pad_multiple", "--pad-multiple", false}, {"sp_attention", "--sp-attention", false},
    {"sp", "--sp", false}, {"ulysses_degree", "--ulysses-degree", false},
    {"grad_accum", "--grad-accum", false},
};
#define N_RESTORED (int)(sizeof restored / sizeof restored[0])

// The run's settings as flags (into args, room for max, strings into store), from
// DIR/config.json; 0 if it has none to read (resume_run then says what the folder lacks). More
// (or longer) settings than fit, which train never writes, are a usage error.
static int run_flags(const char *dir, char **args, int max, char *store, size_t cap) {
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!json_is_object(root)) return json_decref(root), 0;
    int n = 0;
    size_t used = 0;
#define PUSH(text)                                                                                 \
    do {                                                                                           \
        size_t k_ = strlen(text) + 1;                                                              \
        if (n == max || k_ > cap - used) {                                                         \
            json_decref(root);                                                                     \
            usage_error("--resume: %s holds more settings, or longer ones, than training writes; " \
                        "pass the folder of a run this program wrote", path);                      \
        }                                                                                          \
        args[n++] = memcpy(store + used, text, k_), used += k_;                                    \
    } while (0)
    for (int i = 0; i < N_RESTORED; i++) {
        json_t *v = json_object_get(root, restored[i].key);
        char text[PATH_LEN];
        if (json_is_string(v)) snprintf(text, sizeof text, "%s", json_string_value(v));
        else if (json_is_integer(v)) snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) double_text(text, sizeof text, json_real_value(v));
        else if (v) { // an array, an object, true, false or null: no flag takes it
            char *dump = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            snprintf(text, sizeof text, "%.60s", dump ? dump : "?");
            free(dump);
            json_decref(root);
            usage_error("--resume: %s has %s = %s, which is not valid for %s (it takes a number or a "
                        "string); correct it there, or start a new run", path, restored[i].key,
                        text, restored[i].flag);
        } else continue;
        PUSH(restored[i].flag);
        PUSH(text);
    }
    if (json_is_true(json_object_get(root, "learn_sigma"))) PUSH("--learn-sigma");
    if (json_is_false(json_object_get(root, "auto_pad"))) PUSH("--no-auto-pad");
    const char *bugs = json_string_value(json_object_get(root, "injected_bugs"));
    char list[256];
    snprintf(list, sizeof list, "%s", bugs ? bugs : "none");
    for (char *save = NULL, *b = strtok_r(list, ",", &save); b && strcmp(b, "none"); b = strtok_r(NULL, ",", &save)) {
        PUSH("--inject-bug");
        PUSH(b);
    }
#undef PUSH
    json_decref(root);
    return n;
}

static void check_resumed(const TrainConfig *run, const TrainConfig *tc, const char *dir, int argc,
                          char **argv);

// The preset name a run's config.json records; false if none
static bool run_preset(const char *dir, char *buf, size_t len) {
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    const char *p = json_string_value(json_object_get(root, "preset"));
    bool ok = p && snprintf(buf, len, "%s", p) < (int)len;
    json_decref(root);
    return ok;
}

static bool flag_given(int argc, char **argv, const char *flag) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], flag)) return true;
    return false;
}

// While the run's own settings are parsed (args[i] and its value), a usage error names
// DIR/config.json and the key the value came from
static void resumed_context(const char *dir, int n, char **args, int i) {
    char before[PATH_LEN + 320];
    const char *key = NULL;
    for (int k = 0; k < N_RESTORED; k++)
        if (!strcmp(args[i], restored[k].flag)) key = restored[k].key;
    if (i + 1 < n && !strcmp(args[i], "--inject-bug"))
        snprintf(before, sizeof before, "--resume: %s/config.json has '%.200s' in injected_bugs, "
                 "which is not valid for --inject-bug (", dir, args[i + 1]);
    else if (i + 1 < n && key)
        snprintf(before, sizeof before, "--resume: %s/config.json has %s = '%.200s', which is not "
                 "valid for %s (", dir, key, args[i + 1], args[i]);
    else return set_usage_context(NULL, NULL);
    set_usage_context(before, "); correct it there, or start a new run");
}

bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank) {
    defaults(tc);
    for (int i = 0; i < argc; i++) // help wins over any other flag, valid or not
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (rank == 0) help();
            return false;
        }
    // the preset first, so that explicit sizes override it wherever they appear
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            char like[32];
            if (dit_preset_like(argv[i + 1], like, sizeof like) && strcmp(like, argv[i + 1]))
                usage_error("--model: unknown preset '%s'; preset names are case-sensitive, so "
                            "pass --model %s", argv[i + 1], like);
            if (!dit_preset(argv[i + 1], &tc->model))
                usage_error("--model: unknown preset '%s'; pass one of %s (train/train --help "
                            "lists their sizes)", argv[i + 1], dit_preset_names());
            snprintf(tc->preset, sizeof tc->preset, "%s", argv[i + 1]);
        }
    bool out_given = false, cfg_given = false;
    const char *resume = NULL;
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--resume")) resume = argv[i + 1];
    char *pre[2 * N_RESTORED + 64], store[8192];
    int n_pre = resume && resume[0] ? run_flags(resume, pre, (int)(sizeof pre / sizeof pre[0]), store, sizeof store) : 0;
    char preset[32] = "";
    if (n_pre && !flag_given(argc, argv, "--model") && run_preset(resume, preset, sizeof preset) &&
        dit_preset(preset, &tc->model)) // the run's preset under its own sizes, for its name
        snprintf(tc->preset, sizeof tc->preset, "%s", preset);
    TrainConfig run = *tc; // the run's settings alone, to hold the flags given again against
    for (int pass = 0; pass < 2; pass++) {
        bool unused = false;
        for (int i = 0; i < n_pre; i++) // the run's settings first, then the flags override them
            if (resumed_context(resume, n_pre, pre, i),
                !model_flag(pass ? &run.model : &tc->model, n_pre, pre, &i) &&
                !run_flag(pass ? &run : tc, n_pre, pre, &i, &unused, pass ? &unused : &cfg_given) &&
                !seq_flag(n_pre, pre, &i, pass ? &run.parallel : &tc->parallel))
                usage_error("--resume: %s/config.json holds the setting '%s', which this version "
                            "does not know", resume, pre[i]);
    }
    set_usage_context(NULL, NULL);
    for (int i = 0; i < argc; i++)
        if (!model_flag(&tc->model, argc, argv, &i) &&
            !run_flag(tc, argc, argv, &i, &out_given, &cfg_given) &&
            !seq_flag(argc, argv, &i, &tc->parallel))
            usage_error("unknown argument '%s'", argv[i]);
    if (n_pre) check_resumed(&run, tc, resume, argc, argv);
    settle(tc, out_given, cfg_given);
    return true;
}

// ---- the settings as key/value pairs: one list for the rank check and for config.json ----------
typedef struct Setting {
    const char *key;
    char value[PATH_LEN];
    bool text; // a JSON string, not a number or boolean
} Setting;

enum { MAX_SETTINGS = DIT_CONFIG_FIELDS + 32 };

static int settings(const TrainConfig *tc, Setting *s) {
    int n = 0;
#define SET(k, is_text, ...) (s[n] = (Setting){.key = k, .text = is_text}, \
                              snprintf(s[n].value, PATH_LEN, __VA_ARGS__), n++)
#define SET_DOUBLE(k, v) (s[n] = (Setting){.key = k}, double_text(s[n].value, PATH_LEN, v), n++)
    SET("preset", true, "%s", tc->preset);
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        s[n] = (Setting){.key = dit_config_key(i)};
        dit_config_value(&tc->model, i, s[n++].value, PATH_LEN);
    }
    SET("steps", false, "%d", tc->steps);
    SET("batch", false, "%d", tc->batch);
    SET_DOUBLE("lr", tc->lr);
    SET_DOUBLE("weight_decay", tc->weight_decay);
    SET_DOUBLE("clip_norm", tc->clip_norm);
    SET_DOUBLE("ema", tc->ema);
    SET("seed", false, "%llu", (unsigned long long)tc->seed);
    SET("data", true, "%s", tc->data);
    SET("out", true, "%s", tc->out);
    SET("resume", true, "%s", tc->resume);
    SET("threads", false, "%d", tc->threads);
    SET("log_every", false, "%d", tc->log_every);
    SET("sample_every", false, "%d", tc->sample_every);
    SET("save_every", false, "%d", tc->save_every);
    SET("sample_steps", false, "%d", tc->sample_steps);
    SET("samples_per_class", false, "%d", tc->samples_per_class);
    SET_DOUBLE("cfg_scale", tc->cfg_scale);
    const SpOptions *o = &tc->parallel;
    SET("auto_pad", false, "%s", o->policy.auto_pad ? "true" : "false");
    SET("pad_multiple", false, "%d", o->policy.pad_multiple);
    SET("sp_attention", true, "%s", seq_attention_name(o->layout));
    SET("sp", false, "%d", o->sp);
    SET("ulysses_degree", false, "%d", o->ulysses);
    SET("grad_accum", false, "%d", o->grad_accum);
    char names[256];
    SET("injected_bugs", true, "%s", bug_list(o->bugs, names, sizeof names));
    SET("device", true, "%s", o->cuda ? "cuda" : "cpu");
    SET("tf32", false, "%s", o->tf32 ? "true" : "false");
#undef SET
#undef SET_DOUBLE
    return n;
}

void train_config_text(const TrainConfig *tc, char *buf, size_t len) {
    Setting s[MAX_SETTINGS];
    int n = settings(tc, s);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s=%s", i ? " " : "", s[i].key, s[i].value);
}

// s with '"' and '\\' escaped and control characters dropped, for a JSON string
static void json_text(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20) continue;
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int train_config_write_json(const TrainConfig *tc, int ranks, const char *path, char *err,
                            size_t len) {
    Setting s[MAX_SETTINGS];
    int n = settings(tc, s);
    SafeFile a;
    if (safefile_open(&a, path, err, len)) return -1;
    fprintf(a.f, "{\n  \"ranks\": %d,\n", ranks);
    fprintf(a.f, "  \"objective\": \"rectified flow: v = eps - x0, t ~ logit-normal(0, 1), model "
                 "time 1000 t\",\n  \"sampler\": \"Euler from t = 1 to 0, classifier-free guidance\"");
    for (int i = 0; i < n; i++) {
        fprintf(a.f, ",\n  \"%s\": ", s[i].key);
        if (s[i].text) json_text(a.f, s[i].value);
        else fputs(s[i].value, a.f);
    }
    fputs("\n}\n", a.f);
    return safefile_commit(&a, !ferror(a.f), err, len);
}

// A flag given again with --resume must agree with the run on what defines it; each that does not
// is named
static void check_resumed(const TrainConfig *run, const TrainConfig *tc, const char *dir, int argc,
                          char **argv) {
    Setting a[MAX_SETTINGS], b[MAX_SETTINGS];
    int n = settings(run, a);
    settings(tc, b);
    char diff[1024] = "";
    size_t used = 0;
    for (int r = 0; r < N_RESTORED; r++) {
        if (!restored[r].fixed || !flag_given(argc, argv, restored[r].flag)) continue;
        for (int i = 0; i < n; i++)
            if (!strcmp(a[i].key, restored[r].key) && strcmp(a[i].value, b[i].value) && used < sizeof diff)
                used += (size_t)snprintf(diff + used, sizeof diff - used, "%s%s %s (the run has %s)",
                                         used ? ", " : "", restored[r].flag, b[i].value, a[i].value);
    }
    if (used)
        usage_error("--resume: %s was trained with other settings than %s; leave those flags out "
                    "(resume takes the run's own settings from its config.json)", dir, diff);
}
