// test_train.c: checkpoints (round trip, and every kind of mismatch named), the config's text
// form, the diffusion formulas, model config validation, and `compare` on hand-written runs and
// probe results.
#include "../core/safetensors.h"
#include "../kernels/kernels.h"
#include "../train/checkpoint.h"
#include "../train/compare.h"
#include "../train/ditconfig.h"
#include "../train/flow.h"
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
    dit_init(&m, 3);
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
    dit_init(&m, 3);
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
    dit_init(&m, 3);
    Tensor *w = ps_find(&m.ps, "final_layer.linear.weight"), *b = ps_find(&m.ps, "blocks.1.mlp.fc1.bias");
    w->data[0] = NAN, w->data[5] = INFINITY, w->data[7] = -INFINITY, b->data[2] = NAN;
    tmp_path(path, sizeof path, "nan.safetensors");
    ck_assert(!ckpt_save_model(&m, NULL, path, 3, NULL, err, sizeof err));
    ck_assert_int_eq(ckpt_load_model(&x, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'blocks.1.mlp.fc1.bias' has NaN or infinite values: 1 of 16"), "%s", err);
    ck_assert_msg(strstr(err, "tensor 'final_layer.linear.weight' has NaN or infinite values: 3 of 192"), "%s", err);
    real *ema = xcalloc(m.ps.total, sizeof(real));
    ck_assert_int_eq(ckpt_load_params(&m, ema, path, err, sizeof err), -1); // EMA weights
    free(ema);
    ck_assert_msg(strstr(err, "'final_layer.linear.weight' has NaN or infinite values: 3 of 192"), "%s", err);

    AdamW opt = adamw_default(1e-3);
    m.ps.v[m.ps.total - 1] = INFINITY;
    ck_assert(!ckpt_save_optimizer(&m.ps, &opt, "seed=1 batch=4", path, err, sizeof err));
    ck_assert_int_eq(ckpt_load_optimizer(&m.ps, &opt, "seed=1 batch=4", path, err, sizeof err), -1);
    char want[64];
    snprintf(want, sizeof want, "tensor 'adam.v' has NaN or infinite values: 1 of %zu", m.ps.total);
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
    ck_assert(!ckpt_save_optimizer(&m.ps, &opt, "seed=1 batch=4", path, err, sizeof err));
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

// `train compare dir/a dir/b` with stdout and stderr captured into out; returns its exit code.
static int compare_captured(char *out, size_t len, const char *a, const char *b) {
    char pa[256], pb[256], plot[256], log[256];
    tmp_path(pa, sizeof pa, a);
    tmp_path(pb, sizeof pb, b);
    tmp_path(plot, sizeof plot, "compare.png");
    tmp_path(log, sizeof log, "compare.log");
    char *argv[] = {pa, pb, "--plot", plot};
    fflush(stdout), fflush(stderr);
    int saved[2] = {dup(1), dup(2)}, fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(saved[0] >= 0 && saved[1] >= 0 && fd >= 0);
    dup2(fd, 1), dup2(fd, 2), close(fd);
    int rc = compare_main(4, argv);
    fflush(stdout), fflush(stderr);
    dup2(saved[0], 1), dup2(saved[1], 2), close(saved[0]), close(saved[1]);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    out[fread(out, 1, len - 1, f)] = 0;
    fclose(f);
    return rc;
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
    tcase_add_test(tc, config_errors_and_presets);
    tcase_add_test(tc, compare_runs_report);
    tcase_add_test(tc, compare_loss_csv_steps_must_increase);
    tcase_add_test(tc, compare_loss_csv_steps_are_whole_numbers);
    tcase_add_test(tc, compare_results_shapes_must_match);
    suite_add_tcase(s, tc);
    return s;
}
