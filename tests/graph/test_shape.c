/* Shape inference of sources, elementwise ops (NumPy broadcasting),
 * reductions, matrix products and linear algebra. */
#include "graph_test.h"

START_TEST(sources) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(8, 4), "x");
  ck_assert_int_eq(tyto_tensor_kind(x), TYTO_KIND_INPUT);
  ck_assert_int_eq(tyto_tensor_op(x), TYTO_OP_INPUT);
  ck_assert_int_eq(tyto_tensor_dtype(x), TYTO_F64);
  ck_assert_str_eq(tyto_tensor_name(x), "x");
  ck_assert_str_eq(sh(x), "[8,4]");
  ck_assert_int_eq(tyto_tensor_numel(x), 32);
  ck_assert_int_eq(tyto_tensor_dim(x, -1), 4);
  ck_assert_int_eq(tyto_tensor_dim(x, 2), -1);
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, S(4), NULL);
  ck_assert_int_eq(tyto_tensor_kind(w), TYTO_KIND_PARAMETER);
  ck_assert_ptr_null(tyto_tensor_name(w));
  tyto_tensor *c =
      tyto_constant(g, TYTO_F32, 2, S(2, 2), (const double[]){1, 2, 3, 4.5});
  ck_assert_int_eq(tyto_tensor_kind(c), TYTO_KIND_CONSTANT);
  const float *cv = tyto_tensor_data(c);
  ck_assert_float_eq(cv[3], 4.5f);
  tyto_tensor *s = tyto_scalar(g, TYTO_F64, 2.5);
  ck_assert_int_eq(tyto_tensor_rank(s), 0);
  ck_assert_str_eq(sh(s), "[]");
  ck_assert_int_eq(tyto_tensor_numel(s), 1);
  ck_assert_int_eq(tyto_tensor_op(s), TYTO_OP_FULL);
  ck_assert_double_eq(tyto_tensor_fattrs(s)[0], 2.5);
  tyto_tensor *z = tyto_full(g, TYTO_F32, 3, S(2, 0, 3), 0);
  ck_assert_int_eq(tyto_tensor_numel(z), 0);
  ck_assert_ptr_null(tyto_tensor_data(
      tyto_constant(g, TYTO_F32, 1, S(0), NULL))); /* no elements, no data */
  tyto_tensor *r8 = IN(g, 8, 1, 2, 1, 2, 1, 2, 1, 2);
  ck_assert_str_eq(sh(r8), "[1,2,1,2,1,2,1,2]");
  ck_assert_uint_eq(tyto_graph_size(g), 7);
  for (size_t i = 0; i < tyto_graph_size(g); i++)
    ck_assert_int_eq(tyto_tensor_index(tyto_graph_tensor(g, i)), (int64_t)i);
  ck_assert_ptr_null(tyto_graph_tensor(g, 7));
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  ck_assert_str_eq(tyto_graph_error_message(g), "");
  tyto_graph_free(g);
}
END_TEST

START_TEST(unary_keeps_shape) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 3, 2, 0, 5);
  tyto_tensor *(*fns[])(tyto_tensor *) = {
      tyto_neg,        tyto_abs,   tyto_sign,  tyto_exp,     tyto_log,
      tyto_log1p,      tyto_expm1, tyto_sqrt,  tyto_rsqrt,   tyto_square,
      tyto_reciprocal, tyto_sin,   tyto_cos,   tyto_tan,     tyto_asin,
      tyto_acos,       tyto_atan,  tyto_sinh,  tyto_cosh,    tyto_tanh,
      tyto_asinh,      tyto_acosh, tyto_atanh, tyto_sigmoid, tyto_relu,
      tyto_softplus,   tyto_erf,   tyto_floor, tyto_ceil,    tyto_round};
  tyto_op ops[] = {
      TYTO_OP_NEG,   TYTO_OP_ABS,      TYTO_OP_SIGN,       TYTO_OP_EXP,
      TYTO_OP_LOG,   TYTO_OP_LOG1P,    TYTO_OP_EXPM1,      TYTO_OP_SQRT,
      TYTO_OP_RSQRT, TYTO_OP_SQUARE,   TYTO_OP_RECIPROCAL, TYTO_OP_SIN,
      TYTO_OP_COS,   TYTO_OP_TAN,      TYTO_OP_ASIN,       TYTO_OP_ACOS,
      TYTO_OP_ATAN,  TYTO_OP_SINH,     TYTO_OP_COSH,       TYTO_OP_TANH,
      TYTO_OP_ASINH, TYTO_OP_ACOSH,    TYTO_OP_ATANH,      TYTO_OP_SIGMOID,
      TYTO_OP_RELU,  TYTO_OP_SOFTPLUS, TYTO_OP_ERF,        TYTO_OP_FLOOR,
      TYTO_OP_CEIL,  TYTO_OP_ROUND};
  ck_assert_uint_eq(sizeof fns / sizeof fns[0], sizeof ops / sizeof ops[0]);
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    tyto_tensor *y = fns[i](x);
    ck_assert_int_eq(tyto_tensor_op(y), ops[i]);
    ck_assert_str_eq(sh(y), "[2,0,5]");
    ck_assert_ptr_eq(tyto_tensor_input(y, 0), x);
    ck_assert_uint_eq(tyto_tensor_input_count(y), 1);
    ck_assert_int_eq(tyto_tensor_op(tyto_unary(ops[i], x)), ops[i]);
  }
  tyto_tensor *l = tyto_leaky_relu(x, 0.01);
  ck_assert_uint_eq(tyto_tensor_fattr_count(l), 1);
  ck_assert_double_eq(tyto_tensor_fattrs(l)[0], 0.01);
  tyto_tensor *e = tyto_elu(tyto_scalar(g, TYTO_F32, 1), 1.5);
  ck_assert_str_eq(sh(e), "[]");
  ck_assert_double_eq(tyto_tensor_fattrs(e)[0], 1.5);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(binary_broadcasting) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *(*fns[])(tyto_tensor *, tyto_tensor *) = {
      tyto_add,   tyto_sub, tyto_mul, tyto_div, tyto_pow, tyto_max, tyto_min,
      tyto_atan2, tyto_eq,  tyto_ne,  tyto_lt,  tyto_le,  tyto_gt,  tyto_ge};
  tyto_tensor *a = IN(g, 2, 8, 4), *b = IN(g, 2, 1, 4);
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    tyto_tensor *y = fns[i](a, b);
    ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_ADD + (int)i);
    ck_assert_str_eq(sh(y), "[8,4]");
    ck_assert_int_eq(tyto_tensor_dtype(y), TYTO_F32);
  }
  /* rank 0 with anything */
  tyto_tensor *s = tyto_scalar(g, TYTO_F32, 1);
  ck_assert_str_eq(sh(tyto_add(s, s)), "[]");
  ck_assert_str_eq(sh(tyto_add(s, a)), "[8,4]");
  ck_assert_str_eq(sh(tyto_mul(a, s)), "[8,4]");
  /* alignment at the right, 1-extents on both sides */
  ck_assert_str_eq(sh(tyto_add(IN(g, 3, 5, 1, 3), IN(g, 2, 4, 1))), "[5,4,3]");
  ck_assert_str_eq(sh(tyto_add(IN(g, 1, 3), IN(g, 4, 2, 1, 1, 3))),
                   "[2,1,1,3]");
  /* size-0 extents: 0 with 1 gives 0, 0 with 0 gives 0 */
  ck_assert_str_eq(sh(tyto_add(IN(g, 2, 0, 3), IN(g, 2, 1, 3))), "[0,3]");
  ck_assert_str_eq(sh(tyto_add(IN(g, 2, 0, 1), IN(g, 1, 0))), "[0,0]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  /* 0 against 3 cannot broadcast */
  ck_assert_str_eq(sh(tyto_add(IN(g, 1, 0), IN(g, 1, 3))),
                   "error: add: shapes cannot be broadcast: [0] and [3]");
  tyto_graph_free(g);
}
END_TEST

START_TEST(scalar_forms_where_fma) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(3, 2), NULL);
  tyto_tensor *y = tyto_mul_scalar(x, 2.0);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_MUL);
  tyto_tensor *k = tyto_tensor_input(y, 1);
  ck_assert_int_eq(tyto_tensor_op(k), TYTO_OP_FULL);
  ck_assert_int_eq(tyto_tensor_dtype(k), TYTO_F64);
  ck_assert_double_eq(tyto_tensor_fattrs(k)[0], 2.0);
  ck_assert_int_eq(tyto_tensor_op(tyto_add_scalar(x, 1)), TYTO_OP_ADD);
  ck_assert_int_eq(tyto_tensor_op(tyto_sub_scalar(x, 1)), TYTO_OP_SUB);
  ck_assert_int_eq(tyto_tensor_op(tyto_div_scalar(x, 1)), TYTO_OP_DIV);
  ck_assert_int_eq(tyto_tensor_op(tyto_pow_scalar(x, 1)), TYTO_OP_POW);
  ck_assert_int_eq(tyto_tensor_op(tyto_binary_scalar(TYTO_OP_GE, x, 0)),
                   TYTO_OP_GE);
  tyto_tensor *c = tyto_input(g, TYTO_F64, 1, S(2), NULL);
  tyto_tensor *w = tyto_where(c, x, tyto_scalar_like(x, 0));
  ck_assert_int_eq(tyto_tensor_op(w), TYTO_OP_WHERE);
  ck_assert_str_eq(sh(w), "[3,2]");
  ck_assert_str_eq(
      sh(tyto_fma(tyto_input(g, TYTO_F64, 3, S(4, 1, 1), NULL), x, c)),
      "[4,3,2]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(reductions) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 4, 2, 3, 4, 5);
  ck_assert_str_eq(sh(tyto_sum(x, 2, AX(1, 3), 0)), "[2,4]");
  ck_assert_str_eq(sh(tyto_sum(x, 2, AX(3, 1), 1)), "[2,1,4,1]");
  ck_assert_str_eq(sh(tyto_sum(x, 0, NULL, 0)), "[]");
  ck_assert_str_eq(sh(tyto_sum(x, 0, NULL, 1)), "[1,1,1,1]");
  ck_assert_str_eq(sh(tyto_sum(x, 0, AX(0), 0)), "[2,3,4,5]");
  tyto_tensor *m = tyto_mean(x, 2, AX(-1, 0), 0);
  ck_assert_str_eq(sh(m), "[3,4]");
  /* attributes: keepdims then the axes, ascending and normalised */
  ck_assert_uint_eq(tyto_tensor_iattr_count(m), 3);
  ck_assert_int_eq(tyto_tensor_iattrs(m)[0], 0);
  ck_assert_int_eq(tyto_tensor_iattrs(m)[1], 0);
  ck_assert_int_eq(tyto_tensor_iattrs(m)[2], 3);
  tyto_tensor *(*fns[])(tyto_tensor *, int, const int *, int) = {
      tyto_sum,  tyto_mean,        tyto_reduce_max, tyto_reduce_min,
      tyto_prod, tyto_log_sum_exp, tyto_norm_l1,    tyto_norm_l2};
  tyto_op ops[] = {TYTO_OP_SUM,        TYTO_OP_MEAN,   TYTO_OP_REDUCE_MAX,
                   TYTO_OP_REDUCE_MIN, TYTO_OP_PROD,   TYTO_OP_LOG_SUM_EXP,
                   TYTO_OP_NORM_L1,    TYTO_OP_NORM_L2};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    tyto_tensor *y = fns[i](x, 1, AX(-2), 1);
    ck_assert_int_eq(tyto_tensor_op(y), ops[i]);
    ck_assert_str_eq(sh(y), "[2,3,1,5]");
    ck_assert_int_eq(tyto_tensor_op(tyto_reduce(ops[i], x, 1, AX(0), 0)),
                     ops[i]);
  }
  tyto_tensor *am = tyto_argmax(x, -1, 0);
  ck_assert_int_eq(tyto_tensor_op(am), TYTO_OP_ARGMAX);
  ck_assert_str_eq(sh(am), "[2,3,4]");
  ck_assert_str_eq(sh(tyto_argmin(x, 1, 1)), "[2,1,4,5]");
  /* reducing a size-0 axis is fine for sums, the result has no zero */
  ck_assert_str_eq(sh(tyto_sum(IN(g, 2, 0, 3), 1, AX(0), 0)), "[3]");
  /* a rank-0 tensor reduced over all of its (no) axes */
  ck_assert_str_eq(sh(tyto_sum(tyto_scalar(g, TYTO_F32, 1), 0, NULL, 1)), "[]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(matmul_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 2, 64, 784), *b = IN(g, 2, 784, 10);
  tyto_tensor *y = tyto_matmul(a, b, 0, 0);
  ck_assert_str_eq(sh(y), "[64,10]");
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], 0);
  ck_assert_int_eq(tyto_tensor_iattrs(y)[1], 0);
  tyto_tensor *at = IN(g, 2, 784, 64), *bt = IN(g, 2, 10, 784);
  ck_assert_str_eq(sh(tyto_matmul(at, b, 1, 0)), "[64,10]");
  ck_assert_str_eq(sh(tyto_matmul(a, bt, 0, 1)), "[64,10]");
  y = tyto_matmul(at, bt, 1, 1);
  ck_assert_str_eq(sh(y), "[64,10]");
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], 1);
  ck_assert_int_eq(tyto_tensor_iattrs(y)[1], 1);
  /* batch axes broadcast */
  ck_assert_str_eq(
      sh(tyto_matmul(IN(g, 4, 7, 1, 2, 3), IN(g, 3, 5, 3, 4), 0, 0)),
      "[7,5,2,4]");
  ck_assert_str_eq(sh(tyto_matmul(IN(g, 3, 6, 2, 3), IN(g, 2, 3, 4), 0, 0)),
                   "[6,2,4]");
  ck_assert_str_eq(sh(tyto_matmul(IN(g, 2, 0, 3), IN(g, 2, 3, 0), 0, 0)),
                   "[0,0]");
  tyto_tensor *d = tyto_dot(IN(g, 1, 5), IN(g, 1, 5));
  ck_assert_str_eq(sh(d), "[]");
  ck_assert_int_eq(tyto_tensor_op(d), TYTO_OP_RESHAPE);
  ck_assert_int_eq(tyto_tensor_op(tyto_tensor_input(d, 0)), TYTO_OP_MATMUL);
  tyto_tensor *o = tyto_outer(IN(g, 1, 3), IN(g, 1, 4));
  ck_assert_str_eq(sh(o), "[3,4]");
  ck_assert_int_eq(tyto_tensor_op(o), TYTO_OP_MUL);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(linalg_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 3, 5, 4, 4);
  ck_assert_str_eq(sh(tyto_inv(a)), "[5,4,4]");
  ck_assert_str_eq(sh(tyto_cholesky(a)), "[5,4,4]");
  ck_assert_str_eq(sh(tyto_det(a)), "[5]");
  ck_assert_str_eq(sh(tyto_logdet(IN(g, 2, 3, 3))), "[]");
  ck_assert_str_eq(sh(tyto_solve(a, IN(g, 2, 4, 2))), "[5,4,2]");
  ck_assert_str_eq(sh(tyto_solve(IN(g, 2, 3, 3), IN(g, 3, 6, 3, 1))),
                   "[6,3,1]");
  tyto_tensor *ts = tyto_triangular_solve(a, IN(g, 2, 4, 2), 1, 0, 1);
  ck_assert_int_eq(tyto_tensor_op(ts), TYTO_OP_TRIANGULAR_SOLVE);
  ck_assert_str_eq(sh(ts), "[5,4,2]");
  ck_assert_uint_eq(tyto_tensor_iattr_count(ts), 3);
  ck_assert(tyto_tensor_iattrs(ts)[0] == 1 && tyto_tensor_iattrs(ts)[1] == 0 &&
            tyto_tensor_iattrs(ts)[2] == 1);
  ts = tyto_triangular_solve(IN(g, 4, 2, 1, 3, 3), IN(g, 3, 6, 3, 1), 0, 7, 0);
  ck_assert_str_eq(sh(ts), "[2,6,3,1]");
  ck_assert(tyto_tensor_iattrs(ts)[0] == 0 && tyto_tensor_iattrs(ts)[1] == 1 &&
            tyto_tensor_iattrs(ts)[2] == 0);
  tyto_tensor *q, *r;
  tyto_qr(IN(g, 3, 2, 6, 4), &q, &r);
  ck_assert_str_eq(sh(q), "[2,6,4]");
  ck_assert_str_eq(sh(r), "[2,4,4]");
  ck_assert_int_eq(tyto_tensor_iattrs(q)[0], 0);
  ck_assert_int_eq(tyto_tensor_iattrs(r)[0], 1);
  ck_assert_ptr_eq(tyto_tensor_input(q, 0), tyto_tensor_input(r, 0));
  tyto_qr(IN(g, 2, 3, 5), &q, &r);
  ck_assert_str_eq(sh(q), "[3,3]");
  ck_assert_str_eq(sh(r), "[3,5]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(names) {
  ck_assert_str_eq(tyto_dtype_name(TYTO_F32), "f32");
  ck_assert_str_eq(tyto_dtype_name(TYTO_F64), "f64");
  ck_assert_str_eq(tyto_dtype_name((tyto_dtype)9), "?");
  ck_assert_uint_eq(tyto_dtype_size(TYTO_F32), 4);
  ck_assert_uint_eq(tyto_dtype_size(TYTO_F64), 8);
  ck_assert_uint_eq(tyto_dtype_size((tyto_dtype)9), 0);
  ck_assert_str_eq(tyto_kind_name(TYTO_KIND_PARAMETER), "parameter");
  ck_assert_str_eq(tyto_kind_name(TYTO_KIND_ERROR), "error");
  ck_assert_str_eq(tyto_op_name(TYTO_OP_REDUCE_MAX), "reduce_max");
  ck_assert_str_eq(tyto_op_name(TYTO_OP_LOG_SUM_EXP), "log_sum_exp");
  ck_assert_str_eq(tyto_op_name(TYTO_OP_RANDOM_NORMAL), "normal");
  ck_assert_str_eq(tyto_op_name(TYTO_OP_QR), "qr");
  ck_assert_str_eq(tyto_op_name((tyto_op)1000), "?");
}
END_TEST

/* Thousands of tensors: the arena grows by blocks, the node list by
 * reallocation, and tensors built earlier stay where they were. */
START_TEST(many_tensors) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *first = tyto_input(g, TYTO_F64, 2, S(3, 4), "x");
  tyto_tensor *t = first;
  for (int i = 0; i < 5000; i++)
    t = i % 2 ? tyto_exp(t) : tyto_add(t, first);
  ck_assert_uint_eq(tyto_graph_size(g), 5001);
  ck_assert_ptr_eq(tyto_graph_tensor(g, 0), first);
  ck_assert_str_eq(tyto_tensor_name(first), "x");
  ck_assert_int_eq(tyto_tensor_index(t), 5000);
  for (size_t i = 1; i < 5001; i++) {
    tyto_tensor *n = tyto_graph_tensor(g, i);
    ck_assert_ptr_eq(tyto_tensor_input(n, 0), tyto_graph_tensor(g, i - 1));
    ck_assert_int_eq(tyto_tensor_dtype(n), TYTO_F64);
  }
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
  tyto_graph_free(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_shape");
  TCase *tc = tcase_create("shape");
  tcase_add_test(tc, sources);
  tcase_add_test(tc, unary_keeps_shape);
  tcase_add_test(tc, binary_broadcasting);
  tcase_add_test(tc, scalar_forms_where_fma);
  tcase_add_test(tc, reductions);
  tcase_add_test(tc, matmul_shapes);
  tcase_add_test(tc, linalg_shapes);
  tcase_add_test(tc, names);
  tcase_add_test(tc, many_tensors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
