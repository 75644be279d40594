/* The derivative rules of the elementwise ops (unary, binary with
 * broadcasting, where, fma): reverse and forward mode against central
 * differences in float64 (tyto_gradcheck, its default tolerances unless
 * stated), the conventions of <tyto/ad.h> at non-differentiable points
 * exactly, second and fourth derivatives against closed forms, float32
 * graphs, and that nothing is built for inputs not differentiated. */
#include "ad_test.h"

#include <tyto/ops.h>

#define N6 6

/* ---------------------------------------------------------------------- */
/* Unary ops away from kinks and domain edges                              */

typedef struct unary_case {
  tyto_op op;
  double lo, hi;  /* values drawn from [lo, hi) */
  int both_signs; /* then every other value is negated */
} unary_case;

static const unary_case unary_cases[] = {
    {TYTO_OP_NEG, -2, 2, 0},         {TYTO_OP_ABS, 0.2, 2, 1},
    {TYTO_OP_SIGN, 0.2, 2, 1},       {TYTO_OP_EXP, -2, 2, 0},
    {TYTO_OP_LOG, 0.2, 3, 0},        {TYTO_OP_LOG1P, -0.5, 2, 0},
    {TYTO_OP_EXPM1, -2, 2, 0},       {TYTO_OP_SQRT, 0.2, 3, 0},
    {TYTO_OP_RSQRT, 0.2, 3, 0},      {TYTO_OP_SQUARE, -2, 2, 0},
    {TYTO_OP_RECIPROCAL, 0.3, 2, 1}, {TYTO_OP_SIN, -3, 3, 0},
    {TYTO_OP_COS, -3, 3, 0},         {TYTO_OP_TAN, -1.2, 1.2, 0},
    {TYTO_OP_ASIN, -0.9, 0.9, 0},    {TYTO_OP_ACOS, -0.9, 0.9, 0},
    {TYTO_OP_ATAN, -3, 3, 0},        {TYTO_OP_SINH, -2, 2, 0},
    {TYTO_OP_COSH, -2, 2, 0},        {TYTO_OP_TANH, -2, 2, 0},
    {TYTO_OP_ASINH, -3, 3, 0},       {TYTO_OP_ACOSH, 1.1, 3, 0},
    {TYTO_OP_ATANH, -0.9, 0.9, 0},   {TYTO_OP_SIGMOID, -3, 3, 0},
    {TYTO_OP_RELU, 0.1, 2, 1},       {TYTO_OP_LEAKY_RELU, 0.1, 2, 1},
    {TYTO_OP_ELU, 0.1, 2, 1},        {TYTO_OP_SOFTPLUS, -3, 3, 0},
    {TYTO_OP_ERF, -2, 2, 0},         {TYTO_OP_FLOOR, 0.1, 0.4, 1},
    {TYTO_OP_CEIL, 0.1, 0.4, 1},     {TYTO_OP_ROUND, 0.1, 0.4, 1},
};

static tyto_tensor *unary_of(tyto_op op, tyto_tensor *x) {
  if (op == TYTO_OP_LEAKY_RELU)
    return tyto_leaky_relu(x, 0.15);
  if (op == TYTO_OP_ELU)
    return tyto_elu(x, 1.3);
  return tyto_unary(op, x);
}

static void fill_case(double *v, int64_t n, const unary_case *c,
                      uint64_t seed) {
  ad_fill(v, n, c->lo, c->hi, seed);
  if (c->both_signs)
    for (int64_t i = 1; i < n; i += 2)
      v[i] = -v[i];
}

START_TEST(test_unary) {
  const unary_case *c = &unary_cases[_i];
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  tyto_tensor *y = unary_of(c->op, x);
  double v[N6];
  fill_case(v, N6, c, 100 + (uint64_t)_i);
  const double *vals[1] = {v};
  ad_check(y, 1, &x, vals, 0, 0);
  tyto_graph_free(g);
}
END_TEST

/* The same ops composed in float32, checked with the checker's float32
 * tolerances: the rules build in the node's dtype. */
START_TEST(test_unary_f32) {
  const unary_case *c = &unary_cases[_i];
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, AD_S(4), "x");
  tyto_tensor *y = unary_of(c->op, x);
  double v[4];
  float f[4];
  fill_case(v, 4, c, 200 + (uint64_t)_i);
  for (int i = 0; i < 4; i++)
    f[i] = (float)v[i];
  const float *vals[1] = {f};
  ad_check(y, 1, &x, vals, 0, 0);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Binary ops with broadcasting                                            */

typedef struct shape_pair {
  int ra;
  int64_t sa[2];
  int rb;
  int64_t sb[2];
} shape_pair;

static const shape_pair pairs[] = {
    {2, {2, 3}, 1, {3, 0}}, /* [2,3] with [3] */
    {2, {2, 1}, 2, {1, 3}}, /* [2,1] with [1,3] */
    {0, {0, 0}, 2, {2, 3}}, /* rank 0 with [2,3] */
    {2, {2, 3}, 0, {0, 0}}, /* [2,3] with rank 0 */
    {2, {2, 3}, 2, {2, 3}}, /* no broadcasting */
};
#define N_PAIRS (int)(sizeof pairs / sizeof pairs[0])

static int64_t numel_of(int rank, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= s[i];
  return n;
}

/* Values for a binary op's operand k, away from where it has no derivative
 * or is not defined. */
static void binary_values(tyto_op op, int k, double *v, int64_t n,
                          uint64_t seed) {
  switch (op) {
  case TYTO_OP_DIV:
    ad_fill(v, n, k ? 0.5 : -2, 2, seed);
    if (k)
      for (int64_t i = 1; i < n; i += 2)
        v[i] = -v[i];
    break;
  case TYTO_OP_POW: /* a > 0, any b */
    ad_fill(v, n, k ? -1.5 : 0.5, 2, seed);
    break;
  case TYTO_OP_ATAN2: /* away from the origin and the branch cut */
    ad_fill(v, n, k ? 0.3 : -2, 2, seed);
    break;
  default: ad_fill(v, n, -2, 2, seed);
  }
}

START_TEST(test_binary) {
  tyto_op op = (tyto_op)(TYTO_OP_ADD + _i);
  for (int p = 0; p < N_PAIRS; p++) {
    tyto_graph *g = tyto_graph_new();
    const shape_pair *s = &pairs[p];
    tyto_tensor *xs[2] = {ad_in(g, s->ra, s->sa, "a"),
                          ad_in(g, s->rb, s->sb, "b")};
    tyto_tensor *y = tyto_binary(op, xs[0], xs[1]);
    double va[6], vb[6];
    binary_values(op, 0, va, numel_of(s->ra, s->sa), 300 + (uint64_t)p);
    binary_values(op, 1, vb, numel_of(s->rb, s->sb), 400 + (uint64_t)p);
    const double *vals[2] = {va, vb};
    ad_check(y, 2, xs, vals, 0, 0);
    tyto_graph_free(g);
  }
}
END_TEST

/* One operand a constant: only the other is differentiated. */
START_TEST(test_binary_one_side) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  tyto_tensor *k =
      tyto_constant(g, TYTO_F64, 1, AD_S(3), (const double[]){0.5, 1.5, 2.5});
  tyto_tensor *y =
      tyto_add(tyto_div(k, tyto_pow(x, k)), tyto_atan2(k, tyto_mul(x, k)));
  y = tyto_add(y, tyto_pow(k, x));
  double v[6];
  ad_fill(v, 6, 0.5, 2, 7);
  const double *vals[1] = {v};
  ad_check(y, 1, &x, vals, 0, 0);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* where and fma with broadcasting                                         */

START_TEST(test_where) {
  tyto_graph *g = tyto_graph_new();
  /* cond [2,1], a [3], b rank 0: the output [2,3] comes from two */
  tyto_tensor *c =
      tyto_constant(g, TYTO_F64, 2, AD_S(2, 1), (const double[]){1, 0});
  tyto_tensor *xs[2] = {ad_in(g, 1, AD_S(3), "a"), ad_in(g, 0, NULL, "b")};
  tyto_tensor *y = tyto_mul(tyto_where(c, xs[0], xs[1]), xs[0]);
  double va[3], vb[1];
  ad_fill(va, 3, -2, 2, 1);
  ad_fill(vb, 1, -2, 2, 2);
  const double *vals[2] = {va, vb};
  ad_check(y, 2, xs, vals, 0, 0);

  /* cond [2,3] computed from a, a [2,1], b [1,3] */
  tyto_tensor *ys[2] = {ad_in(g, 2, AD_S(2, 1), "p"),
                        ad_in(g, 2, AD_S(1, 3), "q")};
  tyto_tensor *c2 = tyto_gt(tyto_add(ys[0], ys[1]), tyto_scalar_like(ys[0], 0));
  tyto_tensor *y2 = tyto_where(c2, tyto_square(ys[0]), tyto_sin(ys[1]));
  double vp[2] = {-1.0, 0.7}, vq[3] = {-0.4, 0.5, 1.9};
  const double *vals2[2] = {vp, vq};
  ad_check(y2, 2, ys, vals2, 0, 0);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_fma) {
  static const int ranks[2][3] = {{2, 1, 2}, {0, 2, 2}};
  static const int64_t shapes[2][3][2] = {{{2, 3}, {3, 0}, {2, 1}},
                                          {{0, 0}, {2, 1}, {1, 3}}};
  for (int k = 0; k < 2; k++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *xs[3];
    double v[3][6];
    const double *vals[3];
    for (int i = 0; i < 3; i++) {
      xs[i] = ad_in(g, ranks[k][i], shapes[k][i], NULL);
      ad_fill(v[i], 6, -2, 2, 50 + (uint64_t)(3 * k + i));
      vals[i] = v[i];
    }
    tyto_tensor *y = tyto_fma(xs[0], xs[1], xs[2]);
    ad_check(y, 3, xs, vals, 0, 0);
    /* each operand alone */
    for (int i = 0; i < 3; i++) {
      tyto_gradcheck_options o;
      tyto_gradcheck_options_init(&o);
      tyto_tensor *fixed[2];
      const void *fv[2];
      for (int j = 0, m = 0; j < 3; j++)
        if (j != i) {
          fixed[m] = xs[j];
          fv[m++] = v[j];
        }
      o.n_fixed = 2;
      o.fixed = fixed;
      o.fixed_values = fv;
      tyto_gradcheck_report r;
      ck_assert_int_eq(tyto_gradcheck(ad_ctx, y, 1, &xs[i],
                                      (const void *const *)&vals[i], &o, &r),
                       TYTO_OK);
      ck_assert_msg(r.passed, "fma operand %d: %s", i, r.message);
    }
    tyto_graph_free(g);
  }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Conventions at non-differentiable points, exactly                       */

/* grad of sum(f(x)) at the given values. */
static void grad_sum(tyto_tensor *x, tyto_tensor *fx, const double *v,
                     double *out) {
  tyto_tensor *gr = tyto_grad(tyto_sum(fx, 0, NULL, 0), x);
  const double *vals[1] = {v};
  ad_eval(gr, 1, &x, vals, out);
}

/* The tangent of f(x) along v = ones. */
static void jvp_ones(tyto_tensor *x, tyto_tensor *fx, const double *v,
                     double *out) {
  tyto_tensor *ones = tyto_full(tyto_tensor_graph(x), TYTO_F64,
                                tyto_tensor_rank(x), tyto_tensor_shape(x), 1.0);
  tyto_tensor *t;
  tyto_jvp(1, &x, &ones, 1, &fx, &t);
  const double *vals[1] = {v};
  ad_eval(t, 1, &x, vals, out);
}

START_TEST(test_kinks) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  const double v[3] = {-1, 0, 2};
  double out[3];
  struct {
    tyto_tensor *fx;
    double want[3];
    const char *what;
  } cases[] = {
      {tyto_relu(x), {0, 0, 1}, "relu'"},
      {tyto_abs(x), {-1, 0, 1}, "abs'"},
      {tyto_leaky_relu(x, 0.1), {0.1, 0.1, 1}, "leaky_relu'"},
      {tyto_elu(x, 1.5), {1.5 * exp(-1), 1.5, 1}, "elu'"},
      {tyto_sign(x), {0, 0, 0}, "sign'"},
      {tyto_floor(tyto_mul_scalar(x, 0.5)), {0, 0, 0}, "floor'"},
      {tyto_ceil(tyto_mul_scalar(x, 0.5)), {0, 0, 0}, "ceil'"},
      {tyto_round(tyto_mul_scalar(x, 0.5)), {0, 0, 0}, "round'"},
      {tyto_ge(x, tyto_scalar_like(x, 0)), {0, 0, 0}, "ge'"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    grad_sum(x, cases[k].fx, v, out);
    ad_expect(out, cases[k].want, 3, cases[k].what);
    jvp_ones(x, cases[k].fx, v, out);
    ad_expect(out, cases[k].want, 3, cases[k].what);
  }
  tyto_graph_free(g);
}
END_TEST

/* max/min on a tie: half the adjoint to each side, in both modes. */
START_TEST(test_max_min_ties) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *xs[2] = {ad_in(g, 1, AD_S(3), "a"), ad_in(g, 1, AD_S(3), "b")};
  const double va[3] = {1, 2, 3}, vb[3] = {1, 0, 5};
  const double *vals[2] = {va, vb};
  for (int mx = 0; mx < 2; mx++) {
    tyto_tensor *y = mx ? tyto_max(xs[0], xs[1]) : tyto_min(xs[0], xs[1]);
    tyto_tensor *gr[2];
    tyto_grads(tyto_sum(y, 0, NULL, 0), 2, xs, gr);
    double out[3];
    const double wa_max[3] = {0.5, 1, 0}, wb_max[3] = {0.5, 0, 1};
    ad_eval(gr[0], 2, xs, vals, out);
    ad_expect(out, mx ? wa_max : wb_max, 3, "d max/min / da");
    ad_eval(gr[1], 2, xs, vals, out);
    ad_expect(out, mx ? wb_max : wa_max, 3, "d max/min / db");
    /* forward: tangent 1 for a, 2 for b */
    tyto_tensor *ts[2] = {tyto_full(g, TYTO_F64, 1, AD_S(3), 1.0),
                          tyto_full(g, TYTO_F64, 1, AD_S(3), 2.0)};
    tyto_tensor *t;
    tyto_jvp(2, xs, ts, 1, &y, &t);
    ad_eval(t, 2, xs, vals, out);
    const double t_max[3] = {1.5, 1, 2}, t_min[3] = {1.5, 2, 1};
    ad_expect(out, mx ? t_max : t_min, 3, "max/min tangent");
  }
  tyto_graph_free(g);
}
END_TEST

/* pow(a, b) at a = 0: the b-derivative is 0 (no NaN from log 0), also
 * when differentiated again; d/da = b a^(b-1). */
START_TEST(test_pow_at_zero) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *xs[2] = {ad_in(g, 1, AD_S(3), "a"), ad_in(g, 1, AD_S(3), "b")};
  const double va[3] = {0, 2, 0}, vb[3] = {2, 3, 1};
  const double *vals[2] = {va, vb};
  tyto_tensor *s = tyto_sum(tyto_pow(xs[0], xs[1]), 0, NULL, 0);
  tyto_tensor *gr[2];
  tyto_grads(s, 2, xs, gr);
  double out[3];
  ad_eval(gr[0], 2, xs, vals, out);
  ad_expect(out, (const double[]){0, 12, 1}, 3, "d pow / da");
  ad_eval(gr[1], 2, xs, vals, out);
  ad_expect(out, (const double[]){0, 8 * log(2), 0}, 3, "d pow / db");
  /* d2/db2 = a^b log(a)^2, 0 at a = 0 */
  tyto_tensor *h = tyto_grad(tyto_sum(gr[1], 0, NULL, 0), xs[1]);
  ad_eval(h, 2, xs, vals, out);
  ad_expect(out, (const double[]){0, 8 * log(2) * log(2), 0}, 3,
            "d2 pow / db2");
  /* d2/da db = a^(b-1) (1 + b log a), with b log a taken as 0 at a = 0:
   * 0^1 = 0 at (0, 2), 4 (1 + 3 log 2) at (2, 3), 0^0 = 1 at (0, 1). */
  tyto_tensor *hab = tyto_grad(tyto_sum(gr[0], 0, NULL, 0), xs[1]);
  ad_eval(hab, 2, xs, vals, out);
  ad_expect(out, (const double[]){0, 4 * (1 + 3 * log(2)), 1}, 3,
            "d2 pow / da db");
  /* Exponent 0 and the third derivative of a square at 0: b a^(b-1)
   * would read 0 * inf there. */
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  const double vx[3] = {0, 1.5, -2};
  const double *xv[1] = {vx};
  tyto_tensor *p0 = tyto_grad(tyto_sum(tyto_pow_scalar(x, 0), 0, NULL, 0), x);
  ad_eval(p0, 1, &x, xv, out);
  ad_expect(out, (const double[]){0, 0, 0}, 3, "d x^0 / dx");
  tyto_tensor *d = tyto_pow_scalar(x, 2),
              *dv = tyto_pow(x, tyto_full(g, TYTO_F64, 1, AD_S(3), 2));
  for (int k = 0; k < 3; k++) {
    d = tyto_jacobianv(d, x, tyto_full(g, TYTO_F64, 1, AD_S(3), 1));
    dv = tyto_grad(tyto_sum(dv, 0, NULL, 0), x);
  }
  ad_eval(d, 1, &x, xv, out);
  ad_expect(out, (const double[]){0, 0, 0}, 3, "d3 x^2 / dx3 (forward)");
  ad_eval(dv, 1, &x, xv, out);
  ad_expect(out, (const double[]){0, 0, 0}, 3, "d3 x^2 / dx3 (reverse)");
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Higher derivatives                                                      */

/* d2/dx2 of elementwise f through nested tyto_grad, against closed
 * forms. */
START_TEST(test_second_derivatives) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(4), "x");
  double v[4] = {-1.3, -0.2, 0.4, 1.1}, out[4];
  const double *vals[1] = {v};
  for (int k = 0; k < 4; k++) {
    tyto_tensor *fx = k == 0   ? tyto_sin(x)
                      : k == 1 ? tyto_exp(x)
                      : k == 2 ? tyto_pow_scalar(x, 3.0)
                               : tyto_tanh(x);
    tyto_tensor *d1 = tyto_grad(tyto_sum(fx, 0, NULL, 0), x);
    tyto_tensor *d2 = tyto_grad(tyto_sum(d1, 0, NULL, 0), x);
    ad_eval(d2, 1, &x, vals, out);
    for (int i = 0; i < 4; i++) {
      double t = tanh(v[i]);
      double want = k == 0   ? -sin(v[i])
                    : k == 1 ? exp(v[i])
                    : k == 2 ? 6 * v[i]
                             : -2 * t * (1 - t * t);
      ck_assert_msg(fabs(out[i] - want) <= 1e-12 * fmax(1, fabs(want)),
                    "f %d x %g: %.17g vs %.17g", k, v[i], out[i], want);
    }
  }
  tyto_graph_free(g);
}
END_TEST

/* d4/dx4 by nesting tyto_diff four times (forward over forward ...), and
 * a mixed reverse/forward nesting. */
START_TEST(test_fourth_derivatives) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 0, NULL, "x");
  const double xv = 0.37;
  const double *vals[1] = {&xv};
  double t = tanh(xv), out;
  struct {
    tyto_tensor *f;
    double want;
  } cases[] = {
      {tyto_tanh(x), 8 * t * (1 - t * t) * (2 - 3 * t * t)},
      {tyto_sin(x), sin(xv)},
      {tyto_exp(tyto_mul_scalar(x, 2)), 16 * exp(2 * xv)},
      {tyto_sigmoid(x), 0},
      {tyto_log(x), -6 / pow(xv, 4)},
  };
  {
    /* sigmoid'''' = s(1-s)(1 - 14 s + 36 s^2 - 24 s^3) */
    double s = 1 / (1 + exp(-xv));
    cases[3].want = s * (1 - s) * (1 - 14 * s + 36 * s * s - 24 * s * s * s);
  }
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tyto_tensor *d = cases[k].f;
    for (int i = 0; i < 4; i++)
      d = tyto_diff(d, x);
    ad_eval(d, 1, &x, vals, &out);
    ck_assert_msg(fabs(out - cases[k].want) <=
                      1e-11 * fmax(1, fabs(cases[k].want)),
                  "case %zu: diff^4 %.17g vs %.17g", k, out, cases[k].want);
    /* grad(diff(grad(diff(f)))) */
    d = cases[k].f;
    for (int i = 0; i < 4; i++)
      d = i % 2 ? tyto_grad(d, x) : tyto_diff(d, x);
    ad_eval(d, 1, &x, vals, &out);
    ck_assert_msg(fabs(out - cases[k].want) <=
                      1e-11 * fmax(1, fabs(cases[k].want)),
                  "case %zu: mixed^4 %.17g vs %.17g", k, out, cases[k].want);
  }
  tyto_graph_free(g);
}
END_TEST

/* The gradient itself checked against differences: the rules are
 * differentiable again, for every differentiable unary op and the binary
 * ones. */
START_TEST(test_grad_of_grad) {
  const unary_case *c = &unary_cases[_i];
  if (c->op == TYTO_OP_SIGN || c->op == TYTO_OP_FLOOR ||
      c->op == TYTO_OP_CEIL || c->op == TYTO_OP_ROUND)
    return;
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(4), "x");
  tyto_tensor *gr = tyto_grad(tyto_sum(unary_of(c->op, x), 0, NULL, 0), x);
  double v[4];
  fill_case(v, 4, c, 500 + (uint64_t)_i);
  const double *vals[1] = {v};
  ad_check(gr, 1, &x, vals, 1e-5, 1e-7);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_grad_of_grad_binary) {
  tyto_op op = (tyto_op)(TYTO_OP_ADD + _i);
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *xs[2] = {ad_in(g, 2, AD_S(2, 3), "a"),
                        ad_in(g, 1, AD_S(3), "b")};
  tyto_tensor *gr[2];
  /* a nonlinear outer function so that even add's gradient varies */
  tyto_tensor *y = tyto_sin(tyto_binary(op, xs[0], xs[1]));
  tyto_grads(tyto_sum(y, 0, NULL, 0), 2, xs, gr);
  double va[6], vb[3];
  binary_values(op, 0, va, 6, 600 + (uint64_t)_i);
  binary_values(op, 1, vb, 3, 700 + (uint64_t)_i);
  const double *vals[2] = {va, vb};
  ad_check(gr[0], 2, xs, vals, 1e-5, 1e-7);
  ad_check(gr[1], 2, xs, vals, 1e-5, 1e-7);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Float32 and the engine's economy                                        */

/* A float32 graph's gradient evaluated in float32, against the f64
 * closed form. */
START_TEST(test_f32_exact) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, AD_S(3), "x");
  /* y = sum(tanh(x) * exp(x) / (1 + x^2)) */
  tyto_tensor *y = tyto_sum(tyto_div(tyto_mul(tyto_tanh(x), tyto_exp(x)),
                                     tyto_add_scalar(tyto_square(x), 1)),
                            0, NULL, 0);
  tyto_tensor *gr = tyto_grad(y, x);
  ck_assert_int_eq(tyto_tensor_dtype(gr), TYTO_F32);
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ad_ctx, g, 1, &gr, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  const float v[3] = {-0.8f, 0.1f, 1.2f};
  ck_assert_int_eq(tyto_program_set_input(p, x, v, sizeof v), TYTO_OK);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  float out[3];
  ck_assert_int_eq(tyto_program_read_output(p, 0, out, sizeof out), TYTO_OK);
  for (int i = 0; i < 3; i++) {
    double xi = v[i], t = tanh(xi), e = exp(xi), q = 1 + xi * xi;
    double want = ((1 - t * t) * e + t * e) / q - t * e * 2 * xi / (q * q);
    ck_assert_msg(fabs(out[i] - want) <= 1e-5 * fmax(1, fabs(want)),
                  "x %g: %.9g vs %.9g", xi, out[i], want);
  }
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* y = x*a + b*c, gradient with respect to x: b, c and b*c are not on a
 * path from x, so no new tensor reads them. */
START_TEST(test_no_nodes_for_inactive) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x"), *a = ad_in(g, 1, AD_S(3), "a");
  tyto_tensor *b = ad_in(g, 1, AD_S(3), "b"), *c = ad_in(g, 1, AD_S(3), "c");
  tyto_tensor *bc = tyto_mul(b, c);
  tyto_tensor *y = tyto_sum(tyto_add(tyto_mul(x, a), bc), 0, NULL, 0);
  size_t before = tyto_graph_size(g);
  tyto_tensor *gr = tyto_grad(y, x);
  size_t after = tyto_graph_size(g);
  /* ones, the sum's broadcast, g * a: a handful, whatever the rest */
  ck_assert_uint_le(after - before, 4);
  for (size_t i = before; i < after; i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    for (size_t j = 0; j < tyto_tensor_input_count(t); j++) {
      tyto_tensor *in = tyto_tensor_input(t, j);
      ck_assert_msg(
          in != b && in != c && in != bc, "new tensor #%zu (%s) reads #%lld", i,
          tyto_op_name(tyto_tensor_op(t)), (long long)tyto_tensor_index(in));
    }
  }
  double vx[3] = {1, 2, 3}, va[3] = {4, 5, 6}, out[3];
  tyto_tensor *xs[2] = {x, a};
  const double *vals[2] = {vx, va};
  ad_eval(gr, 2, xs, vals, out);
  ad_expect(out, va, 3, "d/dx (x a + b c)");
  tyto_graph_free(g);
}
END_TEST

/* Graph sizes: one derivative of tanh adds a constant number of tensors,
 * and each nested one at most about doubles the graph (no common
 * subexpressions are merged before the passes of the optimiser). */
START_TEST(test_graph_growth) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 0, NULL, "x");
  tyto_tensor *d = tyto_tanh(x);
  size_t before = tyto_graph_size(g);
  for (int k = 1; k <= 4; k++) {
    d = tyto_diff(d, x);
    size_t now = tyto_graph_size(g);
    /* the first: tangent 1, square(y), 1 - ., t * . */
    ck_assert_msg(k > 1 || now - before <= 6, "diff %d: %zu", k, now);
    ck_assert_msg(now <= 2 * before + 6, "diff %d: %zu tensors after %zu", k,
                  now, before);
    before = now;
  }
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grad_eltwise");
  TCase *tc = tcase_create("grad_eltwise");
  ad_fixture(tc);
  tcase_set_timeout(tc, 60);
  int n_unary = (int)(sizeof unary_cases / sizeof unary_cases[0]);
  tcase_add_loop_test(tc, test_unary, 0, n_unary);
  tcase_add_loop_test(tc, test_unary_f32, 0, n_unary);
  tcase_add_loop_test(tc, test_binary, 0, TYTO_OP_GE - TYTO_OP_ADD + 1);
  tcase_add_test(tc, test_binary_one_side);
  tcase_add_test(tc, test_where);
  tcase_add_test(tc, test_fma);
  tcase_add_test(tc, test_kinks);
  tcase_add_test(tc, test_max_min_ties);
  tcase_add_test(tc, test_pow_at_zero);
  tcase_add_test(tc, test_second_derivatives);
  tcase_add_test(tc, test_fourth_derivatives);
  tcase_add_loop_test(tc, test_grad_of_grad, 0, n_unary);
  tcase_add_loop_test(tc, test_grad_of_grad_binary, 0,
                      TYTO_OP_ATAN2 - TYTO_OP_ADD + 1);
  tcase_add_test(tc, test_f32_exact);
  tcase_add_test(tc, test_no_nodes_for_inactive);
  tcase_add_test(tc, test_graph_growth);
  suite_add_tcase(s, tc);
  return test_run(s);
}
