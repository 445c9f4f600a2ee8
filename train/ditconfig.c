// ditconfig.c: see ditconfig.h.
#include "ditconfig.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- how a value is written and read back ------------------------------------------------------
void double_text(char *buf, size_t len, double v) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
}

static void format_int(const void *p, char *buf, size_t len) {
    snprintf(buf, len, "%d", *(const int *)p);
}
static void format_double(const void *p, char *buf, size_t len) {
    double_text(buf, len, *(const double *)p);
}
static void format_bool(const void *p, char *buf, size_t len) {
    snprintf(buf, len, "%s", *(const bool *)p ? "true" : "false");
}

// Each parser stores a value only when the whole text is one: 0, else -1.
static int parse_int(void *p, const char *text) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < -2147483647L || v > 2147483647L) return -1;
    *(int *)p = (int)v;
    return 0;
}

static int parse_double(void *p, const char *text) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno) return -1;
    *(double *)p = v;
    return 0;
}

// also Python's spelling, and 1 / 0
static int parse_bool(void *p, const char *text) {
    bool yes = !strcmp(text, "true") || !strcmp(text, "True") || !strcmp(text, "1");
    bool no = !strcmp(text, "false") || !strcmp(text, "False") || !strcmp(text, "0");
    if (!yes && !no) return -1;
    *(bool *)p = yes;
    return 0;
}

typedef struct {
    void (*format)(const void *field, char *buf, size_t len);
    int (*parse)(void *field, const char *text);
} TextForm;

static const TextForm INT_TEXT = {format_int, parse_int},
                      DOUBLE_TEXT = {format_double, parse_double},
                      BOOL_TEXT = {format_bool, parse_bool};

// ---- the table ---------------------------------------------------------------------------------
static const struct {
    const char *key;
    const TextForm *form;
    size_t off; // of the field in DiTConfig
} fields[] = {
    {"input_size", &INT_TEXT, offsetof(DiTConfig, input_size)},
    {"patch_size", &INT_TEXT, offsetof(DiTConfig, patch_size)},
    {"in_channels", &INT_TEXT, offsetof(DiTConfig, in_channels)},
    {"hidden_size", &INT_TEXT, offsetof(DiTConfig, hidden_size)},
    {"depth", &INT_TEXT, offsetof(DiTConfig, depth)},
    {"num_heads", &INT_TEXT, offsetof(DiTConfig, num_heads)},
    {"mlp_ratio", &DOUBLE_TEXT, offsetof(DiTConfig, mlp_ratio)},
    {"num_classes", &INT_TEXT, offsetof(DiTConfig, num_classes)},
    {"learn_sigma", &BOOL_TEXT, offsetof(DiTConfig, learn_sigma)},
    {"class_dropout_prob", &DOUBLE_TEXT, offsetof(DiTConfig, class_dropout_prob)},
};
_Static_assert(sizeof fields / sizeof fields[0] == DIT_CONFIG_FIELDS,
               "DIT_CONFIG_FIELDS must count the rows of fields[]");

const char *dit_config_key(int i) { return fields[i].key; }

void dit_config_value(const DiTConfig *c, int i, char *buf, size_t len) {
    fields[i].form->format((const char *)c + fields[i].off, buf, len);
}

int dit_config_set(DiTConfig *c, int i, const char *text) {
    return fields[i].form->parse((char *)c + fields[i].off, text);
}
