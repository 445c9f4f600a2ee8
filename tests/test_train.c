// test_train.c: checkpoints (round trip, and every kind of mismatch named), the config's text
// form, the diffusion formulas, model config validation, `compare` on hand-written runs and
// probe results, the place `locate` gives a divergence planted in hand-made tapes, the checks of `bugs --regimes` on hand-made runs, and the settings table against
// --help, --resume, compare and the rank check.
#include "../core/safetensors.h"
#include "../kernels/kernels.h"
#include "../plan/budget.h"
#include "../run/checkpoint.h"
#include "../study/compare.h"
#include "../study/locate.h"
#include "../plan/plan.h"
#include "../run/settings.h"
#include "../study/bugs.h"
#include "../data/flow.h"
#include "../study/probe.h"
#include "../study/regimes.h"
#include "../train/sample.h"
#include "formulas.h"
#include "testutil.h"
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static const DiTConfig small = {.input_size = 8, .patch_size = 2, .in_channels = 3, .hidden_size = 8,
                                .depth = 2, .num_heads = 2, .mlp_ratio = 2, .num_classes = 4,
                                .learn_sigma = true, .class_dropout_prob = 0.1};

static char dir[64]; // a fresh folder per test
static void setup(void) { test_tmpdir(dir, sizeof dir); }
static void teardown(void) { test_rm_rf(dir); }

static void tmp_path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

START_TEST(checkpoint_round_trip) {
    DiT m, back;
    char path[256], err[1024];
    dit_create(&m, &small);
    dit_init(&m, 3, 1);
    for (size_t i = 0; i < m.ps.total; i++) m.ps.params[i] += (real)(i % 7) * (real)0.01; // non-zero everywhere
    tmp_path(path, sizeof path, "rt.safetensors");
    ck_assert_msg(!ckpt_save_model(&m, NULL, path, 12, "optimizer.safetensors", err, sizeof err), "%s", err);
    ck_assert_msg(!ckpt_load_model(&back, path, err, sizeof err), "%s", err);
    ck_assert_uint_eq(back.ps.total, m.ps.total);
    ck_assert(!memcmp(back.ps.params, m.ps.params, m.ps.total * sizeof(real)));
    ck_assert(!memcmp(back.pos_embed.data, m.pos_embed.data, m.pos_embed.size * sizeof(real)));
    ck_assert(back.cfg.learn_sigma && back.cfg.mlp_ratio == 2 && back.cfg.class_dropout_prob == 0.1);
    SafeTensors st;
    ck_assert(!st_read(path, &st, err, sizeof err));
    ck_assert_str_eq(st_meta(&st, "step"), "12");
    ck_assert_str_eq(st_meta(&st, "hidden_size"), "8");
    ck_assert_str_eq(st_meta(&st, "class_dropout_prob"), "0.1"); // as written, not 0.10000000000000001
    ck_assert_ptr_nonnull(st_find(&st, "blocks.1.adaLN_modulation.1.weight"));
    ck_assert_ptr_nonnull(st_find(&st, "y_embedder.embedding_table.weight"));
    ck_assert_int_eq(st_find(&st, "y_embedder.embedding_table.weight")->shape[0], 5); // + null class
    ck_assert_int_eq(st_find(&st, "final_layer.linear.weight")->shape[0], 2 * 2 * 6); // p*p*2C
    st_free(&st);
    dit_free(&back);
    dit_free(&m);
}
END_TEST

// Rewrites a checkpoint with one tensor renamed / dropped / added / reshaped, or metadata changed.
static void write_variant(const char *src, const char *dst, const char *drop, const char *add,
                          const char *meta_key, const char *meta_value) {
    SafeTensors st;
    char err[512];
    ck_assert(!st_read(src, &st, err, sizeof err));
    StWriter *w = st_writer_new();
    for (int i = 0; i < st.n_meta; i++) { // meta_value NULL drops meta_key
        bool is_key = !strcmp(st.meta_keys[i], meta_key ? meta_key : "");
        if (!is_key || meta_value) st_writer_meta(w, st.meta_keys[i], is_key ? meta_value : st.meta_values[i]);
    }
    for (int i = 0; i < st.n; i++) {
        const StTensor *t = &st.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    static const float extra[6] = {0};
    if (add) st_writer_add(w, add, ST_F32, 2, (int64_t[]){2, 3}, extra);
    ck_assert_msg(!st_writer_write(w, dst, err, sizeof err), "%s", err);
    st_writer_free(w);
    st_free(&st);
}

START_TEST(checkpoint_mismatches_are_named) {
    DiT m;
    char path[256], bad[256], err[1024];
    dit_create(&m, &small);
    dit_init(&m, 3, 1);
    tmp_path(path, sizeof path, "ok.safetensors");
    tmp_path(bad, sizeof bad, "bad.safetensors");
    ck_assert(!ckpt_save_model(&m, NULL, path, -1, NULL, err, sizeof err));
    struct { const char *drop, *add, *key, *value, *want; } cases[] = {
        {"blocks.1.mlp.fc2.bias", NULL, NULL, NULL, "missing tensor 'blocks.1.mlp.fc2.bias'"},
        {NULL, "blocks.9.attn.qkv.weight", NULL, NULL, "unexpected tensor 'blocks.9.attn.qkv.weight'"},
        {NULL, NULL, "hidden_size", "12", "'x_embedder.proj.weight' has shape [8, 3, 2, 2] but [12, 3, 2, 2] was expected"},
        {NULL, NULL, "depth", "many", "invalid value for config key 'depth'"},
        {NULL, NULL, "num_heads", "3", "num_heads 3 must divide hidden_size 8"},
        // the training flags' limits (--input-size, --mlp-ratio accept at most 4096, 64)
        {NULL, NULL, "input_size", "100000", "config in its metadata is invalid: input_size 100000 must be in 1..4096"},
        {NULL, NULL, "mlp_ratio", "65", "mlp_ratio 65 must be in (0, 64]"},
        {NULL, NULL, "in_channels", "0", "in_channels 0 must be in 1..4096"},
        // a valid config the tensors do not fit, refused before allocating its ~1.6 TB
        {NULL, NULL, "hidden_size", "65536", "'pos_embed' has shape [1, 16, 8] but [1, 16, 65536] was expected"},
        {NULL, NULL, "input_size", "4096", "'pos_embed' has shape [1, 16, 8] but [1, 4194304, 8] was expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_variant(path, bad, cases[i].drop, cases[i].add, cases[i].key, cases[i].value);
        DiT x;
        ck_assert_int_eq(ckpt_load_model(&x, bad, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].want), "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
    }
    DiT none;
    ck_assert_int_eq(ckpt_load_model(&none, "/nonexistent/x.safetensors", err, sizeof err), -1);
    // the step in the metadata is a whole number in 0..INT_MAX with nothing around it
    char stepped[256];
    tmp_path(stepped, sizeof stepped, "step.safetensors");
    ck_assert(!ckpt_save_model(&m, NULL, stepped, 12, NULL, err, sizeof err));
    ck_assert_int_eq(ckpt_step(stepped, err, sizeof err), 12);
    const char *steps[] = {"", "12x", " 12", "2147483648"}; // strtol took "" for step 0
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        write_variant(stepped, bad, NULL, NULL, "step", steps[i]);
        ck_assert_int_eq(ckpt_step(bad, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "records no training step"), "step '%s': %s", steps[i], err);
    }
    // DESIGN's metadata has no class_dropout_prob: the null-class row of the label table tells
    write_variant(path, bad, NULL, NULL, "class_dropout_prob", NULL);
    DiT inferred;
    ck_assert_msg(!ckpt_load_model(&inferred, bad, err, sizeof err), "%s", err);
    ck_assert(inferred.cfg.class_dropout_prob > 0 && inferred.y_table->shape[0] == small.num_classes + 1);
    dit_free(&inferred);
    dit_free(&m);
}
END_TEST

// Floats are written as the shortest text that reads back as the same double (what Python's
// repr() prints).
START_TEST(config_values_as_written) {
    DiTConfig c = small;
    char buf[64];
    const struct { double v; const char *text; } cases[] = {
        {0.1, "0.1"}, {4, "4"}, {1e-5, "1e-05"}, {0.1 + 0.2, "0.30000000000000004"}, {1.0 / 3, "0.3333333333333333"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.class_dropout_prob = cases[i].v;
        dit_config_value(&c, 9, buf, sizeof buf);
        ck_assert_str_eq(dit_config_key(9), "class_dropout_prob");
        ck_assert_str_eq(buf, cases[i].text);
    }
}
END_TEST

// The one table of keys: each field's text reads back as the same value (a field the table
// missed would stay 0 and fail the comparison), keys are distinct, and text that is not a whole
// value of the field's type is refused.
START_TEST(config_text_round_trip) {
    DiTConfig back = {0};
    char buf[64], again[64];
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        dit_config_value(&small, i, buf, sizeof buf);
        ck_assert_int_eq(dit_config_set(&back, i, buf), 0);
        dit_config_value(&back, i, again, sizeof again);
        ck_assert_str_eq(again, buf);
        ck_assert_int_eq(dit_config_set(&back, i, "x"), -1);
        ck_assert_int_eq(dit_config_set(&back, i, ""), -1);
        for (int j = 0; j < i; j++) ck_assert_str_ne(dit_config_key(i), dit_config_key(j));
    }
    ck_assert(back.input_size == small.input_size && back.patch_size == small.patch_size &&
              back.in_channels == small.in_channels && back.hidden_size == small.hidden_size &&
              back.depth == small.depth && back.num_heads == small.num_heads &&
              back.mlp_ratio == small.mlp_ratio && back.num_classes == small.num_classes &&
              back.learn_sigma == small.learn_sigma &&
              back.class_dropout_prob == small.class_dropout_prob);
    ck_assert_int_eq(dit_config_set(&back, 0, "2147483648"), -1); // input_size: beyond an int
    ck_assert_int_eq(dit_config_set(&back, 0, "12 "), -1);
    ck_assert_int_eq(dit_config_set(&back, 8, "False"), 0); // learn_sigma as Python writes it
    ck_assert(!back.learn_sigma);
}
END_TEST

// Weights, EMA weights and Adam moments with NaN or infinite values are refused, naming the
// tensor and how many of its values are not finite.
START_TEST(non_finite_values_are_refused) {
    DiT m, x;
    char path[256], err[1024];
    dit_create(&m, &small);
    dit_init(&m, 3, 1);
    Tensor *w = ps_find(&m.ps, "final_layer.linear.weight"), *b = ps_find(&m.ps, "blocks.1.mlp.fc1.bias");
    w->data[0] = NAN, w->data[5] = INFINITY, w->data[7] = -INFINITY, b->data[2] = NAN;
    tmp_path(path, sizeof path, "nan.safetensors");
    ck_assert(!ckpt_save_model(&m, NULL, path, 3, NULL, err, sizeof err));
    ck_assert_int_eq(ckpt_load_model(&x, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'blocks.1.mlp.fc1.bias' has NaN or infinite values: 1 of 16"), "%s", err);
    ck_assert_msg(strstr(err, "tensor 'final_layer.linear.weight' has NaN or infinite values: 3 of 192"), "%s", err);
    DiT e; // a store with an EMA, of the same model
    dit_layout(&e, &small);
    dit_alloc(&e, false, true);
    ck_assert_int_eq(ckpt_load_ema(&e, path, err, sizeof err), -1); // EMA weights
    dit_free(&e);
    ck_assert_msg(strstr(err, "'final_layer.linear.weight' has NaN or infinite values: 3 of 192"), "%s", err);

    AdamW opt = adamw_default(1e-3);
    m.ps.v[m.ps.total - 1] = INFINITY;
    ck_assert(!ckpt_save_optimizer(&m.ps, m.ps.m, m.ps.v, &opt, "seed=1 batch=4", path, err, sizeof err));
    ck_assert_int_eq(ckpt_load_optimizer(&m.ps, &opt, "seed=1 batch=4", path, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "tensor 'adam.v' has NaN or infinite values: 1 of its elements [%zu, %zu)",
             m.ps.total - m.ps.unit[m.ps.units - 1].len, m.ps.total); // the last unit's
    ck_assert_msg(strstr(err, want), "%s", err);
    dit_free(&m);
}
END_TEST

START_TEST(optimizer_state_belongs_to_its_run) {
    DiT m;
    char path[256], err[1024];
    dit_create(&m, &small);
    AdamW opt = adamw_default(1e-3), back = adamw_default(1e-3);
    opt.step = 7;
    for (size_t i = 0; i < m.ps.total; i++) m.ps.m[i] = (real)i, m.ps.v[i] = (real)(2 * i);
    tmp_path(path, sizeof path, "opt.safetensors");
    ck_assert(!ckpt_save_optimizer(&m.ps, m.ps.m, m.ps.v, &opt, "seed=1 batch=4", path, err, sizeof err));
    memset(m.ps.m, 0, m.ps.total * sizeof(real));
    ck_assert_int_eq(ckpt_load_optimizer(&m.ps, &back, "seed=2 batch=4", path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "seed=1 batch=4 but this one has seed=2 batch=4"), "%s", err);
    ck_assert(!ckpt_load_optimizer(&m.ps, &back, "seed=1 batch=4", path, err, sizeof err));
    ck_assert_int_eq(back.step, 7);
    ck_assert(m.ps.m[5] == 5 && m.ps.v[5] == 10);
    // the step in the metadata is a whole number in 0..INT_MAX with nothing around it
    char bad[256];
    tmp_path(bad, sizeof bad, "bad.safetensors");
    const char *steps[] = {"7x", "-1", "2147483648", "", " 7", "+7", "seven"};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        write_variant(path, bad, NULL, NULL, "step", steps[i]);
        back.step = -5;
        ck_assert_int_eq(ckpt_load_optimizer(&m.ps, &back, "seed=1 batch=4", bad, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad) && strstr(err, "not a whole number in 0..2147483647"),
                      "step '%s': %s", steps[i], err);
        ck_assert_int_eq(back.step, -5);
    }
    write_variant(path, bad, NULL, NULL, "step", "2147483647");
    ck_assert_msg(!ckpt_load_optimizer(&m.ps, &back, "seed=1 batch=4", bad, err, sizeof err), "%s", err);
    ck_assert_int_eq(back.step, 2147483647);
    dit_free(&m);
}
END_TEST

// The path and its velocity from their definitions; Euler steps along the true velocity go from
// the noise back to the image exactly (the path is straight), in any number of steps; the
// logit-normal times have the quantiles of the formula P(t < sigmoid(z)) = Phi(z).
START_TEST(flow_formulas) {
    real x0[4] = {0.5, -0.25, 0.9, -1}, eps[4] = {1.5, -0.3, 0.2, 2}, xt[4], v[4];
    flow_interpolate(xt, v, x0, eps, 0.25, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq_tol(xt[i], 0.75 * x0[i] + 0.25 * eps[i], 1e-6);
        ck_assert_double_eq_tol(v[i], eps[i] - x0[i], 1e-6);
    }
    for (int steps = 1; steps <= 50; steps += 7) {
        real x[4];
        memcpy(x, eps, sizeof x);
        ck_assert_double_eq(flow_time(0, steps), 1);
        ck_assert_double_eq(flow_time(steps, steps), 0);
        for (int k = 0; k < steps; k++) // one image of 4 values, the velocity its own prediction
            euler_step(x, v, 1, 4, 4, false, 1, flow_time(k + 1, steps) - flow_time(k, steps));
        for (int i = 0; i < 4; i++) ck_assert_double_eq_tol(x[i], x0[i], 1e-5);
    }
    check_euler_formula(false); // guidance
    int n = 20000, below[3] = {0};
    const double z[3] = {-1, 0, 1}, phi[3] = {0.158655, 0.5, 0.841345};
    for (int i = 0; i < n; i++) {
        double t = flow_sample_t(1, 2, i);
        ck_assert(t > 0 && t < 1);
        for (int q = 0; q < 3; q++) below[q] += t < 1 / (1 + exp(-z[q]));
    }
    for (int q = 0; q < 3; q++) ck_assert_double_eq_tol((double)below[q] / n, phi[q], 0.01);
}
END_TEST

// The 2-D sin-cos position embedding of a non-square grid, written out: for D = 8 (a quarter of
// 2 frequencies, 1 and 1/100), the patch at row i, column j is [sin j, sin j/100, cos j,
// cos j/100, sin i, sin i/100, cos i, cos i/100]; and a square grid's rows are the model's
// stored pos_embed.
START_TEST(pos_embed_formula) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) { // a 3 x 5 grid
            real e[8];
            dit_pos_embed_at(e, i, j, 8);
            double want[8] = {sin(j), sin(j / 100.0), cos(j), cos(j / 100.0),
                              sin(i), sin(i / 100.0), cos(i), cos(i / 100.0)};
            for (int k = 0; k < 8; k++) ck_assert_double_eq_tol(e[k], want[k], 1e-6);
        }
    DiT m;
    dit_create(&m, &small);
    dit_init(&m, 1, 1);
    int g = small.input_size / small.patch_size, D = small.hidden_size;
    for (int t = 0; t < g * g; t++) {
        real e[8];
        dit_pos_embed_at(e, t / g, t % g, D);
        ck_assert(!memcmp(e, m.pos_embed.data + (size_t)t * D, (size_t)D * sizeof(real)));
    }
    dit_free(&m);
}
END_TEST

// The caption's positions against their formula (docs/text.md): at D = 8 (2 frequencies, 1 and
// 1/100), place j is [sin j, sin j/100, cos j, cos j/100, 0, 0, 1, 1]
START_TEST(caption_positions_formula) {
    int L = 7;
    real e[7 * 8];
    dit_caption_positions(e, L, 8);
    for (int j = 0; j < L; j++) {
        double want[8] = {sin(j), sin(j / 100.0), cos(j), cos(j / 100.0), 0, 0, 1, 1};
        for (int k = 0; k < 8; k++) ck_assert_double_eq_tol(e[j * 8 + k], want[k], 1e-6);
    }
}
END_TEST

START_TEST(config_errors_and_presets) {
    DiTConfig c = small;
    char buf[256];
    ck_assert_ptr_null(dit_config_error(&c, buf, sizeof buf));
    c.input_size = 9;
    ck_assert_ptr_nonnull(strstr(dit_config_error(&c, buf, sizeof buf), "input_size 9 must be a positive multiple of patch_size 2"));
    c = small, c.hidden_size = 10;
    ck_assert_ptr_nonnull(strstr(dit_config_error(&c, buf, sizeof buf), "multiple of 4"));
    ck_assert(dit_preset("DiT-XL/2", &c));
    ck_assert(c.hidden_size == 1152 && c.depth == 28 && c.num_heads == 16 && c.patch_size == 2);
    ck_assert(dit_preset("DiT-S/8", &c) && c.hidden_size == 384 && c.patch_size == 8);
    ck_assert(!dit_preset("DiT-S/3", &c));
    // DiT-XL/2 on 32x32x4 latents with 1000 classes: the reference counts 675,129,632 parameters,
    // pos_embed (256 x 1152, not trained) included
    c = (DiTConfig){.input_size = 32, .in_channels = 4, .num_classes = 1000, .learn_sigma = true,
                    .class_dropout_prob = 0.1};
    dit_preset("DiT-XL/2", &c);
    DiT m;
    dit_create(&m, &c);
    ck_assert_uint_eq(m.ps.total + m.pos_embed.size, 675129632);
    dit_free(&m);
}
END_TEST

// ---- compare ---------------------------------------------------------------------------------
// A run folder dir/name whose loss.csv has the header and then `rows`.
static void write_run(const char *name, const char *rows) {
    char path[256];
    tmp_path(path, sizeof path, name);
    ck_assert(!mkdir(path, 0700));
    strcat(path, "/loss.csv");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "step,loss\n%s", rows);
    fclose(f);
}

// fn(argc, argv) with stdout and stderr captured into out; returns its exit code.
static int captured(char *out, size_t len, int (*fn)(int, char **), int argc, char **argv) {
    char log[256];
    tmp_path(log, sizeof log, "captured.log");
    fflush(stdout), fflush(stderr);
    int saved[2] = {dup(1), dup(2)}, fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(saved[0] >= 0 && saved[1] >= 0 && fd >= 0);
    dup2(fd, 1), dup2(fd, 2), close(fd);
    int rc = fn(argc, argv);
    fflush(stdout), fflush(stderr);
    dup2(saved[0], 1), dup2(saved[1], 2), close(saved[0]), close(saved[1]);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    out[fread(out, 1, len - 1, f)] = 0;
    fclose(f);
    return rc;
}

// `train compare dir/a dir/b` with stdout and stderr captured into out; returns its exit code.
static int compare_captured(char *out, size_t len, const char *a, const char *b) {
    char pa[256], pb[256], plot[256];
    tmp_path(pa, sizeof pa, a);
    tmp_path(pb, sizeof pb, b);
    tmp_path(plot, sizeof plot, "compare.png");
    char *argv[] = {pa, pb, "--plot", plot};
    return captured(out, len, compare_main, 4, argv);
}

#define EXPECT_COMPARE(a, b, want_rc, want_text)                                                   \
    do {                                                                                           \
        char out_[4096];                                                                           \
        int rc_ = compare_captured(out_, sizeof out_, a, b);                                       \
        ck_assert_msg(rc_ == (want_rc) && strstr(out_, want_text),                                 \
                      "compare %s %s: exit %d (want %d), output lacks \"%s\":\n%s", a, b, rc_,      \
                      want_rc, want_text, out_);                                                   \
    } while (0)

START_TEST(compare_runs_report) {
    write_run("ref", "1,2.0\n2,1.5\n3,1.0\n");
    write_run("same", "1,2.0\n2,1.5\n3,1.0\n");
    write_run("off", "1,2.0\n2,1.6\n3,1.05\n");   // |1.6 - 1.5| / 1.5 = 6.667e-2, 5e-2
    write_run("nan", "1,nan\n2,1.5\n3,1.0\n");     // the NaN stays the worst over later steps
    write_run("inf", "1,2.0\n2,inf\n3,1.01\n");
    write_run("long", "1,2.0\n2,1.5\n3,1.0\n4,0.9\n5,0.8\n");
    write_run("late", "3,1.0\n4,0.9\n");
    EXPECT_COMPARE("same", "ref", 0, "largest relative loss difference 0.000e+00 at step 1 ");
    EXPECT_COMPARE("off", "ref", 1, "largest relative loss difference 6.667e-02 at step 2 ");
    EXPECT_COMPARE("off", "ref", 1, "first step over tolerance: 2 ");
    EXPECT_COMPARE("nan", "ref", 1, "largest relative loss difference nan at step 1 ");
    EXPECT_COMPARE("nan", "ref", 1, "first step over tolerance: 1 ");
    EXPECT_COMPARE("inf", "ref", 1, "largest relative loss difference inf at step 2 ");
    // runs of different lengths agree over their common steps, and say so
    EXPECT_COMPARE("long", "ref", 0, "/long logged 5 steps and");
    EXPECT_COMPARE("long", "ref", 0, "/ref 3: comparing the 3 steps both logged");
    EXPECT_COMPARE("late", "long", 0, "/long 5: comparing the 2 steps both logged");
    EXPECT_COMPARE("late", "long", 0, "0.000e+00 at step 3 ");
    char out[4096];
    ck_assert_int_eq(compare_captured(out, sizeof out, "same", "ref"), 0);
    ck_assert_msg(!strstr(out, "logged"), "runs of the same steps need no note:\n%s", out);
}
END_TEST

START_TEST(compare_loss_csv_steps_must_increase) {
    write_run("ref", "1,2.0\n2,1.5\n3,1.0\n");
    write_run("unsorted", "1,2.0\n3,1.0\n2,1.5\n");
    write_run("dup", "1,2.0\n\n1,2.0\n2,1.5\n"); // the blank line counts as a line
    EXPECT_COMPARE("unsorted", "ref", 2, "/unsorted/loss.csv: line 4 has step 2 after step 3");
    EXPECT_COMPARE("ref", "dup", 2, "/dup/loss.csv: line 4 has step 1 after step 1");
}
END_TEST

// a step is a whole number >= 0 (the losses may be NaN or infinite: compare reports them)
START_TEST(compare_loss_csv_steps_are_whole_numbers) {
    write_run("ref", "1,2.0\n2,1.5\n3,1.0\n");
    write_run("nanstep", "nan,0.5\n");
    write_run("infstep", "1,2.0\ninf,1.5\n");
    write_run("negative", "-1,2.0\n2,1.5\n");
    write_run("half", "1,2.0\n2.5,1.5\n");
    EXPECT_COMPARE("nanstep", "ref", 2, "/nanstep/loss.csv: line 2 has step nan, but a step is a whole number");
    EXPECT_COMPARE("ref", "infstep", 2, "/infstep/loss.csv: line 3 has step inf, but a step is a whole number");
    EXPECT_COMPARE("negative", "ref", 2, "/negative/loss.csv: line 2 has step -1, but a step is a whole number");
    EXPECT_COMPARE("half", "ref", 2, "/half/loss.csv: line 3 has step 2.5, but a step is a whole number");
}
END_TEST

// A probe result holding one tensor "out" of the given shape (24 values).
static void write_result(const char *name, int64_t rows, int64_t cols) {
    float v[24];
    char path[256], err[256];
    for (int i = 0; i < 24; i++) v[i] = (float)i;
    tmp_path(path, sizeof path, name);
    StWriter *w = st_writer_new();
    st_writer_add(w, "out", ST_F32, 2, (int64_t[]){rows, cols}, v);
    ck_assert_msg(!st_writer_write(w, path, err, sizeof err), "%s", err);
    st_writer_free(w);
}

START_TEST(compare_results_shapes_must_match) {
    write_result("a.safetensors", 4, 6);
    write_result("b.safetensors", 4, 6);
    write_result("t.safetensors", 6, 4); // the same values, transposed shape
    EXPECT_COMPARE("a.safetensors", "b.safetensors", 0, "the results AGREE");
    EXPECT_COMPARE("a.safetensors", "t.safetensors", 1, "the results DIFFER");
    EXPECT_COMPARE("a.safetensors", "t.safetensors", 1, "has shape [4, 6] in ");
    EXPECT_COMPARE("a.safetensors", "t.safetensors", 1, "/a.safetensors but [6, 4] in ");
}
END_TEST

// ---- locate: the place of a divergence planted in hand-made tapes ------------------------------

// A tape of T tokens in a layout of P ranks padded to `padded` (and `shards` metadata unless
// NULL): x_embedder, blocks.1.attn.out and its gradient, each (2, T, 3), the same values in every
// tape except blocks.1.attn.out's tokens [a, b), raised by 1 (a == b: none)
static void write_tape(const char *name, int T, int P, int padded, const char *shards, int a, int b) {
    enum { B = 2, X = 3 };
    float *v = malloc(sizeof(float) * B * T * X), *w = malloc(sizeof(float) * B * T * X);
    for (int i = 0; i < B * T * X; i++) {
        int t = i / X % T;
        v[i] = (float)(1 + i % 7), w[i] = v[i] + (t >= a && t < b);
    }
    char path[256], err[256], text[32];
    tmp_path(path, sizeof path, name);
    StWriter *st = st_writer_new();
    const int64_t shape[3] = {B, T, X};
    st_writer_add(st, "0000 x_embedder", ST_F32, 3, shape, v);
    st_writer_add(st, "0001 blocks.1.attn.out", ST_F32, 3, shape, w);
    st_writer_add(st, "0002 grad.blocks.1.attn.out", ST_F32, 3, shape, v);
    snprintf(text, sizeof text, "%d", P), st_writer_meta(st, "ranks", text);
    snprintf(text, sizeof text, "%d", T), st_writer_meta(st, "tokens", text);
    snprintf(text, sizeof text, "%d", padded), st_writer_meta(st, "padded_tokens", text);
    if (shards) st_writer_meta(st, "shards", shards);
    ck_assert_msg(!st_writer_write(st, path, err, sizeof err), "%s", err);
    st_writer_free(st), free(v), free(w);
}

static int locate_in_dir(const char *a, const char *b, char *verdict, size_t len) {
    char pa[256], pb[256];
    tmp_path(pa, sizeof pa, a), tmp_path(pb, sizeof pb, b);
    return locate_dumps(pa, pb, 0, 0, verdict, len, NULL);
}

// "rank 1 of 3" or "ranks 0-2 of 3": the ranks whose shard [r n, (r+1) n) meets tokens [a, b),
// found by intersecting shards, not by dividing token numbers
static void owners_of(int n, int P, int a, int b, char *buf, size_t len) {
    int first = -1, last = -1;
    for (int r = 0; r < P; r++)
        if (r * n < b && (r + 1) * n > a) last = r, first = first < 0 ? r : first;
    if (first == last) snprintf(buf, len, "rank %d of %d", first, P);
    else snprintf(buf, len, "ranks %d-%d of %d", first, last, P);
}

// Divergences in tokens [a, b) at 1-5 ranks, T = 25 (every P > 1 pads: 26, 27, 28, 30) and
// T = 24 (4 ranks: no padding): ranges inside a shard, ending on a shard's last token, starting
// on one's first, across shards, the padded last shard, every token
START_TEST(locate_places_a_divergence) {
    static const int tokens[2] = {25, 24};
    for (int k = 0; k < 2; k++)
        for (int P = 1; P <= 5; P++) {
            int T = tokens[k], padded = (T + P - 1) / P * P, n = padded / P;
            int ranges[][2] = {{0, 1}, {0, n}, {n - 1, n}, {n - 1, n + 1}, {n, T < 2 * n ? T : 2 * n},
                               {(P - 1) * n, T}, {T - 1, T}, {1, T - 1}, {0, T}};
            write_tape("ref", T, 1, T, NULL, 0, 0);
            for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
                int a = ranges[i][0], b = ranges[i][1];
                if (a >= b || b > T) continue;
                write_tape("planted", T, P, padded, NULL, a, b);
                write_tape("planted-2", T, 2, (T + 1) / 2 * 2, NULL, 0, 0); // B in a layout of 2 ranks
                char verdict[1024], want[512], oa[64], ob[64];
                owners_of(n, P, a, b, oa, sizeof oa);
                snprintf(want, sizeof want, "first divergence: blocks.1.attn.out (forward, block 1, op attn.out), "
                         "tokens %d-%d of %d (%s in A, rank 0 of 1 in B); %d values differ", a, b - 1, T, oa, 2 * 3 * (b - a));
                ck_assert_int_eq(locate_in_dir("planted", "ref", verdict, sizeof verdict), 1);
                ck_assert_msg(strstr(verdict, want), "T %d, %d ranks, tokens [%d, %d):\n got  %s\n want %s", T, P, a, b, verdict, want);
                owners_of((T + 1) / 2, 2, a, b, ob, sizeof ob);
                snprintf(want, sizeof want, "tokens %d-%d of %d (%s in A, %s in B)", a, b - 1, T, oa, ob);
                ck_assert_int_eq(locate_in_dir("planted", "planted-2", verdict, sizeof verdict), 1);
                ck_assert_msg(strstr(verdict, want), "T %d, %d ranks against 2, tokens [%d, %d):\n got  %s\n want %s", T, P, a, b, verdict, want);
            }
        }
    // shards of another layout (python/ditsp_tape.py writes them): rank 0 holds [0, 2) and
    // [6, 8), rank 1 [2, 4), rank 2 [4, 6)
    write_tape("ref", 8, 1, 8, NULL, 0, 0);
    static const struct { int a, b; const char *owners; } zig[] = {
        {6, 8, "rank 0 of 3"}, {1, 3, "ranks 0-1 of 3"}, {4, 8, "ranks 0, 2 of 3"}, {3, 5, "ranks 1-2 of 3"}};
    for (int i = 0; i < 4; i++) {
        char verdict[1024], want[128];
        write_tape("zigzag", 8, 3, 8, "0-2+6-8,2-4,4-6", zig[i].a, zig[i].b);
        snprintf(want, sizeof want, "tokens %d-%d of 8 (%s in A, rank 0 of 1 in B)", zig[i].a, zig[i].b - 1, zig[i].owners);
        ck_assert_int_eq(locate_in_dir("zigzag", "ref", verdict, sizeof verdict), 1);
        ck_assert_msg(strstr(verdict, want), "shards, tokens [%d, %d):\n got  %s\n want %s", zig[i].a, zig[i].b, verdict, want);
    }
    char verdict[1024];
    write_tape("bad-shards", 8, 3, 8, "0-2,2-4", 0, 0); // two ranks' runs for three ranks
    ck_assert_int_eq(locate_in_dir("bad-shards", "ref", verdict, sizeof verdict), -1);
    ck_assert_msg(strstr(verdict, "are not 3 ranks' token runs"), "%s", verdict);
}
END_TEST

// A tape with tensors the other lacks is compared on those both hold, and says what is missing;
// names without a block's op, without a position, or of integers are no crash
START_TEST(locate_reports_what_a_tape_lacks) {
    enum { N = 2 * 4 * 3 };
    float v[N], w[N];
    for (int i = 0; i < N; i++) v[i] = (float)i, w[i] = (float)i + (i >= 12);
    const int64_t shape[3] = {2, 4, 3};
    int64_t labels[2] = {1, 2};
    struct { const char *name, *tensors[4]; bool differ, integer; } tapes[] = {
        {"a", {"0000 x_embedder", "0001 blocks.0.attn.out", "0002 grad.blocks.0.attn.out"}, false, false},
        {"b", {"0000 x_embedder", "0001 blocks.0.attn.q", "0002 grad.blocks.0.attn.out", "0003 loss"}, false, false},
        {"block", {"0000 x_embedder", "0001 blocks.3"}, true, false},         // a block's output, no op
        {"block-ref", {"0000 x_embedder", "0001 blocks.3"}, false, false},
        {"unnumbered", {"x_embedder", "blocks.3"}, true, false},             // no positions: file order
        {"other", {"0000 y"}, false, false},
        {"ints", {"0000 x_embedder"}, false, true}};
    char path[256], err[256], verdict[1024];
    for (size_t t = 0; t < sizeof tapes / sizeof tapes[0]; t++) {
        StWriter *st = st_writer_new();
        for (int i = 0; i < 4 && tapes[t].tensors[i]; i++) {
            if (tapes[t].integer) st_writer_add(st, tapes[t].tensors[i], ST_I64, 1, (int64_t[]){2}, labels);
            else st_writer_add(st, tapes[t].tensors[i], ST_F32, 3, shape, i && tapes[t].differ ? w : v);
        }
        st_writer_meta(st, "ranks", "2"), st_writer_meta(st, "tokens", "4"), st_writer_meta(st, "padded_tokens", "4");
        tmp_path(path, sizeof path, tapes[t].name);
        ck_assert_msg(!st_writer_write(st, path, err, sizeof err), "%s", err);
        st_writer_free(st);
    }
    ck_assert_int_eq(locate_in_dir("a", "b", verdict, sizeof verdict), 0);
    ck_assert_str_eq(verdict, "no divergence: every tensor both tapes hold (2) is within tolerance; 1 tensor of A "
                              "is not in B (blocks.0.attn.out); 2 tensors of B are not in A (blocks.0.attn.q, loss)");
    ck_assert_int_eq(locate_in_dir("block", "block-ref", verdict, sizeof verdict), 1);
    ck_assert_msg(strstr(verdict, "first divergence: blocks.3 (forward, op blocks.3), tokens 0-3 of 4 (ranks 0-1 of 2 in A"), "%s", verdict);
    ck_assert_int_eq(locate_in_dir("unnumbered", "block-ref", verdict, sizeof verdict), 1);
    ck_assert_msg(strstr(verdict, "first divergence: blocks.3 (forward"), "%s", verdict);
    ck_assert_int_eq(locate_in_dir("a", "other", verdict, sizeof verdict), -1);
    ck_assert_msg(strstr(verdict, "have no tensor name in common"), "%s", verdict);
    ck_assert_int_eq(locate_in_dir("ints", "a", verdict, sizeof verdict), -1);
    ck_assert_msg(strstr(verdict, "has x_embedder as I64 [2], but"), "%s", verdict);
}
END_TEST

// ---- bugs --regimes: each check's error against its formula, on hand-made runs ------------------

// A run folder for the regimes: its probe, tape (both also as the --exact ones) and loss curve
static void write_regimes_run(const char *name, const float out[4], const float qkv[12],
                              const float bias[2], const float attn[4], const float dq[4],
                              const float dv[4], const char *loss) {
    static const float dout[4] = {2, 2, 2, 2}, dk[4] = {1, 2, 3, 4}, one[1] = {0.5f};
    char path[256], err[256];
    write_run(name, loss);
    StWriter *p = st_writer_new(), *t = st_writer_new();
    st_writer_add(p, "out", ST_F32, 1, (int64_t[]){4}, out);
    st_writer_add(p, "loss", ST_F32, 1, (int64_t[]){1}, one);
    st_writer_add(p, "grad.blocks.0.attn.qkv.weight", ST_F32, 2, (int64_t[]){6, 2}, qkv); // D = 2
    st_writer_add(p, "grad.final_layer.linear.bias", ST_F32, 1, (int64_t[]){2}, bias);
    const int64_t tok[3] = {1, 2, 2};
    st_writer_add(t, "0000 blocks.0.attn.out", ST_F32, 3, tok, attn);
    st_writer_add(t, "0001 grad.blocks.0.attn.out", ST_F32, 3, tok, dout);
    st_writer_add(t, "0002 grad.blocks.0.attn.v", ST_F32, 3, tok, dv);
    st_writer_add(t, "0003 grad.blocks.0.attn.k", ST_F32, 3, tok, dk);
    st_writer_add(t, "0004 grad.blocks.0.attn.q", ST_F32, 3, tok, dq);
    const char *files[4] = {REGIMES_PROBE, REGIMES_EXACT_PROBE, REGIMES_TAPE, REGIMES_EXACT_TAPE};
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/%s/%s", dir, name, files[f]);
        ck_assert_msg(!st_writer_write(f < 2 ? p : t, path, err, sizeof err), "%s", err);
    }
    st_writer_free(p), st_writer_free(t);
}

static double regimes_err(const RegimeRow *r, const char *check) {
    char name[96];
    for (int k = 0; k < REGIMES_CHECKS; k++)
        if (!strcmp(regimes_check_name(k, name, sizeof name), check)) return r->err[k];
    ck_abort_msg("no check %s", check);
    return 0;
}

// The run differs from the reference in one attention output (by 0.005), one model output (by 1),
// one value of q_proj's gradient (by 1e-3) and one of k_proj's, one gradient bias (inf), one
// value of dq (by 4e-6; the output gradient's rms is 2) and one of dv (NaN), and in the loss by 4%
START_TEST(regimes_errors_by_formula) {
    const float out[4] = {1, 2, 3, 4}, out_run[4] = {1, 2, 3, 5}, attn[4] = {1, 2, 3, 4},
                attn_run[4] = {1, 2, 3, 4.005f}, bias[2] = {0, 1}, bias_run[2] = {INFINITY, 1},
                dq[4] = {1e-3f, 0, 0, 0}, dq_run[4] = {1e-3f + 4e-6f, 0, 0, 0}, dv[4] = {1, 1, 1, 1},
                dv_run[4] = {1, NAN, 1, 1};
    float qkv[12], qkv_run[12];
    for (int i = 0; i < 12; i++) qkv[i] = qkv_run[i] = 1;
    qkv_run[1] = 1.001f, qkv_run[6] = 9; // q's rows are the first 2 (4 values), k's the next
    write_regimes_run("ref", out, qkv, bias, attn, dq, dv, "1,2.0\n2,1.0\n");
    write_regimes_run("run", out_run, qkv_run, bias_run, attn_run, dq_run, dv_run, "1,2.0\n2,1.04\n");
    char run[256], ref[256];
    tmp_path(run, sizeof run, "run"), tmp_path(ref, sizeof ref, "ref");
    RegimeRow r = {.bug = true};
    regimes_measure(&r, run, ref, true);
    double d_attn = (double)attn_run[3] - 4, d_q = ((double)dq_run[0] - dq[0]) / 2;
    ck_assert_double_eq_tol(regimes_err(&r, "forward-only/attn.out"), d_attn / 1e-2, 1e-9);
    ck_assert_double_eq_tol(regimes_err(&r, "bf16-attention/attn.out"), d_attn / (2.5e-2 + 2.5e-2 * 4), 1e-9);
    ck_assert_double_eq_tol(regimes_err(&r, "fp32-attention/attn.out"), d_attn / (1e-8 + 1e-5 * attn_run[3]), 1e-6);
    ck_assert_double_eq_tol(regimes_err(&r, "fp32-attention/dq"), d_q / (2e-6 + 1e-5 * dq_run[0] / 2), 1e-6);
    ck_assert_double_eq(regimes_err(&r, "fp32-attention/dk"), 0);
    ck_assert(isinf(regimes_err(&r, "fp32-attention/dv")));
    ck_assert_double_eq_tol(regimes_err(&r, "model-output/out"), 1 / (1e-4 + 1e-4 * 5), 1e-9);
    ck_assert_double_eq_tol(regimes_err(&r, "mean-and-one-grad/out mean"), 0.25 / (3e-5 + 1e-2 * 2.75), 1e-6);
    ck_assert_double_eq_tol(regimes_err(&r, "mean-and-one-grad/q_proj grad"), ((double)qkv_run[1] - 1) / (3e-5 + 1e-2), 1e-6);
    ck_assert_double_eq(regimes_err(&r, "finite-gradients/grads"), 1); // dv's NaN is no parameter's
    ck_assert_double_eq_tol(regimes_err(&r, "loss-5pct/loss"), 0.04, 1e-12);
    ck_assert_double_eq_tol(regimes_err(&r, "ours/loss"), 0.04, 1e-12);
    ck_assert(!(regimes_err(&r, "ours/grads") <= PROBE_GRAD_TOL)); // an inf
    ck_assert_double_eq(regimes_err(&r, "ours-exact/forward"), 2);  // out and attn.out
    ck_assert_double_eq(regimes_err(&r, "ours-exact/backward"), 5); // qkv twice, bias, dq, dv
    regimes_measure(&r, run, ref, false); // no tape: the attention's checks are not measured
    ck_assert_double_eq(regimes_err(&r, "bf16-attention/dq"), -1);
    ck_assert_double_eq(regimes_err(&r, "ours-exact/forward"), 1);
}
END_TEST

// ---- the settings table --------------------------------------------------------------------------
// Its rows fit their fields (no two overlap: a kind of the wrong size would write into the next
// field), keys and each command's flags are distinct, a switch is a boolean, a resumed row has a
// flag (a given flag is held against it), and the flags bugs passes on are flags of train and probe.
START_TEST(settings_table_is_consistent) {
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        ck_assert_msg(s->off + s->kind->size <= sizeof(TrainConfig), "%s lies outside TrainConfig", s->key);
        ck_assert_ptr_eq(setting_by_key(s->key), s);
        for (int j = 0; j < i; j++)
            ck_assert_msg(s->off >= settings[j].off + settings[j].kind->size ||
                              settings[j].off >= s->off + s->kind->size,
                          "the fields of %s and %s overlap", s->key, settings[j].key);
        for (unsigned c = FOR_TRAIN; c <= FOR_BUGS; c <<= 1)
            if (s->flag && (s->commands & c)) ck_assert_ptr_eq(setting_by_flag(s->flag, c), s);
        ck_assert_msg(s->arg || !s->flag || s->kind->json == AS_BOOLEAN, "%s is a switch but not a boolean", s->key);
        ck_assert_msg(!(s->rules & RESUMED) || s->flag, "%s is resumed but has no flag", s->key);
        ck_assert_msg(!(s->commands & FOR_BUGS) || (s->commands & FOR_TRAIN && s->commands & FOR_PROBE),
                      "bugs passes %s to train and probe, which do not take it", s->flag);
        ck_assert_msg(!(s->rules & LAYOUT) || (s->flag && s->commands & FOR_TRAIN), "verify cannot drop %s", s->key);
    }
}
END_TEST

// The bug table: one row for each flag, one bit each, every bit of BUG_COUNT; each row says what
// it does and needs only needs the needs' table has, each with where it shows and its fix; and
// the --help lists, made from the table, name every bug (train, probe and bugs)
static int train_help(int argc, char **argv);
static int probe_help(int argc, char **argv);
START_TEST(bug_table_covers_every_flag) {
    BugMask all = 0;
    int rows = 0;
    for (const BugInfo *b; (b = bug_info(rows)); rows++) {
        ck_assert_msg(b->flag && !(b->flag & (b->flag - 1)), "%s: not one bit", b->name);
        ck_assert_msg(!(all & b->flag), "%s: a bit of another row", b->name);
        ck_assert_msg(bug_from_name(b->name) == b->flag, "%s: found by its name", b->name);
        ck_assert_msg(b->does && b->does[0] && b->flags, "%s: no text of what it does", b->name);
        ck_assert_msg(!(b->needs >> NEEDS), "%s: a need the needs' table lacks", b->name);
        all |= b->flag;
    }
    ck_assert_int_eq(rows, BUG_COUNT);
    ck_assert_msg(all == BUG_BIT(BUG_COUNT) - 1, "the bits are not the first BUG_COUNT");
    unsigned needs = 0;
    for (int k = 0; bug_need(k); k++) {
        ck_assert_msg(bug_need(k)->where && bug_need(k)->fix, "need %d: no text", k);
        needs |= bug_need(k)->need;
    }
    ck_assert_uint_eq(needs, (1u << NEEDS) - 1);
    static int (*const helps[])(int, char **) = {train_help, probe_help, bugs_main};
    for (size_t c = 0; c < sizeof helps / sizeof *helps; c++) {
        char out[32768];
        ck_assert_int_eq(captured(out, sizeof out, helps[c], 1, (char *[]){"--help", NULL}), 0);
        for (int i = 0; bug_info(i); i++) {
            char named[64];
            snprintf(named, sizeof named, "%s (", bug_info(i)->name);
            ck_assert_msg(strstr(out, named), "--help of command %zu does not list %s", c, bug_info(i)->name);
        }
    }
}
END_TEST

static Comm rank0 = {.rank = 0, .size = 1};
static int train_help(int argc, char **argv) {
    TrainConfig tc;
    return train_config_parse(&tc, argc, argv, 0);
}
static int probe_help(int argc, char **argv) { return probe_main(argc, argv, &rank0); }
static int sample_help(int argc, char **argv) { return sample_main(argc, argv, &rank0); }

// Each command's --help has one entry for each of its rows of the table, and its other entries
// are its own flags (probe's --ckpt, ...): none is written by hand
START_TEST(settings_help_lists_exactly_the_rows) {
    const struct { unsigned command; int (*main)(int, char **); const char *own; } commands[] = {
#define EVERY " --dry-run --check-collectives --collective-timeout " // EVERY_COMMAND_HELP's
        {FOR_TRAIN, train_help, EVERY},
        {FOR_PROBE, probe_help, " --ckpt --batch --out --dump-tape --make-batch" EVERY},
        {FOR_SAMPLE, sample_help, " --prompt" EVERY}, {FOR_BUGS, bugs_main, " --regimes --bug --list" EVERY}};
#undef EVERY
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
        char out[16384];
        ck_assert_int_eq(captured(out, sizeof out, commands[c].main, 1, (char *[]){"--help", NULL}), 0);
        ck_assert_msg(strstr(out, "\n  --dry-run "), "--help of command %u does not list --dry-run", commands[c].command);
        int entries = 0, rows = 0;
        for (const char *line = out; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            char flag[64], own[70];
            if (strncmp(line, "  --", 4) || sscanf(line, "%63s", flag) != 1) continue;
            snprintf(own, sizeof own, " %s ", flag);
            if (strstr(commands[c].own, own)) continue;
            ck_assert_msg(setting_by_flag(flag, commands[c].command),
                          "--help of command %u lists %s, which is none of its rows", commands[c].command, flag);
            entries++;
        }
        for (int i = 0; i < SETTINGS; i++) {
            char entry[64];
            if (!settings[i].flag || !(settings[i].commands & commands[c].command)) continue;
            snprintf(entry, sizeof entry, "\n  %s ", settings[i].flag);
            ck_assert_msg(strstr(out, entry), "--help of command %u lacks %s", commands[c].command, settings[i].flag);
            rows++;
        }
        ck_assert_int_eq(entries, rows); // each once
    }
}
END_TEST

// config.json written by a run and read back by --resume gives every RESUMED row its value (text
// with quotes and control characters too, a seed past 2^63); the test's flags move every such row
// off its default, so a row --resume dropped would fail
START_TEST(settings_resume_round_trip) {
    char data[] = "my \"data\"\\ \x01\t\n folder", run[256], path[300], err[1024];
    char *argv[] = {"--model", "DiT-tiny/2", "--input-size", "12", "--mlp-ratio", "2.5",
                    "--num-classes", "7", "--learn-sigma", "--class-dropout", "0.25", "--in-context", "--cond", "text",
                    "--text-len", "5", "--text-depth", "2", "--text-attn", "joint", "--text-dropout", "0.2", "--frames", "4", "--patch-t", "2", "--pos", "rope",
                    "--qk-norm", "head", "--steps", "30",
                    "--batch", "6", "--lr", "3e-4", "--weight-decay", "0.01", "--clip-norm", "0.5",
                    "--ema", "0.9", "--seed", "18446744073709551615", "--qkv-gain", "2", "--data", data,
                    "--sample-steps", "3", "--samples-per-class", "2", "--sample-sizes", "4x8,12x2",
                    "--cfg-scale", "1.5", "--sp", "2",
                    "--sp-attention", "hybrid", "--ulysses-degree", "2", "--no-auto-pad",
                    "--pad-multiple", "3", "--grad-accum", "2", "--inject-bug", "ring-wrong-merge",
                    "--inject-bug", "no-pad-mask", "--exact", "--virtual-shards", "6", "--max-tokens", "9",
                    "--recompute", "--zero", "1", "--precision", "bf16", "--grad-wire", "bf16", "--save-dtype", "bf16", "--out", "elsewhere"};
    TrainConfig tc, plain, back;
    tmp_path(run, sizeof run, "run");
    ck_assert(!mkdir(run, 0700));
    snprintf(path, sizeof path, "%s/config.json", run);
    ck_assert(train_config_parse(&tc, sizeof argv / sizeof *argv, argv, 1));
    tc.ranks = 2;
    ck_assert_msg(!train_config_write_json(&tc, path, err, sizeof err), "%s", err);
    ck_assert(train_config_parse(&back, 2, (char *[]){"--resume", run, NULL}, 1));
    train_config_defaults(&plain);
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        char want[PATH_LEN], got[PATH_LEN], initial[PATH_LEN];
        if (!(s->rules & RESUMED)) continue;
        setting_text(s, &tc, want, sizeof want);
        setting_text(s, &back, got, sizeof got);
        setting_text(s, &plain, initial, sizeof initial);
        ck_assert_msg(strcmp(want, initial), "the test leaves %s at its default; give it another value", s->key);
        ck_assert_msg(!strcmp(got, want), "--resume read %s = '%s' back as '%s'", s->key, want, got);
    }
    ck_assert_str_eq(back.data, data);
    ck_assert_str_eq(back.out, run); // not resumed: the run continues in its folder
}
END_TEST

// A config.json as the writer before the settings table wrote it (whole doubles as integers,
// another key order, no device) still resumes
START_TEST(settings_resume_earlier_config) {
    char run[256], path[300];
    tmp_path(run, sizeof run, "old");
    ck_assert(!mkdir(run, 0700));
    snprintf(path, sizeof path, "%s/config.json", run);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\n  \"ranks\": 2,\n  \"objective\": \"rectified flow\",\n  \"preset\": \"DiT-tiny/2\",\n"
          "  \"input_size\": 8,\n  \"patch_size\": 2,\n  \"in_channels\": 3,\n  \"hidden_size\": 32,\n"
          "  \"depth\": 2,\n  \"num_heads\": 2,\n  \"mlp_ratio\": 4,\n  \"num_classes\": 10,\n"
          "  \"learn_sigma\": true,\n  \"class_dropout_prob\": 0,\n  \"steps\": 8000,\n  \"batch\": 32,\n"
          "  \"lr\": 0.001,\n  \"weight_decay\": 0,\n  \"clip_norm\": 1,\n  \"ema\": 0.999,\n  \"seed\": 5,\n"
          "  \"data\": \"images/cats\",\n  \"out\": \"runs/b\",\n  \"resume\": \"\",\n  \"threads\": 0,\n"
          "  \"log_every\": 400,\n  \"sample_every\": 0,\n  \"save_every\": -1,\n  \"sample_steps\": 25,\n"
          "  \"samples_per_class\": 8,\n  \"cfg_scale\": 1,\n  \"auto_pad\": false,\n  \"pad_multiple\": 1,\n"
          "  \"sp_attention\": \"gather\",\n  \"injected_bugs\": \"local-kv,no-pad-mask\"\n}\n", f);
    fclose(f);
    TrainConfig tc;
    ck_assert(train_config_parse(&tc, 4, (char *[]){"--resume", run, "--steps", "9000", NULL}, 1));
    ck_assert(tc.model.hidden_size == 32 && tc.model.learn_sigma && tc.model.class_dropout_prob == 0 &&
              tc.model.mlp_ratio == 4 && tc.seed == 5 && tc.steps == 9000 && tc.cfg_scale == 1);
    ck_assert(!tc.parallel.policy.auto_pad && tc.parallel.bugs == (BUG_LOCAL_KV | BUG_NO_PAD_MASK));
    ck_assert_str_eq(tc.preset, "DiT-tiny/2");
    ck_assert_str_eq(tc.data, "images/cats");
}
END_TEST

// compare names a setting that two runs' config.json differ in exactly when its row is not marked
// NOT_COMPARED: each row's value is changed alone; a key no row knows counts, the same value
// written as 4 or 4.0 does not, and a CPU run against a CUDA one names nothing
START_TEST(settings_compare_ignores_exactly_its_rows) {
    TrainConfig tc;
    char err[256], list[1024];
    ck_assert(train_config_parse(&tc, 2, (char *[]){"--out", "x", NULL}, 1));
    json_t *a = json_object();
    ck_assert_msg(!settings_to_json(&tc, a, err, sizeof err), "%s", err);
    for (int i = 0; i < SETTINGS; i++) {
        const Setting *s = &settings[i];
        json_t *b = json_deep_copy(a), *v = json_object_get(a, s->key), *other = NULL;
        char text[PATH_LEN + 1];
        switch (json_typeof(v)) {
        case JSON_INTEGER: other = json_integer(json_integer_value(v) + 1); break;
        case JSON_REAL: other = json_real(json_real_value(v) * 2 + 1); break;
        case JSON_TRUE: case JSON_FALSE: other = json_boolean(!json_is_true(v)); break;
        case JSON_STRING: snprintf(text, sizeof text, "%sx", json_string_value(v)), other = json_string(text); break;
        default: ck_abort_msg("%s is written as neither a number, a boolean nor a string", s->key);
        }
        json_object_set_new(b, s->key, other);
        int n = settings_differ(a, b, list, sizeof list);
        if (s->rules & NOT_COMPARED) ck_assert_msg(n == 0, "compare names %s, a NOT_COMPARED row: %s", s->key, list);
        else ck_assert_msg(n == 1 && !strncmp(list, s->key, strlen(s->key)) && list[strlen(s->key)] == ' ',
                           "compare does not name %s alone: %s", s->key, list);
        json_decref(b);
    }
    json_t *b = json_deep_copy(a);
    json_object_set_new(b, "device", json_string("cuda"));
    json_object_set_new(b, "tf32", json_true());
    json_object_set_new(b, "mlp_ratio", json_integer(4)); // a has 4.0
    ck_assert_msg(settings_differ(a, b, list, sizeof list) == 0, "%s", list);
    json_object_set_new(b, "objective", json_string("ddpm"));
    ck_assert_int_eq(settings_differ(a, b, list, sizeof list), 1);
    ck_assert_str_eq(list, "objective (none vs ddpm)");
    json_decref(a);
    json_decref(b);
}
END_TEST

// The ranks' check line holds each AGREED row of a command: changing that row alone changes the
// line; the other rows leave it as it was
START_TEST(settings_rank_check_holds_the_agreed_rows) {
    const char *others[] = {"7", "1", "0.5", "true", "false", "ring", "cuda", "local-kv", "DiT-S/2", "elsewhere", "8x4",
                            "text", "joint", "rope", "head", "bf16"};
    for (unsigned c = FOR_TRAIN; c <= FOR_BUGS; c <<= 1)
        for (int i = 0; i < SETTINGS; i++) {
            const Setting *s = &settings[i];
            TrainConfig tc, changed;
            char line[8192], again[8192], value[PATH_LEN], before[PATH_LEN], why[512];
            train_config_defaults(&tc);
            settings_text(&tc, c, line, sizeof line);
            setting_text(s, &tc, before, sizeof before);
            bool moved = false; // another value the row takes
            for (size_t k = 0; k < sizeof others / sizeof *others && !moved; k++) {
                changed = tc;
                moved = !setting_set(s, &changed, others[k], why, sizeof why) &&
                        (setting_text(s, &changed, value, sizeof value), strcmp(value, before));
            }
            ck_assert_msg(moved, "found no other value for %s", s->key);
            settings_text(&changed, c, again, sizeof again);
            bool checked = (s->rules & AGREED) && (s->commands & c);
            ck_assert_msg(checked == (strcmp(line, again) != 0), "%s %s the rank check of command %u",
                          s->key, checked ? "is missing from" : "should not be in", c);
        }
}
END_TEST

// The flags settings_args writes for a command (what bugs passes to each of its runs) give back
// the values they were written from, and a default value writes no flag
START_TEST(settings_args_give_back_the_values) {
    TrainConfig tc, back;
    char store[1024], line[4096], again[4096], *args[32];
    train_config_defaults(&tc);
    ck_assert_int_eq(settings_args(&tc, FOR_PROBE, args, 32, store, sizeof store), 0);
    tc.parallel = (SpOptions){.policy = {.auto_pad = false, .pad_multiple = 3}, .layout = SP_RING,
                              .sp = 2, .grad_accum = 3, .bugs = BUG_LOCAL_KV | BUG_NO_PAD_MASK,
                              .tf32 = true, .exact = true, .virtual_shards = 6};
    int n = settings_args(&tc, FOR_PROBE, args, 32, store, sizeof store);
    ck_assert_int_eq(n, 15); // --no-auto-pad, --tf32 and --exact alone, six flags with a value
    train_config_defaults(&back);
    for (int i = 0; i < n; i++) ck_assert_ptr_nonnull(settings_flag(&back, FOR_PROBE, n, args, &i));
    settings_text(&tc, FOR_PROBE, line, sizeof line);
    settings_text(&back, FOR_PROBE, again, sizeof again);
    ck_assert_str_eq(again, line);
    ck_assert_int_eq(settings_args(&tc, FOR_PROBE, args, 10, store, sizeof store), -1); // no room
}
END_TEST

// The planner tests' model: patch 2, 64 wide, 2 blocks of 4 heads, 10 classes
static TrainConfig plan_case(int input_size, int batch) {
    TrainConfig tc;
    train_config_defaults(&tc);
    tc.model = (DiTConfig){.input_size = input_size, .patch_size = 2, .in_channels = 3,
                           .hidden_size = 64, .depth = 2, .num_heads = 4, .mlp_ratio = 4,
                           .num_classes = 10};
    tc.batch = batch;
    return tc;
}

// The planner's ranking on a hand case: 4 ranks, 4 images of 256 tokens, 64 wide, 2 blocks, with
// compute free and a link of 1 MB/s without latency, so that the bytes rank: per attention layer
// a rank sends B T D values times 4(P-1)/P (gather), 8(P-1)/P^2 (all-to-all), 6(P-1)/P (ring) and
// 8(U-1)/(U P) + 6(P/U-1)/P (hybrid) of its data group's B images, and every mesh all-reduces
// the same gradients. Then the memory: with room for the leanest mesh only, it comes first and
// the rest are marked as not fitting.
START_TEST(planner_ranks_a_hand_case) {
    TrainConfig tc = plan_case(32, 4);
    PlanRates free_compute = {1e30, 1e30, 1e30, 1e30};
    PlanLink link = {1e6, 0};
    PlanRow rows[64];
    int k = plan_rows(&tc, 4, &free_compute, &link, 0, rows, 64);
    // B T D values in all, and in the forward (gather, all-to-all: half; the ring's K and V pass
    // on forward, K, V, dK and dV backward: a third), which --recompute sends twice
    static const struct { int sp; SeqAttention layout; double units, forward; } hand[] = {
        {1, SP_GATHER, 0, 0}, {2, SP_GATHER, 2 * 4 * 0.5, 2 * 2 * 0.5},
        {2, SP_ALL_TO_ALL, 2 * 8 * 0.25, 2 * 4 * 0.25}, {2, SP_RING, 2 * 6 * 0.5, 2 * 2 * 0.5},
        {4, SP_GATHER, 4 * 4 * 0.75, 4 * 2 * 0.75}, {4, SP_ALL_TO_ALL, 4 * 8 * 0.1875, 4 * 4 * 0.1875},
        {4, SP_RING, 4 * 6 * 0.75, 4 * 2 * 0.75},
        {4, SP_HYBRID, 4 * (8 * 0.125 + 6 * 0.25), 4 * (4 * 0.125 + 2 * 0.25)}};
    ck_assert_int_eq(k, 8 * 8); // each with and without --recompute, at every --zero level
    DiT shape;
    dit_layout(&shape, &tc.model);
    double grads = 1.5 * (shape.ps.total * sizeof(real) + sizeof(double)), TD = 256.0 * 64;
    double padding = 1.5 * 3 * shape.ps.units * sizeof(real); // --zero: each unit to a multiple of 4
    dit_free(&shape);
    for (int i = 0; i < k; i++) {
        if (i) ck_assert_double_le(rows[i - 1].time, rows[i].time);
        if (rows[i].zero > 1) continue; // levels 2 and 3: planner_matches_a_step (test_parallel)
        int j = 0;
        while (hand[j].sp != rows[i].parallel.sp || hand[j].layout != rows[i].parallel.layout) j++;
        // --zero 1 sends what the all-reduce does; --recompute the forward's exchanges twice
        double units = hand[j].units + (rows[i].recompute ? hand[j].forward : 0);
        ck_assert_double_eq_tol(rows[i].sent, 2 * units * TD * sizeof(real) + grads, rows[i].zero ? padding : 1e-6);
        // reduce-scatters over 2 and 4 ranks move their formula's bytes (see the next test)
        ck_assert_double_eq_tol(rows[i].time, rows[i].sent / 1e6, 1e-9);
    }
    ck_assert_int_eq(rows[0].parallel.sp, 1);
    ck_assert_int_eq(rows[k - 1].parallel.layout, SP_RING);
    ck_assert_int_eq(rows[k - 1].parallel.sp, 4);
    double least = rows[0].memory;
    for (int i = 1; i < k; i++) least = fmin(least, rows[i].memory);
    plan_rows(&tc, 4, &free_compute, &link, least, rows, 64);
    ck_assert(rows[0].fits);
    ck_assert_double_eq(rows[0].memory, least);
    for (int i = 1; i < k; i++) ck_assert(!rows[i].fits || rows[i].memory == least);
}
END_TEST

// The link's extra bytes: Open MPI reduce-scatters a block of 128 KiB or more over 3 ranks by a
// reduce to one rank and a scatter from it ((P - 1)(P + 1) = 8 blocks over the link where the
// formula has P(P - 1) = 6: 2/3 of a block more a rank), which the gather layout's backward does
// with dK and dV (B n D values) and --zero 1 with the gradients (a third of the store a rank);
// over 2 ranks comm_reduce_scatter exchanges the halves itself, the formula's bytes. With compute
// free and a 1 MB/s link every row's time is its bytes, plus 2/3 of a block a reduce-scatter at 3
// ranks with 4096 tokens (1366 a rank, 341 KiB blocks in float32); nothing more with 256 tokens
// (86 a rank) for dK and dV, nor at 2 ranks.
START_TEST(planner_counts_the_reduce_scatters_bytes) {
    TrainConfig tc = plan_case(64, 1);
    PlanRates free_compute = {1e30, 1e30, 1e30, 1e30};
    PlanLink link = {1e6, 0};
    for (int P = 2; P <= 3; P++) {
        for (int tokens = 4096; tokens >= 256; tokens /= 16) {
            tc.model.input_size = tokens == 4096 ? 128 : 32;
            DiT shape;
            dit_layout(&shape, &tc.model);
            double slice = ceil(shape.ps.total / (double)P) * sizeof(real);
            dit_free(&shape);
            ck_assert_double_ge(slice, 131072);
            double block = ceil(tokens / (double)P) * 64 * sizeof(real);
            double extra = P == 3 && block >= 131072 ? block * 2 / 3 : 0;
            double zero_extra = P == 3 ? slice * 2 / 3 : 0;
            PlanRow rows[32];
            int k = plan_rows(&tc, P, &free_compute, &link, 0, rows, 32);
            ck_assert_int_eq(k, 3 * 8); // gather, all-to-all, ring; each with --recompute, every --zero
            for (int i = 0; i < k; i++) {
                const PlanRow *r = &rows[i];
                if (r->zero > 1) continue; // units reduce-scattered one by one: planner_matches_a_step
                double wire = r->sent + (r->zero ? zero_extra : 0);
                if (r->parallel.layout == SP_GATHER) wire += 2 * 2 * extra; // dK, dV; 2 blocks
                ck_assert_double_eq_tol(r->time, wire / 1e6, 1e-9);
            }
        }
    }
}
END_TEST

// The ring's transfers overlap its attention (comm_shift_start before a step, the wait after),
// so the planner charges a ring step only the transfer time its attention does not cover, written
// here per step as max(0, in flight - attention): forward, steps 0..P-2 each carry the next K/V
// block; backward, the first and last steps carry one of K/V and the dK/dV sums, the middle
// steps both. Attention at a rate where a forward step takes half a shift and a backward step
// 1.25 shifts (2 and 4 ranks, 256 tokens, a 1 MB/s link, everything else free); gather hides
// nothing.
START_TEST(planner_hides_the_rings_transfers_behind_its_attention) {
    TrainConfig tc = plan_case(32, 1);
    PlanLink link = {1e6, 0};
    const double T = 256, D = 64, L = 2, R = sizeof(real);
    for (int P = 2; P <= 4; P += 2) {
        double n = T / P, shift = 2 * n * D * R / link.bandwidth; // one block's K and V
        double work = n * T * D, A = 4 * work / P / (0.5 * shift);  // queries x keys x head dims
        double a_f = 4 * work / P / A, a_b = 10 * work / P / A;
        PlanRates rates = {1e30, A, 1e30, 1e30};
        PlanRow rows[64];
        int k = plan_rows(&tc, P, &rates, &link, 0, rows, 64), found = 0;
        for (int i = 0; i < k; i++) {
            const PlanRow *r = &rows[i];
            if (r->recompute || r->zero || (r->parallel.sp && r->parallel.sp != P)) continue;
            double ring_bytes = L * 6 * (P - 1) * n * D * R, attention = L * 14 * work / A;
            if (r->parallel.layout == SP_GATHER) {
                ck_assert_double_eq_tol(r->comm, r->sent / link.bandwidth, 1e-9);
            } else if (r->parallel.layout == SP_RING) {
                double exposed_f = (P - 1) * fmax(0, shift - a_f);
                double exposed_b = 2 * fmax(0, shift - a_b) + (P - 2) * fmax(0, 2 * shift - a_b);
                ck_assert_double_eq_tol(r->comm, (r->sent - ring_bytes) / link.bandwidth +
                                                     L * (exposed_f + exposed_b), 1e-9);
                ck_assert_double_eq_tol(r->time, attention + r->comm, 1e-6);
                found++;
            }
        }
        ck_assert_int_eq(found, 1);
    }
}
END_TEST

// The memory a rank of a run holds (budget_rank_memory, the check before a run and the planner's):
// under --zero 1 over 4 ranks the Adam moments are a quarter of the whole (the store split in 4
// slices of ceil(total / 4), its parameters counted from the model's layout), the rest unchanged;
// --recompute shrinks the activations by the blocks' intermediates: for DiT-mini/2 at 16384
// tokens on one rank to less than 1/2.5 (2.84x: each half block's input and one half's
// activations; one whole block's gave 2.02x; the measured peaks are 3.1x apart, the estimate
// holds them within memory_estimate_holds' 30%); a layout that cannot run over the ranks is the
// sentence that says so
START_TEST(budget_knows_recompute_and_zero) {
    TrainConfig tc;
    train_config_defaults(&tc);
    ck_assert(dit_preset("DiT-mini/2", &tc.model));
    tc.model.input_size = 64, tc.batch = 4;
    char err[512];
    RankMemory whole, zero, recompute;
    ck_assert(!budget_rank_memory(&tc, 4, &whole, err, sizeof err));
    tc.parallel.zero = 1;
    ck_assert(!budget_rank_memory(&tc, 4, &zero, err, sizeof err));
    tc.parallel.zero = 0, tc.parallel.recompute = true;
    ck_assert(!budget_rank_memory(&tc, 4, &recompute, err, sizeof err));
    DiT m;
    dit_layout(&m, &tc.model);
    double total = (double)m.ps.total, R = sizeof(real), units = m.ps.units;
    dit_free(&m);
    ck_assert_double_eq(whole.optimizer, 2 * total * R);
    ck_assert_double_ge(zero.optimizer, 2 * ceil(total / 4) * R);
    ck_assert_double_le(zero.optimizer, 2 * (ceil(total / 4) + units) * R); // a piece of each unit
    ck_assert_double_eq(zero.arena, whole.arena);
    // the slice of the summed gradients, and each unit's padding to a multiple of the ranks
    ck_assert_double_ge(zero.weights - whole.weights, ceil(total / 4) * R);
    ck_assert_double_le(zero.weights - whole.weights, (ceil(total / 4) + 4 * units) * R);
    ck_assert_double_lt(recompute.arena, whole.arena / 2);
    ck_assert_double_eq(recompute.optimizer, whole.optimizer);
    tc.model.input_size = 256, tc.batch = 1, tc.cfg_scale = 1; // sampling: one image a pass
    ck_assert(!budget_rank_memory(&tc, 1, &recompute, err, sizeof err));
    tc.parallel.recompute = false;
    ck_assert(!budget_rank_memory(&tc, 1, &whole, err, sizeof err));
    ck_assert_double_le(recompute.arena, whole.arena / 2.5);
    tc.parallel.sp = 3;
    ck_assert_ptr_nonnull(budget_rank_memory(&tc, 4, &whole, err, sizeof err));
    ck_assert_msg(strstr(err, "--sp 3 must divide the 4 ranks"), "%s", err);
}
END_TEST

Suite *train_suite(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, checkpoint_round_trip);
    tcase_add_test(tc, checkpoint_mismatches_are_named);
    tcase_add_test(tc, config_values_as_written);
    tcase_add_test(tc, config_text_round_trip);
    tcase_add_test(tc, non_finite_values_are_refused);
    tcase_add_test(tc, optimizer_state_belongs_to_its_run);
    tcase_add_test(tc, flow_formulas);
    tcase_add_test(tc, pos_embed_formula);
    tcase_add_test(tc, caption_positions_formula);
    tcase_add_test(tc, config_errors_and_presets);
    tcase_add_test(tc, compare_runs_report);
    tcase_add_test(tc, compare_loss_csv_steps_must_increase);
    tcase_add_test(tc, compare_loss_csv_steps_are_whole_numbers);
    tcase_add_test(tc, compare_results_shapes_must_match);
    tcase_add_test(tc, locate_places_a_divergence);
    tcase_add_test(tc, locate_reports_what_a_tape_lacks);
    tcase_add_test(tc, regimes_errors_by_formula);
    tcase_add_test(tc, settings_table_is_consistent);
    tcase_add_test(tc, settings_help_lists_exactly_the_rows);
    tcase_add_test(tc, bug_table_covers_every_flag);
    tcase_add_test(tc, settings_resume_round_trip);
    tcase_add_test(tc, settings_resume_earlier_config);
    tcase_add_test(tc, settings_compare_ignores_exactly_its_rows);
    tcase_add_test(tc, settings_rank_check_holds_the_agreed_rows);
    tcase_add_test(tc, settings_args_give_back_the_values);
    tcase_add_test(tc, planner_ranks_a_hand_case);
    tcase_add_test(tc, planner_counts_the_reduce_scatters_bytes);
    tcase_add_test(tc, planner_hides_the_rings_transfers_behind_its_attention);
    tcase_add_test(tc, budget_knows_recompute_and_zero);
    suite_add_tcase(s, tc);
    return s;
}
