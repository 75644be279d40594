/*
 * MATMUL through cuBLAS: [..., m, k] x [..., k, n] -> [..., m, n], batch
 * axes broadcast by NumPy rules, optional transposes of either input's last
 * two axes (iattrs[0], iattrs[1]).
 *
 * Planned once at prepare by the planner the OpenCL plugin uses for CLBlast
 * (common/matmul_plan.c): every matrix (A, B, C) is a 2-D view with two
 * strides. A view that is row-major or column-major with a unit stride goes to
 * cuBLAS directly (cuBLAS is column-major: a row-major product C = A B is
 * the column-major C^T = B^T A^T); any other view (steps in both axes,
 * negative or zero strides) is packed into the workspace by a strided-copy
 * kernel first, and such an output is computed in the workspace and copied
 * out. A right operand that is the same matrix in every batch folds the
 * batch into the rows of A and C (one taller GEMM). The batch axes that
 * remain collapse, where they can, into one axis of uniform strides, run by
 * cublas<t>gemmStridedBatched; otherwise each batch is one cublas<t>gemm.
 * k = 0 fills the output with zeros.
 *
 * f32 products keep f32 accuracy (no TF32) unless the plugin option
 * allow_tf32 says yes. f16 and bf16 products go to cublasGemmEx /
 * cublasGemmStridedBatchedEx with 16-bit operands and output and
 * CUBLAS_COMPUTE_32F: tensor cores multiply, sums are f32 (reduced
 * precision reductions disallowed), each result is rounded once. GPUs
 * older than compute capability 8.0 have no bf16 tensor cores: there a
 * bf16 product is planned with every operand packed (the shared planner's
 * tpc_mm_plan_make_packed), A and B read into f32 in the workspace, C
 * computed there by the f32 GEMM and rounded once as it is copied out.
 */
#include "ops.h"

#include <cublas_v2.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../common/geometry.h"
#include "../common/matmul_plan.h"

/* What the shared planner checks: cuBLAS indexes with int, and a matrix
 * leaves 256 bytes of room below that. */
static const tpc_mm_limits mm_limits = {"cuBLAS", INT_MAX, 256};

/* The plan (matmul_plan.h) and what the device adds to it. */
typedef struct mm_impl {
  tpc_mm_plan plan;
  /* bf16 below compute capability 8.0: every operand packed into f32
   * (widen), an f32 GEMM, C rounded once on its way out (narrow). */
  int wide;
  cudaKernel_t pack, fill, widen, narrow;
} mm_impl;

/* Whether MATMUL of dtype runs wide on dev (mm_impl.wide). */
static int wide_on(const tyto_plugin_device *dev, uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_BF16 && dev->cc_major < 8;
}

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MATMUL;
}

int tcu_blas_math(const tyto_plugin_device *dev, uint32_t dtype) {
  if (tcu_is16(dtype))
    return CUBLAS_DEFAULT_MATH |
           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  return dev->state->allow_tf32 && dtype == TYTO_PLUGIN_DTYPE_F32
             ? CUBLAS_TF32_TENSOR_OP_MATH
             : CUBLAS_DEFAULT_MATH;
}

/* Checks the descriptor and plans it into *p (kernels not built). */
static tyto_plugin_error *plan_make(tyto_plugin_device *dev, const tcu_desc *d,
                                    tpc_mm_plan *p) {
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  char why[1024];
  int code =
      wide_on(dev, d->dtype)
          ? tpc_mm_plan_make_packed(&a, sizeof(float), &mm_limits, p, why,
                                    sizeof why)
          : tpc_mm_plan_make(&a, d->elem, &mm_limits, p, why, sizeof why);
  if (code != 0)
    return TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  tpc_mm_plan *p = malloc(sizeof *p);
  if (p == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "matmul: out of host memory");
  tyto_plugin_error *e = plan_make(dev, d, p);
  free(p);
  return e;
}

/* Strided copy between two layouts of one shape, the same into and out
 * of T (wide), and a fill with zeros. */
static const char mm_source[] =
    "extern \"C\" __global__ void tyto_mm_pack(const S *x, tcu_dims xd, S *y,\n"
    "                                          tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = x[tyto_offset(i, xd)];\n"
    "}\n"
    "extern \"C\" __global__ void tyto_mm_widen(const S *x, tcu_dims xd,\n"
    "                                           T *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = LD(x[tyto_offset(i, xd)]);\n"
    "}\n"
    "extern \"C\" __global__ void tyto_mm_narrow(const T *x, tcu_dims xd,\n"
    "                                            S *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = ST(x[tyto_offset(i, xd)]);\n"
    "}\n"
    "extern \"C\" __global__ void tyto_mm_zero(S *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = (S)0;\n"
    "}\n";

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  mm_impl *im = calloc(1, sizeof *im);
  if (im == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "prepare: out of host memory");
  k->impl = im;
  tyto_plugin_error *e = plan_make(dev, &k->desc, &im->plan);
  if (e != NULL)
    return e;
  im->wide = wide_on(dev, k->desc.dtype);
  k->workspace_bytes =
      (uint64_t)im->plan.ws_elems * (im->wide ? sizeof(float) : k->desc.elem);
  if (k->desc.out[0].n == 0)
    return NULL;
  const uint32_t dt = k->desc.dtype;
  e = tcu_function(dev, dt, mm_source, "tyto_mm_pack", &im->pack);
  if (e == NULL)
    e = tcu_function(dev, dt, mm_source, "tyto_mm_zero", &im->fill);
  if (e == NULL && im->wide)
    e = tcu_function(dev, dt, mm_source, "tyto_mm_widen", &im->widen);
  if (e == NULL && im->wide)
    e = tcu_function(dev, dt, mm_source, "tyto_mm_narrow", &im->narrow);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* Dims (slowest first, as tpc_mm_pack_dims gives them) as a tcu_dims. */
static tcu_dims dims_rev(const int64_t *shape, const int64_t *str, uint32_t r) {
  tcu_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < 8; i++)
    d.shape[i] = 1;
  for (uint32_t i = 0; i < r; i++) {
    d.shape[i] = shape[r - 1 - i];
    d.str[i] = str[r - 1 - i];
  }
  d.rank = (int)r;
  return d;
}

/* Copies operand o between its bound layout (base) and its packed region
 * of the workspace: in (to_ws) or out. */
static tyto_plugin_error *pack(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const mm_impl *im, const tpc_mm_opnd *o,
                               void *base, void *ws, size_t elem, int to_ws) {
  int64_t shape[TPC_MM_MAXR + 2], str[TPC_MM_MAXR + 2], cstr[TPC_MM_MAXR + 2];
  uint32_t r = tpc_mm_pack_dims(&im->plan, o, shape, str);
  tpc_mm_compact(shape, r, cstr);
  int64_t n = 1;
  for (uint32_t i = 0; i < r; i++)
    n *= shape[i];
  tcu_dims bound = dims_rev(shape, str, r), packed = dims_rev(shape, cstr, r);
  void *region = (char *)ws + o->ws_off * (int64_t)elem;
  void *src = to_ws ? base : region, *dst = to_ws ? region : base;
  tcu_dims *sd = to_ws ? &bound : &packed, *dd = to_ws ? &packed : &bound;
  void *params[] = {&src, sd, &dst, dd, &n};
  cudaKernel_t fn = !im->wide ? im->pack : to_ws ? im->widen : im->narrow;
  return tcu_run(dev, s, fn, (dim3){tcu_blocks(dev, n), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, params, "matmul packing kernel");
}

static const char *status_name(cublasStatus_t st) {
  const char *s = cublasGetStatusString(st);
  return s != NULL ? s : "unknown status";
}

/* cuBLAS's name of a 16-bit dtype. */
static cudaDataType_t data_type(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The cuBLAS routine launch() calls for dtype, for messages. */
static const char *gemm_name(uint32_t dtype, int batched) {
  if (tcu_is16(dtype))
    return batched ? "cublasGemmStridedBatchedEx" : "cublasGemmEx";
  if (dtype == TYTO_PLUGIN_DTYPE_F64)
    return batched ? "cublasDgemmStridedBatched" : "cublasDgemm";
  return batched ? "cublasSgemmStridedBatched" : "cublasSgemm";
}

/* One GEMM (or a strided batch of `count`) of operands at a, b, c of
 * dtype. f16 and bf16 multiply on tensor cores, accumulate in f32 and
 * round each result once (CUBLAS_COMPUTE_32F). */
static cublasStatus_t gemm(cublasHandle_t h, const tpc_mm_plan *p,
                           uint32_t dtype, const void *a, const void *b,
                           void *c, int64_t count, const int64_t *bstr) {
  const tpc_mm_opnd *A = &p->o[0], *B = &p->o[1], *C = &p->o[2];
  /* Row-major C = A B is column-major C^T = B^T A^T; a column-major C
   * (swap) is C = A B in cuBLAS's own terms. */
  const void *x = p->swap ? a : b, *y = p->swap ? b : a;
  const tpc_mm_opnd *X = p->swap ? A : B, *Y = p->swap ? B : A;
  int rows = (int)(p->swap ? p->m : p->n), cols = (int)(p->swap ? p->n : p->m);
  cublasOperation_t ox = (X->trans != p->swap) ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t oy = (Y->trans != p->swap) ? CUBLAS_OP_T : CUBLAS_OP_N;
  long long sx = p->swap ? bstr[0] : bstr[1], sy = p->swap ? bstr[1] : bstr[0];
  int ldx = (int)X->ld, ldy = (int)Y->ld, ldc = (int)C->ld, kk = (int)p->k;
  if (tcu_is16(dtype)) {
    const float one = 1, zero = 0;
    const cudaDataType_t t = data_type(dtype);
    if (count <= 1)
      return cublasGemmEx(h, ox, oy, rows, cols, kk, &one, x, t, ldx, y, t, ldy,
                          &zero, c, t, ldc, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    return cublasGemmStridedBatchedEx(
        h, ox, oy, rows, cols, kk, &one, x, t, ldx, sx, y, t, ldy, sy, &zero, c,
        t, ldc, bstr[2], (int)count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  if (dtype == TYTO_PLUGIN_DTYPE_F64) {
    const double one = 1, zero = 0;
    if (count <= 1)
      return cublasDgemm(h, ox, oy, rows, cols, kk, &one, x, ldx, y, ldy, &zero,
                         c, ldc);
    return cublasDgemmStridedBatched(h, ox, oy, rows, cols, kk, &one, x, ldx,
                                     sx, y, ldy, sy, &zero, c, ldc, bstr[2],
                                     (int)count);
  }
  const float one = 1, zero = 0;
  if (count <= 1)
    return cublasSgemm(h, ox, oy, rows, cols, kk, &one, x, ldx, y, ldy, &zero,
                       c, ldc);
  return cublasSgemmStridedBatched(h, ox, oy, rows, cols, kk, &one, x, ldx, sx,
                                   y, ldy, sy, &zero, c, ldc, bstr[2],
                                   (int)count);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const mm_impl *im = k->impl;
  const tpc_mm_plan *p = &im->plan;
  /* The plan's elements: f32 when wide, else the dtype's. */
  const size_t elem = im->wide ? sizeof(float) : k->desc.elem;
  tyto_plugin_error *e = NULL;
  void *base[3] = {in[0].ptr, in[1].ptr, out[0].ptr};
  if (p->k == 0) {
    tcu_dims yd = tcu_dims_of(&k->desc.out[0].l);
    int64_t n = k->desc.out[0].n;
    void *params[] = {&base[2], &yd, &n};
    return tcu_run(dev, s, im->fill, (dim3){tcu_blocks(dev, n), 1, 1},
                   (dim3){TCU_BLOCK, 1, 1}, 0, params, "matmul zero fill");
  }
  /* Where each operand's matrices start as cuBLAS reads them. */
  char *at[3];
  for (int i = 0; i < 3 && e == NULL; i++) {
    const tpc_mm_opnd *o = &p->o[i];
    if (o->mode == TPC_MM_PACK) {
      at[i] = (char *)ws->ptr + o->ws_off * (int64_t)elem;
      if (i < 2)
        e = pack(dev, s, im, o, base[i], ws->ptr, elem, 1);
    } else {
      at[i] = (char *)base[i];
    }
    at[i] += o->shift * (int64_t)elem;
  }
  if (e != NULL)
    return e;
  pthread_mutex_lock(&dev->lib_lock);
  void *hv = NULL;
  e = tcu_cublas(dev, &hv);
  cublasHandle_t h = hv;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (e == NULL) {
    st = cublasSetStream(h, s->stream);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasSetMathMode(
          h, im->wide ? CUBLAS_DEFAULT_MATH
                      : (cublasMath_t)tcu_blas_math(dev, k->desc.dtype));
  }
  const uint32_t dt = im->wide ? TYTO_PLUGIN_DTYPE_F32 : k->desc.dtype;
  if (e == NULL && st == CUBLAS_STATUS_SUCCESS) {
    if (p->call != TPC_MM_LIST) {
      int64_t count = p->call == TPC_MM_STRIDED ? p->gshape[0] : 1;
      int64_t bstr[3] = {0, 0, 0};
      for (int i = 0; i < 3 && p->call == TPC_MM_STRIDED; i++)
        bstr[i] = p->o[i].g[0];
      st = gemm(h, p, dt, at[0], at[1], at[2], count, bstr);
    } else {
      /* One GEMM per batch, walking the collapsed grid. */
      int64_t idx[TPC_MM_MAXR] = {0}, total = 1;
      for (uint32_t ax = 0; ax < p->ng; ax++)
        total *= p->gshape[ax];
      const int64_t none[3] = {0, 0, 0};
      for (int64_t b = 0; b < total && st == CUBLAS_STATUS_SUCCESS; b++) {
        char *q[3];
        for (int i = 0; i < 3; i++) {
          int64_t off = 0;
          for (uint32_t ax = 0; ax < p->ng; ax++)
            off += idx[ax] * p->o[i].g[ax];
          q[i] = at[i] + off * (int64_t)elem;
        }
        st = gemm(h, p, dt, q[0], q[1], q[2], 1, none);
        for (uint32_t ax = p->ng; ax-- > 0;) {
          if (++idx[ax] < p->gshape[ax])
            break;
          idx[ax] = 0;
        }
      }
    }
  }
  pthread_mutex_unlock(&dev->lib_lock);
  if (e != NULL)
    return e;
  if (st != CUBLAS_STATUS_SUCCESS)
    return tcu_lib_error(
        dev,
        st == CUBLAS_STATUS_ALLOC_FAILED ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                         : TYTO_PLUGIN_ERR_INTERNAL,
        "matmul", gemm_name(dt, p->call == TPC_MM_STRIDED), status_name(st));
  if (p->o[2].mode == TPC_MM_PACK)
    e = pack(dev, s, im, &p->o[2], base[2], ws->ptr, elem, 0);
  return e;
}

const tcu_family tcu_family_blas = {"blas",  owns,   check,
                                    prepare, launch, release};
