/*
 * The OpenCL plugin's 16-bit dtypes and CAST (ABI 1.5), driven through the
 * plugin ABI on the machine's OpenCL devices (PoCL on CI machines, which
 * lacks cl_khr_fp16):
 *
 *  - what a device without cl_khr_fp16 says: f16 missing from its dtypes,
 *    its driver line telling why, and every f16 op (one on its own, a
 *    CAST, a fused program converting through f16) refused as
 *    UNSUPPORTED with that reason; bf16 listed, linear algebra in bf16
 *    refused;
 *  - CAST between every pair of f32, f64 and bf16, bit for bit against a
 *    reference converter written here from the definitions (ties, NaN,
 *    infinities, overflow, subnormals, signed zeros, every 16-bit pattern,
 *    random sweeps, f64 values that an f32 rounding on the way would round
 *    twice);
 *  - every elementwise op in bf16 against f64 references of the exact
 *    inputs;
 *  - fused programs mixing bf16, f32 and f64 through CAST instructions,
 *    equal bit for bit to their ops run one by one;
 *  - then, with the testing option fp16_without_extension=1, all of the
 *    above with f16 as well, through vload_half/vstore_half_rte.
 *
 * Tolerances. A 16-bit result is the op computed in f32 from inputs that
 * f32 holds exactly, rounded once: |got - want| <= u |want| + e32 + tiny,
 * where want is the op's exact value (f64 from the same inputs), u the
 * format's unit roundoff (2^-8 for bf16, 2^-11 for f16), e32 the f32
 * computation's own error (64 ulps of f32, 2^-18 |want|: OpenCL's
 * functions are within 16) and tiny half the format's subnormal spacing
 * (2^-25 for f16, 2^-134 for bf16), where rounding is absolute, plus
 * 2^-120 (a device may flush f32 subnormals). Elementwise ops have condition 1
 * here: the inputs are exact, so only the op's own rounding counts.
 *
 * Exits 77 when the machine has no OpenCL device; under valgrind
 * (TYTO_TEST_UNDER_VALGRIND) nothing is built and it exits 77 too.
 */
#include "harness.h"

#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------ reference CAST -- */

static int is16(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16;
}

static uint64_t load_bits(uint32_t dt, const void *p, size_t i) {
  switch (dsize(dt)) {
  case 8: return ((const uint64_t *)p)[i];
  case 4: return ((const uint32_t *)p)[i];
  default: return ((const uint16_t *)p)[i];
  }
}

static void store_bits(uint32_t dt, void *p, size_t i, uint64_t v) {
  switch (dsize(dt)) {
  case 8: ((uint64_t *)p)[i] = v; break;
  case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
  default: ((uint16_t *)p)[i] = (uint16_t)v;
  }
}

/* The value of bits x of dtype from; *nan32 gets a NaN as the f32 that
 * holds it on the way (an f64 NaN quieted with its payload's top, a
 * 16-bit one widened as it is, signalling or not). */
static double decode(uint32_t from, uint64_t x, uint32_t *nan32, int *nan) {
  *nan = 0;
  double v;
  switch (from) {
  case TYTO_PLUGIN_DTYPE_F64:
    v = bits_f64(x);
    if (isnan(v))
      *nan32 = (uint32_t)(x >> 32 & 0x80000000u) | 0x7fc00000u |
               (uint32_t)(x >> 29 & 0x7fffffu);
    break;
  case TYTO_PLUGIN_DTYPE_F32:
    v = bits_f32((uint32_t)x);
    *nan32 = (uint32_t)x;
    break;
  case TYTO_PLUGIN_DTYPE_BF16:
    v = bits_f32((uint32_t)x << 16);
    *nan32 = (uint32_t)x << 16;
    break;
  default:
    v = ref_f16_value((uint16_t)x);
    *nan32 = (uint32_t)(x & 0x8000u) << 16 | 0x7f800000u |
             (uint32_t)(x & 0x3ffu) << 13;
  }
  *nan = isnan(v);
  return v;
}

/* CAST of bits x from dtype `from` to `to`, as sdk/docs/ops.md defines it
 * and with NaN as plugins/common/half.h keeps it: a 16-bit result is quiet
 * with the payload's top; f32 to f64 quiets as the host's conversion. */
static uint64_t ref_cast(uint32_t from, uint64_t x, uint32_t to) {
  if (from == to)
    return x;
  uint32_t n32;
  int nan;
  double v = decode(from, x, &n32, &nan);
  if (nan) {
    switch (to) {
    case TYTO_PLUGIN_DTYPE_F32: return n32;
    case TYTO_PLUGIN_DTYPE_F64:
      return (uint64_t)(n32 & 0x80000000u) << 32 | 0x7ff8000000000000u |
             (uint64_t)(n32 & 0x7fffffu) << 29;
    case TYTO_PLUGIN_DTYPE_BF16: return (n32 >> 16) | 0x40u;
    default: return (n32 >> 16 & 0x8000u) | 0x7e00u | (n32 >> 13 & 0x3ffu);
    }
  }
  switch (to) {
  case TYTO_PLUGIN_DTYPE_F64: return f64_bits(v);
  case TYTO_PLUGIN_DTYPE_F32: return f32_bits((float)ref_round(v, &F_F32));
  case TYTO_PLUGIN_DTYPE_BF16:
    return f32_bits((float)ref_round(v, &F_BF16)) >> 16;
  default: return ref_f16_bits(ref_round(v, &F_F16));
  }
}

/* ---------------------------------------------------- the CAST inputs -- */

/* Values of dtype `from` that probe every target's rounding: ties and
 * their neighbours, overflow edges, subnormals, specials, and a sweep. */
static size_t cast_inputs(uint32_t from, uint64_t *v, size_t cap) {
  size_t n = 0;
#define PUT(x)                                                                 \
  do {                                                                         \
    if (n < cap)                                                               \
      v[n++] = (x);                                                            \
  } while (0)
  if (is16(from)) { /* every pattern */
    for (uint32_t h = 0; h < 65536; h++)
      PUT(h);
    return n;
  }
  const int f64 = from == TYTO_PLUGIN_DTYPE_F64;
  /* Specials and edges, as doubles. */
  const double edges[] = {0.0,
                          -0.0,
                          INFINITY,
                          -INFINITY,
                          1.0,
                          -1.5,
                          65504.0,
                          65519.0,
                          65520.0,
                          -65520.0,
                          0x1.fep127,
                          0x1.ff8p127, /* rounds to bf16's infinity */
                          0x1.ff7fffffp127,
                          0x1p-14,
                          0x1p-24,
                          0x1p-25, /* tie to 0 in f16 */
                          0x1.8p-25,
                          0x1.4p-24,
                          0x1.8p-24,
                          0x1p-126,
                          0x1p-133,
                          0x1p-134,
                          0x1.8p-134,
                          0x1p-149,
                          1e39,
                          -1e300,
                          1e-300,
                          -1e-320,
                          3.14159265358979,
                          0.1};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    double d = edges[i];
    if (!f64 && fabs(d) > 0x1.fffffep127 && !isinf(d))
      continue;
    PUT(f64 ? f64_bits(d) : f32_bits((float)d));
  }
  /* NaNs: quiet and signalling, with payloads, both signs. */
  if (f64) {
    PUT(0x7ff8000000000000u);
    PUT(0xfff0000000000001u);
    PUT(0x7ff4000020000000u);
    PUT(0x7ffabcdef0123456u);
  } else {
    PUT(0x7fc00000u);
    PUT(0xff800001u);
    PUT(0x7fa12345u);
    PUT(0x7f802000u);
  }
  /* Ties of each 16-bit format and their neighbours: a representable
   * value plus half its ulp, exactly, and one step either side (in f64
   * also a 2^-40 relative step, which an f32 rounding on the way would
   * erase into a tie). */
  for (int t = 0; t < 2; t++) {
    const fmt *f = t ? &F_F16 : &F_BF16;
    for (int k = 0; k < 400; k++) {
      double e = t ? rng_uniform(-26, 16) : rng_uniform(-135, 127);
      double base = ref_round(ldexp(rng_uniform(1, 2), (int)floor(e)), f);
      if (isinf(base))
        continue;
      int ex;
      frexp(base, &ex);
      int q = (ex > f->emin ? ex : f->emin) - f->p;
      double tie = base + ldexp(1, q - 1);
      if (rng_next() & 1)
        tie = -tie;
      if (f64) {
        PUT(f64_bits(tie));
        PUT(f64_bits(tie * (1 + 0x1p-40)));
        PUT(f64_bits(tie * (1 - 0x1p-40)));
        PUT(f64_bits(nextafter(tie, 0)));
      } else if (fabs(tie) <= 0x1.fffffep127) {
        float ft = (float)tie;
        PUT(f32_bits(ft));
        PUT(f32_bits(nextafterf(ft, INFINITY)));
        PUT(f32_bits(nextafterf(ft, -INFINITY)));
      }
    }
  }
  /* A sweep of random bit patterns (for f64, half of them with an
   * exponent near f32's range). */
  while (n < cap) {
    uint64_t r = rng_next();
    if (f64 && (r & 1))
      r = (r & 0x800fffffffffffffu) | (uint64_t)(0x360 + (r >> 8) % 0x140)
                                          << 52;
    PUT(f64 ? r : (r >> 32));
  }
#undef PUT
  return n;
}

/* CAST from -> to over the inputs, rank 1, and (n_strided) the same
 * through a transposed 2-d layout on both sides. Bit for bit. */
static void test_cast_pair(tyto_plugin_device *dev, uint32_t from,
                           uint32_t to) {
  enum { CAP = 65536 };
  uint64_t *v = malloc(CAP * sizeof *v);
  void *in = malloc(CAP * 8), *out = malloc(CAP * 8);
  if (v == NULL || in == NULL || out == NULL) {
    CHECK(0, "out of memory");
    return;
  }
  size_t n = cast_inputs(from, v, CAP);
  for (size_t i = 0; i < n; i++)
    store_bits(from, in, i, v[i]);
  memset(out, 0xee, CAP * 8);
  for (int strided = 0; strided < 2; strided++) {
    int64_t shape1[1] = {(int64_t)n}, shape2[2] = {256, (int64_t)n / 256};
    tyto_plugin_layout li = strided ? layout(from, 2, shape2)
                                    : layout(from, 1, shape1),
                       lo = strided ? layout(to, 2, shape2)
                                    : layout(to, 1, shape1);
    if (strided) { /* the input read column by column */
      li.strides[0] = 1;
      li.strides[1] = 256;
    }
    tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_CAST, 1, &li, 1, &lo);
    void *arrays[2] = {in, out};
    if (!OK(run_op(dev, &d, arrays)))
      continue;
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)count_of(&lo); i++) {
      size_t src = strided ? (size_t)at_of(&li, (int64_t)i) : i;
      uint64_t want = ref_cast(from, v[src], to),
               got = load_bits(to, out, (size_t)at_of(&lo, (int64_t)i));
      if (got != want && bad++ < 4)
        fprintf(stderr,
                "  cast %s -> %s: input 0x%llx gave 0x%llx, want "
                "0x%llx\n",
                dt_name(from), dt_name(to), (unsigned long long)v[src],
                (unsigned long long)got, (unsigned long long)want);
    }
    CHECK(bad == 0, "cast %s -> %s%s: %zu of %zu results differ", dt_name(from),
          dt_name(to), strided ? " (strided)" : "", bad, (size_t)count_of(&lo));
  }
  free(v);
  free(in);
  free(out);
}

/* ------------------------------------------------- elementwise, 16-bit -- */

#define PARAM 0.1 /* LEAKY_RELU's slope, ELU's alpha */

/* The op's exact value (as the CPU plugin defines it) in f64. */
static double ref_op(uint32_t op, double x, double y, double z) {
  switch (op) {
  case TYTO_PLUGIN_OP_NEG: return -x;
  case TYTO_PLUGIN_OP_ABS: return fabs(x);
  case TYTO_PLUGIN_OP_SIGN: return x != x ? x : copysign(x == 0 ? 0 : 1, x);
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
  case TYTO_PLUGIN_OP_LEAKY_RELU: return x < 0 ? PARAM * x : x;
  case TYTO_PLUGIN_OP_ELU: return x < 0 ? PARAM * expm1(x) : x;
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
  case TYTO_PLUGIN_OP_MAX: return (x > y || x != x) ? x : y;
  case TYTO_PLUGIN_OP_MIN: return (x < y || x != x) ? x : y;
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

static int arity_of(uint32_t op) {
  return op >= TYTO_PLUGIN_OP_WHERE ? 3 : op >= TYTO_PLUGIN_OP_ADD ? 2 : 1;
}

/* Whether got passes against the exact want for a result of format u
 * (see the tolerances at the top); zeros must keep their sign. */
static int close_to(double got, double want, double u) {
  const double tiny = (u == 0x1p-11 ? 0x1p-25 : 0x1p-134) + 0x1p-120;
  if (isnan(want) || isnan(got))
    return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got))
    return got == want;
  if (want == 0 && got == 0)
    return signbit(want) == signbit(got);
  return fabs(got - want) <= u * fabs(want) + 0x1p-18 * fabs(want) + tiny;
}

/* Every elementwise op of dtype dt (f16 or bf16) over inputs rounded to
 * it: specials first, then random values of each op's domain. */
static void test_eltwise16(tyto_plugin_device *dev, uint32_t dt) {
  enum { N = 1024 };
  const double u = dt == TYTO_PLUGIN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
  const double big = dt == TYTO_PLUGIN_DTYPE_BF16 ? 0x1.fep127 : 65504.0;
  const double specials[] = {NAN,  INFINITY, -INFINITY, 0.0, -0.0, 1.0,
                             -1.0, big,      -big,      0.5, -2.5};
  const size_t ns = sizeof specials / sizeof specials[0];
  uint16_t x[3][N], out[N];
  for (uint32_t op = TYTO_PLUGIN_OP_NEG; op <= TYTO_PLUGIN_OP_FMA; op++) {
    if (op == TYTO_PLUGIN_OP_CAST ||
        (op > TYTO_PLUGIN_OP_ROUND && op < TYTO_PLUGIN_OP_ADD) ||
        (op > TYTO_PLUGIN_OP_GE && op < TYTO_PLUGIN_OP_WHERE))
      continue;
    int ar = arity_of(op);
    double lo = -4, hi = 4;
    if (op == TYTO_PLUGIN_OP_ACOSH)
      lo = 1;
    if (op == TYTO_PLUGIN_OP_POW)
      lo = 0.05;
    for (int k = 0; k < ar; k++)
      for (int i = 0; i < N; i++) {
        double v = rng_uniform(lo, hi);
        if (op == TYTO_PLUGIN_OP_POW && k == 1)
          v = rng_uniform(-3, 3);
        if (op == TYTO_PLUGIN_OP_WHERE && k == 0)
          v = (rng_next() & 1) ? 0 : v;
        /* specials in operand k over one block of positions */
        if (i >= (int)ns * k && i < (int)ns * (k + 1))
          v = specials[i - (int)ns * k];
        put_value(dt, x[k], i, v);
      }
    int64_t shape[1] = {N};
    tyto_plugin_layout l[4];
    for (int k = 0; k < 4; k++)
      l[k] = layout(dt, 1, shape);
    tyto_plugin_op_desc d = desc_of(op, (uint32_t)ar, l, 1, &l[3]);
    double param = PARAM;
    d.n_fattrs = 1;
    d.fattrs = &param;
    void *arrays[4] = {x[0], ar > 1 ? x[1] : out, ar > 2 ? x[2] : out, out};
    arrays[ar] = out;
    if (!OK(run_op(dev, &d, arrays)))
      continue;
    int bad = 0;
    for (int i = 0; i < N; i++) {
      double a = get_value(dt, x[0], i),
             b = ar > 1 ? get_value(dt, x[1], i) : 0,
             c = ar > 2 ? get_value(dt, x[2], i) : 0;
      double want = ref_op(op, a, b, c), got = get_value(dt, out, i);
      /* A result beyond the format's range is an infinity. */
      if (fabs(want) > big * (1 + u / 2) && !isinf(want))
        want = copysign(INFINITY, want);
      if (!close_to(got, want, u) && bad++ < 3)
        fprintf(stderr, "  %s op %u (%g, %g, %g): got %.9g, want %.9g\n",
                dt_name(dt), (unsigned)op, a, b, c, got, want);
    }
    CHECK(bad == 0, "%s elementwise op %u: %d of %d results off", dt_name(dt),
          (unsigned)op, bad, N);
  }
}

/* --------------------------------------------- mixed-dtype fused programs --
 */

enum { FN = 512 }; /* elements of the fused test */

typedef struct prog {
  tyto_plugin_fused_instr in[32];
  uint32_t n;
} prog;

static uint32_t emit(prog *p, uint32_t op, uint32_t a0, uint32_t a1,
                     double attr, uint32_t dtype) {
  tyto_plugin_fused_instr *x = &p->in[p->n];
  memset(x, 0, sizeof *x);
  x->struct_size = sizeof *x;
  x->op = op;
  x->arg[0] = a0;
  x->arg[1] = a1;
  x->attr = attr;
  x->dtype = dtype;
  return p->n++;
}

/* One op on FN-element operands of dtypes dts (inputs) and odt (output). */
static void run1(tyto_plugin_device *dev, uint32_t op, uint32_t n_in,
                 const uint32_t *dts, void *const *ins, uint32_t odt, void *out,
                 double attr) {
  int64_t shape[1] = {FN};
  tyto_plugin_layout l[4];
  for (uint32_t k = 0; k < n_in; k++)
    l[k] = layout(dts[k], 1, shape);
  l[3] = layout(odt, 1, shape);
  tyto_plugin_op_desc d = desc_of(op, n_in, l, 1, &l[3]);
  d.n_fattrs = 1;
  d.fattrs = &attr;
  void *arrays[4];
  for (uint32_t k = 0; k < n_in; k++)
    arrays[k] = ins[k];
  arrays[n_in] = out;
  OK(run_op(dev, &d, arrays));
}

/* A program of values in h (f16 or bf16), f32 and f64: 16-bit results
 * read again and written only, a constant and a parameter in h, CASTs
 * between all three (f64 to h with inputs a rounding through f32 would
 * round twice), compared with its ops run one by one. */
static void test_fused_mixed(tyto_plugin_device *dev, uint32_t h) {
  const uint32_t F32 = TYTO_PLUGIN_DTYPE_F32, F64 = TYTO_PLUGIN_DTYPE_F64;
  static uint16_t x[FN], o0[FN], o3[FN], t[8][FN];
  static float y[FN], o2[FN], s32[2][FN];
  static double z[FN], o1[FN], s64[2][FN];
  const fmt *f = h == TYTO_PLUGIN_DTYPE_BF16 ? &F_BF16 : &F_F16;
  const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-30};
  for (int i = 0; i < FN; i++) {
    put_value(h, x, i, i < 6 ? sp[i] : rng_uniform(-3, 3));
    y[i] = (float)rng_uniform(-2, 2);
    /* z: ties of h, nudged by less than an f32 ulp, and plain values */
    double b = ref_round(rng_uniform(0.5, 8), f), tie = 0;
    if (!isinf(b)) {
      int e;
      frexp(b, &e);
      tie = b + ldexp(1, e - f->p - 1);
    }
    z[i] = (i % 3 == 0)   ? tie * (1 + 0x1p-35)
           : (i % 3 == 1) ? tie * (1 - 0x1p-35)
                          : rng_uniform(-100, 100);
  }
  prog p = {.n = 0};
  const uint32_t I = TYTO_PLUGIN_FUSED_INPUT, C = TYTO_PLUGIN_OP_CAST;
  uint32_t v0 = emit(&p, I, 0, 0, 0, h), v1 = emit(&p, I, 1, 0, 0, F32),
           v2 = emit(&p, I, 2, 0, 0, F64);
  uint32_t v3 = emit(&p, C, v0, 0, 0, F32);
  uint32_t v4 = emit(&p, TYTO_PLUGIN_OP_MUL, v3, v1, 0, 0);
  uint32_t v5 = emit(&p, C, v4, 0, 0, h);
  uint32_t v6 = emit(&p, TYTO_PLUGIN_OP_EXP, v5, 0, 0, 0);
  uint32_t v7 = emit(&p, C, v2, 0, 0, h);
  uint32_t v8 = emit(&p, TYTO_PLUGIN_OP_ADD, v6, v7, 0, 0);
  uint32_t v9 = emit(&p, C, v8, 0, 0, F64);
  uint32_t v10 = emit(&p, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0.1, h);
  uint32_t v11 = emit(&p, TYTO_PLUGIN_OP_MUL, v8, v10, 0, 0);
  uint32_t v12 = emit(&p, TYTO_PLUGIN_OP_LEAKY_RELU, v11, 0, 0.3, 0);
  uint32_t v13 = emit(&p, C, v12, 0, 0, F32);
  uint32_t v14 = emit(&p, TYTO_PLUGIN_OP_ADD, v9, v2, 0, 0);
  uint32_t v15 = emit(&p, TYTO_PLUGIN_OP_SQRT, v7, 0, 0, 0);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v8, 0, 0, 0);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v14, 1, 0, 0);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v13, 2, 0, 0);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v15, 3, 0, 0);
  tyto_plugin_fused_program fp = {sizeof fp, p.n, p.in};
  int64_t shape[1] = {FN};
  tyto_plugin_layout l[7] = {layout(h, 1, shape),   layout(F32, 1, shape),
                             layout(F64, 1, shape), layout(h, 1, shape),
                             layout(F64, 1, shape), layout(F32, 1, shape),
                             layout(h, 1, shape)};
  tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_FUSED, 3, l, 4, l + 3);
  d.blob = &fp;
  d.blob_size = sizeof fp;
  void *arrays[7] = {x, y, z, o0, o1, o2, o3};
  if (!OK(run_op(dev, &d, arrays)))
    return;
  /* The same ops one by one. */
  const uint32_t dh[2] = {h, h}, d32[2] = {F32, F32}, d64[2] = {F64, F64};
  void *a[2];
  run1(dev, C, 1, dh, (void *[]){x}, F32, s32[0], 0); /* v3 */
  run1(dev, TYTO_PLUGIN_OP_MUL, 2, d32, (void *[]){s32[0], y}, F32, s32[1],
       0);                                              /* v4 */
  run1(dev, C, 1, d32, (void *[]){s32[1]}, h, t[0], 0); /* v5 */
  run1(dev, TYTO_PLUGIN_OP_EXP, 1, dh, (void *[]){t[0]}, h, t[1], 0);
  run1(dev, C, 1, d64, (void *[]){z}, h, t[2], 0); /* v7 */
  run1(dev, TYTO_PLUGIN_OP_ADD, 2, dh, (void *[]){t[1], t[2]}, h, t[3], 0);
  run1(dev, C, 1, dh, (void *[]){t[3]}, F64, s64[0], 0); /* v9 */
  for (int i = 0; i < FN; i++)
    put_value(h, t[4], i, 0.1); /* v10 */
  a[0] = t[3];
  a[1] = t[4];
  run1(dev, TYTO_PLUGIN_OP_MUL, 2, dh, a, h, t[5], 0); /* v11 */
  run1(dev, TYTO_PLUGIN_OP_LEAKY_RELU, 1, dh, (void *[]){t[5]}, h, t[6], 0.3);
  run1(dev, C, 1, dh, (void *[]){t[6]}, F32, s32[0], 0); /* v13 */
  run1(dev, TYTO_PLUGIN_OP_ADD, 2, d64, (void *[]){s64[0], z}, F64, s64[1],
       0); /* v14 */
  run1(dev, TYTO_PLUGIN_OP_SQRT, 1, dh, (void *[]){t[2]}, h, t[7], 0);
  CHECK(memcmp(o0, t[3], sizeof o0) == 0, "fused %s: output 0 differs",
        dt_name(h));
  CHECK(memcmp(o1, s64[1], sizeof o1) == 0, "fused %s: output 1 differs",
        dt_name(h));
  CHECK(memcmp(o2, s32[0], sizeof o2) == 0, "fused %s: output 2 differs",
        dt_name(h));
  CHECK(memcmp(o3, t[7], sizeof o3) == 0, "fused %s: output 3 differs",
        dt_name(h));
  /* And the f64 -> h CAST is one rounding of the exact value. */
  int bad = 0;
  for (int i = 0; i < FN; i++)
    bad += t[2][i] != (uint16_t)ref_cast(F64, f64_bits(z[i]), h);
  CHECK(bad == 0, "f64 -> %s inside the chain: %d double roundings", dt_name(h),
        bad);
}

/* ------------------------------------------------------------- refusals -- */

#define NO_FP16 "f16 needs cl_khr_fp16, which this device lacks"

/* A device without cl_khr_fp16 (and without the testing option): f16 is
 * not listed, the driver line says why, and every f16 op is refused with
 * that reason by supports_op and prepare alike. */
static void test_f16_refused(tyto_plugin_device *dev,
                             const tyto_plugin_device_info *di) {
  CHECK(!(di->dtypes & TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16)),
        "f16 listed without cl_khr_fp16");
  CHECK(strstr(di->driver_version,
               "f16: no (needs cl_khr_fp16, which this device lacks)") != NULL,
        "the driver line says why f16 is missing: \"%s\"", di->driver_version);
  int64_t shape[1] = {8};
  tyto_plugin_layout h = layout(TYTO_PLUGIN_DTYPE_F16, 1, shape),
                     f = layout(TYTO_PLUGIN_DTYPE_F32, 1, shape);
  tyto_plugin_layout hh[2] = {h, h};
  tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_ADD, 2, hh, 1, &h);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED, NO_FP16);
  EXPECT_ERR(df->prepare(dev, &d, &k, &ki), TYTO_PLUGIN_ERR_UNSUPPORTED,
             NO_FP16);
  d = desc_of(TYTO_PLUGIN_OP_CAST, 1, &f, 1, &h);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED, NO_FP16);
  d = desc_of(TYTO_PLUGIN_OP_SUM, 1, &h, 1, &h);
  EXPECT_ERR(df->prepare(dev, &d, &k, &ki), TYTO_PLUGIN_ERR_UNSUPPORTED,
             NO_FP16);
  /* f32 in and out, through f16 inside. */
  prog p = {.n = 0};
  uint32_t v0 = emit(&p, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  uint32_t v1 = emit(&p, TYTO_PLUGIN_OP_CAST, v0, 0, 0, TYTO_PLUGIN_DTYPE_F16);
  uint32_t v2 = emit(&p, TYTO_PLUGIN_OP_CAST, v1, 0, 0, TYTO_PLUGIN_DTYPE_F32);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v2, 0, 0, 0);
  tyto_plugin_fused_program fp = {sizeof fp, p.n, p.in};
  d = desc_of(TYTO_PLUGIN_OP_FUSED, 1, &f, 1, &f);
  d.blob = &fp;
  d.blob_size = sizeof fp;
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED, NO_FP16);
  EXPECT_ERR(df->prepare(dev, &d, &k, &ki), TYTO_PLUGIN_ERR_UNSUPPORTED,
             NO_FP16);
}

/* bf16 everywhere, linear algebra aside; mixed operands only by CAST. */
static void test_bf16_rules(tyto_plugin_device *dev,
                            const tyto_plugin_device_info *di) {
  CHECK(di->dtypes & TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_BF16),
        "bf16 is listed by every device");
  int64_t sq[2] = {3, 3};
  tyto_plugin_layout b = layout(TYTO_PLUGIN_DTYPE_BF16, 2, sq),
                     f = layout(TYTO_PLUGIN_DTYPE_F32, 2, sq);
  tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_INV, 1, &b, 1, &b);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
             "cast the operands to f32");
  tyto_plugin_layout bb[2] = {b, b};
  d = desc_of(TYTO_PLUGIN_OP_SOLVE, 2, bb, 1, &b);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
             "storage format");
  tyto_plugin_layout bf[2] = {b, f};
  d = desc_of(TYTO_PLUGIN_OP_ADD, 2, bf, 1, &f);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "input 0 has dtype bf16, output 0 has f32");
  /* A fused ADD of a bf16 and an f32 value, without a CAST. */
  prog p = {.n = 0};
  uint32_t v0 = emit(&p, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  uint32_t v1 = emit(&p, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  uint32_t v2 = emit(&p, TYTO_PLUGIN_OP_ADD, v0, v1, 0, 0);
  emit(&p, TYTO_PLUGIN_FUSED_OUTPUT, v2, 0, 0, 0);
  tyto_plugin_fused_program fp = {sizeof fp, p.n, p.in};
  d = desc_of(TYTO_PLUGIN_OP_FUSED, 2, bf, 1, &f);
  d.blob = &fp;
  d.blob_size = sizeof fp;
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "convert with CAST first");
}

/* ----------------------------------------------------------------- main -- */

static const uint32_t all_dtypes[4] = {
    TYTO_PLUGIN_DTYPE_F32, TYTO_PLUGIN_DTYPE_F64, TYTO_PLUGIN_DTYPE_BF16,
    TYTO_PLUGIN_DTYPE_F16};

/* The checks of one plugin instance on its device 0: with f16 or not. */
static void run_device(int fp16_option) {
  tyto_plugin_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  tyto_plugin_device *dev = NULL;
  if (!OK(info->fns->device_query(state, 0, &di)) ||
      !OK(info->fns->device_open(state, 0, &dev)))
    return;
  int f16 = (di.dtypes & TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16)) != 0;
  int f64 = (di.dtypes & TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64)) != 0;
  int native = f16 && strstr(di.driver_version, "f16:") == NULL;
  printf("%s: dtypes 0x%x, driver \"%s\"\n", di.name, (unsigned)di.dtypes,
         di.driver_version);
  if (fp16_option) {
    /* Only what the first instance could not check. */
    CHECK(f16, "the option fp16_without_extension lists f16");
    CHECK(native || strstr(di.driver_version, "without cl_khr_fp16") != NULL,
          "the driver line names the testing option: \"%s\"",
          di.driver_version);
  } else {
    if (!f16)
      test_f16_refused(dev, &di);
    test_bf16_rules(dev, &di);
  }
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      uint32_t from = all_dtypes[a], to = all_dtypes[b];
      int uses16 = from == TYTO_PLUGIN_DTYPE_F16 || to == TYTO_PLUGIN_DTYPE_F16;
      if ((!f64 && (a == 1 || b == 1)) || (uses16 && !f16) ||
          (fp16_option && !uses16))
        continue;
      test_cast_pair(dev, from, to);
    }
  uint32_t h = fp16_option ? TYTO_PLUGIN_DTYPE_F16 : TYTO_PLUGIN_DTYPE_BF16;
  if (!fp16_option || f16) {
    test_eltwise16(dev, h);
    if (f64)
      test_fused_mixed(dev, h);
  }
  df->device_close(dev);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : TEST_OPENCL_PLUGIN;
  char root[] = "/tmp/tyto-ocl-cast-XXXXXX";
  int rc = suite_begin(path, root);
  if (rc != 0)
    return rc;
  run_device(0);
  plugin_stop();
  /* f16 kernels on a device without cl_khr_fp16: the testing option. */
  setenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION", "1", 1);
  if (plugin_start(path) > 0)
    run_device(1);
  plugin_stop();
  unsetenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION");
  return suite_end(root);
}
