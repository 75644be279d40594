/* Batched derivatives: tyto_diff_elementwise, tyto_jacobian_batched and
 * tyto_hessian_batched against closed forms and against the per-point
 * tyto_jacobian and tyto_hessian; the sweep counts (graph sizes) that make
 * them worth having; and the structural checks that refuse a y whose
 * elements or rows are not apart, each naming the op. Float64. */
#include "ad/ad_test.h"

#include <tyto/ops.h>

/* f(x) = x sin x + exp(-x^2): f' and f'' at every element, one sweep each,
 * nested for the second. */
START_TEST(elementwise_first_and_second) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(3, 4), "x");
  tyto_tensor *f =
      tyto_add(tyto_mul(x, tyto_sin(x)), tyto_exp(tyto_neg(tyto_square(x))));
  tyto_tensor *d1 = tyto_diff_elementwise(f, x);
  tyto_tensor *d2 = tyto_diff_elementwise(d1, x);
  double *xv = ad_vals(x, 5), g1[12], g2[12];
  const double *vals[1] = {xv};
  ad_eval(d1, 1, &x, vals, g1);
  ad_eval(d2, 1, &x, vals, g2);
  for (int i = 0; i < 12; i++) {
    double v = xv[i], e = exp(-v * v);
    double w1 = sin(v) + v * cos(v) - 2 * v * e;
    double w2 = 2 * cos(v) - v * sin(v) + (4 * v * v - 2) * e;
    ck_assert_double_eq_tol(g1[i], w1, 1e-12);
    ck_assert_double_eq_tol(g2[i], w2, 1e-12);
  }
  free(xv);
  tyto_graph_free(g);
}
END_TEST

/* y = tanh(x W + c), x [B, 3] (W [3, 2], c [2] constants): row b's
 * Jacobian is diag(1 - y_b^2) W^T; and with W [3, 5] (more outputs than
 * inputs: forward sweeps) the same formula. */
START_TEST(jacobian_rows) {
  for (int wide = 0; wide < 2; wide++) {
    int m = wide ? 5 : 2;
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = ad_in(g, 2, AD_S(4, 3), "x");
    double wv[15], cv[5];
    ad_fill(wv, 3 * m, -1, 1, 9);
    ad_fill(cv, m, -0.5, 0.5, 10);
    tyto_tensor *w = tyto_constant(g, TYTO_F64, 2, AD_S(3, m), wv);
    tyto_tensor *c = tyto_constant(g, TYTO_F64, 1, AD_S(m), cv);
    tyto_tensor *y = tyto_tanh(tyto_add(tyto_matmul(x, w, 0, 0), c));
    tyto_tensor *j = tyto_jacobian_batched(y, x);
    ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                  tyto_graph_error_message(g));
    ck_assert_int_eq(tyto_tensor_rank(j), 3);
    ck_assert_int_eq(tyto_tensor_shape(j)[1], m);
    double *xv = ad_vals(x, 11), yv[20], jv[60];
    const double *vals[1] = {xv};
    ad_eval(y, 1, &x, vals, yv);
    ad_eval(j, 1, &x, vals, jv);
    for (int b = 0; b < 4; b++)
      for (int i = 0; i < m; i++)
        for (int k = 0; k < 3; k++) {
          double want = (1 - yv[b * m + i] * yv[b * m + i]) * wv[k * m + i];
          ck_assert_double_eq_tol(jv[(b * m + i) * 3 + k], want, 1e-12);
        }
    free(xv);
    tyto_graph_free(g);
  }
}
END_TEST

/* f(x_b) = sum(sin(x_b W)), x [5, 3], W [3, 4]: row b's Hessian is
 * W diag(-sin(x_b W)) W^T; and the same against tyto_hessian of one row
 * at a time. */
START_TEST(hessian_rows) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(5, 3), "x");
  double wv[12];
  ad_fill(wv, 12, -1, 1, 21);
  tyto_tensor *w = tyto_constant(g, TYTO_F64, 2, AD_S(3, 4), wv);
  int ax = 1;
  tyto_tensor *y = tyto_sum(tyto_sin(tyto_matmul(x, w, 0, 0)), 1, &ax, 0);
  tyto_tensor *h = tyto_hessian_batched(y, x);
  double *xv = ad_vals(x, 22), hv[45];
  const double *vals[1] = {xv};
  ad_eval(h, 1, &x, vals, hv);
  for (int b = 0; b < 5; b++) {
    /* The closed form. */
    double z[4];
    for (int j = 0; j < 4; j++) {
      z[j] = 0;
      for (int k = 0; k < 3; k++)
        z[j] += xv[b * 3 + k] * wv[k * 4 + j];
    }
    for (int p = 0; p < 3; p++)
      for (int q = 0; q < 3; q++) {
        double want = 0;
        for (int j = 0; j < 4; j++)
          want -= wv[p * 4 + j] * sin(z[j]) * wv[q * 4 + j];
        ck_assert_double_eq_tol(hv[(b * 3 + p) * 3 + q], want, 1e-12);
      }
    /* tyto_hessian of row b alone, in a graph of its own. */
    tyto_graph *g1 = tyto_graph_new();
    tyto_tensor *x1 = ad_in(g1, 1, AD_S(3), "x1");
    tyto_tensor *w1 = tyto_constant(g1, TYTO_F64, 2, AD_S(3, 4), wv);
    tyto_tensor *y1 = tyto_sum(
        tyto_sin(tyto_matmul(tyto_reshape(x1, 2, AD_S(1, 3)), w1, 0, 0)), 0,
        NULL, 0);
    double h1[9];
    const double *v1[1] = {xv + 3 * b};
    ad_eval(tyto_hessian(y1, x1), 1, &x1, v1, h1);
    for (int i = 0; i < 9; i++)
      ck_assert_double_eq_tol(hv[b * 9 + i], h1[i], 1e-12);
    tyto_graph_free(g1);
  }
  free(xv);
  tyto_graph_free(g);
}
END_TEST

/* 1000 scalar points, f(x) = x^3 - 2x: every second derivative (6x) from
 * two sweeps; tyto_hessian of the sum builds one sweep per point. The
 * graph sizes say so. */
START_TEST(thousand_points) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(1000), "x");
  tyto_tensor *y =
      tyto_sub(tyto_mul(tyto_square(x), x), tyto_mul_scalar(x, 2.0));
  size_t before = tyto_graph_size(g);
  tyto_tensor *h = tyto_hessian_batched(y, x);
  size_t batched = tyto_graph_size(g) - before;
  tyto_tensor *d2 =
      tyto_diff_elementwise(tyto_diff_elementwise(y, x), x); /* the same */
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  ck_assert_int_eq(tyto_tensor_rank(h), 3);
  double *xv = ad_vals(x, 31), *hv = malloc(1000 * sizeof *hv),
         *dv = malloc(1000 * sizeof *dv);
  const double *vals[1] = {xv};
  ad_eval(h, 1, &x, vals, hv);
  ad_eval(d2, 1, &x, vals, dv);
  for (int i = 0; i < 1000; i++) {
    ck_assert_double_eq_tol(hv[i], 6 * xv[i], 1e-12);
    ck_assert_double_eq_tol(dv[i], 6 * xv[i], 1e-12);
  }
  /* The plain Hessian of the sum: one forward sweep per point. */
  tyto_graph *g2 = tyto_graph_new();
  tyto_tensor *x2 = ad_in(g2, 1, AD_S(1000), "x");
  tyto_tensor *s2 = tyto_sum(
      tyto_sub(tyto_mul(tyto_square(x2), x2), tyto_mul_scalar(x2, 2.0)), 0,
      NULL, 0);
  size_t before2 = tyto_graph_size(g2);
  tyto_hessian(s2, x2);
  size_t plain = tyto_graph_size(g2) - before2;
  printf("1000 points: the batched Hessian adds %zu tensors, tyto_hessian of "
         "the sum %zu\n",
         batched, plain);
  ck_assert_uint_lt(batched, 100);
  ck_assert_uint_gt(plain, 100 * batched);
  tyto_graph_free(g2);
  free(xv);
  free(hv);
  free(dv);
  tyto_graph_free(g);
}
END_TEST

START_TEST(refused) {
  struct {
    int kind; /* 0: elementwise, 1: jacobian_batched, 2: hessian_batched */
    const char *what;
  } want[] = {
      {0, "sum (tensor #"},          {0, "broadcasts a tensor computed"},
      {1, "reduces over the batch"}, {1, "contracts over the batch axis"},
      {2, "must hold one element"},  {1, "must share a leading batch"},
      {0, "must be shaped as x"},
  };
  for (size_t c = 0; c < sizeof want / sizeof want[0]; c++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = ad_in(g, 2, AD_S(4, 3), "x"), *y = NULL, *r = NULL;
    int ax0 = 0;
    switch (c) {
    case 0: /* a sum inside: elements mix */
      y = tyto_mul(x, tyto_sum(x, 0, NULL, 0));
      break;
    case 1: { /* x broadcast to [2, 4, 3], then cut back */
      tyto_tensor *c2 = tyto_full(g, TYTO_F64, 3, AD_S(2, 4, 3), 1.0);
      y = tyto_reshape(tyto_slice_axis(tyto_add(x, c2), 0, 0, 1, 1), 2,
                       AD_S(4, 3));
      break;
    }
    case 2: /* a mean over the batch */
      y = tyto_sub(x, tyto_mean(x, 1, &ax0, 1));
      break;
    case 3: /* x^T x: rows contracted */
      y = tyto_matmul(x, tyto_matmul(x, x, 1, 0), 0, 0);
      break;
    case 4: y = tyto_exp(x); break;
    case 5: y = tyto_reshape(x, 2, AD_S(3, 4)); break;
    case 6: y = tyto_sum(x, 0, NULL, 0); break;
    }
    r = want[c].kind == 0   ? tyto_diff_elementwise(y, x)
        : want[c].kind == 1 ? tyto_jacobian_batched(y, x)
                            : tyto_hessian_batched(y, x);
    ck_assert_msg(tyto_tensor_is_error(r), "case %zu accepted", c);
    ck_assert_msg(strstr(tyto_graph_error_message(g), want[c].what),
                  "case %zu: \"%s\", expected \"%s\"", c,
                  tyto_graph_error_message(g), want[c].what);
    tyto_graph_free(g);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("batched");
  TCase *tc = tcase_create("batched");
  ad_fixture(tc);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, elementwise_first_and_second);
  tcase_add_test(tc, jacobian_rows);
  tcase_add_test(tc, hessian_rows);
  tcase_add_test(tc, thousand_points);
  tcase_add_test(tc, refused);
  suite_add_tcase(s, tc);
  return test_run(s);
}
