/*
 * Linear algebra on the last two axes, batched over the leading ones, as
 * plugins/cpu/linalg.c defines it through LAPACK: INV, DET, LOGDET, SOLVE,
 * CHOLESKY (lower), QR (reduced, LAPACK's signs) and TRIANGULAR_SOLVE.
 *
 * Every matrix of the batch is packed, whatever its strides (zero for a
 * broadcast batch axis, negative too), into its own column-major slot of
 * the workspace by a small kernel; the libraries then factorise all the
 * slots in one batched call each, and kernels write the results out
 * through the outputs' strides:
 *  - INV: cublas<t>getrfBatched + getriBatched (out of place);
 *  - DET, LOGDET: getrfBatched, then sign(P) * prod(diag(U)) (sum of
 *    log |u_ii| for LOGDET) in double per matrix, as the CPU plugin
 *    computes it: DET 0 and LOGDET -inf for an exactly singular matrix;
 *  - SOLVE: getrfBatched + getrsBatched;
 *  - CHOLESKY: cusolverDn<t>potrfBatched on the lower triangle (the upper
 *    one is never read), zeros written above the diagonal;
 *  - QR: cublas<t>geqrfBatched (Householder reflectors with LAPACK's
 *    dlarfg signs), then Q = H_0 ... H_{k-1} [I; 0] formed by a kernel of
 *    ours, one thread per column of Q, as dorg2r does;
 *  - TRIANGULAR_SOLVE: cublas<t>trsmBatched on the packed A and B.
 * None of these calls needs a library workspace, so prepare() sizes the
 * whole workspace from the problem alone and makes no CUDA call besides
 * tcu_function(); the pointer arrays the batched calls take are written
 * into the workspace by a kernel too, so nothing is copied from the host.
 *
 * A singular matrix (INV, SOLVE) or one that is not positive definite
 * (CHOLESKY) fails the launch, as on the CPU and the OpenCL plugin, with an
 * error naming the op and the first such matrix of the batch. The infos the
 * libraries leave on the device are reduced there to that first matrix,
 * and launch reads those 16 bytes back: one wait for the stream per launch
 * of these three ops (never per matrix); DET, LOGDET, QR and
 * TRIANGULAR_SOLVE never wait. A failed matrix's output is left as it
 * was; unlike the CPU, which stops at it, the other matrices are written.
 * TRIANGULAR_SOLVE does not look for zeros on the diagonal (trsm gives
 * infinities or NaNs), nor does QR for rank deficiency.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "ops.h"

#include "../common/linalg_plan.h"

static const char *const source_parts[] = {
    "/* Pointer arrays of the batched calls: p[b] = base + b * slot. */\n"
    "extern \"C\" __global__ void tyto_la_ptrs(T **p0, T *b0, i64 s0,\n"
    "                                          T **p1, T *b1, i64 s1,\n"
    "                                          T **p2, T *b2, i64 s2,\n"
    "                                          i64 batch) {\n"
    "  TYTO_FOR(b, batch) {\n"
    "    p0[b] = b0 + b * s0;\n"
    "    if (p1 != 0)\n"
    "      p1[b] = b1 + b * s1;\n"
    "    if (p2 != 0)\n"
    "      p2[b] = b2 + b * s2;\n"
    "  }\n"
    "}\n"
    "/* Slot b of dst (column-major, leading dimension ld) = matrix b of src\n"
    "   (batch dims bd, row and column strides rs, cs); `lower` keeps the\n"
    "   lower triangle and writes zeros above it. */\n"
    "extern \"C\" __global__ void tyto_la_pack(const T *src, tcu_dims bd,\n"
    "                                          i64 rs, i64 cs, int rows,\n"
    "                                          int cols, int lower, T *dst,\n"
    "                                          i64 ld, i64 slot, i64 batch) {\n"
    "  i64 per = (i64)rows * cols;\n"
    "  TYTO_FOR(t, batch * per) {\n"
    "    i64 b = t / per, e = t - b * per;\n"
    "    i64 j = e / rows, i = e - j * rows;\n"
    "    T v = lower && j > i ? (T)0\n"
    "                         : src[tyto_offset(b, bd) + i * rs + j * cs];\n"
    "    dst[b * slot + i + j * ld] = v;\n"
    "  }\n"
    "}\n"
    "/* The reverse: matrix b of dst = slot b of src; part 1 keeps the lower\n"
    "   triangle, 2 the upper, writing zeros elsewhere; 0 keeps everything.\n"
    "   A matrix whose info is not 0 is left as it was. */\n"
    "extern \"C\" __global__ void tyto_la_unpack(const T *src, i64 ld,\n"
    "                                            i64 slot, int rows,\n"
    "                                            int cols, int part,\n"
    "                                            const int *info, T *dst,\n"
    "                                            tcu_dims bd, i64 rs, i64 cs,\n"
    "                                            i64 batch) {\n"
    "  i64 per = (i64)rows * cols;\n"
    "  TYTO_FOR(t, batch * per) {\n"
    "    i64 b = t / per, e = t - b * per;\n"
    "    i64 i = e / cols, j = e - i * cols;\n"
    "    if (info != 0 && info[b] != 0)\n"
    "      continue;\n"
    "    bool keep = part == 0 || (part == 1 && i >= j) ||\n"
    "                (part == 2 && i <= j);\n"
    "    dst[tyto_offset(b, bd) + i * rs + j * cs] =\n"
    "        keep ? src[b * slot + i + j * ld] : (T)0;\n"
    "  }\n"
    "}\n",
    "/* A double into T; for f32, beyond FLT_MAX is infinity (the CPU's\n"
    "   store_scalar). */\n"
    "__device__ __forceinline__ float la_narrow(double v, float) {\n"
    "  return v > 3.4028234663852886e38 ? __int_as_float(0x7f800000)\n"
    "         : v < -3.4028234663852886e38 ? __int_as_float((int)0xff800000u)\n"
    "                                      : (float)v;\n"
    "}\n"
    "__device__ __forceinline__ double la_narrow(double v, double) {\n"
    "  return v;\n"
    "}\n"
    "/* DET (logdet 0) or LOGDET of each LU factorisation P A = L U (slots\n"
    "   of lu, getrf's 1-based pivots and infos), as plugins/cpu/linalg.c:\n"
    "   in double, sign(P) * prod(u_ii) or sum log |u_ii|; 0 or -inf for an\n"
    "   exactly singular U; 1 or 0 for n = 0 (lu, ipiv, info unused). */\n"
    "extern \"C\" __global__ void tyto_la_det(const T *lu, i64 ld, i64 slot,\n"
    "                                         const int *ipiv,\n"
    "                                         const int *info, int n,\n"
    "                                         int logdet, T *out,\n"
    "                                         tcu_dims bd, i64 batch) {\n"
    "  TYTO_FOR(b, batch) {\n"
    "    double v = logdet ? 0.0 : 1.0;\n"
    "    int nan = 0;\n"
    "    for (int i = 0; i < n; i++) {\n"
    "      double u = (double)lu[b * slot + i + i * ld];\n"
    "      nan |= u != u;\n"
    "      if (logdet)\n"
    "        v += log(fabs(u));\n"
    "      else\n"
    "        v *= ipiv[b * n + i] != i + 1 ? -u : u;\n"
    "    }\n"
    "    /* singular: 0 or -inf, unless a NaN in the matrix made it NaN */\n"
    "    if (n > 0 && info[b] > 0 && !nan)\n"
    "      v = logdet ? __longlong_as_double(0xfff0000000000000ll) : 0.0;\n"
    "    else if (nan)\n"
    "      v = __longlong_as_double(0x7ff8000000000000ll);\n"
    "    out[tyto_offset(b, bd)] = la_narrow(v, (T)0);\n"
    "  }\n"
    "}\n"
    "/* f[0] = the first b whose info is not 0 (f[0] starts at ~0). */\n"
    "extern \"C\" __global__ void tyto_la_fail(const int *info, i64 batch,\n"
    "                                          u64 *f) {\n"
    "  TYTO_FOR(b, batch) {\n"
    "    if (info[b] != 0)\n"
    "      atomicMin(&f[0], (u64)b);\n"
    "  }\n"
    "}\n"
    "/* f[1] = that matrix's info (after tyto_la_fail). */\n"
    "extern \"C\" __global__ void tyto_la_fail_info(const int *info, u64 *f) "
    "{\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0)\n"
    "    f[1] = f[0] == ~0ull ? 0ull : (u64)(i64)info[f[0]];\n"
    "}\n",
    "/* Q (m x k, slots of q) from geqrf's reflectors (below the diagonal of\n"
    "   the slots of v) and tau: column c of Q is H_0 ... H_c e_c (the\n"
    "   reflectors after c leave e_c as it is), H_j = I - tau_j w w^T with\n"
    "   w_j = 1, as dorg2r forms it; one thread per column. */\n"
    "extern \"C\" __global__ void tyto_la_orgqr(const T *v, i64 ldv, i64 sv,\n"
    "                                           const T *tau, i64 st, T *q,\n"
    "                                           i64 ldq, i64 sq, int m,\n"
    "                                           int k, i64 batch) {\n"
    "  TYTO_FOR(t, batch * k) {\n"
    "    i64 b = t / k;\n"
    "    int c = (int)(t - b * k);\n"
    "    const T *vb = v + b * sv, *tb = tau + b * st;\n"
    "    T *x = q + b * sq + (i64)c * ldq;\n"
    "    for (int r = 0; r < m; r++)\n"
    "      x[r] = r == c ? (T)1 : (T)0;\n"
    "    for (int j = c; j >= 0; j--) {\n"
    "      T tj = tb[j];\n"
    "      if (tj == (T)0)\n"
    "        continue;\n"
    "      const T *w = vb + (i64)j * ldv;\n"
    "      T s = x[j];\n"
    "      for (int r = j + 1; r < m; r++)\n"
    "        s += w[r] * x[r];\n"
    "      T ts = tj * s;\n"
    "      x[j] -= ts;\n"
    "      for (int r = j + 1; r < m; r++)\n"
    "        x[r] -= w[r] * ts;\n"
    "    }\n"
    "  }\n"
    "}\n",
};

/* A matrix operand as the kernels read it: batch dims, then the row and
 * column strides of its last two axes (0 for a scalar per matrix). */
typedef struct la_mat {
  tcu_dims bd;
  int64_t rs, cs;
} la_mat;

typedef struct la_impl {
  cudaKernel_t ptrs, pack, unpack, det, fail, fail_info, orgqr;
  int f64;
  int64_t batch;              /* matrices */
  int m, n, k;                /* A is m x n; B n x k; QR: k = min(m, n) */
  int lower, transpose, unit; /* TRIANGULAR_SOLVE's iattrs */
  int checked;                /* INV, SOLVE, CHOLESKY: fail on info */
  la_mat a, b, x, y;          /* inputs A, B; outputs 0 and 1 */
  /* Workspace: element slots (column-major, leading dimension ld*) and
   * byte offsets of each section. */
  int64_t lda, ldb, sa, sb, st;
  size_t off_b, off_tau, off_ipiv, off_info, off_info2, off_fail, off_ptr;
} la_impl;

static int owns(uint32_t op) {
  return tpc_linalg_op(op);
}

/* The checks of plugins/cpu/linalg.c (plugins/common/linalg_plan.c), then
 * the libraries' limits, filling *c. */
static tyto_plugin_error *check_into(tyto_plugin_device *dev, const tcu_desc *d,
                                     la_impl *c) {
  const tyto_plugin_host *h = TCU_HOST(dev);
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  tpc_linalg g;
  memset(&g, 0, sizeof g);
  char why[512];
  int code = tpc_linalg_check(&a, &g, why, sizeof why);
  if (code != 0)
    return h->error_new((tyto_plugin_code)code, "%s", why);
  int64_t m = g.m, n = g.n, k = g.k, batch = g.batch;
  /* cuBLAS and cuSOLVER take sizes, leading dimensions and batch counts as
   * int; the kernels index inside a slot with 64 bits. */
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX ||
      (m > 0 && n > INT_MAX / m) || (n > 0 && k > INT_MAX / n) ||
      (m > 0 && k > INT_MAX / m))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: %lld matrices of %lld x %lld are beyond "
                        "cuBLAS's and cuSOLVER's 32-bit sizes",
                        tcu_op_name(d->op), (long long)batch, (long long)m,
                        (long long)n);
  c->m = (int)m;
  c->n = (int)n;
  c->k = (int)k;
  c->batch = batch;
  c->lower = g.lower;
  c->transpose = g.transpose;
  c->unit = g.unit;
  c->checked = g.checked;
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  /* The 16-bit dtypes are storage formats; ops.md leaves linear algebra
   * undefined on them. */
  if (tcu_is16(d->dtype))
    return TCU_HOST(dev)->error_new(
        TYTO_PLUGIN_ERR_UNSUPPORTED,
        "%s: the cuda plugin runs linear algebra in f32 and f64, not %s (a "
        "storage format); cast the matrices to f32 first",
        tcu_op_name(d->op), tcu_dtype_name(d->dtype));
  la_impl c;
  memset(&c, 0, sizeof c);
  return check_into(dev, d, &c);
}

/* The kernels' view of layout l with `lead` batch axes. */
static la_mat mat_of(const tyto_plugin_layout *l, uint32_t lead) {
  la_mat mt;
  tyto_plugin_layout b = *l;
  b.rank = lead;
  mt.bd = tcu_dims_of(&b);
  mt.rs = l->rank == lead + 2 ? l->strides[lead] : 0;
  mt.cs = l->rank == lead + 2 ? l->strides[lead + 1] : 0;
  return mt;
}

#define LA_ALIGN(x) (((x) + 255) & ~(size_t)255)

/* Workspace sections, each 256-byte aligned: A's slots, then B's (SOLVE
 * and TRIANGULAR_SOLVE: B; INV: the inverse; QR: Q), tau (QR), pivots and
 * infos (getrf, potrf), a second info array (getri), the failure record
 * (two u64) and three pointer arrays. None of the library calls used
 * takes a workspace of its own. */
static void plan_workspace(tyto_plugin_kernel *k, la_impl *c) {
  uint32_t op = k->desc.op;
  size_t e = k->desc.elem, nb = (size_t)c->batch;
  int64_t m = c->m, n = c->n, kk = c->k;
  c->lda = m > 1 ? m : 1;
  c->ldb = c->lda; /* n for every op but QR, whose B is Q (m rows) */
  c->sa = c->lda * n;
  c->sb = 0;
  if (op == TYTO_PLUGIN_OP_SOLVE || op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE ||
      op == TYTO_PLUGIN_OP_QR)
    c->sb = c->ldb * kk;
  else if (op == TYTO_PLUGIN_OP_INV)
    c->sb = c->ldb * n;
  c->st = op == TYTO_PLUGIN_OP_QR ? (kk > 1 ? kk : 1) : 0;
  int lu = op == TYTO_PLUGIN_OP_INV || op == TYTO_PLUGIN_OP_DET ||
           op == TYTO_PLUGIN_OP_LOGDET || op == TYTO_PLUGIN_OP_SOLVE;
  int infos = lu || op == TYTO_PLUGIN_OP_CHOLESKY;
  c->off_b = LA_ALIGN(nb * (size_t)c->sa * e);
  c->off_tau = c->off_b + LA_ALIGN(nb * (size_t)c->sb * e);
  c->off_ipiv = c->off_tau + LA_ALIGN(nb * (size_t)c->st * e);
  c->off_info = c->off_ipiv +
                (lu ? LA_ALIGN(nb * (size_t)(n > 1 ? n : 1) * sizeof(int)) : 0);
  c->off_info2 = c->off_info + (infos ? LA_ALIGN(nb * sizeof(int)) : 0);
  c->off_fail = c->off_info2 +
                (op == TYTO_PLUGIN_OP_INV ? LA_ALIGN(nb * sizeof(int)) : 0);
  c->off_ptr = c->off_fail + LA_ALIGN(2 * sizeof(uint64_t));
  k->workspace_bytes = c->off_ptr + LA_ALIGN(3 * nb * sizeof(void *));
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  la_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  k->impl = c;
  tyto_plugin_error *e = check_into(dev, d, c);
  if (e != NULL)
    return e;
  /* INV, SOLVE and CHOLESKY read the failure flag back at launch. */
  k->host_sync = c->checked;
  uint32_t lead = d->in[0].l.rank - 2;
  c->f64 = d->dtype == TYTO_PLUGIN_DTYPE_F64;
  c->a = mat_of(&d->in[0].l, lead);
  if (d->n_in > 1)
    c->b = mat_of(&d->in[1].l, lead);
  c->x = mat_of(&d->out[0].l, lead);
  if (d->n_out > 1)
    c->y = mat_of(&d->out[1].l, lead);
  plan_workspace(k, c);
  char *source = tcu_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  /* One module: the later names cost no compile. */
  struct {
    const char *name;
    cudaKernel_t *fn;
  } fns[] = {
      {"tyto_la_ptrs", &c->ptrs},     {"tyto_la_pack", &c->pack},
      {"tyto_la_unpack", &c->unpack}, {"tyto_la_det", &c->det},
      {"tyto_la_fail", &c->fail},     {"tyto_la_fail_info", &c->fail_info},
      {"tyto_la_orgqr", &c->orgqr}};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0] && e == NULL; i++)
    e = tcu_function(dev, d->dtype, source, fns[i].name, fns[i].fn);
  free(source);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* ---- launch --------------------------------------------------------------
 */

/* The pointers of one launch into the workspace. */
typedef struct la_ws {
  char *a, *b, *tau;
  int *ipiv, *info, *info2;
  unsigned long long *fail;
  void **pa, **pb, **pt; /* pointer arrays to the slots of a, b, tau */
} la_ws;

static la_ws ws_of(const la_impl *c, void *base) {
  char *w = base;
  la_ws p;
  p.a = w;
  p.b = w + c->off_b;
  p.tau = w + c->off_tau;
  p.ipiv = (int *)(void *)(w + c->off_ipiv);
  p.info = (int *)(void *)(w + c->off_info);
  p.info2 = (int *)(void *)(w + c->off_info2);
  p.fail = (unsigned long long *)(void *)(w + c->off_fail);
  p.pa = (void **)(void *)(w + c->off_ptr);
  p.pb = p.pa + c->batch;
  p.pt = p.pb + c->batch;
  return p;
}

/* Runs fn over n items in a grid-stride loop. */
static tyto_plugin_error *run_n(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                cudaKernel_t fn, int64_t n, void **params,
                                const char *what) {
  dim3 grid = {tcu_blocks(dev, n), 1, 1}, block = {TCU_BLOCK, 1, 1};
  return tcu_run(dev, s, fn, grid, block, 0, params, what);
}

static tyto_plugin_error *write_ptrs(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, const la_impl *c,
                                     const la_ws *w, int with_b, int with_t) {
  void *p0 = w->pa, *b0 = w->a, *p1 = with_b ? w->pb : NULL, *b1 = w->b,
       *p2 = with_t ? w->pt : NULL, *b2 = w->tau;
  long long s0 = c->sa, s1 = c->sb, s2 = c->st, nb = c->batch;
  void *params[] = {&p0, &b0, &s0, &p1, &b1, &s1, &p2, &b2, &s2, &nb};
  return run_n(dev, s, c->ptrs, c->batch, params, "linalg pointer arrays");
}

static tyto_plugin_error *pack(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const la_impl *c, const void *src,
                               const la_mat *mt, int rows, int cols, int lower,
                               void *dst, int64_t ld, int64_t slot) {
  const void *sp = src;
  tcu_dims bd = mt->bd;
  long long rs = mt->rs, cs = mt->cs, ldl = ld, sl = slot, nb = c->batch;
  void *dp = dst;
  void *params[] = {&sp,    &bd, &rs,  &cs, &rows, &cols,
                    &lower, &dp, &ldl, &sl, &nb};
  return run_n(dev, s, c->pack, c->batch * rows * cols, params,
               "linalg pack kernel");
}

static tyto_plugin_error *unpack(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 const la_impl *c, const void *src, int64_t ld,
                                 int64_t slot, int rows, int cols, int part,
                                 const int *info, void *dst, const la_mat *mt) {
  const void *sp = src, *ip = info;
  long long ldl = ld, sl = slot, rs = mt->rs, cs = mt->cs, nb = c->batch;
  tcu_dims bd = mt->bd;
  void *dp = dst;
  void *params[] = {&sp, &ldl, &sl, &rows, &cols, &part,
                    &ip, &dp,  &bd, &rs,   &cs,   &nb};
  return run_n(dev, s, c->unpack, c->batch * rows * cols, params,
               "linalg unpack kernel");
}

static const char *cusolver_status(cusolverStatus_t st) {
  switch (st) {
  case CUSOLVER_STATUS_NOT_INITIALIZED:
    return "CUSOLVER_STATUS_NOT_INITIALIZED";
  case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
  case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
  case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
  case CUSOLVER_STATUS_EXECUTION_FAILED:
    return "CUSOLVER_STATUS_EXECUTION_FAILED";
  case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
  case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
  default: return "cusolverStatus_t (unknown)";
  }
}

static tyto_plugin_error *cublas_failed(tyto_plugin_device *dev, uint32_t op,
                                        const char *call, cublasStatus_t st) {
  tyto_plugin_code code =
      st == CUBLAS_STATUS_ALLOC_FAILED ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
      : st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH
          ? TYTO_PLUGIN_ERR_UNSUPPORTED
          : TYTO_PLUGIN_ERR_DEVICE;
  return tcu_lib_error(dev, code, tcu_op_name(op), call,
                       cublasGetStatusString(st));
}

/* The library part of each op, with dev->lib_lock held and the handle
 * bound to the stream. The pointer arrays hold the slots' addresses. */
static tyto_plugin_error *cublas_part(tyto_plugin_device *dev,
                                      const tyto_plugin_kernel *k,
                                      cublasHandle_t h, const la_ws *w) {
  const la_impl *c = k->impl;
  uint32_t op = k->desc.op;
  int n = c->n, lda = (int)c->lda, ldb = (int)c->ldb, nb = (int)c->batch;
  int hinfo = 0;
  cublasStatus_t st;
  const char *call;
  if (op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE) {
    cublasFillMode_t uplo =
        c->lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
    cublasOperation_t tr = c->transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasDiagType_t dg = c->unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
    const float one_f = 1.0f;
    const double one_d = 1.0;
    call = c->f64 ? "cublasDtrsmBatched" : "cublasStrsmBatched";
    st = c->f64 ? cublasDtrsmBatched(h, CUBLAS_SIDE_LEFT, uplo, tr, dg, n, c->k,
                                     &one_d, (const double *const *)w->pa, lda,
                                     (double *const *)w->pb, ldb, nb)
                : cublasStrsmBatched(h, CUBLAS_SIDE_LEFT, uplo, tr, dg, n, c->k,
                                     &one_f, (const float *const *)w->pa, lda,
                                     (float *const *)w->pb, ldb, nb);
    return st == CUBLAS_STATUS_SUCCESS ? NULL
                                       : cublas_failed(dev, op, call, st);
  }
  if (op == TYTO_PLUGIN_OP_QR) {
    call = c->f64 ? "cublasDgeqrfBatched" : "cublasSgeqrfBatched";
    st = c->f64 ? cublasDgeqrfBatched(h, c->m, n, (double *const *)w->pa, lda,
                                      (double *const *)w->pt, &hinfo, nb)
                : cublasSgeqrfBatched(h, c->m, n, (float *const *)w->pa, lda,
                                      (float *const *)w->pt, &hinfo, nb);
    if (st == CUBLAS_STATUS_SUCCESS && hinfo != 0)
      return TCU_HOST(dev)->error_new(
          TYTO_PLUGIN_ERR_INTERNAL,
          "qr on cuda:%d: %s refused argument %d (a bug in the cuda plugin; "
          "please report it)",
          dev->index, call, -hinfo);
    return st == CUBLAS_STATUS_SUCCESS ? NULL
                                       : cublas_failed(dev, op, call, st);
  }
  /* INV, DET, LOGDET, SOLVE: the LU factorisations first. */
  call = c->f64 ? "cublasDgetrfBatched" : "cublasSgetrfBatched";
  st = c->f64 ? cublasDgetrfBatched(h, n, (double *const *)w->pa, lda, w->ipiv,
                                    w->info, nb)
              : cublasSgetrfBatched(h, n, (float *const *)w->pa, lda, w->ipiv,
                                    w->info, nb);
  if (st == CUBLAS_STATUS_SUCCESS && op == TYTO_PLUGIN_OP_INV) {
    call = c->f64 ? "cublasDgetriBatched" : "cublasSgetriBatched";
    st = c->f64 ? cublasDgetriBatched(h, n, (const double *const *)w->pa, lda,
                                      w->ipiv, (double *const *)w->pb, ldb,
                                      w->info2, nb)
                : cublasSgetriBatched(h, n, (const float *const *)w->pa, lda,
                                      w->ipiv, (float *const *)w->pb, ldb,
                                      w->info2, nb);
  }
  if (st == CUBLAS_STATUS_SUCCESS && op == TYTO_PLUGIN_OP_SOLVE) {
    call = c->f64 ? "cublasDgetrsBatched" : "cublasSgetrsBatched";
    st = c->f64
             ? cublasDgetrsBatched(h, CUBLAS_OP_N, n, c->k,
                                   (const double *const *)w->pa, lda, w->ipiv,
                                   (double *const *)w->pb, ldb, &hinfo, nb)
             : cublasSgetrsBatched(h, CUBLAS_OP_N, n, c->k,
                                   (const float *const *)w->pa, lda, w->ipiv,
                                   (float *const *)w->pb, ldb, &hinfo, nb);
    if (st == CUBLAS_STATUS_SUCCESS && hinfo != 0)
      return TCU_HOST(dev)->error_new(
          TYTO_PLUGIN_ERR_INTERNAL,
          "solve on cuda:%d: %s refused argument %d (a bug in the cuda "
          "plugin; please report it)",
          dev->index, call, -hinfo);
  }
  return st == CUBLAS_STATUS_SUCCESS ? NULL : cublas_failed(dev, op, call, st);
}

/* Takes the device's cuBLAS or cuSOLVER handle under lib_lock, binds it to
 * s and runs the op's library calls. */
static tyto_plugin_error *library_part(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s,
                                       const tyto_plugin_kernel *k,
                                       const la_ws *w) {
  const la_impl *c = k->impl;
  const char *name = tcu_op_name(k->desc.op);
  void *hv = NULL;
  tyto_plugin_error *e;
  pthread_mutex_lock(&dev->lib_lock);
  if (k->desc.op == TYTO_PLUGIN_OP_CHOLESKY) {
    e = tcu_cusolver(dev, &hv);
    if (e == NULL) {
      cusolverDnHandle_t h = hv;
      const char *call = "cusolverDnSetStream";
      cusolverStatus_t st = cusolverDnSetStream(h, s->stream);
      if (st == CUSOLVER_STATUS_SUCCESS) {
        call = c->f64 ? "cusolverDnDpotrfBatched" : "cusolverDnSpotrfBatched";
        st = c->f64 ? cusolverDnDpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, c->n,
                                              (double **)w->pa, (int)c->lda,
                                              w->info, (int)c->batch)
                    : cusolverDnSpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, c->n,
                                              (float **)w->pa, (int)c->lda,
                                              w->info, (int)c->batch);
      }
      if (st != CUSOLVER_STATUS_SUCCESS)
        e = tcu_lib_error(dev,
                          st == CUSOLVER_STATUS_ALLOC_FAILED
                              ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                              : TYTO_PLUGIN_ERR_DEVICE,
                          name, call, cusolver_status(st));
    }
  } else {
    e = tcu_cublas(dev, &hv);
    if (e == NULL) {
      cublasHandle_t h = hv;
      cublasStatus_t st = cublasSetStream(h, s->stream);
      const char *call = "cublasSetStream";
      if (st == CUBLAS_STATUS_SUCCESS) {
        /* trsm's alpha lives on the host; another user may have left the
         * shared handle in device pointer mode. */
        call = "cublasSetPointerMode";
        st = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
      }
      if (st != CUBLAS_STATUS_SUCCESS)
        e = cublas_failed(dev, k->desc.op, call, st);
      else
        e = cublas_part(dev, k, h, w);
    }
  }
  pthread_mutex_unlock(&dev->lib_lock);
  return e;
}

/* The first failed matrix of the batch, reduced on the device from the
 * infos and read back (waits for the stream), as an error; NULL when every
 * matrix succeeded. */
static tyto_plugin_error *read_failure(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s,
                                       const tyto_plugin_kernel *k,
                                       const la_ws *w) {
  const la_impl *c = k->impl;
  const tyto_plugin_host *h = TCU_HOST(dev);
  const char *name = tcu_op_name(k->desc.op);
  cudaError_t ce = cudaMemsetAsync(w->fail, 0xff, sizeof(uint64_t), s->stream);
  if (ce != cudaSuccess)
    return tcu_cuda_error(h, ce, "%s on cuda:%d: clearing the failure record",
                          name, dev->index);
  const void *ip = w->info;
  void *fp = w->fail;
  long long nb = c->batch;
  void *p1[] = {&ip, &nb, &fp};
  tyto_plugin_error *e =
      run_n(dev, s, c->fail, c->batch, p1, "linalg failure kernel");
  void *p2[] = {&ip, &fp};
  if (e == NULL)
    e = run_n(dev, s, c->fail_info, 1, p2, "linalg failure kernel");
  if (e != NULL)
    return e;
  unsigned long long f[2];
  ce = cudaMemcpyAsync(f, w->fail, sizeof f, cudaMemcpyDeviceToHost, s->stream);
  if (ce == cudaSuccess)
    ce = cudaStreamSynchronize(s->stream);
  if (ce != cudaSuccess)
    return tcu_cuda_error(h, ce,
                          "%s on cuda:%d: reading back the factorisations' "
                          "infos",
                          name, dev->index);
  if (f[0] == ~0ull)
    return NULL;
  int info = (int)(long long)f[1];
  if (info < 0)
    return h->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                        "%s on cuda:%d: the factorisation refused argument "
                        "%d (a bug in the cuda plugin; please report it)",
                        name, dev->index, -info);
  if (k->desc.op == TYTO_PLUGIN_OP_CHOLESKY)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "cholesky: matrix %lld of the batch is not positive "
                        "definite (leading minor %d)",
                        (long long)f[0], info);
  return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: matrix %lld of the batch is singular (pivot %d of "
                      "its LU factorisation is zero)",
                      name, (long long)f[0], info);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const la_impl *c = k->impl;
  uint32_t op = k->desc.op;
  int m = c->m, n = c->n, kk = c->k;
  int det = op == TYTO_PLUGIN_OP_DET || op == TYTO_PLUGIN_OP_LOGDET;
  if (c->batch == 0)
    return NULL;
  if (det && n == 0) {
    /* The empty product and sum: 1 and 0, no factorisation. */
    const void *np = NULL;
    void *xp = out[0].ptr;
    long long z = 0, nb = c->batch;
    int zn = 0, logdet = op == TYTO_PLUGIN_OP_LOGDET;
    tcu_dims bd = c->x.bd;
    void *params[] = {&np, &z, &z, &np, &np, &zn, &logdet, &xp, &bd, &nb};
    return run_n(dev, s, c->det, c->batch, params, "linalg det kernel");
  }
  /* Every other op with an empty matrix has empty outputs. */
  if (m == 0 || n == 0 ||
      ((op == TYTO_PLUGIN_OP_SOLVE || op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE ||
        op == TYTO_PLUGIN_OP_QR) &&
       kk == 0))
    return NULL;
  la_ws w = ws_of(c, ws->ptr);
  int two = op == TYTO_PLUGIN_OP_SOLVE || op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE;
  tyto_plugin_error *e =
      write_ptrs(dev, s, c, &w, c->sb > 0, op == TYTO_PLUGIN_OP_QR);
  if (e == NULL)
    e = pack(dev, s, c, in[0].ptr, &c->a, m, n, op == TYTO_PLUGIN_OP_CHOLESKY,
             w.a, c->lda, c->sa);
  if (e == NULL && two)
    e = pack(dev, s, c, in[1].ptr, &c->b, n, kk, 0, w.b, c->ldb, c->sb);
  if (e == NULL)
    e = library_part(dev, s, k, &w);
  if (e != NULL)
    return e;
  const int *info = c->checked ? w.info : NULL;
  switch (op) {
  case TYTO_PLUGIN_OP_DET:
  case TYTO_PLUGIN_OP_LOGDET: {
    const void *lu = w.a, *ip = w.ipiv, *inf = w.info;
    void *xp = out[0].ptr;
    long long ld = c->lda, sl = c->sa, nb = c->batch;
    int logdet = op == TYTO_PLUGIN_OP_LOGDET;
    tcu_dims bd = c->x.bd;
    void *params[] = {&lu, &ld, &sl, &ip, &inf, &n, &logdet, &xp, &bd, &nb};
    return run_n(dev, s, c->det, c->batch, params, "linalg det kernel");
  }
  case TYTO_PLUGIN_OP_INV:
  case TYTO_PLUGIN_OP_SOLVE:
    e = unpack(dev, s, c, w.b, c->ldb, c->sb, n,
               op == TYTO_PLUGIN_OP_INV ? n : kk, 0, info, out[0].ptr, &c->x);
    break;
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE:
    return unpack(dev, s, c, w.b, c->ldb, c->sb, n, kk, 0, NULL, out[0].ptr,
                  &c->x);
  case TYTO_PLUGIN_OP_CHOLESKY:
    e = unpack(dev, s, c, w.a, c->lda, c->sa, n, n, 1, info, out[0].ptr, &c->x);
    break;
  default: { /* QR: R from the upper triangle, then Q */
    e = unpack(dev, s, c, w.a, c->lda, c->sa, kk, n, 2, NULL, out[1].ptr,
               &c->y);
    if (e != NULL)
      return e;
    const void *vp = w.a, *tp = w.tau;
    void *qp = w.b;
    long long ldv = c->lda, sv = c->sa, st = c->st, ldq = c->ldb, sq = c->sb,
              nb = c->batch;
    void *params[] = {&vp, &ldv, &sv, &tp, &st, &qp, &ldq, &sq, &m, &kk, &nb};
    e = run_n(dev, s, c->orgqr, c->batch * kk, params, "linalg orgqr kernel");
    if (e == NULL)
      e = unpack(dev, s, c, w.b, c->ldb, c->sb, m, kk, 0, NULL, out[0].ptr,
                 &c->x);
    return e;
  }
  }
  if (e == NULL && c->checked)
    e = read_failure(dev, s, k, &w);
  return e;
}

const tcu_family tcu_family_linalg = {"linalg", owns,   check,
                                      prepare,  launch, release};
