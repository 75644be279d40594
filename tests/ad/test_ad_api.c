/* The AD API after Owl's Algodiff: the worked examples of seed 001,
 * perturbation confusion, higher-order derivatives against closed forms,
 * Jacobians and their mode, argument errors, graph growth, and the
 * finite-difference checker itself. Float64 throughout. */
#include "ad/ad_test.h"

static tyto_tensor *scalar_input(tyto_graph *g, const char *name) {
  return tyto_input(g, TYTO_F64, 0, NULL, name);
}

static double eval1(tyto_tensor *t, size_t n, tyto_tensor *const *xs,
                    const double *vals) {
  const double *v[8];
  for (size_t i = 0; i < n; i++)
    v[i] = &vals[i];
  double out;
  ad_eval(t, n, xs, v, &out);
  return out;
}

/* Seed 001: y = sin(x0 * x1) at (2, 2). */
START_TEST(test_seed_sin_product) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x0 = scalar_input(g, "x0"), *x1 = scalar_input(g, "x1");
  tyto_tensor *y = tyto_sin(tyto_mul(x0, x1));
  tyto_tensor *xs[2] = {x0, x1}, *gr[2];
  tyto_tensor *fwd = tyto_diff(y, x0);
  tyto_grads(y, 2, xs, gr);
  double at[2] = {2, 2}, want = 2 * cos(4.0);
  ck_assert_double_eq_tol(eval1(fwd, 2, xs, at), want, 1e-15);
  ck_assert_double_eq_tol(eval1(gr[0], 2, xs, at), want, 1e-15);
  ck_assert_double_eq_tol(eval1(gr[1], 2, xs, at), want, 1e-15);
  /* The same with x as one vector, as in the seed: forward with
   * jacobianv along e0, reverse with grad. */
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(2), "x");
  tyto_tensor *p = tyto_prod(x, 0, NULL, 0);
  tyto_tensor *yv = tyto_sin(p);
  double e0[2] = {1, 0};
  tyto_tensor *t =
      tyto_jacobianv(yv, x, tyto_constant(g, TYTO_F64, 1, AD_S(2), e0));
  tyto_tensor *gv = tyto_grad(yv, x);
  const double *vals[1] = {at};
  double out[2];
  ad_eval(t, 1, &x, vals, out);
  ck_assert_double_eq_tol(out[0], want, 1e-15);
  ad_eval(gv, 1, &x, vals, out);
  ck_assert_double_eq_tol(out[0], want, 1e-15);
  ck_assert_double_eq_tol(out[1], want, 1e-15);
  tyto_graph_free(g);
}
END_TEST

/* Seed 001, 3.5.1: d/dx [x * d/dy (x + y)] = 1 everywhere; a nested
 * implementation that confuses the two perturbations gives 4 at (2, 2). */
START_TEST(test_perturbation_confusion) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = scalar_input(g, "x"), *y = scalar_input(g, "y");
  tyto_tensor *inner = tyto_diff(tyto_add(x, y), y);
  tyto_tensor *outer_f = tyto_diff(tyto_mul(x, inner), x);
  tyto_tensor *outer_r =
      tyto_grad(tyto_mul(x, tyto_grad(tyto_add(x, y), y)), x);
  /* A case where the inner derivative does depend on x: d/dx [x * d/dy
   * (x * y)] = d/dx x^2 = 2x. */
  tyto_tensor *dep = tyto_diff(tyto_mul(x, tyto_diff(tyto_mul(x, y), y)), x);
  tyto_tensor *xs[2] = {x, y};
  for (double xv = -3; xv <= 3; xv += 1.25) {
    double at[2] = {xv, 2};
    ck_assert_double_eq(eval1(outer_f, 2, xs, at), 1.0);
    ck_assert_double_eq(eval1(outer_r, 2, xs, at), 1.0);
    ck_assert_double_eq_tol(eval1(dep, 2, xs, at), 2 * xv, 1e-15);
  }
  tyto_graph_free(g);
}
END_TEST

/* d^4/dx^4 tanh x = 8 t (1 - t^2)(2 - 3 t^2), t = tanh x, by four nested
 * forward transforms and by four nested reverse ones. */
START_TEST(test_fourth_derivative_tanh) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = scalar_input(g, "x");
  tyto_tensor *f = tyto_tanh(x), *r = f;
  for (int k = 0; k < 4; k++) {
    f = tyto_diff(f, x);
    r = tyto_grad(r, x);
  }
  const double at[] = {-1.5, -0.3, 0.0, 0.7, 2.0};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    double t = tanh(at[i]);
    double want = 8 * t * (1 - t * t) * (2 - 3 * t * t);
    ck_assert_double_eq_tol(eval1(f, 1, &x, &at[i]), want, 1e-12);
    ck_assert_double_eq_tol(eval1(r, 1, &x, &at[i]), want, 1e-12);
  }
  tyto_graph_free(g);
}
END_TEST

/* f(x) = sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 over i < n-1. */
static tyto_tensor *rosenbrock(tyto_tensor *x, int64_t n) {
  tyto_tensor *head = tyto_slice_axis(x, 0, 0, n - 1, 1);
  tyto_tensor *tail = tyto_slice_axis(x, 0, 1, n, 1);
  tyto_tensor *a = tyto_sub(tail, tyto_square(head));
  tyto_tensor *b = tyto_sub(tyto_scalar_like(x, 1), head);
  return tyto_sum(
      tyto_add(tyto_mul_scalar(tyto_square(a), 100), tyto_square(b)), 0, NULL,
      0);
}

START_TEST(test_rosenbrock_hessian) {
  enum { N = 4 };
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(N), "x");
  tyto_tensor *h = tyto_hessian(rosenbrock(x, N), x);
  ck_assert_int_eq(tyto_tensor_rank(h), 2);
  ck_assert_int_eq(tyto_tensor_dim(h, 0), N);
  const double pts[3][N] = {
      {1, 1, 1, 1}, {-1.2, 1, 0.5, -0.3}, {0.3, -0.7, 2.0, 1.1}};
  for (int p = 0; p < 3; p++) {
    const double *v[1] = {pts[p]};
    double got[N * N], want[N * N] = {0};
    ad_eval(h, 1, &x, v, got);
    const double *xv = pts[p];
    for (int i = 0; i < N; i++) {
      if (i < N - 1) {
        want[i * N + i] += 1200 * xv[i] * xv[i] - 400 * xv[i + 1] + 2;
        want[i * N + i + 1] = want[(i + 1) * N + i] = -400 * xv[i];
      }
      if (i > 0)
        want[i * N + i] += 200;
    }
    for (int i = 0; i < N * N; i++)
      ck_assert_msg(fabs(got[i] - want[i]) <= 1e-10 * (1 + fabs(want[i])),
                    "point %d, H[%d][%d] = %.17g, want %.17g", p, i / N, i % N,
                    got[i], want[i]);
  }
  tyto_graph_free(g);
}
END_TEST

/* laplacian(sum(sin x)) = -sum(sin x); hessianv(f, v) = hessian(f) v. */
START_TEST(test_laplacian_and_hessianv) {
  enum { N = 5 };
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(N), "x");
  tyto_tensor *s = tyto_sum(tyto_sin(x), 0, NULL, 0);
  tyto_tensor *lap = tyto_laplacian(s, x);
  ck_assert_int_eq(tyto_tensor_rank(lap), 0);
  double xv[N];
  ad_fill(xv, N, -2, 2, 7);
  const double *vals[1] = {xv};
  double got, want = 0;
  ad_eval(lap, 1, &x, vals, &got);
  for (int i = 0; i < N; i++)
    want -= sin(xv[i]);
  ck_assert_double_eq_tol(got, want, 1e-13);

  /* A function with a dense Hessian. */
  double wv[N * N], v[N];
  ad_fill(wv, N * N, -1, 1, 8);
  ad_fill(v, N, -1, 1, 9);
  tyto_tensor *w = tyto_constant(g, TYTO_F64, 2, AD_S(N, N), wv);
  tyto_tensor *xc = tyto_reshape(x, 2, AD_S(N, 1));
  tyto_tensor *f = tyto_add(
      tyto_sum(tyto_exp(tyto_mul_scalar(tyto_matmul(w, xc, 0, 0), 0.5)), 0,
               NULL, 0),
      tyto_mul(tyto_sum(tyto_square(x), 0, NULL, 0),
               tyto_sum(tyto_tanh(x), 0, NULL, 0)));
  tyto_tensor *vt = tyto_constant(g, TYTO_F64, 1, AD_S(N), v);
  tyto_tensor *hv = tyto_hessianv(f, x, vt), *h = tyto_hessian(f, x);
  double hvv[N], hm[N * N];
  ad_eval(hv, 1, &x, vals, hvv);
  ad_eval(h, 1, &x, vals, hm);
  for (int i = 0; i < N; i++) {
    double ref = 0;
    for (int j = 0; j < N; j++)
      ref += hm[i * N + j] * v[j];
    ck_assert_double_eq_tol(hvv[i], ref, 1e-12 * (1 + fabs(ref)));
    for (int j = 0; j < N; j++) /* and the Hessian is symmetric */
      ck_assert_double_eq_tol(hm[i * N + j], hm[j * N + i], 1e-12);
  }
  tyto_graph_free(g);
}
END_TEST

/* Jacobians of a 3 -> 2 and a 2 -> 3 function against the analytic ones,
 * in the mode that needs fewer sweeps, and in both modes. */
START_TEST(test_jacobians) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x3 = tyto_input(g, TYTO_F64, 1, AD_S(3), "x3");
  tyto_tensor *x2 = tyto_input(g, TYTO_F64, 1, AD_S(2), "x2");
  /* f(a, b, c) = (a b c, sin a + c^2) */
  tyto_tensor *a = tyto_slice_axis(x3, 0, 0, 1, 1);
  tyto_tensor *b = tyto_slice_axis(x3, 0, 1, 2, 1);
  tyto_tensor *c = tyto_slice_axis(x3, 0, 2, 3, 1);
  tyto_tensor *parts32[2] = {tyto_mul(tyto_mul(a, b), c),
                             tyto_add(tyto_sin(a), tyto_square(c))};
  tyto_tensor *f32 = tyto_concat(2, parts32, 0);
  /* h(u, v) = (u v, exp u, u - v^3) */
  tyto_tensor *u = tyto_slice_axis(x2, 0, 0, 1, 1);
  tyto_tensor *v = tyto_slice_axis(x2, 0, 1, 2, 1);
  tyto_tensor *parts23[3] = {tyto_mul(u, v), tyto_exp(u),
                             tyto_sub(u, tyto_pow_scalar(v, 3))};
  tyto_tensor *f23 = tyto_concat(3, parts23, 0);
  ck_assert_int_eq(tyto_jacobian_mode(f32, x3), TYTO_AD_REVERSE);
  ck_assert_int_eq(tyto_jacobian_mode(f23, x2), TYTO_AD_FORWARD);
  size_t before = tyto_graph_size(g);
  tyto_tensor *j32 = tyto_jacobian(f32, x3);
  size_t cost32 = tyto_graph_size(g) - before;
  before = tyto_graph_size(g);
  tyto_tensor *j32f = tyto_jacobian_in_mode(f32, x3, TYTO_AD_FORWARD);
  size_t cost32f = tyto_graph_size(g) - before;
  /* Two reverse sweeps build less than three forward ones here. */
  ck_assert_uint_lt(cost32, cost32f);
  tyto_tensor *j23 = tyto_jacobian(f23, x2);
  tyto_tensor *j23r = tyto_jacobian_in_mode(f23, x2, TYTO_AD_REVERSE);
  ck_assert_int_eq(tyto_tensor_dim(j32, 0), 2);
  ck_assert_int_eq(tyto_tensor_dim(j32, 1), 3);
  ck_assert_int_eq(tyto_tensor_dim(j23, 0), 3);
  ck_assert_int_eq(tyto_tensor_dim(j23, 1), 2);

  double p3[3] = {0.7, -1.3, 2.1}, p2[2] = {0.4, -0.9};
  const double *v3[1] = {p3}, *v2[1] = {p2};
  double want32[6] = {
      p3[1] * p3[2], p3[0] * p3[2], p3[0] * p3[1], cos(p3[0]), 0, 2 * p3[2]};
  double want23[6] = {p2[1], p2[0], exp(p2[0]), 0, 1, -3 * p2[1] * p2[1]};
  double got[6];
  tyto_tensor *js[2] = {j32, j32f};
  for (int k = 0; k < 2; k++) {
    ad_eval(js[k], 1, &x3, v3, got);
    for (int i = 0; i < 6; i++)
      ck_assert_double_eq_tol(got[i], want32[i], 1e-14);
  }
  tyto_tensor *ks[2] = {j23, j23r};
  for (int k = 0; k < 2; k++) {
    ad_eval(ks[k], 1, &x2, v2, got);
    for (int i = 0; i < 6; i++)
      ck_assert_double_eq_tol(got[i], want23[i], 1e-14);
  }
  tyto_graph_free(g);
}
END_TEST

/* The general forms: several tangents to several outputs in one sweep,
 * and several adjoints back. */
START_TEST(test_jvp_vjp_general) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 1, AD_S(3), "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 1, AD_S(3), "b");
  tyto_tensor *y1 = tyto_mul(a, b), *y2 = tyto_sin(a);
  double va[3] = {0.5, -1, 2}, vb[3] = {1.5, 0.25, -0.75};
  double ta[3] = {1, 2, 3}, tb[3] = {-1, 0.5, 0.25};
  tyto_tensor *xs[2] = {a, b}, *ys[2] = {y1, y2};
  tyto_tensor *tans[2] = {tyto_constant(g, TYTO_F64, 1, AD_S(3), ta),
                          tyto_constant(g, TYTO_F64, 1, AD_S(3), tb)};
  tyto_tensor *out[2];
  tyto_jvp(2, xs, tans, 2, ys, out);
  const double *vals[2] = {va, vb};
  double got[3];
  ad_eval(out[0], 2, xs, vals, got);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(got[i], ta[i] * vb[i] + va[i] * tb[i], 1e-15);
  ad_eval(out[1], 2, xs, vals, got);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(got[i], cos(va[i]) * ta[i], 1e-15);
  /* Adjoints of both outputs at once; a NULL adjoint is zero. */
  tyto_tensor *adj[2] = {tans[0], tans[1]}, *back[2];
  tyto_vjp(2, ys, adj, 2, xs, back);
  ad_eval(back[0], 2, xs, vals, got);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(got[i], ta[i] * vb[i] + tb[i] * cos(va[i]), 1e-15);
  tyto_tensor *only[2] = {NULL, tans[1]};
  tyto_vjp(2, ys, only, 2, xs, back);
  ad_eval(back[1], 2, xs, vals, got); /* b's adjoint: zeros */
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(got[i], 0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_errors) {
  tyto_graph *g = tyto_graph_new(), *h = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(3), "x");
  tyto_tensor *y = tyto_mul(x, x);
  tyto_tensor *e = tyto_grad(y, x);
  ck_assert(tyto_tensor_is_error(e));
  ck_assert_str_eq(tyto_graph_error_message(g),
                   "grad: y must have one element, got [3]");
  tyto_graph_free(g);

  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 1, AD_S(3), "x");
  tyto_tensor *s = tyto_sum(x, 0, NULL, 0);
  ck_assert(tyto_tensor_is_error(tyto_diff(s, x)));
  ck_assert_str_eq(tyto_graph_error_message(g),
                   "diff: x must have one element, got [3]");
  tyto_graph_free(g);

  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 1, AD_S(3), "x");
  tyto_tensor *v = tyto_full(g, TYTO_F64, 1, AD_S(4), 1);
  ck_assert(tyto_tensor_is_error(tyto_jacobianv(tyto_sin(x), x, v)));
  ck_assert_str_eq(tyto_graph_error_message(g),
                   "jacobianv: tangent [4] must be shaped as [3]");
  tyto_graph_free(g);

  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 1, AD_S(3), "x");
  tyto_tensor *xh = tyto_input(h, TYTO_F64, 0, NULL, "xh");
  ck_assert(tyto_tensor_is_error(tyto_grad(xh, x)));
  /* The message goes to the graph of the first argument. */
  ck_assert_str_eq(tyto_graph_error_message(h),
                   "grad: tensors belong to different graphs");
  /* An error tensor passes through without a new message. */
  ck_assert(tyto_tensor_is_error(tyto_grad(tyto_graph_error_tensor(g), x)));
  ck_assert(tyto_grad(NULL, NULL) == NULL);
  tyto_graph_free(g);
  tyto_graph_free(h);

  /* A y that does not depend on x has a zero gradient. */
  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 1, AD_S(2), "x");
  tyto_tensor *z = tyto_input(g, TYTO_F64, 0, NULL, "z");
  tyto_tensor *gz = tyto_grad(tyto_sin(z), x);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  ck_assert_int_eq(tyto_tensor_op(gz), TYTO_OP_FULL);
  ck_assert_int_eq(tyto_tensor_dim(gz, 0), 2);
  tyto_graph_free(g);
}
END_TEST

/* Differentiating with respect to w adds no tensors for x's side: the
 * number of tensors grad(y, w) builds does not grow with the depth of a
 * branch that only x feeds. */
START_TEST(test_no_nodes_for_other_inputs) {
  size_t added[2];
  for (int k = 0; k < 2; k++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(4), "x");
    tyto_tensor *w = tyto_input(g, TYTO_F64, 1, AD_S(4), "w");
    tyto_tensor *bx = x;
    for (int d = 0; d < (k ? 20 : 1); d++)
      bx = tyto_tanh(tyto_add_scalar(bx, 0.1));
    tyto_tensor *y = tyto_sum(tyto_mul(bx, tyto_sin(w)), 0, NULL, 0);
    size_t before = tyto_graph_size(g);
    tyto_grad(y, w);
    added[k] = tyto_graph_size(g) - before;
    ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
    tyto_graph_free(g);
  }
  ck_assert_uint_eq(added[0], added[1]);
  ck_assert_uint_le(added[0], 8);
}
END_TEST

/* The checker: it passes a right derivative, and it catches a point where
 * the derivative convention differs from the central difference (relu at
 * 0: AD says 0, the difference 0.5), naming the element. */
START_TEST(test_gradcheck_reports) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(4), "x");
  tyto_tensor *y = tyto_relu(x);
  double xv[4] = {-1, 2, 0, 3};
  const double *vals[1] = {xv};
  tyto_gradcheck_options o;
  tyto_gradcheck_options_init(&o);
  o.modes = TYTO_GRADCHECK_REVERSE;
  tyto_gradcheck_report r;
  ck_assert_int_eq(
      tyto_gradcheck(ad_ctx, y, 1, &x, (const void *const *)vals, &o, &r),
      TYTO_OK);
  ck_assert_msg(!r.passed, "%s", r.message);
  ck_assert_int_eq(r.mode, TYTO_GRADCHECK_REVERSE);
  ck_assert_int_eq(r.element, 2);
  ck_assert_uint_eq(r.n_checked, 4);
  ck_assert_msg_contains(r.message, "FAILED");
  xv[2] = 0.5;
  ad_check(y, 1, &x, vals, 0, 0);

  /* Inputs it was not given are named. */
  tyto_tensor *b = tyto_input(g, TYTO_F64, 1, AD_S(4), "b");
  tyto_tensor *yb = tyto_mul(y, b);
  ck_assert_int_eq(
      tyto_gradcheck(ad_ctx, yb, 1, &x, (const void *const *)vals, NULL, &r),
      TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "y depends on input 'b'");
  /* ... and fixed ones are held. */
  double bv[4] = {1, -2, 3, 0.5};
  const void *fixed_vals[1] = {bv};
  tyto_gradcheck_options_init(&o);
  o.n_fixed = 1;
  o.fixed = &b;
  o.fixed_values = fixed_vals;
  ck_assert_int_eq(
      tyto_gradcheck(ad_ctx, yb, 1, &x, (const void *const *)vals, &o, &r),
      TYTO_OK);
  ck_assert_msg(r.passed, "%s", r.message);
  ck_assert_uint_eq(r.n_checked, 8); /* 4 reverse + 4 forward */
  tyto_graph_free(g);
}
END_TEST

/* The checker on the cases around the common one: f32, parameters,
 * empty tensors, a y that does not depend on x, and the arguments it
 * refuses. */
START_TEST(test_gradcheck_cases) {
  tyto_graph *g = tyto_graph_new();
  tyto_gradcheck_options o;
  tyto_gradcheck_report r;
  /* f32, with the f32 defaults. */
  tyto_tensor *xf = tyto_input(g, TYTO_F32, 1, AD_S(3), "xf");
  float fv[3] = {0.3f, -1.1f, 2.0f};
  const void *fvals[1] = {fv};
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_tanh(tyto_mul(xf, xf)), 1, &xf,
                                  fvals, NULL, &r),
                   TYTO_OK);
  ck_assert_msg(r.passed, "%s", r.message);
  /* A parameter among xs, an input fixed. */
  tyto_tensor *w = tyto_parameter(g, TYTO_F64, 2, AD_S(2, 3), "w");
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, AD_S(3, 1), "x");
  tyto_tensor *y = tyto_sin(tyto_matmul(w, x, 0, 0));
  double wv[6] = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6}, xv[3] = {1, -2, 0.5};
  const void *wvals[1] = {wv}, *xvals[1] = {xv};
  tyto_gradcheck_options_init(&o);
  o.n_fixed = 1;
  o.fixed = &x;
  o.fixed_values = xvals;
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, y, 1, &w, wvals, &o, &r), TYTO_OK);
  ck_assert_msg(r.passed, "%s", r.message);
  ck_assert_uint_eq(r.n_checked, 6 + 2);
  /* y does not depend on the x checked: the derivative is 0 and so is the
   * difference. */
  tyto_tensor *z = tyto_input(g, TYTO_F64, 1, AD_S(2), "z");
  double zv[2] = {1, 2};
  const void *zvals[1] = {zv};
  tyto_tensor *both[2] = {z, x};
  const void *bothvals[2] = {zv, xv};
  ck_assert_int_eq(
      tyto_gradcheck(ad_ctx, tyto_exp(x), 2, both, bothvals, NULL, &r),
      TYTO_OK);
  ck_assert_msg(r.passed, "%s", r.message);
  /* Empty tensors: nothing to compare, said so. */
  tyto_tensor *e = tyto_input(g, TYTO_F64, 2, AD_S(0, 3), "e");
  double ev[1] = {0};
  const void *evals[1] = {ev};
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(e), 1, &e, evals, NULL, &r),
                   TYTO_OK);
  ck_assert(r.passed);
  ck_assert_uint_eq(r.n_checked, 0);
  ck_assert_msg_contains(r.message, "nothing to compare");
  /* Refused: a tensor given twice, n = 0, options never initialised, a
   * constant, a dtype other than y's, fixed without values. */
  tyto_tensor *twice[2] = {z, z};
  const void *twicevals[2] = {zv, zv};
  ck_assert_int_eq(
      tyto_gradcheck(ad_ctx, tyto_sin(z), 2, twice, twicevals, NULL, &r),
      TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "is given twice (xs[0] and xs[1])");
  tyto_gradcheck_options_init(&o);
  o.n_fixed = 1;
  o.fixed = &z;
  o.fixed_values = zvals;
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(z), 1, &z, zvals, &o, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "is given twice (xs[0] and fixed[0])");
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(z), 0, &z, zvals, NULL, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "n is 0");
  tyto_gradcheck_options raw;
  memset(&raw, 0, sizeof raw);
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(z), 1, &z, zvals, &raw, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "tyto_gradcheck_options_init");
  tyto_tensor *c = tyto_scalar(g, TYTO_F64, 1);
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(c), 1, &c, zvals, NULL, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "is a constant tensor");
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(z), 1, &xf, fvals, NULL, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "xs[0] is f32, y is f64");
  tyto_gradcheck_options_init(&o);
  o.n_fixed = 1;
  ck_assert_int_eq(tyto_gradcheck(ad_ctx, tyto_sin(z), 1, &z, zvals, &o, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "n_fixed is 1 but fixed");
  tyto_graph_free(g);
}
END_TEST

/* NULL arrays give error tensors and a message, never untouched outputs. */
START_TEST(test_null_arrays) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  tyto_tensor *y = tyto_sin(x), *out[2] = {NULL, NULL};
  tyto_grads(y, 2, NULL, out);
  ck_assert(tyto_tensor_is_error(out[0]) && tyto_tensor_is_error(out[1]));
  ck_assert_str_eq(tyto_graph_error_message(g), "grads: xs is NULL");
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  y = tyto_sin(x);
  out[0] = NULL;
  tyto_vjp(1, NULL, NULL, 1, &x, out);
  ck_assert(tyto_tensor_is_error(out[0]));
  ck_assert_str_eq(tyto_graph_error_message(g), "vjp: ys is NULL");
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  y = tyto_sin(x);
  out[0] = NULL;
  tyto_jvp(1, NULL, NULL, 1, &y, out);
  ck_assert(tyto_tensor_is_error(out[0]));
  ck_assert_str_eq(tyto_graph_error_message(g), "jvp: xs is NULL");
  /* A NULL tangents array is all zeros. */
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  y = tyto_sin(x);
  tyto_jvp(1, &x, NULL, 1, &y, out);
  ck_assert_int_eq(tyto_tensor_op(out[0]), TYTO_OP_FULL);
  tyto_graph_free(g);
}
END_TEST

/* A derivative graph is an ordinary graph: it compiles into one program
 * with the function, runs with new inputs, and exports. */
START_TEST(test_gradient_program) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, AD_S(3), "x");
  tyto_tensor *f = tyto_sum(tyto_mul(x, tyto_exp(x)), 0, NULL, 0);
  tyto_tensor *outs[2] = {f, tyto_grad(f, x)};
  tyto_program *p;
  ck_assert_int_eq(tyto_program_compile(ad_ctx, g, 2, outs, NULL, &p), TYTO_OK);
  for (int run = 0; run < 3; run++) {
    double xv[3] = {run - 1.0, 0.5 * run, -0.25}, gv[3];
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_output(p, 1, gv, sizeof gv), TYTO_OK);
    for (int i = 0; i < 3; i++)
      ck_assert_double_eq_tol(gv[i], (1 + xv[i]) * exp(xv[i]), 1e-14);
  }
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* The gradient graph of a training loss stays within a small constant
 * factor of the forward graph: the seed CNN of the training issue (conv
 * 5x5x32 same, relu, max_pool 2x2, dropout, dense 1024 relu, dense 10,
 * log_softmax cross-entropy). bench/ad_graph prints the figures. */
START_TEST(test_gradient_graph_size) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 4, AD_S(4, 1, 28, 28), "x");
  tyto_tensor *labels = tyto_input(g, TYTO_F32, 2, AD_S(4, 10), "labels");
  tyto_tensor *p[6] = {
      tyto_parameter(g, TYTO_F32, 4, AD_S(32, 1, 5, 5), "conv_w"),
      tyto_parameter(g, TYTO_F32, 1, AD_S(32), "conv_b"),
      tyto_parameter(g, TYTO_F32, 2, AD_S(32 * 14 * 14, 1024), "fc_w"),
      tyto_parameter(g, TYTO_F32, 1, AD_S(1024), "fc_b"),
      tyto_parameter(g, TYTO_F32, 2, AD_S(1024, 10), "out_w"),
      tyto_parameter(g, TYTO_F32, 1, AD_S(10), "out_b")};
  tyto_conv2d_params cp = {{1, 1}, {2, 2}, {1, 1}, 1};
  tyto_tensor *h = tyto_relu(tyto_conv2d(x, p[0], p[1], &cp));
  h = tyto_max_pool2d(h, 2, 2, 2, 2, 0, 0);
  h = tyto_mul(
      h, tyto_div_scalar(tyto_random_bernoulli(g, TYTO_F32, 4,
                                               tyto_tensor_shape(h), 0.9, 1),
                         0.9));
  h = tyto_reshape(h, 2, AD_S(4, 32 * 14 * 14));
  h = tyto_relu(tyto_add(tyto_matmul(h, p[2], 0, 0), p[3]));
  h = tyto_add(tyto_matmul(h, p[4], 0, 0), p[5]);
  tyto_tensor *loss = tyto_neg(tyto_div_scalar(
      tyto_sum(tyto_mul(tyto_log_softmax(h, -1), labels), 0, NULL, 0), 4));
  size_t fwd = tyto_graph_size(g);
  tyto_tensor *grads[6];
  tyto_grads(loss, 6, p, grads);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  size_t added = tyto_graph_size(g) - fwd;
  ck_assert_msg(2 * added <= 3 * fwd,
                "gradient graph: %zu tensors for a %zu "
                "tensor forward graph",
                added, fwd);
  /* Nothing is built for the data: no derivative op reads x's adjoint
   * (conv2d_backward_data would compute it). */
  for (size_t i = fwd; i < tyto_graph_size(g); i++)
    ck_assert_int_ne(tyto_tensor_op(tyto_graph_tensor(g, i)),
                     TYTO_OP_CONV2D_BACKWARD_DATA);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ad_api");
  TCase *tc = tcase_create("api");
  ad_fixture(tc);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_seed_sin_product);
  tcase_add_test(tc, test_perturbation_confusion);
  tcase_add_test(tc, test_fourth_derivative_tanh);
  tcase_add_test(tc, test_rosenbrock_hessian);
  tcase_add_test(tc, test_laplacian_and_hessianv);
  tcase_add_test(tc, test_jacobians);
  tcase_add_test(tc, test_jvp_vjp_general);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_no_nodes_for_other_inputs);
  tcase_add_test(tc, test_gradcheck_reports);
  tcase_add_test(tc, test_gradient_program);
  tcase_add_test(tc, test_gradient_graph_size);
  tcase_add_test(tc, test_gradcheck_cases);
  tcase_add_test(tc, test_null_arrays);
  suite_add_tcase(s, tc);
  return test_run(s);
}
