/* The exact message of every class of invalid call, sticky propagation,
 * graph mixing and NULL arguments. */
#include "graph/fresh_graph.h"

#define F32(r, ...) in(TYTO_F32, (r), S(__VA_ARGS__))
#define F64(r, ...) in(TYTO_F64, (r), S(__VA_ARGS__))
#define F32S in(TYTO_F32, 0, NULL)
#define F64S in(TYTO_F64, 0, NULL)

START_TEST(computed_shapes_cannot_overflow) {
  /* Every input is valid, but the product of their extents is not. */
  tyto_graph *gr = tyto_graph_new();
  tyto_tensor *a =
      tyto_input(gr, TYTO_F32, 1, (int64_t[]){(int64_t)1 << 32}, NULL);
  tyto_tensor *o = tyto_outer(a, a);
  ck_assert(tyto_tensor_is_error(o));
  ck_assert_int_eq(tyto_graph_status(gr), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_graph_error_message(gr),
                         "[4294967296,4294967296] has more than 2^60 "
                         "elements");
  tyto_graph_free(gr);
  /* A zero extent does not hide an overflow of the others. */
  gr = tyto_graph_new();
  tyto_tensor *z =
      tyto_full(gr, TYTO_F32, 3, (int64_t[]){0, INT64_MAX, INT64_MAX}, 1);
  ck_assert(tyto_tensor_is_error(z));
  tyto_graph_free(gr);
  /* A NULL graph (tyto_graph_new out of memory) can still be asked. */
  ck_assert_int_eq(tyto_graph_status(NULL), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(tyto_graph_error_message(NULL));
}
END_TEST

START_TEST(common_errors) {
  FAILS(tyto_add(F32(2, 2, 3), F64(1, 3)),
        "add: dtypes differ: f32[2,3] and f64[3]");
  FAILS(tyto_where(F32(1, 3), F32(1, 3), F64S),
        "where: dtypes differ: f32[3] and f64[]");
  FAILS(tyto_add(F32(1, 3), NULL), "add: input 2 is NULL");
  FAILS(tyto_fma(NULL, F32S, F32S), "fma: input 1 is NULL");
  FAILS(tyto_input(g, TYTO_F32, 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1), NULL),
        "input: rank 9 exceeds 8");
  FAILS(tyto_parameter(g, TYTO_F32, -1, NULL, "w"),
        "parameter: rank -1 is negative");
  FAILS(tyto_input(g, TYTO_F32, 2, NULL, NULL),
        "input: shape is NULL for rank 2");
  FAILS(tyto_parameter(g, TYTO_F32, 2, S(2, -1), NULL),
        "parameter: negative extent in [2,-1]");
  FAILS(tyto_input(g, (tyto_dtype)7, 0, NULL, NULL),
        "input: unknown dtype 7 (expected TYTO_F32, TYTO_F64, TYTO_F16, "
        "TYTO_BF16, TYTO_I32 or TYTO_I64)");
  FAILS(tyto_full(g, TYTO_F64, 3, S(1 << 30, 1 << 30, 1 << 30), 0),
        "full: [1073741824,1073741824,1073741824] has more than 2^60 "
        "elements");
  FAILS(tyto_constant(g, TYTO_F32, 1, S(2), NULL), "constant: values is NULL");
  FAILS(tyto_random_uniform(g, TYTO_F32, 0, NULL, 1, 0, 7),
        "uniform: low 1 is not below high 0");
  FAILS(tyto_random_normal(g, TYTO_F32, 0, NULL, 0, -1, 7),
        "normal: expected a finite stddev >= 0, got -1");
  FAILS(tyto_random_normal(g, TYTO_F32, 0, NULL, 0, NAN, 7),
        "normal: expected a finite stddev >= 0, got nan");
  FAILS(tyto_random_normal(g, TYTO_F32, 0, NULL, INFINITY, 1, 7),
        "normal: expected a finite mean, got inf");
  FAILS(tyto_random_uniform(g, TYTO_F32, 0, NULL, 0, INFINITY, 7),
        "uniform: expected finite bounds, got low 0 and high inf");
  /* The stepped form checks them alike (its step made in FAILS's graph). */
  FAILS(tyto_random_stepped(TYTO_OP_RANDOM_NORMAL, tyto_scalar(g, TYTO_F32, 0),
                            0, NULL, 0, NAN, 7),
        "normal: expected a finite stddev >= 0, got nan");
  FAILS(tyto_random_stepped(TYTO_OP_RANDOM_UNIFORM, tyto_scalar(g, TYTO_F32, 0),
                            0, NULL, 1, 0, 7),
        "uniform: low 1 is not below high 0");
  FAILS(tyto_random_bernoulli(g, TYTO_F32, 0, NULL, 1.5, 7),
        "bernoulli: p 1.5 outside [0, 1]");
  FAILS(tyto_random_normal(g, TYTO_F32, 1, S(-3), 0, 1, 7),
        "normal: negative extent in [-3]");
}
END_TEST

START_TEST(elementwise_errors) {
  FAILS(tyto_add(F32(2, 2, 3), F32(1, 4)),
        "add: shapes cannot be broadcast: [2,3] and [4]");
  FAILS(tyto_ge(F32(3, 5, 2, 3), F32(2, 3, 3)),
        "ge: shapes cannot be broadcast: [5,2,3] and [3,3]");
  FAILS(tyto_mul(F32(1, 0), F32(1, 2)),
        "mul: shapes cannot be broadcast: [0] and [2]");
  FAILS(tyto_where(F32(2, 2, 3), F32(1, 3), F32(1, 4)),
        "where: shapes cannot be broadcast: [2,3], [3] and [4]");
  FAILS(tyto_fma(F32(1, 2), F32(1, 3), F32S),
        "fma: shapes cannot be broadcast: [2], [3] and []");
  FAILS(tyto_unary(TYTO_OP_ADD, F32S), "unary: TYTO_OP 64 is not a unary op");
  FAILS(tyto_unary(TYTO_OP_ELU, F32S),
        "unary: TYTO_OP 42 is not a unary op without attributes");
  FAILS(tyto_binary(TYTO_OP_NEG, F32S, F32S),
        "binary: TYTO_OP 16 is not a binary op");
}
END_TEST

START_TEST(reduction_errors) {
  FAILS(tyto_sum(F32(2, 3, 4), 1, AX(2), 0),
        "sum: axis 2 out of range for [3,4]");
  FAILS(tyto_mean(F32(2, 3, 4), 1, AX(-3), 0),
        "mean: axis -3 out of range for [3,4]");
  FAILS(tyto_norm_l2(F32(2, 3, 4), 2, AX(1, -1), 1),
        "norm_l2: axis -1 repeated for [3,4]");
  FAILS(tyto_sum(F32(1, 3), -1, AX(0), 0), "sum: negative number of axes -1");
  FAILS(tyto_reduce(TYTO_OP_ARGMAX, F32(1, 3), 1, AX(0), 0),
        "reduce: TYTO_OP 133 is not a reduction over axes");
  FAILS(tyto_argmax(F32(2, 3, 0), 1, 0),
        "argmax: axis of an empty extent in [3,0]");
  FAILS(tyto_argmin(F32S, 0, 0), "argmin: axis 0 out of range for []");
  FAILS(tyto_softmax(F32(2, 3, 4), 2),
        "softmax: axis 2 out of range for [3,4]");
}
END_TEST

START_TEST(matmul_and_linalg_errors) {
  FAILS(tyto_matmul(F32(2, 64, 784), F32(2, 128, 10), 0, 0),
        "matmul: inner dimensions differ: [64,784] x [128,10]");
  FAILS(tyto_matmul(F32(2, 64, 784), F32(2, 128, 10), 1, 0),
        "matmul: inner dimensions differ: [64,784]^T x [128,10]");
  FAILS(tyto_matmul(F32(2, 3, 4), F32(2, 5, 3), 0, 1),
        "matmul: inner dimensions differ: [3,4] x [5,3]^T");
  FAILS(tyto_matmul(F32(1, 3), F32(2, 3, 4), 0, 0),
        "matmul: operands need rank >= 2: [3] x [3,4]");
  FAILS(tyto_matmul(F32(3, 2, 3, 4), F32(3, 5, 4, 6), 0, 0),
        "matmul: batch dimensions cannot be broadcast: [2,3,4] x [5,4,6]");
  FAILS(tyto_dot(F32(1, 3), F32(1, 4)),
        "dot: needs two vectors of one length: [3] . [4]");
  FAILS(tyto_outer(F32(2, 3, 1), F32(1, 4)),
        "outer: needs two vectors: [3,1] and [4]");
  FAILS(tyto_inv(F32(2, 3, 4)), "inv: needs square matrices [..., n, n], got "
                                "[3,4]");
  FAILS(tyto_det(F32(1, 3)), "det: needs square matrices [..., n, n], got [3]");
  FAILS(tyto_logdet(F32(3, 2, 2, 3)),
        "logdet: needs square matrices [..., n, n], got [2,2,3]");
  FAILS(tyto_cholesky(F32S),
        "cholesky: needs square matrices [..., n, n], got []");
  FAILS(tyto_solve(F32(2, 3, 3), F32(2, 4, 2)),
        "solve: rows differ: [3,3] and [4,2]");
  FAILS(tyto_solve(F32(2, 3, 4), F32(2, 3, 2)),
        "solve: needs square matrices [..., n, n], got [3,4]");
  FAILS(tyto_solve(F32(2, 3, 3), F32(1, 3)),
        "solve: B needs rank >= 2 [..., n, k], got [3]");
  FAILS(tyto_solve(F32(3, 2, 3, 3), F32(3, 4, 3, 1)),
        "solve: batch dimensions cannot be broadcast: [2,3,3] and [4,3,1]");
  FAILS(tyto_triangular_solve(F32(2, 3, 3), F32(2, 4, 2), 1, 0, 0),
        "triangular_solve: rows differ: [3,3] and [4,2]");
  FAILS(tyto_triangular_solve(F32(2, 3, 4), F32(2, 3, 2), 1, 0, 0),
        "triangular_solve: needs square matrices [..., n, n], got [3,4]");
  FAILS(tyto_triangular_solve(F32(2, 3, 3), F32(1, 3), 0, 0, 0),
        "triangular_solve: B needs rank >= 2 [..., n, k], got [3]");
  FAILS(tyto_triangular_solve(F32(3, 2, 3, 3), F32(3, 4, 3, 1), 0, 1, 0),
        "triangular_solve: batch dimensions cannot be broadcast: [2,3,3] and "
        "[4,3,1]");
  FAILS(tyto_triangular_solve(F64(2, 3, 3), F32(2, 3, 1), 0, 1, 0),
        "triangular_solve: dtypes differ: f64[3,3] and f32[3,1]");
  tyto_tensor *q = NULL, *r = NULL;
  fresh();
  tyto_qr(F32(1, 4), &q, &r);
  expect_error(q, "qr: needs matrices [..., m, n], got [4]", __LINE__);
  expect_error(r, "qr: needs matrices [..., m, n], got [4]", __LINE__);
}
END_TEST

START_TEST(layout_errors) {
  FAILS(tyto_reshape(F32(2, 2, 3), 2, S(4, 2)),
        "reshape: cannot reshape [2,3] (6 elements) to [4,2] (8 elements)");
  FAILS(tyto_reshape(F32(2, 2, 3), 2, S(-1, -1)),
        "reshape: more than one -1 in [-1,-1]");
  FAILS(tyto_reshape(F32(2, 2, 3), 2, S(-2, 3)),
        "reshape: invalid extent -2 in [-2,3]");
  FAILS(tyto_reshape(F32(2, 0, 3), 2, S(0, -1)),
        "reshape: cannot infer -1 in [0,-1] for [0,3]");
  FAILS(tyto_reshape(F32(1, 6), 2, S(4, -1)),
        "reshape: cannot infer -1 in [4,-1] for [6]");
  FAILS(tyto_reshape(F32S, 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1)),
        "reshape: rank 9 exceeds 8");
  FAILS(tyto_permute(F32(2, 2, 3), 2, AX(0, 0)),
        "permute: [0,0] is not a permutation of the axes of [2,3]");
  FAILS(tyto_permute(F32(2, 2, 3), 2, AX(0, 2)),
        "permute: [0,2] is not a permutation of the axes of [2,3]");
  FAILS(tyto_permute(F32(2, 2, 3), 3, AX(0, 1, 2)),
        "permute: 3 axes given for [2,3]");
  FAILS(tyto_transpose(F32(2, 2, 3), 0, 2),
        "transpose: axis 2 out of range for [2,3]");
  FAILS(tyto_broadcast_to(F32(2, 3, 4), 2, S(4, 4)),
        "broadcast_to: cannot broadcast [3,4] to [4,4]");
  FAILS(tyto_broadcast_to(F32(2, 3, 4), 1, S(4)),
        "broadcast_to: cannot broadcast [3,4] to [4]");
  FAILS(tyto_broadcast_to(F32(1, 1), 1, S(-4)),
        "broadcast_to: negative extent in [-4]");
  FAILS(tyto_slice(F32(2, 3, 4), NULL, NULL, S(1, 0)),
        "slice: step 0 on axis 1 of [3,4]");
  FAILS(tyto_slice_axis(F32(2, 3, 4), 2, 0, 1, 1),
        "slice: axis 2 out of range for [3,4]");
  FAILS(tyto_concat(2, (tyto_tensor *[]){F32(2, 2, 3), F32(2, 3, 4)}, 1),
        "concat: shapes differ outside axis 1: [2,3] and [3,4]");
  FAILS(tyto_concat(2, (tyto_tensor *[]){F32(2, 2, 3), F32(1, 3)}, 0),
        "concat: ranks differ: [2,3] and [3]");
  FAILS(tyto_concat(1, (tyto_tensor *[]){F32S}, 0),
        "concat: axis 0 out of range for []");
  FAILS(tyto_stack(2, (tyto_tensor *[]){F32(2, 2, 3), F32(2, 3, 2)}, 0),
        "stack: shapes differ: [2,3] and [3,2]");
  FAILS(tyto_stack(2, (tyto_tensor *[]){F32(1, 2), F32(1, 2)}, 2),
        "stack: axis 2 out of range for stacking [2]");
  FAILS(tyto_pad(F32(2, 3, 4), S(0, -1), S(0, 0), TYTO_PAD_CONSTANT, 0),
        "pad: negative padding -1 on axis 1 of [3,4]");
  FAILS(tyto_pad(F32(2, 2, 3), S(0, 1), S(0, 3), TYTO_PAD_REFLECT, 0),
        "pad: reflect padding 3 on axis 1 needs an extent above 3, got "
        "[2,3]");
  FAILS(tyto_pad(F32(1, 3), NULL, NULL, (tyto_pad_mode)2, 0),
        "pad: unknown mode 2");
  FAILS(tyto_tile(F32(1, 3), 1, S(-1)), "tile: negative extent in [-1]");
  FAILS(tyto_tile(F32(1, 3), 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1)),
        "tile: rank 9 exceeds 8");
  FAILS(tyto_repeat(F32(1, 3), 0, -2), "repeat: negative repeats -2");
  FAILS(tyto_repeat(F32(1, 3), 1, 2), "repeat: axis 1 out of range for [3]");
  FAILS(tyto_repeat(F32(8, 1, 1, 1, 1, 1, 1, 1, 1), 0, 2),
        "repeat: needs rank below 8, got [1,1,1,1,1,1,1,1]");
  FAILS(tyto_flip(F32(2, 3, 4), 2, AX(0, -2)),
        "flip: axis -2 repeated for [3,4]");
}
END_TEST

START_TEST(slice_backward_errors) {
  FAILS(tyto_slice_backward(F32(2, 3, 4), 2, S(7, 7), S(0, 4), S(1, 2)),
        "slice_backward: axis 1 places 4 elements from 4 by step 2 outside "
        "extent 7");
  FAILS(tyto_slice_backward(F32(2, 3, 3), 2, S(7, 7), S(0, 4), S(1, 2)),
        "slice_backward: axis 1 places 3 elements from 4 by step 2 outside "
        "extent 7");
  FAILS(tyto_slice_backward(F32(1, 3), 1, S(5), S(1), S(-1)),
        "slice_backward: axis 0 places 3 elements from 1 by step -1 outside "
        "extent 5");
  FAILS(tyto_slice_backward(F32(1, 1), 1, S(5), S(-1), S(1)),
        "slice_backward: axis 0 places 1 elements from -1 by step 1 outside "
        "extent 5");
  FAILS(tyto_slice_backward(F32(1, 1), 1, S(5), S(5), S(-1)),
        "slice_backward: axis 0 places 1 elements from 5 by step -1 outside "
        "extent 5");
  /* start + step overflows int64: still reported, not wrapped around. */
  FAILS(tyto_slice_backward(F32(1, 2), 1, S((int64_t)1 << 59),
                            S(((int64_t)1 << 59) - 1), S(INT64_MAX)),
        "slice_backward: axis 0 places 2 elements from 576460752303423487 by "
        "step 9223372036854775807 outside extent 576460752303423488");
  FAILS(tyto_slice_backward(F32(2, 2, 3), 1, S(4), NULL, NULL),
        "slice_backward: rank of g [2,3] differs from [4]");
  FAILS(tyto_slice_backward(F32(1, 2), 1, S(4), S(0), S(0)),
        "slice_backward: step 0 on axis 0 of [4]");
  FAILS(tyto_slice_backward(F32(1, 2), 1, S(-4), NULL, NULL),
        "slice_backward: negative extent in [-4]");
  FAILS(tyto_slice_backward(F32(1, 2), 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1), NULL,
                            NULL),
        "slice_backward: rank 9 exceeds 8");
  /* The error tensor passes through without a message of its own. */
  fresh();
  tyto_tensor *e = tyto_graph_error_tensor(g);
  ck_assert_ptr_eq(tyto_slice_backward(e, 1, S(4), NULL, NULL), e);
  ck_assert_ptr_eq(tyto_triangular_solve(e, F32(2, 2, 2), 1, 0, 0), e);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
}
END_TEST

START_TEST(split_errors) {
  tyto_tensor *out[4];
  const char *msgs[] = {
      "split: sizes sum to 5, axis 1 of [2,6] has 6",
      "split: 4 equal parts do not divide axis 1 of [2,6]",
      "split: negative size -1",
      "split: axis 2 out of range for [2,6]",
  };
  for (int c = 0; c < 4; c++) {
    fresh();
    tyto_tensor *x = F32(2, 2, 6);
    switch (c) {
    case 0: tyto_split(x, 1, 2, S(1, 4), out); break;
    case 1: tyto_split(x, 1, 4, NULL, out); break;
    case 2: tyto_split(x, 1, 2, S(-1, 7), out); break;
    case 3: tyto_split(x, 2, 2, NULL, out); break;
    }
    int n = c == 1 ? 4 : 2;
    for (int i = 0; i < n; i++)
      expect_error(out[i], msgs[c], __LINE__);
  }
  fresh();
  tyto_split(F32(1, 4), 0, 0, NULL, out);
  ck_assert_str_eq(tyto_graph_error_message(g),
                   "split: number of parts must be positive");
}
END_TEST

START_TEST(indexing_errors) {
  FAILS(tyto_gather(F32(2, 5, 3), F32(1, 2), 2),
        "gather: axis 2 out of range for [5,3]");
  FAILS(tyto_gather(F32(8, 1, 1, 1, 1, 1, 1, 1, 2), F32(2, 3, 3), 7),
        "gather: result rank 9 exceeds 8 for [1,1,1,1,1,1,1,2] and indices "
        "[3,3]");
  FAILS(tyto_index_select(F32(2, 5, 3), 0, F32(2, 2, 2)),
        "index_select: indices must have rank 1, got [2,2]");
  FAILS(tyto_scatter_add(F32(2, 5, 3), F32(1, 4), F32(2, 2, 3), 0),
        "scatter_add: updates [2,3] do not match [4,3] for base [5,3], "
        "indices [4], axis 0");
  FAILS(tyto_one_hot(F32(1, 8), 0), "one_hot: depth 0 must be positive");
  FAILS(tyto_one_hot(F32(8, 1, 1, 1, 1, 1, 1, 1, 1), 3),
        "one_hot: indices need rank below 8, got [1,1,1,1,1,1,1,1]");
}
END_TEST

START_TEST(neural_errors) {
  tyto_conv2d_params p = {{1, 1}, {0, 0}, {1, 1}, 3};
  FAILS(tyto_conv2d(F32(3, 3, 32, 32), F32(4, 16, 3, 3, 3), NULL, NULL),
        "conv2d: x must have rank 4 (NCHW), got [3,32,32]");
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(3, 16, 3, 3), NULL, NULL),
        "conv2d: weight must have rank 4 (OIHW), got [16,3,3]");
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(4, 16, 4, 3, 3), NULL, NULL),
        "conv2d: input channels differ: x [1,3,32,32] and w [16,4,3,3] with "
        "1 groups");
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(4, 16, 1, 3, 3), NULL, &p),
        "conv2d: 16 output channels not divisible by 3 groups");
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(4, 16, 3, 3, 3), F32(1, 8), NULL),
        "conv2d: bias [8] does not match 16 output channels");
  p = (tyto_conv2d_params){{0, 1}, {0, 0}, {1, 1}, 1};
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(4, 16, 3, 3, 3), NULL, &p),
        "conv2d: stride, dilation and groups must be positive, padding not "
        "negative");
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 0};
  FAILS(tyto_conv2d(F32(4, 1, 3, 32, 32), F32(4, 16, 3, 3, 3), NULL, &p),
        "conv2d: stride, dilation and groups must be positive, padding not "
        "negative");
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 1};
  FAILS(tyto_conv2d(F32(4, 1, 3, 4, 4), F32(4, 16, 3, 5, 5), NULL, &p),
        "conv2d: kernel [5,5] (dilated) larger than padded input [4,4]");
  p = (tyto_conv2d_params){{1, 1}, {1, 0}, {2, 2}, 1};
  FAILS(tyto_conv2d(F32(4, 1, 3, 4, 4), F32(4, 16, 3, 3, 3), NULL, &p),
        "conv2d: kernel [5,5] (dilated) larger than padded input [6,4]");
  FAILS(tyto_conv2d(F32(4, 1, 3, 4, 4), F32(4, 16, 3, 0, 3), NULL, NULL),
        "conv2d: weight [16,3,0,3] has an empty kernel");
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {INT64_MAX / 2, 1}, 1};
  FAILS(tyto_conv2d(F32(4, 1, 3, 4, 4), F32(4, 16, 3, 3, 3), NULL, &p),
        "conv2d: dilated kernel of [16,3,3,3] is too large");
  p = (tyto_conv2d_params){{1, 1}, {INT64_MAX / 2, 0}, {1, 1}, 1};
  FAILS(tyto_conv2d(F32(4, 1, 3, 4, 4), F32(4, 16, 3, 3, 3), NULL, &p),
        "conv2d: padded input of [1,3,4,4] is too large");
  FAILS(tyto_conv2d(F64(4, 1, 3, 4, 4), F32(4, 16, 3, 3, 3), NULL, NULL),
        "conv2d: dtypes differ: f64[1,3,4,4] and f32[16,3,3,3]");
  FAILS(tyto_max_pool2d(F32(2, 4, 4), 2, 2, 2, 2, 0, 0),
        "max_pool2d: x must have rank 4 (NCHW), got [4,4]");
  FAILS(tyto_avg_pool2d(F32(4, 1, 1, 4, 4), 2, 2, 0, 2, 0, 0),
        "avg_pool2d: kernel and stride must be positive, padding not "
        "negative");
  FAILS(tyto_max_pool2d(F32(4, 1, 1, 8, 8), 3, 3, 1, 1, 2, 0),
        "max_pool2d: padding 2 exceeds half the kernel [3,3]");
  FAILS(tyto_max_pool2d(F32(4, 1, 1, 4, 4), 5, 5, 1, 1, 0, 0),
        "max_pool2d: kernel [5,5] larger than padded input [4,4]");
}
END_TEST

START_TEST(derivative_errors) {
  tyto_conv2d_params p = {{2, 2}, {0, 0}, {1, 1}, 1};
  /* conv2d_backward_data */
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 5, 5), F32(4, 2, 3, 3, 3), 9, 9,
                                  &p),
        "conv2d_backward_data: input [9,9] gives output [4,4] for these "
        "parameters, but dy is [1,2,5,5]");
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 3, 4, 4), F32(4, 2, 3, 3, 3), 9, 9,
                                  &p),
        "conv2d_backward_data: dy [1,3,4,4] has 3 channels, but w [2,3,3,3] "
        "has 2 output channels");
  FAILS(tyto_conv2d_backward_data(F32(3, 2, 4, 4), F32(4, 2, 3, 3, 3), 9, 9,
                                  NULL),
        "conv2d_backward_data: dy must have rank 4 (NCHW), got [2,4,4]");
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 4, 4), F32(3, 2, 3, 3), 9, 9,
                                  NULL),
        "conv2d_backward_data: weight must have rank 4 (OIHW), got [2,3,3]");
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 4, 4), F32(4, 2, 3, 3, 3), -1, 9,
                                  NULL),
        "conv2d_backward_data: negative input size [-1,9]");
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 4, 4), F32(4, 2, 3, 3, 3), 2, 2,
                                  NULL),
        "conv2d_backward_data: kernel [3,3] (dilated) larger than padded "
        "input [2,2]");
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 4, 4), F32(4, 2, 3, 0, 3), 4, 4,
                                  NULL),
        "conv2d_backward_data: weight [2,3,0,3] has an empty kernel");
  tyto_conv2d_params bad = {{1, 1}, {0, 0}, {1, 1}, 0};
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 2, 4, 4), F32(4, 2, 3, 3, 3), 6, 6,
                                  &bad),
        "conv2d_backward_data: stride, dilation and groups must be positive, "
        "padding not negative");
  bad = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 4};
  FAILS(tyto_conv2d_backward_data(F32(4, 1, 6, 4, 4), F32(4, 6, 3, 3, 3), 6, 6,
                                  &bad),
        "conv2d_backward_data: 6 output channels not divisible by 4 groups");
  FAILS(tyto_conv2d_backward_data(F64(4, 1, 2, 4, 4), F32(4, 2, 3, 3, 3), 6, 6,
                                  NULL),
        "conv2d_backward_data: dtypes differ: f64[1,2,4,4] and f32[2,3,3,3]");
  /* conv2d_backward_filter */
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 9, 9), F32(4, 1, 2, 5, 5), 3,
                                    3, &p),
        "conv2d_backward_filter: x [1,3,9,9] and a [3,3] kernel give output "
        "[1,2,4,4] for these parameters, but dy is [1,2,5,5]");
  FAILS(tyto_conv2d_backward_filter(F32(4, 2, 3, 9, 9), F32(4, 1, 2, 4, 4), 3,
                                    3, &p),
        "conv2d_backward_filter: x [2,3,9,9] and a [3,3] kernel give output "
        "[2,2,4,4] for these parameters, but dy is [1,2,4,4]");
  FAILS(tyto_conv2d_backward_filter(F32(3, 3, 9, 9), F32(4, 1, 2, 4, 4), 3, 3,
                                    NULL),
        "conv2d_backward_filter: x must have rank 4 (NCHW), got [3,9,9]");
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 9, 9), F32(3, 2, 4, 4), 3, 3,
                                    NULL),
        "conv2d_backward_filter: dy must have rank 4 (NCHW), got [2,4,4]");
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 9, 9), F32(4, 1, 2, 4, 4), 3,
                                    -3, NULL),
        "conv2d_backward_filter: negative kernel size [3,-3]");
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 9, 9), F32(4, 1, 2, 4, 4), 0,
                                    3, NULL),
        "conv2d_backward_filter: weight [2,3,0,3] has an empty kernel");
  bad = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 2};
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 9, 9), F32(4, 1, 2, 7, 7), 3,
                                    3, &bad),
        "conv2d_backward_filter: input channels differ: x [1,3,9,9] and w "
        "[2,1,3,3] with 2 groups");
  FAILS(tyto_conv2d_backward_filter(F32(4, 1, 3, 4, 4), F32(4, 1, 2, 1, 1), 5,
                                    5, NULL),
        "conv2d_backward_filter: kernel [5,5] (dilated) larger than padded "
        "input [4,4]");
  /* pooling */
  FAILS(tyto_max_pool2d_backward(F32(4, 1, 2, 8, 8), F32(4, 1, 2, 3, 4), 2, 2,
                                 2, 2, 0, 0),
        "max_pool2d_backward: dy [1,2,3,4] does not match the pooled shape "
        "[1,2,4,4] of x [1,2,8,8]");
  FAILS(tyto_max_pool2d_backward(F32(3, 2, 8, 8), F32(4, 1, 2, 4, 4), 2, 2, 2,
                                 2, 0, 0),
        "max_pool2d_backward: x must have rank 4 (NCHW), got [2,8,8]");
  FAILS(tyto_max_pool2d_backward(F32(4, 1, 2, 8, 8), F32(4, 1, 2, 4, 4), 3, 3,
                                 1, 1, 2, 0),
        "max_pool2d_backward: padding 2 exceeds half the kernel [3,3]");
  FAILS(tyto_max_pool2d_select(F32(4, 1, 2, 8, 8), F32(4, 1, 2, 8, 7), 2, 2, 2,
                               2, 0, 0),
        "max_pool2d_select: t [1,2,8,7] does not match x [1,2,8,8]");
  FAILS(tyto_max_pool2d_select(F32(4, 1, 2, 4, 4), F32(4, 1, 2, 4, 4), 5, 5, 1,
                               1, 0, 0),
        "max_pool2d_select: kernel [5,5] larger than padded input [4,4]");
  FAILS(tyto_max_pool2d_select(F32(4, 1, 2, 4, 4), F32(4, 1, 2, 4, 4), 2, 2, 0,
                               1, 0, 0),
        "max_pool2d_select: kernel and stride must be positive, padding not "
        "negative");
  FAILS(tyto_avg_pool2d_backward(F32(4, 1, 2, 4, 4), 7, 7, 2, 2, 2, 2, 0, 0),
        "avg_pool2d_backward: input [7,7] gives output [3,3] for these "
        "parameters, but dy is [1,2,4,4]");
  FAILS(tyto_avg_pool2d_backward(F32(4, 1, 2, 4, 4), 8, 10, 2, 2, 2, 2, 0, 0),
        "avg_pool2d_backward: input [8,10] gives output [4,5] for these "
        "parameters, but dy is [1,2,4,4]");
  FAILS(tyto_avg_pool2d_backward(F32(3, 2, 4, 4), 8, 8, 2, 2, 2, 2, 0, 0),
        "avg_pool2d_backward: dy must have rank 4 (NCHW), got [2,4,4]");
  FAILS(tyto_avg_pool2d_backward(F32(4, 1, 2, 4, 4), 8, -8, 2, 2, 2, 2, 0, 0),
        "avg_pool2d_backward: negative input size [8,-8]");
  FAILS(tyto_avg_pool2d_backward(F32(4, 1, 2, 4, 4), 1, 1, 2, 2, 2, 2, 0, 0),
        "avg_pool2d_backward: kernel [2,2] larger than padded input [1,1]");
  /* The error tensor passes through without a message of its own. */
  fresh();
  tyto_tensor *e = tyto_graph_error_tensor(g), *x = F32(4, 1, 2, 4, 4);
  ck_assert_ptr_eq(tyto_conv2d_backward_data(e, x, 4, 4, NULL), e);
  ck_assert_ptr_eq(tyto_conv2d_backward_filter(x, e, 1, 1, NULL), e);
  ck_assert_ptr_eq(tyto_max_pool2d_backward(x, e, 2, 2, 2, 2, 0, 0), e);
  ck_assert_ptr_eq(tyto_max_pool2d_select(e, x, 2, 2, 2, 2, 0, 0), e);
  ck_assert_ptr_eq(tyto_avg_pool2d_backward(e, 8, 8, 2, 2, 2, 2, 0, 0), e);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  /* NULL inputs name the op. */
  fresh();
  expect_error(
      tyto_max_pool2d_select(F32(4, 1, 2, 4, 4), NULL, 2, 2, 2, 2, 0, 0),
      "max_pool2d_select: input 2 is NULL", __LINE__);
}
END_TEST

START_TEST(sticky_first_message) {
  fresh();
  tyto_tensor *x = F32(2, 64, 784), *w = F32(2, 128, 10);
  tyto_tensor *y = tyto_matmul(x, w, 0, 0);
  const char *first = "matmul: inner dimensions differ: [64,784] x [128,10]";
  expect_error(y, first, __LINE__);
  size_t size = tyto_graph_size(g);
  /* ops on the error tensor give it back without a new message, even when
   * they would be wrong on their own */
  tyto_tensor *z = tyto_relu(tyto_add(y, F32(1, 3)));
  expect_error(z, first, __LINE__);
  expect_error(tyto_reshape(z, 2, S(7, 7)), first, __LINE__);
  expect_error(tyto_sum(z, 1, AX(5), 0), first, __LINE__);
  expect_error(tyto_concat(2, (tyto_tensor *[]){x, z}, 0), first, __LINE__);
  expect_error(tyto_scalar_like(z, 1), first, __LINE__);
  expect_error(tyto_mul_scalar(z, 2), first, __LINE__);
  tyto_tensor *q, *r;
  tyto_qr(z, &q, &r);
  expect_error(q, first, __LINE__);
  tyto_tensor *parts[2];
  tyto_split(z, 0, 2, NULL, parts);
  expect_error(parts[1], first, __LINE__);
  ck_assert_uint_eq(tyto_graph_size(g), size + 1); /* only F32(1, 3) */
  /* a later mistake on valid tensors keeps the first message */
  expect_error(tyto_add(F32(1, 2), F32(1, 3)), first, __LINE__);
  /* valid ops still build */
  tyto_tensor *ok = tyto_matmul(x, F32(2, 784, 10), 0, 0);
  ck_assert(!tyto_tensor_is_error(ok));
  ck_assert_int_eq(tyto_tensor_dim(ok, 1), 10);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_graph_error_message(g), first);
  /* the error tensor itself */
  tyto_tensor *e = tyto_graph_error_tensor(g);
  ck_assert(tyto_tensor_is_error(e));
  ck_assert_int_eq(tyto_tensor_kind(e), TYTO_KIND_ERROR);
  ck_assert_int_eq(tyto_tensor_op(e), TYTO_OP_ERROR);
  ck_assert_int_eq(tyto_tensor_index(e), -1);
  ck_assert_int_eq(tyto_tensor_rank(e), 0);
  ck_assert_ptr_eq(tyto_tensor_graph(e), g);
  ck_assert_str_eq(tyto_op_name(tyto_tensor_op(e)), "error");
  tyto_tensor_set_name(e, "ignored");
  ck_assert_ptr_null(tyto_tensor_name(e));
}
END_TEST

START_TEST(mixing_graphs_and_null) {
  fresh();
  tyto_graph *h = tyto_graph_new();
  tyto_tensor *a = F32(1, 3);
  tyto_tensor *b = tyto_input(h, TYTO_F32, 1, S(3), NULL);
  expect_error(tyto_add(a, b), "add: tensors belong to different graphs",
               __LINE__);
  ck_assert_int_eq(tyto_graph_status(h), TYTO_OK);
  /* the first tensor's graph is the one told; the other stays clean */
  tyto_tensor *y = tyto_mul(b, a);
  ck_assert_ptr_eq(y, tyto_graph_error_tensor(h));
  ck_assert_str_eq(tyto_graph_error_message(h),
                   "mul: tensors belong to different graphs");
  tyto_graph_free(h);
  fresh();
  h = tyto_graph_new();
  expect_error(
      tyto_concat(2, (tyto_tensor *[]){F32(1, 2), tyto_scalar(h, TYTO_F32, 1)},
                  0),
      "concat: tensors belong to different graphs", __LINE__);
  tyto_graph_free(h);
  /* no graph to tell: NULL */
  ck_assert_ptr_null(tyto_relu(NULL));
  ck_assert_ptr_null(tyto_add(NULL, NULL));
  ck_assert_ptr_null(tyto_input(NULL, TYTO_F32, 0, NULL, NULL));
  ck_assert_ptr_null(tyto_scalar(NULL, TYTO_F32, 0));
  ck_assert_ptr_null(tyto_random_uniform(NULL, TYTO_F32, 0, NULL, 0, 1, 1));
  ck_assert_ptr_null(tyto_concat(0, NULL, 0));
  ck_assert_ptr_null(tyto_scalar_like(NULL, 0));
  tyto_tensor *q = (tyto_tensor *)1, *r = (tyto_tensor *)1;
  tyto_qr(NULL, &q, &r);
  ck_assert_ptr_null(q);
  ck_assert_ptr_null(r);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_errors");
  TCase *tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_test(tc, computed_shapes_cannot_overflow);
  tcase_add_test(tc, common_errors);
  tcase_add_test(tc, elementwise_errors);
  tcase_add_test(tc, reduction_errors);
  tcase_add_test(tc, matmul_and_linalg_errors);
  tcase_add_test(tc, layout_errors);
  tcase_add_test(tc, split_errors);
  tcase_add_test(tc, slice_backward_errors);
  tcase_add_test(tc, indexing_errors);
  tcase_add_test(tc, neural_errors);
  tcase_add_test(tc, derivative_errors);
  tcase_add_test(tc, sticky_first_message);
  tcase_add_test(tc, mixing_graphs_and_null);
  suite_add_tcase(s, tc);
  return test_run(s);
}
