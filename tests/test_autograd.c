// test_autograd.c: tape errors that tell the user what to do, the parameter store's flat layout
// (with its EMA slice), and AdamW and the EMA against their formulas.
#include "../autograd/optim.h"
#include "../layers/layers.h"
#include "formulas.h"
#include "testutil.h"
#include <math.h>

START_TEST(non_scalar_loss_is_an_error) {
    Arena a = arena_create(1 << 16);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, true, 2, (int[]){2, 3});
    EXPECT_FATAL(backward(&tp, gelu(&tp, x)), "the loss must be a scalar but has shape [2, 3]");
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

START_TEST(loss_without_gradient_is_an_error) {
    Arena a = arena_create(1 << 16);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, false, 1, (int[]){3});
    EXPECT_FATAL(backward(&tp, mse_loss(&tp, x, x, NULL, 3)), "mark the parameters");
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

START_TEST(unreached_parameter_is_named) {
    ParamStore ps = {0};
    Tensor *w = ps_add(&ps, "blocks.0.attn.qkv.weight", 2, (int[]){4, 3});
    ps_add(&ps, "blocks.0.attn.qkv.bias", 1, (int[]){4});
    ps_alloc(&ps, false, false);
    Arena a = arena_create(1 << 16);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, false, 2, (int[]){2, 3});
    Tensor *y = linear(&tp, x, w, NULL); // bias forgotten
    ps_zero_grad(&ps);
    backward(&tp, mse_loss(&tp, y, y, NULL, 8));
    EXPECT_FATAL(ps_check_reached(&ps), "no gradient reached parameter 'blocks.0.attn.qkv.bias'");
    tape_free(&tp);
    arena_destroy(&a);
    ps_free(&ps);
}
END_TEST

START_TEST(shape_errors_are_clear) {
    Arena a = arena_create(1 << 16);
    Tape tp = tape_create(&a);
    Tensor *x = randn(&a, 1, 1, false, 2, (int[]){2, 3}), *w = randn(&a, 2, 1, false, 2, (int[]){4, 5});
    EXPECT_FATAL(linear(&tp, x, w, NULL), "linear: input [2, 3] does not match weight [4, 5]");
    Tensor *q = randn(&a, 3, 1, false, 3, (int[]){1, 2, 6});
    EXPECT_FATAL(attention(&tp, q, q, q, 4, NULL, NO_SEGMENTS), "4 heads do not divide the width 6");
    Tensor *img = randn(&a, 4, 1, false, 4, (int[]){1, 3, 5, 4});
    EXPECT_FATAL(patchify(&tp, img, 1, 1, 2, 0, 4, false), "image size 5x4 is not a multiple of the patch size 2");
    EXPECT_FATAL(patchify(&tp, img, 5, 2, 1, 0, 4, false), "5 frames are not a multiple of the patch's 2 frames");
    EXPECT_FATAL(patchify(&tp, img, 2, 1, 1, 0, 4, false), "5 rows do not hold 2 frames");
    int64_t bad = 9;
    EXPECT_FATAL(embedding(&tp, w, &bad, 1), "index 9 at position 0 is outside the table's 4 rows");
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

START_TEST(param_store_is_one_flat_buffer) {
    ParamStore ps = {0};
    Tensor *a = ps_add(&ps, "a", 2, (int[]){2, 3});
    Tensor *b = ps_add(&ps, "b", 1, (int[]){5});
    ps_alloc(&ps, false, false);
    ck_assert_uint_eq(ps.total, 11);
    ck_assert_ptr_eq(a->data, ps.params);
    ck_assert_ptr_eq(b->data, ps.params + 6);
    ck_assert_ptr_eq(b->grad, ps.grads + 6);
    ck_assert_ptr_eq(ps.m + 11, ps.v);
    ck_assert_ptr_eq(ps_find(&ps, "b"), b);
    ck_assert_ptr_null(ps_find(&ps, "c"));
    b->grad[0] = 3;
    b->got_grad = true;
    ps_zero_grad(&ps);
    ck_assert(b->grad[0] == 0 && !b->got_grad);
    ps_free(&ps);
}
END_TEST

// The EMA is a fifth slice of the store, after the other four; ps_keep_unit starts it at the
// parameters; copies carry it, and a copy between stores with and without one is refused.
static void two_params(ParamStore *ps, bool ema) {
    ps_add(ps, "a", 2, (int[]){2, 3});
    ps_add(ps, "b", 1, (int[]){5});
    ps_alloc(ps, false, ema);
}

START_TEST(param_store_ema_is_a_fifth_slice) {
    ParamStore ps = {0}, with = {0}, without = {0};
    two_params(&without, false);
    ck_assert_ptr_null(without.ema);
    two_params(&ps, true);
    for (int i = 0; i < 4 * 11; i++) ps.params[i] = (real)(i + 1); // params, grads, m, v
    Tensor *b = ps_find(&ps, "b");
    ck_assert_ptr_eq(ps.ema, ps.params + 4 * 11);
    ck_assert_ptr_eq(b->data, ps.params + 6);
    ck_assert_ptr_eq(b->grad, ps.grads + 6);
    for (int i = 0; i < 11; i++) ck_assert(ps.ema[i] == 0);
    ps_keep_unit(&ps, 0, true, false); // the parameters alone: the EMA untouched
    for (int i = 0; i < 11; i++) ck_assert(ps.ema[i] == 0);
    ps_keep_unit(&ps, 0, false, true);
    for (int i = 0; i < 4 * 11; i++) ck_assert(ps.params[i] == i + 1);
    for (int i = 0; i < 11; i++) ck_assert(ps.ema[i] == i + 1);
    ps.ema[3] = -7;
    two_params(&with, true);
    ps_copy(&with, &ps);
    for (int i = 0; i < 5 * 11; i++) ck_assert(with.params[i] == ps.params[i]);
    EXPECT_FATAL(ps_copy(&without, &ps), "the stores hold different parameters");
    ps_free(&ps), ps_free(&with), ps_free(&without);
}
END_TEST

START_TEST(adamw_matches_formula) { check_adamw_formula(false); }
END_TEST

START_TEST(ema_matches_formula) { check_ema_formula(false); }
END_TEST

START_TEST(no_grad_mode_records_nothing) {
    Arena a = arena_create(1 << 16);
    Tape tp = tape_create(&a);
    tp.grad_enabled = false;
    Tensor *x = randn(&a, 1, 1, true, 2, (int[]){2, 3});
    Tensor *y = gelu(&tp, x);
    ck_assert_int_eq(tp.n, 0);
    ck_assert(!y->requires_grad);
    tape_free(&tp);
    arena_destroy(&a);
}
END_TEST

Suite *autograd_suite(void) {
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_create("autograd");
    tcase_add_test(tc, non_scalar_loss_is_an_error);
    tcase_add_test(tc, loss_without_gradient_is_an_error);
    tcase_add_test(tc, unreached_parameter_is_named);
    tcase_add_test(tc, shape_errors_are_clear);
    tcase_add_test(tc, param_store_is_one_flat_buffer);
    tcase_add_test(tc, param_store_ema_is_a_fifth_slice);
    tcase_add_test(tc, adamw_matches_formula);
    tcase_add_test(tc, ema_matches_formula);
    tcase_add_test(tc, no_grad_mode_records_nothing);
    suite_add_tcase(s, tc);
    return s;
}
