/* The derivative rules of the linear-algebra ops (core/src/ad/rules_linalg.c)
 * against central differences (tyto_gradcheck, f64, both modes) and closed
 * forms computed here in plain C: grad logdet = A^-T, grad det = det(A)
 * A^-T, and the Hessian-vector product of logdet, -A^-T V^T A^-T. */
#include "ad_test.h"

#define F64 TYTO_F64

/* ---------------------------------------------------------------------- */
/* Inputs and plain-C references                                           */

/* A random matrix (batch of) with |entries| < 1 plus `diag` on the
 * diagonal: diagonally dominant for diag > n, so well conditioned. */
static void fill_dominant(double *v, int64_t batch, int64_t n, double diag,
                          uint64_t seed) {
  ad_fill(v, batch * n * n, -1, 1, seed);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < n; i++)
      v[b * n * n + i * n + i] += diag;
}

/* B B^T + n I: symmetric positive definite, eigenvalues at least n. */
static void fill_spd(double *v, int64_t batch, int64_t n, uint64_t seed) {
  double b[64];
  ck_assert_int_le(n * n, 64);
  for (int64_t k = 0; k < batch; k++) {
    ad_fill(b, n * n, -1, 1, seed + (uint64_t)k);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = i == j ? (double)n : 0.0;
        for (int64_t l = 0; l < n; l++)
          s += b[i * n + l] * b[j * n + l];
        v[k * n * n + i * n + j] = s;
      }
  }
}

/* The inverse of the n x n matrix a (n <= 8) by Gauss-Jordan with partial
 * pivoting; returns the determinant. */
static double ref_inv(const double *a, int n, double *inv) {
  double m[8][16], det = 1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < 2 * n; j++)
      m[i][j] = j < n ? a[i * n + j] : (j - n == i);
  for (int c = 0; c < n; c++) {
    int p = c;
    for (int r = c + 1; r < n; r++)
      if (fabs(m[r][c]) > fabs(m[p][c]))
        p = r;
    if (p != c) {
      det = -det;
      for (int j = 0; j < 2 * n; j++) {
        double t = m[c][j];
        m[c][j] = m[p][j];
        m[p][j] = t;
      }
    }
    double d = m[c][c];
    det *= d;
    for (int j = 0; j < 2 * n; j++)
      m[c][j] /= d;
    for (int r = 0; r < n; r++)
      if (r != c) {
        double f = m[r][c];
        for (int j = 0; j < 2 * n; j++)
          m[r][j] -= f * m[c][j];
      }
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      inv[i * n + j] = m[i][n + j];
  return det;
}

static void assert_close(const double *got, const double *want, int64_t n,
                         double tol, const char *what) {
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                  "%s[%lld]: got %.12g, want %.12g", what, (long long)i, got[i],
                  want[i]);
}

/* sum(W * y) with fixed random weights W shaped as y: a scalar through
 * which every element of y matters. */
static tyto_tensor *weighted(tyto_tensor *y, uint64_t seed) {
  double w[256];
  int64_t n = tyto_tensor_numel(y);
  ck_assert_int_le(n, 256);
  ad_fill(w, n, -1, 1, seed);
  tyto_tensor *c = tyto_constant(tyto_tensor_graph(y), F64, tyto_tensor_rank(y),
                                 tyto_tensor_shape(y), w);
  return tyto_sum(tyto_mul(c, y), 0, NULL, 0);
}

static tyto_tensor *sym(tyto_tensor *a) {
  return tyto_mul_scalar(tyto_add(a, tyto_transpose(a, -1, -2)), 0.5);
}

/* ---------------------------------------------------------------------- */
/* inv, det, logdet                                                        */

START_TEST(test_inv) {
  /* A single matrix and a batch. */
  for (int batched = 0; batched < 2; batched++) {
    tyto_graph *g = tyto_graph_new();
    int rank = batched ? 3 : 2;
    const int64_t *shape = batched ? AD_S(2, 3, 3) : AD_S(3, 3);
    tyto_tensor *a = tyto_input(g, F64, rank, shape, "A");
    double av[18];
    fill_dominant(av, batched ? 2 : 1, 3, 4.0, 11 + (uint64_t)batched);
    const double *vals[1] = {av};
    ad_check(tyto_inv(a), 1, &a, vals, 0, 0);
    tyto_graph_free(g);
  }
}
END_TEST

START_TEST(test_det_logdet) {
  for (int batched = 0; batched < 2; batched++) {
    tyto_graph *g = tyto_graph_new();
    int rank = batched ? 3 : 2;
    const int64_t *shape = batched ? AD_S(2, 3, 3) : AD_S(3, 3);
    tyto_tensor *a = tyto_input(g, F64, rank, shape, "A");
    double av[18];
    /* Diagonal -4 for the batch: a negative determinant, as log|det|
     * allows. */
    fill_dominant(av, batched ? 2 : 1, 3, batched ? -4.0 : 4.0, 21);
    const double *vals[1] = {av};
    ad_check(tyto_det(a), 1, &a, vals, 0, 0);
    ad_check(tyto_logdet(a), 1, &a, vals, 0, 0);
    tyto_graph_free(g);
  }
}
END_TEST

/* The closed forms, on a 4 x 4 matrix: grad logdet = A^-T, grad det =
 * det(A) A^-T, and H.V of logdet = -A^-T V^T A^-T. */
START_TEST(test_logdet_closed_form) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, 2, AD_S(4, 4), "A");
  double av[16], vv[16], inv[16], want[16], got[16];
  fill_dominant(av, 1, 4, 5.0, 31);
  ad_fill(vv, 16, -1, 1, 32);
  double det = ref_inv(av, 4, inv);
  const double *vals[1] = {av};

  ad_eval(tyto_grad(tyto_logdet(a), a), 1, &a, vals, got);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      want[i * 4 + j] = inv[j * 4 + i];
  assert_close(got, want, 16, 1e-12, "grad logdet");

  ad_eval(tyto_grad(tyto_det(a), a), 1, &a, vals, got);
  for (int i = 0; i < 16; i++)
    want[i] *= det;
  assert_close(got, want, 16, 1e-11, "grad det");

  /* Forward mode too: d det = det tr(A^-1 V). */
  tyto_tensor *v = tyto_constant(g, F64, 2, AD_S(4, 4), vv);
  double d1, tr = 0;
  ad_eval(tyto_jacobianv(tyto_logdet(a), a, v), 1, &a, vals, &d1);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      tr += inv[i * 4 + j] * vv[j * 4 + i];
  ck_assert_double_eq_tol(d1, tr, 1e-12);

  ad_eval(tyto_hessianv(tyto_logdet(a), a, v), 1, &a, vals, got);
  /* -A^-T V^T A^-T = -(A^-1 V A^-1)^T. */
  double t[16], u[16];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      double s = 0;
      for (int k = 0; k < 4; k++)
        s += inv[i * 4 + k] * vv[k * 4 + j];
      t[i * 4 + j] = s;
    }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      double s = 0;
      for (int k = 0; k < 4; k++)
        s += t[i * 4 + k] * inv[k * 4 + j];
      u[i * 4 + j] = s;
    }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      want[i * 4 + j] = -u[j * 4 + i];
  assert_close(got, want, 16, 1e-12, "hessianv logdet");
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* solve                                                                   */

static void check_solve(int ra, const int64_t *sa, int rb, const int64_t *sb,
                        uint64_t seed) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, ra, sa, "A");
  tyto_tensor *b = tyto_input(g, F64, rb, sb, "B");
  int64_t na = tyto_tensor_numel(a), nb = tyto_tensor_numel(b);
  double av[64], bv[64];
  fill_dominant(av, na / 9, 3, 4.0, seed);
  ad_fill(bv, nb, -1, 1, seed + 1);
  tyto_tensor *xs[2] = {a, b};
  const double *vals[2] = {av, bv};
  ad_check(tyto_solve(a, b), 2, xs, vals, 0, 0);
  tyto_graph_free(g);
}

START_TEST(test_solve) {
  check_solve(2, AD_S(3, 3), 2, AD_S(3, 2), 41);
  check_solve(3, AD_S(2, 3, 3), 3, AD_S(2, 3, 2), 42);
  /* Broadcast batch axes: each operand's adjoint summed back. */
  check_solve(2, AD_S(3, 3), 3, AD_S(2, 3, 2), 43);
  check_solve(3, AD_S(2, 3, 3), 2, AD_S(3, 1), 44);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* triangular_solve                                                        */

static void check_trisolve(int ra, const int64_t *sa, int rb, const int64_t *sb,
                           int lower, int trans, int unit, uint64_t seed) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, ra, sa, "A");
  tyto_tensor *b = tyto_input(g, F64, rb, sb, "B");
  int64_t na = tyto_tensor_numel(a), nb = tyto_tensor_numel(b);
  double av[64], bv[64];
  /* The whole of A is random: the triangle not read must get a zero
   * derivative, which the differences then confirm. */
  fill_dominant(av, na / 9, 3, 3.0, seed);
  ad_fill(bv, nb, -1, 1, seed + 1);
  tyto_tensor *xs[2] = {a, b};
  const double *vals[2] = {av, bv};
  ad_check(tyto_triangular_solve(a, b, lower, trans, unit), 2, xs, vals, 0, 0);
  tyto_graph_free(g);
}

START_TEST(test_triangular_solve) {
  for (int lower = 0; lower < 2; lower++)
    for (int trans = 0; trans < 2; trans++)
      for (int unit = 0; unit < 2; unit++)
        check_trisolve(2, AD_S(3, 3), 2, AD_S(3, 2), lower, trans, unit,
                       (uint64_t)(50 + 4 * lower + 2 * trans + unit));
  check_trisolve(2, AD_S(3, 3), 3, AD_S(2, 3, 2), 1, 0, 0, 61);
  check_trisolve(3, AD_S(2, 3, 3), 2, AD_S(3, 2), 0, 1, 0, 62);
}
END_TEST

/* The adjoint of A is zero outside the triangle read (and on the diagonal
 * for a unit diagonal), exactly. */
START_TEST(test_triangular_solve_mask) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, 2, AD_S(3, 3), "A");
  tyto_tensor *b = tyto_input(g, F64, 2, AD_S(3, 2), "B");
  double av[9], bv[6], got[9];
  fill_dominant(av, 1, 3, 3.0, 71);
  ad_fill(bv, 6, -1, 1, 72);
  tyto_tensor *xs[2] = {a, b};
  const double *vals[2] = {av, bv};
  for (int lower = 0; lower < 2; lower++)
    for (int unit = 0; unit < 2; unit++) {
      tyto_tensor *y = weighted(tyto_triangular_solve(a, b, lower, 0, unit), 7);
      ad_eval(tyto_grad(y, a), 2, xs, vals, got);
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
          int read = lower ? j <= i : j >= i;
          if (unit && i == j)
            read = 0;
          if (!read)
            ck_assert_msg(got[i * 3 + j] == 0.0, "lower %d unit %d: (%d,%d) %g",
                          lower, unit, i, j, got[i * 3 + j]);
          else
            ck_assert_msg(got[i * 3 + j] != 0.0, "lower %d unit %d: (%d,%d)",
                          lower, unit, i, j);
        }
    }
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* cholesky                                                                */

START_TEST(test_cholesky) {
  for (int batched = 0; batched < 2; batched++) {
    tyto_graph *g = tyto_graph_new();
    int rank = batched ? 3 : 2;
    const int64_t *shape = batched ? AD_S(2, 3, 3) : AD_S(3, 3);
    tyto_tensor *a = tyto_input(g, F64, rank, shape, "A");
    double av[18];
    fill_spd(av, batched ? 2 : 1, 3, 81);
    const double *vals[1] = {av};
    /* Symmetrised in the graph, so that differences in one element of A
     * stay on symmetric matrices. */
    ad_check(tyto_cholesky(sym(a)), 1, &a, vals, 0, 0);
    tyto_graph_free(g);
  }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* qr                                                                      */

/* sum(W1 * Q) + sum(W2 * R), and Q and R alone. LAPACK's Householder QR
 * fixes the signs of R's diagonal by the data, so Q and R are smooth
 * functions of A near a full-rank A. */
static void check_qr(int rank, const int64_t *shape, uint64_t seed) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, rank, shape, "A");
  double av[64];
  ad_fill(av, tyto_tensor_numel(a), -1, 1, seed);
  const double *vals[1] = {av};
  tyto_tensor *q, *r;
  tyto_qr(a, &q, &r);
  ad_check(tyto_add(weighted(q, seed + 1), weighted(r, seed + 2)), 1, &a, vals,
           0, 0);
  ad_check(q, 1, &a, vals, 0, 0);
  ad_check(r, 1, &a, vals, 0, 0);
  tyto_graph_free(g);
}

START_TEST(test_qr) {
  check_qr(2, AD_S(3, 3), 91);
  check_qr(2, AD_S(5, 3), 92);
  check_qr(3, AD_S(2, 4, 3), 93);
  /* Wide: A = [X | Y] split at the square part. */
  check_qr(2, AD_S(3, 5), 94);
  check_qr(3, AD_S(2, 2, 4), 95);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Second order: the derivative rules differentiated again                 */

/* grad of s(A) = sum(W * f(A)), checked itself against differences. */
START_TEST(test_second_order) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, F64, 2, AD_S(3, 3), "A");
  tyto_tensor *b = tyto_input(g, F64, 2, AD_S(3, 2), "B");
  double av[9], sv[9], bv[6];
  fill_dominant(av, 1, 3, 4.0, 101);
  fill_spd(sv, 1, 3, 102);
  ad_fill(bv, 6, -1, 1, 103);
  const double *va[1] = {av}, *vs[1] = {sv};
  tyto_tensor *ab[2] = {a, b};
  const double *vab[2] = {av, bv};
  /* The Hessian of logdet and of det, through the gradient. */
  ad_check(tyto_grad(tyto_logdet(a), a), 1, &a, va, 1e-5, 1e-7);
  ad_check(tyto_grad(tyto_det(a), a), 1, &a, va, 1e-5, 1e-7);
  /* A function of inv. */
  ad_check(tyto_grad(weighted(tyto_inv(a), 1), a), 1, &a, va, 1e-5, 1e-7);
  /* solve, in both operands at once. */
  tyto_tensor *gs[2];
  tyto_grads(weighted(tyto_solve(a, b), 2), 2, ab, gs);
  ad_check(tyto_add(weighted(gs[0], 3), weighted(gs[1], 4)), 2, ab, vab, 1e-5,
           1e-7);
  /* triangular_solve, the same way. */
  tyto_grads(weighted(tyto_triangular_solve(a, b, 1, 1, 0), 5), 2, ab, gs);
  ad_check(tyto_add(weighted(gs[0], 6), weighted(gs[1], 7)), 2, ab, vab, 1e-5,
           1e-7);
  /* cholesky, whose rules are built on triangular solves. */
  ad_check(tyto_grad(weighted(tyto_cholesky(sym(a)), 8), a), 1, &a, vs, 1e-5,
           1e-7);
  /* qr (tall and square). */
  tyto_tensor *q, *r;
  tyto_qr(a, &q, &r);
  ad_check(tyto_grad(tyto_add(weighted(q, 9), weighted(r, 10)), a), 1, &a, va,
           1e-5, 1e-7);
  /* qr, wide: B^T is [2, 3]. */
  tyto_tensor *bt = tyto_transpose(b, 0, 1);
  tyto_qr(bt, &q, &r);
  ad_check(tyto_grad(tyto_add(weighted(q, 11), weighted(r, 12)), b), 1, &b,
           &vab[1], 1e-5, 1e-7);
  tyto_graph_free(g);
}
END_TEST

/* The rules in f32, against f32 differences at the checker's f32
 * tolerances: the masks and constants they build take the graph's
 * dtype. */
START_TEST(test_f32) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F32, 3, AD_S(2, 3, 3), "A");
  tyto_tensor *b = tyto_input(g, TYTO_F32, 2, AD_S(3, 2), "B");
  double ad[18], bd[6];
  float af[18], sf[18], bf[6];
  fill_dominant(ad, 2, 3, 4.0, 111);
  ad_fill(bd, 6, -1, 1, 112);
  for (int i = 0; i < 18; i++)
    af[i] = (float)ad[i];
  for (int i = 0; i < 6; i++)
    bf[i] = (float)bd[i];
  fill_spd(ad, 2, 3, 113);
  for (int i = 0; i < 18; i++)
    sf[i] = (float)ad[i];
  const float *va[1] = {af}, *vs[1] = {sf}, *vab[2] = {af, bf};
  tyto_tensor *ab[2] = {a, b};
  ad_check(tyto_logdet(a), 1, &a, va, 0, 0);
  ad_check(tyto_solve(a, b), 2, ab, vab, 0, 0);
  ad_check(tyto_triangular_solve(a, b, 0, 1, 1), 2, ab, vab, 0, 0);
  ad_check(tyto_cholesky(sym(a)), 1, &a, vs, 0, 0);
  tyto_tensor *q, *r;
  tyto_qr(a, &q, &r);
  ad_check(r, 1, &a, va, 0, 0);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grad_linalg");
  TCase *tc = tcase_create("grad_linalg");
  ad_fixture(tc);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_inv);
  tcase_add_test(tc, test_det_logdet);
  tcase_add_test(tc, test_logdet_closed_form);
  tcase_add_test(tc, test_solve);
  tcase_add_test(tc, test_triangular_solve);
  tcase_add_test(tc, test_triangular_solve_mask);
  tcase_add_test(tc, test_cholesky);
  tcase_add_test(tc, test_qr);
  tcase_add_test(tc, test_second_order);
  tcase_add_test(tc, test_f32);
  suite_add_tcase(s, tc);
  return test_run(s);
}
