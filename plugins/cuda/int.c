/*
 * The integer dtypes i32 and i64 (ABI 1.6, sdk/docs/ops.md "Integer
 * dtypes") on CUDA, as the OpenCL plugin runs them (opencl/int.c): which
 * ops run on them (tcu_int_route, for kernels.c; plugins/common/int_plan.c
 * decides), and the family that runs the elementwise ops, CAST to or from
 * them and the reductions SUM, MAX_REDUCE and MIN_REDUCE. COPY and FILL
 * run in copyfill.c (FILL's value converted by STD, tcu_dtype_defs), PAD,
 * GATHER, SCATTER_ADD and ONE_HOT with integer indices or data in index.c,
 * ARGMAX and ARGMIN into an integer output in reduce.c.
 *
 * Arithmetic wraps modulo 2^32 or 2^64 as C's unsigned arithmetic does:
 * the kernels add, subtract, multiply and negate in TU, the unsigned type
 * of T's width (signed overflow is undefined in CUDA C++ as in C).
 *
 * CAST: to an integer, truncated toward zero, saturated, NaN 0
 * (tyto_int_of_d of the prelude, on the value read exactly into a
 * double); from an integer, the conversion to float or double rounds to
 * nearest even (CUDA's default), and to f16 and bf16 goes through an f32
 * rounded to odd (tyto_i2f_odd, integer operations only), from which the
 * 16-bit format's round to nearest even is the correct single rounding
 * (24 bits >= 11 + 2). i64 to i32 keeps the low 32 bits, i32 to i64
 * sign-extends.
 *
 * The kernels are simple (one thread per output element, grid-stride
 * loops, layouts of any strides through tyto_offset): integer tensors hold
 * indices, labels and counts, not the bulk of the work.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/int_plan.h"

/* The kernels switch on the ABI's op codes, which never change. */
_Static_assert(TYTO_PLUGIN_OP_NEG == 16 && TYTO_PLUGIN_OP_ABS == 17 &&
                   TYTO_PLUGIN_OP_SIGN == 18 && TYTO_PLUGIN_OP_ADD == 64 &&
                   TYTO_PLUGIN_OP_SUB == 65 && TYTO_PLUGIN_OP_MUL == 66 &&
                   TYTO_PLUGIN_OP_MAX == 69 && TYTO_PLUGIN_OP_MIN == 70 &&
                   TYTO_PLUGIN_OP_EQ == 72 && TYTO_PLUGIN_OP_NE == 73 &&
                   TYTO_PLUGIN_OP_LT == 74 && TYTO_PLUGIN_OP_LE == 75 &&
                   TYTO_PLUGIN_OP_GT == 76 && TYTO_PLUGIN_OP_GE == 77 &&
                   TYTO_PLUGIN_OP_SUM == 128 &&
                   TYTO_PLUGIN_OP_MAX_REDUCE == 130 &&
                   TYTO_PLUGIN_OP_MIN_REDUCE == 131,
               "the integer kernels' op codes");

/* ---- which ops run on integers ------------------------------------------ */

static void operands(const tcu_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

tyto_plugin_error *tcu_int_route(tyto_plugin_device *dev, const tcu_desc *d,
                                 const tcu_family **fam) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int own = 0, code = tpc_int_route(&a, &own, why, sizeof why);
  if (code != 0)
    return TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
  /* A CAST from an integer to its own dtype too: the cast kernel copies
   * it (eltwise.c's CAST computes in floating point). */
  if (own || d->op == TYTO_PLUGIN_OP_CAST)
    *fam = &tcu_family_int;
  return NULL;
}

/* ---- kernels ------------------------------------------------------------ */

/* Elementwise ops and reductions, one program per integer dtype (T, TU
 * from tcu_dtype_defs). */
static const char int_source[] =
    "#define TI_MIN ((T)((TU)1 << (sizeof(T) * 8 - 1)))\n"
    "#define TI_MAX ((T)~((TU)1 << (sizeof(T) * 8 - 1)))\n"
    "__device__ __forceinline__ T ti_op1(int op, T x) {\n"
    "  switch (op) {\n"
    "  case 16: return (T)((TU)0 - (TU)x);\n"
    "  case 17: return x < 0 ? (T)((TU)0 - (TU)x) : x;\n"
    "  case 18: return (T)((x > 0) - (x < 0));\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "__device__ __forceinline__ T ti_op2(int op, T x, T y) {\n"
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
    "/* Op `op` of arity 1 to 3 (WHERE) over the n elements of the output's\n"
    " * shape; each operand's dims carry that shape and its own strides. An\n"
    " * input the op does not have is bound to x and never read. */\n"
    "extern \"C\" __global__ void tyto_int_elt(int op, int arity,\n"
    "                                          const T *x, tcu_dims xd,\n"
    "                                          const T *y, tcu_dims yd,\n"
    "                                          const T *z, tcu_dims zd,\n"
    "                                          T *out, tcu_dims od, i64 n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    const T a = x[tyto_offset(i, xd)];\n"
    "    T r;\n"
    "    if (arity == 1) {\n"
    "      r = ti_op1(op, a);\n"
    "    } else {\n"
    "      const T b = y[tyto_offset(i, yd)];\n"
    "      r = arity == 2 ? ti_op2(op, a, b)\n"
    "                     : (a != 0 ? b : z[tyto_offset(i, zd)]);\n"
    "    }\n"
    "    out[tyto_offset(i, od)] = r;\n"
    "  }\n"
    "}\n"
    "/* Output o (row-major over the kept shape: the input's with the\n"
    " * reduced axes 1; xo its strides in x, yo in y) folds the count\n"
    " * elements of xr (the reduced axes' extents, 1 elsewhere, x's\n"
    " * strides) at its place in x, in row-major order: SUM wraps;\n"
    " * MAX_REDUCE and MIN_REDUCE of no elements are the dtype's least and\n"
    " * greatest value. */\n"
    "extern \"C\" __global__ void tyto_int_reduce(int op, const T *x,\n"
    "                                             tcu_dims xo, tcu_dims xr,\n"
    "                                             T *y, tcu_dims yo,\n"
    "                                             i64 count, i64 nout) {\n"
    "  TYTO_FOR(o, nout) {\n"
    "    const T *xb = x + tyto_offset(o, xo);\n"
    "    T a = op == 128 ? 0 : op == 130 ? TI_MIN : TI_MAX;\n"
    "    for (i64 r = 0; r < count; r++) {\n"
    "      const T v = xb[tyto_offset(r, xr)];\n"
    "      a = op == 128   ? (T)((TU)a + (TU)v)\n"
    "          : op == 130 ? (v > a ? v : a)\n"
    "                      : (v < a ? v : a);\n"
    "    }\n"
    "    y[tyto_offset(o, yo)] = a;\n"
    "  }\n"
    "}\n";

/* The conversion helper of CAST from an integer to f16 or bf16. */
static const char i2f_odd_source[] =
    "/* x rounded to an f32 by round-to-odd (integer operations only). */\n"
    "__device__ __forceinline__ float tyto_i2f_odd(long long x) {\n"
    "  const u64 a = x < 0 ? (u64)0 - (u64)x : (u64)x;\n"
    "  if (a == 0)\n"
    "    return 0.0f;\n"
    "  const int e = 63 - __clzll((long long)a);\n"
    "  u32 m;\n"
    "  if (e <= 23) {\n"
    "    m = (u32)(a << (23 - e));\n"
    "  } else {\n"
    "    const int s = e - 23;\n"
    "    m = (u32)(a >> s) | ((a & (((u64)1 << s) - 1)) != 0 ? 1u : 0u);\n"
    "  }\n"
    "  return __uint_as_float((x < 0 ? 0x80000000u : 0u) |\n"
    "                         ((u32)(e + 127) << 23) | (m & 0x7fffffu));\n"
    "}\n";

static const char *storage_of(uint32_t dt) {
  switch (dt) {
  case TYTO_PLUGIN_DTYPE_F64: return "double";
  case TYTO_PLUGIN_DTYPE_BF16:
  case TYTO_PLUGIN_DTYPE_F16: return "unsigned short";
  case TYTO_PLUGIN_DTYPE_I32: return "int";
  case TYTO_PLUGIN_DTYPE_I64: return "long long";
  default: return "float";
  }
}

/* The source of CAST from dtype `from` to `to` (one of them an integer):
 * kernel tyto_int_cast. NULL when out of memory; the caller frees it. */
static char *cast_source(uint32_t from, uint32_t to) {
  char load[64], conv[128], store[160];
  if (from == TYTO_PLUGIN_DTYPE_BF16)
    snprintf(load, sizeof load, "tyto_bf16_f(x[a])");
  else if (from == TYTO_PLUGIN_DTYPE_F16)
    snprintf(load, sizeof load, "tyto_f16_f(x[a])");
  else
    snprintf(load, sizeof load, "x[a]");
  const char *vt = tcu_is16(from) ? "float" : storage_of(from);
  if (tpc_dtype_int(to) && !tpc_dtype_int(from))
    snprintf(
        conv, sizeof conv, "(%s)tyto_int_of_d((double)v, %s)", storage_of(to),
        to == TYTO_PLUGIN_DTYPE_I32 ? "0x7fffffffLL" : "0x7fffffffffffffffLL");
  else if (to == TYTO_PLUGIN_DTYPE_I32) /* from an integer: low 32 bits */
    snprintf(conv, sizeof conv, "(int)(u32)(u64)v");
  else if (to == TYTO_PLUGIN_DTYPE_I64) /* from an integer: sign-extended */
    snprintf(conv, sizeof conv, "(long long)v");
  else if (to == TYTO_PLUGIN_DTYPE_F64)
    snprintf(conv, sizeof conv, "(double)v");
  else if (to == TYTO_PLUGIN_DTYPE_F32)
    snprintf(conv, sizeof conv, "(float)v");
  else
    snprintf(conv, sizeof conv, "tyto_i2f_odd((long long)v)");
  if (to == TYTO_PLUGIN_DTYPE_BF16)
    snprintf(store, sizeof store, "y[b] = tyto_f_bf16(%s);", conv);
  else if (to == TYTO_PLUGIN_DTYPE_F16)
    snprintf(store, sizeof store, "y[b] = tyto_f_f16(%s);", conv);
  else
    snprintf(store, sizeof store, "y[b] = %s;", conv);
  const char *fmt =
      "%s"
      "extern \"C\" __global__ void tyto_int_cast(const %s *x, tcu_dims xd,\n"
      "                                           %s *y, tcu_dims yd,\n"
      "                                           i64 n) {\n"
      "  TYTO_FOR(i, n) {\n"
      "    const i64 a = tyto_offset(i, xd), b = tyto_offset(i, yd);\n"
      "    const %s v = %s;\n"
      "    %s\n"
      "  }\n"
      "}\n";
  const char *helper = tcu_is16(to) ? i2f_odd_source : "";
  int len = snprintf(NULL, 0, fmt, helper, storage_of(from), storage_of(to), vt,
                     load, store);
  char *s = len < 0 ? NULL : malloc((size_t)len + 1);
  if (s != NULL)
    snprintf(s, (size_t)len + 1, fmt, helper, storage_of(from), storage_of(to),
             vt, load, store);
  return s;
}

/* ---- the family --------------------------------------------------------- */

typedef struct int_impl {
  cudaKernel_t fn;
  uint32_t reduced; /* a reduction's axes: bit k for axis k */
} int_impl;

static int owns(uint32_t op) {
  (void)op;
  return 0; /* chosen by tcu_int_route, never by op code alone */
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int code = tpc_int_check(&a, why, sizeof why);
  return code != 0 ? TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why)
                   : NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  int_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  k->impl = c;
  /* tpc_reduce_check has checked the axes (iattrs). */
  for (uint32_t j = 0; tpc_int_reduce(d->op) && j < d->d->n_iattrs; j++)
    c->reduced |= 1u << d->d->iattrs[j];
  if (d->op != TYTO_PLUGIN_OP_CAST)
    return tcu_function(
        dev, d->dtype, int_source,
        tpc_int_reduce(d->op) ? "tyto_int_reduce" : "tyto_int_elt", &c->fn);
  char *source = cast_source(d->in[0].l.dtype, d->dtype);
  if (source == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "cast: out of host memory writing the "
                                    "kernel source");
  /* The kernel names its types itself: any dtype's definitions do. */
  tyto_plugin_error *e =
      tcu_function(dev, TYTO_PLUGIN_DTYPE_F32, source, "tyto_int_cast", &c->fn);
  free(source);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* The dims of l (fastest first) with `shape` instead of l's extents. */
static tcu_dims dims_with(const tyto_plugin_layout *l, const int64_t *shape) {
  tyto_plugin_layout m = *l;
  memcpy(m.shape, shape, l->rank * sizeof shape[0]);
  return tcu_dims_of(&m);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  (void)ws;
  const int_impl *c = k->impl;
  const tcu_desc *d = &k->desc;
  int op = (int)d->op;
  if (tpc_int_reduce(d->op)) {
    const tyto_plugin_layout *xl = &d->in[0].l, *yl = &d->out[0].l;
    int64_t oshape[TYTO_PLUGIN_MAX_RANK], rshape[TYTO_PLUGIN_MAX_RANK];
    int64_t count = 1, nout = d->out[0].n;
    for (uint32_t j = 0; j < xl->rank; j++) {
      int red = (c->reduced >> j) & 1u;
      oshape[j] = red ? 1 : xl->shape[j];
      rshape[j] = red ? xl->shape[j] : 1;
      count *= rshape[j];
    }
    /* The output has the input's rank (tpc_reduce_check). */
    tcu_dims xo = dims_with(xl, oshape), xr = dims_with(xl, rshape),
             yo = dims_with(yl, oshape);
    void *params[] = {
        &op,  (void *)&in[0].ptr, &xo, &xr, (void *)&out[0].ptr, &yo, &count,
        &nout};
    return tcu_run_n(dev, s, c->fn, nout, params, "integer reduction kernel");
  }
  const tyto_plugin_layout *ol = &d->out[0].l;
  int64_t n = d->out[0].n;
  tcu_dims od = tcu_dims_of(ol);
  if (d->op == TYTO_PLUGIN_OP_CAST) {
    tcu_dims xd = tcu_dims_of(&d->in[0].l); /* the output's shape */
    void *params[] = {(void *)&in[0].ptr, &xd, (void *)&out[0].ptr, &od, &n};
    return tcu_run_n(dev, s, c->fn, n, params, "integer cast kernel");
  }
  int arity = (int)d->n_in;
  tcu_dims dd[3];
  void *ptr[3];
  for (uint32_t j = 0; j < 3; j++) {
    uint32_t jj = j < d->n_in ? j : 0;
    dd[j] = tcu_dims_of(&d->in[jj].l); /* the output's shape (check) */
    ptr[j] = in[jj].ptr;
  }
  void *params[] = {&op,     &arity,  &ptr[0],
                    &dd[0],  &ptr[1], &dd[1],
                    &ptr[2], &dd[2],  (void *)&out[0].ptr,
                    &od,     &n};
  return tcu_run_n(dev, s, c->fn, n, params, "integer elementwise kernel");
}

const tcu_family tcu_family_int = {"int",   owns,   check,
                                   prepare, launch, release};
