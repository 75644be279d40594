/*
 * Ops: supports_op, prepare, launch and kernel_release for COPY and FILL,
 * and the per-device cache of built programs.
 *
 * prepare() validates the descriptor, plans the layouts (layout.c) and
 * creates a cl_kernel from the program built for the dtype; the program is
 * built at most once per open device and (source, options) pair. launch()
 * checks the bound buffers against the planned extents, then enqueues.
 * Dense cases skip the kernel: a contiguous copy is clEnqueueCopyBuffer and
 * a contiguous fill clEnqueueFillBuffer, which drivers run at copy-engine
 * speed.
 */
#include "ocl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "layout.h"

#define HOST(dev) ((dev)->state->host)

/* Work-items per launch at most; each loops over the rest. 2^20 keeps any
 * GPU busy and fits a 32-bit device's size_t. */
#define MAX_GLOBAL ((size_t)1 << 20)
/* Build logs longer than this are cut in error messages. */
#define MAX_LOG 16384

struct tyto_plugin_kernel {
  /* clSetKernelArg and the enqueue that reads the arguments must not
   * interleave with a launch of the same kernel on another stream. */
  pthread_mutex_t lock;
  cl_kernel kernel;
  uint32_t op;    /* tyto_plugin_op */
  uint32_t dtype; /* F32 or F64 */
  size_t elem;    /* bytes per element */
  ocl_plan plan;
  double value; /* fill */
};

static const char *dtype_name(uint32_t d) {
  static const char *names[] = {"f32", "f64", "f16", "bf16",
                                "i32", "i64", "u8"};
  return d < sizeof names / sizeof names[0] ? names[d] : "unknown dtype";
}

static const char *op_name(uint32_t op) {
  return op == TYTO_PLUGIN_OP_COPY   ? "copy"
         : op == TYTO_PLUGIN_OP_FILL ? "fill"
                                     : "op";
}

/* A layout must carry every field of ABI 1.0: none of them has a default. */
static int layout_complete(const tyto_plugin_layout *l) {
  return TYTO_PLUGIN_HAS_FIELD(l, tyto_plugin_layout, offset);
}

/* Checks a descriptor against what this device can run. */
static tyto_plugin_error *check_desc(tyto_plugin_device *dev,
                                     const tyto_plugin_op_desc *desc) {
  const tyto_plugin_host *host = HOST(dev);
  const char *name = dev->info->name;
  if (desc == NULL || !TYTO_PLUGIN_HAS_FIELD(desc, tyto_plugin_op_desc, fattrs))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "op descriptor is NULL or shorter than ABI 1.0's");
  const char *op = op_name(desc->op);
  uint32_t want_in;
  if (desc->op == TYTO_PLUGIN_OP_COPY)
    want_in = 1;
  else if (desc->op == TYTO_PLUGIN_OP_FILL)
    want_in = 0;
  else
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "op %u is not supported by the opencl plugin (it runs "
                     "copy and fill)",
                     (unsigned)desc->op);
  if (desc->n_inputs != want_in || desc->n_outputs != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected %u input(s) and 1 output, got %u and %u", op,
                     (unsigned)want_in, (unsigned)desc->n_inputs,
                     (unsigned)desc->n_outputs);
  const tyto_plugin_layout *out = desc->outputs;
  const tyto_plugin_layout *in = want_in ? desc->inputs : NULL;
  if (out == NULL || !layout_complete(out) ||
      (want_in && (in == NULL || !layout_complete(in))))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: a layout is NULL or shorter than ABI 1.0's", op);
  if (desc->op == TYTO_PLUGIN_OP_FILL &&
      (desc->n_fattrs < 1 || desc->fattrs == NULL))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "fill: the value fattrs[0] is missing");
  uint32_t dt = out->dtype;
  if (in != NULL && in->dtype != dt)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "copy: input dtype %s differs from output dtype %s",
                     dtype_name(in->dtype), dtype_name(dt));
  if (in != NULL && in->rank != out->rank)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "copy: input rank %u differs from output rank %u",
                     (unsigned)in->rank, (unsigned)out->rank);
  if (in != NULL && in->rank <= TYTO_PLUGIN_MAX_RANK &&
      memcmp(in->shape, out->shape, in->rank * sizeof in->shape[0]) != 0) {
    char a[160], b[160];
    ocl_format_shape(in, a, sizeof a);
    ocl_format_shape(out, b, sizeof b);
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "copy: input shape %s differs from output shape %s", a, b);
  }
  if (dt != TYTO_PLUGIN_DTYPE_F32 && dt != TYTO_PLUGIN_DTYPE_F64)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype %s is not supported by the opencl plugin "
                     "(f32 and f64 only)",
                     op, dtype_name(dt));
  if (!(dev->info->dtypes & TYTO_PLUGIN_DTYPE_BIT(dt)))
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype %s is not supported by device \"%s\" (it "
                     "lacks cl_khr_fp64); use f32 or another device",
                     op, dtype_name(dt), name);
  if (!dev->info->has_compiler)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: device \"%s\" has no OpenCL C compiler "
                     "(CL_DEVICE_COMPILER_AVAILABLE is false), so it runs no "
                     "kernels",
                     op, name);
  if (!dev->info->has_int64)
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: device \"%s\" is an embedded-profile device "
                     "without 64-bit integers (cles_khr_int64), which the "
                     "kernels index with",
                     op, name);
  return NULL;
}

tyto_plugin_error *ocl_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc) {
  tyto_plugin_error *e = check_desc(dev, desc);
  if (e != NULL)
    return e;
  ocl_plan plan;
  char why[256];
  if (!ocl_plan_make(desc->op == TYTO_PLUGIN_OP_COPY ? desc->inputs : NULL,
                     desc->outputs, &plan, why, sizeof why))
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s",
                     op_name(desc->op), why);
  return NULL;
}

/* ---- program cache ----------------------------------------------------- */

/* An error carrying the compiler's log for a failed clBuildProgram. */
static tyto_plugin_error *build_error(tyto_plugin_device *dev, cl_program prog,
                                      cl_int err, const char *options) {
  size_t size = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(prog, dev->info->id, CL_PROGRAM_BUILD_LOG, 0, NULL,
                            &size) == CL_SUCCESS &&
      size > 0 && (log = malloc(size + 1)) != NULL) {
    if (clGetProgramBuildInfo(prog, dev->info->id, CL_PROGRAM_BUILD_LOG, size,
                              log, NULL) != CL_SUCCESS)
      log[0] = '\0';
    log[size] = '\0';
  }
  const char *text = log != NULL && log[0] != '\0' ? log : "(empty)";
  size_t len = strlen(text);
  int cut = len > MAX_LOG;
  tyto_plugin_error *e = HOST(dev)->error_new(
      ocl_code_for(err),
      "clBuildProgram failed with %s (%d) on \"%s\" (driver %s, options "
      "\"%s\"); this is a plugin or driver bug, please report it with this "
      "build log%s:\n%.*s",
      ocl_code_name(err), (int)err, dev->info->name, dev->info->driver_version,
      options, cut ? " (cut to its first 16 KiB)" : "",
      (int)(cut ? MAX_LOG : len), text);
  free(log);
  return e;
}

/* The program built from (source, options), from the cache or built now.
 * The cache owns it. Called with dev->lock held. */
static tyto_plugin_error *program_get(tyto_plugin_device *dev,
                                      const char *source, const char *options,
                                      cl_program *out) {
  for (ocl_program *p = dev->programs; p != NULL; p = p->next)
    if (strcmp(p->options, options) == 0 && strcmp(p->source, source) == 0) {
      *out = p->program;
      return NULL;
    }
  ocl_program *p = calloc(1, sizeof *p);
  if (p == NULL || (p->source = ocl_strdup(source)) == NULL ||
      (p->options = ocl_strdup(options)) == NULL) {
    if (p != NULL)
      free(p->source);
    free(p);
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  }
  cl_int err = CL_SUCCESS;
  tyto_plugin_error *e = NULL;
  p->program = clCreateProgramWithSource(dev->context, 1, &source, NULL, &err);
  if (p->program == NULL || err != CL_SUCCESS)
    e = ocl_error_cl(HOST(dev), "clCreateProgramWithSource",
                     err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                     "creating the kernels' program on \"%s\"",
                     dev->info->name);
  else if ((err = clBuildProgram(p->program, 1, &dev->info->id, options, NULL,
                                 NULL)) != CL_SUCCESS)
    e = build_error(dev, p->program, err, options);
  if (e != NULL) {
    if (p->program != NULL)
      clReleaseProgram(p->program);
    free(p->source);
    free(p->options);
    free(p);
    return e;
  }
  p->next = dev->programs;
  dev->programs = p;
  *out = p->program;
  return NULL;
}

void ocl_programs_release(tyto_plugin_device *dev) {
  ocl_program *p = dev->programs;
  while (p != NULL) {
    ocl_program *next = p->next;
    clReleaseProgram(p->program);
    free(p->source);
    free(p->options);
    free(p);
    p = next;
  }
  dev->programs = NULL;
}

/* ---- prepare / release ------------------------------------------------- */

tyto_plugin_error *ocl_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  if (out == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "prepare: out is NULL");
  tyto_plugin_error *e = check_desc(dev, desc);
  if (e != NULL)
    return e;
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (k == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->op = desc->op;
  k->dtype = desc->outputs->dtype;
  k->elem = k->dtype == TYTO_PLUGIN_DTYPE_F64 ? 8 : 4;
  k->value = k->op == TYTO_PLUGIN_OP_FILL ? desc->fattrs[0] : 0.0;
  char why[256];
  if (!ocl_plan_make(k->op == TYTO_PLUGIN_OP_COPY ? desc->inputs : NULL,
                     desc->outputs, &k->plan, why, sizeof why)) {
    free(k);
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s",
                     op_name(desc->op), why);
  }
  const char *options = k->dtype == TYTO_PLUGIN_DTYPE_F64
                            ? "-DT=double -DTYTO_FP64"
                            : "-DT=float";
  cl_program prog = NULL;
  pthread_mutex_lock(&dev->lock);
  e = program_get(dev, ocl_kernel_source, options, &prog);
  pthread_mutex_unlock(&dev->lock);
  if (e != NULL) {
    free(k);
    return e;
  }
  /* Every prepared kernel gets its own cl_kernel: arguments are state of
   * the cl_kernel, and two kernels must not share it. */
  const char *kname = k->op == TYTO_PLUGIN_OP_COPY ? "tyto_copy" : "tyto_fill";
  cl_int err = CL_SUCCESS;
  k->kernel = clCreateKernel(prog, kname, &err);
  if (k->kernel == NULL || err != CL_SUCCESS) {
    free(k);
    return ocl_error_cl(HOST(dev), "clCreateKernel",
                        err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                        "creating kernel %s (%s) on \"%s\"", kname,
                        dtype_name(desc->outputs->dtype), dev->info->name);
  }
  if (pthread_mutex_init(&k->lock, NULL) != 0) {
    clReleaseKernel(k->kernel);
    free(k);
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: cannot create a mutex");
  }
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = 0;
  *out = k;
  return NULL;
}

void ocl_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  if (k == NULL)
    return;
  clReleaseKernel(k->kernel);
  pthread_mutex_destroy(&k->lock);
  free(k);
}

/* ---- launch ------------------------------------------------------------ */

/* Resolves one binding into its buffer and base element index, checking
 * that the planned element range [lo, hi] lies inside the buffer. */
static tyto_plugin_error *bind(tyto_plugin_device *dev,
                               const tyto_plugin_kernel *k,
                               const tyto_plugin_binding *b, const char *side,
                               int64_t lo, int64_t hi, tyto_plugin_buffer **buf,
                               int64_t *base) {
  const char *op = op_name(k->op);
  if (b == NULL || !TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, buffer) ||
      b->buffer == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the %s binding has no buffer", op, side);
  uint64_t offset =
      TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, offset) ? b->offset : 0;
  if (offset % k->elem != 0)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the %s binding's offset %llu is not a multiple of "
                     "the %s element size %zu",
                     op, side, (unsigned long long)offset, dtype_name(k->dtype),
                     k->elem);
  *buf = b->buffer;
  *base = (int64_t)(offset / k->elem); /* < 2^62: offset is a uint64 */
  if (k->plan.n == 0)
    return NULL;
  int64_t first, last;
  int64_t count = (int64_t)(b->buffer->size / k->elem);
  if (!ocl_add_ok(*base, lo, &first) || !ocl_add_ok(*base, hi, &last) ||
      first < 0 || last >= count)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the %s layout reaches elements %lld to %lld past "
                     "the binding (offset %llu bytes), outside its "
                     "%llu-byte buffer (%lld %s elements)",
                     op, side, (long long)lo, (long long)hi,
                     (unsigned long long)offset,
                     (unsigned long long)b->buffer->size, (long long)count,
                     dtype_name(k->dtype));
  return NULL;
}

static cl_long8 long8_of(const int64_t *v) {
  cl_long8 r;
  for (int i = 0; i < 8; i++)
    r.s[i] = v[i];
  return r;
}

/* Sets the arguments and enqueues the kernel on `q`. */
static cl_int enqueue_kernel(tyto_plugin_kernel *k, cl_command_queue q,
                             cl_mem in, int64_t in_base, cl_mem out,
                             int64_t out_base, cl_event *ev) {
  const ocl_plan *p = &k->plan;
  cl_long8 shape = long8_of(p->shape), istr = long8_of(p->in_strides),
           ostr = long8_of(p->out_strides);
  cl_long ib = in_base + p->in_offset, ob = out_base + p->out_offset;
  cl_long n = p->n;
  cl_int rank = (cl_int)p->rank;
  cl_float vf = (cl_float)k->value;
  cl_double vd = k->value;
  cl_uint a = 0;
  cl_int err = CL_SUCCESS;

#define ARG(size, ptr)                                                         \
  do {                                                                         \
    if (err == CL_SUCCESS)                                                     \
      err = clSetKernelArg(k->kernel, a++, (size), (ptr));                     \
  } while (0)
  pthread_mutex_lock(&k->lock);
  if (k->op == TYTO_PLUGIN_OP_COPY) {
    ARG(sizeof in, &in);
    ARG(sizeof ib, &ib);
    ARG(sizeof istr, &istr);
  }
  ARG(sizeof out, &out);
  ARG(sizeof ob, &ob);
  ARG(sizeof ostr, &ostr);
  ARG(sizeof shape, &shape);
  ARG(sizeof rank, &rank);
  ARG(sizeof n, &n);
  if (k->op == TYTO_PLUGIN_OP_FILL) {
    int f64 = k->dtype == TYTO_PLUGIN_DTYPE_F64;
    ARG(f64 ? sizeof vd : sizeof vf,
        f64 ? (const void *)&vd : (const void *)&vf);
  }
#undef ARG
  /* A multiple of 64 lets the driver pick any work-group size up to 64. */
  size_t global = (size_t)n < MAX_GLOBAL ? (size_t)n : MAX_GLOBAL;
  global = (global + 63) / 64 * 64;
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(q, k->kernel, 1, NULL, &global, NULL, 0, NULL,
                                 ev);
  pthread_mutex_unlock(&k->lock);
  return err;
}

tyto_plugin_error *
ocl_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  (void)workspace; /* prepare() asks for none */
  tyto_plugin_error *e = ocl_stream_check(dev, s, "launch");
  if (e != NULL)
    return e;
  if (k == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "launch: the kernel is NULL");
  const char *op = op_name(k->op);
  uint32_t want_in = k->op == TYTO_PLUGIN_OP_COPY ? 1 : 0;
  if (n_inputs != want_in || n_outputs != 1)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: launched with %u input and %u output bindings, "
                     "prepared for %u and 1",
                     op, (unsigned)n_inputs, (unsigned)n_outputs,
                     (unsigned)want_in);
  const ocl_plan *p = &k->plan;
  tyto_plugin_buffer *in = NULL, *out = NULL;
  int64_t in_base = 0, out_base = 0;
  if ((want_in && (e = bind(dev, k, inputs, "input", p->in_lo, p->in_hi, &in,
                            &in_base)) != NULL) ||
      (e = bind(dev, k, outputs, "output", p->out_lo, p->out_hi, &out,
                &out_base)) != NULL)
    return e;
  if (p->n == 0)
    return NULL;

  /* First element of each side, in bytes, for the dense paths. */
  size_t bytes = (size_t)p->n * k->elem;
  size_t in_at = (size_t)(in_base + p->in_lo) * k->elem;
  size_t out_at = (size_t)(out_base + p->out_lo) * k->elem;
  int dense_copy = k->op == TYTO_PLUGIN_OP_COPY && p->in_dense && p->out_dense;
  if (dense_copy && in == out) {
    if (in_at == out_at)
      return NULL; /* onto itself: nothing changes */
    /* clEnqueueCopyBuffer refuses overlap; the kernel path copies
     * element-wise with no order guarantee, as for any aliased copy. */
    if (in_at < out_at + bytes && out_at < in_at + bytes)
      dense_copy = 0;
  }
  if ((e = ocl_stream_reserve(s)) != NULL)
    return e;
  cl_event ev = NULL;
  cl_int err;
  const char *call, *what;
  if (dense_copy) {
    call = "clEnqueueCopyBuffer";
    what = "copy kernel (as a buffer copy)";
    err = clEnqueueCopyBuffer(s->queue, in->mem, out->mem, in_at, out_at, bytes,
                              0, NULL, &ev);
  } else if (k->op == TYTO_PLUGIN_OP_FILL && p->out_dense) {
    cl_float vf = (cl_float)k->value;
    cl_double vd = k->value;
    call = "clEnqueueFillBuffer";
    what = "fill kernel (as a buffer fill)";
    err = clEnqueueFillBuffer(s->queue, out->mem,
                              k->elem == 8 ? (const void *)&vd
                                           : (const void *)&vf,
                              k->elem, out_at, bytes, 0, NULL, &ev);
  } else {
    call = "clEnqueueNDRangeKernel";
    what = k->op == TYTO_PLUGIN_OP_COPY ? "copy kernel" : "fill kernel";
    err = enqueue_kernel(k, s->queue, in != NULL ? in->mem : NULL, in_base,
                         out->mem, out_base, &ev);
  }
  if (err != CL_SUCCESS) {
    if (ev != NULL)
      clReleaseEvent(ev);
    return ocl_error_cl(HOST(dev), call, err,
                        "launching %s (%s, %lld "
                        "elements) on \"%s\"",
                        op, dtype_name(k->dtype), (long long)p->n,
                        dev->info->name);
  }
  ocl_stream_track(s, ev, what);
  return NULL;
}
