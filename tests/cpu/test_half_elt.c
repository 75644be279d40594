/* The CPU plugin's 16-bit dtypes (F16, BF16; ABI 1.5) through the plugin
 * ABI, part 2 of 3: elementwise ops and fused programs.
 *
 *  - Every elementwise op (NEG .. FMA) in f16 and bf16, on contiguous,
 *    transposed, broadcast and stepped layouts, (a) against a float64
 *    reference computed from the exact 16-bit inputs, within the tolerance
 *    derived at elt_tolerance(), and (b) bit for bit against the same op
 *    run in f32 on the same inputs and rounded once by the tests' own
 *    converter: ops.md's "read exactly into f32, compute as f32 does,
 *    round once". (b) covers the special values (NaN, infinities, zeros,
 *    subnormals, the largest finite values), which (a) leaves out.
 *  - Fused programs whose values have different dtypes (random ones over
 *    all four dtypes with CAST between them, and a mixed-precision layer,
 *    bf16 -> f32 -> + f32 bias -> relu -> bf16) bit for bit against their
 *    ops run one at a time; malformed mixed programs refused by message.
 *
 * Part 1 is test_half.c; part 3 test_half_ops.c. */
#include "cpu/fused_harness.h"
#include "cpu/half_test.h"

#define OPC(o) TYTO_PLUGIN_OP_##o

/* ------------------------------------------------------------------------ */
/* Elementwise ops                                                           */
/* ------------------------------------------------------------------------ */

/* The op in float64 (ops.md's definitions). */
static double ref_op(uint32_t op, double x, double y, double z, double pa) {
  switch (op) {
  case OPC(NEG): return -x;
  case OPC(ABS): return fabs(x);
  case OPC(SIGN): return x != x ? x : x == 0 ? x : copysign(1.0, x);
  case OPC(EXP): return exp(x);
  case OPC(LOG): return log(x);
  case OPC(LOG1P): return log1p(x);
  case OPC(EXPM1): return expm1(x);
  case OPC(SQRT): return sqrt(x);
  case OPC(RSQRT): return 1 / sqrt(x);
  case OPC(SQUARE): return x * x;
  case OPC(RECIPROCAL): return 1 / x;
  case OPC(SIN): return sin(x);
  case OPC(COS): return cos(x);
  case OPC(TAN): return tan(x);
  case OPC(ASIN): return asin(x);
  case OPC(ACOS): return acos(x);
  case OPC(ATAN): return atan(x);
  case OPC(SINH): return sinh(x);
  case OPC(COSH): return cosh(x);
  case OPC(TANH): return tanh(x);
  case OPC(ASINH): return asinh(x);
  case OPC(ACOSH): return acosh(x);
  case OPC(ATANH): return atanh(x);
  case OPC(SIGMOID): return 1 / (1 + exp(-x));
  case OPC(RELU): return x < 0 ? 0 : x;
  case OPC(LEAKY_RELU): return x < 0 ? pa * x : x;
  case OPC(ELU): return x < 0 ? pa * expm1(x) : x;
  case OPC(SOFTPLUS): return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
  case OPC(ERF): return erf(x);
  case OPC(FLOOR): return floor(x);
  case OPC(CEIL): return ceil(x);
  case OPC(ROUND): return round(x);
  case OPC(ADD): return x + y;
  case OPC(SUB): return x - y;
  case OPC(MUL): return x * y;
  case OPC(DIV): return x / y;
  case OPC(POW): return pow(x, y);
  case OPC(MAX): return x > y || x != x ? x : y;
  case OPC(MIN): return x < y || x != x ? x : y;
  case OPC(ATAN2): return atan2(x, y);
  case OPC(EQ): return x == y;
  case OPC(NE): return x != y;
  case OPC(LT): return x < y;
  case OPC(LE): return x <= y;
  case OPC(GT): return x > y;
  case OPC(GE): return x >= y;
  case OPC(WHERE): return x != 0 ? y : z;
  default: return fma(x, y, z); /* FMA */
  }
}

/* An op and where its inputs are drawn: uniformly from [lo, hi] (with a
 * random sign when `sign`), or (discrete) from a few values that make ties
 * and zeros. k: the f32 computation's error in ulps of its result, 1 for
 * correctly rounded arithmetic, 8 for the C library's and the plugin's own
 * transcendental functions. attr: LEAKY_RELU's slope, ELU's alpha (exact
 * in f32). */
typedef struct elt_case {
  uint32_t op;
  int arity;
  double lo[3], hi[3];
  int sign, discrete, k;
  double attr;
} elt_case;

#define U(o, lo, hi, k)                                                        \
  { OPC(o), 1, {lo}, {hi}, 0, 0, k, 0 }
#define B(o, lo, hi, k)                                                        \
  { OPC(o), 2, {lo, lo}, {hi, hi}, 0, 0, k, 0 }
static const elt_case cases[] = {
    U(NEG, -4, 4, 1),
    U(ABS, -4, 4, 1),
    U(SIGN, -4, 4, 1),
    U(EXP, -8, 8, 8),
    U(LOG, 0x1p-6, 100, 8),
    U(LOG1P, -0.9, 100, 8),
    U(EXPM1, -8, 8, 8),
    U(SQRT, 0, 100, 1),
    U(RSQRT, 0x1p-6, 100, 8),
    U(SQUARE, -100, 100, 1),
    {OPC(RECIPROCAL), 1, {0.01}, {4}, 1, 0, 1, 0},
    U(SIN, -10, 10, 8),
    U(COS, -10, 10, 8),
    U(TAN, -1.5, 1.5, 8),
    U(ASIN, -1, 1, 8),
    U(ACOS, -1, 1, 8),
    U(ATAN, -10, 10, 8),
    U(SINH, -8, 8, 8),
    U(COSH, -8, 8, 8),
    U(TANH, -4, 4, 8),
    U(ASINH, -10, 10, 8),
    U(ACOSH, 1, 50, 8),
    U(ATANH, -0.99, 0.99, 8),
    U(SIGMOID, -10, 10, 8),
    U(RELU, -4, 4, 1),
    {OPC(LEAKY_RELU), 1, {-4}, {4}, 0, 0, 1, 0.125},
    {OPC(ELU), 1, {-4}, {4}, 0, 0, 8, 1.5},
    U(SOFTPLUS, -10, 10, 8),
    U(ERF, -3, 3, 8),
    U(FLOOR, -10, 10, 1),
    U(CEIL, -10, 10, 1),
    U(ROUND, -10, 10, 1),
    B(ADD, -100, 100, 1),
    B(SUB, -100, 100, 1),
    B(MUL, -100, 100, 1),
    {OPC(DIV), 2, {-100, 0.25}, {100, 4}, 1, 0, 1, 0},
    {OPC(POW), 2, {0.1, -3}, {4, 3}, 0, 0, 8, 0},
    B(MAX, -4, 4, 1),
    B(MIN, -4, 4, 1),
    B(ATAN2, -4, 4, 8),
    {OPC(EQ), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(NE), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(LT), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(LE), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(GT), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(GE), 2, {0}, {0}, 0, 1, 1, 0},
    {OPC(WHERE), 3, {0, -4, -4}, {0, 4, 4}, 0, 1, 1, 0},
    {OPC(FMA), 3, {-10, -10, -10}, {10, 10, 10}, 0, 0, 1, 0}};
#undef U
#undef B

/* The tolerance of a 16-bit result against the exact value `want`.
 *
 * The plugin computes r32 = the f32 op on the exact inputs, then rounds it
 * once: got = r32 (1 + d1), |d1| <= u, u = 2^-8 (bf16) or 2^-11 (f16), the
 * unit roundoff, for results in the normal range; below it the rounding
 * errs by at most half the smallest subnormal spacing, 2^-25 in f16, and in
 * bf16 (whose subnormals are f32's) FTZ may flush a result below 2^-126 to
 * zero: an absolute a = 2^-25 (f16), 2^-126 (bf16). The f32 op itself:
 * r32 = want (1 + d2), |d2| <= k 2^-24 (k ulps of binary32; the inputs are
 * exact, so no condition number multiplies an input error: only the op's
 * own rounding and approximation count). Together
 *   |got - want| <= (u + k 2^-24 (1 + u)) |want| + a,
 * and 1.01 k covers (1 + u). */
static double elt_tolerance(uint32_t dt, int k, double want) {
  double u = dt == BF16 ? 0x1p-8 : 0x1p-11, a = dt == BF16 ? 0x1p-126 : 0x1p-25;
  return (u + 1.01 * k * 0x1p-24) * fabs(want) + a;
}

/* Values that go wrong if anything does; the first positions of each
 * contiguous input hold their pairs. */
static double special(uint32_t dt, int i) {
  double mx = dt == F16 ? 65504.0 : 0x1.fep127;
  double sub = dt == F16 ? 0x1p-24 : 0x1p-133;
  const double v[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0,
                      0.5, 2.0,  mx,       -mx,       sub, -sub};
  return v[i % 13];
}

static double draw(const elt_case *c, int j, uint32_t dt) {
  static const double disc[] = {-2, -1, -0.5, 0, -0.0, 0.5, 1, 2};
  if (c->discrete && (c->op != OPC(WHERE) || j == 0))
    return disc[rnd64() % 8];
  double v = rnd_in(c->lo[j], c->hi[j]);
  if (c->sign && rnd64() % 2)
    v = -v;
  return round_to(v, dt);
}

/* Whether the float64 check applies to input value v: inside the case's
 * domain, and not a bf16 subnormal, which the plugin's DAZ may read as a
 * zero (ops.md allows it; the check against the f32 op covers them). */
static int in_domain(const elt_case *c, int j, double v, uint32_t dt) {
  if (dt == BF16 && v != 0 && fabs(v) < 0x1p-126)
    return 0;
  if (c->discrete && (c->op != OPC(WHERE) || j == 0))
    return 1;
  double a = c->sign ? fabs(v) : v;
  return a >= c->lo[j] && a <= c->hi[j];
}

/* The layout of input j (or the output, j = 3) in variant `var`: 0 all
 * contiguous; 1 input 0 stored transposed, input 1 one row broadcast,
 * input 2 and the output with a gap after each element. */
static h_tensor make_tensor(uint32_t dt, const int64_t *shape, int var, int j) {
  h_tensor t = h_tensor_new(dt, 2, shape, NULL);
  if (var == 1 && j == 0) {
    t.layout.strides[0] = 1;
    t.layout.strides[1] = shape[0];
  } else if (var == 1 && j == 1) {
    t.layout.strides[0] = 0;
  } else if (var == 1) {
    t.layout.strides[0] = 2 * shape[1];
    t.layout.strides[1] = 2;
    free(t.values);
    t.storage = 2 * shape[0] * shape[1];
    t.values = calloc((size_t)t.storage, sizeof(double));
  }
  return t;
}

/* Whether the plugin reads bf16 subnormal operands as zeros here: its
 * widening follows the running thread's DAZ (on in the plugin's workers;
 * valgrind, which does not model DAZ, shows it off). Asked once, with
 * NEG of 2^-133. */
static int bf16_flushes(harness *hx) {
  static int known = -1;
  if (known >= 0)
    return known;
  const int64_t one[2] = {1, 1};
  h_tensor x = h_tensor_new(BF16, 2, one, NULL),
           y = h_tensor_new(BF16, 2, one, NULL);
  x.values[0] = 0x1p-133;
  const char *e = harness_run(hx, OPC(NEG), &x, 1, &y, 1, NULL, 0, NULL, 0);
  ck_assert_msg(e == NULL, "%s", e);
  known = y.values[0] == 0;
  h_tensor_free(&x);
  h_tensor_free(&y);
  return known;
}

/* One op in one dtype and layout variant: (a) and (b) of the header. */
static void check_op(harness *hx, const elt_case *c, uint32_t dt, int var,
                     const int64_t *shape) {
  const int flush = dt == BF16 && bf16_flushes(hx);
  h_tensor in[3], in32[3];
  for (int j = 0; j < c->arity; j++) {
    in[j] = make_tensor(dt, shape, var, j);
    for (int64_t r = 0; r < shape[0]; r++)
      for (int64_t q = 0; q < shape[1]; q++) {
        int64_t i = r * shape[1] + q, at = h_at(&in[j], (int64_t[]){r, q});
        in[j].values[at] = i < 169 && var == 0
                               ? special(dt, j == 0 ? (int)i : (int)i / 13 + j)
                               : draw(c, j, dt);
      }
    /* The f32 op reads what the 16-bit op reads: bf16 subnormals are f32
     * subnormals, which the plugin's arithmetic reads as zeros of their
     * sign under DAZ (its bf16 widening then flushes them to agree). */
    in32[j] = in[j];
    in32[j].layout.dtype = F32;
    in32[j].values = malloc((size_t)in[j].storage * sizeof(double));
    for (int64_t i = 0; i < in[j].storage; i++) {
      double v = in[j].values[i];
      in32[j].values[i] =
          flush && v != 0 && fabs(v) < 0x1p-126 ? copysign(0.0, v) : v;
    }
  }
  h_tensor out = make_tensor(dt, shape, var, 3),
           out32 = make_tensor(F32, shape, var, 3);
  int attr = c->op == OPC(LEAKY_RELU) || c->op == OPC(ELU);
  const char *e = harness_run(hx, c->op, in, (uint32_t)c->arity, &out, 1, NULL,
                              0, &c->attr, attr ? 1 : 0);
  ck_assert_msg(e == NULL, "%s", e);
  e = harness_run(hx, c->op, in32, (uint32_t)c->arity, &out32, 1, NULL, 0,
                  &c->attr, attr ? 1 : 0);
  ck_assert_msg(e == NULL, "%s", e);
  for (int64_t r = 0; r < shape[0]; r++)
    for (int64_t q = 0; q < shape[1]; q++) {
      int64_t idx[2] = {r, q};
      double x[3] = {0, 0, 0};
      int ok = 1;
      for (int j = 0; j < c->arity; j++) {
        x[j] = in[j].values[h_at(&in[j], idx)];
        ok &= in_domain(c, j, x[j], dt);
      }
      double got = out.values[h_at(&out, idx)];
      double r32 = out32.values[h_at(&out32, idx)];
      ck_assert_msg(same(got, round_to(r32, dt)),
                    "op %u %s var %d at (%lld, %lld): x = %a %a %a: got %a, "
                    "the f32 op rounded once %a",
                    c->op, dt_name(dt), var, (long long)r, (long long)q, x[0],
                    x[1], x[2], got, round_to(r32, dt));
      double want = ref_op(c->op, x[0], x[1], x[2], c->attr);
      if (!ok || !isfinite(want))
        continue;
      ck_assert_msg(fabs(got - want) <= elt_tolerance(dt, c->k, want),
                    "op %u %s: x = %a %a %a: got %a, want %a (tolerance %a)",
                    c->op, dt_name(dt), x[0], x[1], x[2], got, want,
                    elt_tolerance(dt, c->k, want));
    }
  for (int j = 0; j < c->arity; j++) {
    h_tensor_free(&in[j]);
    h_tensor_free(&in32[j]);
  }
  h_tensor_free(&out);
  h_tensor_free(&out32);
}

/* Under valgrind (50 times slower) the tests run smaller. */
static int under_valgrind(void) {
  return getenv("TYTO_TEST_UNDER_VALGRIND") != NULL;
}

START_TEST(test_eltwise) {
  harness hx;
  harness_open(&hx);
  /* rows of two blocks; the first row holds the pairs of special values */
  const int64_t shape[2] = {under_valgrind() ? 3 : 23, 301};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    for (uint32_t dt = F16; dt <= BF16; dt++)
      for (int var = 0; var < 2; var++)
        check_op(&hx, &cases[k], dt, var, shape);
  harness_close(&hx);
}
END_TEST

/* Sizes the pool splits into tasks (the fast ops' threshold is 65536
 * elements, the slow ones' 4096). */
START_TEST(test_eltwise_big) {
  if (under_valgrind())
    return;
  harness hx;
  harness_open(&hx);
  const int64_t shape[2] = {3, 40009};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    uint32_t op = cases[k].op;
    if (op == OPC(ADD) || op == OPC(EXP) || op == OPC(FMA) || op == OPC(TANH))
      for (int var = 0; var < 2; var++)
        check_op(&hx, &cases[k], var ? F16 : BF16, var, shape);
  }
  harness_close(&hx);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Fused programs                                                            */
/* ------------------------------------------------------------------------ */

/* Value i of a program as a tensor of the outputs' shape: its own (CONST:
 * stride 0), or an input's. */
typedef struct fvals {
  h_tensor *v;
  int *own;
} fvals;

/* Runs every instruction of p alone (CAST and the elementwise ops through
 * harness_run), each value in its dtype vdt[i]. */
static fvals one_by_one(harness *hx, const prog *p, h_tensor *in,
                        const uint32_t *vdt, uint32_t rank,
                        const int64_t *shape) {
  fvals f = {calloc(p->n, sizeof(h_tensor)), calloc(p->n, sizeof(int))};
  for (uint32_t i = 0; i < p->n; i++) {
    const tyto_plugin_fused_instr *x = &p->ins[i];
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      f.v[i] = in[x->arg[0]];
      continue;
    }
    f.own[i] = 1;
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      double c = round_to(x->attr, vdt[i]);
      f.v[i] = h_tensor_new(vdt[i], 0, shape, &c);
      f.v[i].layout.rank = rank;
      for (uint32_t a = 0; a < rank; a++) {
        f.v[i].layout.shape[a] = shape[a];
        f.v[i].layout.strides[a] = 0;
      }
      continue;
    }
    int arity = x->op <= OPC(CAST) ? 1 : x->op <= OPC(GE) ? 2 : 3;
    h_tensor args[3];
    for (int k = 0; k < arity; k++)
      args[k] = f.v[x->arg[k]];
    f.v[i] = h_tensor_new(vdt[i], rank, shape, NULL);
    int attr = x->op == OPC(LEAKY_RELU) || x->op == OPC(ELU);
    const char *e = harness_run(hx, x->op, args, (uint32_t)arity, &f.v[i], 1,
                                NULL, 0, &x->attr, attr ? 1 : 0);
    ck_assert_msg(e == NULL, "single op %u: %s", x->op, e);
  }
  return f;
}

static void fvals_free(fvals *f, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (f->own[i])
      h_tensor_free(&f->v[i]);
  free(f->v);
  free(f->own);
}

/* Output o (a layout of `shape`) against tensor w, bit for bit. */
static void check_same(const h_tensor *o, const h_tensor *w, uint32_t rank,
                       const int64_t *shape, const char *what) {
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, n = 1;
  for (uint32_t a = 0; a < rank; a++)
    n *= shape[a];
  for (int64_t i = 0; i < n; i++) {
    double got = o->values[h_at(o, idx)], want = w->values[h_at(w, idx)];
    ck_assert_msg(same(got, want),
                  "%s: element %lld is %a, one op at a time gives %a", what,
                  (long long)i, got, want);
    for (uint32_t a = rank; a-- > 0;) {
      if (++idx[a] < shape[a])
        break;
      idx[a] = 0;
    }
  }
}

/* The epilogue of a bf16 (or f16) layer: y = relu(x + b) computed in f32
 * and stored in the 16-bit dtype, with the f32 sum as a second output. */
START_TEST(test_fused_mixed_layer) {
  harness hx;
  harness_open(&hx);
  const int64_t shape[2] = {64, 300};
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    h_tensor in[2] = {h_tensor_new(dt, 2, shape, NULL),
                      h_tensor_new(F32, 2, shape, NULL)};
    in[1].layout.strides[0] = 0; /* the bias, broadcast over rows */
    for (int64_t i = 0; i < in[0].storage; i++)
      in[0].values[i] = round_to(rnd_in(-3, 3), dt);
    for (int64_t i = 0; i < in[1].storage; i++)
      in[1].values[i] = (float)rnd_in(-1, 1);
    prog p = {.n = 0, .dtype = F32};
    uint32_t x = IN(&p, 0), xf = OP1(&p, CAST, x);
    uint32_t s = OP2(&p, ADD, xf, IN(&p, 1)), r = OP1(&p, RELU, s);
    uint32_t y = OP1(&p, CAST, r);
    p.ins[y].dtype = dt;
    OUT(&p, y, 0);
    OUT(&p, s, 1);
    h_tensor out[2] = {h_tensor_new(dt, 2, shape, NULL),
                       h_tensor_new(F32, 2, shape, NULL)};
    const char *e = fused_run(&hx, &p, in, 2, out, 2, NULL);
    ck_assert_msg(e == NULL, "%s", e);
    uint32_t vdt[8] = {dt, F32, F32, F32, F32, dt};
    fvals f = one_by_one(&hx, &p, in, vdt, 2, shape);
    check_same(&out[0], &f.v[y], 2, shape, "y = relu(x + b)");
    check_same(&out[1], &f.v[s], 2, shape, "x + b");
    /* And against float64: relu(x + b) rounded twice at most. */
    for (int64_t i = 0; i < out[0].storage; i++) {
      double want = in[0].values[i] + in[1].values[i % shape[1]];
      want = want < 0 ? 0 : want;
      ck_assert(fabs(out[0].values[i] - want) <=
                (dt == BF16 ? 0x1p-8 : 0x1p-11) * fabs(want) +
                    0x1p-23 * (1 + fabs(want)));
    }
    fvals_free(&f, p.n);
    for (int k = 0; k < 2; k++) {
      h_tensor_free(&in[k]);
      h_tensor_free(&out[k]);
    }
  }
  harness_close(&hx);
}
END_TEST

/* Ops random programs draw from: defined on the whole line or NaN where
 * not (both sides agree on NaN). */
static const uint32_t fused_ops[] = {
    OPC(NEG), OPC(ABS),    OPC(EXP),  OPC(SIN),     OPC(TANH),
    OPC(LOG), OPC(SQRT),   OPC(RELU), OPC(SIGMOID), OPC(FLOOR),
    OPC(ELU), OPC(SQUARE), OPC(ADD),  OPC(SUB),     OPC(MUL),
    OPC(DIV), OPC(MAX),    OPC(LT),   OPC(WHERE),   OPC(FMA),
    OPC(ADD), OPC(MUL),    OPC(FMA),  OPC(POW),     OPC(LEAKY_RELU)};

/* A random program over values of all four dtypes: an op reads values of
 * its first operand's dtype, and CASTs bring the others to it; more CASTs
 * and CONSTs of random dtypes in between. Fused and one op at a time must
 * agree bit for bit. */
static void random_mixed(harness *hx, int which) {
  static const int64_t shapes[5][2] = {
      {1, 1}, {3, 7}, {50, 9}, {7, 301}, {2, 70001}};
  const uint32_t dts[4] = {F32, F64, F16, BF16};
  const int64_t *shape = shapes[rnd64() % (under_valgrind() ? 3 : 5)];
  uint32_t n_in = 1 + (uint32_t)(rnd64() % 4),
           n_out = 1 + (uint32_t)(rnd64() % 3);
  h_tensor in[MAXV], out[MAXV];
  uint32_t vdt[MAXI];
  prog p = {.n = 0, .dtype = F32};
  for (uint32_t j = 0; j < n_in; j++) {
    uint32_t dt = dts[rnd64() % 4];
    in[j] = make_tensor(dt, shape, rnd64() % 2, (int)(rnd64() % 3));
    for (int64_t i = 0; i < in[j].storage; i++)
      in[j].values[i] =
          round_to(rnd64() % 8 ? rnd_in(-3, 3) : (double)(rnd64() % 5) - 2, dt);
    vdt[IN(&p, j)] = dt;
  }
  uint32_t n_ops = 1 + (uint32_t)(rnd64() % 12);
  for (uint32_t k = 0; k < n_ops; k++) {
    uint32_t kind = (uint32_t)(rnd64() % 10);
    if (kind == 0) { /* a CONST */
      uint32_t i = CONST(&p, rnd64() % 2 ? rnd_in(-2, 2) : 0.1);
      p.ins[i].dtype = vdt[i] = dts[rnd64() % 4];
      continue;
    }
    if (kind == 1) { /* a CAST */
      uint32_t i = OP1(&p, CAST, (uint32_t)(rnd64() % p.n));
      p.ins[i].dtype = vdt[i] = dts[rnd64() % 4];
      continue;
    }
    uint32_t op = fused_ops[rnd64() % (sizeof fused_ops / sizeof *fused_ops)];
    int arity = op <= OPC(ROUND) ? 1 : op <= OPC(GE) ? 2 : 3;
    uint32_t a[3];
    a[0] = rnd64() % 2 ? p.n - 1 : (uint32_t)(rnd64() % p.n);
    for (int q = 1; q < arity; q++) {
      a[q] = (uint32_t)(rnd64() % p.n);
      if (vdt[a[q]] != vdt[a[0]]) {
        uint32_t c = OP1(&p, CAST, a[q]);
        p.ins[c].dtype = vdt[c] = vdt[a[0]];
        a[q] = c;
      }
    }
    double attr = op == OPC(LEAKY_RELU) ? 0.25 : op == OPC(ELU) ? 1.5 : 0;
    uint32_t i =
        emit(&p, op, a[0], arity > 1 ? a[1] : 0, arity > 2 ? a[2] : 0, attr);
    vdt[i] = vdt[a[0]];
  }
  uint32_t src[MAXV];
  for (uint32_t k = 0; k < n_out; k++) {
    src[k] = k == 0 ? p.n - 1 : (uint32_t)(rnd64() % p.n);
    out[k] = make_tensor(vdt[src[k]], shape, rnd64() % 2, 3);
  }
  for (uint32_t k = 0; k < n_out; k++)
    OUT(&p, src[k], k);
  const char *e = fused_run(hx, &p, in, n_in, out, n_out, NULL);
  ck_assert_msg(e == NULL, "program %d: %s", which, e);
  fvals f = one_by_one(hx, &p, in, vdt, 2, shape);
  char what[64];
  for (uint32_t k = 0; k < n_out; k++) {
    snprintf(what, sizeof what, "program %d output %u (%s)", which, k,
             dt_name(vdt[src[k]]));
    check_same(&out[k], &f.v[src[k]], 2, shape, what);
  }
  fvals_free(&f, p.n);
  for (uint32_t j = 0; j < n_in; j++)
    h_tensor_free(&in[j]);
  for (uint32_t k = 0; k < n_out; k++)
    h_tensor_free(&out[k]);
}

START_TEST(test_fused_random) {
  harness hx;
  harness_open(&hx);
  for (int i = 0; i < (under_valgrind() ? 20 : 150); i++)
    random_mixed(&hx, i);
  harness_close(&hx);
}
END_TEST

/* supports_op's refusal of d (checked to be prepare's too), or
 * "(accepted)". */
static const char *refusal(harness *hx, const tyto_plugin_op_desc *d) {
  const tyto_plugin_device_fns *f = &hx->dev->plugin->dfns;
  tyto_plugin_error *e = f->supports_op(hx->dev->handle, d);
  if (!e)
    return "(accepted)";
  snprintf(hx->error, sizeof hx->error, "%s", rt_error_message(e));
  ck_assert_int_eq(rt_error_code(e), TYTO_PLUGIN_ERR_INVALID_ARGUMENT);
  rt_error_free(e);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  e = f->prepare(hx->dev->handle, d, &k, &ki);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(rt_error_message(e), hx->error);
  rt_error_free(e);
  return hx->error;
}

START_TEST(test_fused_refusals) {
  harness hx;
  harness_open(&hx);
  const int64_t s23[2] = {2, 3};
  h_tensor in[2] = {h_tensor_new(F32, 2, s23, NULL),
                    h_tensor_new(BF16, 2, s23, NULL)};
  h_tensor out = h_tensor_new(F32, 2, s23, NULL);
  tyto_plugin_layout lin[2], lout[1];
  /* An add of an f32 and a bf16 value. */
  prog p = {.n = 0, .dtype = F32};
  OUT(&p, OP2(&p, ADD, IN(&p, 0), IN(&p, 1)), 0);
  tyto_plugin_fused_program fp = {sizeof fp, p.n, p.ins};
  tyto_plugin_op_desc d = fused_desc(in, 2, &out, 1, lin, lout, &fp, sizeof fp);
  ck_assert_str_eq(refusal(&hx, &d),
                   "fused: instruction 2 (add) reads values of dtypes f32 and "
                   "bf16; convert with CAST first");
  /* With the CAST it runs. */
  p.n = 0;
  uint32_t c = OP1(&p, CAST, IN(&p, 1));
  OUT(&p, OP2(&p, ADD, IN(&p, 0), c), 0);
  fp.n_instrs = p.n;
  ck_assert_str_eq(refusal(&hx, &d), "(accepted)");
  /* A bf16 value written to an f32 output. */
  p.n = 0;
  OUT(&p, IN(&p, 1), 0);
  fp.n_instrs = p.n;
  ck_assert_str_eq(refusal(&hx, &d),
                   "fused: instruction 1 writes a value of dtype bf16 to "
                   "output 0, whose dtype is f32");
  /* CONST and CAST of dtypes no op takes. */
  p.n = 0;
  IN(&p, 0);
  uint32_t k = CONST(&p, 1.0);
  p.ins[k].dtype = 9;
  OUT(&p, k, 0);
  fp.n_instrs = p.n;
  ck_assert_str_eq(refusal(&hx, &d),
                   "fused: instruction 1 (const) has dtype unknown (9); "
                   "expected f32, f64, f16 or bf16");
  p.ins[k].op = TYTO_PLUGIN_OP_CAST;
  p.ins[k].dtype = TYTO_PLUGIN_DTYPE_I32;
  ck_assert_str_eq(refusal(&hx, &d),
                   "fused: instruction 1 (cast) has dtype i32 (4); expected "
                   "f32, f64, f16 or bf16");
  /* Instructions of ABI 1.2 (no dtype field): a CAST cannot say its
   * dtype; a CONST takes output 0's. */
  const size_t old = offsetof(tyto_plugin_fused_instr, dtype);
  unsigned char packed[4 * sizeof(tyto_plugin_fused_instr)];
  p.n = 0;
  OUT(&p, OP1(&p, CAST, IN(&p, 0)), 0);
  for (uint32_t i = 0; i < p.n; i++) {
    p.ins[i].struct_size = old;
    memcpy(packed + i * old, &p.ins[i], old);
  }
  tyto_plugin_fused_program fo = {
      sizeof fo, p.n, (const tyto_plugin_fused_instr *)(void *)packed};
  d.blob = &fo;
  ck_assert_str_eq(refusal(&hx, &d),
                   "fused: instruction 1 is a CAST, but the instructions stop "
                   "before their dtype field (ABI 1.5)");
  p.ins[1].op = TYTO_PLUGIN_FUSED_CONST;
  memcpy(packed + old, &p.ins[1], old);
  ck_assert_str_eq(refusal(&hx, &d), "(accepted)");
  for (int j = 0; j < 2; j++)
    h_tensor_free(&in[j]);
  h_tensor_free(&out);
  harness_close(&hx);
}
END_TEST

static Suite *half_elt_suite(void) {
  Suite *s = suite_create("cpu_half_elt");
  TCase *tc = tcase_create("half_elt");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, test_eltwise);
  tcase_add_test(tc, test_eltwise_big);
  tcase_add_test(tc, test_fused_mixed_layer);
  tcase_add_test(tc, test_fused_random);
  tcase_add_test(tc, test_fused_refusals);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(half_elt_suite());
}
