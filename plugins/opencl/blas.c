/*
 * MATMUL through CLBlast: [..., m, k] x [..., k, n] -> [..., m, n], batch
 * axes broadcast by NumPy rules, optional transposes of either input's last
 * two axes (iattrs[0], iattrs[1]).
 *
 * Planned once at prepare, as the CPU plugin's matmul.c plans: every matrix
 * (A, B and the output C) is a 2-D view with two strides. A view that is
 * row-major or column-major with a unit stride goes to CLBlast directly (a
 * column-major input as a transposed operand, a column-major C by computing
 * C^T = B^T A^T); any other view (steps in both axes, negative or zero
 * strides) is packed into the workspace by a strided-copy kernel first, and
 * such an output is computed in the workspace and copied out. A right
 * operand that is the same matrix in every batch folds the batch into the
 * rows of A and C (one taller GEMM). The batch axes that remain collapse,
 * where they can, into one axis of uniform strides, run by
 * CLBlastXgemmStridedBatched; otherwise CLBlastXgemmBatched gets one offset
 * per batch and operand. k = 0 fills the output with zeros.
 *
 * CLBlast's kernels index with 32-bit ints: a call whose operand reaches
 * past element INT_MAX of its buffer gets a sub-buffer that starts near the
 * operand, and a batch whose operands span more than that is split into
 * several calls.
 *
 * On PoCL's CPU devices, which CLBlast's tuning database lacks, GEMM
 * parameters measured there are set once per device (tune_pocl).
 *
 * f16 and bf16: every operand is packed into the workspace as f32
 * (tpc_mm_plan_make_packed), SGEMM accumulates in f32 and the result is
 * rounded once as it is unpacked (widen_source).
 */
#include "ops.h"

#include <clblast_c.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/geometry.h"
#include "../common/matmul_plan.h"
#include "errors.h"

/* The highest element index CLBlast's kernels address (they index with
 * int). Builds may lower it to exercise the sub-buffer and split paths. */
#ifndef MM_INDEX_MAX
#define MM_INDEX_MAX ((int64_t)INT_MAX)
#endif

/* f16 and bf16: every operand is packed into the workspace as f32 (A and B
 * read exactly), CLBlast's SGEMM accumulates in f32, and C is rounded once
 * as it is copied out. The kernels take tyto_copy's arguments. */
static const char widen_source[] =
    "__kernel void tyto_mm_widen(__global const TS *in, long in_base,\n"
    "                            long8 istr, __global T *out, long out_base,\n"
    "                            long8 ostr, long8 shape, int rank, long n) {\n"
    "  TYTO_FOR(i, n)\n"
    "    out[out_base + tyto_offset(i, shape, ostr, rank)] =\n"
    "        TLD(in, in_base + tyto_offset(i, shape, istr, rank));\n"
    "}\n"
    "__kernel void tyto_mm_narrow(__global const T *in, long in_base,\n"
    "                             long8 istr, __global TS *out,\n"
    "                             long out_base, long8 ostr, long8 shape,\n"
    "                             int rank, long n) {\n"
    "  TYTO_FOR(i, n)\n"
    "    TST(out, out_base + tyto_offset(i, shape, ostr, rank),\n"
    "        in[in_base + tyto_offset(i, shape, istr, rank)]);\n"
    "}\n";

/* The plan (matmul_plan.h) and what the device adds to it: the packing
 * kernel (copy), the unpacking one (unpack: copy, or the 16-bit rounding
 * one) and the k = 0 fill. */
typedef struct mm_impl {
  tpc_mm_plan plan;
  cl_kernel copy, unpack, fill;
  ocl_gemm_kernels own; /* tyto's GEMM (gemm.c), where the device uses it */
} mm_impl;

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MATMUL;
}

/* Checks the descriptor and plans it into *p (kernels not built). */
static tyto_plugin_error *plan_make(tyto_plugin_device *dev, const ocl_desc *d,
                                    tpc_mm_plan *p) {
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  const tpc_mm_limits lim = {"CLBlast", MM_INDEX_MAX, dev->info->alignment};
  char why[1024];
  int code =
      ocl_is16(d->dtype)
          ? tpc_mm_plan_make_packed(&a, d->celem, &lim, p, why, sizeof why)
          : tpc_mm_plan_make(&a, d->elem, &lim, p, why, sizeof why);
  if (code != 0)
    return ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why);
  return NULL;
}

/* Offset of collapsed batch b of operand i from its base. */
static int64_t rel(const tpc_mm_plan *p, int i, int64_t b) {
  const tpc_mm_opnd *o = &p->o[i];
  int64_t off = o->shift;
  for (uint32_t ax = p->ng; ax-- > 0;) {
    off += (b % p->gshape[ax]) * o->g[ax];
    b /= p->gshape[ax];
  }
  return off;
}

/* The product as the GEMM library computes it, row-major: A and B, or
 * B^T and A^T when C is column-major (the plan's swap), with the operands'
 * buffers mem, the element index of each base in them adj, offsets at
 * collapsed batch b0, and the uniform batch strides of a strided plan.
 * mem and adj may be NULL (the shape alone). beta 0, batch 1: the caller
 * sets the count. */
static ocl_gemm lib_gemm(const tpc_mm_plan *p, const cl_mem *mem,
                         const int64_t *adj, int64_t b0, size_t elem) {
  int ia = p->swap ? 1 : 0, ib = 1 - ia;
  const tpc_mm_opnd *oa = &p->o[ia], *ob = &p->o[ib], *oc = &p->o[2];
  int strided = p->call == TPC_MM_STRIDED;
  int64_t off[3] = {0, 0, 0};
  for (int i = 0; i < 3 && adj != NULL; i++)
    off[i] = adj[i] + rel(p, i, b0);
  return (ocl_gemm){
      .ta = oa->trans != p->swap,
      .tb = ob->trans != p->swap,
      .m = p->swap ? p->n : p->m,
      .n = p->swap ? p->m : p->n,
      .k = p->k,
      .a = mem != NULL ? mem[ia] : NULL,
      .b = mem != NULL ? mem[ib] : NULL,
      .c = mem != NULL ? mem[2] : NULL,
      .a_off = off[ia],
      .lda = oa->ld,
      .a_str = strided ? oa->g[0] : 0,
      .b_off = off[ib],
      .ldb = ob->ld,
      .b_str = strided ? ob->g[0] : 0,
      .c_off = off[2],
      .ldc = oc->ld,
      .c_str = strided ? oc->g[0] : 0,
      .beta = 0.0,
      .batch = 1,
      .elem = elem,
  };
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  tpc_mm_plan *p = malloc(sizeof *p);
  if (p == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "matmul: out of host memory");
  tyto_plugin_error *e = plan_make(dev, d, p);
  free(p);
  return e;
}

/* CLBlast's tuning database has no entry for PoCL's CPU devices, and its
 * defaults run GEMM there at a few GFLOP/s (the direct kernel up to 512^3,
 * then an untuned indirect one). These Xgemm parameters, measured with PoCL
 * 3.1 on a 2-core Skylake-AVX512 and taken for both precisions, run 256^3 to
 * 1024^3 GEMMs 3 to 8 times faster, with the indirect kernel from 224^3 up.
 * Set once per device and precision, before the device's first GEMM (CLBlast
 * keys its compiled programs by these values, so a later change would also
 * take effect). */
static void tune_pocl(tyto_plugin_device *dev, uint32_t dtype) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static struct {
    cl_device_id id;
    uint32_t dtype;
  } done[16];
  static size_t n_done;
  static const char *xgemm_names[] = {
      "GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB",
      "NDIMC", "NWG",  "SA",  "SB",  "STRM",  "STRN",  "VWM", "VWN"};
  static const size_t xgemm_values[] = {0, 1,   16, 2, 8, 8, 64, 8,
                                        8, 128, 1,  1, 0, 0, 1,  8};
  static const char *routine_names[] = {"XGEMM_MIN_INDIRECT_SIZE"};
  static const size_t routine_values[] = {224};
  const char *platform = dev->info->platform_name;
  cl_device_type type = 0;
  if (platform == NULL ||
      strstr(platform, "Portable Computing Language") == NULL ||
      clGetDeviceInfo(dev->info->id, CL_DEVICE_TYPE, sizeof type, &type,
                      NULL) != CL_SUCCESS ||
      !(type & CL_DEVICE_TYPE_CPU))
    return;
  pthread_mutex_lock(&lock);
  int seen = 0;
  for (size_t i = 0; i < n_done && !seen; i++)
    seen = done[i].id == dev->info->id && done[i].dtype == dtype;
  if (!seen && n_done < sizeof done / sizeof done[0]) {
    done[n_done].id = dev->info->id;
    done[n_done++].dtype = dtype;
    CLBlastPrecision prec = dtype == TYTO_PLUGIN_DTYPE_F64
                                ? CLBlastPrecisionDouble
                                : CLBlastPrecisionSingle;
    CLBlastStatusCode a = CLBlastOverrideParameters(
        dev->info->id, "Xgemm", prec, 16, xgemm_names, xgemm_values);
    CLBlastStatusCode b = CLBlastOverrideParameters(
        dev->info->id, "GemmRoutine", prec, 1, routine_names, routine_values);
    const tyto_plugin_host *host = OCL_HOST(dev);
    if (a != CLBlastSuccess || b != CLBlastSuccess)
      host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
                "matmul: CLBlastOverrideParameters for PoCL on \"%s\" (%s) "
                "returned %d and %d: CLBlast keeps its default GEMM "
                "parameters",
                dev->info->name, ocl_dtype_name(dtype), (int)a, (int)b);
    else
      host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG,
                "matmul: CLBlast GEMM parameters for PoCL set on \"%s\" (%s)",
                dev->info->name, ocl_dtype_name(dtype));
  }
  pthread_mutex_unlock(&lock);
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  mm_impl *im = calloc(1, sizeof *im);
  if (im == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = im;
  const tpc_mm_plan *p = &im->plan;
  tyto_plugin_error *e = plan_make(dev, &k->desc, &im->plan);
  if (e != NULL)
    return e;
  const ocl_desc *d = &k->desc;
  k->workspace_bytes = (uint64_t)p->ws_elems * d->celem;
  if (d->out[0].n == 0)
    return NULL;
  const int h = ocl_is16(d->dtype);
  if (p->k == 0)
    return ocl_kernel_new(dev, h ? OCL_DTYPE_RAW16 : d->dtype, ocl_copy_source,
                          NULL, "tyto_fill", &im->fill);
  /* A list of batch offsets (strides that do not collapse) stays with
   * CLBlast's batched call. */
  if (dev->info->gemm_own && ocl_gemm_own_dtype(d->cdtype) &&
      p->call != TPC_MM_LIST) {
    const ocl_gemm shape = lib_gemm(p, NULL, NULL, 0, d->celem);
    e = ocl_gemm_prepare(dev, d->cdtype, &shape, &im->own);
    if (e != NULL)
      return e;
  } else {
    tune_pocl(dev, d->cdtype);
  }
  if (p->ws_elems == 0)
    return NULL;
  if (!h) {
    e = ocl_kernel_new(dev, d->dtype, ocl_copy_source, NULL, "tyto_copy",
                       &im->copy);
    if (e == NULL && (im->unpack = im->copy) != NULL)
      clRetainKernel(im->unpack);
    return e;
  }
  e = ocl_kernel_new(dev, d->dtype, widen_source, NULL, "tyto_mm_widen",
                     &im->copy);
  if (e == NULL)
    e = ocl_kernel_new(dev, d->dtype, widen_source, NULL, "tyto_mm_narrow",
                       &im->unpack);
  return e;
}

static void release(tyto_plugin_kernel *k) {
  mm_impl *im = k->impl;
  if (im == NULL)
    return;
  if (im->copy != NULL)
    clReleaseKernel(im->copy);
  if (im->unpack != NULL)
    clReleaseKernel(im->unpack);
  if (im->fill != NULL)
    clReleaseKernel(im->fill);
  ocl_gemm_release(&im->own);
  free(im);
  k->impl = NULL;
}

/* ---- launch -------------------------------------------------------------- */

/* tyto_copy over `shape` (rank dims, slowest first) from src to dst. */
static tyto_plugin_error *
run_copy(tyto_plugin_device *dev, tyto_plugin_stream *s, cl_kernel kernel,
         cl_mem src, int64_t sbase, const int64_t *sstr, cl_mem dst,
         int64_t dbase, const int64_t *dstr, const int64_t *shape,
         uint32_t rank, const char *what) {
  cl_long8 sh = ocl_long8_rev(shape, rank, 1),
           is = ocl_long8_rev(sstr, rank, 0), os = ocl_long8_rev(dstr, rank, 0);
  cl_long ib = sbase, ob = dbase, n = 1;
  cl_int r = (cl_int)rank;
  for (uint32_t i = 0; i < rank; i++)
    n *= shape[i];
  const ocl_karg args[] = {OCL_KARG(src), OCL_KARG(ib), OCL_KARG(is),
                           OCL_KARG(dst), OCL_KARG(ob), OCL_KARG(os),
                           OCL_KARG(sh),  OCL_KARG(r),  OCL_KARG(n)};
  size_t global = ocl_global_size(n);
  return ocl_run(dev, s, kernel, args, 9, 1, &global, what);
}

/* Zeros over the output's layout (k = 0). */
static tyto_plugin_error *run_zeros(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    const tyto_plugin_kernel *k,
                                    const mm_impl *im, const ocl_arg *out) {
  cl_long8 shape, str;
  cl_int rank;
  ocl_dims(&k->desc.out[0].l, &shape, &str, &rank);
  cl_long base = out->origin, n = k->desc.out[0].n;
  /* Zeros in the storage (16-bit ones as ushort: the fill moves bits). */
  union {
    cl_float f;
    cl_double d;
    cl_ushort h;
  } zero;
  memset(&zero, 0, sizeof zero);
  size_t elem = k->desc.elem;
  const ocl_karg args[] = {OCL_KARG(out->mem), OCL_KARG(base), OCL_KARG(str),
                           OCL_KARG(shape),    OCL_KARG(rank), OCL_KARG(n),
                           {elem, &zero}};
  size_t global = ocl_global_size(n);
  return ocl_run(dev, s, im->fill, args, 7, 1, &global,
                 "matmul zeros (k = 0) kernel");
}

static const struct {
  int code;
  const char *name, *meaning;
  tyto_plugin_code tc;
} clblast_codes[] = {
#define C(n, m, t)                                                             \
  { CLBlast##n, "CLBlast" #n, m, TYTO_PLUGIN_ERR_##t }
    C(NotImplemented, "not implemented by CLBlast", UNSUPPORTED),
    C(InvalidMatrixA, "matrix A is not a valid buffer", INTERNAL),
    C(InvalidMatrixB, "matrix B is not a valid buffer", INTERNAL),
    C(InvalidMatrixC, "matrix C is not a valid buffer", INTERNAL),
    C(InvalidDimension, "m, n and k must be above zero", INTERNAL),
    C(InvalidLeadDimA, "A's leading dimension is too small", INTERNAL),
    C(InvalidLeadDimB, "B's leading dimension is too small", INTERNAL),
    C(InvalidLeadDimC, "C's leading dimension is too small", INTERNAL),
    C(InsufficientMemoryA, "A's buffer is too small", INTERNAL),
    C(InsufficientMemoryB, "B's buffer is too small", INTERNAL),
    C(InsufficientMemoryC, "C's buffer is too small", INTERNAL),
    C(InsufficientMemoryTemp, "the temporary buffer is too small", INTERNAL),
    C(InvalidBatchCount, "the batch count must be positive", INTERNAL),
    C(InvalidLocalMemUsage, "the device has too little local memory",
      UNSUPPORTED),
    C(NoDoublePrecision, "the device has no double precision", UNSUPPORTED),
    C(DatabaseError, "no entry for the device in CLBlast's database", DEVICE),
    C(UnknownError, "an unspecified error", DEVICE),
    C(UnexpectedError, "an unexpected exception inside CLBlast", DEVICE),
#undef C
};

/* The error of a failed CLBlast call: its codes above -1000 are OpenCL's. */
static tyto_plugin_error *clblast_error(tyto_plugin_device *dev,
                                        const tyto_plugin_kernel *k,
                                        const char *call,
                                        CLBlastStatusCode code) {
  const tpc_mm_plan *p = &((const mm_impl *)k->impl)->plan;
  const char *dt = ocl_dtype_name(k->desc.dtype), *name = dev->info->name;
  if ((int)code > -1000)
    return ocl_error_cl(OCL_HOST(dev), call, (cl_int)code,
                        "matmul %s (%s) on \"%s\"", p->what, dt, name);
  const char *cname = "an unknown CLBlast status", *meaning = "";
  tyto_plugin_code tc = TYTO_PLUGIN_ERR_DEVICE;
  for (size_t i = 0; i < sizeof clblast_codes / sizeof clblast_codes[0]; i++)
    if (clblast_codes[i].code == (int)code) {
      cname = clblast_codes[i].name;
      meaning = clblast_codes[i].meaning;
      tc = clblast_codes[i].tc;
    }
  return ocl_error(OCL_HOST(dev), tc,
                   "%s failed with %s (%d%s%s): matmul %s (%s) on \"%s\"", call,
                   cname, (int)code, meaning[0] ? ", " : "", meaning, p->what,
                   dt, name);
}

/* One CLBlast call over collapsed batches [b0, b0 + count): mem and adj are
 * each operand's buffer and the element index of its base in it. */
static tyto_plugin_error *gemm_call(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    const tyto_plugin_kernel *k,
                                    const cl_mem *mem, const int64_t *adj,
                                    int64_t b0, int64_t count) {
  const tpc_mm_plan *p = &((const mm_impl *)k->impl)->plan;
  int dbl = k->desc.celem == 8;
  const ocl_gemm g = lib_gemm(p, mem, adj, b0, k->desc.celem);
  CLBlastTranspose ta = g.ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                   tb = g.tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  size_t m = (size_t)g.m, n = (size_t)g.n, kk = (size_t)g.k;
  size_t lda = (size_t)g.lda, ldb = (size_t)g.ldb, ldc = (size_t)g.ldc;
  size_t offa = (size_t)g.a_off, offb = (size_t)g.b_off, offc = (size_t)g.c_off;
  cl_mem ma = g.a, mb = g.b, mc = g.c;
  int ia = p->swap ? 1 : 0, ib = 1 - ia;
  const CLBlastLayout L = CLBlastLayoutRowMajor;
  tyto_plugin_error *e = ocl_stream_reserve(s);
  if (e != NULL)
    return e;
  cl_event ev = NULL;
  CLBlastStatusCode st;
  const char *call;
  if (count == 1 || p->call == TPC_MM_SINGLE) {
    call = dbl ? "CLBlastDgemm" : "CLBlastSgemm";
    st = dbl ? CLBlastDgemm(L, ta, tb, m, n, kk, 1.0, ma, offa, lda, mb, offb,
                            ldb, 0.0, mc, offc, ldc, &s->queue, &ev)
             : CLBlastSgemm(L, ta, tb, m, n, kk, 1.0f, ma, offa, lda, mb, offb,
                            ldb, 0.0f, mc, offc, ldc, &s->queue, &ev);
  } else if (p->call == TPC_MM_STRIDED) {
    size_t sa = (size_t)g.a_str, sb = (size_t)g.b_str, sc = (size_t)g.c_str;
    call = dbl ? "CLBlastDgemmStridedBatched" : "CLBlastSgemmStridedBatched";
    st = dbl ? CLBlastDgemmStridedBatched(
                   L, ta, tb, m, n, kk, 1.0, ma, offa, lda, sa, mb, offb, ldb,
                   sb, 0.0, mc, offc, ldc, sc, (size_t)count, &s->queue, &ev)
             : CLBlastSgemmStridedBatched(
                   L, ta, tb, m, n, kk, 1.0f, ma, offa, lda, sa, mb, offb, ldb,
                   sb, 0.0f, mc, offc, ldc, sc, (size_t)count, &s->queue, &ev);
  } else {
    /* Offsets of each batch, then the alphas (1) and betas (0). */
    size_t n_c = (size_t)count, esz = k->desc.celem;
    size_t *offs = malloc(n_c * (3 * sizeof *offs + 2 * esz));
    if (offs == NULL)
      return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                       "matmul %s: out of host memory for %lld batch offsets",
                       p->what, (long long)count);
    for (size_t b = 0; b < n_c; b++)
      for (int i = 0; i < 3; i++)
        offs[(size_t)i * n_c + b] =
            (size_t)(adj[i] + rel(p, i, b0 + (int64_t)b));
    const size_t *oa_ = offs + (size_t)ia * n_c, *ob_ = offs + (size_t)ib * n_c,
                 *oc_ = offs + 2 * n_c;
    void *ab = offs + 3 * n_c;
    call = dbl ? "CLBlastDgemmBatched" : "CLBlastSgemmBatched";
    if (dbl) {
      double *al = ab, *be = al + n_c;
      for (size_t b = 0; b < n_c; b++) {
        al[b] = 1.0;
        be[b] = 0.0;
      }
      st = CLBlastDgemmBatched(L, ta, tb, m, n, kk, al, ma, oa_, lda, mb, ob_,
                               ldb, be, mc, oc_, ldc, n_c, &s->queue, &ev);
    } else {
      float *al = ab, *be = al + n_c;
      for (size_t b = 0; b < n_c; b++) {
        al[b] = 1.0f;
        be[b] = 0.0f;
      }
      st = CLBlastSgemmBatched(L, ta, tb, m, n, kk, al, ma, oa_, lda, mb, ob_,
                               ldb, be, mc, oc_, ldc, n_c, &s->queue, &ev);
    }
    free(offs);
  }
  if (st != CLBlastSuccess) {
    if (ev != NULL)
      clReleaseEvent(ev);
    return clblast_error(dev, k, call, st);
  }
  ocl_stream_track(s, ev, "matmul (CLBlast GEMM)");
  return NULL;
}

/* Whether an operand reaching [base + lo, base + hi] can be handed to
 * CLBlast: directly, or through a sub-buffer starting at an aligned element
 * at most align_e - 1 before base + lo. */
static int reachable(int64_t base, int64_t lo, int64_t hi, int64_t align_e) {
  return base + hi <= MM_INDEX_MAX || hi - lo <= MM_INDEX_MAX - align_e;
}

/* The GEMMs: one call when every operand is reachable over all batches,
 * else calls over runs of batches that are. */
static tyto_plugin_error *gemm_all(tyto_plugin_device *dev,
                                   tyto_plugin_stream *s,
                                   const tyto_plugin_kernel *k,
                                   const cl_mem *mem, const int64_t *base) {
  const tpc_mm_plan *p = &((const mm_impl *)k->impl)->plan;
  /* 16-bit operands are all in the workspace, in f32. */
  size_t elem = k->desc.celem;
  int64_t align_e = (int64_t)(dev->info->alignment / elem);
  int whole = 1;
  for (int i = 0; i < 3; i++)
    whole &= reachable(base[i], p->o[i].lo, p->o[i].hi, align_e);
  tyto_plugin_error *e = NULL;
  for (int64_t b0 = 0, b1; b0 < p->batches && e == NULL; b0 = b1) {
    int64_t lo[3], hi[3];
    if (whole) {
      b1 = p->batches;
      for (int i = 0; i < 3; i++) {
        lo[i] = p->o[i].lo;
        hi[i] = p->o[i].hi;
      }
    } else {
      for (int i = 0; i < 3; i++) {
        lo[i] = rel(p, i, b0);
        hi[i] = lo[i] + p->o[i].mhi;
      }
      for (b1 = b0 + 1; b1 < p->batches; b1++) {
        int64_t nlo[3], nhi[3];
        int ok = 1;
        for (int i = 0; i < 3 && ok; i++) {
          int64_t r = rel(p, i, b1);
          nlo[i] = r < lo[i] ? r : lo[i];
          nhi[i] = r + p->o[i].mhi > hi[i] ? r + p->o[i].mhi : hi[i];
          ok = reachable(base[i], nlo[i], nhi[i], align_e);
        }
        if (!ok)
          break;
        memcpy(lo, nlo, sizeof lo);
        memcpy(hi, nhi, sizeof hi);
      }
    }
    cl_mem use[3] = {mem[0], mem[1], mem[2]}, sub[3] = {NULL, NULL, NULL};
    int64_t adj[3] = {base[0], base[1], base[2]};
    for (int i = 0; i < 3 && e == NULL; i++) {
      if (base[i] + hi[i] <= MM_INDEX_MAX)
        continue;
      /* A sub-buffer from an aligned byte at or before the first element
       * to the last, so the indices CLBlast sees start near 0. */
      uint64_t align = dev->info->alignment;
      uint64_t first = (uint64_t)(base[i] + lo[i]) * elem / align * align;
      cl_buffer_region reg = {first,
                              (uint64_t)(base[i] + hi[i] + 1) * elem - first};
      cl_int err = CL_SUCCESS;
      sub[i] = clCreateSubBuffer(mem[i], 0, CL_BUFFER_CREATE_TYPE_REGION, &reg,
                                 &err);
      if (sub[i] == NULL || err != CL_SUCCESS) {
        sub[i] = NULL;
        e = ocl_error_cl(OCL_HOST(dev), "clCreateSubBuffer",
                         err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                         "matmul %s: a view of bytes %llu to %llu of operand "
                         "%d for CLBlast's 32-bit indices on \"%s\"",
                         p->what, (unsigned long long)first,
                         (unsigned long long)(first + reg.size), i,
                         dev->info->name);
        break;
      }
      use[i] = sub[i];
      adj[i] = base[i] - (int64_t)(first / elem);
    }
    if (e == NULL)
      e = gemm_call(dev, s, k, use, adj, b0, b1 - b0);
    /* Commands already enqueued keep their sub-buffers alive. */
    for (int i = 0; i < 3; i++)
      if (sub[i] != NULL)
        clReleaseMemObject(sub[i]);
  }
  return e;
}

/* The GEMMs by tyto's kernels (gemm.c): one call over every batch, as
 * CLBlast's would be (they index with 64-bit integers: nothing to split). */
static tyto_plugin_error *gemm_own(tyto_plugin_device *dev,
                                   tyto_plugin_stream *s,
                                   const tyto_plugin_kernel *k,
                                   const cl_mem *mem, const int64_t *base) {
  const mm_impl *im = k->impl;
  ocl_gemm g = lib_gemm(&im->plan, mem, base, 0, k->desc.celem);
  if (im->plan.call == TPC_MM_STRIDED)
    g.batch = im->plan.batches;
  return ocl_gemm_run(dev, s, &im->own, &g, "matmul (tyto GEMM)");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  const mm_impl *im = k->impl;
  const tpc_mm_plan *p = &im->plan;
  if (p->k == 0)
    return run_zeros(dev, s, k, im, out);
  cl_mem mem[3];
  int64_t base[3];
  int64_t shape[TPC_MM_MAXR + 2], str[TPC_MM_MAXR + 2], packed[TPC_MM_MAXR + 2];
  tyto_plugin_error *e = NULL;
  for (int i = 0; i < 3 && e == NULL; i++) {
    const tpc_mm_opnd *o = &p->o[i];
    const ocl_arg *a = i < 2 ? &in[i] : out;
    if (o->mode != TPC_MM_PACK) {
      mem[i] = a->mem;
      base[i] = a->origin;
      continue;
    }
    mem[i] = ws->mem;
    base[i] = ws->origin + o->ws_off;
    if (i == 2)
      continue;
    uint32_t rank = tpc_mm_pack_dims(p, o, shape, str);
    tpc_mm_compact(shape, rank, packed);
    e = run_copy(dev, s, im->copy, a->mem, a->origin, str, ws->mem, base[i],
                 packed, shape, rank, "matmul input packing kernel");
  }
  if (e == NULL)
    e = im->own.j != NULL ? gemm_own(dev, s, k, mem, base)
                          : gemm_all(dev, s, k, mem, base);
  if (e == NULL && p->o[2].mode == TPC_MM_PACK) {
    uint32_t rank = tpc_mm_pack_dims(p, &p->o[2], shape, str);
    tpc_mm_compact(shape, rank, packed);
    e = run_copy(dev, s, im->unpack, ws->mem, base[2], packed, out->mem,
                 out->origin, str, shape, rank,
                 "matmul output unpacking kernel");
  }
  return e;
}

const ocl_family ocl_family_blas = {"blas",  owns,   check,
                                    prepare, launch, release};
