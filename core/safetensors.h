// safetensors.h: reading and writing the safetensors format used for checkpoints, probe batches
// and probe results. A file is: an 8-byte little-endian header length N, N bytes of JSON header
// ({"name": {"dtype", "shape", "data_offsets"}, ..., optional "__metadata__": {str: str}}), then
// the data buffer, which the tensors must cover exactly. F32, F64, BF16, F16, I32 and I64 are read
// (the two 16-bit float types into `real`, e.g. a bf16 checkpoint written by PyTorch); F32, F64,
// BF16 (from `real`: --save-dtype bf16), I32 and I64 are written.
// The header is UTF-8 JSON, read and written by jansson: \u escapes decode to UTF-8, keys must be
// unique, integers are int64. Readers validate everything and report one sentence naming the file
// and the problem (a JSON syntax error with its byte, file offset, line and column; a header
// length over the format's 100 MB limit, or a header that is no JSON object, is "not a
// safetensors file"; a header or data cut short is a truncated file); the writer is atomic
// (writes "<path>.tmp", then renames). Assumes a little-endian host.
#pragma once
#include "real.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { ST_F32, ST_F64, ST_I32, ST_I64, ST_BF16, ST_F16 } StDtype;

#define ST_MAX_DIMS 8

typedef struct StTensor {
    char *name;
    StDtype dtype;
    int ndim;                   // 0 for a scalar
    int64_t shape[ST_MAX_DIMS]; // [ndim]
    size_t nbytes;              // element count * st_dtype_size(dtype)
    const void *data;           // [nbytes] inside SafeTensors.buf. Aligned to the dtype size
                                // in files from st_writer_write (and the reference writer);
                                // files from other writers may leave it unaligned. NULL in a
                                // file opened by st_open: its bytes stay in the file, from `at`
    uint64_t at;                // where its data begins in the file
} StTensor;

typedef struct SafeTensors {
    int n;
    StTensor *tensors; // [n], in file order of data offsets
    int n_meta;
    char **meta_keys;   // [n_meta], in header order
    char **meta_values; // [n_meta]
    void *buf;          // the whole file; tensors' data point into it (st_read, st_parse)
    FILE *file;         // st_open's: the file the values are read from (st_read_real)
} SafeTensors;

// 0 on success; on failure -1, *st zeroed (nothing to free), and a one-sentence message in err
// (may be NULL) naming the file and the problem.
int st_read(const char *path, SafeTensors *st, char *err, size_t errlen);
// Same, but reads and checks the header alone (every tensor's place against the file's size): the
// values stay in the file, read a part at a time by st_read_real, so a large checkpoint is never
// in memory whole. The file stays open until st_free.
int st_open(const char *path, SafeTensors *st, char *err, size_t errlen);
// Same, from bytes in memory (copied; the caller keeps ownership of `bytes`). Messages name the
// source as "<buffer>".
int st_parse(const void *bytes, size_t len, SafeTensors *st, char *err, size_t errlen);
void st_free(SafeTensors *st); // leaves *st zeroed; safe on a zeroed or already-freed struct
const StTensor *st_find(const SafeTensors *st, const char *name); // NULL if absent
const char *st_meta(const SafeTensors *st, const char *key);      // NULL if absent
size_t st_dtype_size(StDtype d);                                  // 0 for an invalid value
const char *st_dtype_name(StDtype d); // "F32", ...; "?" for an invalid value
bool st_is_float(StDtype d);          // F32, F64, BF16 or F16: st_read_real reads it
const char *st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim); // "[2, 3]"
// Convert a float tensor (st_is_float) into n `real` values; -1 with a message if the dtype is not
// a float type or n is not the tensor's element count.
int st_to_real(const StTensor *t, real *dst, size_t n, char *err, size_t errlen);
// Elements [first, first + n) of a float tensor of st (in memory, or in st_open's file) into
// n `real` values; -1 with a message if the dtype is not a float type, the range is not inside the
// tensor or the file cannot be read there.
int st_read_real(const SafeTensors *st, const StTensor *t, size_t first, size_t n, real *dst,
                 char *err, size_t errlen);

// ---------------------------------------------------------------------------------------------
// Writer. Names and metadata strings are copied; tensor data is not and must stay valid until
// st_writer_write. Invalid arguments to the add functions (ndim out of 0..ST_MAX_DIMS, negative
// dims, an empty or reserved name, NULL data for a non-empty tensor) are fatal programming errors.
typedef struct StWriter StWriter;

StWriter *st_writer_new(void);
void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data);
// Stored in the build's real type: F32, or F64 in the float64 build (readers take either).
void st_writer_add_real(StWriter *w, const char *name, int ndim, const int *shape,
                        const real *data);
// Adding a key again replaces its value.
void st_writer_meta(StWriter *w, const char *key, const char *value);
// Header entries and data ordered by dtype size (8-byte dtypes first), then name, with the header
// padded with spaces so the data starts 8-byte aligned: every tensor is aligned to its dtype;
// "__metadata__" only if metadata was added. Writes "<path>.tmp" then renames it onto path; on
// failure (also a name added twice, or a name or metadata string that is not UTF-8) -1 with a
// message, and neither path nor the .tmp file is left behind. The writer can be written again or
// freed afterwards. st_writer_begin, then st_writer_end.
int st_writer_write(StWriter *w, const char *path, char *err, size_t errlen);

// Streaming, for data that is not in memory all at once (a model gathered a part at a time): a
// tensor added "later" has its shape only; st_writer_begin writes the header and the tensors added
// with their data into "<path>.tmp" (-1 with a message as st_writer_write, nothing left behind);
// st_writer_put_real writes elements [first, first + n) of a later tensor at their place, in any
// order; st_writer_end checks that every byte of every tensor was written (a programming error
// otherwise) and renames the file onto path (0), or removes it (-1 with the reason).
// A later tensor of `real` values is stored in the build's real type or, with bf16, as BF16: each
// value rounded to its nearest bf16 value, ties to even (real_to_bf16).
void st_writer_add_real_later(StWriter *w, const char *name, int ndim, const int *shape, bool bf16);
int st_writer_begin(StWriter *w, const char *path, char *err, size_t errlen);
void st_writer_put_real(StWriter *w, const char *name, size_t first, const real *values, size_t n);
int st_writer_end(StWriter *w, char *err, size_t errlen);
void st_writer_free(StWriter *w); // NULL is fine
