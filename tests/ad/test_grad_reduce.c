/* The derivative rules of the reductions and of matmul: reverse and
 * forward mode against central differences in float64 (tyto_gradcheck,
 * its default tolerances unless stated) over one, several and all axes
 * with and without keepdims, matmul with every transpose combination and
 * broadcast batch axes, the conventions of <tyto/ad.h> (ties, zeros in a
 * product, the L2 norm at 0) exactly, and gradients differentiated again. */
#include "ad_test.h"

#include <tyto/ops.h>

/* ---------------------------------------------------------------------- */
/* Reductions against differences                                         */

static const tyto_op reduce_ops[] = {
    TYTO_OP_SUM,    TYTO_OP_MEAN,        TYTO_OP_REDUCE_MAX, TYTO_OP_REDUCE_MIN,
    TYTO_OP_PROD,   TYTO_OP_LOG_SUM_EXP, TYTO_OP_NORM_L1,    TYTO_OP_NORM_L2,
    TYTO_OP_ARGMAX, TYTO_OP_ARGMIN,
};
#define N_REDUCE (int)(sizeof reduce_ops / sizeof reduce_ops[0])

typedef struct axes_case {
  int n; /* -1: every axis (axes NULL) */
  int axes[3];
} axes_case;

static const axes_case axes_cases[] = {
    {1, {1}}, {1, {-1}}, {2, {0, 2}}, {2, {2, 1}}, {-1, {0}}, {3, {0, 1, 2}},
};
#define N_AXES (int)(sizeof axes_cases / sizeof axes_cases[0])

static tyto_tensor *reduce_of(tyto_op op, tyto_tensor *x, const axes_case *a,
                              int keepdims) {
  if (op == TYTO_OP_ARGMAX) /* one axis */
    return tyto_argmax(x, a->axes[0], keepdims);
  if (op == TYTO_OP_ARGMIN)
    return tyto_argmin(x, a->axes[0], keepdims);
  return tyto_reduce(op, x, a->n, a->n < 0 ? NULL : a->axes, keepdims);
}

/* Values in +-[0.5, 1.5): away from 0 (norm_l1's kink), distinct (no ties
 * for max and min), and a product of 24 stays moderate. */
static void reduce_values(double *v, int64_t n, uint64_t seed) {
  ad_fill(v, n, 0.5, 1.5, seed);
  for (int64_t i = 0; i < n; i += 3)
    v[i] = -v[i];
}

START_TEST(test_reduce) {
  tyto_op op = reduce_ops[_i];
  double v[24];
  const double *vals[1] = {v};
  for (int a = 0; a < N_AXES; a++)
    for (int kd = 0; kd < 2; kd++) {
      tyto_graph *g = tyto_graph_new();
      tyto_tensor *x = ad_in(g, 3, AD_S(2, 3, 4), "x");
      tyto_tensor *y = reduce_of(op, x, &axes_cases[a], kd);
      reduce_values(v, 24, 10 * (uint64_t)_i + (uint64_t)a);
      ad_check(y, 1, &x, vals, 0, 0);
      tyto_graph_free(g);
    }
}
END_TEST

/* A reduction of a rank-0 tensor and of a [1] tensor. */
START_TEST(test_reduce_tiny) {
  for (int i = 0; i < N_REDUCE - 2; i++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = ad_in(g, 0, NULL, "x");
    tyto_tensor *x1 = ad_in(g, 1, AD_S(1), "x1");
    tyto_tensor *y =
        tyto_add(tyto_reduce(reduce_ops[i], x, 0, NULL, 0),
                 tyto_reduce(reduce_ops[i], x1, 1, (const int[]){0}, 1));
    tyto_tensor *xs[2] = {x, x1};
    double v0 = 0.7, v1 = -1.3;
    const double *vals[2] = {&v0, &v1};
    ad_check(y, 2, xs, vals, 0, 0);
    tyto_graph_free(g);
  }
}
END_TEST

/* The gradients themselves against differences: the rules differentiate
 * again (second derivatives of prod, lse, norm_l2, max ...). */
START_TEST(test_reduce_grad_of_grad) {
  tyto_op op = reduce_ops[_i];
  if (op == TYTO_OP_ARGMAX || op == TYTO_OP_ARGMIN)
    return;
  double v[24];
  const double *vals[1] = {v};
  for (int kd = 0; kd < 2; kd++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = ad_in(g, 2, AD_S(4, 6), "x");
    /* sin makes the outer function nonlinear so that even sum's second
     * derivative is not zero */
    tyto_tensor *y = tyto_sum(
        tyto_sin(tyto_reduce(op, x, 1, (const int[]){1}, kd)), 0, NULL, 0);
    tyto_tensor *gr = tyto_grad(y, x);
    reduce_values(v, 24, 900 + (uint64_t)_i);
    ad_check(gr, 1, &x, vals, 1e-5, 1e-7);
    tyto_graph_free(g);
  }
}
END_TEST

/* Float32 graphs: the rules build in the node's dtype; checked with the
 * checker's float32 tolerances. */
START_TEST(test_reduce_f32) {
  tyto_op op = reduce_ops[_i];
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, AD_S(3, 4), "x");
  tyto_tensor *w = tyto_input(g, TYTO_F32, 2, AD_S(4, 2), "w");
  axes_case a = {1, {1}};
  /* the reduction of a matmul: both rules in f32 */
  tyto_tensor *y = reduce_of(op, tyto_matmul(x, w, 0, 0), &a, 0);
  tyto_tensor *xs[2] = {x, w};
  double v[12];
  float fx[12], fw[8];
  reduce_values(v, 12, 77 + (uint64_t)_i);
  for (int i = 0; i < 12; i++)
    fx[i] = (float)v[i];
  ad_fill(v, 8, -1, 1, 78 + (uint64_t)_i);
  for (int i = 0; i < 8; i++)
    fw[i] = (float)v[i];
  const float *vals[2] = {fx, fw};
  ad_check(y, 2, xs, vals, 0, 0);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Conventions, exactly                                                    */

/* gradient of sum(y) and tangent along v, for y = f(x) and x given. */
static void grad_and_jvp(tyto_tensor *x, tyto_tensor *y, const double *xv,
                         const double *dir, double *gout, double *tout) {
  tyto_graph *g = tyto_tensor_graph(x);
  tyto_tensor *gr = tyto_grad(tyto_sum(y, 0, NULL, 0), x);
  tyto_tensor *v = tyto_constant(g, TYTO_F64, tyto_tensor_rank(x),
                                 tyto_tensor_shape(x), dir);
  tyto_tensor *t;
  tyto_jvp(1, &x, &v, 1, &y, &t);
  const double *vals[1] = {xv};
  ad_eval(gr, 1, &x, vals, gout);
  ad_eval(t, 1, &x, vals, tout);
}

/* reduce_max/min share the adjoint evenly among tied elements. */
START_TEST(test_max_min_ties) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  const double v[6] = {1, 3, 3, 2, 2, 2};
  const double dir[6] = {1, 2, 4, 1, 2, 6};
  double gout[6], tout[6];
  int ax = 1;
  grad_and_jvp(x, tyto_reduce_max(x, 1, &ax, 0), v, dir, gout, tout);
  const double third = 1.0 / 3;
  ad_expect(gout, (const double[]){0, 0.5, 0.5, third, third, third}, 6,
            "reduce_max ties");
  ad_expect(tout, (const double[]){3, 3}, 2, "reduce_max tie tangent");
  grad_and_jvp(x, tyto_reduce_min(x, 1, &ax, 1), v, dir, gout, tout);
  ad_expect(gout, (const double[]){1, 0, 0, third, third, third}, 6,
            "reduce_min ties");
  ad_expect(tout, (const double[]){1, 3}, 2, "reduce_min tie tangent");
  /* over every axis: the 3s tie */
  grad_and_jvp(x, tyto_reduce_max(x, 0, NULL, 0), v, dir, gout, tout);
  ad_expect(gout, (const double[]){0, 0.5, 0.5, 0, 0, 0}, 6, "max all ties");
  ad_expect(tout, (const double[]){3}, 1, "max all tangent");
  tyto_graph_free(g);
}
END_TEST

/* prod is exact with zeros: one zero gets the product of the others, two
 * or more give a zero gradient. */
START_TEST(test_prod_zeros) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(4, 3), "x");
  const double v[12] = {2, 0, 3, /**/ 0, 0, 1, /**/ 1, 2, 4, /**/ 0, 5, -2};
  const double dir[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5, 1};
  double gout[12], tout[12];
  int ax = 1;
  tyto_tensor *y = tyto_prod(x, 1, &ax, 0);
  grad_and_jvp(x, y, v, dir, gout, tout);
  ad_expect(
      gout,
      (const double[]){0, 6, 0, /**/ 0, 0, 0, /**/ 8, 4, 2, /**/ -10, 0, 0}, 12,
      "prod with zeros");
  ad_expect(tout, (const double[]){6, 0, 8 + 4 + 2, -10}, 4,
            "prod tangent with zeros");
  /* the whole tensor: three zeros */
  grad_and_jvp(x, tyto_prod(x, 0, NULL, 1), v, dir, gout, tout);
  for (int i = 0; i < 12; i++)
    ck_assert_double_eq(gout[i], 0);
  ck_assert_double_eq(tout[0], 0);
  tyto_graph_free(g);
}
END_TEST

/* norm_l2 at 0 has gradient 0 (not NaN), norm_l1 sign(0) = 0, and a
 * reduction whose output feeds nothing of x's gets no NaN either. */
START_TEST(test_norm_at_zero) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 2), "x");
  const double v[4] = {0, 0, 3, -4}, dir[4] = {1, 2, 3, 4};
  double gout[4], tout[4];
  int ax = 1;
  grad_and_jvp(x, tyto_norm_l2(x, 1, &ax, 0), v, dir, gout, tout);
  ad_expect(gout, (const double[]){0, 0, 0.6, -0.8}, 4, "norm_l2 at 0");
  ad_expect(tout, (const double[]){0, 0.6 * 3 - 0.8 * 4}, 2, "norm_l2 tangent");
  grad_and_jvp(x, tyto_norm_l1(x, 1, &ax, 1), v, dir, gout, tout);
  ad_expect(gout, (const double[]){0, 0, 1, -1}, 4, "norm_l1 at 0");
  ad_expect(tout, (const double[]){0, -1}, 2, "norm_l1 tangent");
  tyto_graph_free(g);
}
END_TEST

/* argmax and argmin have derivative zero in both modes. */
START_TEST(test_arg_zero) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  const double v[6] = {1, 5, 2, 7, 0, 3}, dir[6] = {1, 1, 1, 1, 1, 1};
  double gout[6], tout[6];
  for (int k = 0; k < 2; k++) {
    tyto_tensor *y = k ? tyto_argmin(x, 1, 0) : tyto_argmax(x, 1, 0);
    grad_and_jvp(x, y, v, dir, gout, tout);
    for (int i = 0; i < 6; i++)
      ck_assert_double_eq(gout[i], 0);
    ck_assert_double_eq(tout[0], 0);
    ck_assert_double_eq(tout[1], 0);
  }
  tyto_graph_free(g);
}
END_TEST

/* mean's gradient is 1/count, lse's the softmax: closed forms. */
START_TEST(test_mean_lse_exact) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 2), "x");
  const double v[4] = {0, 1, 2, 2}, dir[4] = {1, 0, 0, 0};
  double gout[4], tout[4];
  grad_and_jvp(x, tyto_mean(x, 1, (const int[]){0}, 0), v, dir, gout, tout);
  ad_expect(gout, (const double[]){0.5, 0.5, 0.5, 0.5}, 4, "mean");
  ad_expect(tout, (const double[]){0.5, 0}, 2, "mean tangent");
  grad_and_jvp(x, tyto_log_sum_exp(x, 1, (const int[]){1}, 0), v, dir, gout,
               tout);
  double e = exp(1.0);
  ad_expect(gout, (const double[]){1 / (1 + e), e / (1 + e), 0.5, 0.5}, 4,
            "lse");
  ad_expect(tout, (const double[]){1 / (1 + e), 0}, 2, "lse tangent");
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* matmul                                                                  */

/* A logical [..., 3, 4] times B logical [..., 4, 5]; a stored transposed
 * when ta, b when tb. */
static void matmul_case(int ra, const int64_t *batch_a, int rb,
                        const int64_t *batch_b, int ta, int tb) {
  tyto_graph *g = tyto_graph_new();
  int64_t sa[4], sb[4];
  for (int i = 0; i < ra - 2; i++)
    sa[i] = batch_a[i];
  for (int i = 0; i < rb - 2; i++)
    sb[i] = batch_b[i];
  sa[ra - 2] = ta ? 4 : 3;
  sa[ra - 1] = ta ? 3 : 4;
  sb[rb - 2] = tb ? 5 : 4;
  sb[rb - 1] = tb ? 4 : 5;
  tyto_tensor *xs[2] = {ad_in(g, ra, sa, "a"), ad_in(g, rb, sb, "b")};
  tyto_tensor *y = tyto_matmul(xs[0], xs[1], ta, tb);
  double va[64], vb[64];
  ad_fill(va, tyto_tensor_numel(xs[0]), -1, 1, 11);
  ad_fill(vb, tyto_tensor_numel(xs[1]), -1, 1, 12);
  const double *vals[2] = {va, vb};
  ad_check(y, 2, xs, vals, 0, 0);
  /* and the gradients differentiated again (through sin, so not zero) */
  tyto_tensor *gr[2];
  tyto_grads(tyto_sum(tyto_sin(y), 0, NULL, 0), 2, xs, gr);
  ad_check(gr[0], 2, xs, vals, 1e-5, 1e-7);
  ad_check(gr[1], 2, xs, vals, 1e-5, 1e-7);
  tyto_graph_free(g);
}

START_TEST(test_matmul_transposes) {
  int ta = _i & 1, tb = _i >> 1;
  matmul_case(2, NULL, 2, NULL, ta, tb);
  matmul_case(3, AD_S(2), 2, NULL, ta, tb);       /* [2,3,4] x [4,5] */
  matmul_case(3, AD_S(1), 3, AD_S(2), ta, tb);    /* [1,3,4] x [2,4,5] */
  matmul_case(2, NULL, 4, AD_S(2, 1), ta, tb);    /* [3,4] x [2,1,4,5] */
  matmul_case(4, AD_S(1, 2), 3, AD_S(2), ta, tb); /* [1,2,..] x [2,..] */
}
END_TEST

/* The product rule written out: d(A B) = dA B + A dB, exactly. */
START_TEST(test_matmul_exact) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = ad_in(g, 2, AD_S(2, 2), "a"),
              *b = ad_in(g, 2, AD_S(2, 2), "b");
  tyto_tensor *xs[2] = {a, b};
  const double va[4] = {1, 2, 3, 4}, vb[4] = {5, 6, 7, 8};
  const double *vals[2] = {va, vb};
  /* grad of sum(A B) wrt A: row sums of B for every row of A */
  tyto_tensor *gr[2];
  tyto_grads(tyto_sum(tyto_matmul(a, b, 0, 0), 0, NULL, 0), 2, xs, gr);
  double out[4];
  ad_eval(gr[0], 2, xs, vals, out);
  ad_expect(out, (const double[]){11, 15, 11, 15}, 4, "d sum(AB)/dA");
  ad_eval(gr[1], 2, xs, vals, out);
  ad_expect(out, (const double[]){4, 4, 6, 6}, 4, "d sum(AB)/dB");
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grad_reduce");
  TCase *tc = tcase_create("grad_reduce");
  ad_fixture(tc);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_reduce, 0, N_REDUCE);
  tcase_add_test(tc, test_reduce_tiny);
  tcase_add_loop_test(tc, test_reduce_grad_of_grad, 0, N_REDUCE);
  tcase_add_loop_test(tc, test_reduce_f32, 0, N_REDUCE);
  tcase_add_test(tc, test_max_min_ties);
  tcase_add_test(tc, test_prod_zeros);
  tcase_add_test(tc, test_norm_at_zero);
  tcase_add_test(tc, test_arg_zero);
  tcase_add_test(tc, test_mean_lse_exact);
  tcase_add_loop_test(tc, test_matmul_transposes, 0, 4);
  tcase_add_test(tc, test_matmul_exact);
  suite_add_tcase(s, tc);
  return test_run(s);
}
