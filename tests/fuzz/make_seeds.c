// make_seeds.c: writes the fuzz targets' seed corpus, tests/fuzz/seeds/<target>/, with the
// program's own writers (st_writer, ckpt_save_model, ckpt_save_optimizer, train_config_write_json,
// stb_image_write) and a few hand-made files like the ones the tests write (tests/test_*.c,
// tests/cli_tests.sh): small files that reach deep into each reader. `make fuzz-seeds` runs it;
// the files are committed.
// Usage: make_seeds DIR (DIR/safetensors, DIR/checkpoint, ... must not exist yet or are added to).
#include "../../core/safetensors.h"
#include "../../run/checkpoint.h"
#include "../../run/config.h"
#include "fuzz.h"
#include <stb/stb_image_write.h>
#include <sys/stat.h>

static const char *root;

static const char *seed_path(char *path, const char *target, const char *name) {
    snprintf(path, 512, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, 512, "%s/%s/%s", root, target, name);
    return path;
}

static void write_bytes(const char *target, const char *name, const void *data, size_t n) {
    char path[512];
    FILE *f = fopen(seed_path(path, target, name), "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

static void write_text(const char *target, const char *name, const char *text) {
    write_bytes(target, name, text, strlen(text));
}

// A safetensors file whose header is `json` (data follows as given).
static void write_raw_st(const char *target, const char *name, const char *json, const void *data,
                         size_t n) {
    size_t h = strlen(json), total = 8 + h + n;
    unsigned char *buf = xmalloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, json, h);
    if (n) memcpy(buf + 8 + h, data, n);
    write_bytes(target, name, buf, total);
    free(buf);
}

static void commit(StWriter *w, const char *target, const char *name) {
    char path[512], err[1024];
    if (st_writer_write(w, seed_path(path, target, name), err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    st_writer_free(w);
}

// ---- safetensors: every dtype, a scalar, an empty tensor, metadata, escapes, odd layouts --------
static void safetensors_seeds(void) {
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    double d[2] = {0.25, -1e300};
    int32_t i32[3] = {1, -1, 2147483647};
    int64_t i64[2] = {-5, 1LL << 40};
    StWriter *w = st_writer_new();
    st_writer_add(w, "f32", ST_F32, 2, (int64_t[]){2, 3}, f);
    st_writer_add(w, "f64", ST_F64, 1, (int64_t[]){2}, d);
    st_writer_add(w, "i32", ST_I32, 1, (int64_t[]){3}, i32);
    st_writer_add(w, "i64", ST_I64, 1, (int64_t[]){2}, i64);
    st_writer_add(w, "scalar", ST_F32, 0, NULL, f);
    st_writer_add(w, "empty", ST_F32, 2, (int64_t[]){0, 4}, NULL);
    st_writer_meta(w, "format", "pt");
    st_writer_meta(w, "note", "caf\xc3\xa9 \"quoted\" \\ tab\t");
    commit(w, "safetensors", "dtypes.safetensors");

    w = st_writer_new();
    st_writer_add(w, "blocks.0.attn.qkv.weight", ST_F32, 4, (int64_t[]){1, 1, 2, 3}, f);
    st_writer_add(w, "\xce\xb1\xce\xb2", ST_F64, 1, (int64_t[]){1}, d);
    commit(w, "safetensors", "unicode.safetensors");

    // hand-written headers as other writers make them: no padding, unaligned data, escapes,
    // white space, metadata last, and a few the reader must refuse
    write_raw_st("safetensors", "unaligned.safetensors",
                 "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]},"
                 "\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[6,10]},"
                 "\"c\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]},"
                 "\"s\":{\"dtype\":\"F64\",\"shape\":[0,1],\"data_offsets\":[0,0]},"
                 "\"h\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,2]}}",
                 "abcdefghij", 10);
    write_raw_st("safetensors", "spaces.safetensors",
                 " \n{ \"x\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] , "
                 "\"dtype\" : \"F32\" } , \"__metadata__\" : { \"k\\u00e9y\" : \"v\\n\" } }\t ",
                 "\0\0\x80?\0\0\0@", 8);
    write_raw_st("safetensors", "duplicate.safetensors",
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 "12345678", 8);
    write_raw_st("safetensors", "duplicate-field.safetensors",
                 "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"},"
                 "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}}",
                 "1234", 4);
    write_raw_st("safetensors", "overlap.safetensors",
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 "12345678", 8);
    write_raw_st("safetensors", "huge-shape.safetensors",
                 "{\"x\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],"
                 "\"data_offsets\":[0,8]}}", "12345678", 8);
    write_raw_st("safetensors", "truncated.safetensors",
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", "1234", 4);
}

// ---- checkpoint: model (step, optimizer file), EMA weights, optimizer state, other configs -----
static void checkpoint_seeds(void) {
    char path[512], err[1024];
    DiT m;
    dit_create(&m, &(DiTConfig)FUZZ_CKPT_MODEL);
    dit_init(&m, 1, 1);
    if (ckpt_save_model(&m, NULL, seed_path(path, "checkpoint", "model.safetensors"), 12,
                        "optimizer.safetensors", err, sizeof err) ||
        ckpt_save_model(&m, m.ps.params, seed_path(path, "checkpoint", "ema.safetensors"), -1,
                        NULL, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    AdamW opt = adamw_default(1e-3);
    opt.step = 12;
    for (size_t i = 0; i < m.ps.total; i++) m.ps.m[i] = 1e-3f * (real)i, m.ps.v[i] = 1e-6f;
    if (ckpt_save_optimizer(&m.ps, m.ps.m, m.ps.v, &opt, FUZZ_CKPT_RUN,
                            seed_path(path, "checkpoint", "optimizer.safetensors"), err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    dit_free(&m);
    // learn_sigma, no label dropout (no null-class row), 1 channel, patch 1
    DiTConfig c = {.input_size = 2, .patch_size = 1, .in_channels = 1, .hidden_size = 4,
                   .depth = 1, .num_heads = 2, .mlp_ratio = 0.5, .num_classes = 1,
                   .learn_sigma = true};
    dit_create(&m, &c);
    dit_init(&m, 2, 1);
    if (ckpt_save_model(&m, NULL, seed_path(path, "checkpoint", "sigma.safetensors"), 0, NULL, err,
                        sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    dit_free(&m);
}

// ---- probe batches for FUZZ_BATCH_MODEL: x (B,2,4,4), t (B), y (B), target (B,4,4,4) ------------
static void batch_seed(const char *name, int B, StDtype xdt, StDtype ydt, int64_t label) {
    double v[2 * 4 * 4 * 4 * 2];
    float fv[sizeof v / sizeof v[0]];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) v[i] = fv[i] = (float)i / 16 - 1;
    int64_t y64[2] = {0, label};
    int32_t y32[2] = {0, (int32_t)label};
    const void *x = xdt == ST_F64 ? (const void *)v : fv;
    StWriter *w = st_writer_new();
    st_writer_add(w, "x", xdt, 4, (int64_t[]){B, 2, 4, 4}, x);
    st_writer_add(w, "t", xdt, 1, (int64_t[]){B}, x);
    st_writer_add(w, "y", ydt, 1, (int64_t[]){B}, ydt == ST_I64 ? (const void *)y64 : y32);
    st_writer_add(w, "target", ST_F32, 4, (int64_t[]){B, 4, 4, 4}, fv);
    commit(w, "probe_batch", name);
}

// A batch of packs: 2 rows of 4 tokens holding 1x2, 2x1 and 1x3 patch grids (probe.h)
static void pack_seed(void) {
    float v[2 * 4 * 2 * 8];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) v[i] = (float)i / 16 - 1;
    int64_t images[3][4] = {{0, 0, 1, 2}, {0, 2, 2, 1}, {1, 1, 1, 3}}, y[3] = {0, 3, 1};
    StWriter *w = st_writer_new();
    st_writer_add(w, "pack", ST_I64, 2, (int64_t[]){3, 4}, images);
    st_writer_add(w, "x", ST_F32, 4, (int64_t[]){2, 2, 2, 8}, v);
    st_writer_add(w, "t", ST_F32, 1, (int64_t[]){3}, v);
    st_writer_add(w, "y", ST_I64, 1, (int64_t[]){3}, y);
    st_writer_add(w, "target", ST_F32, 4, (int64_t[]){2, 4, 2, 8}, v);
    commit(w, "probe_batch", "packs.safetensors");
}

// ---- images: a first byte for the size, then a PNG or JPEG as the tests write them ------------
static int seed_byte;
static void image_bytes(void *ctx, void *data, int n) {
    FILE *f = ctx;
    if (seed_byte >= 0) fputc(seed_byte, f), seed_byte = -1;
    fwrite(data, 1, (size_t)n, f);
}

static void image_seed(const char *name, int size, int w, int h, int comp, bool jpeg) {
    unsigned char px[16 * 16 * 4];
    for (int i = 0; i < w * h * comp; i++) px[i] = (unsigned char)(i * 37 + (i / comp) * 11);
    char path[512];
    FILE *f = fopen(seed_path(path, "imagefolder", name), "wb");
    seed_byte = size - 1;
    int ok = jpeg ? stbi_write_jpg_to_func(image_bytes, f, w, h, comp, px, 90)
                  : stbi_write_png_to_func(image_bytes, f, w, h, comp, px, w * comp);
    if (!f || !ok || fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

// ---- resume: run folders' config.json as training writes them ----------------------------------
static void resume_seed(const char *name, int argc, char **argv) {
    TrainConfig tc;
    char path[512], err[1024] = "the flags print --help";
    bool parsed = train_config_parse(&tc, argc, argv, 1);
    tc.ranks = 2;
    if (!parsed || train_config_write_json(&tc, seed_path(path, "resume", name), err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    safetensors_seeds();
    checkpoint_seeds();
    batch_seed("batch.safetensors", 2, ST_F32, ST_I64, 3);
    batch_seed("batch-f64-i32.safetensors", 1, ST_F64, ST_I32, 0);
    batch_seed("bad-label.safetensors", 2, ST_F32, ST_I64, 4);
    pack_seed();

    image_seed("rgb-12x6.png", 3, 12, 6, 3, false);     // resized
    image_seed("grey-alpha-5x9.png", 5, 5, 9, 2, false); // the shorter side: copied
    image_seed("rgba-3x3.png", 3, 3, 3, 4, false);
    image_seed("rgb-8x8.jpg", 4, 8, 8, 3, true);
    image_seed("grey-16x7.jpg", 7, 16, 7, 1, true);
    write_text("imagefolder", "not-an-image.png", "\x07this is not a png");

    write_text("losslog", "run.csv", "step,loss\n1,0.9876\n2,0.75\n3,0.5\n10,0.125\n");
    write_text("losslog", "crlf-columns.csv", "step,loss,lr\r\n0,1.5e+00,1e-3\r\n5,2.5e-1,1e-3\r\n\r\n");
    write_text("losslog", "unsorted.csv", "step,loss\n1,2.0\n3,1.0\n2,1.5\n");
    write_text("losslog", "bad-row.csv", "step,loss\r\n1,xx\r\n");
    write_text("losslog", "extremes.csv", "step,loss\n-1e300,0\n0,-5\n1e300,inf\n");

    // command lines, NUL between arguments, as tests/cli_tests.sh passes them
    static const char flags[][160] = {
        "--steps\0" "30\0" "--batch\0" "4\0" "--out\0" "runs/x",
        "--model\0" "DiT-tiny/2\0" "--input-size\0" "8\0" "--hidden\0" "48\0" "--heads\0" "3",
        "--depth\0" "2\0" "--patch\0" "4\0" "--mlp-ratio\0" "2.5\0" "--learn-sigma\0" "--num-classes\0" "7",
        "--class-dropout\0" "0\0" "--cfg-scale\0" "1\0" "--ema\0" "0\0" "--seed\0" "18446744073709551615",
        "--lr\0" "1e-4\0" "--weight-decay\0" "0.01\0" "--clip-norm\0" "0\0" "--threads\0" "2",
        "--resume\0" "runs/a\0" "--save-every\0" "0\0" "--log-every\0" "5\0" "--sample-every\0" "10",
        "--sample-steps\0" "3\0" "--samples-per-class\0" "0\0" "--data\0" "shapes",
        "--no-auto-pad\0" "--pad-multiple\0" "4\0" "--sp-attention\0" "all-to-all",
        "--inject-bug\0" "local-kv\0" "--inject-bug\0" "no-pad-mask\0" "--sp-attention\0" "gather",
        "--steps\0" " 5",
        "--help",
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        size_t n = 0; // up to the double NUL that ends the line
        while (flags[i][n] || flags[i][n + 1]) n++;
        char name[32];
        snprintf(name, sizeof name, "line-%02zu", i);
        write_bytes("flags", name, flags[i], n);
    }
    resume_seed("default.json", 2, (char *[]){"--out", "runs/a", NULL});
    resume_seed("custom.json", 16,
                (char *[]){"--model", "DiT-tiny/2", "--input-size", "8", "--learn-sigma",
                           "--class-dropout", "0", "--data", "images/cats", "--inject-bug", "local-kv",
                           "--inject-bug", "no-pad-mask", "--no-auto-pad", "--out", "runs/b", NULL});
    printf("make_seeds: wrote the seeds into %s\n", root);
    return 0;
}
