/*
 * The generic part of supports_op, prepare, launch and kernel_release (see
 * ops.h), and the services the op families share: building kernels,
 * setting arguments, enqueueing, the prelude every program starts with.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "layout.h"
#include "../common/common.h"

static const ocl_family *const families[] = {
    &ocl_family_copyfill, &ocl_family_eltwise, &ocl_family_reduce,
    &ocl_family_blas,     &ocl_family_conv,    &ocl_family_pool,
    &ocl_family_index,    &ocl_family_random,  &ocl_family_linalg,
};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* The names live in plugins/common, shared with the other plugins. */
const char *ocl_dtype_name(uint32_t d) {
  return tpc_dtype_name(d);
}

const char *ocl_op_name(uint32_t op) {
  return tpc_op_name(op);
}

/* ---- the prelude -------------------------------------------------------- */

const char ocl_prelude[] =
    "#if defined(TYTO_FP64)\n"
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "#endif\n"
    "/* Element offset of row-major linear index i: dims fastest first. */\n"
    "inline long tyto_offset(long i, long8 shape, long8 str, int rank) {\n"
    "  long o = 0, q;\n"
    "#define TYTO_PEEL(c, k) \\\n"
    "  if ((k) < rank) { q = i / shape.c; o += (i - q * shape.c) * str.c; \\\n"
    "                    i = q; }\n"
    "  TYTO_PEEL(s0, 0) TYTO_PEEL(s1, 1) TYTO_PEEL(s2, 2) TYTO_PEEL(s3, 3)\n"
    "  TYTO_PEEL(s4, 4) TYTO_PEEL(s5, 5) TYTO_PEEL(s6, 6) TYTO_PEEL(s7, 7)\n"
    "#undef TYTO_PEEL\n"
    "  return o;\n"
    "}\n"
    "#define TYTO_FOR(i, n) for (long i = get_global_id(0); i < (n); \\\n"
    "                            i += (long)get_global_size(0))\n";

/* ---- services ----------------------------------------------------------- */

int ocl_reach_below(const tyto_plugin_layout *l, int64_t limit) {
  int64_t r = 0;
  for (uint32_t i = 0; i < l->rank; i++) {
    int64_t s = l->strides[i] < 0 ? -l->strides[i] : l->strides[i];
    if (l->shape[i] > 1 && s > (limit - r) / (l->shape[i] - 1))
      return 0;
    if (l->shape[i] > 1)
      r += (l->shape[i] - 1) * s;
  }
  return r < limit;
}

size_t ocl_global_size(int64_t n) {
  const int64_t cap = (int64_t)1 << 20;
  if (n < 1)
    n = 1;
  if (n > cap)
    n = cap;
  return (size_t)((n + 63) / 64 * 64);
}

void ocl_dims(const tyto_plugin_layout *l, cl_long8 *shape, cl_long8 *strides,
              cl_int *rank) {
  for (int i = 0; i < 8; i++) {
    shape->s[i] = 1;
    strides->s[i] = 0;
  }
  uint32_t r = l->rank <= 8 ? l->rank : 8;
  for (uint32_t k = 0; k < r; k++) {
    shape->s[k] = l->shape[r - 1 - k];
    strides->s[k] = l->strides[r - 1 - k];
  }
  *rank = (cl_int)r;
}

tyto_plugin_error *ocl_kernel_new(tyto_plugin_device *dev, uint32_t dtype,
                                  const char *source, const char *options,
                                  const char *name, cl_kernel *out) {
  const char *dt =
      dtype == TYTO_PLUGIN_DTYPE_F64    ? "-DT=double -DTYTO_FP64"
      : dtype == TYTO_PLUGIN_DTYPE_BF16 ? "-DT=float -DTYTO_BF16"
      : dtype == TYTO_PLUGIN_DTYPE_F16  ? "-DT=float -DTYTO_F16"
      : dtype == OCL_DTYPE_RAW16        ? "-DT=ushort"
      : dtype == TYTO_PLUGIN_DTYPE_I32  ? "-DT=int -DTU=uint -DTYTO_INT"
      : dtype == TYTO_PLUGIN_DTYPE_I64  ? "-DT=long -DTU=ulong -DTYTO_INT"
                                        : "-DT=float";
  char opts[1024];
  int n = snprintf(opts, sizeof opts, "%s%s%s", dt,
                   options != NULL && options[0] != '\0' ? " " : "",
                   options != NULL ? options : "");
  if (n < 0 || (size_t)n >= sizeof opts)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INTERNAL,
                     "building kernel %s: build options longer than %zu "
                     "bytes",
                     name, sizeof opts - 1);
  cl_program prog = NULL;
  tyto_plugin_error *e = ocl_program_get(dev, source, opts, &prog);
  if (e != NULL)
    return e;
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(prog, name, &err);
  if (k == NULL || err != CL_SUCCESS)
    return ocl_error_cl(OCL_HOST(dev), "clCreateKernel",
                        err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                        "creating kernel %s (%s) on \"%s\"", name,
                        dtype == OCL_DTYPE_RAW16 ? "16-bit"
                                                 : ocl_dtype_name(dtype),
                        dev->info->name);
  *out = k;
  return NULL;
}

/* The name of a cl_kernel, for messages; "kernel" when it cannot be had. */
static void kernel_name(cl_kernel k, char *buf, size_t size) {
  if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, size, buf, NULL) !=
      CL_SUCCESS)
    snprintf(buf, size, "kernel");
  buf[size - 1] = '\0';
}

tyto_plugin_error *ocl_set_arg(tyto_plugin_device *dev, cl_kernel kernel,
                               cl_uint index, size_t size, const void *value) {
  cl_int err = clSetKernelArg(kernel, index, size, value);
  if (err == CL_SUCCESS)
    return NULL;
  char name[128];
  kernel_name(kernel, name, sizeof name);
  return ocl_error_cl(OCL_HOST(dev), "clSetKernelArg", err,
                      "argument %u (%zu bytes) of %s on \"%s\"",
                      (unsigned)index, size, name, dev->info->name);
}

tyto_plugin_error *ocl_enqueue(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               cl_kernel kernel, cl_uint dims,
                               const size_t *global, const size_t *local,
                               const char *what) {
  tyto_plugin_error *e = ocl_stream_reserve(s);
  if (e != NULL)
    return e;
  /* Without a work-group size some drivers (PoCL) compile the kernel
   * again for every new global size, i.e. for every new tensor size: give
   * 1-d launches of a multiple of 64 a fixed group of 64 when the kernel
   * allows it. */
  size_t group = 64, wg_max = 0;
  if (local == NULL && dims == 1 && global[0] % group == 0 &&
      clGetKernelWorkGroupInfo(kernel, dev->info->id, CL_KERNEL_WORK_GROUP_SIZE,
                               sizeof wg_max, &wg_max, NULL) == CL_SUCCESS &&
      wg_max >= group)
    local = &group;
  cl_event ev = NULL;
  cl_int err = clEnqueueNDRangeKernel(s->queue, kernel, dims, NULL, global,
                                      local, 0, NULL, &ev);
  if (err != CL_SUCCESS) {
    if (ev != NULL)
      clReleaseEvent(ev);
    char name[128];
    kernel_name(kernel, name, sizeof name);
    return ocl_error_cl(OCL_HOST(dev), "clEnqueueNDRangeKernel", err,
                        "launching %s (%s, global %zu%s) on \"%s\"", what, name,
                        global[0], dims > 1 ? " x ..." : "", dev->info->name);
  }
  ocl_stream_track(s, ev, what);
  return NULL;
}

tyto_plugin_error *ocl_enqueue_n(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 cl_kernel kernel, int64_t n,
                                 const char *what) {
  size_t global = ocl_global_size(n);
  return ocl_enqueue(dev, s, kernel, 1, &global, NULL, what);
}

void ocl_args_put(ocl_args *a, size_t size, const void *value) {
  if (a->e == NULL)
    a->e = ocl_set_arg(a->dev, a->kernel, a->next, size, value);
  a->next++;
}

void ocl_args_int(ocl_args *a, int v) {
  cl_int x = v;
  ocl_args_put(a, sizeof x, &x);
}

void ocl_args_long(ocl_args *a, int64_t v) {
  cl_long x = v;
  ocl_args_put(a, sizeof x, &x);
}

void ocl_args_mem(ocl_args *a, const ocl_arg *v) {
  ocl_args_put(a, sizeof v->mem, &v->mem);
  ocl_args_put(a, sizeof v->origin, &v->origin);
}

void ocl_args_dims(ocl_args *a, const tyto_plugin_layout *l) {
  cl_long8 shape, strides;
  cl_int rank;
  ocl_dims(l, &shape, &strides, &rank);
  ocl_args_put(a, sizeof shape, &shape);
  ocl_args_put(a, sizeof strides, &strides);
  ocl_args_put(a, sizeof rank, &rank);
}

tyto_plugin_error *ocl_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                           cl_kernel kernel, const ocl_karg *args, cl_uint n,
                           cl_uint dims, const size_t *global,
                           const char *what) {
  ocl_args a = OCL_ARGS(dev, kernel);
  for (cl_uint i = 0; i < n; i++)
    ocl_args_put(&a, args[i].size, args[i].value);
  return a.e != NULL ? a.e
                     : ocl_enqueue(dev, s, kernel, dims, global, NULL, what);
}

cl_long8 ocl_long8_rev(const int64_t *v, uint32_t rank, int64_t fill) {
  cl_long8 r;
  for (uint32_t i = 0; i < 8; i++)
    r.s[i] = i < rank ? v[rank - 1 - i] : fill;
  return r;
}

char *ocl_source_join(const char *const *parts, size_t n) {
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(parts[i]);
  char *s = malloc(len), *at = s;
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

tyto_plugin_error *ocl_read(tyto_plugin_device *dev, tyto_plugin_stream *s,
                            cl_mem mem, size_t at, size_t bytes, void *host,
                            const char *op, const char *what) {
  cl_int err = clEnqueueReadBuffer(s->queue, mem, CL_TRUE, at, bytes, host, 0,
                                   NULL, NULL);
  if (err != CL_SUCCESS)
    return ocl_error_cl(OCL_HOST(dev), "clEnqueueReadBuffer", err,
                        "%s: reading %s on \"%s\"", op, what, dev->info->name);
  return NULL;
}

tyto_plugin_error *ocl_clear(tyto_plugin_device *dev, tyto_plugin_stream *s,
                             cl_mem mem, size_t at, size_t bytes,
                             const char *op, const char *what,
                             const char *track) {
  tyto_plugin_error *e = ocl_stream_reserve(s);
  if (e != NULL)
    return e;
  cl_int zero = 0;
  cl_event ev = NULL;
  cl_int err = clEnqueueFillBuffer(s->queue, mem, &zero, sizeof zero, at, bytes,
                                   0, NULL, &ev);
  if (err != CL_SUCCESS) {
    if (ev != NULL)
      clReleaseEvent(ev);
    return ocl_error_cl(OCL_HOST(dev), "clEnqueueFillBuffer", err,
                        "%s: clearing %s on \"%s\"", op, what, dev->info->name);
  }
  ocl_stream_track(s, ev, track);
  return NULL;
}

/* ---- reading a descriptor ------------------------------------------------ */

/* Copies *src (of the caller's struct size) into *dst and measures it. */
static tyto_plugin_error *read_layout(tyto_plugin_device *dev, const char *op,
                                      const char *side, uint32_t i,
                                      const tyto_plugin_layout *src,
                                      ocl_reach *dst) {
  char which[64];
  snprintf(which, sizeof which, "%s %u", side, (unsigned)i);
  if (src == NULL || !TYTO_PLUGIN_HAS_FIELD(src, tyto_plugin_layout, offset))
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the layout of %s is NULL or shorter than ABI "
                     "1.0's",
                     op, which);
  memset(dst, 0, sizeof *dst);
  memcpy(&dst->l, src, sizeof dst->l);
  dst->l.struct_size = sizeof dst->l;
  char why[256];
  if (!ocl_layout_extent(&dst->l, which, &dst->n, &dst->lo, &dst->hi, why,
                         sizeof why))
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s",
                     op, why);
  return NULL;
}

/* The layouts of `desc` into *d, checked as ops.h describes, and the
 * family that owns the op into *fam. */
static tyto_plugin_error *read_desc(tyto_plugin_device *dev,
                                    const tyto_plugin_op_desc *desc,
                                    ocl_desc *d, const ocl_family **fam) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  if (desc == NULL || !TYTO_PLUGIN_HAS_FIELD(desc, tyto_plugin_op_desc, blob))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "op descriptor is NULL or shorter than ABI 1.0's");
  memset(d, 0, sizeof *d);
  d->d = desc;
  d->op = desc->op;
  const char *op = ocl_op_name(desc->op);
  *fam = NULL;
  for (size_t i = 0; i < N_FAMILIES && *fam == NULL; i++)
    if (families[i]->owns(desc->op))
      *fam = families[i];
  if (*fam == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s (op %u) is not supported by the opencl plugin", op,
                     (unsigned)desc->op);
  if (desc->n_inputs > OCL_MAX_IO || desc->n_outputs > OCL_MAX_IO ||
      desc->n_outputs == 0)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %u inputs and %u outputs; expected at most %d of "
                     "each and at least one output",
                     op, (unsigned)desc->n_inputs, (unsigned)desc->n_outputs,
                     OCL_MAX_IO);
  if ((desc->n_inputs > 0 && desc->inputs == NULL) || desc->outputs == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the inputs or outputs array is NULL", op);
  if ((desc->n_iattrs > 0 && desc->iattrs == NULL) ||
      (desc->n_fattrs > 0 && desc->fattrs == NULL))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: n_iattrs or n_fattrs is set but its array is NULL",
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
  /* Every operand has output 0's dtype, but for CAST (its input) and
   * FUSED (the family checks the program's dtypes). */
  uint32_t dt = d->out[0].l.dtype;
  /* Integer operands (ABI 1.6): int.c checks their dtypes. */
  int ints = 0;
  for (uint32_t i = 0; i < d->n_in + d->n_out; i++)
    ints |= tpc_dtype_int(i < d->n_in ? d->in[i].l.dtype
                                      : d->out[i - d->n_in].l.dtype);
  const int mixed = desc->op == TYTO_PLUGIN_OP_CAST ||
                    desc->op == TYTO_PLUGIN_OP_FUSED || ints;
  for (uint32_t i = 0; i < d->n_in + d->n_out; i++) {
    const ocl_reach *r = i < d->n_in ? &d->in[i] : &d->out[i - d->n_in];
    if (r->l.dtype != dt && !mixed)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: %s %u has dtype %s, output 0 has %s; every "
                       "operand of this op has one dtype",
                       op, i < d->n_in ? "input" : "output",
                       (unsigned)(i < d->n_in ? i : i - d->n_in),
                       ocl_dtype_name(r->l.dtype), ocl_dtype_name(dt));
    if ((e = ocl_dtype_check(dev, op, r->l.dtype)) != NULL)
      return e;
  }
  if (!dev->info->has_compiler)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: device \"%s\" has no OpenCL C compiler "
                     "(CL_DEVICE_COMPILER_AVAILABLE is false), so it runs no "
                     "kernels",
                     op, dev->info->name);
  if (!dev->info->has_int64)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: device \"%s\" is an embedded-profile device "
                     "without 64-bit integers (cles_khr_int64), which the "
                     "kernels index with",
                     op, dev->info->name);
  /* A CAST to its own dtype is a COPY: moved bit for bit. */
  if (desc->op == TYTO_PLUGIN_OP_CAST && d->n_in == 1 && d->in[0].l.dtype == dt)
    *fam = &ocl_family_copyfill;
  if (ints && (e = ocl_int_route(dev, d, fam)) != NULL)
    return e;
  /* ARGMAX and ARGMIN into an integer output compute in the input's
   * dtype. */
  if (ints &&
      (desc->op == TYTO_PLUGIN_OP_ARGMAX || desc->op == TYTO_PLUGIN_OP_ARGMIN))
    dt = d->in[0].l.dtype;
  d->dtype = dt;
  d->elem = tpc_dtype_size(dt);
  d->cdtype = ocl_is16(dt) ? TYTO_PLUGIN_DTYPE_F32 : dt;
  d->celem = tpc_dtype_size(d->cdtype);
  return (*fam)->check(dev, d);
}

tyto_plugin_error *ocl_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc) {
  ocl_desc d;
  const ocl_family *fam;
  return read_desc(dev, desc, &d, &fam);
}

tyto_plugin_error *ocl_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  if (out == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "prepare: out is NULL");
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (k == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  tyto_plugin_error *e = read_desc(dev, desc, &k->desc, &k->fam);
  if (e == NULL && pthread_mutex_init(&k->lock, NULL) != 0)
    e = ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                  "prepare: cannot create a mutex");
  else if (e == NULL && (e = k->fam->prepare(dev, k)) != NULL) {
    k->fam->release(k);
    pthread_mutex_destroy(&k->lock);
  }
  if (e != NULL) {
    free(k);
    return e;
  }
  k->desc.d = NULL;
  if (info != NULL &&
      TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = k->workspace_bytes;
  *out = k;
  return NULL;
}

void ocl_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  if (k == NULL)
    return;
  k->fam->release(k);
  pthread_mutex_destroy(&k->lock);
  free(k);
}

/* ---- launch -------------------------------------------------------------- */

/* Resolves binding b of operand r into *a, checking that every element r
 * reaches lies inside the bound buffer. */
static tyto_plugin_error *bind(tyto_plugin_device *dev,
                               const tyto_plugin_kernel *k,
                               const tyto_plugin_binding *b, const char *side,
                               uint32_t i, const ocl_reach *r, ocl_arg *a) {
  const char *op = ocl_op_name(k->desc.op);
  /* An operand counts its own elements, the workspace compute ones. */
  uint32_t dtype = r != NULL ? r->l.dtype : k->desc.cdtype;
  size_t elem = tpc_dtype_size(dtype);
  if (b == NULL || !TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, buffer) ||
      b->buffer == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %s binding %u has no buffer", op, side, (unsigned)i);
  uint64_t offset =
      TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, offset) ? b->offset : 0;
  if (offset % elem != 0)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %s binding %u has offset %llu, not a multiple of "
                     "the %s element size %zu",
                     op, side, (unsigned)i, (unsigned long long)offset,
                     ocl_dtype_name(dtype), elem);
  int64_t base = (int64_t)(offset / elem); /* < 2^62 */
  a->mem = b->buffer->mem;
  a->origin = base;
  int64_t count = (int64_t)(b->buffer->size / elem);
  if (r == NULL) { /* the workspace */
    if (b->buffer->size < offset ||
        b->buffer->size - offset < k->workspace_bytes)
      return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: the workspace binding holds %llu bytes past its "
                       "offset, the kernel asked for %llu",
                       op,
                       (unsigned long long)(b->buffer->size > offset
                                                ? b->buffer->size - offset
                                                : 0),
                       (unsigned long long)k->workspace_bytes);
    return NULL;
  }
  a->origin = base + r->l.offset; /* no overflow: |offset| < reach checked */
  if (r->n == 0)
    return NULL;
  int64_t first, last;
  if (!ocl_add_ok(base, r->lo, &first) || !ocl_add_ok(base, r->hi, &last) ||
      first < 0 || last >= count)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %s %u reaches elements %lld to %lld past its "
                     "binding (offset %llu bytes), outside its %llu-byte "
                     "buffer (%lld %s elements)",
                     op, side, (unsigned)i, (long long)r->lo, (long long)r->hi,
                     (unsigned long long)offset,
                     (unsigned long long)b->buffer->size, (long long)count,
                     ocl_dtype_name(dtype));
  return NULL;
}

tyto_plugin_error *
ocl_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  tyto_plugin_error *e = ocl_stream_check(dev, s, "launch");
  if (e != NULL)
    return e;
  if (k == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "launch: the kernel is NULL");
  const ocl_desc *d = &k->desc;
  const char *op = ocl_op_name(d->op);
  if (n_inputs != d->n_in || n_outputs != d->n_out)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: launched with %u input and %u output bindings, "
                     "prepared for %u and %u",
                     op, (unsigned)n_inputs, (unsigned)n_outputs,
                     (unsigned)d->n_in, (unsigned)d->n_out);
  ocl_arg in[OCL_MAX_IO], out[OCL_MAX_IO], ws = {NULL, 0};
  for (uint32_t i = 0; i < d->n_in; i++)
    if ((e = bind(dev, k, tpc_at(inputs, i), "input", i, &d->in[i], &in[i])) !=
        NULL)
      return e;
  int64_t written = 0;
  for (uint32_t i = 0; i < d->n_out; i++) {
    if ((e = bind(dev, k, tpc_at(outputs, i), "output", i, &d->out[i],
                  &out[i])) != NULL)
      return e;
    written += d->out[i].n > 0;
  }
  if (k->workspace_bytes > 0 &&
      (e = bind(dev, k, workspace, "workspace", 0, NULL, &ws)) != NULL)
    return e;
  if (written == 0)
    return NULL;
  pthread_mutex_lock(&k->lock);
  e = k->fam->launch(dev, s, k, in, out, &ws);
  pthread_mutex_unlock(&k->lock);
  return e;
}
