/* tyto_custom_derivative: derivative rules given by the user, used by AD
 * in both modes and at every order. The square root guarded by where(),
 * whose plain gradient is NaN where the guard is off, made finite by a
 * rule and checked against closed forms at first and second order
 * (forward, reverse, hessian) and against finite differences where it is
 * smooth; a rule that reads y itself (exp), at third order; a rule of two
 * inputs; the rule's contract errors, each with its message; and the
 * compiled value with the graph passes on and off. Float64. */
#include "ad/ad_test.h"

/* sqrt's derivative where x > 0, else 0: 0.5 / sqrt(x) computed on a
 * guarded x, so that neither branch is NaN. */
static tyto_tensor *safe_dsqrt(tyto_tensor *x) {
  tyto_graph *g = tyto_tensor_graph(x);
  tyto_tensor *pos = tyto_gt(x, tyto_scalar(g, TYTO_F64, 0));
  tyto_tensor *xs = tyto_where(pos, x, tyto_scalar(g, TYTO_F64, 1));
  return tyto_where(pos, tyto_mul_scalar(tyto_rsqrt(xs), 0.5),
                    tyto_scalar(g, TYTO_F64, 0));
}

static int calls;

static tyto_tensor *sqrt_jvp(void *user, size_t n, tyto_tensor *const *xs,
                             tyto_tensor *y, tyto_tensor *const *t) {
  (void)user, (void)n, (void)y;
  calls++;
  return tyto_mul(t[0], safe_dsqrt(xs[0]));
}

static tyto_tensor *sqrt_vjp(void *user, size_t i, size_t n,
                             tyto_tensor *const *xs, tyto_tensor *y,
                             tyto_tensor *a) {
  (void)user, (void)i, (void)n, (void)y;
  calls++;
  return tyto_mul(a, safe_dsqrt(xs[0]));
}

static const tyto_custom_rule safe_sqrt_rule = {"safe_sqrt", sqrt_jvp, sqrt_vjp,
                                                NULL};

static tyto_tensor *guarded_sqrt(tyto_tensor *x) {
  tyto_graph *g = tyto_tensor_graph(x);
  tyto_tensor *pos = tyto_gt(x, tyto_scalar(g, TYTO_F64, 0));
  return tyto_where(pos, tyto_sqrt(x), tyto_scalar(g, TYTO_F64, 0));
}

START_TEST(guarded_sqrt_made_finite) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  tyto_tensor *plain = guarded_sqrt(x);
  /* The problem: 0 * NaN from the branch the guard turns off. */
  ck_assert(isnan(ad_at1(tyto_grad(plain, x), x, -1)));
  tyto_tensor *y = tyto_custom_derivative(plain, 1, &x, &safe_sqrt_rule);
  ck_assert_str_eq(tyto_op_name(tyto_tensor_op(y)), "custom_derivative");
  calls = 0;
  tyto_tensor *d1[3] = {tyto_grad(y, x), tyto_diff(y, x), NULL};
  tyto_tensor *d2[3] = {tyto_grad(d1[0], x), tyto_diff(d1[0], x),
                        tyto_grad(d1[1], x)};
  ck_assert_int_gt(calls, 0);
  const double pts[] = {-1, -0.25, 0, 0.25, 4};
  for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
    double v = pts[k];
    double w1 = v > 0 ? 0.5 / sqrt(v) : 0,
           w2 = v > 0 ? -0.25 / (v * sqrt(v)) : 0;
    ck_assert_double_eq_tol(ad_at1(y, x, v), v > 0 ? sqrt(v) : 0, 1e-15);
    for (int m = 0; m < 2; m++)
      ck_assert_double_eq_tol(ad_at1(d1[m], x, v), w1, 1e-12);
    for (int m = 0; m < 3; m++)
      ck_assert_double_eq_tol(ad_at1(d2[m], x, v), w2, 1e-12);
  }
  /* Over a vector: the hessian of sum(y) is diagonal, finite everywhere. */
  tyto_tensor *xv = ad_in(g, 1, AD_S(4), "xv");
  tyto_tensor *yv =
      tyto_custom_derivative(guarded_sqrt(xv), 1, &xv, &safe_sqrt_rule);
  tyto_tensor *h = tyto_hessian(tyto_sum(yv, 0, NULL, 0), xv);
  const double vals[4] = {-2, 0, 1, 9};
  const double *vp[1] = {vals};
  double hv[16];
  ad_eval(h, 1, &xv, vp, hv);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      double want =
          i == j && vals[i] > 0 ? -0.25 / (vals[i] * sqrt(vals[i])) : 0;
      ck_assert_double_eq_tol(hv[i * 4 + j], want, 1e-12);
    }
  /* Where it is smooth the rule is the true derivative: central
   * differences agree. */
  const double pos[4] = {0.5, 1, 2, 3};
  const double *pp[1] = {pos};
  ad_check(tyto_sum(yv, 0, NULL, 0), 1, &xv, pp, 0, 0);
  tyto_graph_free(g);
}
END_TEST

/* A rule that reads y: exp's derivative is y itself, so every order of
 * the derivative goes through the rule again. */
static tyto_tensor *exp_jvp(void *user, size_t n, tyto_tensor *const *xs,
                            tyto_tensor *y, tyto_tensor *const *t) {
  (void)user, (void)n, (void)xs;
  return tyto_mul(t[0], y);
}

static tyto_tensor *exp_vjp(void *user, size_t i, size_t n,
                            tyto_tensor *const *xs, tyto_tensor *y,
                            tyto_tensor *a) {
  (void)user, (void)i, (void)n, (void)xs;
  return tyto_mul(a, y);
}

START_TEST(rule_reading_y_third_order) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  tyto_custom_rule r = {"exp", exp_jvp, exp_vjp, NULL};
  tyto_tensor *y = tyto_custom_derivative(tyto_exp(x), 1, &x, &r);
  tyto_tensor *f = y, *b = y, *m = y;
  for (int k = 0; k < 3; k++) {
    f = tyto_diff(f, x);
    b = tyto_grad(b, x);
    m = k % 2 ? tyto_diff(m, x) : tyto_grad(m, x);
  }
  for (double v = -1; v <= 1.5; v += 0.625) {
    ck_assert_double_eq_tol(ad_at1(f, x, v), exp(v), 1e-12);
    ck_assert_double_eq_tol(ad_at1(b, x, v), exp(v), 1e-12);
    ck_assert_double_eq_tol(ad_at1(m, x, v), exp(v), 1e-12);
  }
  tyto_graph_free(g);
}
END_TEST

/* Two inputs: hypot(a, b) = sqrt(a^2 + b^2), with a rule that is 0 at the
 * origin (where the plain one is 0/0) and a / y, b / y elsewhere. */
static tyto_tensor *over_y(tyto_tensor *x, tyto_tensor *y) {
  tyto_graph *g = tyto_tensor_graph(x);
  tyto_tensor *z = tyto_eq(y, tyto_scalar(g, TYTO_F64, 0));
  return tyto_where(z, tyto_scalar(g, TYTO_F64, 0),
                    tyto_div(x, tyto_where(z, tyto_scalar(g, TYTO_F64, 1), y)));
}

static tyto_tensor *hypot_jvp(void *user, size_t n, tyto_tensor *const *xs,
                              tyto_tensor *y, tyto_tensor *const *t) {
  (void)user, (void)n;
  return tyto_add(tyto_mul(t[0], over_y(xs[0], y)),
                  tyto_mul(t[1], over_y(xs[1], y)));
}

static tyto_tensor *hypot_vjp(void *user, size_t i, size_t n,
                              tyto_tensor *const *xs, tyto_tensor *y,
                              tyto_tensor *a) {
  (void)user, (void)n;
  return tyto_mul(a, over_y(xs[i], y));
}

START_TEST(two_inputs) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 0, NULL, "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 0, NULL, "b");
  tyto_tensor *ab[2] = {a, b}, *gr[2];
  tyto_custom_rule r = {"hypot", hypot_jvp, hypot_vjp, NULL};
  tyto_tensor *y = tyto_custom_derivative(
      tyto_sqrt(tyto_add(tyto_square(a), tyto_square(b))), 2, ab, &r);
  tyto_grads(y, 2, ab, gr);
  tyto_tensor *da = tyto_diff(y, a), *db = tyto_diff(y, b);
  const double pts[2][2] = {{3, 4}, {0, 0}};
  for (int k = 0; k < 2; k++) {
    const double *vals[2] = {&pts[k][0], &pts[k][1]};
    double h = hypot(pts[k][0], pts[k][1]), out[4];
    ad_eval(gr[0], 2, ab, vals, &out[0]);
    ad_eval(gr[1], 2, ab, vals, &out[1]);
    ad_eval(da, 2, ab, vals, &out[2]);
    ad_eval(db, 2, ab, vals, &out[3]);
    for (int m = 0; m < 4; m++) {
      double want = h > 0 ? pts[k][m % 2] / h : 0;
      ck_assert_msg(fabs(out[m] - want) <= 1e-12, "(%g, %g) #%d: %g, want %g",
                    pts[k][0], pts[k][1], m, out[m], want);
    }
  }
  tyto_graph_free(g);
}
END_TEST

static tyto_tensor *wrong_shape(void *user, size_t n, tyto_tensor *const *xs,
                                tyto_tensor *y, tyto_tensor *const *t) {
  (void)user, (void)n, (void)y, (void)t;
  return tyto_reshape(xs[0], 2, AD_S(2, 2));
}

START_TEST(contract_errors) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(4), "x");
  tyto_tensor *y = tyto_exp(x);
  tyto_custom_rule none = {"none", NULL, NULL, NULL};
  ck_assert(tyto_tensor_is_error(tyto_custom_derivative(y, 1, &x, NULL)));
  ck_assert_msg(strstr(tyto_graph_error_message(g), "rule is NULL"), "%s",
                tyto_graph_error_message(g));
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = ad_in(g, 1, AD_S(4), "x");
  y = tyto_exp(x);
  ck_assert(tyto_tensor_is_error(tyto_custom_derivative(y, 1, &x, &none)));
  ck_assert_msg(
      strstr(tyto_graph_error_message(g), "'none': the rule has neither"), "%s",
      tyto_graph_error_message(g));
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = ad_in(g, 1, AD_S(4), "x");
  y = tyto_exp(x);
  ck_assert(
      tyto_tensor_is_error(tyto_custom_derivative(y, 0, &x, &safe_sqrt_rule)));
  ck_assert_msg(strstr(tyto_graph_error_message(g), "no inputs"), "%s",
                tyto_graph_error_message(g));
  tyto_graph_free(g);
  /* An input of another graph. */
  g = tyto_graph_new();
  tyto_graph *other = tyto_graph_new();
  x = ad_in(g, 1, AD_S(4), "x");
  tyto_tensor *xo = ad_in(other, 1, AD_S(4), "xo");
  ck_assert(tyto_tensor_is_error(
      tyto_custom_derivative(tyto_exp(x), 1, &xo, &safe_sqrt_rule)));
  ck_assert_int_ne(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(other);
  tyto_graph_free(g);
  /* Reverse mode without a vjp; forward mode with a jvp of the wrong
   * shape: named by the rule. */
  g = tyto_graph_new();
  x = ad_in(g, 1, AD_S(4), "x");
  tyto_custom_rule fwd_only = {"fwd_only", wrong_shape, NULL, NULL};
  y = tyto_custom_derivative(tyto_exp(x), 1, &x, &fwd_only);
  ck_assert(tyto_tensor_is_error(tyto_grad(tyto_sum(y, 0, NULL, 0), x)));
  ck_assert_msg(strstr(tyto_graph_error_message(g),
                       "'fwd_only': reverse mode needs its vjp"),
                "%s", tyto_graph_error_message(g));
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = ad_in(g, 1, AD_S(4), "x");
  y = tyto_custom_derivative(tyto_exp(x), 1, &x, &fwd_only);
  ck_assert(tyto_tensor_is_error(
      tyto_jacobianv(y, x, tyto_full(g, TYTO_F64, 1, AD_S(4), 1))));
  ck_assert_msg(strstr(tyto_graph_error_message(g),
                       "'fwd_only': its jvp returned f64 [2,2], expected f64 "
                       "[4]"),
                "%s", tyto_graph_error_message(g));
  tyto_graph_free(g);
}
END_TEST

/* The value is y's, compiled with every pass off (lowered as y itself)
 * and on (the node is removed). */
START_TEST(compiled_value) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  tyto_tensor *y =
      tyto_custom_derivative(guarded_sqrt(x), 1, &x, &safe_sqrt_rule);
  for (int off = 0; off < 2; off++) {
    tyto_program_options po;
    tyto_program_options_init(&po);
    po.passes_off = off ? TYTO_PASS_ALL : 0;
    tyto_program *p = NULL;
    ck_assert_msg(tyto_program_compile(ad_ctx, g, 1, &y, &po, &p) == TYTO_OK,
                  "%s", tyto_errmsg());
    double xv[3] = {4, -1, 0.25}, out[3];
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_output(p, 0, out, sizeof out), TYTO_OK);
    ck_assert_double_eq(out[0], 2);
    ck_assert_double_eq(out[1], 0);
    ck_assert_double_eq(out[2], 0.5);
    tyto_program_free(p);
  }
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("custom_derivative");
  TCase *tc = tcase_create("custom_derivative");
  ad_fixture(tc);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, guarded_sqrt_made_finite);
  tcase_add_test(tc, rule_reading_y_third_order);
  tcase_add_test(tc, two_inputs);
  tcase_add_test(tc, contract_errors);
  tcase_add_test(tc, compiled_value);
  suite_add_tcase(s, tc);
  return test_run(s);
}
