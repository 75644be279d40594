/* INV, DET, LOGDET, SOLVE, CHOLESKY, QR and TRIANGULAR_SOLVE on the CPU
 * plugin, in f32 and f64, checked by identities computed in float64 here
 * (A inv(A) = I, A X = B, op(T) X = B, L L^T = A, Q^T Q = I, Q R = A),
 * known determinants, batched (broadcast too) and with non-contiguous
 * layouts; and the exact errors of invalid calls.
 * Tolerances: f64 1e-10, f32 2e-4 (relative to the entries' scale of ~1). */
#include "harness.h"

#include <math.h>

static const uint32_t dtypes[2] = {F32, F64};

static double tol(uint32_t dt) {
  return dt == F32 ? 2e-4 : 1e-10;
}

/* A batch of nb rows x cols matrices, [nb, rows, cols], each stored
 * column-major (strides {rows*cols, 1, rows}) after an offset of 2. v holds
 * the matrices row-major, one after another. */
static h_tensor batch(uint32_t dt, int64_t nb, int64_t rows, int64_t cols,
                      const double *v) {
  int64_t n = nb * rows * cols;
  h_tensor t = h_tensor_new(dt, 1, (int64_t[]){n + 2}, NULL);
  t.layout.rank = 3;
  t.layout.shape[0] = nb;
  t.layout.shape[1] = rows;
  t.layout.shape[2] = cols;
  t.layout.strides[0] = rows * cols;
  t.layout.strides[1] = 1;
  t.layout.strides[2] = rows;
  t.layout.offset = 2;
  t.values[0] = t.values[1] = -55;
  if (v)
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
          t.values[h_at(&t, (int64_t[]){b, i, j})] =
              v[(b * rows + i) * cols + j];
  return t;
}

/* Entry (i, j) of matrix b. */
static double at(const h_tensor *t, int64_t b, int64_t i, int64_t j) {
  return t->values[h_at(t, (int64_t[]){b, i, j})];
}

/* Pseudo-random entries in [-1, 1), the same on every run. */
static void fill(double *v, int64_t n, unsigned seed) {
  uint64_t s = seed * UINT64_C(6364136223846793005) + 1442695040888963407u;
  for (int64_t i = 0; i < n; i++) {
    s = s * UINT64_C(6364136223846793005) + 1442695040888963407u;
    v[i] = (double)(s >> 11) / 4503599627370496.0 - 1.0;
  }
}

/* nb well-conditioned n x n matrices: random plus n on the diagonal. */
static void well_conditioned(double *v, int64_t nb, int64_t n, unsigned seed) {
  fill(v, nb * n * n, seed);
  for (int64_t b = 0; b < nb; b++)
    for (int64_t i = 0; i < n; i++)
      v[(b * n + i) * n + i] += (double)n;
}

START_TEST(inv_times_a_is_identity) {
  harness hx;
  harness_open(&hx);
  const int64_t nb = 3, n = 5;
  double v[3 * 5 * 5];
  well_conditioned(v, nb, n, 1);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor a = batch(dt, nb, n, n, v), y = batch(dt, nb, n, n, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_INV, &a, 1, &y, 1, NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
          double s = 0;
          for (int64_t k = 0; k < n; k++)
            s += at(&a, b, i, k) * at(&y, b, k, j);
          ck_assert_msg(fabs(s - (i == j)) < tol(dt),
                        "%s: (A inv(A))[%lld][%lld][%lld] = %g",
                        f ? "f64" : "f32", (long long)b, (long long)i,
                        (long long)j, s);
        }
    ck_assert_double_eq(y.values[0], -55);
    ck_assert_double_eq(y.values[1], -55);
    h_tensor_free(&a);
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(det_and_logdet_of_known_matrices) {
  harness hx;
  harness_open(&hx);
  /* det 37; det -6 (needs row exchanges); singular (det 0) */
  const double v[27] = {4, 3, 2, 1, 3, 1, 2, 1, 5, 0, 2, 0, 1, 0,
                        0, 0, 0, 3, 1, 2, 3, 2, 4, 6, 1, 1, 1};
  const double want[3] = {37, -6, 0};
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor a = batch(dt, 3, 3, 3, v);
    h_tensor d = h_tensor_new(dt, 1, (int64_t[]){6}, NULL);
    d.layout.shape[0] = 3;
    d.layout.strides[0] = -2; /* a flipped, strided output */
    d.layout.offset = 5;
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_DET, &a, 1, &d, 1, NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int b = 0; b < 3; b++)
      ck_assert_msg(h_close(d.values[5 - 2 * b], want[b], tol(dt), tol(dt)),
                    "det %d = %.17g, expected %g", b, d.values[5 - 2 * b],
                    want[b]);
    err =
        harness_run(&hx, TYTO_PLUGIN_OP_LOGDET, &a, 1, &d, 1, NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int b = 0; b < 3; b++)
      ck_assert_msg(
          h_close(d.values[5 - 2 * b], log(fabs(want[b])), tol(dt), tol(dt)),
          "logdet %d = %.17g, expected %g", b, d.values[5 - 2 * b],
          log(fabs(want[b])));
    h_tensor_free(&a);
    h_tensor_free(&d);
  }
  /* One 2 x 2 matrix, output of rank 0; det of a 0 x 0 matrix is 1. */
  h_tensor a = h_tensor_new(F64, 2, (int64_t[]){2, 2}, (double[]){0, 3, 2, 1});
  h_tensor d = h_tensor_new(F64, 0, NULL, NULL);
  ck_assert_ptr_null(
      harness_run(&hx, TYTO_PLUGIN_OP_DET, &a, 1, &d, 1, NULL, 0, NULL, 0));
  ck_assert_double_eq_tol(d.values[0], -6, 1e-12);
  h_tensor_free(&a);
  a = h_tensor_new(F64, 3, (int64_t[]){2, 0, 0}, NULL);
  h_tensor d2 = h_tensor_new(F64, 1, (int64_t[]){2}, NULL);
  ck_assert_ptr_null(
      harness_run(&hx, TYTO_PLUGIN_OP_DET, &a, 1, &d2, 1, NULL, 0, NULL, 0));
  ck_assert_double_eq(d2.values[0], 1);
  ck_assert_double_eq(d2.values[1], 1);
  h_tensor_free(&a);
  h_tensor_free(&d);
  h_tensor_free(&d2);
  harness_close(&hx);
}
END_TEST

/* LOGDET does not overflow where DET does: 200 x 200 of 10 I. */
START_TEST(logdet_of_a_large_determinant) {
  harness hx;
  harness_open(&hx);
  const int64_t n = 200;
  h_tensor a = h_tensor_new(F32, 2, (int64_t[]){n, n}, NULL);
  for (int64_t i = 0; i < n; i++)
    a.values[i * n + i] = 10;
  h_tensor d = h_tensor_new(F32, 0, NULL, NULL);
  ck_assert_ptr_null(
      harness_run(&hx, TYTO_PLUGIN_OP_LOGDET, &a, 1, &d, 1, NULL, 0, NULL, 0));
  ck_assert_double_eq_tol(d.values[0], 200 * log(10.0), 1e-3);
  ck_assert_ptr_null(
      harness_run(&hx, TYTO_PLUGIN_OP_DET, &a, 1, &d, 1, NULL, 0, NULL, 0));
  ck_assert(isinf(d.values[0]) && d.values[0] > 0);
  h_tensor_free(&a);
  h_tensor_free(&d);
  harness_close(&hx);
}
END_TEST

START_TEST(solve_satisfies_a_x_equals_b) {
  harness hx;
  harness_open(&hx);
  const int64_t nb = 2, n = 4, k = 3;
  double va[2 * 4 * 4], vb[2 * 4 * 3];
  well_conditioned(va, nb, n, 2);
  fill(vb, nb * n * k, 3);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor in[2] = {batch(dt, nb, n, n, va), batch(dt, nb, n, k, vb)};
    h_tensor x = batch(dt, nb, n, k, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_SOLVE, in, 2, &x, 1, NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) {
          double s = 0;
          for (int64_t l = 0; l < n; l++)
            s += at(&in[0], b, i, l) * at(&x, b, l, j);
          ck_assert_msg(fabs(s - at(&in[1], b, i, j)) < tol(dt),
                        "(A X - B)[%lld][%lld][%lld] = %g", (long long)b,
                        (long long)i, (long long)j, s - at(&in[1], b, i, j));
        }
    h_tensor_free(&in[0]);
    h_tensor_free(&in[1]);
    h_tensor_free(&x);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(cholesky_reconstructs_a) {
  harness hx;
  harness_open(&hx);
  const int64_t nb = 3, n = 4;
  double m[3 * 4 * 4], v[3 * 4 * 4];
  fill(m, nb * n * n, 4);
  /* A = M M^T + I, symmetric positive definite */
  for (int64_t b = 0; b < nb; b++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = i == j;
        for (int64_t l = 0; l < n; l++)
          s += m[(b * n + i) * n + l] * m[(b * n + j) * n + l];
        v[(b * n + i) * n + j] = s;
      }
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor a = batch(dt, nb, n, n, v), l = batch(dt, nb, n, n, NULL);
    for (int64_t i = 0; i < l.storage; i++)
      l.values[i] = 99; /* the upper triangle must be overwritten with 0 */
    const char *err = harness_run(&hx, TYTO_PLUGIN_OP_CHOLESKY, &a, 1, &l, 1,
                                  NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
          if (j > i)
            ck_assert_double_eq(at(&l, b, i, j), 0);
          if (i == j)
            ck_assert(at(&l, b, i, i) > 0);
          double s = 0;
          for (int64_t k = 0; k < n; k++)
            s += at(&l, b, i, k) * at(&l, b, j, k);
          ck_assert_msg(fabs(s - at(&a, b, i, j)) < tol(dt) * 4,
                        "(L L^T - A)[%lld][%lld][%lld] = %g", (long long)b,
                        (long long)i, (long long)j, s - at(&a, b, i, j));
        }
    h_tensor_free(&a);
    h_tensor_free(&l);
  }
  harness_close(&hx);
}
END_TEST

/* Q^T Q = I, Q R = A, R upper triangular, for tall and wide matrices. */
static void check_qr(harness *hx, uint32_t dt, int64_t nb, int64_t m,
                     int64_t n) {
  int64_t k = m < n ? m : n;
  double v[2 * 6 * 6];
  fill(v, nb * m * n, (unsigned)(5 + m + n));
  h_tensor a = batch(dt, nb, m, n, v);
  h_tensor out[2] = {batch(dt, nb, m, k, NULL), batch(dt, nb, k, n, NULL)};
  for (int64_t i = 0; i < out[1].storage; i++)
    out[1].values[i] = 99;
  const char *err =
      harness_run(hx, TYTO_PLUGIN_OP_QR, &a, 1, out, 2, NULL, 0, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  const h_tensor *q = &out[0], *r = &out[1];
  for (int64_t b = 0; b < nb; b++) {
    for (int64_t i = 0; i < k; i++)
      for (int64_t j = 0; j < k; j++) {
        double s = 0;
        for (int64_t l = 0; l < m; l++)
          s += at(q, b, l, i) * at(q, b, l, j);
        ck_assert_msg(fabs(s - (i == j)) < tol(dt),
                      "%lldx%lld: Q^T Q[%lld][%lld] = %g", (long long)m,
                      (long long)n, (long long)i, (long long)j, s);
      }
    for (int64_t i = 0; i < k; i++)
      for (int64_t j = 0; j < i && j < n; j++)
        ck_assert_double_eq(at(r, b, i, j), 0);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t l = 0; l < k; l++)
          s += at(q, b, i, l) * at(r, b, l, j);
        ck_assert_msg(fabs(s - at(&a, b, i, j)) < tol(dt),
                      "%lldx%lld: (Q R - A)[%lld][%lld] = %g", (long long)m,
                      (long long)n, (long long)i, (long long)j,
                      s - at(&a, b, i, j));
      }
  }
  h_tensor_free(&a);
  h_tensor_free(&out[0]);
  h_tensor_free(&out[1]);
}

START_TEST(qr_tall_square_and_wide) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++) {
    check_qr(&hx, dtypes[f], 2, 6, 4);
    check_qr(&hx, dtypes[f], 2, 5, 5);
    check_qr(&hx, dtypes[f], 1, 3, 6);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(singular_and_indefinite_matrices) {
  harness hx;
  harness_open(&hx);
  /* identity, then [[1, 2], [2, 4]]: LU pivots the 2 up, U(2,2) = 0 */
  const double sing[8] = {1, 0, 0, 1, 1, 2, 2, 4};
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor a = batch(dt, 2, 2, 2, sing), y = batch(dt, 2, 2, 2, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_INV, &a, 1, &y, 1, NULL, 0, NULL, 0);
    ck_assert_str_eq(err, "inv: matrix 1 of the batch is singular (pivot 2 of "
                          "its LU factorisation is zero)");
    h_tensor in[2] = {a, batch(dt, 2, 2, 1, (double[]){1, 1, 1, 1})};
    h_tensor x = batch(dt, 2, 2, 1, NULL);
    err =
        harness_run(&hx, TYTO_PLUGIN_OP_SOLVE, in, 2, &x, 1, NULL, 0, NULL, 0);
    ck_assert_str_eq(err, "solve: matrix 1 of the batch is singular (pivot 2 "
                          "of its LU factorisation is zero)");
    h_tensor_free(&in[1]);
    h_tensor_free(&x);
    h_tensor_free(&a);
    h_tensor_free(&y);
    /* three identities, then [[1, 2], [2, 1]] (eigenvalues 3 and -1) */
    double v[16] = {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 1};
    a = batch(dt, 4, 2, 2, v);
    y = batch(dt, 4, 2, 2, NULL);
    err = harness_run(&hx, TYTO_PLUGIN_OP_CHOLESKY, &a, 1, &y, 1, NULL, 0, NULL,
                      0);
    ck_assert_str_eq(err, "cholesky: matrix 3 of the batch is not positive "
                          "definite (leading minor 2)");
    h_tensor_free(&a);
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(shape_and_dtype_errors) {
  harness hx;
  harness_open(&hx);
  h_tensor a23 = h_tensor_new(F32, 2, (int64_t[]){2, 3}, NULL);
  h_tensor a33 = h_tensor_new(F32, 2, (int64_t[]){3, 3}, NULL);
  h_tensor a33d = h_tensor_new(F64, 2, (int64_t[]){3, 3}, NULL);
  h_tensor v3 = h_tensor_new(F32, 1, (int64_t[]){3}, NULL);
  h_tensor b23 = h_tensor_new(F32, 3, (int64_t[]){2, 3, 3}, NULL);
  h_tensor s = h_tensor_new(F32, 0, NULL, NULL);
  const char *err;
  err =
      harness_run(&hx, TYTO_PLUGIN_OP_INV, &a23, 1, &a23, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "inv: expected square matrices, found 2 x 3");
  err = harness_run(&hx, TYTO_PLUGIN_OP_INV, &v3, 1, &v3, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "inv: expected a matrix or a batch of them (rank >= "
                        "2), found rank 1");
  err =
      harness_run(&hx, TYTO_PLUGIN_OP_INV, &a33, 1, &a33d, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "inv: expected every input and output in f32 (input "
                        "0's dtype), found f64 for output 0");
  err = harness_run(&hx, TYTO_PLUGIN_OP_CHOLESKY, &b23, 1, &a33, 1, NULL, 0,
                    NULL, 0);
  ck_assert_str_eq(err, "cholesky: expected output of shape [2, 3, 3], found "
                        "[3, 3]");
  err = harness_run(&hx, TYTO_PLUGIN_OP_DET, &a33, 1, &v3, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "det: expected output of shape [], found [3]");
  err =
      harness_run(&hx, TYTO_PLUGIN_OP_LOGDET, &b23, 1, &s, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "logdet: expected output of shape [2], found []");
  h_tensor in[2] = {a33, a23};
  err =
      harness_run(&hx, TYTO_PLUGIN_OP_SOLVE, in, 2, &a23, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "solve: expected B (input 1) of shape [3, 3], found "
                        "[2, 3]");
  err =
      harness_run(&hx, TYTO_PLUGIN_OP_SOLVE, in, 1, &a23, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "solve: expected 2 inputs and 1 output, got 1 and 1");
  h_tensor qr[2] = {a23, a33};
  err = harness_run(&hx, TYTO_PLUGIN_OP_QR, &a23, 1, qr, 2, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "qr: expected Q (output 0) of shape [2, 2], found "
                        "[2, 3]");
  h_tensor a22 = h_tensor_new(F32, 2, (int64_t[]){2, 2}, NULL);
  qr[0] = a22;
  err = harness_run(&hx, TYTO_PLUGIN_OP_QR, &a23, 1, qr, 2, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "qr: expected R (output 1) of shape [2, 3], found "
                        "[3, 3]");
  err = harness_run(&hx, TYTO_PLUGIN_OP_QR, &a23, 1, qr, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "qr: expected 1 input and 2 outputs, got 1 and 1");
  h_tensor_free(&a23);
  h_tensor_free(&a33);
  h_tensor_free(&a33d);
  h_tensor_free(&v3);
  h_tensor_free(&b23);
  h_tensor_free(&s);
  h_tensor_free(&a22);
  harness_close(&hx);
}
END_TEST

/* TRIANGULAR_SOLVE: A [1, n, n] broadcast (stride 0) over a batch of 3
 * column-major B [3, n, k]. The ignored triangle (and, with unit_diagonal,
 * the diagonal) holds 1000s, so reading it would show in the residual
 * op(T) X - B, computed here from the triangle T that should be read. */
static void check_trsm(harness *hx, uint32_t dt, int64_t n, int64_t k,
                       int lower, int transpose, int unit) {
  int64_t nb = 3;
  double *av = malloc((size_t)(n * n) * sizeof *av),
         *bv = malloc((size_t)(nb * n * k) * sizeof *bv),
         *tv = calloc((size_t)(n * n), sizeof *tv);
  fill(av, n * n, 11);
  fill(bv, nb * n * k, 12);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      int in_tri = lower ? i > j : i < j;
      if (i == j) {
        tv[i * n + j] = unit ? 1.0 : 2.0 + av[i * n + j];
        av[i * n + j] = unit ? 1000.0 : tv[i * n + j];
      } else if (in_tri) {
        tv[i * n + j] = av[i * n + j] *= 0.5;
      } else {
        av[i * n + j] = 1000.0;
      }
    }
  h_tensor a = batch(dt, 1, n, n, av), b = batch(dt, nb, n, k, bv),
           x = batch(dt, nb, n, k, NULL);
  a.layout.shape[0] = nb;
  a.layout.strides[0] = 0;
  int64_t attrs[3] = {lower, transpose, unit};
  h_tensor in[2] = {a, b};
  const char *err = harness_run(hx, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, in, 2, &x,
                                1, attrs, 3, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  for (int64_t q = 0; q < nb; q++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < k; j++) {
        double s = 0;
        for (int64_t l = 0; l < n; l++)
          s += (transpose ? tv[l * n + i] : tv[i * n + l]) * at(&x, q, l, j);
        ck_assert_msg(fabs(s - at(&b, q, i, j)) <= tol(dt),
                      "%s lower %d transpose %d unit %d: (op(A) X)[%lld,"
                      "%lld,%lld] = %g, B has %g",
                      dt == F32 ? "f32" : "f64", lower, transpose, unit,
                      (long long)q, (long long)i, (long long)j, s,
                      at(&b, q, i, j));
      }
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&x);
  free(av);
  free(bv);
  free(tv);
}

START_TEST(triangular_solve_every_variant) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++)
    for (int v = 0; v < 8; v++) {
      check_trsm(&hx, dtypes[f], 5, 3, v & 1, (v >> 1) & 1, (v >> 2) & 1);
      check_trsm(&hx, dtypes[f], 1, 4, v & 1, (v >> 1) & 1, (v >> 2) & 1);
    }
  /* An exact case: [[2, 0], [1, 4]] X = [6, 11] gives X = [3, 2]. */
  h_tensor a = batch(F64, 1, 2, 2, (double[]){2, 7, 1, 4}),
           b = batch(F64, 1, 2, 1, (double[]){6, 11}),
           x = batch(F64, 1, 2, 1, NULL);
  h_tensor in[2] = {a, b};
  ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, in, 2,
                                 &x, 1, (int64_t[]){1, 0, 0}, 3, NULL, 0));
  ck_assert(at(&x, 0, 0, 0) == 3 && at(&x, 0, 1, 0) == 2);
  /* Empty right-hand sides and errors. */
  h_tensor b0 = batch(F64, 1, 2, 0, NULL), x0 = batch(F64, 1, 2, 0, NULL);
  in[1] = b0;
  ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, in, 2,
                                 &x0, 1, (int64_t[]){1, 0, 0}, 3, NULL, 0));
  in[1] = b;
  ck_assert_str_eq(harness_run(&hx, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, in, 2, &x,
                               1, (int64_t[]){1, 0}, 2, NULL, 0),
                   "triangular_solve: expected 3 integer attributes (lower, "
                   "transpose, unit_diagonal), got 2");
  ck_assert_str_eq(harness_run(&hx, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, in, 2, &b0,
                               1, (int64_t[]){1, 0, 0}, 3, NULL, 0),
                   "triangular_solve: expected output of shape [1, 2, 1], "
                   "found [1, 2, 0]");
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&x);
  h_tensor_free(&b0);
  h_tensor_free(&x0);
  harness_close(&hx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_linalg");
  TCase *tc = tcase_create("lapack");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, inv_times_a_is_identity);
  tcase_add_test(tc, det_and_logdet_of_known_matrices);
  tcase_add_test(tc, logdet_of_a_large_determinant);
  tcase_add_test(tc, solve_satisfies_a_x_equals_b);
  tcase_add_test(tc, cholesky_reconstructs_a);
  tcase_add_test(tc, qr_tall_square_and_wide);
  tcase_add_test(tc, singular_and_indefinite_matrices);
  tcase_add_test(tc, shape_and_dtype_errors);
  tcase_add_test(tc, triangular_solve_every_variant);
  suite_add_tcase(s, tc);
  return test_run(s);
}
