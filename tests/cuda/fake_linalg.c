/*
 * The fake CUDA's linear algebra (fake_cuda.h), computed in the executing
 * mode as LAPACK defines the routines (a no-op otherwise): cuBLAS's
 * batched LU (getrf with partial pivoting, 1-based pivots, info the first
 * zero pivot; getri; getrs), QR (geqrf: Householder reflectors with
 * LAPACK's dlarfg convention, beta = -sign(alpha) |(alpha, x)|) and
 * triangular solves, and cuSOLVER's batched Cholesky. Column-major, in
 * double whatever the dtype. Textbook loops: the matrices of tests are
 * small.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "fake_cuda.h"

/* Element (i, j) of a column-major matrix of leading dimension ld. */
#define AT(a, i, j, ld) ((a)[(size_t)(i) + (size_t)(j) * (size_t)(ld)])

static double *to_d(const void *p, int f64, int rows, int cols, int ld) {
  double *d = malloc((size_t)(rows > 0 ? rows : 1) *
                     (size_t)(cols > 0 ? cols : 1) * sizeof *d);
  for (int j = 0; j < cols && d != NULL; j++)
    for (int i = 0; i < rows; i++)
      d[i + (size_t)j * rows] = f64 ? AT((const double *)p, i, j, ld)
                                    : AT((const float *)p, i, j, ld);
  return d;
}

static void from_d(void *p, int f64, const double *d, int rows, int cols,
                   int ld) {
  for (int j = 0; j < cols; j++)
    for (int i = 0; i < rows; i++) {
      if (f64)
        AT((double *)p, i, j, ld) = d[i + (size_t)j * rows];
      else
        AT((float *)p, i, j, ld) = (float)d[i + (size_t)j * rows];
    }
}

/* LU of the n x n matrix a (ld n) in place; pivots 1-based; returns info. */
static int lu(double *a, int n, int *piv) {
  int info = 0;
  for (int j = 0; j < n; j++) {
    int p = j;
    for (int i = j + 1; i < n; i++)
      if (fabs(AT(a, i, j, n)) > fabs(AT(a, p, j, n)))
        p = i;
    piv[j] = p + 1;
    if (AT(a, p, j, n) == 0) {
      if (info == 0)
        info = j + 1;
      continue;
    }
    if (p != j)
      for (int c = 0; c < n; c++) {
        double t = AT(a, j, c, n);
        AT(a, j, c, n) = AT(a, p, c, n);
        AT(a, p, c, n) = t;
      }
    for (int i = j + 1; i < n; i++) {
      AT(a, i, j, n) /= AT(a, j, j, n);
      for (int c = j + 1; c < n; c++)
        AT(a, i, c, n) -= AT(a, i, j, n) * AT(a, j, c, n);
    }
  }
  return info;
}

/* Solves op(A) X = B in place (B n x k, ld n) from A's LU and pivots. */
static void lu_solve(const double *a, int n, const int *piv, double *b, int k,
                     int trans) {
  for (int c = 0; c < k; c++) {
    double *x = b + (size_t)c * n;
    if (!trans) {
      for (int j = 0; j < n; j++) {
        double t = x[j];
        x[j] = x[piv[j] - 1];
        x[piv[j] - 1] = t;
      }
      for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
          x[i] -= AT(a, i, j, n) * x[j];
      for (int i = n - 1; i >= 0; i--) {
        for (int j = i + 1; j < n; j++)
          x[i] -= AT(a, i, j, n) * x[j];
        x[i] /= AT(a, i, i, n);
      }
    } else {
      for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
          x[i] -= AT(a, j, i, n) * x[j];
        x[i] /= AT(a, i, i, n);
      }
      for (int i = n - 1; i >= 0; i--)
        for (int j = i + 1; j < n; j++)
          x[i] -= AT(a, j, i, n) * x[j];
      for (int j = n - 1; j >= 0; j--) {
        double t = x[j];
        x[j] = x[piv[j] - 1];
        x[piv[j] - 1] = t;
      }
    }
  }
}

#define GETRF(NAME, T, F64)                                                    \
  cublasStatus_t NAME(cublasHandle_t h, int n, T *const a[], int lda,          \
                      int *piv, int *info, int batch) {                        \
    (void)h;                                                                   \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, n, n, lda);                                  \
      if (d == NULL)                                                           \
        return CUBLAS_STATUS_ALLOC_FAILED;                                     \
      info[b] = lu(d, n, piv + (size_t)b * n);                                 \
      from_d(a[b], F64, d, n, n, lda);                                         \
      free(d);                                                                 \
    }                                                                          \
    return CUBLAS_STATUS_SUCCESS;                                              \
  }
GETRF(cublasSgetrfBatched, float, 0)
GETRF(cublasDgetrfBatched, double, 1)

#define GETRI(NAME, T, F64)                                                    \
  cublasStatus_t NAME(cublasHandle_t h, int n, const T *const a[], int lda,    \
                      const int *piv, T *const c[], int ldc, int *info,        \
                      int batch) {                                             \
    (void)h;                                                                   \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, n, n, lda);                                  \
      double *x = calloc((size_t)n * n + 1, sizeof *x);                        \
      if (d == NULL || x == NULL)                                              \
        return CUBLAS_STATUS_ALLOC_FAILED;                                     \
      info[b] = 0;                                                             \
      for (int i = 0; i < n; i++)                                              \
        if (AT(d, i, i, n) == 0 && info[b] == 0)                               \
          info[b] = i + 1;                                                     \
      for (int i = 0; i < n; i++)                                              \
        x[i + (size_t)i * n] = 1;                                              \
      if (info[b] == 0)                                                        \
        lu_solve(d, n, piv + (size_t)b * n, x, n, 0);                          \
      from_d(c[b], F64, x, n, n, ldc);                                         \
      free(d);                                                                 \
      free(x);                                                                 \
    }                                                                          \
    return CUBLAS_STATUS_SUCCESS;                                              \
  }
GETRI(cublasSgetriBatched, float, 0)
GETRI(cublasDgetriBatched, double, 1)

#define GETRS(NAME, T, F64)                                                    \
  cublasStatus_t NAME(cublasHandle_t h, cublasOperation_t tr, int n, int k,    \
                      const T *const a[], int lda, const int *piv,             \
                      T *const bm[], int ldb, int *info, int batch) {          \
    (void)h;                                                                   \
    *info = 0;                                                                 \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, n, n, lda);                                  \
      double *x = to_d(bm[b], F64, n, k, ldb);                                 \
      if (d == NULL || x == NULL)                                              \
        return CUBLAS_STATUS_ALLOC_FAILED;                                     \
      lu_solve(d, n, piv + (size_t)b * n, x, k, tr != CUBLAS_OP_N);            \
      from_d(bm[b], F64, x, n, k, ldb);                                        \
      free(d);                                                                 \
      free(x);                                                                 \
    }                                                                          \
    return CUBLAS_STATUS_SUCCESS;                                              \
  }
GETRS(cublasSgetrsBatched, float, 0)
GETRS(cublasDgetrsBatched, double, 1)

/* QR of the m x n matrix a (ld m) in place, LAPACK's dgeqr2. */
static void qr(double *a, int m, int n, double *tau) {
  int kmax = m < n ? m : n;
  for (int j = 0; j < kmax; j++) {
    double alpha = AT(a, j, j, m), xnorm = 0;
    for (int i = j + 1; i < m; i++)
      xnorm = hypot(xnorm, AT(a, i, j, m));
    if (xnorm == 0) {
      tau[j] = 0;
      continue;
    }
    double beta = -copysign(hypot(alpha, xnorm), alpha);
    tau[j] = (beta - alpha) / beta;
    for (int i = j + 1; i < m; i++)
      AT(a, i, j, m) /= alpha - beta;
    AT(a, j, j, m) = beta;
    /* H = I - tau v v^T (v = (1, a[j+1:, j])) on the columns right. */
    for (int c = j + 1; c < n; c++) {
      double w = AT(a, j, c, m);
      for (int i = j + 1; i < m; i++)
        w += AT(a, i, j, m) * AT(a, i, c, m);
      w *= tau[j];
      AT(a, j, c, m) -= w;
      for (int i = j + 1; i < m; i++)
        AT(a, i, c, m) -= w * AT(a, i, j, m);
    }
  }
}

#define GEQRF(NAME, T, F64)                                                    \
  cublasStatus_t NAME(cublasHandle_t h, int m, int n, T *const a[], int lda,   \
                      T *const tau[], int *info, int batch) {                  \
    (void)h;                                                                   \
    *info = 0;                                                                 \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, m, n, lda);                                  \
      int kmax = m < n ? m : n;                                                \
      double *t = calloc((size_t)kmax + 1, sizeof *t);                         \
      if (d == NULL || t == NULL)                                              \
        return CUBLAS_STATUS_ALLOC_FAILED;                                     \
      qr(d, m, n, t);                                                          \
      from_d(a[b], F64, d, m, n, lda);                                         \
      from_d(tau[b], F64, t, kmax, 1, kmax > 0 ? kmax : 1);                    \
      free(d);                                                                 \
      free(t);                                                                 \
    }                                                                          \
    return CUBLAS_STATUS_SUCCESS;                                              \
  }
GEQRF(cublasSgeqrfBatched, float, 0)
GEQRF(cublasDgeqrfBatched, double, 1)

/* op(A) X = alpha B, A n x n triangular, B n x k (side left only). */
static void trsm_left(const double *a, int n, int lower, int trans, int unit,
                      double alpha, double *x, int k) {
  /* op(A) is lower triangular when lower != trans. */
  int low = lower != trans;
  for (int c = 0; c < k; c++) {
    double *v = x + (size_t)c * n;
    for (int i = 0; i < n; i++)
      v[i] *= alpha;
    for (int s = 0; s < n; s++) {
      int i = low ? s : n - 1 - s;
      for (int t = 0; t < s; t++) {
        int j = low ? t : n - 1 - t;
        double aij = trans ? AT(a, j, i, n) : AT(a, i, j, n);
        v[i] -= aij * v[j];
      }
      if (!unit)
        v[i] /= AT(a, i, i, n);
    }
  }
}

#define TRSM(NAME, T, F64)                                                     \
  cublasStatus_t NAME(cublasHandle_t h, cublasSideMode_t side,                 \
                      cublasFillMode_t uplo, cublasOperation_t tr,             \
                      cublasDiagType_t diag, int n, int k, const T *alpha,     \
                      const T *const a[], int lda, T *const bm[], int ldb,     \
                      int batch) {                                             \
    (void)h;                                                                   \
    if (side != CUBLAS_SIDE_LEFT)                                              \
      return CUBLAS_STATUS_NOT_SUPPORTED;                                      \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, n, n, lda);                                  \
      double *x = to_d(bm[b], F64, n, k, ldb);                                 \
      if (d == NULL || x == NULL)                                              \
        return CUBLAS_STATUS_ALLOC_FAILED;                                     \
      trsm_left(d, n, uplo == CUBLAS_FILL_MODE_LOWER, tr != CUBLAS_OP_N,       \
                diag == CUBLAS_DIAG_UNIT, (double)*alpha, x, k);               \
      from_d(bm[b], F64, x, n, k, ldb);                                        \
      free(d);                                                                 \
      free(x);                                                                 \
    }                                                                          \
    return CUBLAS_STATUS_SUCCESS;                                              \
  }
TRSM(cublasStrsmBatched, float, 0)
TRSM(cublasDtrsmBatched, double, 1)

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h,
                                       cublasPointerMode_t m) {
  (void)h, (void)m;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuSOLVER ------------------------------------------------------------ */

static char fake_solver;

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h) {
  *h = (cusolverDnHandle_t)(void *)&fake_solver;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) {
  (void)h;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s) {
  (void)h, (void)s;
  return CUSOLVER_STATUS_SUCCESS;
}

/* Lower Cholesky in place (the upper triangle left as it was); info the
 * order of the first minor that is not positive definite. */
static int cholesky(double *a, int n) {
  for (int j = 0; j < n; j++) {
    double d = AT(a, j, j, n);
    for (int p = 0; p < j; p++)
      d -= AT(a, j, p, n) * AT(a, j, p, n);
    if (!(d > 0))
      return j + 1;
    d = sqrt(d);
    AT(a, j, j, n) = d;
    for (int i = j + 1; i < n; i++) {
      double v = AT(a, i, j, n);
      for (int p = 0; p < j; p++)
        v -= AT(a, i, p, n) * AT(a, j, p, n);
      AT(a, i, j, n) = v / d;
    }
  }
  return 0;
}

#define POTRF(NAME, T, F64)                                                    \
  cusolverStatus_t NAME(cusolverDnHandle_t h, cublasFillMode_t uplo, int n,    \
                        T *a[], int lda, int *info, int batch) {               \
    (void)h;                                                                   \
    if (uplo != CUBLAS_FILL_MODE_LOWER)                                        \
      return CUSOLVER_STATUS_NOT_SUPPORTED;                                    \
    for (int b = 0; fake_execute && b < batch; b++) {                          \
      double *d = to_d(a[b], F64, n, n, lda);                                  \
      if (d == NULL)                                                           \
        return CUSOLVER_STATUS_ALLOC_FAILED;                                   \
      info[b] = cholesky(d, n);                                                \
      from_d(a[b], F64, d, n, n, lda);                                         \
      free(d);                                                                 \
    }                                                                          \
    return CUSOLVER_STATUS_SUCCESS;                                            \
  }
POTRF(cusolverDnSpotrfBatched, float, 0)
POTRF(cusolverDnDpotrfBatched, double, 1)
