/* Derivatives of the neural ops (softmax, log_softmax, conv2d, pools) and of
 * their derivative ops against central differences (tyto_gradcheck in f64,
 * reverse and forward mode), second derivatives through gradients of
 * gradients and Hessian-vector products, and max_pool2d's tie convention
 * exactly. */
#include "ad_test.h"

#define MAXIN 4

/* Distinct values in [-1, 1) in a scrambled order, at least 2/n apart: no
 * pooling window has a tie, and steps of 1e-6 never change its maximum. */
static double *distinct(const tyto_tensor *t, int64_t mult) {
  int64_t n = tyto_tensor_numel(t);
  double *v = malloc((size_t)n * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++)
    v[i] = -1.0 + 2.0 * (double)((i * mult) % n) / (double)n;
  return v;
}

/* Checks y against differences with respect to n inputs whose values are
 * given (NULL: random ones). */
static void checkn(tyto_tensor *y, int n, tyto_tensor *const *xs,
                   double *const *given, double rtol, double atol,
                   uint64_t seed) {
  double *v[MAXIN];
  for (int k = 0; k < n; k++)
    v[k] = given && given[k] ? given[k] : ad_vals(xs[k], seed + (uint64_t)k);
  ad_check(y, (size_t)n, xs, v, rtol, atol);
  for (int k = 0; k < n; k++)
    if (!(given && given[k]))
      free(v[k]);
}

static void check1(tyto_tensor *y, tyto_tensor *x, uint64_t seed) {
  checkn(y, 1, &x, NULL, 0, 0, seed);
}

/* Tolerances for derivatives of derivatives: a few more roundings. */
#define RTOL2 1e-5
#define ATOL2 1e-7

START_TEST(softmax_and_log_softmax) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(3, 4), "x");
  check1(tyto_softmax(x, 0), x, 1);
  check1(tyto_softmax(x, -1), x, 2);
  check1(tyto_log_softmax(x, 0), x, 3);
  check1(tyto_log_softmax(x, -1), x, 4);
  tyto_tensor *x3 = ad_in(g, 3, AD_S(2, 3, 2), "x3");
  check1(tyto_softmax(x3, 1), x3, 5);
  check1(tyto_log_softmax(x3, 1), x3, 6);
  /* Closed form: the rows of log_softmax's Jacobian sum to zero, so the
   * gradient of sum(softmax(x)) over the softmax axis is zero too. */
  tyto_tensor *gx = tyto_grad(tyto_sum(tyto_softmax(x, -1), 0, NULL, 0), x);
  double v[12], out[12];
  const double *vs[1] = {v};
  ad_fill(v, 12, -2, 2, 7);
  ad_eval(gx, 1, &x, vs, out);
  for (int i = 0; i < 12; i++)
    ck_assert_double_eq_tol(out[i], 0.0, 1e-15);
  tyto_graph_free(g);
}
END_TEST

/* conv2d wrt x, w and bias, for one set of parameters. */
static void check_conv(const int64_t *xs_shape, const int64_t *ws_shape,
                       const tyto_conv2d_params *p, uint64_t seed) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 4, xs_shape, "x"), *w = ad_in(g, 4, ws_shape, "w");
  tyto_tensor *b = ad_in(g, 1, AD_S(ws_shape[0]), "b");
  tyto_tensor *xs[3] = {x, w, b};
  checkn(tyto_conv2d(x, w, b, p), 3, xs, NULL, 0, 0, seed);
  checkn(tyto_conv2d(x, w, NULL, p), 2, xs, NULL, 0, 0, seed + 10);
  /* each input alone, the others fixed (constants) */
  double *wv = ad_vals(w, seed + 20);
  tyto_tensor *wc = tyto_constant(g, TYTO_F64, 4, ws_shape, wv);
  check1(tyto_conv2d(x, wc, NULL, p), x, seed + 30);
  tyto_tensor *bx[2] = {b, w};
  tyto_tensor *xc = tyto_full(g, TYTO_F64, 4, xs_shape, 0.25);
  checkn(tyto_conv2d(xc, w, b, p), 2, bx, NULL, 0, 0, seed + 40);
  free(wv);
  tyto_graph_free(g);
}

START_TEST(conv2d_parameters) {
  const int64_t *xs = AD_S(2, 4, 7, 6);
  check_conv(xs, AD_S(6, 4, 3, 2), NULL, 100);
  tyto_conv2d_params p = {{2, 1}, {0, 0}, {1, 1}, 1};
  check_conv(xs, AD_S(6, 4, 3, 2), &p, 200); /* stride */
  p = (tyto_conv2d_params){{1, 1}, {1, 2}, {1, 1}, 1};
  check_conv(xs, AD_S(6, 4, 3, 2), &p, 300); /* padding */
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {2, 1}, 1};
  check_conv(xs, AD_S(6, 4, 3, 2), &p, 400); /* dilation */
  p = (tyto_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 2};
  check_conv(xs, AD_S(6, 2, 3, 2), &p, 500); /* groups */
  /* all together; stride 3 on the width leaves input columns unused */
  p = (tyto_conv2d_params){{2, 3}, {2, 1}, {1, 2}, 2};
  check_conv(xs, AD_S(6, 2, 3, 2), &p, 600);
}
END_TEST

START_TEST(pools) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 4, AD_S(2, 3, 6, 7), "x");
  double *xv = distinct(x, 37); /* 252 elements, 37 coprime */
  double *given[1] = {xv};
  checkn(tyto_max_pool2d(x, 2, 2, 2, 2, 0, 0), 1, &x, given, 0, 0, 1);
  checkn(tyto_max_pool2d(x, 3, 2, 2, 1, 1, 1), 1, &x, given, 0, 0, 2);
  checkn(tyto_max_pool2d(x, 3, 3, 1, 2, 1, 0), 1, &x, given, 0, 0, 3);
  check1(tyto_avg_pool2d(x, 2, 2, 2, 2, 0, 0), x, 4);
  check1(tyto_avg_pool2d(x, 3, 2, 2, 1, 1, 1), x, 5);
  check1(tyto_avg_pool2d(x, 3, 3, 2, 3, 1, 1), x, 6);
  free(xv);
  tyto_graph_free(g);
}
END_TEST

/* All of the adjoint to the first maximum (row-major) of each window, in
 * both modes. */
START_TEST(max_pool_ties) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 4, AD_S(1, 1, 2, 3), "x");
  tyto_tensor *y = tyto_max_pool2d(x, 2, 2, 1, 1, 0, 0); /* [1,1,1,2] */
  tyto_tensor *gx = tyto_grad(tyto_sum(y, 0, NULL, 0), x);
  tyto_tensor *t = tyto_constant(g, TYTO_F64, 4, AD_S(1, 1, 2, 3),
                                 (const double[]){10, 20, 30, 40, 50, 60});
  tyto_tensor *jv = tyto_jacobianv(y, x, t);
  double xv[6] = {1, 3, 3, 2, 3, 0}, out[6];
  const double *xs[1] = {xv};
  ad_eval(gx, 1, &x, xs, out);
  const double want[6] = {0, 2, 0, 0, 0, 0};
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(out[i], want[i]);
  ad_eval(jv, 1, &x, xs, out);
  ck_assert_double_eq(out[0], 20.0);
  ck_assert_double_eq(out[1], 20.0);
  /* a window of equal values, and padding that never wins */
  double flat[6] = {5, 5, 5, 5, 5, 5};
  const double *fs[1] = {flat};
  ad_eval(gx, 1, &x, fs, out);
  const double want2[6] = {1, 1, 0, 0, 0, 0};
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(out[i], want2[i]);
  double neg[6] = {-1, -1, -1, -1, -1, -1};
  const double *ns[1] = {neg};
  tyto_tensor *gp =
      tyto_grad(tyto_sum(tyto_max_pool2d(x, 3, 3, 2, 2, 1, 1), 0, NULL, 0), x);
  ad_eval(gp, 1, &x, ns, out); /* windows rows -1..1, cols -1..1 and 1..3 */
  const double want3[6] = {1, 1, 0, 0, 0, 0};
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(out[i], want3[i]);
  tyto_graph_free(g);
}
END_TEST

/* The derivative ops as functions of their own inputs: their rules are
 * written with each other. */
START_TEST(derivative_ops) {
  tyto_graph *g = tyto_graph_new();
  tyto_conv2d_params p = {{2, 3}, {2, 1}, {1, 2}, 2};
  /* conv2d [2,4,7,6] * [6,2,3,2] gives [2,6,5,2] */
  tyto_tensor *dy = ad_in(g, 4, AD_S(2, 6, 5, 2), "dy");
  tyto_tensor *w = ad_in(g, 4, AD_S(6, 2, 3, 2), "w");
  tyto_tensor *x = ad_in(g, 4, AD_S(2, 4, 7, 6), "x");
  tyto_tensor *dw[2] = {dy, w}, *xd[2] = {x, dy};
  checkn(tyto_conv2d_backward_data(dy, w, 7, 6, &p), 2, dw, NULL, 0, 0, 1);
  checkn(tyto_conv2d_backward_filter(x, dy, 3, 2, &p), 2, xd, NULL, 0, 0, 2);
  /* the pools: x has no tie and a zero derivative where it is not t */
  tyto_tensor *px = ad_in(g, 4, AD_S(2, 3, 6, 7), "px");
  tyto_tensor *pdy = ad_in(g, 4, AD_S(2, 3, 3, 4), "pdy"); /* 3x2 s2x2 p1x1 */
  tyto_tensor *pt = ad_in(g, 4, AD_S(2, 3, 6, 7), "pt");
  double *pxv = distinct(px, 37);
  double *given[2] = {pxv, NULL};
  tyto_tensor *a[2] = {px, pdy}, *b[2] = {px, pt};
  checkn(tyto_max_pool2d_backward(px, pdy, 3, 2, 2, 2, 1, 1), 2, a, given, 0, 0,
         3);
  checkn(tyto_max_pool2d_select(px, pt, 3, 2, 2, 2, 1, 1), 2, b, given, 0, 0,
         4);
  check1(tyto_avg_pool2d_backward(pdy, 6, 7, 3, 2, 2, 2, 1, 1), pdy, 5);
  free(pxv);
  tyto_graph_free(g);
}
END_TEST

/* Gradients of gradients: each gradient is checked as a function of every
 * input, which differentiates the derivative ops in both arguments. */
START_TEST(second_derivatives) {
  tyto_graph *g = tyto_graph_new();
  tyto_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
  tyto_tensor *x = ad_in(g, 4, AD_S(1, 4, 6, 5), "x");
  tyto_tensor *w = ad_in(g, 4, AD_S(4, 2, 3, 2), "w");
  tyto_tensor *b = ad_in(g, 1, AD_S(4), "b");
  tyto_tensor *xs[3] = {x, w, b}, *gr[3];
  tyto_grads(ad_weighted_square(tyto_conv2d(x, w, b, &p), 1), 3, xs, gr);
  for (int k = 0; k < 3; k++)
    checkn(gr[k], 3, xs, NULL, RTOL2, ATOL2, 10 + 10 * (uint64_t)k);
  /* pools */
  tyto_tensor *px = ad_in(g, 4, AD_S(2, 3, 6, 7), "px");
  double *pxv = distinct(px, 37);
  double *given[1] = {pxv};
  checkn(tyto_grad(ad_weighted_square(tyto_max_pool2d(px, 3, 2, 2, 2, 1, 1), 2),
                   px),
         1, &px, given, RTOL2, ATOL2, 40);
  checkn(tyto_grad(ad_weighted_square(tyto_avg_pool2d(px, 3, 2, 2, 2, 1, 1), 3),
                   px),
         1, &px, NULL, RTOL2, ATOL2, 41);
  /* softmax and log_softmax are not linear: their gradients alone */
  tyto_tensor *s = ad_in(g, 2, AD_S(3, 4), "s");
  double *c = ad_vals(s, 50);
  tyto_tensor *k = tyto_constant(g, TYTO_F64, 2, AD_S(3, 4), c);
  checkn(tyto_grad(tyto_sum(tyto_mul(k, tyto_softmax(s, -1)), 0, NULL, 0), s),
         1, &s, NULL, RTOL2, ATOL2, 51);
  checkn(
      tyto_grad(tyto_sum(tyto_mul(k, tyto_log_softmax(s, 0)), 0, NULL, 0), s),
      1, &s, NULL, RTOL2, ATOL2, 52);
  free(c);
  free(pxv);
  tyto_graph_free(g);
}
END_TEST

/* A small CNN: conv2d, max pool, avg pool, log_softmax over the flattened
 * features. Its Hessian-vector product in w (forward over reverse) is
 * checked against central differences of its gradient, and the gradient
 * as a function of (x, w) by the checker. */
START_TEST(cnn_hessian) {
  tyto_graph *g = tyto_graph_new();
  tyto_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  tyto_tensor *x = ad_in(g, 4, AD_S(2, 2, 8, 8), "x");
  tyto_tensor *w = ad_in(g, 4, AD_S(3, 2, 3, 3), "w");
  tyto_tensor *h = tyto_conv2d(x, w, NULL, &p); /* [2,3,8,8] */
  h = tyto_max_pool2d(h, 2, 2, 2, 2, 0, 0);     /* [2,3,4,4] */
  h = tyto_avg_pool2d(h, 3, 3, 1, 1, 1, 1);     /* [2,3,4,4] */
  h = tyto_log_softmax(tyto_reshape(h, 2, AD_S(2, 48)), -1);
  double *c = ad_vals(h, 60);
  tyto_tensor *y = tyto_sum(
      tyto_mul(tyto_constant(g, TYTO_F64, 2, AD_S(2, 48), c), h), 0, NULL, 0);
  free(c);
  double *xv = ad_vals(x, 61), *wv = ad_vals(w, 62), *vv = ad_vals(w, 63);
  tyto_tensor *v = tyto_constant(g, TYTO_F64, 4, AD_S(3, 2, 3, 3), vv);
  tyto_tensor *hv = tyto_hessianv(y, w, v), *gw = tyto_grad(y, w);
  double hva[54], gp[54], gm[54], wp[54];
  const double *vs[2] = {xv, wp};
  tyto_tensor *both[2] = {x, w};
  const double eps = 1e-5;
  for (int i = 0; i < 54; i++)
    wp[i] = wv[i];
  ad_eval(hv, 2, both, vs, hva);
  for (int i = 0; i < 54; i++)
    wp[i] = wv[i] + eps * vv[i];
  ad_eval(gw, 2, both, vs, gp);
  for (int i = 0; i < 54; i++)
    wp[i] = wv[i] - eps * vv[i];
  ad_eval(gw, 2, both, vs, gm);
  for (int i = 0; i < 54; i++) {
    double fd = (gp[i] - gm[i]) / (2 * eps);
    ck_assert_msg(fabs(hva[i] - fd) <= 1e-7 + 1e-5 * fabs(fd),
                  "H.v element %d: %.10g vs differences %.10g", i, hva[i], fd);
  }
  double *given[2] = {xv, wv};
  checkn(gw, 2, both, given, RTOL2, ATOL2, 64);
  free(xv);
  free(wv);
  free(vv);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ad_grad_nn");
  TCase *tc = tcase_create("nn");
  ad_fixture(tc);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, softmax_and_log_softmax);
  tcase_add_test(tc, conv2d_parameters);
  tcase_add_test(tc, pools);
  tcase_add_test(tc, max_pool_ties);
  tcase_add_test(tc, derivative_ops);
  tcase_add_test(tc, second_derivatives);
  tcase_add_test(tc, cnn_hessian);
  suite_add_tcase(s, tc);
  return test_run(s);
}
