// test_safetensors.c: the safetensors reader and writer. Round trips through the writer, a file
// built byte by byte here (independent of the writer), and every rejected input with the key
// phrase of its message.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L // mkdtemp
#endif
#include "../core/safetensors.h"
#include "testutil.h"
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static void setup(void) { test_tmpdir(tmpdir, sizeof tmpdir); }
static void teardown(void) { test_rm_rf(tmpdir); }

static const char *tpath(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

// A file built by hand: the length field byte by byte (little-endian), the header, the data.
static unsigned char *make_file(const char *header, const void *data, size_t dlen, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + dlen;
    unsigned char *b = malloc(*len);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (dlen) memcpy(b + 8 + h, data, dlen);
    return b;
}

static void save(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static unsigned char *load(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*len + 1);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    b[*len] = 0;
    fclose(f);
    return b;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

static void assert_empty(const SafeTensors *st) {
    ck_assert_int_eq(st->n, 0);
    ck_assert_int_eq(st->n_meta, 0);
    ck_assert_ptr_null(st->tensors);
    ck_assert_ptr_null(st->buf);
}

// Parse header+data from memory; expect failure with `phrase` in the message.
// Parse a whole file's bytes from memory; expect failure with `phrase` in the message.
static void expect_error_bytes_at(const void *bytes, size_t len, const char *phrase, int line) {
    SafeTensors st;
    char err[600] = "";
    ck_assert_msg(st_parse(bytes, len, &st, err, sizeof err) == -1,
                  "line %d: parse succeeded, expected '%s'", line, phrase);
    ck_assert_msg(strstr(err, phrase) != NULL, "line %d: expected '%s' in: %s", line, phrase, err);
    ck_assert_msg(strncmp(err, "<buffer>: ", 10) == 0, "line %d: message lacks source: %s", line,
                  err);
    assert_empty(&st);
}
#define expect_error_bytes(b, n, phrase) expect_error_bytes_at(b, n, phrase, __LINE__)

// The same for header+data.
static void expect_error_at(const char *header, const void *data, size_t dlen, const char *phrase,
                            int line) {
    size_t len;
    unsigned char *b = make_file(header, data, dlen, &len);
    expect_error_bytes_at(b, len, phrase, line);
    free(b);
}
#define expect_error(h, d, n, phrase) expect_error_at(h, d, n, phrase, __LINE__)

// ---------------------------------------------------------------------------------------------

START_TEST(test_roundtrip_all_dtypes) {
    char path[256];
    tpath(path, sizeof path, "rt.safetensors");
    float f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, -1e-7f, 65504.0f};
    double f64[4] = {0.1, -1e300, 2.5, 1.0 / 3.0};
    int32_t i32[3] = {INT32_MIN, 0, INT32_MAX};
    int64_t i64[2] = {INT64_MIN, 0x0102030405060708LL};
    float scalar = 42.0f;
    double one = -7.0;
    int64_t s23[] = {2, 3}, s4[] = {4}, s31[] = {3, 1}, s2[] = {2}, s1[] = {1}, s0[] = {0};

    StWriter *w = st_writer_new();
    st_writer_add(w, "f32", ST_F32, 2, s23, f32);
    st_writer_add(w, "i64", ST_I64, 1, s2, i64);
    st_writer_add(w, "f64", ST_F64, 1, s4, f64);
    st_writer_add(w, "i32", ST_I32, 2, s31, i32);
    st_writer_add(w, "scalar", ST_F32, 0, NULL, &scalar);
    st_writer_add(w, "one", ST_F64, 1, s1, &one);
    st_writer_add(w, "empty", ST_I32, 1, s0, NULL);
    st_writer_meta(w, "depth", "3");
    st_writer_meta(w, "note", "quote \" backslash \\ newline \n tab \t caf\xc3\xa9");
    st_writer_meta(w, "depth", "12"); // replaces
    char err[512] = "";
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    ck_assert(!file_exists(tpath((char[256]){0}, 256, "rt.safetensors.tmp")));

    // raw layout: little-endian length, data starting 8-byte aligned
    size_t len;
    unsigned char *raw = load(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    ck_assert_uint_eq((8 + hlen) % 8, 0);
    ck_assert_uint_eq(len, 8 + hlen + sizeof f32 + sizeof f64 + sizeof i32 + sizeof i64 + 4 + 8);
    ck_assert_uint_eq(raw[8], '{');
    free(raw);

    SafeTensors st;
    ck_assert_msg(st_read(path, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, 7);
    // data order: 8-byte dtypes first, then by name, so every tensor is aligned to its dtype
    const char *order[] = {"f64", "i64", "one", "empty", "f32", "i32", "scalar"};
    for (int i = 0; i < 7; i++) {
        ck_assert_str_eq(st.tensors[i].name, order[i]);
        ck_assert_uint_eq(((const char *)st.tensors[i].data - (const char *)st.buf) %
                              st_dtype_size(st.tensors[i].dtype),
                          0);
        if (i)
            ck_assert_ptr_eq(st.tensors[i].data,
                             (const char *)st.tensors[i - 1].data + st.tensors[i - 1].nbytes);
    }
    const StTensor *t = st_find(&st, "f32");
    ck_assert_int_eq(t->dtype, ST_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    ck_assert_uint_eq(t->nbytes, sizeof f32);
    ck_assert_mem_eq(t->data, f32, sizeof f32);
    t = st_find(&st, "f64");
    ck_assert(t->dtype == ST_F64 && t->ndim == 1 && t->shape[0] == 4);
    ck_assert_mem_eq(t->data, f64, sizeof f64);
    t = st_find(&st, "i32");
    ck_assert(t->dtype == ST_I32 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 1);
    ck_assert_mem_eq(t->data, i32, sizeof i32);
    t = st_find(&st, "i64");
    ck_assert(t->dtype == ST_I64 && t->ndim == 1 && t->shape[0] == 2);
    ck_assert_mem_eq(t->data, i64, sizeof i64);
    t = st_find(&st, "scalar");
    ck_assert(t->dtype == ST_F32 && t->ndim == 0 && t->nbytes == 4);
    ck_assert_mem_eq(t->data, &scalar, 4);
    t = st_find(&st, "one");
    ck_assert(t->dtype == ST_F64 && t->ndim == 1 && t->shape[0] == 1 && t->nbytes == 8);
    ck_assert_mem_eq(t->data, &one, 8);
    t = st_find(&st, "empty");
    ck_assert(t->dtype == ST_I32 && t->ndim == 1 && t->shape[0] == 0 && t->nbytes == 0);
    ck_assert_ptr_null(st_find(&st, "missing"));

    ck_assert_int_eq(st.n_meta, 2);
    ck_assert_str_eq(st_meta(&st, "depth"), "12");
    ck_assert_str_eq(st_meta(&st, "note"), "quote \" backslash \\ newline \n tab \t caf\xc3\xa9");
    ck_assert_ptr_null(st_meta(&st, "missing"));

    real one_r, sc_r;
    ck_assert_int_eq(st_to_real(st_find(&st, "one"), &one_r, 1, err, sizeof err), 0);
    ck_assert(one_r == (real)-7.0);
    ck_assert_int_eq(st_to_real(st_find(&st, "scalar"), &sc_r, 1, err, sizeof err), 0);
    ck_assert(sc_r == (real)42.0);
    st_free(&st);
    assert_empty(&st);
    st_free(&st); // twice is harmless
}
END_TEST

START_TEST(test_roundtrip_real) {
    char path[256], err[512] = "";
    tpath(path, sizeof path, "real.safetensors");
    real x[6] = {0.5, -1.25, 3, 1e-3, 1e10, -0.0};
    int shape[] = {2, 3};
    StWriter *w = st_writer_new();
    st_writer_add_real(w, "x", 2, shape, x);
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    // writing again over an existing file works (rename replaces it)
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    SafeTensors st;
    ck_assert_msg(st_read(path, &st, err, sizeof err) == 0, "%s", err);
    const StTensor *t = st_find(&st, "x");
    ck_assert_int_eq(t->dtype, sizeof(real) == 8 ? ST_F64 : ST_F32); // the build's real type
    ck_assert(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              t->nbytes == 6 * sizeof(real));
    real y[6];
    ck_assert_msg(st_to_real(t, y, 6, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 6; i++) ck_assert(y[i] == x[i]);
    st_free(&st);
}
END_TEST

// Written here byte by byte: unpadded header (so data is not aligned), tensors listed out of data
// order, escapes in names and metadata, a 0-d tensor; values with known bit patterns.
START_TEST(test_read_hand_built) {
    const char *header =
        "{\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},"
        " \"__metadata__\" : {\"fmt\":\"pt\",\"k\\\"\\\\\\u0041\":\"v\\/\\n\\t\\b\\f\\r\"},\n"
        "\t\"a\\u0062c\":{\"shape\":[ 2 ],\"dtype\":\"F32\",\"data_offsets\":[0,8]},"
        "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[16,24]}}  ";
    const unsigned char data[24] = {
        0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0, // F32 1.0, -2.5
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // I64 0x0102030405060708
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xE0, 0x3F, // F64 0.5
    };
    size_t len;
    unsigned char *bytes = make_file(header, data, sizeof data, &len);
    char path[256], err[512] = "";
    tpath(path, sizeof path, "hand.safetensors");
    save(path, bytes, len);
    free(bytes);

    SafeTensors st;
    ck_assert_msg(st_read(path, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, 3);
    ck_assert_str_eq(st.tensors[0].name, "abc"); // file order of data offsets
    ck_assert_str_eq(st.tensors[1].name, "b");
    ck_assert_str_eq(st.tensors[2].name, "s");
    const StTensor *a = st_find(&st, "abc"), *b = st_find(&st, "b"), *s = st_find(&st, "s");
    ck_assert(a->dtype == ST_F32 && a->ndim == 1 && a->shape[0] == 2 && a->nbytes == 8);
    real av[2];
    ck_assert_int_eq(st_to_real(a, av, 2, err, sizeof err), 0);
    ck_assert(av[0] == (real)1.0 && av[1] == (real)-2.5);
    ck_assert(b->dtype == ST_I64 && b->ndim == 1 && b->shape[0] == 1 && b->nbytes == 8);
    int64_t bv;
    memcpy(&bv, b->data, 8);
    ck_assert(bv == 0x0102030405060708LL);
    ck_assert(s->dtype == ST_F64 && s->ndim == 0 && s->nbytes == 8);
    real sv;
    ck_assert_int_eq(st_to_real(s, &sv, 1, err, sizeof err), 0);
    ck_assert(sv == (real)0.5);
    ck_assert_int_eq(st.n_meta, 2);
    ck_assert_str_eq(st_meta(&st, "fmt"), "pt");
    ck_assert_str_eq(st_meta(&st, "k\"\\A"), "v/\n\t\b\f\r");
    st_free(&st);
}
END_TEST

START_TEST(test_parse_copies_bytes) {
    size_t len;
    const float v[2] = {3.0f, 4.0f};
    unsigned char *bytes =
        make_file("{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8, &len);
    SafeTensors st;
    char err[512] = "";
    ck_assert_msg(st_parse(bytes, len, &st, err, sizeof err) == 0, "%s", err);
    memset(bytes, 0xFF, len);
    free(bytes);
    ck_assert_mem_eq(st_find(&st, "v")->data, v, 8);
    ck_assert_ptr_null(st_meta(&st, "anything"));
    st_free(&st);
}
END_TEST

// BF16 and F16 tensors (as PyTorch writes them) read as real values: bit patterns with known
// values, written down from the formats' definitions (bf16: a float's high 16 bits; IEEE half:
// 1 sign, 5 exponent bits biased by 15, 10 fraction bits), subnormals, infinities and NaN included;
// they are not integer types, and the in-file reader (st_open) reads them the same
START_TEST(test_read_16_bit_floats) {
    const uint16_t bf[6] = {0x3F80, 0xC000, 0x3EAB, 0x0001, 0x7F80, 0xFFC0};
    const double bf_want[6] = {1.0, -2.0, 0.333984375, 0x1p-133, INFINITY, NAN};
    const uint16_t h[7] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0xFC00, 0x7E00};
    const double h_want[7] = {1.0, -2.0, 65504.0, 0x1p-24, 1023 * 0x1p-24, -INFINITY, NAN};
    unsigned char data[26];
    memcpy(data, bf, 12), memcpy(data + 12, h, 14);
    size_t len;
    unsigned char *bytes = make_file("{\"b\":{\"dtype\":\"BF16\",\"shape\":[6],\"data_offsets\":[0,12]},"
                                     "\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[12,26]}}",
                                     data, sizeof data, &len);
    char path[256], err[512] = "";
    save(tpath(path, sizeof path, "half.safetensors"), bytes, len);
    for (int opened = 0; opened < 2; opened++) {
        SafeTensors st;
        ck_assert_msg((opened ? st_open(path, &st, err, sizeof err) : st_parse(bytes, len, &st, err, sizeof err)) == 0,
                      "%s", err);
        const StTensor *tb = st_find(&st, "b"), *th = st_find(&st, "h");
        ck_assert(tb->dtype == ST_BF16 && th->dtype == ST_F16 && st_is_float(tb->dtype) && st_is_float(th->dtype));
        real got[7];
        ck_assert_msg(st_read_real(&st, tb, 0, 6, got, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(isnan(bf_want[i]) ? isnan(got[i]) : got[i] == (real)bf_want[i],
                          "BF16 %04x read as %g, not %g", bf[i], (double)got[i], bf_want[i]);
        ck_assert_msg(st_read_real(&st, th, 0, 7, got, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < 7; i++)
            ck_assert_msg(isnan(h_want[i]) ? isnan(got[i]) : got[i] == (real)h_want[i],
                          "F16 %04x read as %g, not %g", h[i], (double)got[i], h_want[i]);
        st_free(&st);
    }
    ck_assert(!st_is_float(ST_I32) && !st_is_float(ST_I64));
    free(bytes);
}
END_TEST

START_TEST(test_no_metadata_and_empty) {
    char path[256], err[512] = "";
    tpath(path, sizeof path, "nometa.safetensors");
    int32_t v = 5;
    int64_t s1[] = {1};
    StWriter *w = st_writer_new();
    st_writer_add(w, "v", ST_I32, 1, s1, &v);
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    size_t len;
    unsigned char *raw = load(path, &len);
    ck_assert_ptr_null(strstr((const char *)raw + 8, "__metadata__"));
    free(raw);

    // no tensors at all: "{}" padded to 8 bytes
    w = st_writer_new();
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    raw = load(path, &len);
    ck_assert_uint_eq(len, 16);
    ck_assert_mem_eq(raw, "\x08\0\0\0\0\0\0\0{}      ", 16);
    free(raw);
    SafeTensors st;
    ck_assert_msg(st_read(path, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, 0);
    st_free(&st);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Rejected inputs

START_TEST(test_err_truncated) {
    char path[256], err[600] = "";
    SafeTensors st;
    tpath(path, sizeof path, "short.safetensors");
    save(path, "\x05\0\0\0\0", 5); // shorter than the length field
    ck_assert_int_eq(st_read(path, &st, err, sizeof err), -1);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "message must name the file: %s", err);
    ck_assert_msg(strstr(err, "has only 5 bytes, fewer than the 8-byte header length field"), "%s",
                  err);
    assert_empty(&st);

    unsigned char big[100] = {0x00, 0x10, [8] = '{'}; // header length 4096 in a 100-byte file
    tpath(path, sizeof path, "M.safetensors");
    save(path, big, sizeof big);
    ck_assert_int_eq(st_read(path, &st, err, sizeof err), -1);
    char want[400];
    snprintf(want, sizeof want,
             "%s: header says 4096 bytes but the file has only 92 after the "
             "length field; the file is truncated",
             path);
    ck_assert_str_eq(err, want);
    assert_empty(&st);

    // data shorter than the offsets say
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", big, 10,
                 "tensor 'w' has data_offsets [0, 16] but the data buffer has only 10 bytes; "
                 "the file is truncated");
    expect_error("", NULL, 0, "expected '{'");
}
END_TEST

// Files of another kind are not mistaken for truncated ones: their first 8 bytes, read as the
// header length, are absurd, or no JSON object follows them.
START_TEST(test_err_not_safetensors) {
    char path[256], err[600] = "", want[600];
    SafeTensors st;
    tpath(path, sizeof path, "text.safetensors");
    const char *text = "hello world, this is not a safetensors file\n";
    save(path, text, strlen(text));
    ck_assert_int_eq(st_read(path, &st, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: not a safetensors file: its first 8 bytes give a header "
             "length of 8031924123371070824 bytes, over the format's limit of 100000000", path);
    ck_assert_msg(!strncmp(err, want, strlen(want)), "%s", err); // "hello wo" little-endian
    assert_empty(&st);

    // a valid header after a length field one past the limit; at the limit it is a truncated file
    unsigned char b[24] = {0x01, 0xE1, 0xF5, 0x05, [8] = '{', '}'}; // 100000001 = 0x05F5E101
    expect_error_bytes(b, sizeof b, "not a safetensors file: its first 8 bytes give a header "
                       "length of 100000001 bytes");
    b[0] = 0x00;
    expect_error_bytes(b, sizeof b, "header says 100000000 bytes but the file has only 16 after "
                       "the length field; the file is truncated");
    // a plausible length past the end of the file, but no JSON object where the header starts
    unsigned char p[12] = {200, [8] = 'P', 'K', 3, 4};
    expect_error_bytes(p, sizeof p, "not a safetensors file: the header after the 8-byte length "
                       "field is no JSON object");
    p[8] = ' '; // JSON may start with whitespace: then the file is truncated
    expect_error_bytes(p, sizeof p, "header says 200 bytes but the file has only 4 after the "
                       "length field; the file is truncated");
}
END_TEST

// A syntax error names its place (byte in the header, offset in the file) and what is wrong in
// this project's words; jansson's own sentence follows, but is not pinned here. The other
// messages are ours.
START_TEST(test_err_bad_json) {
    const char *h = "{\"w\" {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_error(h, "abcd", 4,
                 "malformed JSON header at byte 5 (file offset 13): a syntax error (line 1, column 6;");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", "abcd", 4,
                 "at byte 54 (file offset 62): a syntax error");
    expect_error("{\"w", NULL, 0, "at byte 2 (file offset 10): the header ends inside a value");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "abcd", 4,
                 "floating-point number in the shape of tensor 'w'");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-1,4]}}", "abcd", 4,
                 "negative number in the data_offsets of tensor 'w'");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "abcd", 4,
                 "at byte 29 (file offset 37): a syntax error"); // a leading zero
    expect_error("{\"caf\\u00e9\":{}}", NULL, 0, "tensor 'caf\xc3\xa9' has no 'dtype' field");
    expect_error("{\"a\\x\":{}}", NULL, 0, "at byte 4 (file offset 12): a syntax error"); // no escape
    expect_error("{\"a\tb\":{}}", NULL, 0, "at byte 2 (file offset 10): a syntax error"); // a raw tab
    expect_error("{} x", NULL, 0, "at byte 3 (file offset 11): text after the header's closing brace");
    expect_error("[]", NULL, 0, "at byte 0 (file offset 8): expected '{' to start the header");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1] \"data_offsets\":[0,4]}}", "abcd", 4,
                 "at byte 45 (file offset 53): a syntax error"); // no comma
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}",
                 "abcd", 4, "tensor 'w' has the unknown field 'extra'");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", "abcd", 4,
                 "tensor 'w' has no 'data_offsets' field");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "abcd", 4,
                 "the data_offsets of tensor 'w' has more than 2 entries");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
                 "abcd", 4, "the shape of tensor 'w' has more than 8 entries");
    expect_error(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
        "abcd", 4, "at byte 48 (file offset 56): an integer beyond 64 bits");
}
END_TEST

// A syntax error names its place three ways: byte in the header, offset in the file, line and
// column; here a missing comma at the start of line 3.
START_TEST(test_err_syntax_position) {
    const char *h = "{\"w\": {\"dtype\": \"F32\",\n"
                    "       \"shape\": [1]\n"
                    "       \"data_offsets\": [0, 4]}}";
    expect_error(h, "abcd", 4,
                 "<buffer>: malformed JSON header at byte 63 (file offset 71): a syntax error (line 3, "
                 "column 21;");
    expect_error("{\"w\":{}}\n\n  x", NULL, 0, "at byte 12 (file offset 20): text after the header's "
                 "closing brace (line 3, column 3;");
}
END_TEST

// jansson refuses duplicate keys; the message names the key (decoded) and where it sits, also
// when it is too long for jansson's own message to quote it.
START_TEST(test_err_duplicate_key) {
    char data[8] = {0};
    expect_error("{\"a_rather_long_tensor_name_\\u00e9\":{},\n"
                 " \"a_rather_long_tensor_name_\\u00e9\":{}}",
                 NULL, 0,
                 "tensor name 'a_rather_long_tensor_name_\xc3\xa9' appears twice in the header");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 data, 8, "tensor name 'a' appears twice"); // the same key once decoded
    expect_error("{\"__metadata__\":{\"k\":\"1\"},\"w\":{\"shape\":[],\"shape\":[]}}", NULL, 0,
                 "tensor 'w' has field 'shape' twice");
    expect_error("{\"__metadata__\":{\"x\":\"[{\\\"k\\\"\",\"k\":\"1\",\"k\":\"2\"}}", NULL, 0,
                 "metadata key 'k' appears twice"); // brackets and quotes inside a string
    // deeper than a safetensors header goes: the place and the kind
    expect_error("{\"w\":{\"shape\":[{\"k\":1,\"k\":2}]}}", NULL, 0,
                 "at byte 24 (file offset 32): a key twice in one object");
}
END_TEST

// Names and metadata are UTF-8 text: \u escapes (surrogate pairs too) decode to UTF-8; raw UTF-8
// reads back as written; \u0000, a lone surrogate and bytes that are not UTF-8 are refused.
START_TEST(test_unicode) {
    const float v[2] = {1.0f, 2.0f};
    size_t len;
    unsigned char *bytes = make_file(
        "{\"caf\\u00e9\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"__metadata__\":{\"\\u00fcber\":\"\\u2192 ok\"}}",
        v, 8, &len);
    SafeTensors st;
    char err[512] = "", path[256];
    ck_assert_msg(st_parse(bytes, len, &st, err, sizeof err) == 0, "%s", err);
    free(bytes);
    ck_assert_str_eq(st.tensors[0].name, "caf\xc3\xa9");
    ck_assert_str_eq(st.tensors[1].name, "\xf0\x9f\x98\x80");
    ck_assert_str_eq(st_meta(&st, "\xc3\xbc" "ber"), "\xe2\x86\x92 ok");
    ck_assert_mem_eq(st_find(&st, "caf\xc3\xa9")->data, v, 4);
    st_free(&st);

    tpath(path, sizeof path, "utf8.safetensors");
    StWriter *w = st_writer_new();
    st_writer_add(w, "\xce\xb8.weight", ST_F32, 1, (int64_t[]){2}, v);
    st_writer_meta(w, "note", "\xe2\x86\x92");
    ck_assert_msg(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    ck_assert_msg(st_read(path, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_mem_eq(st_find(&st, "\xce\xb8.weight")->data, v, 8);
    ck_assert_str_eq(st_meta(&st, "note"), "\xe2\x86\x92");
    st_free(&st);

    expect_error("{\"a\\u0000\":{}}", NULL, 0,
                 "malformed JSON header at byte 9 (file offset 17): a \\u0000 escape");
    expect_error("{\"a\\ud800\":{}}", NULL, 0, "at byte 9 (file offset 17): a syntax error"); // alone
    expect_error("{\"a\xff\":{}}", NULL, 0, "at byte 2 (file offset 10): bytes that are not UTF-8");
}
END_TEST

// The writer refuses names and metadata that are not UTF-8: its reader (and every JSON reader)
// would refuse the file.
START_TEST(test_err_write_not_utf8) {
    char path[256], err[512] = "";
    tpath(path, sizeof path, "latin1.safetensors");
    float v = 1;
    StWriter *w = st_writer_new();
    st_writer_add(w, "caf\xe9", ST_F32, 0, NULL, &v);
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor name 'caf\xe9' is not valid UTF-8"), "%s", err);
    st_writer_free(w);
    w = st_writer_new();
    st_writer_meta(w, "run", "caf\xe9");
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "metadata key 'run' or its value is not valid UTF-8"), "%s", err);
    st_writer_free(w);
    ck_assert(!file_exists(path));
}
END_TEST

// Integers are int64 all the way: offsets and dims past 2^53 (where a double would round) come
// out exact in the messages that refuse them; past int64 they are refused as too big.
START_TEST(test_err_int64_beyond_2_53) {
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,9007199254740993]}}",
                 "abcd", 4,
                 "tensor 'w' has data_offsets [0, 9007199254740993] but the data buffer has only "
                 "4 bytes; the file is truncated");
    expect_error("{\"w\":{\"dtype\":\"F64\",\"shape\":[9007199254740993],\"data_offsets\":[0,8]}}",
                 "abcdefgh", 8,
                 "tensor 'w' has shape [9007199254740993] and dtype F64, i.e. 72057594037927944 "
                 "bytes, but its data_offsets [0, 8] span 8 bytes");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
                 "\"data_offsets\":[0,4]}}",
                 "abcd", 4, "has shape [4611686018427387904, 4], whose size in bytes overflows");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[9223372036854775807,9223372036854775807]}}",
                 NULL, 0, "data_offsets [9223372036854775807, 9223372036854775807] but the data "
                 "buffer has only 0 bytes");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,9223372036854775808]}}",
                 NULL, 0, "too big integer near '9223372036854775808'");
}
END_TEST

START_TEST(test_err_unknown_dtype) {
    expect_error(
        "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", "ab", 2,
        "<buffer>: tensor 'w' has dtype F8_E4M3, which is not supported (F32, F64, BF16, F16, I32, I64)");
}
END_TEST

START_TEST(test_err_size_mismatch) {
    char data[20] = {0};
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", data, 20,
                 "tensor 'w' has shape [2, 3] and dtype F32, i.e. 24 bytes, but its data_offsets "
                 "[0, 20] span 20 bytes");
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", data, 4,
                 "begin is after its end");
}
END_TEST

START_TEST(test_err_overlap_and_holes) {
    char data[16] = {0};
    expect_error("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                 data, 12,
                 "tensors 'a' (data_offsets [0, 8]) and 'b' ([4, 12]) overlap in the data buffer");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                 data, 12,
                 "bytes [4, 8) of the data buffer (before tensor 'b') belong to no tensor");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 8,
                 "the last 4 bytes of the data buffer (from offset 4) belong to no tensor");
}
END_TEST

START_TEST(test_err_duplicates_and_metadata) {
    char data[8] = {0};
    expect_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 data, 8, "tensor name 'w' appears twice in the header");
    expect_error("{\"__metadata__\":{\"step\":3}}", NULL, 0,
                 "metadata key 'step' has a non-string value");
    expect_error("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", NULL, 0,
                 "metadata key 'a' appears twice");
    expect_error("{\"__metadata__\":{},\"__metadata__\":{}}", NULL, 0,
                 "two \"__metadata__\" entries");
    expect_error(
        "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data,
        4, "tensor 'w' has field 'dtype' twice");
}
END_TEST

START_TEST(test_err_to_real) {
    int64_t s[] = {2, 3};
    int32_t v[6] = {0};
    char path[256], err[512] = "";
    tpath(path, sizeof path, "ints.safetensors");
    StWriter *w = st_writer_new();
    st_writer_add(w, "ints", ST_I32, 2, s, v);
    st_writer_add(w, "floats", ST_F32, 2, s, v);
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof err), 0);
    st_writer_free(w);
    SafeTensors st;
    ck_assert_int_eq(st_read(path, &st, err, sizeof err), 0);
    real dst[6];
    ck_assert_int_eq(st_to_real(st_find(&st, "ints"), dst, 6, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'ints' has dtype I32, not a float type (F32, F64, BF16, F16)"), "%s", err);
    ck_assert_int_eq(st_to_real(st_find(&st, "floats"), dst, 5, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'floats' has 6 elements but the destination holds 5"), "%s",
                  err);
    st_free(&st);
}
END_TEST

START_TEST(test_err_read_missing_file) {
    char path[256], err[512] = "";
    tpath(path, sizeof path, "nope.safetensors");
    SafeTensors st;
    ck_assert_int_eq(st_read(path, &st, err, sizeof err), -1);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0 && strstr(err, "cannot open"), "%s", err);
    assert_empty(&st);
    ck_assert_int_eq(st_read(tmpdir, &st, err, sizeof err), -1); // a directory
    ck_assert_msg(strstr(err, "is not a regular file"), "%s", err);
}
END_TEST

START_TEST(test_err_write_missing_dir) {
    char path[256], tmp[300], err[512] = "";
    tpath(path, sizeof path, "missing/x.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    float v = 1;
    StWriter *w = st_writer_new();
    st_writer_add(w, "v", ST_F32, 0, NULL, &v);
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof err), -1);
    st_writer_free(w);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0 && strstr(err, "cannot create"), "%s", err);
    ck_assert(!file_exists(path));
    ck_assert(!file_exists(tmp));
}
END_TEST

START_TEST(test_err_write_duplicate) {
    char path[256], err[512] = "";
    tpath(path, sizeof path, "dup.safetensors");
    float v = 1;
    StWriter *w = st_writer_new();
    st_writer_add(w, "v", ST_F32, 0, NULL, &v);
    st_writer_add(w, "v", ST_F32, 0, NULL, &v);
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof err), -1);
    st_writer_free(w);
    ck_assert_msg(strstr(err, "tensor 'v' was added twice"), "%s", err);
    ck_assert(!file_exists(path));
}
END_TEST

START_TEST(test_writer_misuse_is_fatal) {
    float v = 0;
    int64_t neg[] = {-2};
    StWriter *w = st_writer_new();
    EXPECT_FATAL(st_writer_add(w, "n", ST_F32, 1, neg, &v), "tensor 'n' has negative dimension -2");
    EXPECT_FATAL(st_writer_add(w, "d", ST_F32, ST_MAX_DIMS + 1, neg, &v), "9 dimensions");
    EXPECT_FATAL(st_writer_add(w, "__metadata__", ST_F32, 0, NULL, &v), "empty or reserved");
    EXPECT_FATAL(st_writer_add(w, "null", ST_F32, 1, (int64_t[]){3}, NULL), "NULL data");
    st_writer_free(w);
}
END_TEST

Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_all_dtypes);
    tcase_add_test(tc, test_roundtrip_real);
    tcase_add_test(tc, test_read_hand_built);
    tcase_add_test(tc, test_read_16_bit_floats);
    tcase_add_test(tc, test_parse_copies_bytes);
    tcase_add_test(tc, test_no_metadata_and_empty);
    tcase_add_test(tc, test_err_truncated);
    tcase_add_test(tc, test_err_not_safetensors);
    tcase_add_test(tc, test_err_bad_json);
    tcase_add_test(tc, test_err_syntax_position);
    tcase_add_test(tc, test_err_duplicate_key);
    tcase_add_test(tc, test_unicode);
    tcase_add_test(tc, test_err_write_not_utf8);
    tcase_add_test(tc, test_err_int64_beyond_2_53);
    tcase_add_test(tc, test_err_unknown_dtype);
    tcase_add_test(tc, test_err_size_mismatch);
    tcase_add_test(tc, test_err_overlap_and_holes);
    tcase_add_test(tc, test_err_duplicates_and_metadata);
    tcase_add_test(tc, test_err_to_real);
    tcase_add_test(tc, test_err_read_missing_file);
    tcase_add_test(tc, test_err_write_missing_dir);
    tcase_add_test(tc, test_err_write_duplicate);
    tcase_add_test(tc, test_writer_misuse_is_fatal);
    suite_add_tcase(s, tc);
    return s;
}
