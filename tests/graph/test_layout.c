/* Shape inference of layout and indexing ops: reshape, permute,
 * broadcast_to, slice, concat, split, stack, pad, tile, repeat, flip,
 * gather, index_select, scatter_add, one_hot. */
#include "graph_test.h"

/* The attributes of t as "[a,b,...]". */
static const char *ia(tyto_tensor *t) {
  static char buf[SHAPE_STR * 2];
  return shape_str(buf, (int)tyto_tensor_iattr_count(t), tyto_tensor_iattrs(t));
}

START_TEST(reshape_permute_broadcast) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 3, 2, 3, 4);
  tyto_tensor *y = tyto_reshape(x, 2, S(-1, 4));
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_RESHAPE);
  ck_assert_str_eq(sh(y), "[6,4]");
  ck_assert_str_eq(sh(tyto_reshape(x, 1, S(24))), "[24]");
  ck_assert_str_eq(sh(tyto_reshape(IN(g, 2, 1, 1), 0, NULL)), "[]");
  ck_assert_str_eq(sh(tyto_reshape(IN(g, 2, 0, 3), 3, S(3, 0, 5))), "[3,0,5]");
  y = tyto_permute(x, 3, AX(2, 0, 1));
  ck_assert_str_eq(sh(y), "[4,2,3]");
  ck_assert_str_eq(ia(y), "[2,0,1]");
  ck_assert_str_eq(ia(tyto_permute(x, 3, AX(-1, 0, 1))), "[2,0,1]");
  y = tyto_transpose(x, 0, -1);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_PERMUTE);
  ck_assert_str_eq(sh(y), "[4,3,2]");
  ck_assert_str_eq(ia(y), "[2,1,0]");
  ck_assert_str_eq(sh(tyto_broadcast_to(IN(g, 2, 3, 1), 3, S(2, 3, 4))),
                   "[2,3,4]");
  ck_assert_str_eq(sh(tyto_broadcast_to(tyto_scalar(g, TYTO_F32, 0), 1, S(5))),
                   "[5]");
  ck_assert_str_eq(sh(tyto_broadcast_to(IN(g, 1, 1), 2, S(2, 0))), "[2,0]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(slices) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 10);
  struct {
    int64_t start, stop, step;
    const char *shape, *attrs;
  } cases[] = {
      {2, 8, 2, "[3]", "[2,2]"},                  /* x[2:8:2] */
      {TYTO_END, TYTO_END, 1, "[10]", "[0,1]"},   /* x[:] */
      {TYTO_END, TYTO_END, -1, "[10]", "[9,-1]"}, /* x[::-1] */
      {8, 2, -3, "[2]", "[8,-3]"},                /* x[8:2:-3] = 8, 5 */
      {-3, TYTO_END, 1, "[3]", "[7,1]"},          /* x[-3:] */
      {100, TYTO_END, 1, "[0]", "[10,1]"},        /* x[100:] */
      {5, -100, -1, "[6]", "[5,-1]"},             /* x[5:-100:-1] */
      {-100, 3, 1, "[3]", "[0,1]"},               /* x[-100:3] */
      {3, 3, 1, "[0]", "[3,1]"},                  /* x[3:3] */
      {2, 8, -1, "[0]", "[2,-1]"},                /* x[2:8:-1] */
      {100, TYTO_END, -4, "[3]", "[9,-4]"},       /* x[100::-4] = 9, 5, 1 */
      {TYTO_END, 4, 3, "[2]", "[0,3]"},           /* x[:4:3] = 0, 3 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tyto_tensor *y =
        tyto_slice(x, &cases[i].start, &cases[i].stop, &cases[i].step);
    ck_assert_msg(strcmp(sh(y), cases[i].shape) == 0, "case %zu: %s", i, sh(y));
    ck_assert_msg(strcmp(ia(y), cases[i].attrs) == 0, "case %zu: %s", i, ia(y));
  }
  tyto_tensor *m = IN(g, 3, 4, 5, 6);
  tyto_tensor *y =
      tyto_slice(m, S(1, TYTO_END, -1), S(3, TYTO_END, 0), S(1, -2, -1));
  ck_assert_str_eq(sh(y), "[2,3,5]");
  ck_assert_str_eq(ia(y), "[1,1,4,-2,5,-1]"); /* m[1:3, ::-2, :0:-1] */
  ck_assert_str_eq(sh(tyto_slice(m, NULL, NULL, NULL)), "[4,5,6]");
  ck_assert_str_eq(sh(tyto_slice_axis(m, -1, 1, TYTO_END, 2)), "[4,5,3]");
  ck_assert_str_eq(sh(tyto_slice(IN(g, 1, 0), NULL, NULL, S(-1))), "[0]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

/* slice_backward: the given shape, (start, step) per axis as SLICE's, and
 * the iattrs of a slice fed back give a valid slice_backward. */
START_TEST(slice_backward_shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *gr = IN(g, 2, 3, 2);
  tyto_tensor *y = tyto_slice_backward(gr, 2, S(5, 7), S(4, 1), S(-2, 3));
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_SLICE_BACKWARD);
  ck_assert_str_eq(sh(y), "[5,7]");
  ck_assert_str_eq(ia(y), "[4,-2,1,3]");
  ck_assert_ptr_eq(tyto_tensor_input(y, 0), gr);
  /* Extremes: the last element exactly at the edge, both directions. */
  ck_assert_str_eq(sh(tyto_slice_backward(gr, 2, S(3, 2), S(0, 1), S(1, -1))),
                   "[3,2]");
  ck_assert_str_eq(ia(tyto_slice_backward(gr, 2, S(3, 2), S(2, 1), S(-1, -1))),
                   "[2,-1,1,-1]");
  /* NULL starts and steps: 0 and 1. */
  ck_assert_str_eq(ia(tyto_slice_backward(gr, 2, S(4, 2), NULL, NULL)),
                   "[0,1,0,1]");
  /* An empty g places nothing: any start is fine. */
  ck_assert_str_eq(
      sh(tyto_slice_backward(IN(g, 2, 0, 2), 2, S(4, 2), S(-9, 0), S(5, 1))),
      "[4,2]");
  /* Round trip through tyto_slice's attributes, rank 0 too. */
  tyto_tensor *m = IN(g, 3, 4, 5, 6);
  tyto_tensor *sl =
      tyto_slice(m, S(1, TYTO_END, -1), S(3, TYTO_END, 0), S(1, -2, -1));
  const int64_t *a = tyto_tensor_iattrs(sl);
  int64_t st[3] = {a[0], a[2], a[4]}, sp[3] = {a[1], a[3], a[5]};
  ck_assert_str_eq(sh(tyto_slice_backward(sl, 3, S(4, 5, 6), st, sp)),
                   "[4,5,6]");
  ck_assert_str_eq(
      sh(tyto_slice_backward(tyto_input(g, TYTO_F32, 0, NULL, NULL), 0, NULL,
                             NULL, NULL)),
      "[]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(concat_split_stack) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 2, 2, 3), *b = IN(g, 2, 2, 5), *c = IN(g, 2, 2, 0);
  tyto_tensor *y = tyto_concat(3, (tyto_tensor *[]){a, b, c}, -1);
  ck_assert_str_eq(sh(y), "[2,8]");
  ck_assert_uint_eq(tyto_tensor_input_count(y), 3);
  ck_assert_ptr_eq(tyto_tensor_input(y, 2), c);
  ck_assert_str_eq(ia(y), "[1]");
  ck_assert_str_eq(sh(tyto_concat(1, &a, 0)), "[2,3]");
  ck_assert_str_eq(sh(tyto_concat(2, (tyto_tensor *[]){a, a}, 0)), "[4,3]");
  ck_assert_ptr_null(tyto_concat(0, NULL, 0));

  tyto_tensor *parts[3];
  tyto_tensor *x = IN(g, 2, 2, 6);
  tyto_split(x, 1, 3, NULL, parts);
  for (int i = 0; i < 3; i++) {
    ck_assert_str_eq(sh(parts[i]), "[2,2]");
    ck_assert_int_eq(tyto_tensor_op(parts[i]), TYTO_OP_SLICE);
    ck_assert_int_eq(tyto_tensor_iattrs(parts[i])[2], 2 * i);
  }
  tyto_split(x, -1, 3, S(1, 0, 5), parts);
  ck_assert_str_eq(sh(parts[0]), "[2,1]");
  ck_assert_str_eq(sh(parts[1]), "[2,0]");
  ck_assert_str_eq(sh(parts[2]), "[2,5]");
  ck_assert_str_eq(ia(parts[2]), "[0,1,1,1]");

  y = tyto_stack(3, (tyto_tensor *[]){a, a, a}, 0);
  ck_assert_str_eq(sh(y), "[3,2,3]");
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_CONCAT);
  ck_assert_str_eq(sh(tyto_stack(2, (tyto_tensor *[]){a, a}, -1)), "[2,3,2]");
  ck_assert_str_eq(sh(tyto_stack(2, (tyto_tensor *[]){a, a}, 1)), "[2,2,3]");
  tyto_tensor *s = tyto_scalar(g, TYTO_F32, 1);
  ck_assert_str_eq(sh(tyto_stack(2, (tyto_tensor *[]){s, s}, 0)), "[2]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(pad_tile_repeat_flip) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 2, 3, 4);
  tyto_tensor *y = tyto_pad(x, S(1, 0), S(2, 3), TYTO_PAD_CONSTANT, -1.0);
  ck_assert_str_eq(sh(y), "[6,7]");
  ck_assert_str_eq(ia(y), "[0,1,2,0,3]");
  ck_assert_double_eq(tyto_tensor_fattrs(y)[0], -1.0);
  y = tyto_pad(x, S(2, 3), S(2, 0), TYTO_PAD_REFLECT, 0);
  ck_assert_str_eq(sh(y), "[7,7]");
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], TYTO_PAD_REFLECT);
  ck_assert_str_eq(sh(tyto_pad(x, NULL, NULL, TYTO_PAD_REFLECT, 0)), "[3,4]");
  ck_assert_str_eq(sh(tyto_pad(IN(g, 1, 0), S(2), S(1), TYTO_PAD_CONSTANT, 0)),
                   "[3]");

  y = tyto_tile(x, 1, S(2));
  ck_assert_str_eq(sh(y), "[3,8]");
  ck_assert_str_eq(ia(y), "[1,2]");
  y = tyto_tile(x, 3, S(2, 1, 3));
  ck_assert_str_eq(sh(y), "[2,3,12]");
  ck_assert_str_eq(ia(y), "[2,1,3]");
  ck_assert_str_eq(sh(tyto_tile(x, 2, S(0, 1))), "[0,4]");

  y = tyto_repeat(x, 1, 3);
  ck_assert_str_eq(sh(y), "[3,12]");
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_RESHAPE);
  tyto_tensor *bc = tyto_tensor_input(y, 0);
  ck_assert_int_eq(tyto_tensor_op(bc), TYTO_OP_BROADCAST_TO);
  ck_assert_str_eq(sh(bc), "[3,4,3]");
  ck_assert_str_eq(sh(tyto_repeat(x, -2, 0)), "[0,4]");

  y = tyto_flip(x, 1, AX(-1));
  ck_assert_str_eq(sh(y), "[3,4]");
  ck_assert_str_eq(ia(y), "[1]");
  ck_assert_str_eq(ia(tyto_flip(x, 0, NULL)), "[0,1]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(indexing) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *data = IN(g, 2, 5, 3), *idx = IN(g, 2, 2, 4);
  tyto_tensor *y = tyto_gather(data, idx, 0);
  ck_assert_str_eq(sh(y), "[2,4,3]");
  ck_assert_str_eq(ia(y), "[0]");
  ck_assert_str_eq(sh(tyto_gather(data, idx, -1)), "[5,2,4]");
  ck_assert_str_eq(sh(tyto_gather(data, tyto_scalar(g, TYTO_F32, 1), 0)),
                   "[3]");
  y = tyto_index_select(data, 1, IN(g, 1, 7));
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_GATHER);
  ck_assert_str_eq(sh(y), "[5,7]");
  y = tyto_scatter_add(data, IN(g, 1, 4), IN(g, 2, 4, 3), 0);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_SCATTER_ADD);
  ck_assert_str_eq(sh(y), "[5,3]");
  ck_assert_str_eq(sh(tyto_scatter_add(data, idx, IN(g, 3, 5, 2, 4), 1)),
                   "[5,3]");
  y = tyto_one_hot(IN(g, 1, 8), 10);
  ck_assert_str_eq(sh(y), "[8,10]");
  ck_assert_str_eq(ia(y), "[10]");
  ck_assert_str_eq(sh(tyto_one_hot(tyto_scalar(g, TYTO_F32, 3), 4)), "[4]");
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_layout");
  TCase *tc = tcase_create("layout");
  tcase_add_test(tc, reshape_permute_broadcast);
  tcase_add_test(tc, slices);
  tcase_add_test(tc, slice_backward_shapes);
  tcase_add_test(tc, concat_split_stack);
  tcase_add_test(tc, pad_tile_repeat_flip);
  tcase_add_test(tc, indexing);
  suite_add_tcase(s, tc);
  return test_run(s);
}
