// safetensors.c: a strict reader (with a small hand-written JSON parser that accepts just what a
// safetensors header needs) and an atomic writer. See safetensors.h for the format.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L // fileno, fstat, fsync
#endif
#include "safetensors.h"
#include "atomic.h"
#include "check.h"
#include <errno.h>
#include <inttypes.h>
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
    [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8}, [ST_I32] = {"I32", 4}, [ST_I64] = {"I64", 8}};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

size_t st_dtype_size(StDtype d) { return (unsigned)d < (unsigned)N_DTYPES ? DTYPES[d].size : 0; }
const char *st_dtype_name(StDtype d) {
    return (unsigned)d < (unsigned)N_DTYPES ? DTYPES[d].name : "?";
}

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
// Reader: JSON header parser

#define ST_MAX_HEADER 100000000 // bytes; the reference implementation's limit (MAX_HEADER_SIZE)

typedef struct {
    StTensor t;
    uint64_t begin, end; // data_offsets
} Entry;

typedef struct {
    const unsigned char *s; // header text
    size_t len, pos;
    const char *file;
    char *err;
    size_t errlen;
    Entry *entries;
    int n, cap;
    char **keys, **values; // metadata
    int n_meta, cap_meta;
    int seen_meta;
} Parser;

// A syntax error at the current position.
__attribute__((format(printf, 2, 3))) static int syntax(Parser *p, const char *fmt, ...) {
    char prefix[640];
    snprintf(prefix, sizeof prefix,
             "%s: malformed JSON header at byte %zu (file offset %zu): ", p->file, p->pos,
             p->pos + 8);
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

static int peek(const Parser *p) { return p->pos < p->len ? p->s[p->pos] : -1; }

static void skip_ws(Parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Decode the string starting at p->pos (which holds '"') into out (NULL: only measure and
// validate). On success *n_out is the decoded length and *end the position after the closing '"'.
static int scan_string(Parser *p, char *out, size_t *n_out, size_t *end) {
    size_t start = p->pos, i = p->pos + 1, n = 0;
    for (;;) {
        if (i >= p->len) {
            p->pos = start;
            return syntax(p, "the string starting here is never closed");
        }
        unsigned char c = p->s[i];
        if (c == '"') break;
        if (c < 0x20) {
            p->pos = i;
            return syntax(p, "control character 0x%02X inside a string; it must be escaped", c);
        }
        if (c != '\\') {
            if (out) out[n] = (char)c;
            n++, i++;
            continue;
        }
        if (i + 1 >= p->len) {
            p->pos = start;
            return syntax(p, "the string starting here is never closed");
        }
        unsigned char e = p->s[i + 1], d;
        switch (e) {
        case '"':
            d = '"';
            break;
        case '\\':
            d = '\\';
            break;
        case '/':
            d = '/';
            break;
        case 'b':
            d = '\b';
            break;
        case 'f':
            d = '\f';
            break;
        case 'n':
            d = '\n';
            break;
        case 'r':
            d = '\r';
            break;
        case 't':
            d = '\t';
            break;
        case 'u': {
            unsigned v = 0;
            for (int k = 0; k < 4; k++) {
                int h = i + 2 + k < p->len ? hex_digit(p->s[i + 2 + k]) : -1;
                if (h < 0) {
                    p->pos = i;
                    return syntax(p, "\\u must be followed by 4 hex digits");
                }
                v = v * 16 + (unsigned)h;
            }
            if (v == 0 || v >= 0x80) {
                p->pos = i;
                return syntax(p,
                              "\\u%04X is not supported: only \\u0001-\\u007F are; write other "
                              "characters as raw UTF-8",
                              v);
            }
            d = (unsigned char)v;
            i += 4; // plus the 2 below
            break;
        }
        default:
            p->pos = i;
            return syntax(p, "invalid escape sequence '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
        }
        if (out) out[n] = (char)d;
        n++, i += 2;
    }
    *n_out = n;
    *end = i + 1;
    return 0;
}

// Parse a string at the next non-whitespace position into a new malloc'ed C string.
static int parse_string(Parser *p, const char *what, char **out) {
    skip_ws(p);
    if (peek(p) != '"') return syntax(p, "expected %s (a quoted string)", what);
    size_t n, end;
    if (scan_string(p, NULL, &n, &end)) return -1;
    char *s = xmalloc(n + 1);
    scan_string(p, s, &n, &end);
    s[n] = '\0';
    p->pos = end;
    *out = s;
    return 0;
}

// A non-negative JSON integer that fits in int64_t.
static int parse_uint(Parser *p, const char *what, uint64_t *out) {
    skip_ws(p);
    int c = peek(p);
    if (c == '-') return syntax(p, "negative number in %s", what);
    if (c < '0' || c > '9') return syntax(p, "expected a non-negative integer in %s", what);
    size_t start = p->pos;
    uint64_t v = 0;
    while ((c = peek(p)) >= '0' && c <= '9') {
        if (v > (uint64_t)(INT64_MAX - (c - '0')) / 10) {
            p->pos = start;
            return syntax(p, "the integer in %s is too large", what);
        }
        v = v * 10 + (uint64_t)(c - '0');
        p->pos++;
    }
    if (p->s[start] == '0' && p->pos - start > 1) {
        p->pos = start;
        return syntax(p, "leading zeros are not allowed in JSON numbers (in %s)", what);
    }
    if (c == '.' || c == 'e' || c == 'E')
        return syntax(p, "floating-point number in %s; shapes and data_offsets are integers", what);
    *out = v;
    return 0;
}

static int parse_uint_array(Parser *p, const char *what, uint64_t *vals, int max, int *n) {
    skip_ws(p);
    if (peek(p) != '[') return syntax(p, "expected '[' to start %s", what);
    p->pos++;
    skip_ws(p);
    *n = 0;
    if (peek(p) == ']') {
        p->pos++;
        return 0;
    }
    for (;;) {
        uint64_t v = 0;
        if (parse_uint(p, what, &v)) return -1;
        if (*n == max)
            return invalid(p, "%s has more than %d entries, the most allowed", what, max);
        vals[(*n)++] = v;
        skip_ws(p);
        int c = peek(p);
        p->pos++;
        if (c == ']') return 0;
        if (c != ',') {
            p->pos--;
            return syntax(p, "expected ',' or ']' in %s", what);
        }
    }
}

static int expect_colon(Parser *p, const char *key) {
    skip_ws(p);
    if (peek(p) != ':') return syntax(p, "expected ':' after the key \"%s\"", key);
    p->pos++;
    return 0;
}

// After a member's value: 1 if another member follows (',' consumed), 0 at '}' (consumed).
static int next_member(Parser *p, const char *key) {
    skip_ws(p);
    int c = peek(p);
    if (c == ',') {
        p->pos++;
        return 1;
    }
    if (c == '}') {
        p->pos++;
        return 0;
    }
    return syntax(p, "expected ',' or '}' after the value of \"%s\"", key);
}

// '{' then: 1 with the object open and a member following, 0 for an empty object "{}".
static int open_object(Parser *p, const char *what) {
    skip_ws(p);
    if (peek(p) != '{') return syntax(p, "expected '{' to start %s", what);
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    return 1;
}

static int parse_metadata(Parser *p) {
    if (p->seen_meta) return invalid(p, "the header has two \"__metadata__\" entries");
    p->seen_meta = 1;
    int more = open_object(p, "__metadata__");
    while (more > 0) {
        char *key = NULL, *value = NULL;
        if (parse_string(p, "a metadata key", &key)) return -1;
        for (int i = 0; i < p->n_meta; i++)
            if (!strcmp(p->keys[i], key)) {
                invalid(p, "metadata key '%s' appears twice; keys must be unique", key);
                free(key);
                return -1;
            }
        if (expect_colon(p, key)) return free(key), -1;
        skip_ws(p);
        if (peek(p) != '"') {
            invalid(p,
                    "metadata key '%s' has a non-string value; __metadata__ values must be "
                    "strings, e.g. \"3\" rather than 3",
                    key);
            free(key);
            return -1;
        }
        if (parse_string(p, "a metadata value", &value)) return free(key), -1;
        if (p->n_meta == p->cap_meta) {
            p->cap_meta = p->cap_meta ? 2 * p->cap_meta : 8;
            p->keys = xrealloc(p->keys, (size_t)p->cap_meta, sizeof *p->keys);
            p->values = xrealloc(p->values, (size_t)p->cap_meta, sizeof *p->values);
        }
        p->keys[p->n_meta] = key;
        p->values[p->n_meta++] = value;
        more = next_member(p, p->keys[p->n_meta - 1]);
    }
    return more;
}

// The entry's name is owned by p->entries from the start, so every error path can just return.
static int parse_tensor(Parser *p, char *name) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->entries = xrealloc(p->entries, (size_t)p->cap, sizeof *p->entries);
    }
    Entry *e = &p->entries[p->n++];
    memset(e, 0, sizeof *e);
    e->t.name = name;
    char what[320];
    snprintf(what, sizeof what, "tensor '%s'", name);
    int more = open_object(p, what);
    if (more < 0) return -1;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    while (more > 0) {
        char *key = NULL;
        if (parse_string(p, "a field name", &key)) return -1;
        int rc = expect_colon(p, key);
        if (!rc && !strcmp(key, "dtype")) {
            char *d = NULL;
            rc = have_dtype++ ? invalid(p, "tensor '%s' has field 'dtype' twice", name)
                              : parse_string(p, "a dtype", &d);
            if (!rc) {
                int k = 0;
                while (k < N_DTYPES && strcmp(d, DTYPES[k].name)) k++;
                if (k == N_DTYPES)
                    rc = invalid(p,
                                 "tensor '%s' has dtype %s, which is not supported (F32, F64, "
                                 "I32, I64)",
                                 name, d);
                e->t.dtype = (StDtype)k;
            }
            free(d);
        } else if (!rc && !strcmp(key, "shape")) {
            uint64_t dims[ST_MAX_DIMS];
            snprintf(what, sizeof what, "the shape of tensor '%s'", name);
            rc = have_shape++ ? invalid(p, "tensor '%s' has field 'shape' twice", name)
                              : parse_uint_array(p, what, dims, ST_MAX_DIMS, &e->t.ndim);
            for (int i = 0; !rc && i < e->t.ndim; i++) e->t.shape[i] = (int64_t)dims[i];
        } else if (!rc && !strcmp(key, "data_offsets")) {
            uint64_t off[2];
            int n = 0;
            snprintf(what, sizeof what, "the data_offsets of tensor '%s'", name);
            rc = have_offsets++ ? invalid(p, "tensor '%s' has field 'data_offsets' twice", name)
                                : parse_uint_array(p, what, off, 2, &n);
            if (!rc && n != 2)
                rc = invalid(p, "tensor '%s' has %d data_offsets; it needs exactly 2 (begin, end)",
                             name, n);
            if (!rc) e->begin = off[0], e->end = off[1];
        } else if (!rc) {
            rc = invalid(p,
                         "tensor '%s' has the unknown field '%s'; expected only dtype, shape "
                         "and data_offsets",
                         name, key);
        }
        if (!rc) rc = more = next_member(p, key);
        free(key);
        if (rc < 0) return -1;
    }
    const char *missing = !have_dtype     ? "dtype"
                          : !have_shape   ? "shape"
                          : !have_offsets ? "data_offsets"
                                          : NULL;
    if (missing) return invalid(p, "tensor '%s' has no '%s' field", name, missing);
    return 0;
}

static int parse_header(Parser *p) {
    int more = open_object(p, "the header");
    while (more > 0) {
        char *key = NULL;
        if (parse_string(p, "a tensor name", &key)) return -1;
        if (expect_colon(p, key)) return free(key), -1;
        if (!strcmp(key, "__metadata__")) {
            free(key);
            if (parse_metadata(p)) return -1;
            more = next_member(p, "__metadata__");
        } else {
            if (parse_tensor(p, key)) return -1; // key now owned by p->entries
            more = next_member(p, key);
        }
    }
    if (more < 0) return -1;
    skip_ws(p);
    if (p->pos != p->len)
        return syntax(p, "unexpected text after the header object (only whitespace may follow)");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Reader: validation against the data buffer

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const Entry *const *)a)->t.name, (*(const Entry *const *)b)->t.name);
}

static int cmp_entry_offsets(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int validate(Parser *p, const unsigned char *data, uint64_t data_len) {
    if (p->n > 1) { // duplicate names first: they would otherwise show up as overlaps
        const Entry **by_name = xmalloc((size_t)p->n * sizeof *by_name);
        for (int i = 0; i < p->n; i++) by_name[i] = &p->entries[i];
        qsort(by_name, (size_t)p->n, sizeof *by_name, cmp_entry_name);
        int rc = 0;
        for (int i = 1; i < p->n && !rc; i++)
            if (!strcmp(by_name[i - 1]->t.name, by_name[i]->t.name))
                rc =
                    invalid(p, "tensor name '%s' appears twice in the header; names must be unique",
                            by_name[i]->t.name);
        free(by_name);
        if (rc) return -1;
    }
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
        e->t.data = data + e->begin;
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

// Parse a whole file held in buf (malloc'ed, ownership taken: kept in st->buf or freed).
static int parse_owned(const char *file, unsigned char *buf, size_t len, SafeTensors *st, char *err,
                       size_t errlen) {
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
    Parser p = {.s = buf + 8, .len = (size_t)hlen, .file = file, .err = err, .errlen = errlen};
    if (parse_header(&p) || validate(&p, buf + 8 + hlen, len - 8 - hlen)) {
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
    st->buf = buf;
    return 0;
}

int st_parse(const void *bytes, size_t len, SafeTensors *st, char *err, size_t errlen) {
    unsigned char *copy = xmalloc(len);
    if (len) memcpy(copy, bytes, len);
    return parse_owned("<buffer>", copy, len, st, err, errlen);
}

int st_read(const char *path, SafeTensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    FILE *f = fopen(path, "rb");
    if (!f) return report(err, errlen, path, "cannot open for reading: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return report(err, errlen, path, "is not a regular file");
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        fclose(f);
        return report(err, errlen, path, "the file is too large to load on this machine");
    }
    size_t len = (size_t)sb.st_size;
    unsigned char *buf = xmalloc(len);
    size_t got = fread(buf, 1, len, f);
    int e = errno;
    fclose(f);
    if (got != len) {
        free(buf);
        return report(err, errlen, path, "read only %zu of %zu bytes: %s", got, len,
                      got < len && e ? strerror(e) : "the file changed while being read");
    }
    return parse_owned(path, buf, len, st, err, errlen);
}

void st_free(SafeTensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) free(st->meta_keys[i]), free(st->meta_values[i]);
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->buf);
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

int st_to_real(const StTensor *t, real *dst, size_t n, char *err, size_t errlen) {
    if (t->dtype != ST_F32 && t->dtype != ST_F64) {
        if (err && errlen)
            snprintf(err, errlen,
                     "tensor '%s' has dtype %s, not F32 or F64, so it cannot be read "
                     "as real values",
                     t->name, st_dtype_name(t->dtype));
        return -1;
    }
    size_t size = st_dtype_size(t->dtype), count = t->nbytes / size;
    if (n != count) {
        if (err && errlen)
            snprintf(err, errlen,
                     "tensor '%s' has %zu elements but the destination holds %zu; "
                     "check the expected shape",
                     t->name, count, n);
        return -1;
    }
    const unsigned char *src = t->data;
    for (size_t i = 0; i < n; i++) { // memcpy: data may be unaligned
        if (t->dtype == ST_F32) {
            float v;
            memcpy(&v, src + 4 * i, 4);
            dst[i] = (real)v;
        } else {
            double v;
            memcpy(&v, src + 8 * i, 8);
            dst[i] = (real)v;
        }
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
    const void *data;
} WEntry;

struct StWriter {
    WEntry *e;
    int n, cap;
    char **keys, **values;
    int n_meta, cap_meta;
};

typedef struct {
    char *s;
    size_t len, cap;
} Str;

static void str_put(Str *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = b->len + n + 1 > 2 * b->cap ? b->len + n + 256 : 2 * b->cap;
        b->s = xrealloc(b->s, b->cap, 1);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void str_puts(Str *b, const char *s) { str_put(b, s, strlen(s)); }

// Numbers and fixed text only, so 64 bytes are plenty.
__attribute__((format(printf, 2, 3))) static void str_printf(Str *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    CHECK(k >= 0 && (size_t)k < sizeof tmp, "str_printf: output too long");
    str_put(b, tmp, (size_t)k);
}

static void str_json(Str *b, const char *s) {
    str_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            str_put(b, esc, 2);
        } else if (c < 0x20) {
            str_printf(b, "\\u%04x", c);
        } else {
            str_put(b, (const char *)&c, 1);
        }
    }
    str_puts(b, "\"");
}

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

// The header text for entries in `order`, padded with spaces to a multiple of 8 bytes.
static void build_header(const StWriter *w, const WEntry *const *order, Str *h) {
    str_puts(h, "{");
    if (w->n_meta) {
        str_puts(h, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) str_puts(h, ",");
            str_json(h, w->keys[i]);
            str_puts(h, ":");
            str_json(h, w->values[i]);
        }
        str_puts(h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const WEntry *e = order[i];
        if (i || w->n_meta) str_puts(h, ",");
        str_json(h, e->name);
        str_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++) str_printf(h, "%s%" PRId64, d ? "," : "", e->shape[d]);
        str_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + e->nbytes);
        off += e->nbytes;
    }
    str_puts(h, "}");
    while (h->len % 8) str_puts(h, " ");
}

int st_writer_write(StWriter *w, const char *path, char *err, size_t errlen) {
    CHECK(w && path, "st_writer_write: NULL writer or path");
    const WEntry **order = xmalloc((size_t)w->n * sizeof *order);
    for (int i = 0; i < w->n; i++) order[i] = &w->e[i];
    qsort(order, (size_t)w->n, sizeof *order, cmp_wentry_name);
    for (int i = 1; i < w->n; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name)) {
            report(err, errlen, path, "tensor '%s' was added twice; each name may be written once",
                   order[i]->name);
            free(order);
            return -1;
        }
    qsort(order, (size_t)w->n, sizeof *order, cmp_wentry_layout);
    Str h = {0};
    build_header(w, order, &h);

    int rc = -1;
    char msg[1024];
    AtomicFile a;
    if (atomic_open(&a, path, msg, sizeof msg)) {
        report(err, errlen, path, "%s", msg);
        goto done;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int ok = fwrite(lenb, 1, 8, a.f) == 8 && fwrite(h.s, 1, h.len, a.f) == h.len;
    for (int i = 0; ok && i < w->n; i++)
        ok = order[i]->nbytes == 0 ||
             fwrite(order[i]->data, 1, order[i]->nbytes, a.f) == order[i]->nbytes;
    if (atomic_commit(&a, ok, msg, sizeof msg)) {
        report(err, errlen, path, "%s", msg);
        goto done;
    }
    rc = 0;
done:
    free(h.s);
    free(order);
    return rc;
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
