/*
 * COPY and FILL.
 *
 * The layouts are planned once at prepare (layout.c: unit dimensions
 * dropped, neighbours merged), so a contiguous copy becomes one block: it
 * runs as clEnqueueCopyBuffer and a contiguous fill as clEnqueueFillBuffer,
 * which drivers run at copy-engine speed. Anything else runs a strided
 * kernel over the merged dimensions. f16 and bf16 move as ushort, bit for
 * bit; FILL's value is rounded to them on the host (plugins/common/half.h),
 * and converted to i32 and i64 as CAST converts a double (int.c).
 * A CAST whose two dtypes are one is a COPY (sdk/docs/ops.md) and runs
 * here.
 */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "errors.h"
#include "layout.h"

const char ocl_copy_source[] =
    "__kernel void tyto_copy(__global const T *in, long in_base, long8 istr,\n"
    "                        __global T *out, long out_base, long8 ostr,\n"
    "                        long8 shape, int rank, long n) {\n"
    "  TYTO_FOR(i, n)\n"
    "    out[out_base + tyto_offset(i, shape, ostr, rank)] =\n"
    "        in[in_base + tyto_offset(i, shape, istr, rank)];\n"
    "}\n"
    "__kernel void tyto_fill(__global T *out, long out_base, long8 ostr,\n"
    "                        long8 shape, int rank, long n, T value) {\n"
    "  TYTO_FOR(i, n)\n"
    "    out[out_base + tyto_offset(i, shape, ostr, rank)] = value;\n"
    "}\n";

typedef struct copyfill {
  cl_kernel kernel;
  ocl_plan plan;
  /* FILL's value as the kernel argument and the fill pattern: elem bytes
   * of the dtype's storage. */
  union {
    cl_float f;
    cl_double d;
    cl_ushort h;
    cl_int i;
    cl_long l;
  } value;
} copyfill;

/* v rounded to dtype, stored as the dtype stores it, into *c. */
static void fill_value(copyfill *c, uint32_t dtype, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_F64)
    c->value.d = v;
  else if (dtype == TYTO_PLUGIN_DTYPE_I32)
    c->value.i = (cl_int)tpc_int_of_f64(dtype, v);
  else if (dtype == TYTO_PLUGIN_DTYPE_I64)
    c->value.l = tpc_int_of_f64(dtype, v);
  else if (dtype == TYTO_PLUGIN_DTYPE_BF16)
    c->value.h = tpc_f64_to_bf16(v);
  else if (dtype == TYTO_PLUGIN_DTYPE_F16)
    c->value.h = tpc_f64_to_f16(v);
  else
    c->value.f = (cl_float)v;
}

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_COPY || op == TYTO_PLUGIN_OP_FILL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  /* COPY, or a CAST to its own dtype (kernels.c sends it here) */
  int copy = d->op != TYTO_PLUGIN_OP_FILL;
  const char *op = ocl_op_name(d->op);
  uint32_t want_in = copy ? 1 : 0;
  if (d->n_in != want_in || d->n_out != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected %u input(s) and 1 output, got %u and %u", op,
                     (unsigned)want_in, (unsigned)d->n_in, (unsigned)d->n_out);
  if (!copy && d->d->n_fattrs < 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "fill: the value fattrs[0] is missing");
  const tyto_plugin_layout *in = copy ? &d->in[0].l : NULL;
  const tyto_plugin_layout *out = &d->out[0].l;
  if (in != NULL && in->rank != out->rank)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "copy: input rank %u differs from output rank %u",
                     (unsigned)in->rank, (unsigned)out->rank);
  if (in != NULL &&
      memcmp(in->shape, out->shape, in->rank * sizeof in->shape[0]) != 0) {
    char a[160], b[160];
    ocl_format_shape(in, a, sizeof a);
    ocl_format_shape(out, b, sizeof b);
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "copy: input shape %s differs from output shape %s", a, b);
  }
  ocl_plan plan;
  char why[256];
  if (!ocl_plan_make(in, out, &plan, why, sizeof why))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s", op, why);
  return NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  copyfill *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = c;
  int copy = d->op != TYTO_PLUGIN_OP_FILL;
  fill_value(c, d->dtype, copy ? 0.0 : d->d->fattrs[0]);
  char why[256];
  if (!ocl_plan_make(copy ? &d->in[0].l : NULL, &d->out[0].l, &c->plan, why,
                     sizeof why))
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INTERNAL, "%s", why);
  return ocl_kernel_new(dev, ocl_is16(d->dtype) ? OCL_DTYPE_RAW16 : d->dtype,
                        ocl_copy_source, NULL, copy ? "tyto_copy" : "tyto_fill",
                        &c->kernel);
}

static void release(tyto_plugin_kernel *k) {
  copyfill *c = k->impl;
  if (c == NULL)
    return;
  if (c->kernel != NULL)
    clReleaseKernel(c->kernel);
  free(c);
  k->impl = NULL;
}

static cl_long8 long8_of(const int64_t *v) {
  cl_long8 r;
  for (int i = 0; i < 8; i++)
    r.s[i] = v[i];
  return r;
}

/* The strided kernel. The plan's dims are fastest first, as the prelude's
 * tyto_offset() wants them. */
static tyto_plugin_error *run_kernel(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, copyfill *c,
                                     int copy, size_t elem, const ocl_arg *in,
                                     const ocl_arg *out) {
  const ocl_plan *p = &c->plan;
  int64_t shape1[8];
  for (int i = 0; i < 8; i++)
    shape1[i] = (uint32_t)i < p->rank ? p->shape[i] : 1;
  cl_long8 shape = long8_of(shape1), istr = long8_of(p->in_strides),
           ostr = long8_of(p->out_strides);
  /* The plan's offsets are the layouts': the origins include them. */
  cl_long ib = copy ? in->origin : 0, ob = out->origin;
  cl_long n = p->n;
  cl_int rank = (cl_int)p->rank;
  ocl_args a = OCL_ARGS(dev, c->kernel);
  if (copy) {
    ocl_args_put(&a, sizeof in->mem, &in->mem);
    ocl_args_put(&a, sizeof ib, &ib);
    ocl_args_put(&a, sizeof istr, &istr);
  }
  ocl_args_put(&a, sizeof out->mem, &out->mem);
  ocl_args_put(&a, sizeof ob, &ob);
  ocl_args_put(&a, sizeof ostr, &ostr);
  ocl_args_put(&a, sizeof shape, &shape);
  ocl_args_put(&a, sizeof rank, &rank);
  ocl_args_put(&a, sizeof n, &n);
  if (!copy)
    ocl_args_put(&a, elem, &c->value);
  if (a.e != NULL)
    return a.e;
  return ocl_enqueue_n(dev, s, c->kernel, n,
                       copy ? "copy kernel" : "fill kernel");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  (void)ws;
  copyfill *c = k->impl;
  const ocl_plan *p = &c->plan;
  size_t elem = k->desc.elem;
  int copy = k->desc.op != TYTO_PLUGIN_OP_FILL;
  /* First element of each side, in bytes, for the dense paths: the
   * origins include the layouts' offsets, the plan's lo values too. */
  size_t bytes = (size_t)p->n * elem;
  size_t in_at =
      copy ? (size_t)(in->origin - p->in_offset + p->in_lo) * elem : 0;
  size_t out_at = (size_t)(out->origin - p->out_offset + p->out_lo) * elem;
  int dense_copy = copy && p->in_dense && p->out_dense;
  if (dense_copy && in->mem == out->mem) {
    if (in_at == out_at)
      return NULL; /* onto itself: nothing changes */
    /* clEnqueueCopyBuffer refuses overlap; the kernel copies element-wise
     * with no order guarantee, as for any aliased copy. */
    if (in_at < out_at + bytes && out_at < in_at + bytes)
      dense_copy = 0;
  }
  if (!dense_copy && !(!copy && p->out_dense))
    return run_kernel(dev, s, c, copy, elem, in, out);
  tyto_plugin_error *e = ocl_stream_reserve(s);
  if (e != NULL)
    return e;
  cl_event ev = NULL;
  cl_int err;
  const char *call, *what;
  if (dense_copy) {
    call = "clEnqueueCopyBuffer";
    what = "copy kernel (as a buffer copy)";
    err = clEnqueueCopyBuffer(s->queue, in->mem, out->mem, in_at, out_at, bytes,
                              0, NULL, &ev);
  } else {
    call = "clEnqueueFillBuffer";
    what = "fill kernel (as a buffer fill)";
    err = clEnqueueFillBuffer(s->queue, out->mem, &c->value, elem, out_at,
                              bytes, 0, NULL, &ev);
  }
  if (err != CL_SUCCESS) {
    if (ev != NULL)
      clReleaseEvent(ev);
    return ocl_error_cl(OCL_HOST(dev), call, err,
                        "launching %s (%s, %lld elements) on \"%s\"",
                        ocl_op_name(k->desc.op), ocl_dtype_name(k->desc.dtype),
                        (long long)p->n, dev->info->name);
  }
  ocl_stream_track(s, ev, what);
  return NULL;
}

const ocl_family ocl_family_copyfill = {"copyfill", owns,   check,
                                        prepare,    launch, release};
