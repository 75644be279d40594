/*
 * RANDOM_UNIFORM, RANDOM_NORMAL, RANDOM_BERNOULLI: Philox-4x32-10 streams
 * exactly as sdk/docs/random.md defines them, so that uniform and
 * bernoulli outputs equal the CPU plugin's (plugins/cpu/philox.h) bit for
 * bit and normal outputs equal them to the accuracy of CUDA's logf, sinf,
 * cosf (log, sin, cos for f64). The kernels are compiled without FMA
 * contraction (NVRTC --fmad=false), so every product and sum rounds as the
 * CPU's does, and the one fused multiply-add random.md asks for is an
 * explicit fmaf / fma.
 *
 * One thread of a grid-stride loop computes one Philox block (counter
 * offset + c, the four lanes of row-major elements 4c .. 4c + 3) and
 * stores its up to four values through the output's layout: i * stride
 * when the layout is evenly strided in row-major order (any contiguous
 * output), the prelude's tyto_offset() otherwise.
 *
 * The step input (ABI 1.3) is read by the kernel itself. random.md makes
 * a step outside [0, 2^53] an INVALID_ARGUMENT error: the kernel then
 * writes nothing, records the op and the step in its stream's fault words
 * (page-locked host memory, cuda_plugin.h), and the stream's next
 * synchronisation returns the error. So a stepped draw never waits for the
 * device and can be recorded into a graph. A stream without fault words
 * (their allocation failed) falls back to reading the step back at launch,
 * as the OpenCL plugin does.
 *
 * f16 and bf16 draw the f32 values (bit for bit the CPU plugin's f32
 * draw) and round each to the dtype once; the bounds must be finite in
 * the dtype.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "ops.h"

static const char step_source[] =
    "/* A step read here (step != 0) replaces s0, s1; one outside [0, 2^53]\n"
    "   is reported in the fault words (the first fault wins) and nothing is\n"
    "   written. The truncation is the CPU's: (u64)(double)step. */\n"
    "#define TR_STEP                                                     \\\n"
    "  if (step != nullptr) {                                            \\\n"
    "    double sv = (double)LD(*step);                                  \\\n"
    "    if (!(sv >= 0.0 && sv <= 9007199254740992.0)) {                 \\\n"
    "      if (blockIdx.x == 0 && threadIdx.x == 0 &&                    \\\n"
    "          atomicCAS(fault, 0u, code) == 0u) {                       \\\n"
    "        u64 b = (u64)__double_as_longlong(sv);                      \\\n"
    "        fault[2] = (u32)b;                                          \\\n"
    "        fault[3] = (u32)(b >> 32);                                  \\\n"
    "        __threadfence_system();                                     \\\n"
    "      }                                                             \\\n"
    "      return;                                                       \\\n"
    "    }                                                               \\\n"
    "    u64 st = (u64)sv;                                               \\\n"
    "    s0 = (u32)st;                                                   \\\n"
    "    s1 = (u32)(st >> 32);                                           \\\n"
    "  }\n"
    "/* Thread c draws block off + c: elements 4c .. 4c + 3 (those < n),\n"
    "   stored at row-major index i of the output's layout. */\n";

static const char source[] =
    "/* The uniforms of random.md, exact in their dtype: 2^-23 and 2^-32\n"
    "   written out in decimal (exactly representable). */\n"
    "__device__ __forceinline__ float tr_u01(u32 r, float) {\n"
    "  return ((float)(r >> 9) + 0.5f) * 1.1920928955078125e-07f;\n"
    "}\n"
    "__device__ __forceinline__ double tr_u01(u32 r, double) {\n"
    "  return ((double)r + 0.5) * 2.3283064365386962890625e-10;\n"
    "}\n"
    "__device__ __forceinline__ float tr_fma(float a, float b, float c) {\n"
    "  return fmaf(a, b, c);\n"
    "}\n"
    "__device__ __forceinline__ double tr_fma(double a, double b, double c) "
    "{\n"
    "  return fma(a, b, c);\n"
    "}\n"
    "/* Box-Muller (Box and Muller, 1958) on the pair (u1, u2): rad cos t\n"
    "   and rad sin t, in the dtype's own functions as on the CPU. */\n"
    "__device__ __forceinline__ void tr_bm(u32 r1, u32 r2, float *c,\n"
    "                                      float *s) {\n"
    "  float rad = sqrtf(-2.0f * logf(tr_u01(r1, 0.0f)));\n"
    "  float t = 6.28318530717958647692f * tr_u01(r2, 0.0f);\n"
    "  *c = rad * cosf(t);\n"
    "  *s = rad * sinf(t);\n"
    "}\n"
    "__device__ __forceinline__ void tr_bm(u32 r1, u32 r2, double *c,\n"
    "                                      double *s) {\n"
    "  double rad = sqrt(-2.0 * log(tr_u01(r1, 0.0)));\n"
    "  double t = 6.28318530717958647692 * tr_u01(r2, 0.0);\n"
    "  *c = rad * cos(t);\n"
    "  *s = rad * sin(t);\n"
    "}\n"
    "/* Philox-4x32-10 (random.md): ten rounds, nine key bumps; the high\n"
    "   and low words of each product from one 32 x 32 -> 64-bit multiply. */\n"
    "__device__ __forceinline__ void tr_philox(u32 c[4], u32 k0, u32 k1) {\n"
    "#pragma unroll\n"
    "  for (int r = 0; r < 10; r++) {\n"
    "    if (r > 0) {\n"
    "      k0 += 0x9E3779B9u;\n"
    "      k1 += 0xBB67AE85u;\n"
    "    }\n"
    "    u64 p0 = (u64)0xD2511F53u * c[0], p1 = (u64)0xCD9E8D57u * c[2];\n"
    "    u32 x0 = (u32)(p1 >> 32) ^ c[1] ^ k0, x2 = (u32)(p0 >> 32) ^ c[3] ^ "
    "k1;\n"
    "    c[0] = x0;\n"
    "    c[1] = (u32)p1;\n"
    "    c[2] = x2;\n"
    "    c[3] = (u32)p0;\n"
    "  }\n"
    "}\n"
    "#define TR_ARGS S *out, tcu_dims d, int nd, i64 ls, i64 n, u32 k0, \\\n"
    "  u32 k1, u64 off, u32 s0, u32 s1, const S *step, u32 *fault, u32 code\n"
    "#define TR_LOOP(...)                                                \\\n"
    "  TR_STEP                                                           \\\n"
    "  TYTO_FOR(c, (n + 3) / 4) {                                        \\\n"
    "    u64 ctr = off + (u64)c;                                         \\\n"
    "    u32 r[4] = {(u32)ctr, (u32)(ctr >> 32), s0, s1};                \\\n"
    "    tr_philox(r, k0, k1);                                           \\\n"
    "    T v[4];                                                         \\\n"
    "    __VA_ARGS__                                                     \\\n"
    "    for (int j = 0; j < 4; j++) {                                   \\\n"
    "      i64 i = 4 * c + j;                                            \\\n"
    "      if (i < n)                                                    \\\n"
    "        out[nd ? tyto_offset(i, d) : i * ls] = ST(v[j]);            \\\n"
    "    }                                                               \\\n"
    "  }\n"
    "extern \"C\" __global__ void tyto_random_uniform(TR_ARGS, T low,\n"
    "                                                T high) {\n"
    "  T span = high - low;\n"
    "  TR_LOOP(for (int j = 0; j < 4; j++)\n"
    "            v[j] = tr_fma(span, tr_u01(r[j], (T)0), low);)\n"
    "}\n"
    "extern \"C\" __global__ void tyto_random_normal(TR_ARGS, T mean, T sd) {\n"
    "  TR_LOOP(for (int j = 0; j < 4; j += 2) {\n"
    "            T zc, zs;\n"
    "            tr_bm(r[j], r[j + 1], &zc, &zs);\n"
    "            v[j] = tr_fma(sd, zc, mean);\n"
    "            v[j + 1] = tr_fma(sd, zs, mean);\n"
    "          })\n"
    "}\n"
    "/* u64(r) < p as r < thr, thr = ceil(p 2^32 - 0.5) in [0, 2^32]. */\n"
    "extern \"C\" __global__ void tyto_random_bernoulli(TR_ARGS, u64 thr) {\n"
    "  TR_LOOP(for (int j = 0; j < 4; j++)\n"
    "            v[j] = (u64)r[j] < thr ? (T)1 : (T)0;)\n"
    "}\n";

typedef struct random_impl {
  cudaKernel_t fn;
  tcu_dims dims; /* the output's, for tyto_offset() */
  int nd;        /* 0: element i is at i * ls */
  int64_t ls;
  uint64_t seed, offset;
  double a, b;  /* low, high / mean, stddev / p */
  uint64_t thr; /* bernoulli: r < thr draws a 1 */
  int stepped;  /* one input: the step */
} random_impl;

static dim3 dim3_of(unsigned x) {
  dim3 d = {x, 1, 1};
  return d;
}

static int owns(uint32_t op) {
  return op >= TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
         op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI;
}

/* Whether x is finite in dtype dt: at most its largest value (f32, f64),
 * or finite once rounded to it (f16, bf16). */
static int finite_in(uint32_t dt, double x) {
  if (dt == TYTO_PLUGIN_DTYPE_F16)
    return x == x && (tpc_f64_to_f16(x) & 0x7c00u) != 0x7c00u;
  if (dt == TYTO_PLUGIN_DTYPE_BF16)
    return x == x && (tpc_f64_to_bf16(x) & 0x7f80u) != 0x7f80u;
  return fabs(x) <= (dt == TYTO_PLUGIN_DTYPE_F32 ? FLT_MAX : DBL_MAX);
}

/* The checks of plugins/cpu/random.c, with its messages. */
static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *name = tcu_op_name(d->op);
  const tyto_plugin_op_desc *od = d->d;
  uint32_t want_f = d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2;
  if (d->n_in > 1 || d->n_out != 1)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected 0 inputs (or a step) and 1 output, "
                           "got %u and %u",
                           name, (unsigned)d->n_in, (unsigned)d->n_out);
  /* kernels.c checked that the step has the output's dtype. */
  if (d->n_in == 1 && d->in[0].l.rank != 0)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: the step input must be a rank-0 %s tensor, "
                           "got rank %u",
                           name, tcu_dtype_name(d->dtype),
                           (unsigned)d->in[0].l.rank);
  if (od->n_iattrs != 2)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected 2 integer attributes (seed, offset), "
                           "got %u",
                           name, (unsigned)od->n_iattrs);
  if (od->n_fattrs != want_f)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: expected %u real attributes (%s), got %u", name, (unsigned)want_f,
        d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "low, high"
        : d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "mean, stddev"
                                                : "p",
        (unsigned)od->n_fattrs);
  double a = od->fattrs[0], b = want_f > 1 ? od->fattrs[1] : 0;
  const uint32_t dt = d->dtype;
  if (d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      !(finite_in(dt, a) && finite_in(dt, b) && a <= b))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected finite low <= high in the output's "
                           "dtype %s, got low %g, high %g",
                           name, tcu_dtype_name(d->dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL &&
      !(finite_in(dt, a) && b >= 0 && finite_in(dt, b)))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected a finite mean and a finite stddev "
                           ">= 0 in the output's dtype %s, got mean %g, "
                           "stddev %g",
                           name, tcu_dtype_name(d->dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI && !(a >= 0 && a <= 1))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected a probability p in [0, 1], got %g",
                           name, a);
  return NULL;
}

/* Whether l stores row-major index i at i * *ls for one *ls (any
 * contiguous layout, a strided vector, a scalar). */
static int evenly_strided(const tyto_plugin_layout *l, int64_t *ls) {
  int64_t unit = 0, span = 1; /* span: elements of the axes right of a */
  for (uint32_t a = l->rank; a-- > 0;) {
    if (l->shape[a] == 1)
      continue;
    if (unit == 0)
      unit = l->strides[a]; /* the fastest axis of extent > 1 */
    else if (l->strides[a] != unit * span)
      return 0;
    span *= l->shape[a];
  }
  *ls = unit;
  return 1;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  random_impl *r = calloc(1, sizeof *r);
  if (r == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  k->impl = r;
  r->seed = (uint64_t)d->d->iattrs[0];
  r->offset = (uint64_t)d->d->iattrs[1];
  r->a = d->d->fattrs[0];
  r->b = d->d->n_fattrs > 1 ? d->d->fattrs[1] : 0;
  r->stepped = d->n_in == 1;
  r->dims = tcu_dims_of(&d->out[0].l);
  r->nd = !evenly_strided(&d->out[0].l, &r->ls);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI) {
    /* (r + 0.5) 2^-32 < p  <=>  r < p 2^32 - 0.5 (exact in binary64)
     * <=>  r < ceil(p 2^32 - 0.5), clamped to [0, 2^32] (random.md). */
    double t = ceil(r->a * 0x1p32 - 0.5);
    r->thr = t <= 0 ? 0 : t >= 0x1p32 ? (uint64_t)1 << 32 : (uint64_t)t;
  }
  const char *name =
      d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "tyto_random_uniform"
      : d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "tyto_random_normal"
                                              : "tyto_random_bernoulli";
  const char *parts[] = {step_source, source};
  char *text = tcu_source_join(parts, 2);
  if (text == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  tyto_plugin_error *e = tcu_function(dev, d->dtype, text, name, &r->fn);
  free(text);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* The step's value, truncated, into *step: read back from the device
 * (after the work queued before it on s), then checked to lie in
 * [0, 2^53] as random.md requires. */
static tyto_plugin_error *read_step(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    const tyto_plugin_kernel *k,
                                    const tcu_arg *in, uint64_t *step) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *name = tcu_op_name(k->desc.op);
  unsigned char bytes[8];
  cudaError_t e = cudaMemcpyAsync(bytes, in->ptr, k->desc.elem,
                                  cudaMemcpyDeviceToHost, s->stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(s->stream);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "%s on cuda:%d: reading the step input",
                          name, dev->index);
  double v;
  if (k->desc.elem == 2) {
    uint16_t h;
    memcpy(&h, bytes, sizeof h);
    v = k->desc.dtype == TYTO_PLUGIN_DTYPE_F16 ? tpc_f16_to_f32(h)
                                               : tpc_bf16_to_f32(h);
  } else if (k->desc.elem == 4) {
    float f;
    memcpy(&f, bytes, sizeof f);
    v = f;
  } else {
    memcpy(&v, bytes, sizeof v);
  }
  if (!(v >= 0 && v <= 0x1p53))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: step %g is not in [0, 2^53]", name, v);
  *step = (uint64_t)v;
  return NULL;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  (void)ws;
  const random_impl *r = k->impl;
  uint64_t step = 0;
  tyto_plugin_error *e = NULL;
  /* The kernel reads the step where the stream has fault words. */
  const void *step_ptr = r->stepped && s->fault_dev ? in[0].ptr : NULL;
  void *fault = s->fault_dev;
  unsigned code = k->desc.op + 1;
  if (r->stepped && !step_ptr &&
      (e = read_step(dev, s, k, &in[0], &step)) != NULL)
    return e;
  void *ptr = out[0].ptr;
  tcu_dims dims = r->dims;
  int nd = r->nd;
  long long ls = r->ls, n = k->desc.out[0].n;
  unsigned k0 = (unsigned)r->seed, k1 = (unsigned)(r->seed >> 32);
  unsigned long long off = r->offset;
  unsigned s0 = (unsigned)step, s1 = (unsigned)(step >> 32);
  unsigned long long thr = r->thr;
  float af = (float)r->a, bf = (float)r->b;
  double ad = r->a, bd = r->b;
  int f64 = k->desc.dtype == TYTO_PLUGIN_DTYPE_F64;
  void *params[] = {&ptr,
                    &dims,
                    &nd,
                    &ls,
                    &n,
                    &k0,
                    &k1,
                    &off,
                    &s0,
                    &s1,
                    &step_ptr,
                    &fault,
                    &code,
                    k->desc.op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? (void *)&thr
                    : f64                                         ? (void *)&ad
                                                                  : (void *)&af,
                    f64 ? (void *)&bd : (void *)&bf};
  const char *what =
      k->desc.op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "random_uniform kernel"
      : k->desc.op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "random_normal kernel"
                                                   : "random_bernoulli kernel";
  int64_t blocks = (n + 3) / 4;
  return tcu_run(dev, s, r->fn, dim3_of(tcu_blocks(dev, blocks)),
                 dim3_of(TCU_BLOCK), 0, params, what);
}

const tcu_family tcu_family_random = {"random", owns,   check,
                                      prepare,  launch, release};
