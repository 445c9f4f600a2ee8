// settings.h: the one table of the run's settings, every field of TrainConfig (its model and its
// parallel options included). A row names the field's flag and config.json key, how its value
// is read and written, its range, its --help text, and its rules: which commands take it, what
// --resume does with it, whether compare ignores it, whether the ranks must agree on it, and
// whether verify's 1-rank reference runs without it. The flag parsers of train, probe, sample
// and bugs, their --help, config.json (written and read back), --resume, compare's note on the
// settings two runs differ in, verify's reference, the ranks' agreement check and checkpoint
// metadata (the model's rows) all read it: a new setting is its field and one row.
#pragma once
#include "../layers/dit.h"
#include "../parallel/mesh/sp.h"
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>

#define PATH_LEN 512

// --sample-sizes: the pixel sizes h x w of the samples' columns (column j: size j mod n); n 0:
// square images of --input-size
#define SAMPLE_SIZES_MAX 16
typedef struct SampleSizes {
    int n, h[SAMPLE_SIZES_MAX], w[SAMPLE_SIZES_MAX];
} SampleSizes;

typedef struct TrainConfig {
    DiTConfig model;
    char preset[32];
    int steps, batch;
    double lr, weight_decay, clip_norm, ema; // ema 0 = off
    uint64_t seed;
    double qkv_gain; // the initial attention qkv weights times this (large attention logits)
    char out[PATH_LEN], data[PATH_LEN], resume[PATH_LEN]; // data: "shapes" or an image folder
    int sample_every, save_every, log_every;              // 0 = only at the end; save -1 = timed
    bool save_bf16; // --save-dtype bf16: the model and EMA files in BF16, the float masters in the optimizer file
    int sample_steps, samples_per_class;
    double cfg_scale;
    SampleSizes sample_sizes;
    int threads; // BLAS threads per rank; 0 = cores / ranks
    int max_tokens; // --max-tokens: rows pack a folder's images at their own sizes (0: square)
    double text_dropout; // --text-dropout: a caption replaced by the empty one, for guidance
    SpOptions parallel; // the layout, the groups and the injected bugs (parallel/layouts/context.h)
    int ranks;          // the run's world size (config.json only: mpirun -np chooses it)
    int resumed_zero;   // --resume: the --zero the run saved under (its config.json's; not a setting)
} TrainConfig;

// The defaults of every setting (the --help defaults)
void train_config_defaults(TrainConfig *tc);

// The commands that take a flag (verify passes train's to its runs)
enum { FOR_TRAIN = 1, FOR_PROBE = 2, FOR_SAMPLE = 4, FOR_BUGS = 8, FOR_ALL = 15 };

// A row's rules
enum {
    RESUMED = 1,      // --resume takes the run's value from its config.json; a flag may change it
    FIXED = 2 | 1,    // ... and the value defines the run: a flag given again must agree with it
    NOT_COMPARED = 4, // compare ignores a difference: runs that should agree may differ in it
    AGREED = 8,       // every rank must be started with the same value (checked at start)
    LAYOUT = 16,      // the N-rank run's layout: verify's 1-rank reference runs without it
};

typedef struct Setting Setting;
typedef enum { AS_INTEGER, AS_REAL, AS_BOOLEAN, AS_STRING } JsonKind;
// How a kind of field is read and written
typedef struct SettingKind {
    size_t size;              // bytes of the field
    JsonKind json;            // its type in config.json
    const char *range_format; // numbers: how the range is printed; NULL: no range
    const char *takes;        // what a value is ("a whole number"), for messages
    const char *(*names)(void); // the names a value may be, or NULL
    // Sets the field from text: NULL, or the sentence (naming the flag) into buf
    const char *(*parse)(const Setting *s, void *field, const char *text, char *buf, size_t len);
    void (*format)(const void *field, char *buf, size_t len);
} SettingKind;

struct Setting {
    const char *key;   // in config.json, the ranks' check and checkpoint metadata
    const char *flag;  // NULL: none (config.json only)
    const char *arg;   // the value's name in --help; NULL: a switch, which sets the opposite of
                       // the default
    const SettingKind *kind;
    size_t off;        // of the field in TrainConfig
    double min, max;   // numbers: the range (none when equal)
    unsigned commands; // FOR_*
    unsigned rules;    // RESUMED, FIXED, NOT_COMPARED, AGREED, LAYOUT
    // Checks the settings once the flag is given: NULL, or the sentence into buf
    const char *(*check)(const TrainConfig *tc, char *buf, size_t len);
    const char *section; // --help: a heading before this row
    const char *help;    // --help text: {default} and {names} are filled in; \n continues it
};

#define SETTINGS 58 // the rows of the table
extern const Setting settings[SETTINGS];

// The row of a config.json key, or of one of `command`'s flags; NULL if none.
const Setting *setting_by_key(const char *key);
const Setting *setting_by_flag(const char *flag, unsigned command);
// The row's value in tc, as text ("0.1", "true", "gather", "local-kv,no-pad-mask").
void setting_text(const Setting *s, const TrainConfig *tc, char *buf, size_t len);
// Sets the row's field of tc from text, checking its kind and range: NULL, or the sentence that
// names the flag (or key) into buf; the field may then hold a value out of range.
const char *setting_set(const Setting *s, TrainConfig *tc, const char *text, char *buf, size_t len);
void setting_copy(const Setting *s, TrainConfig *dst, const TrainConfig *src);

// argv[*i] if it is one of `command`'s flags: its value set into tc and *i moved past it; a bad
// value is a usage error. NULL, tc untouched, if it is not such a flag.
const Setting *settings_flag(TrainConfig *tc, unsigned command, int argc, char **argv, int *i);
// The --help lines of `command`'s flags (with section headings for train).
void settings_help(FILE *f, unsigned command);
// "key=value ..." of the rows of `command` that every rank must agree on.
void settings_text(const TrainConfig *tc, unsigned command, char *buf, size_t len);
// The flags that give tc's values of `command`'s rows that are not the default, appended to
// args (room for max); their values are kept in store (cap bytes). The count, or -1 if they do
// not fit.
int settings_args(const TrainConfig *tc, unsigned command, char **args, int max, char *store,
                  size_t cap);

// ---- config.json ------------------------------------------------------------------------------
// Every row of tc into the object; -1 with the sentence if a value is not UTF-8 text.
int settings_to_json(const TrainConfig *tc, json_t *obj, char *err, size_t len);
// The digits that write every double of tc exactly (JSON_REAL_PRECISION).
int settings_json_digits(const TrainConfig *tc);
// DIR/config.json (its path into path): the object; NULL with err "" when DIR has none, or
// with the sentence when it is not a JSON object.
json_t *settings_load(const char *dir, char *path, size_t path_len, char *err, size_t len);
// The RESUMED rows present in root (the config.json at path) into tc: NULL, or the sentence
// naming the file, the key and what is wrong with its value into buf.
const char *settings_read(TrainConfig *tc, const json_t *root, const char *path, char *buf,
                          size_t len);
// The keys of two config.json objects whose values differ, those of rows marked NOT_COMPARED
// left out (a key no row knows counts), as "key (a vs b), ..." into list; their count.
int settings_differ(const json_t *a, const json_t *b, char *list, size_t len);

// ---- checkpoint metadata: the model's rows, in DiTConfig's order ------------------------------
#define DIT_CONFIG_FIELDS 19
const char *dit_config_key(int i);
void dit_config_value(const DiTConfig *c, int i, char *buf, size_t len);
int dit_config_set(DiTConfig *c, int i, const char *text); // -1 if text is not a valid value
// The shortest text that reads back as exactly v.
void double_text(char *buf, size_t len, double v);
