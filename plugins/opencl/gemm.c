/*
 * GEMM by tyto's own kernels, for OpenCL devices that are CPUs (PoCL).
 *
 * CLBlast's kernels are built for GPUs: tiles in local memory, and an
 * "indirect" path that pads every operand to multiples of its 64 x 128
 * tiles and copies it first. On a CPU device that padding is the cost: a
 * 16-row product costs what a 64-row one does, and a [16, 3136] x [3136,
 * 2048] product (a dense layer's forward pass for a shard of 16 images)
 * took 44 ms with PoCL on one core of a Zen 4, where OpenBLAS takes 4.4.
 * These kernels keep a block of C in registers instead and stream A and B
 * from the caches, as a CPU BLAS's micro-kernel does (without its packing):
 *
 *   tyto_gemm_j  B is contiguous along j (its columns): a work-item owns
 *                R rows x NV vectors of W columns of C (W = 16 floats or 8
 *                doubles: one AVX-512 register), and for each k loads NV
 *                vectors of B's row k and one element of A per row;
 *   tyto_gemm_k  B is contiguous along k (B^T stored row-major) and so is
 *                A: a work-item owns R rows of one column of C, and both
 *                operands are read as vectors along k, summed across the
 *                vector at the end.
 *
 * The product C = A B (+ beta C) is given by element strides, so that any
 * of the BLAS's transposes, and C^T = B^T A^T, are the same call
 * (ocl_gemm_run chooses the kernel and the formulation). Every operand is
 * indexed with 64-bit integers: no split of large operands is needed.
 * Accumulation is in T (f32 or f64) with fma: tyto_gemm_j adds along k
 * in order, in passes over slices of k when C has several blocks of rows
 * (each slice's sum then added into C, so a row's rounding depends on m);
 * tyto_gemm_k adds W interleaved partial sums, then sums across them.
 *
 * bench/gemm_opencl times them against CLBlast and OpenBLAS: with PoCL on
 * one core of a 2-core Zen 4 they take 0.6 to 1.4 times OpenBLAS's time on
 * the seed CNN's dense-layer products and on squares (4 times on its
 * 10-column classifier, where the launch costs more than the product),
 * and CLBlast 3.6 to 18 times theirs (docs/opencl.md has the table).
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

/* R rows x NV vectors of C per work-item of tyto_gemm_j (NV at most 4,
 * R * NV at most 16: the accumulators stay in 16 of AVX-512's 32
 * registers); RK rows of one column per work-item of tyto_gemm_k. */
#define GEMM_NV_MAX 4
#define GEMM_ACC 16
#define GEMM_RK 4
#define GEMM_JK 2
/* The slice of B's panel a pass of tyto_gemm_j reads (ocl_gemm_run). */
#define GEMM_PANEL_BYTES ((int64_t)256 * 1024)

/* In three parts: ISO C caps one string literal at 4095 characters. */
static const char gemm_head[] =
    "#ifdef TYTO_FP64\n"
    "#define W 8\n"
    "#define VT double8\n"
    "#define VLOAD vload8\n"
    "#define VSTORE vstore8\n"
    "static inline T tyto_hsum(VT v) {\n"
    "  double4 a = v.lo + v.hi; double2 b = a.lo + a.hi; return b.x + b.y;\n"
    "}\n"
    "#else\n"
    "#define W 16\n"
    "#define VT float16\n"
    "#define VLOAD vload16\n"
    "#define VSTORE vstore16\n"
    "static inline T tyto_hsum(VT v) {\n"
    "  float8 a = v.lo + v.hi; float4 b = a.lo + a.hi;\n"
    "  float2 c = b.lo + b.hi; return c.x + c.y;\n"
    "}\n"
    "#endif\n"
    "#define CW (W * NV)\n"
    /* One element of C: the sum, plus beta times the old value (not read
     * when beta is 0, so that NaN in an uninitialised C cannot leak). */
    "#define TYTO_PUT(p, v) (*(p) = beta != (T)0 ? fma(beta, *(p), (v)) : "
    "(v))\n";

static const char gemm_j_source[] =
    /* Step k of tyto_gemm_j: row r's element of A times B's vectors b. */
    "#define TYTO_GEMM_ROWS \\\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < R; r++) { \\\n"
    "    VT a = (VT)(ar[r][k * ask]); \\\n"
    "    _Pragma(\"unroll\") for (int v = 0; v < NV; v++) \\\n"
    "      acc[r][v] = fma(a, b[v], acc[r][v]); \\\n"
    "  }\n"
    "__kernel void tyto_gemm_j(long M, long N, long K,\n"
    "    __global const T *A, long ao, long asi, long ask, long abs,\n"
    "    __global const T *B, long bo, long bsk, long bbs,\n"
    "    __global T *C, long co, long csi, long csj, long cbs, T beta) {\n"
    "  long i0 = (long)get_global_id(0) * R, j0 = (long)get_global_id(1) * "
    "CW;\n"
    "  long bt = (long)get_global_id(2);\n"
    "  if (i0 >= M || j0 >= N) return;\n"
    "  A += ao + bt * abs; B += bo + bt * bbs + j0; C += co + bt * cbs;\n"
    "  __global const T *ar[R];\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < R; r++)\n"
    "    ar[r] = A + min(i0 + r, M - 1) * asi;\n"
    "  VT acc[R][NV];\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < R; r++)\n"
    "    _Pragma(\"unroll\") for (int v = 0; v < NV; v++) acc[r][v] = (VT)0;\n"
    "  long nj = min((long)CW, N - j0);\n"
    "  if (nj == CW) {\n"
    "    for (long k = 0; k < K; k++) {\n"
    "      __global const T *bk = B + k * bsk;\n"
    "      VT b[NV];\n"
    "      _Pragma(\"unroll\") for (int v = 0; v < NV; v++) b[v] = VLOAD(v, "
    "bk);\n"
    "      TYTO_GEMM_ROWS\n"
    "    }\n"
    "  } else {\n"
    "    for (long k = 0; k < K; k++) {\n"
    "      __global const T *bk = B + k * bsk;\n"
    "      T t[CW];\n"
    "      for (int c = 0; c < CW; c++) t[c] = c < nj ? bk[c] : (T)0;\n"
    "      VT b[NV];\n"
    "      _Pragma(\"unroll\") for (int v = 0; v < NV; v++) b[v] = VLOAD(v, "
    "t);\n"
    "      TYTO_GEMM_ROWS\n"
    "    }\n"
    "  }\n"
    "  long nr = min((long)R, M - i0);\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < R; r++) {\n"
    "    if (r >= nr) break;\n"
    "    __global T *cr = C + (i0 + r) * csi + j0 * csj;\n"
    "    if (csj == 1 && nj == CW) {\n"
    "      _Pragma(\"unroll\") for (int v = 0; v < NV; v++) {\n"
    "        VT o = acc[r][v];\n"
    "        if (beta != (T)0) o = fma((VT)beta, VLOAD(v, cr), o);\n"
    "        VSTORE(o, v, cr);\n"
    "      }\n"
    "    } else {\n"
    "      T t[CW];\n"
    "      _Pragma(\"unroll\") for (int v = 0; v < NV; v++) VSTORE(acc[r][v], "
    "v, t);\n"
    "      for (long c = 0; c < nj; c++) TYTO_PUT(cr + c * csj, t[c]);\n"
    "    }\n"
    "  }\n"
    "}\n";

static const char gemm_k_source[] =
    "__kernel void tyto_gemm_k(long M, long N, long K,\n"
    "    __global const T *A, long ao, long asi, long ask, long abs,\n"
    "    __global const T *B, long bo, long bsj, long bbs,\n"
    "    __global T *C, long co, long csi, long csj, long cbs, T beta) {\n"
    "  long i0 = (long)get_global_id(0) * RK, j0 = (long)get_global_id(1) * "
    "JK;\n"
    "  long bt = (long)get_global_id(2);\n"
    "  if (i0 >= M || j0 >= N) return;\n"
    "  A += ao + bt * abs; B += bo + bt * bbs; C += co + bt * cbs;\n"
    "  __global const T *ar[RK], *bc[JK];\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < RK; r++)\n"
    "    ar[r] = A + min(i0 + r, M - 1) * asi;\n"
    "  _Pragma(\"unroll\") for (int c = 0; c < JK; c++)\n"
    "    bc[c] = B + min(j0 + c, N - 1) * bsj;\n"
    "  VT acc[RK][JK];\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < RK; r++)\n"
    "    _Pragma(\"unroll\") for (int c = 0; c < JK; c++) acc[r][c] = (VT)0;\n"
    "  long k = 0;\n"
    "  for (; k + W <= K; k += W) {\n"
    "    VT b[JK];\n"
    "    _Pragma(\"unroll\") for (int c = 0; c < JK; c++) b[c] = VLOAD(0, "
    "bc[c] + k);\n"
    "    _Pragma(\"unroll\") for (int r = 0; r < RK; r++) {\n"
    "      VT a = VLOAD(0, ar[r] + k);\n"
    "      _Pragma(\"unroll\") for (int c = 0; c < JK; c++)\n"
    "        acc[r][c] = fma(a, b[c], acc[r][c]);\n"
    "    }\n"
    "  }\n"
    "  T s[RK][JK];\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < RK; r++)\n"
    "    _Pragma(\"unroll\") for (int c = 0; c < JK; c++)\n"
    "      s[r][c] = tyto_hsum(acc[r][c]);\n"
    "  for (; k < K; k++)\n"
    "    _Pragma(\"unroll\") for (int r = 0; r < RK; r++)\n"
    "      _Pragma(\"unroll\") for (int c = 0; c < JK; c++)\n"
    "        s[r][c] = fma(ar[r][k], bc[c][k], s[r][c]);\n"
    "  long nr = min((long)RK, M - i0), nc = min((long)JK, N - j0);\n"
    "  _Pragma(\"unroll\") for (int r = 0; r < RK; r++)\n"
    "    _Pragma(\"unroll\") for (int c = 0; c < JK; c++)\n"
    "      if (r < nr && c < nc)\n"
    "        TYTO_PUT(C + (i0 + r) * csi + (j0 + c) * csj, s[r][c]);\n"
    "}\n";

int ocl_gemm_own_dtype(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F32 || dtype == TYTO_PLUGIN_DTYPE_F64;
}

/* Whether ocl_gemm_run computes g as C^T = B^T A^T: both operands read
 * across k with a stride, which tyto_gemm_k cannot take. */
static int transposed_run(const ocl_gemm *g) {
  return g->ta && g->tb;
}

tyto_plugin_error *ocl_gemm_prepare(tyto_plugin_device *dev, uint32_t dtype,
                                    const ocl_gemm *like,
                                    ocl_gemm_kernels *out) {
  memset(out, 0, sizeof *out);
  /* C's columns as the kernel computes them. */
  int64_t n_hint = like == NULL ? 0 : transposed_run(like) ? like->m : like->n;
  /* Columns per work-item: as many vectors as C has (up to NV_MAX), so a
   * narrow C (a classifier's 10 outputs) wastes no lanes on padding; the
   * rows fill the accumulators that leaves. */
  int64_t w = dtype == TYTO_PLUGIN_DTYPE_F64 ? 8 : 16;
  int64_t nv = n_hint <= 0 ? GEMM_NV_MAX : (n_hint + w - 1) / w;
  if (nv > GEMM_NV_MAX)
    nv = GEMM_NV_MAX;
  int64_t r = GEMM_ACC / nv;
  if (r > 8)
    r = 8;
  out->rows = (int)r;
  out->vecs = (int)nv;
  out->width = (int)w;
  char opts[96];
  snprintf(opts, sizeof opts, "-DR=%d -DNV=%d -DRK=%d -DJK=%d", out->rows,
           out->vecs, GEMM_RK, GEMM_JK);
  static const char *const parts[] = {gemm_head, gemm_j_source, gemm_k_source};
  char *source = ocl_source_join(parts, 3);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  tyto_plugin_error *e =
      ocl_kernel_new(dev, dtype, source, opts, "tyto_gemm_j", &out->j);
  if (e == NULL)
    e = ocl_kernel_new(dev, dtype, source, opts, "tyto_gemm_k", &out->k);
  free(source);
  if (e != NULL)
    ocl_gemm_release(out);
  return e;
}

void ocl_gemm_release(ocl_gemm_kernels *g) {
  if (g->j != NULL)
    clReleaseKernel(g->j);
  if (g->k != NULL)
    clReleaseKernel(g->k);
  g->j = g->k = NULL;
}

/* Work-items for `n` items in groups of `per`. */
static size_t blocks(int64_t n, int64_t per) {
  return (size_t)((n + per - 1) / per);
}

tyto_plugin_error *ocl_gemm_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                const ocl_gemm_kernels *kern, const ocl_gemm *g,
                                const char *what) {
  /* Element strides: A(i, k), B(k, j), C(i, j). */
  int64_t asi = g->ta ? 1 : g->lda, ask = g->ta ? g->lda : 1;
  int64_t bsk = g->tb ? 1 : g->ldb, bsj = g->tb ? g->ldb : 1;
  int64_t csi = g->ldc, csj = 1;
  int64_t m = g->m, n = g->n;
  cl_mem a = g->a, b = g->b;
  int64_t ao = g->a_off, bo = g->b_off, abs = g->a_str, bbs = g->b_str;
  if (transposed_run(g)) {
    /* Both read across k with a stride (A^T B^T): C^T = B^T A^T, whose
     * right operand (A^T) is contiguous along its columns. */
    int64_t t;
    t = asi, asi = bsj, bsj = t;
    t = ask, ask = bsk, bsk = t;
    t = csi, csi = csj, csj = t;
    t = m, m = n, n = t;
    t = ao, ao = bo, bo = t;
    t = abs, abs = bbs, bbs = t;
    cl_mem tm = a;
    a = b, b = tm;
  }
  union {
    cl_float f;
    cl_double d;
  } beta;
  size_t bsize;
  if (g->elem == 8) {
    beta.d = g->beta;
    bsize = sizeof beta.d;
  } else {
    beta.f = (cl_float)g->beta;
    bsize = sizeof beta.f;
  }
  cl_long M = m, N = n, K = g->k;
  cl_long co = g->c_off, cbs = g->c_str;
  ocl_args x;
  size_t global[3];
  global[2] = (size_t)g->batch;
  /* Both kernels take one list: B's stride is along k for tyto_gemm_j,
   * along j for tyto_gemm_k (which reads A along k: ask is 1). */
  const int along_j = bsj == 1;
  x = OCL_ARGS(dev, along_j ? kern->j : kern->k);
  ocl_args_put(&x, sizeof M, &M);
  ocl_args_put(&x, sizeof N, &N);
  ocl_args_put(&x, sizeof K, &K);
  ocl_args_put(&x, sizeof a, &a);
  ocl_args_long(&x, ao);
  ocl_args_long(&x, asi);
  ocl_args_long(&x, ask);
  ocl_args_long(&x, abs);
  ocl_args_put(&x, sizeof b, &b);
  ocl_args_long(&x, bo);
  ocl_args_long(&x, along_j ? bsk : bsj);
  ocl_args_long(&x, bbs);
  global[0] = blocks(m, along_j ? kern->rows : GEMM_RK);
  global[1] = along_j ? blocks(n, (int64_t)kern->vecs * kern->width)
                      : blocks(n, GEMM_JK);
  ocl_args_put(&x, sizeof g->c, &g->c);
  ocl_args_long(&x, co);
  ocl_args_long(&x, csi);
  ocl_args_long(&x, csj);
  ocl_args_long(&x, cbs);
  cl_uint beta_arg = x.next;
  ocl_args_put(&x, bsize, &beta);
  if (x.e != NULL)
    return x.e;
  /* Groups of one work-item: the kernels share no local memory, and a
   * fixed group size spares PoCL a new build for each new global size. */
  static const size_t one[3] = {1, 1, 1};
  /* tyto_gemm_j with several blocks of rows reads each panel of B once
   * per block: over a long k, in slices of GEMM_PANEL_BYTES of panel,
   * which the next block then finds in the core's L2 (C takes each
   * slice's sums with beta 1; a [64, 6272] x [6272, 1024] product: 20 ms
   * in one pass, 12 in slices). */
  int64_t kc =
      GEMM_PANEL_BYTES / ((int64_t)kern->vecs * kern->width * (int64_t)g->elem);
  if (bsj != 1 || m <= kern->rows || g->k <= kc)
    return ocl_enqueue(dev, s, x.kernel, 3, global, one, what);
  tyto_plugin_error *e = NULL;
  for (int64_t k0 = 0; k0 < g->k && e == NULL; k0 += kc) {
    cl_long kn = g->k - k0 < kc ? g->k - k0 : kc;
    cl_long a0 = ao + k0 * ask, b0 = bo + k0 * bsk;
    if (k0 > 0 && g->elem == 8)
      beta.d = 1.0;
    else if (k0 > 0)
      beta.f = 1.0f;
    /* tyto_gemm_j's arguments 2 (K), 4 (A's origin), 9 (B's origin) and
     * beta change from slice to slice. */
    x.next = 2;
    x.e = NULL;
    ocl_args_put(&x, sizeof kn, &kn);
    x.next = 4;
    ocl_args_put(&x, sizeof a0, &a0);
    x.next = 9;
    ocl_args_put(&x, sizeof b0, &b0);
    x.next = beta_arg;
    ocl_args_put(&x, bsize, &beta);
    e = x.e != NULL ? x.e : ocl_enqueue(dev, s, x.kernel, 3, global, one, what);
  }
  return e;
}
