/*
 * RANDOM_UNIFORM, RANDOM_NORMAL, RANDOM_BERNOULLI: Philox-4x32-10 streams
 * exactly as sdk/docs/random.md defines them, so that uniform and
 * bernoulli outputs equal the CPU plugin's (plugins/cpu/philox.h) bit for
 * bit and normal outputs equal them to the accuracy of the device's log,
 * sqrt, sin and cos.
 *
 * One work-item computes one Philox block (counter offset + c, the four
 * lanes of elements 4c .. 4c + 3 of the row-major output) and stores its
 * up to four values through the output's layout, planned at prepare
 * (layout.c: unit dimensions dropped, neighbours merged, row-major order
 * kept). A layout planned to one dimension (any contiguous or evenly
 * strided output) runs the _1d kernel, which indexes i * stride; any other
 * runs the _nd kernel, which goes through the prelude's tyto_offset().
 *
 * f16 and bf16 draw the f32 numbers and round each once when stored.
 *
 * The step input (ABI 1.3) is read back at launch with a blocking read
 * on the stream: the doc makes a step outside [0, 2^53] fail the launch
 * with INVALID_ARGUMENT, and a kernel cannot fail its own event with a
 * code of our choosing. The read waits for the work queued before it on
 * the stream (the step is usually computed there), so a stepped draw
 * costs one round trip to the device; draws without a step never block.
 */
#include "ops.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "errors.h"
#include "layout.h"

static const char source[] =
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "#if defined(TYTO_FP64)\n"
    "#define TYTO_U01(r) (((double)(r) + 0.5) * 0x1p-32)\n"
    "#define TYTO_TWO_PI 6.28318530717958647692\n"
    "#else\n"
    "#define TYTO_U01(r) (((float)((r) >> 9) + 0.5f) * 0x1p-23f)\n"
    "#define TYTO_TWO_PI 6.28318530717958647692f\n"
    "#endif\n"
    "/* Philox-4x32-10 (random.md): ten rounds, nine key bumps. The\n"
    " * high and low words come from one 32 x 32 -> 64-bit product: GPU\n"
    " * compilers emit a widening multiply for it, and PoCL ran it twice\n"
    " * as fast as mul_hi() plus a 32-bit product. */\n"
    "inline uint4 tyto_philox(uint4 c, uint k0, uint k1) {\n"
    "  for (int r = 0; r < 10; r++) {\n"
    "    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }\n"
    "    ulong p0 = (ulong)0xD2511F53u * c.x;\n"
    "    ulong p1 = (ulong)0xCD9E8D57u * c.z;\n"
    "    c = (uint4)((uint)(p1 >> 32) ^ c.y ^ k0, (uint)p1,\n"
    "                (uint)(p0 >> 32) ^ c.w ^ k1, (uint)p0);\n"
    "  }\n"
    "  return c;\n"
    "}\n"
    "/* Stores value v of row-major element i when i < n. With nd a constant\n"
    " * 0 (the layout is one dimension) the compiler drops tyto_offset(). */\n"
    "inline void tyto_put(__global TS *out, long base, long8 shape,\n"
    "                     long8 str, int rank, long n, long i, T v,\n"
    "                     const int nd) {\n"
    "  if (i < n)\n"
    "    TST(out, base + (nd ? tyto_offset(i, shape, str, rank)\n"
    "                        : i * str.s0), v);\n"
    "}\n"
    "#define TYTO_ARGS __global TS *out, long base, long8 shape, \\\n"
    "  long8 str, \\\n"
    "  int rank, long n, uint k0, uint k1, ulong off, uint s0, uint s1\n"
    "#define TYTO_PASS out, base, shape, str, rank, n, k0, k1, off, s0, s1\n"
    "/* Work-item c draws block offset + c: elements 4c .. 4c + 3. */\n"
    "#define TYTO_LOOP(body) \\\n"
    "  TYTO_FOR(c, (n + 3) / 4) { \\\n"
    "    ulong ctr = off + (ulong)c; \\\n"
    "    uint4 r = tyto_philox( \\\n"
    "        (uint4)((uint)ctr, (uint)(ctr >> 32), s0, s1), k0, k1); \\\n"
    "    T v0, v1, v2, v3; \\\n"
    "    body \\\n"
    "    tyto_put(out, base, shape, str, rank, n, 4 * c, v0, nd); \\\n"
    "    tyto_put(out, base, shape, str, rank, n, 4 * c + 1, v1, nd); \\\n"
    "    tyto_put(out, base, shape, str, rank, n, 4 * c + 2, v2, nd); \\\n"
    "    tyto_put(out, base, shape, str, rank, n, 4 * c + 3, v3, nd); \\\n"
    "  }\n"
    "inline void tyto_uniform(TYTO_ARGS, T low, T high, const int nd) {\n"
    "  T span = high - low;\n"
    "  TYTO_LOOP(v0 = fma(span, TYTO_U01(r.x), low);\n"
    "            v1 = fma(span, TYTO_U01(r.y), low);\n"
    "            v2 = fma(span, TYTO_U01(r.z), low);\n"
    "            v3 = fma(span, TYTO_U01(r.w), low);)\n"
    "}\n"
    "/* Box-Muller on the lane pairs (x, y) and (z, w). */\n"
    "inline void tyto_normal(TYTO_ARGS, T mean, T sd, const int nd) {\n"
    "  TYTO_LOOP(T rad0 = sqrt((T)-2 * log(TYTO_U01(r.x)));\n"
    "            T t0 = TYTO_TWO_PI * TYTO_U01(r.y);\n"
    "            T rad1 = sqrt((T)-2 * log(TYTO_U01(r.z)));\n"
    "            T t1 = TYTO_TWO_PI * TYTO_U01(r.w);\n"
    "            v0 = fma(sd, rad0 * cos(t0), mean);\n"
    "            v1 = fma(sd, rad0 * sin(t0), mean);\n"
    "            v2 = fma(sd, rad1 * cos(t1), mean);\n"
    "            v3 = fma(sd, rad1 * sin(t1), mean);)\n"
    "}\n"
    "/* u64(r) < p as r < thr, thr = ceil(p * 2^32 - 0.5) in [0, 2^32]. */\n"
    "inline void tyto_bernoulli(TYTO_ARGS, ulong thr, const int nd) {\n"
    "  TYTO_LOOP(v0 = (ulong)r.x < thr ? (T)1 : (T)0;\n"
    "            v1 = (ulong)r.y < thr ? (T)1 : (T)0;\n"
    "            v2 = (ulong)r.z < thr ? (T)1 : (T)0;\n"
    "            v3 = (ulong)r.w < thr ? (T)1 : (T)0;)\n"
    "}\n"
    "/* _1d: layouts planned to at most one dimension; _nd: any layout. */\n"
    "#define TYTO_KERNEL(op, p1, p2) \\\n"
    "  __kernel void tyto_random_##op##_1d(TYTO_ARGS, p1, p2) { \\\n"
    "    tyto_##op(TYTO_PASS, a, b, 0); \\\n"
    "  } \\\n"
    "  __kernel void tyto_random_##op##_nd(TYTO_ARGS, p1, p2) { \\\n"
    "    tyto_##op(TYTO_PASS, a, b, 1); \\\n"
    "  }\n"
    "TYTO_KERNEL(uniform, T a, T b)\n"
    "TYTO_KERNEL(normal, T a, T b)\n"
    "#undef TYTO_KERNEL\n"
    "__kernel void tyto_random_bernoulli_1d(TYTO_ARGS, ulong thr) {\n"
    "  tyto_bernoulli(TYTO_PASS, thr, 0);\n"
    "}\n"
    "__kernel void tyto_random_bernoulli_nd(TYTO_ARGS, ulong thr) {\n"
    "  tyto_bernoulli(TYTO_PASS, thr, 1);\n"
    "}\n";

typedef struct random_impl {
  cl_kernel kernel;
  ocl_plan plan;
  uint64_t seed, offset;
  double a, b;  /* low, high / mean, stddev / p */
  cl_ulong thr; /* bernoulli: r < thr draws a 1 */
  int stepped;  /* one input: the step */
} random_impl;

static int owns(uint32_t op) {
  return op >= TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
         op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *name = ocl_op_name(d->op);
  const tyto_plugin_op_desc *od = d->d;
  uint32_t want_f = d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2;
  if (d->n_in > 1 || d->n_out != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected 0 inputs (or a step) and 1 output, got %u "
                     "and %u",
                     name, (unsigned)d->n_in, (unsigned)d->n_out);
  /* kernels.c checked that the step has the output's dtype. */
  if (d->n_in == 1 && d->in[0].l.rank != 0)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the step input must be a rank-0 %s tensor, got "
                     "rank %u",
                     name, ocl_dtype_name(d->dtype), (unsigned)d->in[0].l.rank);
  if (od->n_iattrs != 2)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected 2 integer attributes (seed, offset), got "
                     "%u",
                     name, (unsigned)od->n_iattrs);
  if (od->n_fattrs != want_f)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected %u real attributes (%s), got %u", name,
                     (unsigned)want_f,
                     d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "low, high"
                     : d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "mean, stddev"
                                                             : "p",
                     (unsigned)od->n_fattrs);
  double a = od->fattrs[0], b = want_f > 1 ? od->fattrs[1] : 0;
  /* The largest finite value of the dtype. */
  double lim = d->dtype == TYTO_PLUGIN_DTYPE_F64    ? DBL_MAX
               : d->dtype == TYTO_PLUGIN_DTYPE_BF16 ? 0x1.fep127
               : d->dtype == TYTO_PLUGIN_DTYPE_F16  ? 65504.0
                                                    : FLT_MAX;
  if (d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      !(fabs(a) <= lim && fabs(b) <= lim && a <= b))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected finite low <= high in the output's dtype "
                     "%s, got low %g, high %g",
                     name, ocl_dtype_name(d->dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL &&
      !(fabs(a) <= lim && b >= 0 && b <= lim))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected a finite mean and a finite stddev >= 0 in "
                     "the output's dtype %s, got mean %g, stddev %g",
                     name, ocl_dtype_name(d->dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI && !(a >= 0 && a <= 1))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected a probability p in [0, 1], got %g", name, a);
  ocl_plan plan;
  char why[256];
  if (!ocl_plan_make(NULL, &d->out[0].l, &plan, why, sizeof why))
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: %s", name,
                     why);
  return NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  random_impl *r = calloc(1, sizeof *r);
  if (r == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = r;
  r->seed = (uint64_t)d->d->iattrs[0];
  r->offset = (uint64_t)d->d->iattrs[1];
  r->a = d->d->fattrs[0];
  r->b = d->d->n_fattrs > 1 ? d->d->fattrs[1] : 0;
  r->stepped = d->n_in == 1;
  if (d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI) {
    /* (r + 0.5) 2^-32 < p  <=>  r < p 2^32 - 0.5 (exact in binary64)
     * <=>  r < ceil(p 2^32 - 0.5), clamped to [0, 2^32] (random.md). */
    double t = ceil(r->a * 0x1p32 - 0.5);
    r->thr = t <= 0 ? 0 : t >= 0x1p32 ? (cl_ulong)1 << 32 : (cl_ulong)t;
  }
  char why[256];
  if (!ocl_plan_make(NULL, &d->out[0].l, &r->plan, why, sizeof why))
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INTERNAL, "%s", why);
  char kname[64];
  snprintf(kname, sizeof kname, "tyto_%s_%s", ocl_op_name(d->op),
           r->plan.rank <= 1 ? "1d" : "nd");
  return ocl_kernel_new(dev, d->dtype, source, NULL, kname, &r->kernel);
}

static void release(tyto_plugin_kernel *k) {
  random_impl *r = k->impl;
  if (r == NULL)
    return;
  if (r->kernel != NULL)
    clReleaseKernel(r->kernel);
  free(r);
  k->impl = NULL;
}

/* The step's value, truncated, into *step: read back from the device
 * (blocking, after the work queued before it on s), then checked to lie in
 * [0, 2^53] as random.md requires. */
static tyto_plugin_error *read_step(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    const tyto_plugin_kernel *k,
                                    const ocl_arg *in, uint64_t *step) {
  const char *name = ocl_op_name(k->desc.op);
  size_t elem = k->desc.elem;
  unsigned char bytes[8];
  tyto_plugin_error *e = ocl_read(dev, s, in->mem, (size_t)in->origin * elem,
                                  elem, bytes, name, "the step input");
  if (e != NULL)
    return e;
  double v;
  if (elem == 2) {
    uint16_t h;
    memcpy(&h, bytes, sizeof h);
    v = k->desc.dtype == TYTO_PLUGIN_DTYPE_BF16 ? tpc_bf16_to_f32(h)
                                                : tpc_f16_to_f32(h);
  } else if (elem == 4) {
    cl_float f;
    memcpy(&f, bytes, sizeof f);
    v = f;
  } else {
    memcpy(&v, bytes, sizeof v);
  }
  if (!(v >= 0 && v <= 0x1p53))
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: step %g is not in [0, 2^53]", name, v);
  *step = (uint64_t)v;
  return NULL;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  (void)ws;
  random_impl *r = k->impl;
  const ocl_plan *p = &r->plan;
  uint64_t step = 0;
  tyto_plugin_error *e = NULL;
  if (r->stepped && (e = read_step(dev, s, k, &in[0], &step)) != NULL)
    return e;
  cl_long8 shape, str;
  for (int i = 0; i < 8; i++) {
    shape.s[i] = (uint32_t)i < p->rank ? p->shape[i] : 1;
    str.s[i] = (uint32_t)i < p->rank ? p->out_strides[i] : 0;
  }
  /* The plan's offset is the layout's: the origin includes it. */
  cl_long base = out[0].origin, n = p->n;
  cl_int rank = (cl_int)p->rank;
  cl_uint k0 = (cl_uint)r->seed, k1 = (cl_uint)(r->seed >> 32);
  cl_uint s0 = (cl_uint)step, s1 = (cl_uint)(step >> 32);
  cl_ulong off = r->offset;
  int f64 = k->desc.celem == 8; /* the parameters' type */
  cl_float af = (cl_float)r->a, bf = (cl_float)r->b;
  cl_double ad = r->a, bd = r->b;
  ocl_args a = OCL_ARGS(dev, r->kernel);
  ocl_args_put(&a, sizeof out[0].mem, &out[0].mem);
  ocl_args_put(&a, sizeof base, &base);
  ocl_args_put(&a, sizeof shape, &shape);
  ocl_args_put(&a, sizeof str, &str);
  ocl_args_put(&a, sizeof rank, &rank);
  ocl_args_put(&a, sizeof n, &n);
  ocl_args_put(&a, sizeof k0, &k0);
  ocl_args_put(&a, sizeof k1, &k1);
  ocl_args_put(&a, sizeof off, &off);
  ocl_args_put(&a, sizeof s0, &s0);
  ocl_args_put(&a, sizeof s1, &s1);
  if (k->desc.op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI) {
    ocl_args_put(&a, sizeof r->thr, &r->thr);
  } else if (f64) {
    ocl_args_put(&a, sizeof ad, &ad);
    ocl_args_put(&a, sizeof bd, &bd);
  } else {
    ocl_args_put(&a, sizeof af, &af);
    ocl_args_put(&a, sizeof bf, &bf);
  }
  if (a.e != NULL)
    return a.e;
  return ocl_enqueue_n(
      dev, s, r->kernel, (n + 3) / 4,
      k->desc.op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "random_uniform kernel"
      : k->desc.op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "random_normal kernel"
                                                   : "random_bernoulli kernel");
}

const ocl_family ocl_family_random = {"random", owns,   check,
                                      prepare,  launch, release};
