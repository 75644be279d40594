/* Shape inference of the neural ops (softmax, conv2d, pooling) and of the
 * random sources, with their seeds and stream offsets. */
#include "graph_test.h"

START_TEST(softmax_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 2, 64, 10);
  tyto_tensor *y = tyto_softmax(x, -1);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_SOFTMAX);
  ck_assert_str_eq(sh(y), "[64,10]");
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], 1);
  y = tyto_log_softmax(x, 0);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_LOG_SOFTMAX);
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], 0);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(conv2d_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 4, 1, 3, 32, 32), *w = IN(g, 4, 16, 3, 3, 3);
  tyto_tensor *y = tyto_conv2d(x, w, NULL, NULL);
  ck_assert_str_eq(sh(y), "[1,16,30,30]");
  ck_assert_uint_eq(tyto_tensor_input_count(y), 2);
  const int64_t *ia = tyto_tensor_iattrs(y);
  ck_assert_uint_eq(tyto_tensor_iattr_count(y), 7);
  for (int i = 0; i < 7; i++)
    ck_assert_int_eq(ia[i], S(1, 1, 0, 0, 1, 1, 1)[i]);
  tyto_conv2d_params p = {{2, 2}, {1, 1}, {1, 1}, 1};
  ck_assert_str_eq(sh(tyto_conv2d(x, w, NULL, &p)), "[1,16,16,16]");
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {2, 2}, 1};
  ck_assert_str_eq(sh(tyto_conv2d(x, w, NULL, &p)), "[1,16,28,28]");
  /* groups, with a bias, stride and padding differing by axis */
  p = (tyto_conv2d_params){{1, 2}, {1, 0}, {1, 1}, 4};
  y = tyto_conv2d(IN(g, 4, 2, 8, 10, 10), IN(g, 4, 4, 2, 3, 3), IN(g, 1, 4),
                  &p);
  ck_assert_str_eq(sh(y), "[2,4,10,4]");
  ck_assert_uint_eq(tyto_tensor_input_count(y), 3);
  ia = tyto_tensor_iattrs(y);
  for (int i = 0; i < 7; i++)
    ck_assert_int_eq(ia[i], S(1, 2, 1, 0, 1, 1, 4)[i]);
  /* depthwise, kernel as large as the input */
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 8};
  ck_assert_str_eq(
      sh(tyto_conv2d(IN(g, 4, 1, 8, 5, 5), IN(g, 4, 8, 1, 5, 5), NULL, &p)),
      "[1,8,1,1]");
  /* dilation on the width only: a 3-wide kernel spans 7 */
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 3}, 1};
  ck_assert_str_eq(
      sh(tyto_conv2d(IN(g, 4, 1, 1, 3, 7), IN(g, 4, 2, 1, 3, 3), NULL, &p)),
      "[1,2,1,1]");
  /* an empty batch */
  ck_assert_str_eq(sh(tyto_conv2d(IN(g, 4, 0, 3, 8, 8), w, NULL, NULL)),
                   "[0,16,6,6]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(pool_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 4, 1, 3, 32, 32);
  tyto_tensor *y = tyto_max_pool2d(x, 2, 2, 2, 2, 0, 0);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_MAX_POOL2D);
  ck_assert_str_eq(sh(y), "[1,3,16,16]");
  ck_assert_str_eq(sh(tyto_max_pool2d(x, 3, 3, 2, 2, 1, 1)), "[1,3,16,16]");
  y = tyto_avg_pool2d(x, 3, 3, 1, 1, 1, 1);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_AVG_POOL2D);
  ck_assert_str_eq(sh(y), "[1,3,32,32]");
  const int64_t *ia = tyto_tensor_iattrs(y);
  for (int i = 0; i < 6; i++)
    ck_assert_int_eq(ia[i], S(3, 3, 1, 1, 1, 1)[i]);
  ck_assert_str_eq(sh(tyto_avg_pool2d(IN(g, 4, 2, 1, 5, 7), 5, 2, 1, 3, 0, 1)),
                   "[2,1,1,3]");
  ck_assert_str_eq(sh(tyto_max_pool2d(x, 3, 3, 3, 3, 0, 0)), "[1,3,10,10]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(random_sources) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *u = tyto_random_uniform(g, TYTO_F32, 2, S(3, 5), -1, 1, 42);
  tyto_tensor *n = tyto_random_normal(g, TYTO_F64, 1, S(2), 0, 2, 42);
  tyto_tensor *b =
      tyto_random_bernoulli(g, TYTO_F32, 0, NULL, 0.25, UINT64_MAX);
  tyto_tensor *u2 = tyto_random_uniform(g, TYTO_F32, 1, S(0), 0, 1, 42);
  tyto_tensor *u3 = tyto_random_uniform(g, TYTO_F32, 1, S(1), 0, 1, 42);
  ck_assert_int_eq(tyto_tensor_op(u), TYTO_OP_RANDOM_UNIFORM);
  ck_assert_int_eq(tyto_tensor_op(n), TYTO_OP_RANDOM_NORMAL);
  ck_assert_int_eq(tyto_tensor_op(b), TYTO_OP_RANDOM_BERNOULLI);
  ck_assert_int_eq(tyto_tensor_kind(u), TYTO_KIND_CONSTANT);
  ck_assert_str_eq(sh(u), "[3,5]");
  ck_assert_int_eq(tyto_tensor_dtype(n), TYTO_F64);
  /* seed, then the stream offset: 15 elements take 4 Philox counters */
  ck_assert_int_eq(tyto_tensor_iattrs(u)[0], 42);
  ck_assert_int_eq(tyto_tensor_iattrs(u)[1], 0);
  ck_assert_int_eq(tyto_tensor_iattrs(n)[1], 4);
  ck_assert_uint_eq((uint64_t)tyto_tensor_iattrs(b)[0], UINT64_MAX);
  ck_assert_int_eq(tyto_tensor_iattrs(b)[1], 5);
  ck_assert_int_eq(tyto_tensor_iattrs(u2)[1], 6);
  ck_assert_int_eq(tyto_tensor_iattrs(u3)[1], 6); /* u2 took none */
  ck_assert_double_eq(tyto_tensor_fattrs(u)[0], -1);
  ck_assert_double_eq(tyto_tensor_fattrs(u)[1], 1);
  ck_assert_double_eq(tyto_tensor_fattrs(n)[1], 2);
  ck_assert_uint_eq(tyto_tensor_fattr_count(b), 1);
  ck_assert_double_eq(tyto_tensor_fattrs(b)[0], 0.25);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  /* a rebuilt graph draws the same numbers: same seeds, same offsets */
  tyto_graph *h = tyto_graph_new();
  tyto_random_uniform(h, TYTO_F32, 2, S(3, 5), -1, 1, 42);
  tyto_tensor *n2 = tyto_random_normal(h, TYTO_F64, 1, S(2), 0, 2, 42);
  ck_assert_int_eq(tyto_tensor_iattrs(n2)[1], 4);
  tyto_graph_free(h);
  tyto_graph_free(g);
}
END_TEST

/* The derivative ops: shapes, inputs and the attribute layouts of
 * graph.h (CONV2D's seven then H, W or KH, KW; the pool's six, then H, W
 * for AVG_POOL2D_BACKWARD). */
START_TEST(derivative_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_conv2d_params p = {{2, 1}, {1, 0}, {1, 2}, 2};
  tyto_tensor *x = IN(g, 4, 3, 4, 9, 8), *w = IN(g, 4, 6, 2, 3, 2);
  tyto_tensor *y = tyto_conv2d(x, w, NULL, &p);
  ck_assert_str_eq(sh(y), "[3,6,5,6]");
  tyto_tensor *dx = tyto_conv2d_backward_data(y, w, 9, 8, &p);
  ck_assert_int_eq(tyto_tensor_op(dx), TYTO_OP_CONV2D_BACKWARD_DATA);
  ck_assert_str_eq(sh(dx), "[3,4,9,8]");
  ck_assert_uint_eq(tyto_tensor_iattr_count(dx), 9);
  for (int i = 0; i < 9; i++)
    ck_assert_int_eq(tyto_tensor_iattrs(dx)[i],
                     S(2, 1, 1, 0, 1, 2, 2, 9, 8)[i]);
  /* H 10 gives the same output size with stride 2: both are valid. */
  ck_assert_str_eq(sh(tyto_conv2d_backward_data(y, w, 10, 8, &p)),
                   "[3,4,10,8]");
  tyto_tensor *dw = tyto_conv2d_backward_filter(x, y, 3, 2, &p);
  ck_assert_int_eq(tyto_tensor_op(dw), TYTO_OP_CONV2D_BACKWARD_FILTER);
  ck_assert_str_eq(sh(dw), "[6,2,3,2]");
  ck_assert_ptr_eq(tyto_tensor_input(dw, 0), x);
  ck_assert_ptr_eq(tyto_tensor_input(dw, 1), y);
  for (int i = 0; i < 9; i++)
    ck_assert_int_eq(tyto_tensor_iattrs(dw)[i],
                     S(2, 1, 1, 0, 1, 2, 2, 3, 2)[i]);
  /* NULL parameters: stride 1, no padding. */
  tyto_tensor *y1 = tyto_conv2d(x, IN(g, 4, 5, 4, 3, 3), NULL, NULL);
  ck_assert_str_eq(
      sh(tyto_conv2d_backward_data(y1, IN(g, 4, 5, 4, 3, 3), 9, 8, NULL)),
      "[3,4,9,8]");
  ck_assert_str_eq(sh(tyto_conv2d_backward_filter(x, y1, 3, 3, NULL)),
                   "[5,4,3,3]");
  /* Pools. */
  tyto_tensor *m = tyto_max_pool2d(x, 3, 2, 2, 2, 1, 0);
  ck_assert_str_eq(sh(m), "[3,4,5,4]");
  tyto_tensor *mb = tyto_max_pool2d_backward(x, m, 3, 2, 2, 2, 1, 0);
  ck_assert_int_eq(tyto_tensor_op(mb), TYTO_OP_MAX_POOL2D_BACKWARD);
  ck_assert_str_eq(sh(mb), "[3,4,9,8]");
  ck_assert_uint_eq(tyto_tensor_iattr_count(mb), 6);
  for (int i = 0; i < 6; i++)
    ck_assert_int_eq(tyto_tensor_iattrs(mb)[i], S(3, 2, 2, 2, 1, 0)[i]);
  tyto_tensor *ms = tyto_max_pool2d_select(x, mb, 3, 2, 2, 2, 1, 0);
  ck_assert_int_eq(tyto_tensor_op(ms), TYTO_OP_MAX_POOL2D_SELECT);
  ck_assert_str_eq(sh(ms), "[3,4,5,4]");
  tyto_tensor *ab = tyto_avg_pool2d_backward(m, 9, 8, 3, 2, 2, 2, 1, 0);
  ck_assert_int_eq(tyto_tensor_op(ab), TYTO_OP_AVG_POOL2D_BACKWARD);
  ck_assert_str_eq(sh(ab), "[3,4,9,8]");
  ck_assert_uint_eq(tyto_tensor_iattr_count(ab), 8);
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(tyto_tensor_iattrs(ab)[i], S(3, 2, 2, 2, 1, 0, 9, 8)[i]);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_nn");
  TCase *tc = tcase_create("nn");
  tcase_add_test(tc, softmax_shapes);
  tcase_add_test(tc, conv2d_shapes);
  tcase_add_test(tc, pool_shapes);
  tcase_add_test(tc, random_sources);
  tcase_add_test(tc, derivative_shapes);
  suite_add_tcase(s, tc);
  return test_run(s);
}
