/* tyto_stop_gradient: x's value, with derivative zero in every mode and at
 * every order. Checked against closed forms at orders 1 to 3, forward
 * (tyto_diff), reverse (tyto_grad) and mixed, on a straight-through
 * estimator, through jacobian and hessian, and compiled with the graph
 * passes on and off (the op is then lowered as x itself). Float64. */
#include "ad/ad_test.h"

/* f(x) = x^3 * sg(x): treated as c x^3 with c = x's value, so
 * f' = 3 x^2 c, f'' = 6 x c, f''' = 6 c (and not 4x^3, 12x^2, 24x). */
START_TEST(orders_one_to_three) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  tyto_tensor *c = tyto_stop_gradient(x);
  ck_assert_str_eq(tyto_op_name(tyto_tensor_op(c)), "stop_gradient");
  tyto_tensor *f = tyto_mul(tyto_mul(tyto_mul(x, x), x), c);
  tyto_tensor *d[3][4];
  ad_orders(f, x, d);
  for (double v = -1.5; v <= 2.0; v += 0.875) {
    double want[4] = {v * v * v * v, 3 * v * v * v, 6 * v * v, 6 * v};
    ad_expect_orders(d, x, v, want);
  }
  /* A function of sg(x) alone has derivative zero at every order. */
  tyto_tensor *h = tyto_exp(c), *hd = h;
  for (int k = 0; k < 3; k++) {
    hd = k % 2 ? tyto_diff(hd, x) : tyto_grad(hd, x);
    ck_assert_double_eq(ad_at1(hd, x, 0.7), 0.0);
  }
  tyto_graph_free(g);
}
END_TEST

/* The straight-through estimator y = x + sg(round(x) - x): the value of
 * round(x), the gradient of the identity. */
START_TEST(straight_through) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(5), "x");
  tyto_tensor *y = tyto_add(x, tyto_stop_gradient(tyto_sub(tyto_round(x), x)));
  tyto_tensor *l = tyto_sum(tyto_mul(y, y), 0, NULL, 0);
  tyto_tensor *gr = tyto_grad(l, x), *jac = tyto_jacobian(y, x);
  const double xv[5] = {-1.7, -0.2, 0.4, 1.5, 2.6};
  const double *vals[1] = {xv};
  double yv[5], gv[5], jv[25];
  ad_eval(y, 1, &x, vals, yv);
  ad_eval(gr, 1, &x, vals, gv);
  ad_eval(jac, 1, &x, vals, jv);
  for (int i = 0; i < 5; i++) {
    ck_assert_double_eq(yv[i], round(xv[i]));
    /* d/dx sum(y^2) = 2 y dy/dx = 2 round(x). */
    ck_assert_double_eq_tol(gv[i], 2 * round(xv[i]), 1e-12);
    for (int j = 0; j < 5; j++)
      ck_assert_double_eq(jv[i * 5 + j], i == j ? 1.0 : 0.0);
  }
  tyto_graph_free(g);
}
END_TEST

/* hessian of sum(x^2 * sg(x)) is diag(2 x), not diag(6 x); gradient and
 * hessian of sum(sg(x)^2) are zero; sum(x^2 * sg(w)) has gradient 2 x w
 * in x (which finite differences confirm) and 0 in w (which they cannot:
 * they perturb w through the stop). */
START_TEST(through_hessian) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(4), "x");
  tyto_tensor *f =
      tyto_sum(tyto_mul(tyto_mul(x, x), tyto_stop_gradient(x)), 0, NULL, 0);
  tyto_tensor *hs = tyto_hessian(f, x);
  tyto_tensor *z = tyto_sum(tyto_square(tyto_stop_gradient(x)), 0, NULL, 0);
  tyto_tensor *hz = tyto_hessian(z, x), *gz = tyto_grad(z, x);
  const double xv[4] = {-1.25, 0.5, 1.0, 2.0};
  const double *vals[1] = {xv};
  double hv[16], hzv[16], gzv[4];
  ad_eval(hs, 1, &x, vals, hv);
  ad_eval(hz, 1, &x, vals, hzv);
  ad_eval(gz, 1, &x, vals, gzv);
  for (int i = 0; i < 4; i++) {
    ck_assert_double_eq(gzv[i], 0.0);
    for (int j = 0; j < 4; j++) {
      ck_assert_double_eq_tol(hv[i * 4 + j], i == j ? 2 * xv[i] : 0.0, 1e-12);
      ck_assert_double_eq(hzv[i * 4 + j], 0.0);
    }
  }
  tyto_tensor *w = ad_in(g, 1, AD_S(4), "w");
  tyto_tensor *fw =
      tyto_sum(tyto_mul(tyto_mul(x, x), tyto_stop_gradient(w)), 0, NULL, 0);
  double wv[4] = {0.3, -0.7, 1.1, 0.9}, gx[4], gw[4];
  tyto_tensor *both[2] = {x, w}, *gr[2];
  const double *bv[2] = {xv, wv};
  tyto_grads(fw, 2, both, gr);
  ad_eval(gr[0], 2, both, bv, gx);
  ad_eval(gr[1], 2, both, bv, gw);
  for (int i = 0; i < 4; i++) {
    ck_assert_double_eq_tol(gx[i], 2 * xv[i] * wv[i], 1e-12);
    ck_assert_double_eq(gw[i], 0.0);
    /* Central differences in x_i, w held. */
    double h = 1e-6, xp[4], xm[4], fp, fm;
    memcpy(xp, xv, sizeof xp);
    memcpy(xm, xv, sizeof xm);
    xp[i] += h;
    xm[i] -= h;
    const double *vp[2] = {xp, wv}, *vm[2] = {xm, wv};
    ad_eval(fw, 2, both, vp, &fp);
    ad_eval(fw, 2, both, vm, &fm);
    ck_assert_double_eq_tol(gx[i], (fp - fm) / (2 * h), 1e-6);
  }
  tyto_graph_free(g);
}
END_TEST

/* Compiled with every pass off, the op is lowered as x itself (no kernel):
 * the value is x's; with the passes on it is gone from the program. */
START_TEST(compiled_with_and_without_passes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  tyto_tensor *y = tyto_mul(tyto_stop_gradient(x), x);
  for (int off = 0; off < 2; off++) {
    tyto_program_options po;
    tyto_program_options_init(&po);
    po.passes_off = off ? TYTO_PASS_ALL : 0;
    tyto_program *p = NULL;
    ck_assert_msg(tyto_program_compile(ad_ctx, g, 1, &y, &po, &p) == TYTO_OK,
                  "%s", tyto_errmsg());
    double xv[3] = {1.5, -2, 0.25}, out[3];
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_output(p, 0, out, sizeof out), TYTO_OK);
    for (int i = 0; i < 3; i++)
      ck_assert_double_eq(out[i], xv[i] * xv[i]);
    tyto_program_free(p);
  }
  /* A constant stopped folds to the constant. */
  tyto_tensor *s = tyto_input(g, TYTO_F64, 0, NULL, "s");
  tyto_tensor *k = tyto_stop_gradient(tyto_scalar(g, TYTO_F64, 2.5));
  ck_assert_double_eq(ad_at1(tyto_mul(k, s), s, 2), 5.0);
  ck_assert_double_eq(ad_at1(tyto_grad(tyto_mul(k, s), s), s, 2), 2.5);
  tyto_graph_free(g);
}
END_TEST

START_TEST(bad_arguments) {
  ck_assert_ptr_null(tyto_stop_gradient(NULL));
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 1, AD_S(2), "a");
  tyto_tensor *bad = tyto_reshape(a, 1, AD_S(3));
  ck_assert_int_eq(tyto_graph_status(g), TYTO_ERR_INVALID_ARGUMENT);
  /* The error tensor passes through without a new message. */
  ck_assert_ptr_eq(tyto_stop_gradient(bad), bad);
  ck_assert_msg(strstr(tyto_graph_error_message(g), "reshape"), "%s",
                tyto_graph_error_message(g));
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("stop_gradient");
  TCase *tc = tcase_create("stop_gradient");
  ad_fixture(tc);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, orders_one_to_three);
  tcase_add_test(tc, straight_through);
  tcase_add_test(tc, through_hessian);
  tcase_add_test(tc, compiled_with_and_without_passes);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return test_run(s);
}
