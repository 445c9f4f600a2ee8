// safetensors.c: a strict reader and an atomic writer. The header's JSON is read and written by
// jansson; the checks of what it says (names, dtypes, shapes, offsets) are here. See
// safetensors.h for the format.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L // fileno, fstat, fsync
#endif
#include "safetensors.h"
#include "check.h"
#include "safefile.h"
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host: tensor data is copied without byte swapping"
#endif

// ---------------------------------------------------------------------------------------------
// Shared helpers

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8}, [ST_I32] = {"I32", 4}, [ST_I64] = {"I64", 8},
    [ST_BF16] = {"BF16", 2}, [ST_F16] = {"F16", 2}};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

size_t st_dtype_size(StDtype d) { return (unsigned)d < (unsigned)N_DTYPES ? DTYPES[d].size : 0; }
const char *st_dtype_name(StDtype d) {
    return (unsigned)d < (unsigned)N_DTYPES ? DTYPES[d].name : "?";
}
bool st_is_float(StDtype d) { return d == ST_F32 || d == ST_F64 || d == ST_BF16 || d == ST_F16; }

// err = prefix + formatted text, truncated to errlen; err may be NULL. Always returns -1.
static int vreport(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap) {
    if (!err || errlen == 0) return -1;
    int k = snprintf(err, errlen, "%s", prefix);
    if (k >= 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    return -1;
}

__attribute__((format(printf, 4, 5))) static int report(char *err, size_t errlen, const char *file,
                                                        const char *fmt, ...) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s: ", file);
    va_list ap;
    va_start(ap, fmt);
    vreport(err, errlen, prefix, fmt, ap);
    va_end(ap);
    return -1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

const char *st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Reader: the header's JSON, parsed by jansson, checked here

#define ST_MAX_HEADER 100000000 // bytes; the reference implementation's limit (MAX_HEADER_SIZE)

typedef struct {
    StTensor t;
    uint64_t begin, end; // data_offsets
} Entry;

typedef struct {
    const char *s; // header text, len bytes (not NUL-terminated)
    size_t len;
    const char *file;
    char *err;
    size_t errlen;
    Entry *entries;
    int n, cap;
    char **keys, **values; // metadata
    int n_meta, cap_meta;
} Parser;

// A syntax error at byte `pos` of the header.
__attribute__((format(printf, 3, 4))) static int syntax(Parser *p, size_t pos, const char *fmt,
                                                        ...) {
    char prefix[640];
    snprintf(prefix, sizeof prefix,
             "%s: malformed JSON header at byte %zu (file offset %zu): ", p->file, pos, pos + 8);
    va_list ap;
    va_start(ap, fmt);
    vreport(p->err, p->errlen, prefix, fmt, ap);
    va_end(ap);
    return -1;
}

// A well-formed header that says something invalid.
__attribute__((format(printf, 2, 3))) static int invalid(Parser *p, const char *fmt, ...) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s: ", p->file);
    va_list ap;
    va_start(ap, fmt);
    vreport(p->err, p->errlen, prefix, fmt, ap);
    va_end(ap);
    return -1;
}

// What a JSON value is, for messages: "an array", ...
static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    default: return "true, false or null";
    }
}

// Past the closing quote of the JSON string starting at s[i], in text jansson has read.
static size_t string_end(const char *s, size_t i, size_t len) {
    for (i++; i < len && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
    return i < len ? i + 1 : len;
}

// The JSON string starting at s[i], decoded by jansson (malloc'ed).
static char *string_at(const char *s, size_t i, size_t len) {
    json_t *j = json_loadb(s + i, string_end(s, i, len) - i, JSON_DECODE_ANY, NULL);
    CHECK(json_is_string(j), "safetensors: cannot decode a header string jansson has read");
    char *d = dup_str(json_string_value(j));
    json_decref(j);
    return d;
}

// Where the key ending at byte `end` sits (the header is well-formed up to there): its nesting
// depth (1: a top-level name), its start, and the start of the top-level name around it.
static int locate_key(const char *s, size_t end, size_t *key, size_t *outer) {
    int depth = 0;
    size_t top = 0; // the latest string at depth 1: where an object opens, its name
    for (size_t i = 0; i < end; i++) {
        if (s[i] == '"') {
            *key = i;
            if (depth == 1) top = i;
            i = string_end(s, i, end) - 1;
        } else if (s[i] == '{' || s[i] == '[') {
            if (++depth == 2) *outer = top;
        } else if (s[i] == '}' || s[i] == ']') {
            depth--;
        }
    }
    return depth;
}

// jansson's duplicate key (ending at byte `end`) named by where it sits; 0 if it is deeper than
// a safetensors header goes, to be reported as jansson says.
static int duplicate(Parser *p, size_t end) {
    size_t at = 0, outer = 0;
    int depth = locate_key(p->s, end, &at, &outer);
    if (depth != 1 && depth != 2) return 0;
    char *key = string_at(p->s, at, p->len);
    char *top = depth == 2 ? string_at(p->s, outer, p->len) : NULL;
    if (!top && !strcmp(key, "__metadata__"))
        invalid(p, "the header has two \"__metadata__\" entries");
    else if (!top)
        invalid(p, "tensor name '%s' appears twice in the header; names must be unique", key);
    else if (!strcmp(top, "__metadata__"))
        invalid(p, "metadata key '%s' appears twice; keys must be unique", key);
    else invalid(p, "tensor '%s' has field '%s' twice", top, key);
    free(key);
    free(top);
    return 1;
}

// What is wrong, by jansson's error code, in this project's words.
static const char *json_error_kind(enum json_error_code code) {
    switch (code) {
    case json_error_premature_end_of_input: return "the header ends inside a value";
    case json_error_end_of_input_expected: return "text after the header's closing brace";
    case json_error_invalid_utf8: return "bytes that are not UTF-8";
    case json_error_null_character: case json_error_null_byte_in_key: return "a \\u0000 escape";
    case json_error_duplicate_key: return "a key twice in one object";
    case json_error_numeric_overflow: return "an integer beyond 64 bits";
    case json_error_stack_overflow: return "arrays or objects nested too deep";
    default: return "a syntax error";
    }
}

// jansson's error, at the last byte it read (its position counts the bytes read): the place, what
// is wrong, and jansson's own sentence for the details.
static int json_failure(Parser *p, const json_error_t *je) {
    enum json_error_code code = json_error_code(je);
    CHECK(code != json_error_out_of_memory, "%s: out of host memory parsing the header", p->file);
    size_t end = je->position > 0 ? (size_t)je->position : 1;
    if (code == json_error_duplicate_key && duplicate(p, end)) return -1;
    return syntax(p, end - 1, "%s (line %d, column %d; jansson: %s)", json_error_kind(code), je->line,
                  je->column, je->text);
}

// A JSON array of at most `max` non-negative integers (int64) into vals; `what` names it.
static int take_ints(Parser *p, const char *what, json_t *a, int64_t *vals, int max, int *n) {
    if (!json_is_array(a)) return invalid(p, "%s is %s, not an array of integers", what, kind(a));
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) {
        if (json_is_real(x))
            return invalid(p, "floating-point number in %s; shapes and data_offsets are integers",
                           what);
        if (!json_is_integer(x))
            return invalid(p, "expected a non-negative integer in %s, found %s", what, kind(x));
        if (json_integer_value(x) < 0) return invalid(p, "negative number in %s", what);
        if ((int)i == max)
            return invalid(p, "%s has more than %d entries, the most allowed", what, max);
        vals[i] = json_integer_value(x);
    }
    *n = (int)json_array_size(a);
    return 0;
}

static int take_dtype(Parser *p, Entry *e, const json_t *v) {
    const char *d = json_string_value(v); // NULL if v is no string
    if (!d)
        return invalid(p, "tensor '%s' has a dtype that is %s, not a string such as \"F32\"",
                       e->t.name, kind(v));
    int k = 0;
    while (k < N_DTYPES && strcmp(d, DTYPES[k].name)) k++;
    if (k == N_DTYPES)
        return invalid(p, "tensor '%s' has dtype %s, which is not supported (F32, F64, BF16, F16, I32, I64)",
                       e->t.name, d);
    e->t.dtype = (StDtype)k;
    return 0;
}

// One field of tensor e's object.
static int take_field(Parser *p, Entry *e, const char *key, json_t *v) {
    const char *name = e->t.name;
    char what[320];
    if (!strcmp(key, "dtype")) return take_dtype(p, e, v);
    if (!strcmp(key, "shape")) {
        snprintf(what, sizeof what, "the shape of tensor '%s'", name);
        return take_ints(p, what, v, e->t.shape, ST_MAX_DIMS, &e->t.ndim);
    }
    if (strcmp(key, "data_offsets"))
        return invalid(p,
                       "tensor '%s' has the unknown field '%s'; expected only dtype, shape "
                       "and data_offsets",
                       name, key);
    int64_t off[2];
    int n = 0;
    snprintf(what, sizeof what, "the data_offsets of tensor '%s'", name);
    if (take_ints(p, what, v, off, 2, &n)) return -1;
    if (n != 2)
        return invalid(p, "tensor '%s' has %d data_offsets; it needs exactly 2 (begin, end)", name,
                       n);
    e->begin = (uint64_t)off[0], e->end = (uint64_t)off[1];
    return 0;
}

// The entry's name is owned by p->entries from the start, so every error path can just return.
static int take_tensor(Parser *p, const char *name, json_t *v) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->entries = xrealloc(p->entries, (size_t)p->cap, sizeof *p->entries);
    }
    Entry *e = &p->entries[p->n++];
    memset(e, 0, sizeof *e);
    e->t.name = dup_str(name);
    if (!json_is_object(v))
        return invalid(p, "tensor '%s' is %s, not an object with dtype, shape and data_offsets",
                       name, kind(v));
    const char *key;
    json_t *f;
    json_object_foreach(v, key, f) {
        if (take_field(p, e, key, f)) return -1;
    }
    const char *missing = !json_object_get(v, "dtype")          ? "dtype"
                          : !json_object_get(v, "shape")        ? "shape"
                          : !json_object_get(v, "data_offsets") ? "data_offsets"
                                                                : NULL;
    if (missing) return invalid(p, "tensor '%s' has no '%s' field", name, missing);
    return 0;
}

static int take_metadata(Parser *p, json_t *m) {
    if (!json_is_object(m))
        return invalid(p, "\"__metadata__\" is %s; it must be an object of string values",
                       kind(m));
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (!json_is_string(v))
            return invalid(p,
                           "metadata key '%s' has a non-string value; __metadata__ values must "
                           "be strings, e.g. \"3\" rather than 3",
                           key);
        if (p->n_meta == p->cap_meta) {
            p->cap_meta = p->cap_meta ? 2 * p->cap_meta : 8;
            p->keys = xrealloc(p->keys, (size_t)p->cap_meta, sizeof *p->keys);
            p->values = xrealloc(p->values, (size_t)p->cap_meta, sizeof *p->values);
        }
        p->keys[p->n_meta] = dup_str(key);
        p->values[p->n_meta++] = dup_str(json_string_value(v));
    }
    return 0;
}

// The header object, in header order: jansson reads the JSON (UTF-8, escapes, unique keys,
// int64 numbers), and the take_ functions check what it says.
static int parse_header(Parser *p) {
    size_t i = 0;
    while (i < p->len && memchr(" \t\r\n", p->s[i], 4)) i++;
    if (i == p->len || p->s[i] != '{') return syntax(p, i, "expected '{' to start the header");
    json_error_t je;
    json_t *root = json_loadb(p->s, p->len, JSON_REJECT_DUPLICATES, &je), *v;
    if (!root) return json_failure(p, &je);
    const char *key;
    int rc = 0;
    json_object_foreach(root, key, v) {
        rc = !strcmp(key, "__metadata__") ? take_metadata(p, v) : take_tensor(p, key, v);
        if (rc) break;
    }
    json_decref(root);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Reader: validation against the data buffer

static int cmp_entry_offsets(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

// data: the data buffer in memory, or NULL (st_open: it stays in the file, from byte base)
static int validate(Parser *p, const unsigned char *data, uint64_t base, uint64_t data_len) {
    for (int i = 0; i < p->n; i++) {
        Entry *e = &p->entries[i];
        const char *name = e->t.name;
        char shp[256];
        st_shape_str(shp, sizeof shp, e->t.shape, e->t.ndim);
        if (e->begin > e->end)
            return invalid(p,
                           "tensor '%s' has data_offsets [%" PRIu64 ", %" PRIu64 "] whose begin "
                           "is after its end; the header is corrupt",
                           name, e->begin, e->end);
        if (e->end > data_len)
            return invalid(p,
                           "tensor '%s' has data_offsets [%" PRIu64 ", %" PRIu64 "] but the data "
                           "buffer has only %" PRIu64 " bytes; the file is truncated",
                           name, e->begin, e->end, data_len);
        uint64_t count = 1, size = st_dtype_size(e->t.dtype);
        for (int d = 0; d < e->t.ndim; d++) {
            uint64_t dim = (uint64_t)e->t.shape[d];
            if (dim != 0 && count > UINT64_MAX / size / dim)
                return invalid(p, "tensor '%s' has shape %s, whose size in bytes overflows", name,
                               shp);
            count *= dim;
        }
        if (count * size != e->end - e->begin)
            return invalid(p,
                           "tensor '%s' has shape %s and dtype %s, i.e. %" PRIu64 " bytes, but "
                           "its data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64 " bytes; "
                           "the header is inconsistent",
                           name, shp, st_dtype_name(e->t.dtype), count * size, e->begin, e->end,
                           e->end - e->begin);
        e->t.nbytes = (size_t)(e->end - e->begin);
        e->t.data = data ? data + e->begin : NULL;
        e->t.at = base + e->begin;
    }
    if (p->n > 1) qsort(p->entries, (size_t)p->n, sizeof *p->entries, cmp_entry_offsets);
    uint64_t pos = 0;
    for (int i = 0; i < p->n; i++) {
        const Entry *e = &p->entries[i];
        if (e->begin < pos)
            return invalid(p,
                           "tensors '%s' (data_offsets [%" PRIu64 ", %" PRIu64
                           "]) and '%s' ([%" PRIu64 ", %" PRIu64
                           "]) overlap in the data buffer; each byte must "
                           "belong to exactly one tensor",
                           p->entries[i - 1].t.name, p->entries[i - 1].begin, p->entries[i - 1].end,
                           e->t.name, e->begin, e->end);
        if (e->begin > pos)
            return invalid(p,
                           "bytes [%" PRIu64 ", %" PRIu64 ") of the data buffer (before tensor "
                           "'%s') belong to no tensor; the format requires the buffer to be fully "
                           "covered",
                           pos, e->begin, e->t.name);
        pos = e->end;
    }
    if (pos != data_len)
        return invalid(p,
                       "the last %" PRIu64 " bytes of the data buffer (from offset %" PRIu64
                       ") belong to no tensor; the format requires the buffer to be fully covered",
                       data_len - pos, pos);
    return 0;
}

static void free_parser(Parser *p) {
    for (int i = 0; i < p->n; i++) free(p->entries[i].t.name);
    for (int i = 0; i < p->n_meta; i++) free(p->keys[i]), free(p->values[i]);
    free(p->entries);
    free(p->keys);
    free(p->values);
}

// Parse a file of len bytes whose first `have` are in buf (malloc'ed, ownership taken: kept in
// st->buf when it holds the whole file, else freed): the whole file, or (st_open) at least its
// length field and header, or all of it when shorter.
static int parse_owned(const char *file, unsigned char *buf, size_t have, size_t len, SafeTensors *st,
                       char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    if (len < 8) {
        free(buf);
        return report(err, errlen, file,
                      "the file has only %zu bytes, fewer than the 8-byte header "
                      "length field; it is truncated or not a safetensors file",
                      len);
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    // a file of another kind (text, random bytes) is not taken for a truncated one: its header
    // length is absurd, or past the end of the file with no JSON object where the header starts
    int absurd = hlen > ST_MAX_HEADER;
    if (absurd || (hlen > len - 8 && len > 8 && !memchr("{ \t\r\n", buf[8], 5))) {
        free(buf);
        char why[160];
        if (absurd)
            snprintf(why, sizeof why,
                     "its first 8 bytes give a header length of %" PRIu64 " bytes, over the "
                     "format's limit of %d",
                     hlen, ST_MAX_HEADER);
        else snprintf(why, sizeof why, "the header after the 8-byte length field is no JSON object");
        return report(err, errlen, file,
                      "not a safetensors file: %s; check that the path names the file you meant",
                      why);
    }
    if (hlen > len - 8) {
        free(buf);
        return report(err, errlen, file,
                      "header says %" PRIu64 " bytes but the file has only %zu "
                      "after the length field; the file is truncated",
                      hlen, len - 8);
    }
    Parser p = {.s = (const char *)buf + 8, .len = (size_t)hlen, .file = file, .err = err,
                .errlen = errlen};
    bool whole = have == len;
    if (parse_header(&p) || validate(&p, whole ? buf + 8 + hlen : NULL, 8 + hlen, len - 8 - hlen)) {
        free_parser(&p);
        free(buf);
        return -1;
    }
    st->n = p.n;
    st->tensors = xmalloc((size_t)p.n * sizeof *st->tensors);
    for (int i = 0; i < p.n; i++) st->tensors[i] = p.entries[i].t;
    free(p.entries);
    st->n_meta = p.n_meta;
    st->meta_keys = p.keys;
    st->meta_values = p.values;
    if (whole) st->buf = buf;
    else free(buf);
    return 0;
}

int st_parse(const void *bytes, size_t len, SafeTensors *st, char *err, size_t errlen) {
    unsigned char *copy = xmalloc(len);
    if (len) memcpy(copy, bytes, len);
    return parse_owned("<buffer>", copy, len, len, st, err, errlen);
}

// Opens path for reading: the file, with its length in *len; NULL with a message
static FILE *open_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return report(err, errlen, path, "cannot open for reading: %s", strerror(errno)), NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return report(err, errlen, path, "is not a regular file"), NULL;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        fclose(f);
        return report(err, errlen, path, "the file is too large to load on this machine"), NULL;
    }
    *len = (size_t)sb.st_size;
    return f;
}

// The first n bytes of f into buf (from its start); -1 with a message
static int read_start(FILE *f, const char *path, unsigned char *buf, size_t n, char *err, size_t errlen) {
    size_t got = n ? fread(buf, 1, n, f) : 0;
    if (got == n) return 0;
    return report(err, errlen, path, "read only %zu of %zu bytes: %s", got, n,
                  ferror(f) && errno ? strerror(errno) : "the file changed while being read");
}

int st_read(const char *path, SafeTensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    size_t len;
    FILE *f = open_file(path, &len, err, errlen);
    if (!f) return -1;
    unsigned char *buf = xmalloc(len);
    int rc = read_start(f, path, buf, len, err, errlen);
    fclose(f);
    if (rc) return free(buf), -1;
    return parse_owned(path, buf, len, len, st, err, errlen);
}

int st_open(const char *path, SafeTensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    size_t len;
    FILE *f = open_file(path, &len, err, errlen);
    if (!f) return -1;
    unsigned char head[8] = {0};
    uint64_t hlen = 0;
    if (read_start(f, path, head, len < 8 ? len : 8, err, errlen)) return fclose(f), -1;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | head[i];
    // the length field and the header (parse_owned judges a length past the limit or the file)
    size_t have = len < 8 ? len : 8 + (size_t)(hlen < ST_MAX_HEADER ? hlen : ST_MAX_HEADER);
    have = have < len ? have : len;
    unsigned char *buf = xmalloc(have + 1);
    rewind(f);
    if (read_start(f, path, buf, have, err, errlen)) return fclose(f), free(buf), -1;
    if (parse_owned(path, buf, have, len, st, err, errlen)) return fclose(f), -1;
    st->file = f;
    return 0;
}

void st_free(SafeTensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) free(st->meta_keys[i]), free(st->meta_values[i]);
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->buf);
    if (st->file) fclose(st->file);
    memset(st, 0, sizeof *st);
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *st_meta(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}

// IEEE half precision (1 sign, 5 exponent, 10 fraction bits) as a float: normal numbers, zeros,
// subnormals (h's fraction times 2^-24), infinities and NaNs
static float half_float(uint16_t h) {
    int e = (h >> 10) & 31, f = h & 1023;
    float v = e == 31 ? (f ? NAN : INFINITY) : e ? ldexpf((float)(f | 1024), e - 25) : ldexpf((float)f, -24);
    return h & 0x8000 ? -v : v;
}

// n values of a float dtype at src (perhaps unaligned) into dst; BF16 is a float's high 16 bits
static void to_real(StDtype dtype, const unsigned char *src, real *dst, size_t n) {
    for (size_t i = 0; i < n; i++) { // memcpy: data may be unaligned
        if (dtype == ST_F32 || dtype == ST_BF16) {
            uint32_t bits = 0;
            float v;
            if (dtype == ST_F32) memcpy(&bits, src + 4 * i, 4);
            else memcpy((unsigned char *)&bits + 2, src + 2 * i, 2);
            memcpy(&v, &bits, 4);
            dst[i] = (real)v;
        } else if (dtype == ST_F16) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = (real)half_float(h);
        } else {
            double v;
            memcpy(&v, src + 8 * i, 8);
            dst[i] = (real)v;
        }
    }
}

int st_to_real(const StTensor *t, real *dst, size_t n, char *err, size_t errlen) {
    size_t size = st_dtype_size(t->dtype), count = size ? t->nbytes / size : 0;
    if (size && n != count) {
        if (err && errlen)
            snprintf(err, errlen,
                     "tensor '%s' has %zu elements but the destination holds %zu; "
                     "check the expected shape",
                     t->name, count, n);
        return -1;
    }
    return st_read_real(NULL, t, 0, n, dst, err, errlen);
}

int st_read_real(const SafeTensors *st, const StTensor *t, size_t first, size_t n, real *dst,
                 char *err, size_t errlen) {
    if (!st_is_float(t->dtype)) {
        if (err && errlen)
            snprintf(err, errlen,
                     "tensor '%s' has dtype %s, not a float type (F32, F64, BF16, F16), so it "
                     "cannot be read as real values",
                     t->name, st_dtype_name(t->dtype));
        return -1;
    }
    size_t size = st_dtype_size(t->dtype), count = t->nbytes / size;
    if (first > count || n > count - first) {
        if (err && errlen)
            snprintf(err, errlen, "tensor '%s' has %zu elements, not [%zu, %zu)", t->name, count,
                     first, first + n);
        return -1;
    }
    if (t->data) return to_real(t->dtype, (const unsigned char *)t->data + first * size, dst, n), 0;
    CHECK(st && st->file, "st_read_real: tensor '%s' is neither in memory nor in an open file", t->name);
    // in parts: straight into dst when the file holds `real`s, else through a small buffer
    enum { PART = 1 << 16 };
    static _Thread_local unsigned char part[PART * 8];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < PART ? n - done : PART;
        unsigned char *to = size == sizeof(real) ? (unsigned char *)(dst + done) : part;
        off_t at = (off_t)(t->at + (first + done) * size);
        ssize_t got = pread(fileno(st->file), to, k * size, at);
        if (got != (ssize_t)(k * size)) {
            if (err && errlen)
                snprintf(err, errlen, "tensor '%s': could not read %zu bytes at byte %lld of the "
                         "file (%s)", t->name, k * size, (long long)at,
                         got < 0 ? strerror(errno) : "it is shorter now than when it was opened");
            return -1;
        }
        if (size != sizeof(real)) to_real(t->dtype, part, dst + done, k);
        done += k;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Writer

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data; // NULL: its values come through st_writer_put_real
    long at;          // between begin and end: where its data begins in the file
    size_t put;       // and how many of its bytes are written
} WEntry;

struct StWriter {
    WEntry *e;
    int n, cap;
    char **keys, **values;
    int n_meta, cap_meta;
    SafeFile file; // between begin and end
    bool open, ok; // begun; every write so far succeeded
};

StWriter *st_writer_new(void) { return xcalloc(1, sizeof(StWriter)); }

static WEntry *add_entry(StWriter *w, const char *name, StDtype dtype, int ndim) {
    CHECK(w && name, "st_writer_add: NULL writer or name");
    CHECK(name[0] && strcmp(name, "__metadata__"),
          "st_writer_add: tensor name '%s' is empty or reserved; use another name", name);
    CHECK(st_dtype_size(dtype), "st_writer_add: tensor '%s' has invalid dtype %d", name,
          (int)dtype);
    CHECK(ndim >= 0 && ndim <= ST_MAX_DIMS,
          "st_writer_add: tensor '%s' has %d dimensions; 0 to %d are supported", name, ndim,
          ST_MAX_DIMS);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->e = xrealloc(w->e, (size_t)w->cap, sizeof *w->e);
    }
    WEntry *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    e->name = dup_str(name);
    e->dtype = dtype;
    e->ndim = ndim;
    return e;
}

// Element count of e's shape, checking the dims and that the byte size fits.
static size_t entry_count(const WEntry *e) {
    size_t count = 1, size = st_dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++) {
        CHECK(e->shape[i] >= 0, "st_writer_add: tensor '%s' has negative dimension %" PRId64,
              e->name, e->shape[i]);
        size_t d = (size_t)e->shape[i];
        CHECK(d == 0 || count <= SIZE_MAX / size / d, "st_writer_add: tensor '%s' is too large",
              e->name);
        count *= d;
    }
    return count;
}

void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data) {
    WEntry *e = add_entry(w, name, dtype, ndim);
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = entry_count(e) * st_dtype_size(dtype);
    CHECK(data || e->nbytes == 0, "st_writer_add: tensor '%s' has NULL data", name);
    e->data = data;
}

void st_writer_add_real(StWriter *w, const char *name, int ndim, const int *shape,
                        const real *data) {
    int64_t dims[ST_MAX_DIMS];
    CHECK(ndim >= 0 && ndim <= ST_MAX_DIMS, "st_writer_add_real: '%s' has %d dims", name, ndim);
    for (int i = 0; i < ndim; i++) dims[i] = shape[i];
    st_writer_add(w, name, sizeof(real) == 8 ? ST_F64 : ST_F32, ndim, dims, data);
}

void st_writer_meta(StWriter *w, const char *key, const char *value) {
    CHECK(w && key && value, "st_writer_meta: NULL writer, key or value");
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->keys[i], key)) {
            free(w->values[i]);
            w->values[i] = dup_str(value);
            return;
        }
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
        w->keys = xrealloc(w->keys, (size_t)w->cap_meta, sizeof *w->keys);
        w->values = xrealloc(w->values, (size_t)w->cap_meta, sizeof *w->values);
    }
    w->keys[w->n_meta] = dup_str(key);
    w->values[w->n_meta++] = dup_str(value);
}

static int cmp_wentry_name(const void *a, const void *b) {
    return strcmp((*(const WEntry *const *)a)->name, (*(const WEntry *const *)b)->name);
}

// Wider dtypes first, then by name: every tensor's data is then aligned to its dtype size.
static int cmp_wentry_layout(const void *a, const void *b) {
    const WEntry *x = *(const WEntry *const *)a, *y = *(const WEntry *const *)b;
    size_t sx = st_dtype_size(x->dtype), sy = st_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

// A tensor's header entry; its data_offsets are [off, off + nbytes).
static json_t *entry_json(const WEntry *e, uint64_t off) {
    json_t *shape = json_array();
    for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtype_name(e->dtype), "shape", shape,
                     "data_offsets", (json_int_t)off, (json_int_t)(off + e->nbytes));
}

// The header text for entries in `order` ("__metadata__" first, if any), written by jansson and
// padded with spaces to a multiple of 8 bytes; *len is its length. Strings are UTF-8 (checked).
static char *build_header(const StWriter *w, const WEntry *const *order, size_t *len) {
    json_t *root = json_object(), *meta = json_object();
    int bad = !root || !meta;
    for (int i = 0; i < w->n_meta; i++)
        bad |= json_object_set_new(meta, w->keys[i], json_string(w->values[i]));
    if (w->n_meta) bad |= json_object_set(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        bad |= json_object_set_new(root, order[i]->name, entry_json(order[i], off));
        off += order[i]->nbytes;
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(meta);
    json_decref(root);
    CHECK(s, "st_writer_write: out of host memory building the header");
    size_t n = strlen(s);
    s = xrealloc(s, n + 8, 1); // jansson allocates with malloc
    while (n % 8) s[n++] = ' ';
    s[n] = '\0';
    *len = n;
    return s;
}

// 1 if s is UTF-8, as JSON text must be.
static int is_utf8(const char *s) {
    json_t *j = json_string(s); // NULL if not
    json_decref(j);
    return j != NULL;
}

// Names unique, names and metadata UTF-8: 0, or -1 with a message. by_name is sorted by name.
static int check_strings(const StWriter *w, const WEntry *const *by_name, const char *path,
                         char *err, size_t errlen) {
    for (int i = 1; i < w->n; i++)
        if (!strcmp(by_name[i - 1]->name, by_name[i]->name))
            return report(err, errlen, path,
                          "tensor '%s' was added twice; each name may be written once",
                          by_name[i]->name);
    for (int i = 0; i < w->n; i++)
        if (!is_utf8(by_name[i]->name))
            return report(err, errlen, path,
                          "tensor name '%s' is not valid UTF-8, which the JSON header must be",
                          by_name[i]->name);
    for (int i = 0; i < w->n_meta; i++)
        if (!is_utf8(w->keys[i]) || !is_utf8(w->values[i]))
            return report(err, errlen, path,
                          "metadata key '%s' or its value is not valid UTF-8, which the JSON "
                          "header must be",
                          w->keys[i]);
    return 0;
}

static void add_later(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape) {
    WEntry *e = add_entry(w, name, dtype, ndim);
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = entry_count(e) * st_dtype_size(dtype);
}

void st_writer_add_real_later(StWriter *w, const char *name, int ndim, const int *shape, bool bf16) {
    int64_t dims[ST_MAX_DIMS];
    CHECK(ndim >= 0 && ndim <= ST_MAX_DIMS, "st_writer_add_real_later: '%s' has %d dims", name, ndim);
    for (int i = 0; i < ndim; i++) dims[i] = shape[i];
    add_later(w, name, bf16 ? ST_BF16 : sizeof(real) == 8 ? ST_F64 : ST_F32, ndim, dims);
}

// bytes [from, from + nbytes) of entry e's data, at their place in the file
static void put_bytes(StWriter *w, WEntry *e, size_t from, const void *data, size_t nbytes) {
    CHECK(from <= e->nbytes && nbytes <= e->nbytes - from, "st_writer_put_real: bytes %zu..%zu of "
          "tensor '%s', which has %zu", from, from + nbytes, e->name, e->nbytes);
    if (nbytes && w->ok)
        w->ok = !fseek(w->file.f, e->at + (long)from, SEEK_SET) && fwrite(data, 1, nbytes, w->file.f) == nbytes;
    e->put += nbytes;
}

int st_writer_begin(StWriter *w, const char *path, char *err, size_t errlen) {
    CHECK(w && path && !w->open, "st_writer_begin: NULL writer or path, or a writer already begun");
    const WEntry **order = xmalloc((size_t)w->n * sizeof *order);
    for (int i = 0; i < w->n; i++) order[i] = &w->e[i];
    qsort(order, (size_t)w->n, sizeof *order, cmp_wentry_name);
    if (check_strings(w, order, path, err, errlen)) {
        free(order);
        return -1;
    }
    qsort(order, (size_t)w->n, sizeof *order, cmp_wentry_layout);
    size_t hlen;
    char *h = build_header(w, order, &hlen);
    long at = 8 + (long)hlen;
    for (int i = 0; i < w->n; i++) { // each entry's place: the header's order
        WEntry *e = &w->e[order[i] - w->e];
        e->at = at, e->put = 0;
        at += (long)e->nbytes;
    }
    free(order);
    char msg[1024];
    int rc = -1;
    if (safefile_open(&w->file, path, msg, sizeof msg)) report(err, errlen, path, "%s", msg);
    else {
        unsigned char lenb[8];
        for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        w->open = true;
        w->ok = fwrite(lenb, 1, 8, w->file.f) == 8 && fwrite(h, 1, hlen, w->file.f) == hlen;
        for (int i = 0; i < w->n; i++)
            if (w->e[i].data) put_bytes(w, &w->e[i], 0, w->e[i].data, w->e[i].nbytes);
        rc = 0;
    }
    free(h);
    return rc;
}

void st_writer_put_real(StWriter *w, const char *name, size_t first, const real *values, size_t n) {
    WEntry *e = NULL;
    for (int i = 0; w && name && !e && i < w->n; i++) e = strcmp(w->e[i].name, name) ? NULL : &w->e[i];
    CHECK(e && w->open && !e->data, "st_writer_put_real: no later tensor '%s' in a begun writer", name ? name : "(null)");
    if (e->dtype != ST_BF16) return put_bytes(w, e, first * sizeof(real), values, n * sizeof(real));
    uint16_t part[4096];
    for (size_t at = 0; at < n; at += sizeof part / sizeof part[0]) {
        size_t k = n - at < sizeof part / sizeof part[0] ? n - at : sizeof part / sizeof part[0];
        for (size_t i = 0; i < k; i++) part[i] = real_to_bf16_bits(values[at + i]);
        put_bytes(w, e, (first + at) * sizeof(uint16_t), part, k * sizeof(uint16_t));
    }
}

int st_writer_end(StWriter *w, char *err, size_t errlen) {
    CHECK(w && w->open, "st_writer_end: a writer not begun");
    for (int i = 0; i < w->n; i++)
        CHECK(w->e[i].put == w->e[i].nbytes, "st_writer_end: %zu of the %zu bytes of tensor '%s' "
              "were written", w->e[i].put, w->e[i].nbytes, w->e[i].name);
    w->open = false;
    char msg[1024], *path = dup_str(w->file.path); // the commit frees the file's
    int rc = safefile_commit(&w->file, w->ok, msg, sizeof msg) ? report(err, errlen, path, "%s", msg) : 0;
    free(path);
    return rc;
}

int st_writer_write(StWriter *w, const char *path, char *err, size_t errlen) {
    return st_writer_begin(w, path, err, errlen) ? -1 : st_writer_end(w, err, errlen);
}

void st_writer_free(StWriter *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < w->n_meta; i++) free(w->keys[i]), free(w->values[i]);
    free(w->e);
    free(w->keys);
    free(w->values);
    free(w);
}
