/*
 * Linear algebra on the last two axes, batched over the leading ones,
 * through LAPACKE (s* routines for f32, d* for f64): INV (getrf + getri),
 * DET and LOGDET (getrf), SOLVE (getrf + getrs), CHOLESKY (potrf, lower),
 * QR (geqrf + orgqr, reduced), and TRIANGULAR_SOLVE through cblas ?trsm.
 *
 * Each matrix of the batch is packed, whatever its strides, into a
 * column-major scratch matrix in the workspace that prepare() reports
 * (with LAPACK's work array, tau and the pivots), factorised there and
 * unpacked into the output's layout. Matrices run one after another;
 * OpenBLAS threads inside each factorisation.
 *
 * A singular matrix (INV, SOLVE) or one that is not positive definite
 * (CHOLESKY) makes run() return an error naming the op and the matrix's
 * position in the batch; outputs of the matrices before it have been
 * written, the rest are left as they were. DET gives 0 and LOGDET -inf
 * for a singular matrix: that is their value, not an error. TRIANGULAR_SOLVE
 * does not look for a zero on the diagonal either: as in LAPACK's trtrs
 * without its check, it then gives infinities or NaNs.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "ops.h"

typedef struct linalg_op {
  cpu_op base;
  const tyto_plugin_host *h;
  uint32_t op;
  int f32;
  uint32_t lead;              /* batch axes */
  int64_t batch;              /* matrices */
  int64_t m, n, k;            /* A is m x n; SOLVE: B is n x k; QR: k = min */
  int lower, transpose, unit; /* TRIANGULAR_SOLVE's iattrs */
  lapack_int lwork;           /* elements of LAPACK's work array */
  size_t esz;                 /* element size */
  size_t off_b, off_tau, off_work, off_ipiv; /* workspace sections, bytes */
} linalg_op;

/* Element offset of matrix b (row-major over the first `lead` axes). */
static int64_t batch_offset(const tyto_plugin_layout *l, uint32_t lead,
                            int64_t b) {
  int64_t off = l->offset;
  for (uint32_t a = lead; a-- > 0;) {
    off += (b % l->shape[a]) * l->strides[a];
    b /= l->shape[a];
  }
  return off;
}

/* Copies the rows x cols matrix at element offset `off` of layout l (its
 * last two axes) into column-major dst with leading dimension ld. */
static void pack(const linalg_op *op, const tyto_plugin_layout *l,
                 const unsigned char *src, int64_t off, int64_t rows,
                 int64_t cols, void *dst, int64_t ld) {
  int64_t sr = l->strides[l->rank - 2], sc = l->strides[l->rank - 1];
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++) {
      if (op->f32)
        ((float *)dst)[i + j * ld] =
            ((const float *)src)[off + i * sr + j * sc];
      else
        ((double *)dst)[i + j * ld] =
            ((const double *)src)[off + i * sr + j * sc];
    }
}

/* The reverse of pack, for the rows x cols matrix of layout l; `part`
 * keeps everything (0), the lower triangle (1) or the upper triangle (2),
 * writing zeros elsewhere. */
static void unpack(const linalg_op *op, const tyto_plugin_layout *l,
                   unsigned char *dst, int64_t off, int64_t rows, int64_t cols,
                   const void *src, int64_t ld, int part) {
  int64_t sr = l->strides[l->rank - 2], sc = l->strides[l->rank - 1];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      int keep = part == 0 || (part == 1 && i >= j) || (part == 2 && i <= j);
      if (op->f32)
        ((float *)dst)[off + i * sr + j * sc] =
            keep ? ((const float *)src)[i + j * ld] : 0.0f;
      else
        ((double *)dst)[off + i * sr + j * sc] =
            keep ? ((const double *)src)[i + j * ld] : 0.0;
    }
}

/* LAPACKE calls for either dtype, column-major. */
static lapack_int getrf(int f32, lapack_int m, lapack_int n, void *a,
                        lapack_int lda, lapack_int *ipiv) {
  return f32 ? LAPACKE_sgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, ipiv)
             : LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, ipiv);
}

static lapack_int getri(int f32, lapack_int n, void *a, lapack_int lda,
                        const lapack_int *ipiv, void *work, lapack_int lw) {
  return f32 ? LAPACKE_sgetri_work(LAPACK_COL_MAJOR, n, a, lda, ipiv, work, lw)
             : LAPACKE_dgetri_work(LAPACK_COL_MAJOR, n, a, lda, ipiv, work, lw);
}

static lapack_int getrs(int f32, lapack_int n, lapack_int nrhs, const void *a,
                        lapack_int lda, const lapack_int *ipiv, void *b,
                        lapack_int ldb) {
  return f32 ? LAPACKE_sgetrs_work(LAPACK_COL_MAJOR, 'N', n, nrhs, a, lda, ipiv,
                                   b, ldb)
             : LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'N', n, nrhs, a, lda, ipiv,
                                   b, ldb);
}

static lapack_int potrf(int f32, lapack_int n, void *a, lapack_int lda) {
  return f32 ? LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'L', n, a, lda)
             : LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', n, a, lda);
}

static lapack_int geqrf(int f32, lapack_int m, lapack_int n, void *a,
                        lapack_int lda, void *tau, void *work, lapack_int lw) {
  return f32 ? LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, work,
                                   lw)
             : LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, work,
                                   lw);
}

static lapack_int orgqr(int f32, lapack_int m, lapack_int n, lapack_int k,
                        void *a, lapack_int lda, const void *tau, void *work,
                        lapack_int lw) {
  return f32 ? LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, work,
                                   lw)
             : LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, work,
                                   lw);
}

static tyto_plugin_error *lapack_bug(const linalg_op *op, const char *routine,
                                     lapack_int info) {
  return op->h->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                          "%s: LAPACK %s%s refused argument %d (a bug in the "
                          "cpu plugin; please report it)",
                          cpu_op_name(op->op), op->f32 ? "s" : "d", routine,
                          (int)-info);
}

static double diag(const linalg_op *op, const void *a, int64_t i, int64_t ld) {
  return op->f32 ? ((const float *)a)[i + i * ld]
                 : ((const double *)a)[i + i * ld];
}

static void store_scalar(const linalg_op *op, unsigned char *dst, int64_t off,
                         double v) {
  if (op->f32)
    ((float *)dst)[off] = v > FLT_MAX    ? INFINITY
                          : v < -FLT_MAX ? -INFINITY
                                         : (float)v;
  else
    ((double *)dst)[off] = v;
}

/* One matrix of the batch. */
static tyto_plugin_error *run_one(const linalg_op *op, const cpu_desc *d,
                                  unsigned char *const *args, int64_t b) {
  unsigned char *ws = args[d->n_in + d->n_out];
  void *a = ws, *bm = ws + op->off_b, *tau = ws + op->off_tau,
       *work = ws + op->off_work;
  lapack_int *ipiv = (lapack_int *)(void *)(ws + op->off_ipiv);
  const tyto_plugin_layout *in = &d->in[0].l, *out = &d->out[0].l;
  lapack_int m = (lapack_int)op->m, n = (lapack_int)op->n,
             k = (lapack_int)op->k;
  lapack_int lda = m > 1 ? m : 1, info;
  int64_t ioff = batch_offset(in, op->lead, b);
  int64_t ooff = batch_offset(out, op->lead, b);
  if (m > 0 && n > 0)
    pack(op, in, args[0], ioff, m, n, a, lda);
  switch (op->op) {
  case TYTO_PLUGIN_OP_INV:
    if (n == 0)
      return NULL;
    info = getrf(op->f32, n, n, a, lda, ipiv);
    if (info > 0)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "inv: matrix %lld of the batch is singular "
                              "(pivot %d of its LU factorisation is zero)",
                              (long long)b, (int)info);
    if (info < 0)
      return lapack_bug(op, "getrf", info);
    info = getri(op->f32, n, a, lda, ipiv, work, op->lwork);
    if (info > 0)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "inv: matrix %lld of the batch is singular "
                              "(pivot %d of its LU factorisation is zero)",
                              (long long)b, (int)info);
    if (info < 0)
      return lapack_bug(op, "getri", info);
    unpack(op, out, args[1], ooff, n, n, a, lda, 0);
    return NULL;
  case TYTO_PLUGIN_OP_DET:
  case TYTO_PLUGIN_OP_LOGDET: {
    int logdet = op->op == TYTO_PLUGIN_OP_LOGDET;
    /* det = sign(P) * prod(diag(U)) from P A = L U; summed in logs for
     * LOGDET so that it neither overflows nor underflows. */
    double v = logdet ? 0.0 : 1.0;
    if (n > 0) {
      info = getrf(op->f32, n, n, a, lda, ipiv);
      if (info < 0)
        return lapack_bug(op, "getrf", info);
      if (info > 0)
        v = logdet ? -INFINITY : 0.0;
      else
        for (lapack_int i = 0; i < n; i++) {
          double u = diag(op, a, i, lda);
          if (logdet)
            v += log(fabs(u));
          else
            v *= ipiv[i] != i + 1 ? -u : u;
        }
    }
    store_scalar(op, args[1], ooff, v);
    return NULL;
  }
  case TYTO_PLUGIN_OP_SOLVE: {
    const tyto_plugin_layout *bl = &d->in[1].l;
    lapack_int nrhs = k;
    if (n == 0 || nrhs == 0)
      return NULL;
    pack(op, bl, args[1], batch_offset(bl, op->lead, b), n, nrhs, bm, lda);
    info = getrf(op->f32, n, n, a, lda, ipiv);
    if (info > 0)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "solve: matrix %lld of the batch is singular "
                              "(pivot %d of its LU factorisation is zero)",
                              (long long)b, (int)info);
    if (info < 0)
      return lapack_bug(op, "getrf", info);
    info = getrs(op->f32, n, nrhs, a, lda, ipiv, bm, lda);
    if (info < 0)
      return lapack_bug(op, "getrs", info);
    unpack(op, out, args[2], ooff, n, nrhs, bm, lda, 0);
    return NULL;
  }
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE: {
    const tyto_plugin_layout *bl = &d->in[1].l;
    if (n == 0 || k == 0)
      return NULL;
    pack(op, bl, args[1], batch_offset(bl, op->lead, b), n, k, bm, lda);
    CBLAS_UPLO uplo = op->lower ? CblasLower : CblasUpper;
    CBLAS_TRANSPOSE tr = op->transpose ? CblasTrans : CblasNoTrans;
    CBLAS_DIAG dg = op->unit ? CblasUnit : CblasNonUnit;
    if (op->f32)
      cblas_strsm(CblasColMajor, CblasLeft, uplo, tr, dg, n, k, 1.0f, a, lda,
                  bm, lda);
    else
      cblas_dtrsm(CblasColMajor, CblasLeft, uplo, tr, dg, n, k, 1.0, a, lda, bm,
                  lda);
    unpack(op, out, args[2], ooff, n, k, bm, lda, 0);
    return NULL;
  }
  case TYTO_PLUGIN_OP_CHOLESKY:
    if (n == 0)
      return NULL;
    info = potrf(op->f32, n, a, lda);
    if (info > 0)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "cholesky: matrix %lld of the batch is not "
                              "positive definite (leading minor %d)",
                              (long long)b, (int)info);
    if (info < 0)
      return lapack_bug(op, "potrf", info);
    unpack(op, out, args[1], ooff, n, n, a, lda, 1);
    return NULL;
  default: { /* QR */
    const tyto_plugin_layout *rl = &d->out[1].l;
    if (k == 0)
      return NULL; /* Q is m x 0, R is 0 x n: nothing to write */
    info = geqrf(op->f32, m, n, a, lda, tau, work, op->lwork);
    if (info < 0)
      return lapack_bug(op, "geqrf", info);
    unpack(op, rl, args[2], batch_offset(rl, op->lead, b), k, n, a, lda, 2);
    info = orgqr(op->f32, m, k, k, a, lda, tau, work, op->lwork);
    if (info < 0)
      return lapack_bug(op, "orgqr", info);
    unpack(op, out, args[1], ooff, m, k, a, lda, 0);
    return NULL;
  }
  }
}

static tyto_plugin_error *linalg_run(const cpu_op *base, const cpu_desc *d,
                                     unsigned char *const *args,
                                     cpu_pool *pool) {
  (void)pool;
  const linalg_op *op = (const linalg_op *)base;
  for (int64_t b = 0; b < op->batch; b++) {
    tyto_plugin_error *e = run_one(op, d, args, b);
    if (e)
      return e;
  }
  return NULL;
}

static void linalg_destroy(cpu_op *op) {
  free(op);
}

/* --------------------------------------------------------- validation --- */

static const char *shape_str(char *buf, size_t size, const int64_t *shape,
                             uint32_t rank) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                             (long long)shape[i]);
  if (used < size)
    snprintf(buf + used, size - used, "]");
  return buf;
}

/* Checks that layout l has shape batch + [rows, cols] (rank lead + 2, or
 * lead when rows < 0: a scalar per matrix). */
static tyto_plugin_error *want_shape(const tyto_plugin_host *h,
                                     const char *name, const char *which,
                                     const tyto_plugin_layout *l,
                                     const int64_t *batch, uint32_t lead,
                                     int64_t rows, int64_t cols) {
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  uint32_t r = lead;
  memcpy(want, batch, lead * sizeof(int64_t));
  if (rows >= 0) {
    want[r++] = rows;
    want[r++] = cols;
  }
  if (l->rank == r && memcmp(want, l->shape, r * sizeof(int64_t)) == 0)
    return NULL;
  char s1[160], s2[160];
  return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: expected %s of shape %s, found %s", name, which,
                      shape_str(s1, sizeof s1, want, r),
                      shape_str(s2, sizeof s2, l->shape, l->rank));
}

/* Workspace sections (each rounded to 64 bytes) and LAPACK's work size. */
static tyto_plugin_error *plan_workspace(const tyto_plugin_host *h,
                                         linalg_op *op) {
  const char *name = cpu_op_name(op->op);
  int64_t m = op->m, n = op->n, k = op->k;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX ||
      (m && n > INT32_MAX / m) || (n && k > INT32_MAX / n))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: matrices of %lld x %lld are beyond LAPACK's "
                        "32-bit sizes",
                        name, (long long)m, (long long)n);
  lapack_int lda = m > 1 ? (lapack_int)m : 1, lw = 1, info = 0;
  if (op->f32) {
    float q = 0;
    if (op->op == TYTO_PLUGIN_OP_INV && n > 0)
      info = LAPACKE_sgetri_work(LAPACK_COL_MAJOR, (lapack_int)n, NULL, lda,
                                 NULL, &q, -1);
    if (op->op == TYTO_PLUGIN_OP_QR && k > 0) {
      info = LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n,
                                 NULL, lda, NULL, &q, -1);
      lw = (lapack_int)q;
      if (!info)
        info =
            LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)k,
                                (lapack_int)k, NULL, lda, NULL, &q, -1);
    }
    if ((lapack_int)q > lw)
      lw = (lapack_int)q;
  } else {
    double q = 0;
    if (op->op == TYTO_PLUGIN_OP_INV && n > 0)
      info = LAPACKE_dgetri_work(LAPACK_COL_MAJOR, (lapack_int)n, NULL, lda,
                                 NULL, &q, -1);
    if (op->op == TYTO_PLUGIN_OP_QR && k > 0) {
      info = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n,
                                 NULL, lda, NULL, &q, -1);
      lw = (lapack_int)q;
      if (!info)
        info =
            LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)k,
                                (lapack_int)k, NULL, lda, NULL, &q, -1);
    }
    if ((lapack_int)q > lw)
      lw = (lapack_int)q;
  }
  if (info != 0)
    return h->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                        "%s: LAPACK's workspace query failed (info %d)", name,
                        (int)info);
  if (op->op == TYTO_PLUGIN_OP_INV && lw < n)
    lw = (lapack_int)n;
  if (op->op == TYTO_PLUGIN_OP_QR && lw < n)
    lw = (lapack_int)(n > 0 ? n : 1);
  op->lwork = lw;
  size_t e = op->esz;
#define ROUND(x) (((x) + 63) & ~(size_t)63)
  size_t a_bytes = ROUND((size_t)(m * n) * e);
  size_t b_bytes = op->op == TYTO_PLUGIN_OP_SOLVE ||
                           op->op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE
                       ? ROUND((size_t)(n * k) * e)
                       : 0;
  size_t tau_bytes = op->op == TYTO_PLUGIN_OP_QR ? ROUND((size_t)k * e) : 0;
  size_t work_bytes = ROUND((size_t)lw * e);
  size_t ipiv_bytes = ROUND((size_t)(n > 0 ? n : 1) * sizeof(lapack_int));
#undef ROUND
  op->off_b = a_bytes;
  op->off_tau = op->off_b + b_bytes;
  op->off_work = op->off_tau + tau_bytes;
  op->off_ipiv = op->off_work + work_bytes;
  op->base.workspace_bytes = op->off_ipiv + ipiv_bytes;
  return NULL;
}

static tyto_plugin_error *linalg_check(const tyto_plugin_host *h,
                                       const cpu_desc *desc, linalg_op *op) {
  const char *name = cpu_op_name(op->op);
  int two = op->op == TYTO_PLUGIN_OP_SOLVE ||
            op->op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE;
  uint32_t n_in = two ? 2 : 1;
  uint32_t n_out = op->op == TYTO_PLUGIN_OP_QR ? 2 : 1;
  if (desc->n_in != n_in || desc->n_out != n_out)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %u input%s and %u output%s, got %u and "
                        "%u",
                        name, n_in, n_in > 1 ? "s" : "", n_out,
                        n_out > 1 ? "s" : "", desc->n_in, desc->n_out);
  const tyto_plugin_layout *a = &desc->in[0].l;
  /* ops.md: linear algebra is not defined for the 16-bit storage
   * formats (a factorisation needs more precision than they keep). */
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    uint32_t dt = i < n_in ? desc->in[i].l.dtype : desc->out[i - n_in].l.dtype;
    if (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16)
      return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                          "%s runs in f32 or f64, not %s; cast to f32 first",
                          name, cpu_dtype_name(dt));
  }
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    const tyto_plugin_layout *l =
        i < n_in ? &desc->in[i].l : &desc->out[i - n_in].l;
    if (l->dtype != a->dtype)
      return h->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: expected every input and output in %s (input "
          "0's dtype), found %s for %s %u",
          name, cpu_dtype_name(a->dtype), cpu_dtype_name(l->dtype),
          i < n_in ? "input" : "output", i < n_in ? i : i - n_in);
  }
  if (a->rank < 2)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected a matrix or a batch of them (rank >= "
                        "2), found rank %u",
                        name, a->rank);
  op->f32 = a->dtype == TYTO_PLUGIN_DTYPE_F32;
  op->esz = op->f32 ? 4 : 8;
  op->lead = a->rank - 2;
  op->m = a->shape[a->rank - 2];
  op->n = a->shape[a->rank - 1];
  op->batch = 1;
  for (uint32_t i = 0; i < op->lead; i++)
    op->batch *= a->shape[i];
  const int64_t *bs = a->shape;
  tyto_plugin_error *e = NULL;
  if (op->op != TYTO_PLUGIN_OP_QR && op->m != op->n)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected square matrices, found %lld x %lld", name,
                        (long long)op->m, (long long)op->n);
  switch (op->op) {
  case TYTO_PLUGIN_OP_INV:
  case TYTO_PLUGIN_OP_CHOLESKY:
    e = want_shape(h, name, "output", &desc->out[0].l, bs, op->lead, op->n,
                   op->n);
    break;
  case TYTO_PLUGIN_OP_DET:
  case TYTO_PLUGIN_OP_LOGDET:
    e = want_shape(h, name, "output", &desc->out[0].l, bs, op->lead, -1, -1);
    break;
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE:
    if (desc->d->n_iattrs != 3)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: expected 3 integer attributes (lower, "
                          "transpose, unit_diagonal), got %u",
                          name, desc->d->n_iattrs);
    op->lower = desc->d->iattrs[0] != 0;
    op->transpose = desc->d->iattrs[1] != 0;
    op->unit = desc->d->iattrs[2] != 0;
    /* B and the output are checked as SOLVE's. */
    __attribute__((fallthrough));
  case TYTO_PLUGIN_OP_SOLVE: {
    const tyto_plugin_layout *b = &desc->in[1].l;
    op->k = b->rank >= 2 ? b->shape[b->rank - 1] : 0;
    e = want_shape(h, name, "B (input 1)", b, bs, op->lead, op->n, op->k);
    if (!e)
      e = want_shape(h, name, "output", &desc->out[0].l, bs, op->lead, op->n,
                     op->k);
    break;
  }
  default: /* QR */
    op->k = op->m < op->n ? op->m : op->n;
    e = want_shape(h, name, "Q (output 0)", &desc->out[0].l, bs, op->lead,
                   op->m, op->k);
    if (!e)
      e = want_shape(h, name, "R (output 1)", &desc->out[1].l, bs, op->lead,
                     op->k, op->n);
    break;
  }
  return e ? e : plan_workspace(h, op);
}

/* LAPACK's workspace queries (lwork -1) allocate nothing: the check may
 * make them. */
tyto_plugin_error *cpu_linalg_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  linalg_op op;
  memset(&op, 0, sizeof op);
  op.op = desc->d->op;
  return linalg_check(h, desc, &op);
}

tyto_plugin_error *cpu_linalg_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  linalg_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->h = h;
  op->op = desc->d->op;
  tyto_plugin_error *e = linalg_check(h, desc, op);
  if (e) {
    free(op);
    return e;
  }
  op->base.run = linalg_run;
  op->base.destroy = linalg_destroy;
  *out = &op->base;
  return NULL;
}
