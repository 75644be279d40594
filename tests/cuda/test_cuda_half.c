/*
 * f16 and bf16 on a real GPU: every op family against f64 references.
 *
 *   test_cuda_half [PATH/tyto_plugin_NAME.so] [--only FAMILY,...]
 *
 * Loads the plugin (the CUDA plugin of this build by default; any plugin
 * whose first device lists f16 or bf16 works), opens that device and
 * runs, in each 16-bit dtype it lists:
 *  - CAST between every pair of f32, f64, f16 and bf16, bit for bit against
 *    half_ref.h, a converter written for the tests (every 16-bit pattern,
 *    f32 and f64 patterns around each rounding boundary, double-rounding
 *    traps, NaN as NaN);
 *  - every elementwise op, and fused programs that mix dtypes (bit for bit:
 *    each instruction is the f32 op, correctly rounded, rounded to its
 *    dtype);
 *  - reductions and softmax, matrix products, convolutions (a bias too),
 *    pooling, index ops and random draws (half_gpu_nn.c).
 * Results are compared with f64 references with tolerances derived from
 * the format: u (2^-11 f16, 2^-8 bf16) for the one rounding to the dtype,
 * plus the f32 arithmetic's error times the op's condition (for a sum,
 * n 2^-24 sum |x|). Sums long enough that a 16-bit accumulator would stop
 * growing check that accumulation is f32.
 * --only runs some of the families: cast, eltwise, fused, reduce, matmul,
 * conv, pool, index, random; --dtype f16 or bf16 one dtype, and --dtype
 * f32 the families (not CAST) in f32: the references' own check, on any
 * plugin. Plugin options come from the environment:
 * TYTO_TEST_<KEY> sets KEY. Exits 77 where the plugin finds no such device
 * (no GPU), 1 on a failure.
 */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_gpu.h"

/* ---- the host table ------------------------------------------------------ */

struct tyto_plugin_error {
  int code;
  char msg[2048];
};

static tyto_plugin_error oom = {TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory"};

static tyto_plugin_error *error_new(tyto_plugin_code code, const char *fmt,
                                    ...) {
  tyto_plugin_error *e = malloc(sizeof *e);
  va_list ap;
  if (e == NULL)
    return &oom;
  e->code = (int)code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return e;
}

static void error_free(tyto_plugin_error *e) {
  if (e != &oom)
    free(e);
}

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  va_list ap;
  (void)ctx;
  if (level > TYTO_PLUGIN_LOG_WARN)
    return;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* The plugin's option KEY from the environment variable TYTO_TEST_KEY
 * (upper case): a testing option such as the OpenCL plugin's
 * fp16_without_extension. */
static const char *host_option(void *ctx, const char *key) {
  char name[96] = "TYTO_TEST_";
  size_t n = strlen(name);
  (void)ctx;
  for (; *key != '\0' && n + 1 < sizeof name; key++)
    name[n++] = *key >= 'a' && *key <= 'z' ? (char)(*key - 'a' + 'A') : *key;
  name[n] = '\0';
  return getenv(name);
}

static const tyto_plugin_host host = {
    .struct_size = sizeof(tyto_plugin_host),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .host_version = "test",
    .log = host_log,
    .option = host_option,
    .error_new = error_new,
    .error_free = error_free,
};

static int n_claimed;
static void on_claim(void *ctx, int32_t hw, uint32_t ordinal,
                     const char *name) {
  (void)ctx, (void)hw;
  fprintf(stderr, "device %u: %s\n", (unsigned)ordinal, name);
  n_claimed++;
}
static void on_refuse(void *ctx, int32_t hw, const char *name,
                      const char *reason) {
  (void)ctx, (void)hw;
  fprintf(stderr, "refused %s: %s\n", name ? name : "", reason);
}

/* ---- the harness --------------------------------------------------------- */

int hg_checks, hg_failures;
static const tyto_plugin_device_fns *D;
static tyto_plugin_device *dev;
static tyto_plugin_stream *stream;

void hg_check(int ok, const char *fmt, ...) {
  hg_checks++;
  if (ok)
    return;
  if (hg_failures++ < 30) {
    va_list ap;
    fprintf(stderr, "FAIL ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
  }
}

/* Takes an error: 1 when there was none, else a failed check. */
static int ok_err(tyto_plugin_error *e, const char *what) {
  hg_check(e == NULL, "%s: %s", what, e != NULL ? e->msg : "");
  if (e != NULL)
    error_free(e);
  return e == NULL;
}

const char *hg_name(uint32_t dt) {
  return dt == F16 ? "f16" : dt == BF16 ? "bf16" : dt == F32 ? "f32" : "f64";
}

size_t hg_size(uint32_t dt) {
  return dt == F64 ? 8 : dt == F32 ? 4 : 2;
}

const ref_fmt *hg_fmt(uint32_t dt) {
  return dt == F16 ? &REF_F16 : dt == BF16 ? &REF_BF16 : &REF_F32;
}

double hg_u(uint32_t dt) {
  return dt == F16    ? 0x1p-11
         : dt == BF16 ? 0x1p-8
         : dt == F32  ? 0x1p-24
                      : 0x1p-53;
}

hg_tensor hg_new(uint32_t dt, uint32_t rank, const int64_t *shape) {
  hg_tensor t;
  memset(&t, 0, sizeof t);
  t.l.struct_size = sizeof t.l;
  t.l.dtype = dt;
  t.l.rank = rank;
  t.n = 1;
  for (uint32_t k = rank; k-- > 0;) {
    t.l.shape[k] = shape[k];
    t.l.strides[k] = t.n;
    t.n *= shape[k];
  }
  t.data = calloc((size_t)(t.n > 0 ? t.n : 1), hg_size(dt));
  return t;
}

void hg_free(hg_tensor *t) {
  free(t->data);
  t->data = NULL;
}

double hg_get(const hg_tensor *t, int64_t i) {
  switch (t->l.dtype) {
  case F64: return ((const double *)t->data)[i];
  case F32: return ((const float *)t->data)[i];
  default:
    return ref_decode(((const uint16_t *)t->data)[i], hg_fmt(t->l.dtype));
  }
}

void hg_set(hg_tensor *t, int64_t i, double x) {
  switch (t->l.dtype) {
  case F64: ((double *)t->data)[i] = x; break;
  case F32: ((float *)t->data)[i] = (float)x; break;
  default: ((uint16_t *)t->data)[i] = (uint16_t)ref_bits(x, hg_fmt(t->l.dtype));
  }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

double hg_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53);
}

void hg_random(hg_tensor *t, double lo, double hi) {
  for (int64_t i = 0; i < t->n; i++)
    hg_set(t, i, hg_uniform(lo, hi));
}

static void fill_desc(tyto_plugin_op_desc *d, uint32_t op, int n_in,
                      const hg_tensor *in, int n_out, const hg_tensor *out,
                      tyto_plugin_layout *li, tyto_plugin_layout *lo, int n_i,
                      const int64_t *ia, int n_f, const double *fa,
                      const void *blob, size_t blob_size) {
  for (int i = 0; i < n_in; i++)
    li[i] = in[i].l;
  for (int i = 0; i < n_out; i++)
    lo[i] = out[i].l;
  *d = (tyto_plugin_op_desc){sizeof *d,
                             op,
                             (uint32_t)n_in,
                             (uint32_t)n_out,
                             li,
                             lo,
                             (uint32_t)n_i,
                             ia,
                             (uint32_t)n_f,
                             fa,
                             blob_size,
                             blob};
}

int hg_supports(uint32_t op, int n_in, const hg_tensor *in, int n_out,
                const hg_tensor *out, int n_i, const int64_t *ia, int n_f,
                const double *fa, char *why, size_t why_size) {
  tyto_plugin_op_desc d;
  tyto_plugin_layout li[4], lo[4];
  fill_desc(&d, op, n_in, in, n_out, out, li, lo, n_i, ia, n_f, fa, NULL, 0);
  tyto_plugin_error *e = D->supports_op(dev, &d);
  int code = e != NULL ? e->code : 0;
  snprintf(why, why_size, "%s", e != NULL ? e->msg : "");
  if (e != NULL)
    error_free(e);
  return code;
}

int hg_run(const char *what, uint32_t op, int n_in, hg_tensor *in, int n_out,
           hg_tensor *out, int n_i, const int64_t *ia, int n_f,
           const double *fa, const void *blob, size_t blob_size) {
  tyto_plugin_op_desc d;
  tyto_plugin_layout li[TYTO_PLUGIN_FUSED_MAX_IO], lo[TYTO_PLUGIN_FUSED_MAX_IO];
  tyto_plugin_buffer *bufs[2 * TYTO_PLUGIN_FUSED_MAX_IO + 1] = {0};
  tyto_plugin_binding bi[TYTO_PLUGIN_FUSED_MAX_IO],
      bo[TYTO_PLUGIN_FUSED_MAX_IO], bw;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info info = {sizeof info, 0, 0};
  char label[160];
  int ok = 0;
  snprintf(label, sizeof label, "%s (%s)", what, hg_name(out[0].l.dtype));
  fill_desc(&d, op, n_in, in, n_out, out, li, lo, n_i, ia, n_f, fa, blob,
            blob_size);
  if (!ok_err(D->prepare(dev, &d, &k, &info), label))
    return 0;
  for (int i = 0; i < n_in + n_out; i++) {
    hg_tensor *t = i < n_in ? &in[i] : &out[i - n_in];
    size_t bytes = (size_t)t->n * hg_size(t->l.dtype);
    if (!ok_err(D->buffer_alloc(dev, bytes, &bufs[i]), label))
      goto done;
    if (i < n_in && bytes > 0 &&
        !ok_err(D->copy_h2d(dev, stream, bufs[i], 0, t->data, bytes), label))
      goto done;
    tyto_plugin_binding *b = i < n_in ? &bi[i] : &bo[i - n_in];
    *b = (tyto_plugin_binding){sizeof *b, bufs[i], 0};
  }
  if (!ok_err(D->buffer_alloc(dev, info.workspace_bytes, &bufs[n_in + n_out]),
              label))
    goto done;
  bw = (tyto_plugin_binding){sizeof bw, bufs[n_in + n_out], 0};
  if (!ok_err(D->launch(dev, stream, k, bi, (uint32_t)n_in, bo, (uint32_t)n_out,
                        info.workspace_bytes ? &bw : NULL),
              label))
    goto done;
  for (int i = 0; i < n_out; i++) {
    size_t bytes = (size_t)out[i].n * hg_size(out[i].l.dtype);
    if (bytes > 0 &&
        !ok_err(D->copy_d2h(dev, stream, out[i].data, bufs[n_in + i], 0, bytes),
                label))
      goto done;
  }
  ok = ok_err(D->stream_synchronize(dev, stream), label);
done:
  for (int i = 0; i <= n_in + n_out; i++)
    if (bufs[i] != NULL)
      D->buffer_free(dev, bufs[i]);
  D->kernel_release(dev, k);
  return ok;
}

void hg_near(const char *what, const hg_tensor *t, int64_t i, double want,
             double tol, int *bad) {
  double got = hg_get(t, i);
  int ok;
  if (isnan(want))
    ok = isnan(got);
  else if (isinf(got) && !isinf(want))
    /* Beyond the dtype's range (within the tolerance): its infinity. */
    ok = t->l.dtype != F64 && signbit(got) == signbit(want) &&
         isinf(ref_round(want + copysign(tol, want), hg_fmt(t->l.dtype)));
  else
    ok = isinf(want) ? got == want : fabs(got - want) <= tol;
  if (!ok && (*bad)++ == 0)
    fprintf(stderr, "  %s (%s): element %lld is %.9g, expected %.9g +- %.3g\n",
            what, hg_name(t->l.dtype), (long long)i, got, want, tol);
}

void hg_done(const char *what, int bad, int64_t n) {
  hg_check(bad == 0, "%s: %d of %lld elements outside the tolerance", what, bad,
           (long long)n);
}

/* ---- CAST ---------------------------------------------------------------- */

/* CAST of every element of `in` to dtype `to`, bit for bit against
 * half_ref.h (f64 exactly; NaN only as NaN). */
static void cast_check(hg_tensor *in, uint32_t to) {
  hg_tensor out = hg_new(to, 1, &in->n);
  char what[64];
  snprintf(what, sizeof what, "cast %s -> %s", hg_name(in->l.dtype),
           hg_name(to));
  if (hg_run(what, TYTO_PLUGIN_OP_CAST, 1, in, 1, &out, 0, NULL, 0, NULL, NULL,
             0)) {
    int bad = 0;
    for (int64_t i = 0; i < in->n; i++) {
      double x = hg_get(in, i), got = hg_get(&out, i);
      uint64_t gb = 0, wb = 0;
      if (to == F64) {
        memcpy(&gb, &got, 8);
        memcpy(&wb, &x, 8);
      } else {
        gb = to == F32 ? ref_encode(got, &REF_F32)
                       : ((const uint16_t *)out.data)[i];
        wb = ref_bits(x, hg_fmt(to));
      }
      int ok = isnan(x) ? isnan(got) : gb == wb;
      if (!ok && bad++ == 0)
        fprintf(stderr, "  %s: %.17g gave bits 0x%llx, expected 0x%llx\n", what,
                x, (unsigned long long)gb, (unsigned long long)wb);
    }
    hg_done(what, bad, in->n);
  }
  hg_free(&out);
}

/* The dtypes the device lists (TYTO_PLUGIN_DTYPE_BIT). */
static uint32_t listed;
#define LISTED(dt) ((listed & TYTO_PLUGIN_DTYPE_BIT(dt)) != 0)

static void cast_tests(void) {
  static const uint32_t all[] = {F32, F64, F16, BF16};
  /* Every 16-bit pattern, to every dtype. */
  for (uint32_t from = F16; from <= BF16; from++) {
    int64_t n = 65536;
    if (!LISTED(from))
      continue;
    hg_tensor t = hg_new(from, 1, &n);
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)t.data)[i] = (uint16_t)i;
    for (int k = 0; k < 4; k++)
      if (LISTED(all[k]))
        cast_check(&t, all[k]);
    hg_free(&t);
  }
  /* f32: every exponent with the fraction bits around the f16 and bf16
   * rounding points, then random patterns. */
  {
    int64_t n = 512 * 8 * 4 + (1 << 18);
    hg_tensor t = hg_new(F32, 1, &n);
    uint32_t *u = t.data;
    static const uint32_t low[8] = {0,      0x0fff, 0x1000,  0x3000,
                                    0x7fff, 0x8000, 0x18000, 0x8001};
    int64_t i = 0;
    for (uint32_t se = 0; se < 512; se++)
      for (int k = 0; k < 8; k++)
        for (uint32_t hi = 0; hi < 4; hi++)
          u[i++] = se << 23 | hi << 21 | low[k];
    while (i < n)
      u[i++] = (uint32_t)next_u64();
    for (int k = 0; k < 4; k++)
      if (LISTED(all[k]))
        cast_check(&t, all[k]);
    hg_free(&t);
  }
  /* f64: values whose f32 rounding would round again the wrong way
   * (halfway cases of f16 and bf16 plus or minus a little), every
   * exponent of both formats' ranges, random patterns. */
  {
    int64_t n = 1 << 18;
    hg_tensor t = hg_new(F64, 1, &n);
    double *v = t.data;
    int64_t i = 0;
    for (int e = -150; e <= 130 && i < n - 64; e++)
      for (int k = 0; k < 16; k++) {
        double m = 1 + (k & 7) * 0x1p-8 + 0x1p-12 + 0x1p-9;
        v[i++] = ldexp(m + (k & 8 ? 0x1p-40 : -0x1p-40), e);
        v[i++] = -ldexp(1 + 0x1p-11 + (k & 1 ? 0x1p-35 : -0x1p-35), e);
      }
    while (i < n) {
      uint64_t b = next_u64();
      memcpy(&v[i++], &b, 8);
    }
    for (int k = 0; k < 4 && LISTED(F64); k++)
      if (LISTED(all[k]))
        cast_check(&t, all[k]);
    hg_free(&t);
  }
}

/* ---- elementwise ops ------------------------------------------------------
 */

/* The f64 value of each op, and its class: 0 exact arithmetic (the f32 op
 * is correctly rounded), 1 a transcendental of the f32 library. */
static double op_ref(uint32_t op, double x, double y, double z, double pa) {
  switch (op) {
  case TYTO_PLUGIN_OP_NEG: return -x;
  case TYTO_PLUGIN_OP_ABS: return fabs(x);
  case TYTO_PLUGIN_OP_SIGN: return x != x ? x : x == 0 ? x : copysign(1, x);
  case TYTO_PLUGIN_OP_EXP: return exp(x);
  case TYTO_PLUGIN_OP_LOG: return log(x);
  case TYTO_PLUGIN_OP_LOG1P: return log1p(x);
  case TYTO_PLUGIN_OP_EXPM1: return expm1(x);
  case TYTO_PLUGIN_OP_SQRT: return sqrt(x);
  case TYTO_PLUGIN_OP_RSQRT: return 1 / sqrt(x);
  case TYTO_PLUGIN_OP_SQUARE: return x * x;
  case TYTO_PLUGIN_OP_RECIPROCAL: return 1 / x;
  case TYTO_PLUGIN_OP_SIN: return sin(x);
  case TYTO_PLUGIN_OP_COS: return cos(x);
  case TYTO_PLUGIN_OP_TAN: return tan(x);
  case TYTO_PLUGIN_OP_ASIN: return asin(x);
  case TYTO_PLUGIN_OP_ACOS: return acos(x);
  case TYTO_PLUGIN_OP_ATAN: return atan(x);
  case TYTO_PLUGIN_OP_SINH: return sinh(x);
  case TYTO_PLUGIN_OP_COSH: return cosh(x);
  case TYTO_PLUGIN_OP_TANH: return tanh(x);
  case TYTO_PLUGIN_OP_ASINH: return asinh(x);
  case TYTO_PLUGIN_OP_ACOSH: return acosh(x);
  case TYTO_PLUGIN_OP_ATANH: return atanh(x);
  case TYTO_PLUGIN_OP_SIGMOID: return 1 / (1 + exp(-x));
  case TYTO_PLUGIN_OP_RELU: return x < 0 ? 0 : x;
  case TYTO_PLUGIN_OP_LEAKY_RELU: return x < 0 ? pa * x : x;
  case TYTO_PLUGIN_OP_ELU: return x < 0 ? pa * expm1(x) : x;
  case TYTO_PLUGIN_OP_SOFTPLUS: return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
  case TYTO_PLUGIN_OP_ERF: return erf(x);
  case TYTO_PLUGIN_OP_FLOOR: return floor(x);
  case TYTO_PLUGIN_OP_CEIL: return ceil(x);
  case TYTO_PLUGIN_OP_ROUND: return round(x);
  case TYTO_PLUGIN_OP_ADD: return x + y;
  case TYTO_PLUGIN_OP_SUB: return x - y;
  case TYTO_PLUGIN_OP_MUL: return x * y;
  case TYTO_PLUGIN_OP_DIV: return x / y;
  case TYTO_PLUGIN_OP_POW: return pow(x, y);
  case TYTO_PLUGIN_OP_MAX: return x > y || x != x ? x : y;
  case TYTO_PLUGIN_OP_MIN: return x < y || x != x ? x : y;
  case TYTO_PLUGIN_OP_ATAN2: return atan2(x, y);
  case TYTO_PLUGIN_OP_EQ: return x == y;
  case TYTO_PLUGIN_OP_NE: return x != y;
  case TYTO_PLUGIN_OP_LT: return x < y;
  case TYTO_PLUGIN_OP_LE: return x <= y;
  case TYTO_PLUGIN_OP_GT: return x > y;
  case TYTO_PLUGIN_OP_GE: return x >= y;
  case TYTO_PLUGIN_OP_WHERE: return x != 0 ? y : z;
  default: return fma(x, y, z); /* FMA */
  }
}

static int transcendental(uint32_t op) {
  return (op >= TYTO_PLUGIN_OP_EXP && op <= TYTO_PLUGIN_OP_EXPM1) ||
         (op >= TYTO_PLUGIN_OP_SIN && op <= TYTO_PLUGIN_OP_SIGMOID) ||
         op == TYTO_PLUGIN_OP_ELU || op == TYTO_PLUGIN_OP_SOFTPLUS ||
         op == TYTO_PLUGIN_OP_ERF || op == TYTO_PLUGIN_OP_POW ||
         op == TYTO_PLUGIN_OP_ATAN2;
}

/* Inputs inside the op's domain. */
static void op_domain(uint32_t op, double *lo, double *hi) {
  *lo = -4, *hi = 4;
  if (op == TYTO_PLUGIN_OP_LOG || op == TYTO_PLUGIN_OP_SQRT ||
      op == TYTO_PLUGIN_OP_RSQRT || op == TYTO_PLUGIN_OP_POW)
    *lo = 0.0625;
  else if (op == TYTO_PLUGIN_OP_LOG1P)
    *lo = -0.9;
  else if (op == TYTO_PLUGIN_OP_ASIN || op == TYTO_PLUGIN_OP_ACOS ||
           op == TYTO_PLUGIN_OP_ATANH)
    *lo = -0.99, *hi = 0.99;
  else if (op == TYTO_PLUGIN_OP_ACOSH)
    *lo = 1, *hi = 8;
}

static void eltwise_tests(uint32_t dt) {
  const double u = hg_u(dt), sub = ldexp(1, hg_fmt(dt)->emin - hg_fmt(dt)->p);
  int64_t shape[2] = {61, 67};
  for (uint32_t op = TYTO_PLUGIN_OP_NEG; op <= TYTO_PLUGIN_OP_FMA; op++) {
    int arity = op < TYTO_PLUGIN_OP_ADD ? 1 : op < TYTO_PLUGIN_OP_WHERE ? 2 : 3;
    if ((op > TYTO_PLUGIN_OP_ROUND && op < TYTO_PLUGIN_OP_ADD) ||
        (op > TYTO_PLUGIN_OP_GE && op < TYTO_PLUGIN_OP_WHERE))
      continue;
    hg_tensor in[3], out = hg_new(dt, 2, shape);
    double lo, hi, pa = 0.3;
    op_domain(op, &lo, &hi);
    for (int k = 0; k < 3; k++) {
      in[k] = hg_new(dt, 2, shape);
      hg_random(&in[k], lo, hi);
    }
    /* Ties and equal operands for the comparisons and WHERE's zeros. */
    for (int64_t i = 0; i < in[0].n; i += 7)
      hg_set(&in[0], i, op == TYTO_PLUGIN_OP_WHERE ? 0 : hg_get(&in[1], i));
    char what[64];
    snprintf(what, sizeof what, "elementwise op %u", (unsigned)op);
    const int n_f =
        op == TYTO_PLUGIN_OP_LEAKY_RELU || op == TYTO_PLUGIN_OP_ELU ? 1 : 0;
    if (hg_run(what, op, arity, in, 1, &out, 0, NULL, n_f, &pa, NULL, 0)) {
      int bad = 0;
      for (int64_t i = 0; i < out.n; i++) {
        double want = op_ref(op, hg_get(&in[0], i), hg_get(&in[1], i),
                             hg_get(&in[2], i), pa);
        /* One rounding to the dtype after the f32 op: u; the f32 op's
         * own error (2^-24 correctly rounded, a few ulps for the
         * library's functions, whose argument reduction also costs an
         * absolute 2^-22). */
        double tol =
            (u + (transcendental(op) ? 0x1p-20 : 0x1p-23)) * fabs(want) +
            (transcendental(op) ? 0x1p-22 : 0) + sub;
        hg_near(what, &out, i, want, tol, &bad);
      }
      hg_done(what, bad, out.n);
    }
    for (int k = 0; k < 3; k++)
      hg_free(&in[k]);
    hg_free(&out);
  }
}

#define FI(op, a0, a1, attr, dt)                                               \
  { sizeof(tyto_plugin_fused_instr), (op), {(a0), (a1), 0}, (attr), (dt) }

/* A fused program that mixes dtypes, bit for bit: out0 (dt) = dt(f32(a) *
 * b + 0.75); out1 (f32) = f32(a + a) (an op in dt); out2 (f64) = b. Each
 * f32 op is correctly rounded, which the f64 evaluation of one op
 * followed by a rounding to f32 reproduces. */
static void fused_tests(uint32_t dt) {
  const ref_fmt *f = hg_fmt(dt);
  int64_t n = 4099;
  hg_tensor in[2] = {hg_new(dt, 1, &n), hg_new(F32, 1, &n)};
  hg_tensor out[3] = {hg_new(dt, 1, &n), hg_new(F32, 1, &n),
                      hg_new(F64, 1, &n)};
  hg_random(&in[0], -300, 300);
  hg_random(&in[1], -2, 2);
  tyto_plugin_fused_instr fi[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, F32),
      FI(TYTO_PLUGIN_OP_CAST, 0, 0, 0, F32),
      FI(TYTO_PLUGIN_OP_MUL, 2, 1, 0, F32),
      FI(TYTO_PLUGIN_FUSED_CONST, 0, 0, 0.75, F32),
      FI(TYTO_PLUGIN_OP_ADD, 3, 4, 0, F32),
      FI(TYTO_PLUGIN_OP_CAST, 5, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_ADD, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_CAST, 7, 0, 0, F32),
      FI(TYTO_PLUGIN_OP_CAST, 1, 0, 0, F64),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 6, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 8, 1, 0, F32),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 9, 2, 0, F64),
  };
  tyto_plugin_fused_program prog = {sizeof prog, sizeof fi / sizeof fi[0], fi};
  if (hg_run("mixed fused", TYTO_PLUGIN_OP_FUSED, 2, in, 3, out, 0, NULL, 0,
             NULL, &prog, sizeof prog)) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double a = hg_get(&in[0], i), b = hg_get(&in[1], i);
      double m = ref_round(a * b, &REF_F32);
      double w0 = ref_round(ref_round(m + 0.75, &REF_F32), f);
      double w1 = ref_round(a + a, f);
      if (hg_get(&out[0], i) != w0 || hg_get(&out[1], i) != w1 ||
          hg_get(&out[2], i) != b) {
        if (bad++ == 0)
          fprintf(stderr,
                  "  fused (%s) element %lld: %.9g %.9g %.9g, expected %.9g "
                  "%.9g %.9g\n",
                  hg_name(dt), (long long)i, hg_get(&out[0], i),
                  hg_get(&out[1], i), hg_get(&out[2], i), w0, w1, b);
      }
    }
    hg_done("mixed fused", bad, n);
  }
  for (int k = 0; k < 3; k++)
    hg_free(&out[k]);
  hg_free(&in[0]);
  hg_free(&in[1]);
}

/* ---- reductions and softmax ---------------------------------------------- */

static void reduce_tests(uint32_t dt) {
  const double u = hg_u(dt);
  int64_t shape[2] = {7, 3001}, rshape[2] = {7, 1}, ax = 1;
  hg_tensor x = hg_new(dt, 2, shape), y = hg_new(dt, 2, rshape);
  for (uint32_t op = TYTO_PLUGIN_OP_SUM; op <= TYTO_PLUGIN_OP_NORM_L2; op++) {
    /* PROD near 1, so that the product stays finite. */
    if (op == TYTO_PLUGIN_OP_PROD)
      hg_random(&x, 0.99, 1.01);
    else
      hg_random(&x, -2, 2);
    char what[64];
    snprintf(what, sizeof what, "reduction %u", (unsigned)op);
    if (!hg_run(what, op, 1, &x, 1, &y, 1, &ax, 0, NULL, NULL, 0))
      continue;
    int bad = 0;
    for (int64_t r = 0; r < rshape[0]; r++) {
      double s = 0, sa = 0, p = 1, mx = -INFINITY, mn = INFINITY, s2 = 0;
      int64_t amx = 0, amn = 0, n = shape[1];
      for (int64_t j = 0; j < n; j++) {
        double v = hg_get(&x, r * n + j);
        s += v, sa += fabs(v), p *= v, s2 += v * v;
        if (v > mx)
          mx = v, amx = j;
        if (v < mn)
          mn = v, amn = j;
      }
      double lse = 0;
      for (int64_t j = 0; j < n; j++)
        lse += exp(hg_get(&x, r * n + j) - mx);
      double want, cond; /* cond: the f32 arithmetic's error bound */
      switch (op) {
      case TYTO_PLUGIN_OP_SUM: want = s, cond = n * 0x1p-24 * sa; break;
      case TYTO_PLUGIN_OP_MEAN: want = s / n, cond = 0x1p-24 * sa; break;
      case TYTO_PLUGIN_OP_MAX_REDUCE: want = mx, cond = 0; break;
      case TYTO_PLUGIN_OP_MIN_REDUCE: want = mn, cond = 0; break;
      case TYTO_PLUGIN_OP_PROD: want = p, cond = n * 0x1p-23 * fabs(p); break;
      case TYTO_PLUGIN_OP_ARGMAX: want = amx, cond = 0; break;
      case TYTO_PLUGIN_OP_ARGMIN: want = amn, cond = 0; break;
      case TYTO_PLUGIN_OP_LOG_SUM_EXP:
        want = mx + log(lse), cond = n * 0x1p-22;
        break;
      case TYTO_PLUGIN_OP_NORM_L1: want = sa, cond = n * 0x1p-24 * sa; break;
      default: want = sqrt(s2), cond = n * 0x1p-23 * sqrt(s2); break;
      }
      /* ARG*: the index, rounded to the dtype as the op stores it, exactly;
       * the rest unrounded, within u. */
      const int arg =
          op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
      hg_near(what, &y, r, arg ? ref_round(want, hg_fmt(dt)) : want,
              arg ? 0 : u * fabs(want) + cond, &bad);
    }
    hg_done(what, bad, rshape[0]);
  }
  hg_free(&x);
  hg_free(&y);
  /* 32768 ones: a 16-bit accumulator stops at 256 (bf16) or 2048 (f16);
   * the f32 sum is 32768, which both formats hold. */
  int64_t n1 = 32768, one = 1;
  hg_tensor ones = hg_new(dt, 1, &n1), total = hg_new(dt, 1, &one);
  int64_t ax0 = 0;
  for (int64_t i = 0; i < n1; i++)
    hg_set(&ones, i, 1);
  if (hg_run("long sum", TYTO_PLUGIN_OP_SUM, 1, &ones, 1, &total, 1, &ax0, 0,
             NULL, NULL, 0))
    hg_check(hg_get(&total, 0) == 32768,
             "the sum of 32768 ones in %s is %g: not accumulated in f32",
             hg_name(dt), hg_get(&total, 0));
  hg_free(&ones);
  hg_free(&total);
  /* Softmax and log-softmax along rows of 93. */
  int64_t ss[2] = {5, 93};
  hg_tensor sx = hg_new(dt, 2, ss), sy = hg_new(dt, 2, ss);
  hg_random(&sx, -6, 6);
  for (int logsm = 0; logsm < 2; logsm++) {
    uint32_t op = logsm ? TYTO_PLUGIN_OP_LOG_SOFTMAX : TYTO_PLUGIN_OP_SOFTMAX;
    const char *what = logsm ? "log_softmax" : "softmax";
    if (!hg_run(what, op, 1, &sx, 1, &sy, 1, &ax, 0, NULL, NULL, 0))
      continue;
    int bad = 0;
    for (int64_t r = 0; r < ss[0]; r++) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < ss[1]; j++)
        mx = fmax(mx, hg_get(&sx, r * ss[1] + j));
      for (int64_t j = 0; j < ss[1]; j++)
        s += exp(hg_get(&sx, r * ss[1] + j) - mx);
      for (int64_t j = 0; j < ss[1]; j++) {
        double v = hg_get(&sx, r * ss[1] + j) - mx;
        double want = logsm ? v - log(s) : exp(v) / s;
        hg_near(what, &sy, r * ss[1] + j, want,
                u * fabs(want) + 0x1p-18 * (logsm ? 1 + fabs(want) : 1), &bad);
      }
    }
    hg_done(what, bad, sx.n);
  }
  hg_free(&sx);
  hg_free(&sy);
}

/* ---- main ---------------------------------------------------------------- */

/* --only NAME,NAME...: the families to run (all by default). */
static const char *only;
static int wanted(const char *family) {
  if (only == NULL)
    return 1;
  size_t n = strlen(family);
  for (const char *p = only; (p = strstr(p, family)) != NULL; p += n)
    if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
      return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *path = TEST_CUDA_PLUGIN;
  const char *dtype = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc)
      dtype = argv[++i];
    else
      path = argv[i];
  }
  const int f32 = dtype != NULL && strcmp(dtype, "f32") == 0;
  void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  /* tyto_plugin_NAME.so exports tyto_plugin_NAME_LTX_init. */
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char sym[128];
  snprintf(sym, sizeof sym, "%.*s%s", (int)strcspn(base, "."), base,
           TYTO_PLUGIN_ENTRY_SUFFIX);
  tyto_plugin_init_fn init;
  *(void **)&init = dlsym(so, sym);
  const tyto_plugin_info *info = NULL;
  tyto_plugin_state *st = NULL;
  if (init == NULL || !ok_err(init(&host, &info, &st), "init"))
    return 1;
  D = info->device_fns;
  const tyto_plugin_claims claims = {sizeof claims, NULL, on_claim, on_refuse};
  /* The machine's processors, as hwloc would offer them (a plugin for
   * GPUs ignores them; the CPU plugin needs them). */
  tyto_plugin_hw_device cpu;
  memset(&cpu, 0, sizeof cpu);
  cpu.struct_size = sizeof cpu;
  cpu.kind = TYTO_PLUGIN_HW_CPU;
  cpu.name = "test CPU";
  cpu.cpuset = cpu.nodeset = cpu.pci_bus_id = "";
  cpu.numa_node = -1;
  cpu.packages = cpu.cores = cpu.pus = cpu.numa_nodes = 1;
  tyto_plugin_error *e = info->fns->probe(st, &cpu, 1, &claims);
  uint32_t want = TYTO_PLUGIN_DTYPE_BIT(F16) | TYTO_PLUGIN_DTYPE_BIT(BF16);
  tyto_plugin_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  if (f32)
    want = TYTO_PLUGIN_DTYPE_BIT(F32);
  if (e != NULL || n_claimed == 0 ||
      info->fns->device_query(st, 0, &di) != NULL || (di.dtypes & want) == 0) {
    fprintf(stderr, "SKIP: %s has no device running f16 or bf16%s%s\n",
            info->name, e != NULL ? ": " : "", e != NULL ? e->msg : "");
    if (e != NULL)
      error_free(e);
    info->fns->shutdown(st);
    return 77;
  }
  if (!ok_err(info->fns->device_open(st, 0, &dev), "device_open") ||
      !ok_err(D->stream_create(dev, &stream), "stream_create"))
    return 1;
  listed = di.dtypes;
  fprintf(stderr, "testing%s%s on %s:0, %s\n", LISTED(F16) ? " f16" : "",
          LISTED(BF16) ? " bf16" : "", info->name, di.name);
  if (wanted("cast") && !f32)
    cast_tests();
  static const struct {
    const char *name;
    void (*run)(uint32_t dt);
  } families[] = {{"eltwise", eltwise_tests}, {"fused", fused_tests},
                  {"reduce", reduce_tests},   {"matmul", hg_matmul},
                  {"conv", hg_conv},          {"pool", hg_pool},
                  {"index", hg_index},        {"random", hg_random_ops}};
  static const uint32_t dts[3] = {F16, BF16, F32};
  for (int k = 0; k < 3; k++) {
    /* f32 only when asked: the references' own check, on a plugin that
     * runs no 16-bit dtype yet. */
    if (dtype != NULL ? strcmp(dtype, hg_name(dts[k])) != 0 : dts[k] == F32)
      continue;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
      if (LISTED(dts[k]) && wanted(families[f].name))
        families[f].run(dts[k]);
  }
  D->stream_destroy(dev, stream);
  D->device_close(dev);
  info->fns->shutdown(st);
  dlclose(so);
  printf("%d checks, %d failed\n", hg_checks, hg_failures);
  return hg_failures ? 1 : 0;
}
