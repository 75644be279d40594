/*
 * The generic part of supports_op, prepare, launch and kernel_release (see
 * ops.h), and the services the op families share: compiling functions,
 * launching them, the prelude every program starts with.
 */
#include "ops.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "half_src.h"

static const tcu_family *const families[] = {
    &tcu_family_copyfill, &tcu_family_eltwise, &tcu_family_reduce,
    &tcu_family_blas,     &tcu_family_conv,    &tcu_family_pool,
    &tcu_family_index,    &tcu_family_random,  &tcu_family_linalg,
};
/* tcu_family_int owns no op code: tcu_int_route chooses it. */
#define N_FAMILIES (sizeof families / sizeof families[0])

const char *tcu_dtype_name(uint32_t d) {
  return tpc_dtype_name(d);
}
const char *tcu_op_name(uint32_t op) {
  return tpc_op_name(op);
}

const char *tcu_shape_str(const tyto_plugin_layout *l, char *buf, size_t size) {
  tpc_format_shape(l, buf, size);
  return buf;
}

/* ---- the prelude --------------------------------------------------------- */

const char tcu_prelude[] =
    "typedef long long i64;\n"
    "typedef unsigned int u32;\n"
    "typedef unsigned long long u64;\n"
    "#define TYTO_FOR(i, n) \\\n"
    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \\\n"
    "       i += (i64)gridDim.x * blockDim.x)\n"
    "struct tcu_dims { i64 shape[8]; i64 str[8]; int rank; int pad_; };\n"
    "/* Element offset of row-major linear index i: dims fastest first. A\n"
    " * 64-bit division costs several times a 32-bit one, so the quotient is\n"
    " * taken in 32 bits wherever index and extent fit (same result); the\n"
    " * slowest dim needs none (i < its extent there). */\n"
    "__device__ __forceinline__ i64 tyto_offset(i64 i, const tcu_dims &d) {\n"
    "  i64 o = 0;\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < 8; k++) {\n"
    "    if (k >= d.rank) break;\n"
    "    if (k == d.rank - 1) {\n"
    "      o += i * d.str[k];\n"
    "      break;\n"
    "    }\n"
    "    const i64 s = d.shape[k];\n"
    "    const i64 q = (((u64)i | (u64)s) >> 32) == 0\n"
    "                      ? (i64)((u32)i / (u32)s)\n"
    "                      : i / s;\n"
    "    o += (i - q * s) * d.str[k];\n"
    "    i = q;\n"
    "  }\n"
    "  return o;\n"
    "}\n"
    "/* x converted to an integer whose largest value is hi (2^31 - 1 or\n"
    " * 2^63 - 1) as CAST converts: truncated toward zero, saturated, NaN\n"
    " * 0. The limits are compared first: C++ leaves the conversion of a\n"
    " * value out of range undefined, and 2^63 - 1 is no double. */\n"
    "__device__ __forceinline__ i64 tyto_int_of_d(double x, i64 hi) {\n"
    "  const double lim = (double)hi + 1.0; /* 2^31 or 2^63, exact */\n"
    "  if (x != x) return 0;\n"
    "  if (x >= lim) return hi;\n"
    "  if (x <= -lim) return -hi - 1;\n"
    "  return (i64)x;\n"
    "}\n"
    "__device__ __forceinline__ float tyto_bits_f(u32 u) {\n"
    "  return __int_as_float((int)u);\n"
    "}\n"
    "__device__ __forceinline__ double tyto_bits_d(u64 u) {\n"
    "  return __longlong_as_double((long long)u);\n"
    "}\n";

/* The 16-bit conversions (half_src.h) and their helpers, in every program:
 * TYTO_DEV qualifies a device function; tyto_rf16 / tyto_rbf16 round an
 * f32 to f16 / bf16 and give back the f32 that holds the result. */
#define TCU_STR_(...) #__VA_ARGS__
#define TCU_STR(...) TCU_STR_(__VA_ARGS__)
static const char half_head[] =
    "#define TYTO_DEV __device__ __forceinline__\n"
    "TYTO_DEV float tyto_u2f(unsigned u) { return __uint_as_float(u); }\n"
    "TYTO_DEV unsigned tyto_f2u(float f) { return __float_as_uint(f); }\n"
    "TYTO_DEV unsigned long long tyto_d2u(double d) {\n"
    "  return (unsigned long long)__double_as_longlong(d);\n"
    "}\n";
static const char half_bf16[] = TCU_STR(TCU_HALF_BF16(TYTO_DEV)) "\n";
static const char half_f16[] = TCU_STR(TCU_HALF_F16(TYTO_DEV)) "\n";
static const char half_f64[] = TCU_STR(TCU_HALF_F64(TYTO_DEV)) "\n";
static const char half_tail[] =
    "TYTO_DEV float tyto_rf16(float x) { return tyto_f16_f(tyto_f_f16(x)); }\n"
    "TYTO_DEV float tyto_rbf16(float x) {\n"
    "  return tyto_bf16_f(tyto_f_bf16(x));\n"
    "}\n";

const char *tcu_dtype_defs(uint32_t dtype) {
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F64:
    return "#define T double\n#define S double\n#define TYTO_FP64 1\n"
           "#define LD(x) (x)\n#define ST(x) (x)\n#define STD(x) (x)\n";
  case TYTO_PLUGIN_DTYPE_F16:
    return "#define T float\n#define S unsigned short\n#define TYTO_16 1\n"
           "#define LD(x) tyto_f16_f(x)\n#define ST(x) tyto_f_f16(x)\n"
           "#define STD(x) tyto_d_f16(x)\n";
  case TYTO_PLUGIN_DTYPE_BF16:
    return "#define T float\n#define S unsigned short\n#define TYTO_16 1\n"
           "#define LD(x) tyto_bf16_f(x)\n#define ST(x) tyto_f_bf16(x)\n"
           "#define STD(x) tyto_d_bf16(x)\n";
  case TYTO_PLUGIN_DTYPE_I32:
    return "#define T int\n#define S int\n#define TU unsigned int\n"
           "#define TYTO_INT 1\n#define TI_HI 0x7fffffffLL\n"
           "#define LD(x) (x)\n#define ST(x) (x)\n"
           "#define STD(x) ((T)tyto_int_of_d(x, TI_HI))\n";
  case TYTO_PLUGIN_DTYPE_I64:
    return "#define T long long\n#define S long long\n"
           "#define TU unsigned long long\n#define TYTO_INT 1\n"
           "#define TI_HI 0x7fffffffffffffffLL\n"
           "#define LD(x) (x)\n#define ST(x) (x)\n"
           "#define STD(x) ((T)tyto_int_of_d(x, TI_HI))\n";
  default:
    return "#define T float\n#define S float\n"
           "#define LD(x) (x)\n#define ST(x) (x)\n"
           "#define STD(x) ((float)(x))\n";
  }
}

int tcu_is16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

/* The `#define TYTO_IDX <type>` integer index kernels read (index.c) or
 * store (reduce.c's ARGMAX and ARGMIN), "" for a floating dtype. */
const char *tcu_idx_define(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_I32   ? "#define TYTO_IDX int\n"
         : dtype == TYTO_PLUGIN_DTYPE_I64 ? "#define TYTO_IDX long long\n"
                                          : "";
}

/* ---- services ------------------------------------------------------------ */

tcu_dims tcu_dims_of(const tyto_plugin_layout *l) {
  tcu_dims d;
  memset(&d, 0, sizeof d);
  uint32_t r = l->rank <= TYTO_PLUGIN_MAX_RANK ? l->rank : 0;
  for (uint32_t k = 0; k < TYTO_PLUGIN_MAX_RANK; k++)
    d.shape[k] = 1;
  for (uint32_t k = 0; k < r; k++) {
    d.shape[k] = l->shape[r - 1 - k];
    d.str[k] = l->strides[r - 1 - k];
  }
  d.rank = (int32_t)r;
  return d;
}

unsigned tcu_blocks(const tyto_plugin_device *dev, int64_t n) {
  int64_t blocks = n / TCU_BLOCK + (n % TCU_BLOCK != 0);
  /* Enough blocks to fill every SM several times over; grid-stride loops
   * cover the rest. */
  int64_t cap = (int64_t)(dev->sm_count ? dev->sm_count : 1) * 32;
  if (blocks < 1)
    blocks = 1;
  return (unsigned)(blocks < cap ? blocks : cap);
}

char *tcu_source_join(const char *const *parts, size_t n) {
  size_t total = 1;
  for (size_t i = 0; i < n; i++)
    total += strlen(parts[i]);
  char *s = malloc(total), *at = s;
  if (s == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(parts[i]);
    memcpy(at, parts[i], l);
    at += l;
  }
  *at = '\0';
  return s;
}

tyto_plugin_error *tcu_function(tyto_plugin_device *dev, uint32_t dtype,
                                const char *source, const char *name,
                                cudaKernel_t *out) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *parts[] = {tcu_prelude,
                         half_head,
                         half_bf16,
                         half_f16,
                         half_f64,
                         half_tail,
                         tcu_dtype_defs(dtype),
                         source};
  *out = NULL;
  char *full = tcu_source_join(parts, sizeof parts / sizeof parts[0]);
  if (full == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "cuda:%d: out of host memory for a kernel source",
                           dev->index);
  tcu_module *m = NULL;
  tyto_plugin_error *e = tcu_module_get(dev, full, &m);
  free(full);
  if (e != NULL || dev->compile_only)
    return e;
  cudaError_t r = cudaLibraryGetKernel(out, m->library, name);
  /* With lazy loading (the default) a function reaches the device's
   * context on first use; asking for its attributes loads it now, so an
   * image the GPU cannot run fails in prepare(), not in launch(). */
  struct cudaFuncAttributes attr;
  if (r == cudaSuccess)
    r = cudaFuncGetAttributes(&attr, (const void *)*out);
  if (r != cudaSuccess)
    return tcu_cuda_error(host, r, "cuda:%d: kernel %s not found in its module",
                          dev->index, name);
  return NULL;
}

tyto_plugin_error *tcu_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                           cudaKernel_t fn, dim3 grid, dim3 block,
                           size_t shared_bytes, void **params,
                           const char *what) {
  /* A cudaKernel_t from cudaLibraryGetKernel stands in for a function
   * symbol. */
  cudaError_t e = cudaLaunchKernel((const void *)fn, grid, block, params,
                                   shared_bytes, s->stream);
  if (e != cudaSuccess)
    return tcu_cuda_error(TCU_HOST(dev), e,
                          "cuda:%d: %s: cudaLaunchKernel (%u x %u blocks of "
                          "%u threads)",
                          dev->index, what, grid.x, grid.y, block.x);
  return NULL;
}

tyto_plugin_error *tcu_run_n(tyto_plugin_device *dev, tyto_plugin_stream *s,
                             cudaKernel_t fn, int64_t n, void **params,
                             const char *what) {
  return tcu_run(dev, s, fn, (dim3){tcu_blocks(dev, n), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, params, what);
}

tyto_plugin_error *tcu_lib_error(tyto_plugin_device *dev, tyto_plugin_code code,
                                 const char *op, const char *call,
                                 const char *status) {
  return TCU_HOST(dev)->error_new(code, "%s on cuda:%d: %s failed: %s", op,
                                  dev->index, call, status);
}

/* ---- reading a descriptor ------------------------------------------------ */

/* Copies *src (of the caller's struct size) into *dst and measures it. */
static tyto_plugin_error *read_layout(tyto_plugin_device *dev, const char *op,
                                      const char *side, uint32_t i,
                                      const tyto_plugin_layout *src,
                                      tcu_reach *dst) {
  char which[64];
  snprintf(which, sizeof which, "%s %u", side, (unsigned)i);
  if (src == NULL || !TYTO_PLUGIN_HAS_FIELD(src, tyto_plugin_layout, offset))
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "%s: the layout of %s is NULL or shorter "
                                    "than ABI 1.0's",
                                    op, which);
  memset(dst, 0, sizeof *dst);
  memcpy(&dst->l, src, sizeof dst->l);
  dst->l.struct_size = sizeof dst->l;
  char why[256];
  if (!tpc_layout_extent(&dst->l, which, &dst->n, &dst->lo, &dst->hi, why,
                         sizeof why))
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s",
                                    op, why);
  return NULL;
}

/* The layouts of `desc` into *d, checked as ops.h describes, and the
 * family that owns the op into *fam. */
static tyto_plugin_error *read_desc(tyto_plugin_device *dev,
                                    const tyto_plugin_op_desc *desc,
                                    tcu_desc *d, const tcu_family **fam) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  if (desc == NULL || !TYTO_PLUGIN_HAS_FIELD(desc, tyto_plugin_op_desc, blob))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "op descriptor is NULL or shorter than ABI 1.0's");
  memset(d, 0, sizeof *d);
  d->d = desc;
  d->op = desc->op;
  const char *op = tcu_op_name(desc->op);
  *fam = NULL;
  for (size_t i = 0; i < N_FAMILIES && *fam == NULL; i++)
    if (families[i]->owns(desc->op))
      *fam = families[i];
  if (*fam == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "%s (op %u) is not supported by the cuda plugin", op,
                           (unsigned)desc->op);
  if (desc->n_inputs > TCU_MAX_IO || desc->n_outputs > TCU_MAX_IO ||
      desc->n_outputs == 0)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %u inputs and %u outputs; expected at most "
                           "%d of each and at least one output",
                           op, (unsigned)desc->n_inputs,
                           (unsigned)desc->n_outputs, TCU_MAX_IO);
  if ((desc->n_inputs > 0 && desc->inputs == NULL) || desc->outputs == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: the inputs or outputs array is NULL", op);
  if ((desc->n_iattrs > 0 && desc->iattrs == NULL) ||
      (desc->n_fattrs > 0 && desc->fattrs == NULL))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: n_iattrs or n_fattrs is set but its array is "
                           "NULL",
                           op);
  d->n_in = desc->n_inputs;
  d->n_out = desc->n_outputs;
  tyto_plugin_error *e;
  /* The layouts' stride is the caller's struct size. */
  for (uint32_t i = 0; i < d->n_in; i++)
    if ((e = read_layout(dev, op, "input", i, tpc_at(desc->inputs, i),
                         &d->in[i])) != NULL)
      return e;
  for (uint32_t i = 0; i < d->n_out; i++)
    if ((e = read_layout(dev, op, "output", i, tpc_at(desc->outputs, i),
                         &d->out[i])) != NULL)
      return e;
  /* CAST converts, and a fused program may (ABI 1.5): their operands'
   * dtypes are checked against the program (eltwise.c). Integer operands
   * (ABI 1.6): int.c checks their combination. */
  int ints = 0;
  for (uint32_t i = 0; i < d->n_in + d->n_out; i++)
    ints |= tpc_dtype_int(i < d->n_in ? d->in[i].l.dtype
                                      : d->out[i - d->n_in].l.dtype);
  const int mixed =
      d->op == TYTO_PLUGIN_OP_CAST || d->op == TYTO_PLUGIN_OP_FUSED || ints;
  uint32_t dt = d->out[0].l.dtype;
  for (uint32_t i = 0; i < d->n_in + d->n_out; i++) {
    const tcu_reach *r = i < d->n_in ? &d->in[i] : &d->out[i - d->n_in];
    const char *side = i < d->n_in ? "input" : "output";
    unsigned j = (unsigned)(i < d->n_in ? i : i - d->n_in);
    if (r->l.dtype != dt && !mixed)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: %s %u has dtype %s, output 0 has %s; every "
                             "operand of this op has one dtype",
                             op, side, j, tcu_dtype_name(r->l.dtype),
                             tcu_dtype_name(dt));
    if (tpc_dtype_size(r->l.dtype) == 0)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: %s %u has unknown dtype %u", op, side, j,
                             (unsigned)r->l.dtype);
    /* COPY moves bits of any dtype; every other op computes in f32 or
     * f64 (the 16-bit dtypes being storage formats: ops.md, Dtypes) or
     * in the integers' own arithmetic. */
    if (d->op != TYTO_PLUGIN_OP_COPY && r->l.dtype != TYTO_PLUGIN_DTYPE_F32 &&
        r->l.dtype != TYTO_PLUGIN_DTYPE_F64 && !tcu_is16(r->l.dtype) &&
        !tpc_dtype_int(r->l.dtype))
      return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                             "%s: dtype %s is not supported by the cuda "
                             "plugin (f32, f64, f16, bf16, i32 and i64; copy "
                             "moves any dtype)",
                             op, tcu_dtype_name(r->l.dtype));
  }
  tyto_plugin_error *e2;
  if (ints && (e2 = tcu_int_route(dev, d, fam)) != NULL)
    return e2;
  /* ARGMAX and ARGMIN into an integer output compute in the input's
   * dtype (reduce.c stores the index as the integer). */
  if (ints &&
      (d->op == TYTO_PLUGIN_OP_ARGMAX || d->op == TYTO_PLUGIN_OP_ARGMIN) &&
      d->n_in == 1)
    dt = d->in[0].l.dtype;
  d->elem = tpc_dtype_size(dt);
  d->celem = dt == TYTO_PLUGIN_DTYPE_F64 || dt == TYTO_PLUGIN_DTYPE_I64 ? 8 : 4;
  if (dev->arch[0] == '\0')
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED, "%s on cuda:%d: %s", op,
                           dev->index, dev->arch_error);
  d->dtype = dt;
  return (*fam)->check(dev, d);
}

tyto_plugin_error *tcu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc) {
  tcu_desc d;
  const tcu_family *fam;
  return read_desc(dev, desc, &d, &fam);
}

tyto_plugin_error *tcu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  if (out == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "prepare: out is NULL");
  *out = NULL;
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (k == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "prepare: out of host memory");
  tyto_plugin_error *e = read_desc(dev, desc, &k->desc, &k->fam);
  if (e == NULL && (e = k->fam->prepare(dev, k)) != NULL)
    k->fam->release(dev, k);
  if (e != NULL) {
    free(k);
    return e;
  }
  k->desc.d = NULL;
  if (info != NULL &&
      TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = k->workspace_bytes;
  if (info != NULL &&
      TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, flags))
    info->flags = k->host_sync ? TYTO_PLUGIN_KERNEL_HOST_SYNC : 0;
  *out = k;
  return NULL;
}

void tcu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  if (k == NULL)
    return;
  k->fam->release(dev, k);
  free(k);
}

/* ---- launch -------------------------------------------------------------- */

/* Resolves binding b of operand r (NULL: the workspace) into *a, checking
 * that every element r reaches lies inside the bound buffer. */
static tyto_plugin_error *bind(tyto_plugin_device *dev,
                               const tyto_plugin_kernel *k,
                               const tyto_plugin_binding *b, const char *side,
                               uint32_t i, const tcu_reach *r, tcu_arg *a) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *op = tcu_op_name(k->desc.op);
  /* Operands of CAST and FUSED may differ in dtype: each its own size. */
  size_t elem = r != NULL ? tpc_dtype_size(r->l.dtype) : 1;
  if (b == NULL || !TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, buffer) ||
      b->buffer == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s on cuda:%d: %s binding %u has no buffer", op,
                           dev->index, side, (unsigned)i);
  const tyto_plugin_buffer *buf = b->buffer;
  if (buf->device != dev->index)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s binding %u is a buffer of cuda:%d, not "
                           "cuda:%d",
                           op, side, (unsigned)i, buf->device, dev->index);
  uint64_t offset =
      TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, offset) ? b->offset : 0;
  if (offset % elem != 0 || offset > buf->size)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s on cuda:%d: %s binding %u has offset %llu, %s", op, dev->index,
        side, (unsigned)i, (unsigned long long)offset,
        offset > buf->size ? "past the end of its buffer"
                           : "not a multiple of the element size");
  if (r == NULL) { /* the workspace */
    if (buf->size - offset < k->workspace_bytes)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s on cuda:%d: the workspace binding holds %llu "
                             "bytes past its offset, the kernel asked for "
                             "%llu",
                             op, dev->index,
                             (unsigned long long)(buf->size - offset),
                             (unsigned long long)k->workspace_bytes);
    a->ptr = buf->ptr != NULL ? (char *)buf->ptr + offset : NULL;
    return NULL;
  }
  int64_t base = (int64_t)(offset / elem); /* < 2^61 */
  int64_t count = (int64_t)(buf->size / elem);
  a->ptr = NULL;
  if (r->n == 0)
    return NULL;
  int64_t first, last;
  if (!tpc_add_ok(base, r->lo, &first) || !tpc_add_ok(base, r->hi, &last) ||
      first < 0 || last >= count)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s on cuda:%d: %s %u reaches elements %lld to "
                           "%lld past its binding (offset %llu bytes), "
                           "outside its %llu-byte buffer (%lld %s elements)",
                           op, dev->index, side, (unsigned)i, (long long)r->lo,
                           (long long)r->hi, (unsigned long long)offset,
                           (unsigned long long)buf->size, (long long)count,
                           tcu_dtype_name(r->l.dtype));
  /* The origin may lie outside the buffer when strides are negative; only
   * the reached range must be inside. */
  a->ptr = (void *)((uintptr_t)buf->ptr +
                    (uintptr_t)((base + r->l.offset) * (int64_t)elem));
  return NULL;
}

/* TYTO_CUDA_FAULT_AT (a testing aid, docs/cuda.md): instead of the op, a
 * kernel that stores to an unmapped address, as a kernel with a bad index
 * would; the stream's next synchronisation reports the fault. */
static tyto_plugin_error *inject_fault(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s) {
  static const char source[] =
      "extern \"C\" __global__ void tyto_fault(int *p) {\n"
      "  *(volatile int *)p = 1;\n"
      "}\n";
  cudaKernel_t fn = NULL;
  tyto_plugin_error *e =
      tcu_function(dev, TYTO_PLUGIN_DTYPE_F32, source, "tyto_fault", &fn);
  if (e != NULL)
    return e;
  TCU_HOST(dev)->log(TCU_HOST(dev)->ctx, TYTO_PLUGIN_LOG_WARN,
                     "cuda:%d: launch %lld faults on purpose "
                     "(TYTO_CUDA_FAULT_AT)",
                     dev->index, dev->state->fault_at);
  void *bad = (void *)(uintptr_t)16;
  void *params[] = {&bad};
  dim3 one = {1, 1, 1};
  return tcu_run(dev, s, fn, one, one, 0, params, "fault injection kernel");
}

tyto_plugin_error *
tcu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  if (k == NULL || s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: the %s is NULL",
                           k == NULL ? "kernel" : "stream");
  if (s->device != dev->index)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: the stream belongs to cuda:%d, not "
                           "cuda:%d",
                           s->device, dev->index);
  const tcu_desc *d = &k->desc;
  const char *op = tcu_op_name(d->op);
  if (n_inputs != d->n_in || n_outputs != d->n_out)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s on cuda:%d: launched with %u input and %u "
                           "output bindings, prepared for %u and %u",
                           op, dev->index, (unsigned)n_inputs,
                           (unsigned)n_outputs, (unsigned)d->n_in,
                           (unsigned)d->n_out);
  if ((n_inputs > 0 && inputs == NULL) || outputs == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s on cuda:%d: the input or output bindings are "
                           "NULL",
                           op, dev->index);
  tcu_arg in[TCU_MAX_IO], out[TCU_MAX_IO], ws = {NULL};
  tyto_plugin_error *e;
  for (uint32_t i = 0; i < d->n_in; i++) {
    if ((e = bind(dev, k, tpc_at(inputs, i), "input", i, &d->in[i], &in[i])) !=
        NULL)
      return e;
  }
  int written = 0;
  for (uint32_t i = 0; i < d->n_out; i++) {
    if ((e = bind(dev, k, tpc_at(outputs, i), "output", i, &d->out[i],
                  &out[i])) != NULL)
      return e;
    written += d->out[i].n > 0;
  }
  if (k->workspace_bytes > 0) {
    if (workspace == NULL)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s on cuda:%d: the kernel needs a %llu-byte "
                             "workspace and none is bound",
                             op, dev->index,
                             (unsigned long long)k->workspace_bytes);
    if ((e = bind(dev, k, workspace, "workspace", 0, NULL, &ws)) != NULL)
      return e;
  }
  if (written == 0)
    return NULL;
  if ((e = tcu_use(host, dev->index)) != NULL)
    return e;
  tyto_plugin_state *st = dev->state;
  if (st->fault_at > 0 &&
      atomic_fetch_add(&st->launches, 1) + 1 == st->fault_at)
    e = inject_fault(dev, s);
  else
    e = k->fam->launch(dev, s, k, in, out, &ws);
  if (e == NULL)
    tcu_note_launch(s, d->op);
  return e;
}
