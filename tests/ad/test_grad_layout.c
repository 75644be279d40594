/* Derivatives of the layout and indexing ops against central differences
 * (tyto_gradcheck in f64, reverse and forward mode), second derivatives
 * through gradients of gradients, and exact values where a closed form is
 * at hand. */
#include "ad_test.h"

/* Checks y's derivatives with respect to the single input x at random
 * values (default tolerances: the ops are linear, so the differences are
 * exact up to rounding). */
static void check1(tyto_tensor *y, tyto_tensor *x, uint64_t seed) {
  double *v = ad_vals(x, seed);
  const double *vs[1] = {v};
  ad_check(y, 1, &x, vs, 0, 0);
  free(v);
}

/* The gradient of ad_weighted_square(f(x)) is checked as a function of x. */
static void check_second(tyto_tensor *fx, tyto_tensor *x, uint64_t seed) {
  tyto_tensor *gr = tyto_grad(ad_weighted_square(fx, seed), x);
  check1(gr, x, seed + 1);
}

START_TEST(reshape_permute_broadcast) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 3, AD_S(2, 3, 4), "x");
  check1(tyto_reshape(x, 2, AD_S(4, 6)), x, 1);
  check1(tyto_reshape(x, 1, AD_S(24)), x, 2);
  check1(tyto_permute(x, 3, (const int[]){2, 0, 1}), x, 3);
  check1(tyto_transpose(x, 0, 2), x, 4);
  tyto_tensor *b = ad_in(g, 2, AD_S(3, 1), "b");
  check1(tyto_broadcast_to(b, 3, AD_S(2, 3, 4)), b, 5);
  tyto_tensor *s = ad_in(g, 0, NULL, "s");
  check1(tyto_broadcast_to(s, 2, AD_S(2, 3)), s, 6);
  /* Closed form: every element of b is copied 8 times. */
  tyto_tensor *gb = tyto_grad(
      tyto_sum(tyto_broadcast_to(b, 3, AD_S(2, 3, 4)), 0, NULL, 0), b);
  double bv[3] = {1, 2, 3}, out[3];
  const double *bvs[1] = {bv};
  ad_eval(gb, 1, &b, bvs, out);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(out[i], 8.0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(slice_steps_and_clamping) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 3, AD_S(5, 7, 6), "x");
  /* axis 0: 1, 3; axis 1: 6, 4, 2; axis 2: 4 down to 0 (stop clamped) */
  tyto_tensor *y =
      tyto_slice(x, AD_S(1, TYTO_END, -2), AD_S(5, 0, -100), AD_S(2, -2, -1));
  ck_assert_int_eq(tyto_tensor_numel(y), 2 * 3 * 5);
  check1(y, x, 10);
  tyto_tensor *x2 = ad_in(g, 2, AD_S(6, 4), "x2");
  /* both bounds clamped: rows 0, 3; columns 3 down to 0 */
  tyto_tensor *y2 =
      tyto_slice(x2, AD_S(-100, 10), AD_S(100, -100), AD_S(3, -1));
  ck_assert_int_eq(tyto_tensor_numel(y2), 2 * 4);
  check1(y2, x2, 11);
  /* a slice with a negative step over the whole axis, to index 0 */
  check1(tyto_slice_axis(x2, 0, TYTO_END, TYTO_END, -2), x2, 12);
  /* Closed form: x2[0::3, ::-1] picks 8 elements once each. */
  tyto_tensor *gx = tyto_grad(tyto_sum(y2, 0, NULL, 0), x2);
  double v[24], out[24];
  const double *vs[1] = {v};
  ad_fill(v, 24, -1, 1, 3);
  ad_eval(gx, 1, &x2, vs, out);
  for (int i = 0; i < 24; i++)
    ck_assert_double_eq(out[i], (i / 4) % 3 == 0 ? 1.0 : 0.0);
  /* Empty slices (one by a negative step) padded back to elements: the
   * derivatives are zero in both modes. */
  tyto_tensor *u = ad_in(g, 1, AD_S(4), "u");
  tyto_tensor *e0 = tyto_slice_axis(u, 0, 3, 1, 1);
  tyto_tensor *e1 = tyto_slice_axis(u, 0, 0, 3, -1);
  ck_assert_int_eq(tyto_tensor_numel(e0) + tyto_tensor_numel(e1), 0);
  tyto_tensor *pe[3] = {tyto_pad(e0, AD_S(1), AD_S(1), TYTO_PAD_CONSTANT, 2),
                        e1, u};
  tyto_tensor *ye = tyto_sum(tyto_concat(3, pe, 0), 0, NULL, 0);
  double uv[4] = {1, 2, 3, 4}, uo[4];
  const double *us[1] = {uv};
  ad_eval(tyto_grad(ye, u), 1, &u, us, uo);
  for (int i = 0; i < 4; i++)
    ck_assert_double_eq(uo[i], 1.0);
  tyto_tensor *pj = tyto_pad(e1, AD_S(2), AD_S(0), TYTO_PAD_CONSTANT, 2);
  ad_eval(tyto_jacobianv(pj, u, tyto_full(g, TYTO_F64, 1, AD_S(4), 1.0)), 1, &u,
          us, uo);
  ck_assert_double_eq(uo[0], 0.0);
  ck_assert_double_eq(uo[1], 0.0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(concat_and_split) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = ad_in(g, 2, AD_S(2, 3), "a"),
              *b = ad_in(g, 2, AD_S(2, 1), "b"),
              *c = ad_in(g, 2, AD_S(2, 4), "c");
  tyto_tensor *parts[3] = {a, b, c};
  tyto_tensor *y = tyto_concat(3, parts, 1);
  double *va = ad_vals(a, 20), *vb = ad_vals(b, 21), *vc = ad_vals(c, 22);
  const double *vs[3] = {va, vb, vc};
  ad_check(y, 3, parts, vs, 0, 0);
  /* along axis 0 with other extents */
  tyto_tensor *d = ad_in(g, 2, AD_S(3, 3), "d");
  tyto_tensor *p2[3] = {a, d, a};
  tyto_tensor *y2 = tyto_concat(3, p2, 0);
  tyto_tensor *xs2[2] = {a, d};
  double *vd = ad_vals(d, 23);
  const double *vs2[2] = {va, vd};
  ad_check(y2, 2, xs2, vs2, 0, 0);
  /* split (slices), reordered and one part unused */
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 6), "x"), *sp[3];
  tyto_split(x, 1, 3, AD_S(1, 3, 2), sp);
  tyto_tensor *re[2] = {sp[2], sp[0]};
  check1(tyto_concat(2, re, 1), x, 24);
  free(va);
  free(vb);
  free(vc);
  free(vd);
  tyto_graph_free(g);
}
END_TEST

START_TEST(pad_constant_and_reflect) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(3, 4), "x");
  check1(tyto_pad(x, AD_S(1, 0), AD_S(2, 3), TYTO_PAD_CONSTANT, 1.5), x, 30);
  tyto_tensor *r = ad_in(g, 2, AD_S(4, 5), "r");
  check1(tyto_pad(r, AD_S(2, 1), AD_S(3, 4), TYTO_PAD_REFLECT, 0), r, 31);
  check1(tyto_pad(r, AD_S(0, 4), AD_S(1, 0), TYTO_PAD_REFLECT, 0), r, 32);
  tyto_tensor *r3 = ad_in(g, 3, AD_S(3, 2, 4), "r3");
  check1(tyto_pad(r3, AD_S(2, 0, 1), AD_S(1, 0, 3), TYTO_PAD_REFLECT, 0), r3,
         33);
  /* Closed form: reflect-padding [a b c] by 2 on both sides gives
   * [c b a b c b a], so the gradient of its sum is [2 3 2]. */
  tyto_tensor *v = ad_in(g, 1, AD_S(3), "v");
  tyto_tensor *gv = tyto_grad(
      tyto_sum(tyto_pad(v, AD_S(2), AD_S(2), TYTO_PAD_REFLECT, 0), 0, NULL, 0),
      v);
  double vv[3] = {1, 2, 3}, out[3];
  const double *vs[1] = {vv};
  ad_eval(gv, 1, &v, vs, out);
  ck_assert_double_eq(out[0], 2.0);
  ck_assert_double_eq(out[1], 3.0);
  ck_assert_double_eq(out[2], 2.0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(tile_and_flip) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  check1(tyto_tile(x, 2, AD_S(2, 3)), x, 40);
  /* reps adding leading axes, some of them 1 */
  check1(tyto_tile(x, 4, AD_S(2, 1, 3, 2)), x, 41);
  /* fewer reps than axes: leading 1s */
  tyto_tensor *x3 = ad_in(g, 3, AD_S(2, 1, 3), "x3");
  check1(tyto_tile(x3, 2, AD_S(4, 2)), x3, 42);
  /* three tiled axes of extent above 1 and a new one */
  tyto_tensor *x4 = ad_in(g, 3, AD_S(2, 3, 2), "x4");
  check1(tyto_tile(x4, 4, AD_S(2, 2, 1, 3)), x4, 43);
  check1(tyto_flip(x3, 2, (const int[]){0, 2}), x3, 44);
  check1(tyto_flip(x, 0, NULL), x, 45);
  /* Closed form: each element appears 2*1*3*2 = 12 times. */
  tyto_tensor *gx =
      tyto_grad(tyto_sum(tyto_tile(x, 4, AD_S(2, 1, 3, 2)), 0, NULL, 0), x);
  double v[6], out[6];
  const double *vs[1] = {v};
  ad_fill(v, 6, -1, 1, 4);
  ad_eval(gx, 1, &x, vs, out);
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(out[i], 12.0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(gather_and_scatter_add) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *d = ad_in(g, 2, AD_S(5, 3), "d");
  tyto_tensor *i0 =
      tyto_constant(g, TYTO_F64, 1, AD_S(4), (const double[]){0, 2, 2, 4});
  check1(tyto_index_select(d, 0, i0), d, 50);
  tyto_tensor *d1 = ad_in(g, 2, AD_S(3, 5), "d1");
  tyto_tensor *i1 = tyto_constant(g, TYTO_F64, 2, AD_S(2, 3),
                                  (const double[]){1, 1, 4, 0, 3, 1});
  check1(tyto_gather(d1, i1, 1), d1, 51);
  check1(tyto_index_select(d1, 1, i0), d1, 52);
  /* scatter_add wrt base and updates, with a repeated index */
  tyto_tensor *base = ad_in(g, 2, AD_S(5, 3), "base");
  tyto_tensor *up = ad_in(g, 2, AD_S(4, 3), "up");
  tyto_tensor *i2 =
      tyto_constant(g, TYTO_F64, 1, AD_S(4), (const double[]){1, 3, 1, 0});
  tyto_tensor *y = tyto_scatter_add(base, i2, up, 0);
  tyto_tensor *xs[2] = {base, up};
  double *vb = ad_vals(base, 53), *vu = ad_vals(up, 54);
  const double *vs[2] = {vb, vu};
  ad_check(y, 2, xs, vs, 0, 0);
  /* along axis 1 of a rank-3 base */
  tyto_tensor *b3 = ad_in(g, 3, AD_S(2, 4, 2), "b3");
  tyto_tensor *u3 = ad_in(g, 3, AD_S(2, 3, 2), "u3");
  tyto_tensor *i3 =
      tyto_constant(g, TYTO_F64, 1, AD_S(3), (const double[]){2, 2, 0});
  tyto_tensor *xs3[2] = {b3, u3};
  double *vb3 = ad_vals(b3, 55), *vu3 = ad_vals(u3, 56);
  const double *vs3[2] = {vb3, vu3};
  ad_check(tyto_scatter_add(b3, i3, u3, 1), 2, xs3, vs3, 0, 0);
  /* Closed form: index_select of rows 0, 2, 2, 4 counts row 2 twice. */
  tyto_tensor *gd =
      tyto_grad(tyto_sum(tyto_index_select(d, 0, i0), 0, NULL, 0), d);
  double dv[15], out[15];
  const double *dvs[1] = {dv};
  ad_fill(dv, 15, -1, 1, 5);
  ad_eval(gd, 1, &d, dvs, out);
  const double rows[5] = {1, 0, 2, 0, 1};
  for (int i = 0; i < 15; i++)
    ck_assert_double_eq(out[i], rows[i / 3]);
  free(vb);
  free(vu);
  free(vb3);
  free(vu3);
  tyto_graph_free(g);
}
END_TEST

START_TEST(one_hot_is_constant) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  tyto_tensor *y = tyto_sum(
      tyto_mul(tyto_one_hot(x, 4), tyto_full(g, TYTO_F64, 2, AD_S(3, 4), 2.0)),
      0, NULL, 0);
  tyto_tensor *gx = tyto_grad(y, x);
  tyto_tensor *v = tyto_full(g, TYTO_F64, 1, AD_S(3), 1.0);
  tyto_tensor *jv = tyto_jacobianv(y, x, v);
  double xv[3] = {0, 3, 1}, out[3];
  const double *xs[1] = {xv};
  ad_eval(gx, 1, &x, xs, out);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(out[i], 0.0);
  ad_eval(jv, 1, &x, xs, out);
  ck_assert_double_eq(out[0], 0.0);
  tyto_graph_free(g);
}
END_TEST

/* Gradients of gradients: the adjoint ops' own rules (slice_backward for
 * slice, slices/flips/pads for pad, scatter_add for gather, gather for
 * scatter_add, sums for tile and broadcast_to). */
START_TEST(second_derivatives) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 3, AD_S(5, 7, 6), "x");
  check_second(
      tyto_slice(x, AD_S(1, TYTO_END, -2), AD_S(5, 0, -100), AD_S(2, -2, -1)),
      x, 60);
  tyto_tensor *r = ad_in(g, 2, AD_S(4, 5), "r");
  check_second(tyto_pad(r, AD_S(2, 1), AD_S(3, 4), TYTO_PAD_REFLECT, 0), r, 62);
  check_second(tyto_pad(r, AD_S(1, 0), AD_S(0, 2), TYTO_PAD_CONSTANT, 0.5), r,
               64);
  tyto_tensor *d = ad_in(g, 2, AD_S(5, 3), "d");
  tyto_tensor *i0 =
      tyto_constant(g, TYTO_F64, 1, AD_S(4), (const double[]){0, 2, 2, 4});
  check_second(tyto_index_select(d, 0, i0), d, 66);
  check_second(
      tyto_scatter_add(
          d, i0, tyto_tile(tyto_slice_axis(d, 0, 0, 1, 1), 2, AD_S(4, 1)), 0),
      d, 68);
  tyto_tensor *t = ad_in(g, 2, AD_S(2, 3), "t");
  check_second(tyto_tile(t, 3, AD_S(2, 1, 2)), t, 70);
  check_second(
      tyto_broadcast_to(tyto_flip(t, 1, (const int[]){1}), 3, AD_S(2, 2, 3)), t,
      72);
  /* Hessian-vector product of a closed form: for y = sum(x[::2]^2), H v is
   * 2 v on the even elements, 0 elsewhere. */
  tyto_tensor *u = ad_in(g, 1, AD_S(5), "u");
  tyto_tensor *s = tyto_slice_axis(u, 0, 0, TYTO_END, 2);
  tyto_tensor *y = tyto_sum(tyto_mul(s, s), 0, NULL, 0);
  double vv[5] = {1, 2, 3, 4, 5}, uv[5] = {0.5, -1, 2, 0, 3}, out[5];
  tyto_tensor *vt = tyto_constant(g, TYTO_F64, 1, AD_S(5), vv);
  const double *us[1] = {uv};
  ad_eval(tyto_hessianv(y, u, vt), 1, &u, us, out);
  for (int i = 0; i < 5; i++)
    ck_assert_double_eq(out[i], i % 2 ? 0.0 : 2 * vv[i]);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ad_grad_layout");
  TCase *tc = tcase_create("layout");
  ad_fixture(tc);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reshape_permute_broadcast);
  tcase_add_test(tc, slice_steps_and_clamping);
  tcase_add_test(tc, concat_and_split);
  tcase_add_test(tc, pad_constant_and_reflect);
  tcase_add_test(tc, tile_and_flip);
  tcase_add_test(tc, gather_and_scatter_add);
  tcase_add_test(tc, one_hot_is_constant);
  tcase_add_test(tc, second_derivatives);
  suite_add_tcase(s, tc);
  return test_run(s);
}
