/* The CPU plugin's elementwise ops (NEG .. FMA) through the plugin ABI,
 * against a float64 reference computed here with libm.
 *
 * Tolerances: f64 |got - ref| <= 1e-12 |ref| + 1e-300 (the kernels call
 * the same libm or do one IEEE operation, so this is loose); f32 the
 * reference is computed in double on the f32-rounded inputs and rounded to
 * f32, then |got - ref| <= 2e-6 |ref| + 1e-38 (a few f32 ulps: f32 libm is
 * within ~1 ulp, composite ops such as sigmoid, softplus, elu, rsqrt add a
 * rounding or two; the absolute term covers subnormal results). The input
 * domains keep away from poles where the condition number would make any
 * f32 computation miss by more (tan near pi/2, atanh near +-1 only as
 * exact specials). NaN must match NaN and infinities must match exactly. */
#include "cpu/harness.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define NSP 14

static const double sp_unary[NSP] = {0.0,       -0.0,  1.0,  -1.0,  0.5,
                                     -0.5,      1.5,   -2.5, NAN,   INFINITY,
                                     -INFINITY, 1e-30, 3.0,  -1e-30};
static const double sp_bin_x[NSP] = {0.0,  -0.0,     1.0,       -1.0, NAN,
                                     2.0,  INFINITY, -INFINITY, 0.0,  3.0,
                                     -2.0, 0.5,      1.0,       -0.0};
static const double sp_bin_y[NSP] = {0.0, 0.0,  0.0, NAN, 1.0,  NAN, INFINITY,
                                     2.0, -0.0, 3.0, 0.5, -2.0, 1.0, 0.0};
static const double sp_cond[NSP] = {0.0,   -0.0,     NAN, 1.0, -1.0, 2.0,  0.0,
                                    1e-30, INFINITY, 0.0, 1.0, 0.0,  -0.0, 3.0};

typedef struct opspec {
  uint32_t op;
  int arity;
  double lo[3], hi[3];
  int ints[3]; /* random values are whole numbers in [lo, hi] */
  const double *sp[3];
} opspec;

#define UN(code, lo, hi)                                                       \
  {                                                                            \
    TYTO_PLUGIN_OP_##code, 1, {lo, 0, 0}, {hi, 0, 0}, {0, 0, 0}, {             \
      sp_unary, NULL, NULL                                                     \
    }                                                                          \
  }
#define BIN(code, lo0, hi0, lo1, hi1, ints)                                    \
  {                                                                            \
    TYTO_PLUGIN_OP_##code, 2, {lo0, lo1, 0}, {hi0, hi1, 0}, {ints, ints, 0}, { \
      sp_bin_x, sp_bin_y, NULL                                                 \
    }                                                                          \
  }

static const opspec specs[] = {
    UN(NEG, -10, 10),
    UN(ABS, -10, 10),
    UN(SIGN, -10, 10),
    UN(EXP, -20, 20),
    UN(LOG, 0.01, 100),
    UN(LOG1P, -0.99, 100),
    UN(EXPM1, -20, 20),
    UN(SQRT, 0.01, 100),
    UN(RSQRT, 0.01, 100),
    UN(SQUARE, -10, 10),
    UN(RECIPROCAL, -10, 10),
    UN(SIN, -10, 10),
    UN(COS, -10, 10),
    UN(TAN, -1.4, 1.4),
    UN(ASIN, -0.99, 0.99),
    UN(ACOS, -0.99, 0.99),
    UN(ATAN, -10, 10),
    UN(SINH, -20, 20),
    UN(COSH, -20, 20),
    UN(TANH, -10, 10),
    UN(ASINH, -10, 10),
    UN(ACOSH, 1, 100),
    UN(ATANH, -0.99, 0.99),
    UN(SIGMOID, -20, 20),
    UN(RELU, -10, 10),
    UN(LEAKY_RELU, -10, 10),
    UN(ELU, -10, 10),
    UN(SOFTPLUS, -20, 20),
    UN(ERF, -4, 4),
    UN(FLOOR, -10, 10),
    UN(CEIL, -10, 10),
    UN(ROUND, -10, 10),
    BIN(ADD, -10, 10, -10, 10, 0),
    BIN(SUB, -10, 10, -10, 10, 0),
    BIN(MUL, -10, 10, -10, 10, 0),
    BIN(DIV, -10, 10, -10, 10, 0),
    BIN(POW, 0.1, 10, -3, 3, 0),
    BIN(MAX, -3, 3, -3, 3, 1),
    BIN(MIN, -3, 3, -3, 3, 1),
    BIN(ATAN2, -10, 10, -10, 10, 0),
    BIN(EQ, -3, 3, -3, 3, 1),
    BIN(NE, -3, 3, -3, 3, 1),
    BIN(LT, -3, 3, -3, 3, 1),
    BIN(LE, -3, 3, -3, 3, 1),
    BIN(GT, -3, 3, -3, 3, 1),
    BIN(GE, -3, 3, -3, 3, 1),
    {TYTO_PLUGIN_OP_WHERE,
     3,
     {-1, -10, -10},
     {1, 10, 10},
     {1, 0, 0},
     {sp_cond, sp_bin_x, sp_unary}},
    {TYTO_PLUGIN_OP_FMA,
     3,
     {-10, -10, -10},
     {10, 10, 10},
     {0, 0, 0},
     {sp_bin_x, sp_bin_y, sp_unary}},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static const double leaky_slope = 0.01, elu_alpha = 1.5;

/* The float64 reference, written independently of the plugin's
 * formulas where a textbook one exists. */
static double ref(uint32_t op, double x, double y, double z) {
  switch (op) {
  case TYTO_PLUGIN_OP_NEG: return -x;
  case TYTO_PLUGIN_OP_ABS: return fabs(x);
  case TYTO_PLUGIN_OP_SIGN: return isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : 0;
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
  case TYTO_PLUGIN_OP_SIGMOID:
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
  case TYTO_PLUGIN_OP_RELU: return isnan(x) ? x : x > 0 ? x : 0;
  case TYTO_PLUGIN_OP_LEAKY_RELU:
    return x >= 0 || isnan(x) ? x : leaky_slope * x;
  case TYTO_PLUGIN_OP_ELU: return x >= 0 || isnan(x) ? x : elu_alpha * expm1(x);
  case TYTO_PLUGIN_OP_SOFTPLUS:
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case TYTO_PLUGIN_OP_ERF: return erf(x);
  case TYTO_PLUGIN_OP_FLOOR: return floor(x);
  case TYTO_PLUGIN_OP_CEIL: return ceil(x);
  case TYTO_PLUGIN_OP_ROUND: return round(x);
  case TYTO_PLUGIN_OP_ADD: return x + y;
  case TYTO_PLUGIN_OP_SUB: return x - y;
  case TYTO_PLUGIN_OP_MUL: return x * y;
  case TYTO_PLUGIN_OP_DIV: return x / y;
  case TYTO_PLUGIN_OP_POW: return pow(x, y);
  case TYTO_PLUGIN_OP_MAX: return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
  case TYTO_PLUGIN_OP_MIN: return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
  case TYTO_PLUGIN_OP_ATAN2: return atan2(x, y);
  case TYTO_PLUGIN_OP_EQ: return x == y;
  case TYTO_PLUGIN_OP_NE: return x != y;
  case TYTO_PLUGIN_OP_LT: return x < y;
  case TYTO_PLUGIN_OP_LE: return x <= y;
  case TYTO_PLUGIN_OP_GT: return x > y;
  case TYTO_PLUGIN_OP_GE: return x >= y;
  case TYTO_PLUGIN_OP_WHERE: return x != 0 ? y : z;
  case TYTO_PLUGIN_OP_FMA: return fma(x, y, z);
  default: ck_abort_msg("no reference for op %u", op);
  }
  return 0;
}

static double to_dtype(uint32_t dt, double v) {
  if (dt == F64)
    return v;
  if (v > FLT_MAX && !isinf(v))
    return INFINITY;
  if (v < -FLT_MAX && !isinf(v))
    return -INFINITY;
  return (float)v;
}

static uint64_t rng_state;
static double rnd(double lo, double hi, int ints) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(rng_state >> 11) / 9007199254740992.0;
  double v = lo + (hi - lo) * u;
  return ints ? floor(lo + (hi - lo + 1) * u) : v;
}

/* A tensor of logical `shape` laid out with `strides`; the offset is
 * chosen so negative strides stay in range, plus `extra` elements. */
static h_tensor mk(uint32_t dt, uint32_t rank, const int64_t *shape,
                   const int64_t *strides, int64_t extra) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  int64_t lo = 0, hi = 0, empty = 0;
  for (uint32_t i = 0; i < rank; i++) {
    empty |= shape[i] == 0;
    t.layout.strides[i] = strides[i];
    int64_t span = (shape[i] - 1) * strides[i];
    if (span < 0)
      lo += span;
    else
      hi += span;
  }
  if (empty)
    lo = hi = 0;
  t.layout.offset = extra - lo;
  t.storage = t.layout.offset + hi + 1;
  free(t.values);
  t.values = calloc((size_t)t.storage, sizeof(double));
  return t;
}

/* Multi-index of row-major flat index f. */
static void unflat(const h_tensor *t, int64_t f, int64_t *idx) {
  for (uint32_t a = t->layout.rank; a-- > 0;) {
    idx[a] = f % t->layout.shape[a];
    f /= t->layout.shape[a];
  }
}

static int64_t numel(const h_tensor *t) {
  int64_t n = 1;
  for (uint32_t a = 0; a < t->layout.rank; a++)
    n *= t->layout.shape[a];
  return n;
}

static const double sentinel = 12345.0;

static const char *cpu_name(uint32_t op);

/* Fills the inputs (storage element k of input j gets special k, then
 * random values), runs the op and checks every output element against
 * the reference and every other output storage element is untouched. */
static void run_check(harness *hx, const opspec *s, uint32_t dt, h_tensor *in,
                      h_tensor *out, const char *what) {
  for (int j = 0; j < s->arity; j++)
    for (int64_t k = 0; k < in[j].storage; k++)
      in[j].values[k] = to_dtype(
          dt, k < NSP ? s->sp[j][k] : rnd(s->lo[j], s->hi[j], s->ints[j]));
  for (int64_t k = 0; k < out->storage; k++)
    out->values[k] = sentinel;
  double fattrs[1] = {s->op == TYTO_PLUGIN_OP_ELU ? elu_alpha : leaky_slope};
  const char *err = harness_run(hx, s->op, in, (uint32_t)s->arity, out, 1, NULL,
                                0, fattrs, 1);
  ck_assert_msg(err == NULL, "%s %s (%s): %s", cpu_name(s->op),
                dt == F32 ? "f32" : "f64", what, err);
  char *written = calloc((size_t)out->storage, 1);
  int64_t n = numel(out), idx[TYTO_PLUGIN_MAX_RANK];
  double rtol = dt == F32 ? 2e-6 : 1e-12, atol = dt == F32 ? 1e-38 : 1e-300;
  for (int64_t f = 0; f < n; f++) {
    unflat(out, f, idx);
    double v[3] = {0, 0, 0};
    for (int j = 0; j < s->arity; j++)
      v[j] = in[j].values[h_at(&in[j], idx)];
    double want = to_dtype(dt, ref(s->op, v[0], v[1], v[2]));
    int64_t at = h_at(out, idx);
    written[at] = 1;
    double got = out->values[at];
    if (!h_close(got, want, rtol, atol))
      ck_abort_msg("%s %s (%s): element %lld of (%.17g, %.17g, %.17g) is "
                   "%.17g, expected %.17g",
                   cpu_name(s->op), dt == F32 ? "f32" : "f64", what,
                   (long long)f, v[0], v[1], v[2], got, want);
  }
  for (int64_t k = 0; k < out->storage; k++)
    if (!written[k])
      ck_assert_msg(out->values[k] == sentinel,
                    "%s (%s): storage element %lld outside the output was "
                    "written",
                    cpu_name(s->op), what, (long long)k);
  free(written);
}

/* ------------------------------------------------------------------------ */

static void free_all(h_tensor *in, int n, h_tensor *out) {
  for (int j = 0; j < n; j++)
    h_tensor_free(&in[j]);
  h_tensor_free(out);
}

START_TEST(test_contiguous) {
  harness hx;
  harness_open(&hx);
  rng_state = 1;
  for (size_t i = 0; i < NSPECS; i++)
    for (uint32_t dt = F32; dt <= F64; dt++) {
      const opspec *s = &specs[i];
      int64_t shape[2] = {4, 19};
      h_tensor in[3], out = h_tensor_new(dt, 2, shape, NULL);
      for (int j = 0; j < s->arity; j++)
        in[j] = h_tensor_new(dt, 2, shape, NULL);
      run_check(&hx, s, dt, in, &out, "contiguous [4,19]");
      free_all(in, s->arity, &out);
    }
  harness_close(&hx);
}
END_TEST

/* Input 0 transposed, input 1 broadcast along axis 0, input 2 flipped
 * with steps, output stepped with an offset. */
START_TEST(test_strided) {
  harness hx;
  harness_open(&hx);
  rng_state = 2;
  const int64_t shape[2] = {5, 7};
  const int64_t st_in[3][2] = {{1, 5}, {0, 1}, {-14, -2}}, st_out[2] = {16, 2};
  for (size_t i = 0; i < NSPECS; i++)
    for (uint32_t dt = F32; dt <= F64; dt++) {
      const opspec *s = &specs[i];
      h_tensor in[3], out = mk(dt, 2, shape, st_out, 1);
      for (int j = 0; j < s->arity; j++)
        in[j] = mk(dt, 2, shape, st_in[j], j);
      run_check(&hx, s, dt, in, &out, "transposed/broadcast/flipped");
      free_all(in, s->arity, &out);
    }
  harness_close(&hx);
}
END_TEST

/* Scalar and column broadcasts: stride 0 on the innermost axis. */
START_TEST(test_broadcast_inner) {
  harness hx;
  harness_open(&hx);
  rng_state = 3;
  const int64_t shape[2] = {6, 300};
  const int64_t st_in[3][2] = {{0, 0}, {1, 0}, {300, 1}}, st_out[2] = {300, 1};
  for (size_t i = 0; i < NSPECS; i++)
    for (uint32_t dt = F32; dt <= F64; dt++) {
      const opspec *s = &specs[i];
      h_tensor in[3], out = mk(dt, 2, shape, st_out, 0);
      for (int j = 0; j < s->arity; j++)
        in[j] = mk(dt, 2, shape, st_in[j], 0);
      run_check(&hx, s, dt, in, &out, "scalar/column broadcast");
      free_all(in, s->arity, &out);
    }
  harness_close(&hx);
}
END_TEST

START_TEST(test_rank0_and_empty) {
  harness hx;
  harness_open(&hx);
  rng_state = 4;
  for (size_t i = 0; i < NSPECS; i++)
    for (uint32_t dt = F32; dt <= F64; dt++) {
      const opspec *s = &specs[i];
      h_tensor in[3], out = h_tensor_new(dt, 0, NULL, NULL);
      for (int j = 0; j < s->arity; j++)
        in[j] = h_tensor_new(dt, 0, NULL, NULL);
      run_check(&hx, s, dt, in, &out, "rank 0");
      free_all(in, s->arity, &out);

      const int64_t shape[3] = {3, 0, 2};
      out = h_tensor_new(dt, 3, shape, NULL);
      for (int j = 0; j < s->arity; j++)
        in[j] = h_tensor_new(dt, 3, shape, NULL);
      run_check(&hx, s, dt, in, &out, "size-0 axis");
      free_all(in, s->arity, &out);
    }
  harness_close(&hx);
}
END_TEST

static const opspec *spec_of(uint32_t op) {
  for (size_t i = 0; i < NSPECS; i++)
    if (specs[i].op == op)
      return &specs[i];
  ck_abort_msg("no spec for op %u", op);
  return NULL;
}

/* Big enough that the pool splits the work, in each layout path. */
START_TEST(test_large) {
  harness hx;
  harness_open(&hx);
  rng_state = 5;
  struct {
    uint32_t op, dt;
    int64_t shape[2];
    int64_t st[4][2]; /* inputs, then output */
    const char *what;
  } cases[] = {
      {TYTO_PLUGIN_OP_ADD,
       F32,
       {1000, 1000},
       {{1000, 1}, {1000, 1}, {0, 0}, {1000, 1}},
       "add 1e6 contiguous"},
      {TYTO_PLUGIN_OP_MUL,
       F64,
       {1000, 1000},
       {{1000, 1}, {0, 0}, {0, 0}, {1000, 1}},
       "mul 1e6 by a scalar"},
      {TYTO_PLUGIN_OP_EXP,
       F32,
       {1, 1 << 20},
       {{0, 1}, {0, 0}, {0, 0}, {0, 1}},
       "exp 2^20 contiguous"},
      {TYTO_PLUGIN_OP_FMA,
       F64,
       {1000, 1000},
       {{1, 1000}, {0, 1}, {1000, 1}, {1000, 1}},
       "fma transposed, row-broadcast"},
      {TYTO_PLUGIN_OP_SUB,
       F32,
       {3, 100000},
       {{100000, 1}, {1, 0}, {0, 0}, {100000, 1}},
       "sub long rows"},
      {TYTO_PLUGIN_OP_RELU,
       F32,
       {200000, 5},
       {{1, 200000}, {0, 0}, {0, 0}, {5, 1}},
       "relu short transposed rows"},
      {TYTO_PLUGIN_OP_MAX,
       F64,
       {500, 2000},
       {{2000, 1}, {-1, -500}, {0, 0}, {4000, 2}},
       "max strided output"},
      {TYTO_PLUGIN_OP_SIGMOID,
       F64,
       {700, 1500},
       {{1, 700}, {0, 0}, {0, 0}, {1500, 1}},
       "sigmoid transposed"},
      {TYTO_PLUGIN_OP_WHERE,
       F32,
       {1000, 1000},
       {{1000, 1}, {1000, 1}, {0, 1}, {1000, 1}},
       "where"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const opspec *s = spec_of(cases[c].op);
    h_tensor in[3], out = mk(cases[c].dt, 2, cases[c].shape, cases[c].st[3], 0);
    for (int j = 0; j < s->arity; j++)
      in[j] = mk(cases[c].dt, 2, cases[c].shape, cases[c].st[j], 0);
    run_check(&hx, s, cases[c].dt, in, &out, cases[c].what);
    free_all(in, s->arity, &out);
  }
  harness_close(&hx);
}
END_TEST

/* EXP and SIGMOID in f32 use the plugin's own vectorised e^x: sweep it
 * densely across its whole range, overflow and subnormal results
 * included, in a size that the pool splits. The plugin's threads flush
 * subnormals to zero (docs/configuration.md): below FLT_MIN, 0 is right. */
START_TEST(test_exp_sweep) {
  harness hx;
  harness_open(&hx);
  const int64_t n = 200000;
  uint32_t ops[2] = {TYTO_PLUGIN_OP_EXP, TYTO_PLUGIN_OP_SIGMOID};
  for (int k = 0; k < 2; k++) {
    h_tensor x = h_tensor_new(F32, 1, &n, NULL),
             y = h_tensor_new(F32, 1, &n, NULL);
    for (int64_t i = 0; i < n; i++)
      x.values[i] = (float)(-110.0 + 205.0 * (double)i / (double)(n - 1));
    ck_assert_ptr_null(
        harness_run(&hx, ops[k], &x, 1, &y, 1, NULL, 0, NULL, 0));
    for (int64_t i = 0; i < n; i++) {
      double xv = x.values[i];
      double want = to_dtype(F32, ops[k] == TYTO_PLUGIN_OP_EXP
                                      ? exp(xv)
                                      : ref(TYTO_PLUGIN_OP_SIGMOID, xv, 0, 0));
      if (!h_close(y.values[i], want, 2e-6, FLT_MIN))
        ck_abort_msg("%s f32 of %.9g is %.9g, expected %.9g", cpu_name(ops[k]),
                     xv, y.values[i], want);
    }
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

/* TANH and ERF in f32 are the plugin's own (eltwise_kern.h): every
 * 4096th float from FLT_MIN to where the function is 1 in f32 and a
 * little beyond, both signs, and the neighbours of the point where each
 * changes formula, within 2 ulp of the function rounded to f32
 * (exhaustive runs over all floats found 1.33 for tanh, 1.96 for erf);
 * f(-0) is -0, f(+-inf) +-1, NaN stays NaN. */
static void odd_sweep(uint32_t op, double (*fn)(double), float top,
                      float edge) {
  harness hx;
  harness_open(&hx);
  uint32_t lo, hi, b;
  float f = FLT_MIN;
  memcpy(&lo, &f, sizeof lo);
  memcpy(&hi, &top, sizeof hi);
  int64_t n = 2 * (int64_t)((hi - lo) / 4096 + 1) + 16;
  h_tensor x = h_tensor_new(F32, 1, &n, NULL),
           y = h_tensor_new(F32, 1, &n, NULL);
  int64_t k = 0;
  for (b = lo; b <= hi && k + 2 <= n - 16; b += 4096) {
    memcpy(&f, &b, sizeof f);
    x.values[k++] = f;
    x.values[k++] = -f;
  }
  const double special[] = {0.0,           -0.0,
                            INFINITY,      -INFINITY,
                            NAN,           nextafterf(edge, 0.0f),
                            edge,          nextafterf(edge, 1.0f),
                            -(double)edge, (double)top,
                            44.5,          100.0};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    x.values[k++] = special[i];
  n = k;
  x.layout.shape[0] = y.layout.shape[0] = n;
  ck_assert_ptr_null(harness_run(&hx, op, &x, 1, &y, 1, NULL, 0, NULL, 0));
  for (int64_t i = 0; i < n; i++) {
    double xv = x.values[i], got = y.values[i];
    if (isnan(xv)) {
      ck_assert_msg(isnan(got), "%s f32 of NaN is %.9g", cpu_name(op), got);
      continue;
    }
    float want = (float)fn(xv);
    ck_assert_msg(!signbit(got) == !signbit(want), "%s f32 of %.9g is %.9g",
                  cpu_name(op), xv, got);
    double ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
    ck_assert_msg(fabs(got - fn(xv)) <= 2 * ulp,
                  "%s f32 of %.9g is %.9g, expected %.9g (2 ulp: %.3g)",
                  cpu_name(op), xv, got, (double)want, 2 * ulp);
  }
  h_tensor_free(&x);
  h_tensor_free(&y);
  harness_close(&hx);
}

START_TEST(test_tanh_sweep) {
  odd_sweep(TYTO_PLUGIN_OP_TANH, tanh, 12.0f, 0.625f);
}
END_TEST

START_TEST(test_erf_sweep) {
  odd_sweep(TYTO_PLUGIN_OP_ERF, erf, 5.0f, 0.9f);
}
END_TEST

static const char *run_err(harness *hx, uint32_t op, h_tensor *in,
                           uint32_t n_in, h_tensor *out, uint32_t n_fattrs) {
  double fattrs[1] = {0.5};
  return harness_run(hx, op, in, n_in, out, 1, NULL, 0, fattrs, n_fattrs);
}

START_TEST(test_errors) {
  harness hx;
  harness_open(&hx);
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  h_tensor a = h_tensor_new(F32, 2, s23, NULL),
           b64 = h_tensor_new(F64, 2, s23, NULL),
           b32 = h_tensor_new(F32, 2, s32, NULL),
           o = h_tensor_new(F32, 2, s23, NULL);
  h_tensor in[3] = {a, b64, a};
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_ADD, in, 2, &o, 0),
                   "add: input 1 is f64 but the output is f32 (all operands "
                   "must have one dtype)");
  in[1] = b32;
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_MUL, in, 2, &o, 0),
                   "mul: input 1 has shape [3,2] but the output has shape "
                   "[2,3] (inputs must arrive broadcast to the output's "
                   "shape)");
  in[1] = a;
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_ADD, in, 1, &o, 0),
                   "add: expected 2 inputs and 1 output, got 1 and 1");
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_EXP, in, 2, &o, 0),
                   "exp: expected 1 input and 1 output, got 2 and 1");
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_FMA, in, 2, &o, 0),
                   "fma: expected 3 inputs and 1 output, got 2 and 1");
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_LEAKY_RELU, in, 1, &o, 0),
                   "leaky_relu: expected the negative slope as real "
                   "attribute 0, got 0 real attributes");
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_ELU, in, 1, &o, 0),
                   "elu: expected the alpha as real attribute 0, got 0 real "
                   "attributes");
  ck_assert_ptr_null(run_err(&hx, TYTO_PLUGIN_OP_ELU, in, 1, &o, 1));
  ck_assert_str_eq(run_err(&hx, 50, in, 1, &o, 0),
                   "op 50 is not an elementwise op known to the cpu device");
  h_tensor bo = o;
  bo.layout.strides[0] = 0;
  ck_assert_str_eq(run_err(&hx, TYTO_PLUGIN_OP_NEG, in, 1, &bo, 0),
                   "neg: the output has stride 0 on axis 0 of extent 2; each "
                   "output element must have its own place");
  h_tensor_free(&a);
  h_tensor_free(&b64);
  h_tensor_free(&b32);
  h_tensor_free(&o);
  harness_close(&hx);
}
END_TEST

static const char *cpu_name(uint32_t op) {
  static char buf[16];
  switch (op) {
#define N(c)                                                                   \
  case TYTO_PLUGIN_OP_##c: return #c;
    N(NEG)
    N(ABS)
    N(SIGN)
    N(EXP)
    N(LOG) N(LOG1P) N(EXPM1) N(SQRT) N(RSQRT) N(SQUARE) N(RECIPROCAL) N(SIN)
        N(COS) N(TAN) N(ASIN) N(ACOS) N(ATAN) N(SINH) N(COSH) N(TANH) N(ASINH)
            N(ACOSH) N(ATANH) N(SIGMOID) N(RELU) N(LEAKY_RELU) N(ELU)
                N(SOFTPLUS) N(ERF) N(FLOOR) N(CEIL) N(ROUND) N(ADD) N(SUB)
                    N(MUL) N(DIV) N(POW) N(MAX) N(MIN) N(ATAN2) N(EQ) N(NE)
                        N(LT) N(LE) N(GT) N(GE) N(WHERE) N(FMA)
#undef N
                            default : break;
  }
  snprintf(buf, sizeof buf, "op %u", op);
  return buf;
}

static Suite *eltwise_suite(void) {
  Suite *s = suite_create("cpu_eltwise");
  TCase *tc = tcase_create("eltwise");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_contiguous);
  tcase_add_test(tc, test_strided);
  tcase_add_test(tc, test_broadcast_inner);
  tcase_add_test(tc, test_rank0_and_empty);
  tcase_add_test(tc, test_large);
  tcase_add_test(tc, test_exp_sweep);
  tcase_add_test(tc, test_tanh_sweep);
  tcase_add_test(tc, test_erf_sweep);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(eltwise_suite());
}
