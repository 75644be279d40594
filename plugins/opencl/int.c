/*
 * The integer dtypes i32 and i64 (ABI 1.6, sdk/docs/ops.md "Integer
 * dtypes"): which ops run on them (ocl_int_route, for kernels.c;
 * plugins/common/int_plan.c decides), and the family that runs the
 * elementwise ops, CAST to or from them and the reductions SUM, MAX_REDUCE
 * and MIN_REDUCE. COPY, FILL and PAD run in copyfill.c and index.c, ARGMAX
 * and ARGMIN into an integer output in reduce.c, GATHER, SCATTER_ADD and
 * ONE_HOT with integer indices or data in index.c; all build with T the
 * integer type (kernels.c's options).
 *
 * Arithmetic wraps modulo 2^32 or 2^64 as C's unsigned arithmetic does:
 * the kernels add, subtract, multiply and negate in TU, the unsigned type
 * of T's width (signed overflow is undefined in OpenCL C as in C).
 *
 * CAST: to an integer, convert_<int|long>_sat_rtz (truncated toward zero,
 * saturated, NaN 0: the OpenCL C spec's saturated conversions); from an
 * integer, convert_<float|double>_rte, and to f16 and bf16 through an f32
 * rounded to odd (tyto_i2f_odd, with integer operations only), from which
 * the 16-bit format's round to nearest even is the correct single
 * rounding (24 bits >= 11 + 2). i64 to i32 keeps the low 32 bits, i32 to
 * i64 sign-extends.
 *
 * The kernels are simple (one work-item per output element, grid-stride
 * loops, layouts of any strides through tyto_offset): integer tensors hold
 * indices, labels and counts, not the bulk of the work.
 */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/int_plan.h"
#include "errors.h"

/* ---- which ops run on integers ------------------------------------------ */

static void operands(const ocl_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

tyto_plugin_error *ocl_int_route(tyto_plugin_device *dev, const ocl_desc *d,
                                 const ocl_family **fam) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int own = 0, code = tpc_int_route(&a, &own, why, sizeof why);
  if (code != 0)
    return ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why);
  if (own)
    *fam = &ocl_family_int;
  return NULL;
}

const char *ocl_idx_option(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_I32   ? "-DTYTO_IDX=int"
         : dtype == TYTO_PLUGIN_DTYPE_I64 ? "-DTYTO_IDX=long"
                                          : "";
}

/* ---- kernels --------------------------------------------------------------
 */

/* Elementwise ops and reductions, one program per integer dtype. */
static const char int_source[] =
    "#define TI_MIN ((T)((TU)1 << (sizeof(T) * 8 - 1)))\n"
    "#define TI_MAX ((T)~((TU)1 << (sizeof(T) * 8 - 1)))\n"
    "inline T ti_op1(int op, T x) {\n"
    "  switch (op) {\n"
    "  case 16: return (T)((TU)0 - (TU)x);\n"
    "  case 17: return x < 0 ? (T)((TU)0 - (TU)x) : x;\n"
    "  case 18: return (T)((x > 0) - (x < 0));\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "inline T ti_op2(int op, T x, T y) {\n"
    "  switch (op) {\n"
    "  case 64: return (T)((TU)x + (TU)y);\n"
    "  case 65: return (T)((TU)x - (TU)y);\n"
    "  case 66: return (T)((TU)x * (TU)y);\n"
    "  case 69: return x > y ? x : y;\n"
    "  case 70: return x < y ? x : y;\n"
    "  case 72: return x == y ? 1 : 0;\n"
    "  case 73: return x != y ? 1 : 0;\n"
    "  case 74: return x < y ? 1 : 0;\n"
    "  case 75: return x <= y ? 1 : 0;\n"
    "  case 76: return x > y ? 1 : 0;\n"
    "  case 77: return x >= y ? 1 : 0;\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "/* Op `op` of arity 1 to 3 (WHERE) over n elements; an input the op\n"
    " * does not have is bound to x and never read. */\n"
    "__kernel void tyto_int_elt(int op, int arity,\n"
    "                           __global const T *x, long xb, long8 xs,\n"
    "                           __global const T *y, long yb, long8 ys,\n"
    "                           __global const T *z, long zb, long8 zs,\n"
    "                           __global T *out, long ob, long8 os,\n"
    "                           long8 shape, int rank, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    const T a = x[xb + tyto_offset(i, shape, xs, rank)];\n"
    "    T r;\n"
    "    if (arity == 1) {\n"
    "      r = ti_op1(op, a);\n"
    "    } else {\n"
    "      const T b = y[yb + tyto_offset(i, shape, ys, rank)];\n"
    "      if (arity == 2)\n"
    "        r = ti_op2(op, a, b);\n"
    "      else\n"
    "        r = a != 0 ? b : z[zb + tyto_offset(i, shape, zs, rank)];\n"
    "    }\n"
    "    out[ob + tyto_offset(i, shape, os, rank)] = r;\n"
    "  }\n"
    "}\n"
    "/* Output o (row-major over oshape, the input's shape with the reduced\n"
    " * axes 1) folds the count elements of rshape (the reduced axes'\n"
    " * extents, 1 elsewhere) at its place in x: SUM wraps; MAX_REDUCE and\n"
    " * MIN_REDUCE of no elements are the dtype's least and largest. */\n"
    "__kernel void tyto_int_reduce(int op, __global const T *x, long xb,\n"
    "                              long8 xs, __global T *y, long yb,\n"
    "                              long8 ys, long8 oshape, long8 rshape,\n"
    "                              int rank, long count, long nout) {\n"
    "  TYTO_FOR(o, nout) {\n"
    "    const long xo = xb + tyto_offset(o, oshape, xs, rank);\n"
    "    T a = op == 128 ? 0 : op == 130 ? TI_MIN : TI_MAX;\n"
    "    for (long r = 0; r < count; r++) {\n"
    "      const T v = x[xo + tyto_offset(r, rshape, xs, rank)];\n"
    "      a = op == 128   ? (T)((TU)a + (TU)v)\n"
    "          : op == 130 ? (v > a ? v : a)\n"
    "                      : (v < a ? v : a);\n"
    "    }\n"
    "    y[yb + tyto_offset(o, oshape, ys, rank)] = a;\n"
    "  }\n"
    "}\n";

/* The conversion helper of CAST from an integer to f16 or bf16. */
static const char i2f_odd_source[] =
    "/* x rounded to an f32 by round-to-odd (integer operations only). */\n"
    "inline float tyto_i2f_odd(long x) {\n"
    "  ulong a = x < 0 ? (ulong)0 - (ulong)x : (ulong)x;\n"
    "  if (a == 0UL)\n"
    "    return 0.0f;\n"
    "  int e = 63 - (int)clz(a);\n"
    "  uint m;\n"
    "  if (e <= 23) {\n"
    "    m = (uint)(a << (23 - e));\n"
    "  } else {\n"
    "    int s = e - 23;\n"
    "    m = (uint)(a >> s) | ((a & ((1UL << s) - 1UL)) != 0UL ? 1u : 0u);\n"
    "  }\n"
    "  return as_float((x < 0 ? 0x80000000u : 0u) |\n"
    "                  ((uint)(e + 127) << 23) | (m & 0x7fffffu));\n"
    "}\n";

static const char *storage_of(uint32_t dt) {
  switch (dt) {
  case TYTO_PLUGIN_DTYPE_F64: return "double";
  case TYTO_PLUGIN_DTYPE_BF16: return "ushort";
  case TYTO_PLUGIN_DTYPE_F16: return "half";
  case TYTO_PLUGIN_DTYPE_I32: return "int";
  case TYTO_PLUGIN_DTYPE_I64: return "long";
  default: return "float";
  }
}

/* The source of CAST from dtype `from` to `to` (one of them an integer):
 * kernel tyto_int_cast. NULL when out of memory; the caller frees it. */
static char *cast_source(uint32_t from, uint32_t to) {
  char load[64], conv[128], store[160];
  if (from == TYTO_PLUGIN_DTYPE_BF16)
    snprintf(load, sizeof load, "tyto_bf16_f32(x[a])");
  else if (from == TYTO_PLUGIN_DTYPE_F16)
    snprintf(load, sizeof load, "tyto_ld_f16(x, a)");
  else
    snprintf(load, sizeof load, "x[a]");
  if (tpc_dtype_int(to) && !tpc_dtype_int(from))
    snprintf(conv, sizeof conv, "convert_%s_sat_rtz(v)",
             to == TYTO_PLUGIN_DTYPE_I32 ? "int" : "long");
  else if (to == TYTO_PLUGIN_DTYPE_I32) /* from i64 */
    snprintf(conv, sizeof conv, "as_int((uint)as_ulong(v))");
  else if (to == TYTO_PLUGIN_DTYPE_I64) /* from i32 */
    snprintf(conv, sizeof conv, "(long)v");
  else if (to == TYTO_PLUGIN_DTYPE_F64)
    snprintf(conv, sizeof conv, "convert_double_rte(v)");
  else if (to == TYTO_PLUGIN_DTYPE_F32)
    snprintf(conv, sizeof conv, "convert_float_rte(v)");
  else
    snprintf(conv, sizeof conv, "tyto_i2f_odd((long)v)");
  if (to == TYTO_PLUGIN_DTYPE_BF16)
    snprintf(store, sizeof store, "y[b] = tyto_f32_bf16(%s);", conv);
  else if (to == TYTO_PLUGIN_DTYPE_F16)
    snprintf(store, sizeof store, "tyto_st_f16(y, b, %s);", conv);
  else
    snprintf(store, sizeof store, "y[b] = %s;", conv);
  const char *vt = ocl_is16(from) ? "float" : storage_of(from);
  const char *fmt =
      "%s"
      "__kernel void tyto_int_cast(__global const %s *x, long xb, long8 xs,\n"
      "                            __global %s *y, long yb, long8 ys,\n"
      "                            long8 shape, int rank, long n) {\n"
      "  TYTO_FOR(i, n) {\n"
      "    const long a = xb + tyto_offset(i, shape, xs, rank);\n"
      "    const long b = yb + tyto_offset(i, shape, ys, rank);\n"
      "    const %s v = %s;\n"
      "    %s\n"
      "  }\n"
      "}\n";
  const char *helper = ocl_is16(to) ? i2f_odd_source : "";
  int len = snprintf(NULL, 0, fmt, helper, storage_of(from), storage_of(to), vt,
                     load, store);
  char *s = len < 0 ? NULL : malloc((size_t)len + 1);
  if (s != NULL)
    snprintf(s, (size_t)len + 1, fmt, helper, storage_of(from), storage_of(to),
             vt, load, store);
  return s;
}

/* ---- the family ------------------------------------------------------------
 */

typedef struct int_impl {
  cl_kernel kernel;
  uint32_t reduced; /* a reduction's axes: bit k for axis k */
} int_impl;

static int owns(uint32_t op) {
  (void)op;
  return 0; /* chosen by ocl_int_route, never by op code alone */
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int code = tpc_int_check(&a, why, sizeof why);
  return code != 0 ? ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why)
                   : NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  int_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = c;
  /* tpc_reduce_check has checked the axes (iattrs). */
  for (uint32_t j = 0; tpc_int_reduce(d->op) && j < d->d->n_iattrs; j++)
    c->reduced |= 1u << d->d->iattrs[j];
  if (d->op != TYTO_PLUGIN_OP_CAST)
    return ocl_kernel_new(
        dev, d->dtype, int_source, NULL,
        tpc_int_reduce(d->op) ? "tyto_int_reduce" : "tyto_int_elt", &c->kernel);
  uint32_t from = d->in[0].l.dtype, to = d->dtype;
  char *source = cast_source(from, to);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "cast: out of host memory writing the kernel source");
  /* f64 on either side needs the pragma (TYTO_FP64). */
  uint32_t dt = from == TYTO_PLUGIN_DTYPE_F64 || to == TYTO_PLUGIN_DTYPE_F64
                    ? TYTO_PLUGIN_DTYPE_F64
                    : TYTO_PLUGIN_DTYPE_I32;
  tyto_plugin_error *e =
      ocl_kernel_new(dev, dt, source, NULL, "tyto_int_cast", &c->kernel);
  free(source);
  return e;
}

static void release(tyto_plugin_kernel *k) {
  int_impl *c = k->impl;
  if (c == NULL)
    return;
  if (c->kernel != NULL)
    clReleaseKernel(c->kernel);
  free(c);
  k->impl = NULL;
}

/* Strides of l as a long8 over `rank` dims (fastest first), 0 beyond. */
static cl_long8 strides_of(const tyto_plugin_layout *l) {
  return ocl_long8_rev(l->strides, l->rank, 0);
}

static tyto_plugin_error *reduce_launch(tyto_plugin_device *dev,
                                        tyto_plugin_stream *s, int_impl *c,
                                        const ocl_desc *d, const ocl_arg *in,
                                        const ocl_arg *out) {
  const tyto_plugin_layout *xl = &d->in[0].l, *yl = &d->out[0].l;
  uint32_t rank = xl->rank;
  int64_t oshape[TYTO_PLUGIN_MAX_RANK], rshape[TYTO_PLUGIN_MAX_RANK];
  int64_t count = 1;
  for (uint32_t k = 0; k < rank; k++) {
    int red = (c->reduced >> k) & 1u;
    oshape[k] = red ? 1 : xl->shape[k];
    rshape[k] = red ? xl->shape[k] : 1;
    count *= rshape[k];
  }
  cl_long8 os = ocl_long8_rev(oshape, rank, 1),
           rs = ocl_long8_rev(rshape, rank, 1), xs = strides_of(xl),
           ys = strides_of(yl);
  cl_int op = (cl_int)d->op, crank = (cl_int)rank;
  cl_long cnt = count, nout = d->out[0].n;
  ocl_karg args[] = {
      OCL_KARG(op),    OCL_KARG(in[0].mem),  OCL_KARG(in[0].origin),
      OCL_KARG(xs),    OCL_KARG(out[0].mem), OCL_KARG(out[0].origin),
      OCL_KARG(ys),    OCL_KARG(os),         OCL_KARG(rs),
      OCL_KARG(crank), OCL_KARG(cnt),        OCL_KARG(nout)};
  size_t global = ocl_global_size(nout);
  return ocl_run(dev, s, c->kernel, args, sizeof args / sizeof args[0], 1,
                 &global, "integer reduction kernel");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  (void)ws;
  int_impl *c = k->impl;
  const ocl_desc *d = &k->desc;
  if (tpc_int_reduce(d->op))
    return reduce_launch(dev, s, c, d, in, out);
  const tyto_plugin_layout *ol = &d->out[0].l;
  uint32_t rank = ol->rank;
  cl_long8 shape = ocl_long8_rev(ol->shape, rank, 1);
  cl_int crank = (cl_int)rank;
  cl_long n = d->out[0].n;
  ocl_args a = OCL_ARGS(dev, c->kernel);
  if (d->op == TYTO_PLUGIN_OP_CAST) {
    ocl_args_mem(&a, &in[0]);
    cl_long8 xs = strides_of(&d->in[0].l);
    ocl_args_put(&a, sizeof xs, &xs);
  } else {
    ocl_args_int(&a, (int)d->op);
    ocl_args_int(&a, (int)d->n_in);
    for (uint32_t j = 0; j < 3; j++) {
      uint32_t jj = j < d->n_in ? j : 0;
      ocl_args_mem(&a, &in[jj]);
      cl_long8 st = strides_of(&d->in[jj].l);
      ocl_args_put(&a, sizeof st, &st);
    }
  }
  ocl_args_mem(&a, &out[0]);
  cl_long8 os = strides_of(ol);
  ocl_args_put(&a, sizeof os, &os);
  ocl_args_put(&a, sizeof shape, &shape);
  ocl_args_put(&a, sizeof crank, &crank);
  ocl_args_put(&a, sizeof n, &n);
  if (a.e != NULL)
    return a.e;
  return ocl_enqueue_n(dev, s, c->kernel, n,
                       d->op == TYTO_PLUGIN_OP_CAST ? "integer cast kernel"
                                                    : "integer elementwise "
                                                      "kernel");
}

const ocl_family ocl_family_int = {"int",   owns,   check,
                                   prepare, launch, release};
