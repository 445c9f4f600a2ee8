// config.c: see config.h.
#include "config.h"
#include "../core/safefile.h"
#include "../data/data.h"
#include "flags.h"
#include "settings.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void train_config_help(FILE *f) {
    fprintf(f,
        "usage: mpirun -np N train/train [flags]      train a DiT with sequence parallelism over N ranks\n"
        "       train/train probe --help               one forward+backward on a given batch\n"
        "       train/train compare RUN_A RUN_B         compare two runs' loss curves\n"
        "       train/train verify --ranks N [flags]    train with N ranks and with 1, then compare\n"
        "       train/train sample --help              a sample grid from a checkpoint\n"
        "       train/train plan --help                every mesh of N ranks ranked by predicted time\n"
        "       train/train bugs --help                every injectable bug caught, as a table\n"
        "       train/train locate A B                 where two tape dumps (probe --dump-tape) part\n");
    settings_help(f, FOR_TRAIN);
    fprintf(f, "\nevery command:\n" EVERY_COMMAND_HELP);
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
    if (sample_sizes_error(&tc->sample_sizes, m, why, sizeof why)) usage_error("%s", why);
    DiTConfig preset = tc->model;
    dit_preset(tc->preset, &preset);
    if (preset.hidden_size != tc->model.hidden_size || preset.depth != tc->model.depth ||
        preset.num_heads != tc->model.num_heads || preset.patch_size != tc->model.patch_size ||
        preset.mlp_ratio != tc->model.mlp_ratio)
        strcpy(tc->preset, "custom");
    if (tc->resume[0] && !out_given) strcpy(tc->out, tc->resume);
    else if (!out_given) default_out(tc->out);
    if (!m->text && tc->text_dropout > 0)
        usage_error("--text-dropout drops captions, which --cond class does not have; add --cond text "
                    "or leave it out");
    // no null class, or null caption, to guide with
    if (tc->cfg_scale != 1 && (m->text ? tc->text_dropout : m->class_dropout_prob) == 0) {
        if (cfg_given)
            usage_error("--cfg-scale %g needs the null %s that %s dropout trains; pass --%s-dropout "
                        "above 0, or --cfg-scale 1", tc->cfg_scale, m->text ? "caption" : "class",
                        m->text ? "caption" : "label", m->text ? "text" : "class");
        tc->cfg_scale = 1;
    }
    if (tc->log_every == 0) tc->log_every = tc->steps >= 20 ? tc->steps / 20 : 1;
    tc->parallel.packs = tc->max_tokens > 0;
}

const char *sample_sizes_error(const SampleSizes *s, const DiTConfig *m, char *buf, size_t len) {
    int p = m->patch_size;
    for (int i = 0; i < s->n; i++) {
        int h = s->h[i], w = s->w[i];
        if (h % p || w % p)
            return snprintf(buf, len, "--sample-sizes %dx%d: each side must be a multiple of the "
                            "patch %d; pass e.g. %dx%d", h, w, p, (h + p - 1) / p * p,
                            (w + p - 1) / p * p), buf;
        long tokens = (long)dit_grid(m).frames * (h / p) * (w / p); // clips: every frame's
        if (tokens > dit_tokens(m))
            return snprintf(buf, len, "--sample-sizes %dx%d has %ld tokens, more than the %d of "
                            "--input-size %d (patch %d); pass smaller sizes or a larger --input-size",
                            h, w, tokens, dit_tokens(m), m->input_size, p), buf;
    }
    return NULL;
}

// ---- --resume: the run's own settings first ------------------------------------------------------
// The run's settings from DIR/config.json into tc (the rows that --resume restores); false if the
// folder has none (resume_run then says what the folder lacks)
static bool read_run(TrainConfig *tc, const char *dir) {
    char path[PATH_LEN + 16], err[PATH_LEN + 512];
    json_t *root = settings_load(dir, path, sizeof path, err, sizeof err);
    if (!root && err[0]) usage_error("--resume: %s; give the --out folder of a training run", err);
    const char *why = root ? settings_read(tc, root, path, err, sizeof err) : NULL;
    json_decref(root);
    if (why) usage_error("--resume: %s; correct it there, or start a new run", why);
    return root != NULL;
}

// A flag given with --resume must agree with the run on what defines it: each setting that does
// not is named
static void check_resumed(const TrainConfig *run, const TrainConfig *tc, const char *dir) {
    char diff[1024] = "";
    size_t used = 0;
    for (int i = 0; i < SETTINGS && used < sizeof diff; i++) {
        const Setting *s = &settings[i];
        char a[PATH_LEN], b[PATH_LEN];
        if ((s->rules & FIXED) != FIXED) continue;
        setting_text(s, run, a, sizeof a);
        setting_text(s, tc, b, sizeof b);
        if (strcmp(a, b))
            used += (size_t)snprintf(diff + used, sizeof diff - used, "%s%s %s (the run has %s)",
                                     used ? ", " : "", s->flag, b, a);
    }
    if (used)
        usage_error("--resume: %s was trained with other settings than %s; leave those flags out "
                    "(resume takes the run's own settings from its config.json)", dir, diff);
}

bool train_config_parse(TrainConfig *tc, int argc, char **argv, int rank) {
    train_config_defaults(tc);
    for (int i = 0; i < argc; i++) // help wins over any other flag, valid or not
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (rank == 0) train_config_help(stdout);
            return false;
        }
    const char *resume = NULL;
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--resume")) resume = argv[i + 1];
    if (resume && !resume[0]) usage_error("--resume is empty; pass the folder of the run to continue");
    bool resumed = resume && !dry_run_missing("--resume", resume, rank == 0) && read_run(tc, resume);
    TrainConfig run = *tc; // the run's settings alone, to hold the flags given again against
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
        }
    bool out_given = false, cfg_given = false;
    for (int i = 0; i < argc; i++) {
        const Setting *s = settings_flag(tc, FOR_TRAIN, argc, argv, &i);
        if (!s) usage_error("unknown argument '%s'", argv[i]);
        out_given = out_given || !strcmp(s->key, "out");
        cfg_given = cfg_given || !strcmp(s->key, "cfg_scale");
    }
    if (resumed) check_resumed(&run, tc, resume);
    tc->resumed_zero = run.parallel.zero;
    settle(tc, out_given, cfg_given);
    return true;
}

void train_config_text(const TrainConfig *tc, char *buf, size_t len) {
    settings_text(tc, FOR_TRAIN, buf, len);
}

int train_config_write_json(const TrainConfig *tc, const char *path, char *err, size_t len) {
    json_t *root = json_object();
    json_object_set_new(root, "objective", json_string("rectified flow: v = eps - x0, t ~ "
                                                       "logit-normal(0, 1), model time 1000 t"));
    json_object_set_new(root, "sampler", json_string("Euler from t = 1 to 0, classifier-free guidance"));
    err[0] = 0;
    char *text = settings_to_json(tc, root, err, len) ? NULL
                 : json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(settings_json_digits(tc)));
    json_decref(root);
    if (!text) {
        if (!err[0]) snprintf(err, len, "%s: the settings cannot be written as JSON", path);
        return -1;
    }
    SafeFile a;
    int rc = safefile_open(&a, path, err, len);
    if (!rc) {
        fprintf(a.f, "%s\n", text);
        rc = safefile_commit(&a, !ferror(a.f), err, len);
    }
    free(text);
    return rc;
}
