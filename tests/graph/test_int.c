/* The integer dtypes in the graph: which ops take them, what they give,
 * the exact messages of what they refuse, and that they carry no
 * derivative and stay as they are through autocast and the passes. Their
 * values on a device are the plugins' tests (tests/cpu/test_int.c). */
#include "graph/fresh_graph.h"

#include <math.h>

#include <tyto/ad.h>
#include <tyto/precision.h>

static void expect_ok(tyto_tensor *t, tyto_dtype dt, int line) {
  ck_assert_msg(t && !tyto_tensor_is_error(t), "line %d: %s", line,
                tyto_graph_error_message(g));
  ck_assert_msg(tyto_tensor_dtype(t) == dt, "line %d: dtype %s, expected %s",
                line, tyto_dtype_name(tyto_tensor_dtype(t)),
                tyto_dtype_name(dt));
}

/* OK(expression built in a fresh graph g, its dtype) */
#define OK(expr, dt)                                                           \
  do {                                                                         \
    fresh();                                                                   \
    expect_ok((expr), (dt), __LINE__);                                         \
  } while (0)
#define I32(r, ...) in(TYTO_I32, (r), S(__VA_ARGS__))
#define I64(r, ...) in(TYTO_I64, (r), S(__VA_ARGS__))
#define F32(r, ...) in(TYTO_F32, (r), S(__VA_ARGS__))

START_TEST(whole_number_ops_take_integers) {
  ck_assert_str_eq(tyto_dtype_name(TYTO_I32), "i32");
  ck_assert_str_eq(tyto_dtype_name(TYTO_I64), "i64");
  ck_assert_uint_eq(tyto_dtype_size(TYTO_I32), 4);
  ck_assert_uint_eq(tyto_dtype_size(TYTO_I64), 8);
  ck_assert(tyto_dtype_is_integer(TYTO_I64));
  ck_assert(!tyto_dtype_is_integer(TYTO_BF16));
  OK(tyto_add(I32(1, 3), in(TYTO_I32, 0, NULL)), TYTO_I32);
  OK(tyto_sub(I64(2, 2, 3), I64(1, 3)), TYTO_I64);
  OK(tyto_mul(I64(1, 3), tyto_scalar(g, TYTO_I64, -2)), TYTO_I64);
  OK(tyto_neg(I32(1, 3)), TYTO_I32);
  OK(tyto_abs(I32(1, 3)), TYTO_I32);
  OK(tyto_sign(I32(1, 3)), TYTO_I32);
  OK(tyto_max(I32(1, 3), I32(1, 3)), TYTO_I32);
  OK(tyto_eq(I64(1, 3), I64(1, 3)), TYTO_I64);
  OK(tyto_ge(I32(1, 3), in(TYTO_I32, 0, NULL)), TYTO_I32);
  OK(tyto_where(I32(1, 3), I32(1, 3), in(TYTO_I32, 0, NULL)), TYTO_I32);
  OK(tyto_sum(I64(2, 2, 3), 1, AX(1), 0), TYTO_I64);
  OK(tyto_reduce_max(I32(2, 2, 3), 1, AX(0), 1), TYTO_I32);
  OK(tyto_reduce_min(I32(2, 2, 3), 0, NULL, 0), TYTO_I32);
  OK(tyto_reshape(I64(2, 2, 3), 1, S(6)), TYTO_I64);
  OK(tyto_transpose(I32(2, 2, 3), 0, 1), TYTO_I32);
  OK(tyto_concat(2, (tyto_tensor *[]){I32(1, 2), I32(1, 3)}, 0), TYTO_I32);
  OK(tyto_cast(F32(1, 3), TYTO_I64), TYTO_I64);
  OK(tyto_cast(I64(1, 3), TYTO_BF16), TYTO_BF16);
  OK(tyto_cast(I64(1, 3), TYTO_I32), TYTO_I32);
  OK(tyto_stop_gradient(I32(1, 3)), TYTO_I32);
  OK(tyto_full(g, TYTO_I64, 1, S(2), 9007199254740992.0), TYTO_I64);
  OK(tyto_constant(g, TYTO_I32, 1, S(2), (double[]){-2147483648.0, 7}),
     TYTO_I32);
  int64_t big[2] = {INT64_MAX, INT64_MIN};
  OK(tyto_constant_raw(g, TYTO_I64, 1, S(2), big, sizeof big), TYTO_I64);
  ck_assert_mem_eq(tyto_tensor_data(tyto_graph_tensor(g, 0)), big, sizeof big);
}
END_TEST

START_TEST(indices_and_arg_reductions) {
  /* argmax_as gives the asked dtype, of x's shape less the axis. */
  fresh();
  tyto_tensor *a = tyto_argmax_as(F32(2, 4, 10), 1, 0, TYTO_I64);
  expect_ok(a, TYTO_I64, __LINE__);
  ck_assert_int_eq(tyto_tensor_rank(a), 1);
  ck_assert_int_eq(tyto_tensor_shape(a)[0], 4);
  OK(tyto_argmin_as(F32(2, 4, 10), 0, 1, TYTO_I32), TYTO_I32);
  OK(tyto_argmax(F32(2, 4, 10), 1, 0), TYTO_F32);
  OK(tyto_argmax_as(in(TYTO_BF16, 1, S(257)), 0, 0, TYTO_BF16), TYTO_BF16);
  OK(tyto_argmax_as(in(TYTO_BF16, 1, S(258)), 0, 0, TYTO_I32), TYTO_I32);
  FAILS(tyto_argmax_as(in(TYTO_BF16, 1, S(300)), 0, 0, TYTO_BF16),
        "argmax_as: axis extent 300 exceeds 257: bf16 holds indices exactly "
        "only up to 256 (ask tyto_argmax_as for i32 or i64)");
  FAILS(tyto_argmax(in(TYTO_F16, 2, S(2, 2050)), 1, 0),
        "argmax: axis extent 2050 exceeds 2049: f16 holds indices exactly "
        "only up to 2048 (ask tyto_argmax_as for i32 or i64)");
  FAILS(tyto_argmax_as(I64(1, 4), 0, 0, TYTO_I64),
        "argmax_as: x is i64; argmax_as takes floating-point tensors "
        "(tyto_cast it to f32 first)");
  FAILS(tyto_argmax_as(F32(1, 4), 0, 0, (tyto_dtype)9),
        "argmax_as: unknown dtype 9 (expected i32, i64 or a floating dtype)");
  FAILS(tyto_argmax_as(F32(1, 4), 0, 0, (tyto_dtype)-1),
        "argmax_as: unknown dtype -1 (expected i32, i64 or a floating "
        "dtype)");
  /* An i32 counts to 2^31 - 1: an axis of 2^31 + 1 has index 2^31. */
  OK(tyto_argmax_as(in(TYTO_BF16, 1, S(INT64_C(1) << 31)), 0, 0, TYTO_I32),
     TYTO_I32);
  FAILS(tyto_argmax_as(in(TYTO_BF16, 1, S((INT64_C(1) << 31) + 1)), 0, 0,
                       TYTO_I32),
        "argmax_as: axis extent 2147483649 exceeds 2147483648: i32 holds "
        "indices exactly only up to 2147483647 (ask tyto_argmax_as for "
        "i64)");
  /* Another floating dtype than x's: the index in i64, cast. */
  fresh();
  a = tyto_argmax_as(F32(2, 4, 10), 1, 0, TYTO_F64);
  expect_ok(a, TYTO_F64, __LINE__);
  ck_assert_int_eq(tyto_tensor_op(a), TYTO_OP_CAST);
  ck_assert_int_eq(tyto_tensor_dtype(tyto_tensor_input(a, 0)), TYTO_I64);
  FAILS(tyto_one_hot(in(TYTO_BF16, 1, S(4)), 300),
        "one_hot: depth 300 exceeds 257: bf16 indices are exact only up to "
        "256 (give i32 or i64 indices)");
  FAILS(tyto_one_hot_as(I64(1, 4), 3, (tyto_dtype)-2),
        "one_hot_as: unknown dtype -2");

  /* Integer indices whatever the data's dtype; floating indices only in
   * the data's own dtype. */
  OK(tyto_gather(F32(2, 5, 3), I64(1, 4), 0), TYTO_F32);
  OK(tyto_gather(in(TYTO_BF16, 2, S(5, 3)), I32(2, 2, 2), 1), TYTO_BF16);
  OK(tyto_gather(I64(1, 5), I32(1, 4), 0), TYTO_I64);
  OK(tyto_gather(F32(1, 5), F32(1, 4), 0), TYTO_F32);
  OK(tyto_index_select(F32(2, 5, 3), 0, I64(1, 4)), TYTO_F32);
  FAILS(tyto_gather(F32(1, 5), in(TYTO_F64, 1, S(4)), 0),
        "gather: indices are f64; expected i32, i64 or the data's f32");
  FAILS(tyto_gather(I32(1, 5), F32(1, 4), 0),
        "gather: indices are f32; expected i32 or i64");
  OK(tyto_scatter_add(F32(2, 5, 3), I64(1, 4), F32(2, 4, 3), 0), TYTO_F32);
  OK(tyto_scatter_add(I64(1, 5), I64(1, 4), I64(1, 4), 0), TYTO_I64);
  FAILS(tyto_scatter_add(F32(1, 5), I64(1, 4), I64(1, 4), 0),
        "scatter_add: dtypes differ: f32[5] and i64[4]");
  OK(tyto_one_hot(I64(1, 4), 10), TYTO_F32);
  OK(tyto_one_hot(F32(1, 4), 10), TYTO_F32);
  OK(tyto_one_hot(in(TYTO_F64, 1, S(4)), 10), TYTO_F64);
  OK(tyto_one_hot_as(I32(1, 4), 10, TYTO_BF16), TYTO_BF16);
  OK(tyto_one_hot_as(F32(1, 4), 10, TYTO_I32), TYTO_I32);
  FAILS(tyto_one_hot_as(I32(1, 4), 0, TYTO_F32),
        "one_hot_as: depth 0 must be positive");
}
END_TEST

START_TEST(floating_ops_refuse_integers) {
  FAILS(tyto_exp(I64(1, 3)), "exp: input 1 is i64; exp takes floating-point "
                             "tensors (tyto_cast it to f32 first)");
  FAILS(tyto_div(I32(1, 3), I32(1, 3)),
        "div: input 1 is i32; div takes floating-point tensors (tyto_cast it "
        "to f32 first)");
  FAILS(tyto_mean(I32(1, 3), 0, NULL, 0),
        "mean: input 1 is i32; mean takes floating-point tensors (tyto_cast "
        "it to f32 first)");
  FAILS(tyto_matmul(I32(2, 2, 2), I32(2, 2, 2), 0, 0),
        "matmul: input 1 is i32; matmul takes floating-point tensors "
        "(tyto_cast it to f32 first)");
  FAILS(tyto_softmax(I64(2, 2, 2), 1),
        "softmax: input 1 is i64; softmax takes floating-point tensors "
        "(tyto_cast it to f32 first)");
  FAILS(tyto_random_uniform(g, TYTO_I32, 1, S(2), 0, 1, 7),
        "uniform: i32 is an integer dtype; uniform makes floating-point "
        "tensors (tyto_cast the result instead)");
  FAILS(tyto_add(I32(1, 3), I64(1, 3)),
        "add: dtypes differ: i32[3] and i64[3]");
  FAILS(tyto_add(I32(1, 3), F32(1, 3)),
        "add: dtypes differ: i32[3] and f32[3]");
  /* Values an integer dtype does not hold. */
  FAILS(tyto_full(g, TYTO_I32, 1, S(2), 2.5),
        "full: 2.5 is not an i32 (a whole number in its range, at most 2^53 "
        "in magnitude; tyto_constant_raw gives any i64)");
  FAILS(tyto_full(g, TYTO_I32, 0, NULL, 2147483648.0),
        "full: 2147483648 is not an i32 (a whole number in its range, at "
        "most 2^53 in magnitude; tyto_constant_raw gives any i64)");
  FAILS(tyto_full(g, TYTO_I64, 0, NULL, NAN),
        "full: nan is not an i64 (a whole number in its range, at most 2^53 "
        "in magnitude; tyto_constant_raw gives any i64)");
  FAILS(tyto_constant(g, TYTO_I64, 1, S(3), (double[]){1, 2, 0x1p60}),
        "constant: 1152921504606846976 (element 2) is not an i64 (a "
        "whole number in its range, at most 2^53 in magnitude; "
        "tyto_constant_raw gives any i64)");
  FAILS(tyto_constant_raw(g, TYTO_I64, 1, S(2), (int64_t[]){1, 2}, 12),
        "constant_raw: 12 bytes for i64[2] (expected 16)");
  FAILS(tyto_pad(I32(1, 3), S(1), S(1), TYTO_PAD_CONSTANT, 2.5),
        "pad: value 2.5 is not an i32 (a whole number in its range, at most "
        "2^53 in magnitude)");
  OK(tyto_pad(I32(1, 3), S(1), S(1), TYTO_PAD_CONSTANT, -7), TYTO_I32);
  FAILS(tyto_cast(I32(1, 3), (tyto_dtype)8),
        "cast: unknown dtype 8 (expected one of f32, f64, f16, bf16, i32, "
        "i64)");
}
END_TEST

/* Integer tensors carry no derivative: none flows through a cast to one,
 * and derivatives are not taken of or with respect to one. */
START_TEST(no_derivatives_through_integers) {
  fresh();
  tyto_tensor *x = F32(1, 3), *k = I64(1, 3);
  tyto_tensor *r = tyto_cast(tyto_cast(x, TYTO_I32), TYTO_F32);
  tyto_tensor *y = tyto_sum(tyto_mul(x, r), 0, NULL, 0);
  tyto_tensor *gx = tyto_grad(y, x);
  expect_ok(gx, TYTO_F32, __LINE__);
  /* d/dx sum(x * r) with r constant is r itself: the graph of the
   * gradient reads the cast, and no cast back to an integer was built. */
  size_t casts_to_int = 0;
  for (size_t i = 0; i < tyto_graph_size(g); i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    casts_to_int += tyto_tensor_op(t) == TYTO_OP_CAST &&
                    tyto_dtype_is_integer(tyto_tensor_dtype(t));
  }
  ck_assert_uint_eq(casts_to_int, 1);
  tyto_tensor *gk = tyto_grad(tyto_sum(tyto_cast(k, TYTO_F32), 0, NULL, 0), k);
  expect_error(gk,
               "grad: i64[3] is an integer tensor; derivatives are taken of "
               "and with respect to floating-point tensors",
               __LINE__);
  fresh();
  x = F32(2, 2, 5);
  tyto_tensor *idx = tyto_argmax_as(x, 1, 0, TYTO_I64);
  expect_error(tyto_grad(tyto_sum(idx, 0, NULL, 0), x),
               "grad: i64[] is an integer tensor; derivatives are taken of "
               "and with respect to floating-point tensors",
               __LINE__);
  /* Gathering by integer indices differentiates in the data only. */
  fresh();
  x = F32(2, 5, 3);
  tyto_tensor *gy =
      tyto_grad(tyto_sum(tyto_gather(x, I64(1, 4), 0), 0, NULL, 0), x);
  expect_ok(gy, TYTO_F32, __LINE__);
}
END_TEST

/* The Jacobian's basis vectors: one-hots of indices in x's dtype where
 * that counts them exactly, in i64 past it (bf16 stops at 256), so that
 * no basis vector lands on another's position. */
START_TEST(jacobian_basis_indices) {
  for (int k = 0; k < 2; k++) {
    fresh();
    int64_t n = k ? 300 : 3;
    tyto_tensor *x = in(k ? TYTO_BF16 : TYTO_F32, 1, S(n));
    tyto_tensor *j = tyto_jacobian(tyto_neg(x), x);
    expect_ok(j, k ? TYTO_BF16 : TYTO_F32, __LINE__);
    size_t hots = 0;
    for (size_t i = 0; i < tyto_graph_size(g); i++) {
      tyto_tensor *t = tyto_graph_tensor(g, i);
      if (tyto_tensor_op(t) != TYTO_OP_ONE_HOT)
        continue;
      hots++;
      ck_assert_int_eq(tyto_tensor_dtype(tyto_tensor_input(t, 0)),
                       k ? TYTO_I64 : TYTO_F32);
    }
    ck_assert_uint_eq(hots, (size_t)n);
  }
}
END_TEST

/* Autocast leaves indices alone: an integer stays an integer, and the
 * data an op with an integer result reads stays in its own dtype. */
START_TEST(autocast_keeps_integers) {
  fresh();
  tyto_tensor *x = F32(2, 4, 8), *w = F32(2, 8, 8), *lab = I64(1, 4);
  tyto_tensor *h = tyto_matmul(x, w, 0, 0);
  tyto_tensor *pick = tyto_gather(h, lab, 0);
  tyto_tensor *hit = tyto_eq(tyto_argmax_as(h, 1, 0, TYTO_I64), lab);
  tyto_tensor *ys[2] = {tyto_sum(pick, 0, NULL, 0), hit};
  ck_assert_int_eq(tyto_autocast(TYTO_BF16, 2, ys), TYTO_OK);
  ck_assert_int_eq(tyto_tensor_dtype(ys[0]), TYTO_F32);
  ck_assert_int_eq(tyto_tensor_dtype(ys[1]), TYTO_I64);
  for (size_t i = 0; i < tyto_graph_size(g); i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    if (tyto_tensor_op(t) == TYTO_OP_CAST)
      ck_assert_msg(!tyto_dtype_is_integer(tyto_tensor_dtype(t)) &&
                        !tyto_dtype_is_integer(
                            tyto_tensor_dtype(tyto_tensor_input(t, 0))),
                    "autocast cast an integer (#%zu)", i);
    if (tyto_tensor_op(t) == TYTO_OP_GATHER)
      ck_assert_int_eq(tyto_tensor_dtype(tyto_tensor_input(t, 1)), TYTO_I64);
    if (tyto_tensor_op(t) == TYTO_OP_MATMUL && i > 3)
      ck_assert_int_eq(tyto_tensor_dtype(t), TYTO_BF16);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("int");
  TCase *tc = tcase_create("int");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_test(tc, whole_number_ops_take_integers);
  tcase_add_test(tc, indices_and_arg_reductions);
  tcase_add_test(tc, floating_ops_refuse_integers);
  tcase_add_test(tc, no_derivatives_through_integers);
  tcase_add_test(tc, autocast_keeps_integers);
  tcase_add_test(tc, jacobian_basis_indices);
  suite_add_tcase(s, tc);
  return test_run(s);
}
