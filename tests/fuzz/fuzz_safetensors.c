// fuzz_safetensors.c: the safetensors reader (st_parse, core/safetensors.c) on arbitrary bytes.
// An accepted file must keep the reader's promises: tensors in data-offset order, covering the
// data buffer exactly, each name found by st_find, float tensors readable by st_to_real; and it
// must survive a round trip through the writer and st_read with the same names, shapes, dtypes,
// bytes and metadata.
#include "../../core/safetensors.h"
#include "fuzz.h"

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_safetensors: broken promise: %s\n", #cond);                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    return 0;
}

// What st_parse promises about a file it accepted.
static void check_accepted(const SafeTensors *st, const uint8_t *data, size_t size) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    size_t covered = 0;
    for (int i = 0; i < st->n; i++) {
        const StTensor *t = &st->tensors[i];
        EXPECT((const uint8_t *)t->data == (const uint8_t *)st->buf + 8 + hlen + covered);
        EXPECT(!memcmp(t->data, data + 8 + hlen + covered, t->nbytes));
        covered += t->nbytes;
        EXPECT(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++) count *= (size_t)t->shape[d];
        EXPECT(count * st_dtype_size(t->dtype) == t->nbytes);
        EXPECT(st_find(st, t->name) != NULL);
        char shape[256];
        st_shape_str(shape, sizeof shape, t->shape, t->ndim);
        if (t->dtype == ST_F32 || t->dtype == ST_F64) {
            real *v = xmalloc(count * sizeof(real));
            EXPECT(st_to_real(t, v, count, NULL, 0) == 0);
            free(v);
        }
    }
    EXPECT(8 + hlen + covered == size);
    for (int i = 0; i < st->n_meta; i++) EXPECT(st_meta(st, st->meta_keys[i]) != NULL);
}

// Written again by the writer and read back: the same tensors and metadata.
static void round_trip(const SafeTensors *st) {
    StWriter *w = st_writer_new();
    for (int i = 0; i < st->n; i++) {
        const StTensor *t = &st->tensors[i];
        if (!t->name[0]) { // the reader takes an empty name, the writer refuses one
            st_writer_free(w);
            return;
        }
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (int i = 0; i < st->n_meta; i++) st_writer_meta(w, st->meta_keys[i], st->meta_values[i]);
    char path[512], err[1024];
    fuzz_path(path, "round.safetensors");
    EXPECT(st_writer_write(w, path, err, sizeof err) == 0);
    st_writer_free(w);
    SafeTensors back;
    EXPECT(st_read(path, &back, err, sizeof err) == 0);
    EXPECT(back.n == st->n && back.n_meta == st->n_meta);
    for (int i = 0; i < st->n; i++) {
        const StTensor *a = &st->tensors[i], *b = st_find(&back, a->name);
        EXPECT(b && b->dtype == a->dtype && b->ndim == a->ndim && b->nbytes == a->nbytes);
        EXPECT(!memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]));
        EXPECT(!memcmp(a->data, b->data, a->nbytes));
    }
    for (int i = 0; i < st->n_meta; i++) {
        const char *v = st_meta(&back, st->meta_keys[i]);
        EXPECT(v && !strcmp(v, st->meta_values[i]));
    }
    st_free(&back);
    remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    char err[1024];
    if (st_parse(data, size, &st, err, sizeof err)) {
        fuzz_say("refused: %s", err);
        EXPECT(st.n == 0 && st.buf == NULL && err[0]); // zeroed, with a message
        return 0;
    }
    fuzz_say("accepted: %d tensors, %d metadata keys", st.n, st.n_meta);
    check_accepted(&st, data, size);
    round_trip(&st);
    st_free(&st);
    return 0;
}
