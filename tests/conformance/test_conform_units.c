/* The conformance kit's own parts (tools/conform): its reference converter
 * against the formats' definitions, a brute-force nearest search and the
 * plugins' independent conversions (plugins/common/half.h); the tolerance
 * classes against their derivation; the host model's 16-bit roundings
 * (ties, overflow, the two paths ops.md allows); the catalogue it builds
 * for f16 and bf16; and its loader's refusal of plugin paths that are no
 * regular file, in libtyto's words. */
#include "common.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "conform/catalogue.h"
#include "conform/compare.h"
#include "conform/fmt.h"
#include "conform/host.h"
#include "conform/model.h"
#include "conform/specials.h"
#include "half.h"

#define F32 TYTO_PLUGIN_DTYPE_F32
#define F64 TYTO_PLUGIN_DTYPE_F64
#define F16 TYTO_PLUGIN_DTYPE_F16
#define BF16 TYTO_PLUGIN_DTYPE_BF16
#define I32 TYTO_PLUGIN_DTYPE_I32
#define I64 TYTO_PLUGIN_DTYPE_I64

/* Sample counts: fewer under valgrind, where each costs fifty times as
 * much (make check-valgrind). */
static int samples(int n) {
  return getenv("TYTO_TEST_UNDER_VALGRIND") ? n / 50 : n;
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t next_u64(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1Du;
}

/* ------------------------------------------------------------ converter -- */

START_TEST(formats) {
  ck_assert_double_eq(cf_fmt_max(F16), 65504.0);
  ck_assert_double_eq(cf_fmt_max(BF16), 0x1.fep127);
  ck_assert_double_eq(cf_fmt_max(F32), FLT_MAX);
  ck_assert_double_eq(cf_fmt_max(F64), DBL_MAX);
  ck_assert_double_eq(cf_fmt_true_min(F16), 0x1p-24);
  ck_assert_double_eq(cf_fmt_true_min(BF16), 0x1p-133);
  ck_assert_double_eq(cf_fmt_true_min(F32), FLT_TRUE_MIN);
  ck_assert_double_eq(cf_fmt_true_min(F64), DBL_TRUE_MIN);
  ck_assert_double_eq(cf_fmt_min_normal(F16), 0x1p-14);
  ck_assert_double_eq(cf_fmt_min_normal(BF16), FLT_MIN);
  ck_assert_double_eq(cf_fmt_unit_roundoff(F16), 0x1p-11);
  ck_assert_double_eq(cf_fmt_unit_roundoff(BF16), 0x1p-8);
  ck_assert_uint_eq(cf_fmt_parse("bf16"), BF16);
  ck_assert_uint_eq(cf_fmt_parse("f16"), F16);
  ck_assert_uint_eq(cf_fmt_parse("f8"), UINT32_MAX);
  ck_assert_str_eq(cf_fmt_name(F16), "f16");
  ck_assert_str_eq(cf_fmt_name(I32), "i32");
  ck_assert_str_eq(cf_fmt_name(I64), "i64");
  ck_assert_str_eq(cf_fmt_name(99), "-");
  ck_assert_uint_eq(cf_fmt_parse("i64"), I64);
}
END_TEST

/* Values and their bits, from the formats' definitions: ties go to the
 * even neighbour, the largest plus half a step overflows, subnormals. */
START_TEST(known_bits) {
  static const struct {
    uint32_t dt;
    double v;
    uint64_t bits;
  } k[] = {
      {F16, 1.0, 0x3c00},
      {F16, -2.0, 0xc000},
      {F16, 65504.0, 0x7bff},
      {F16, 65519.0, 0x7bff},
      {F16, 65520.0, 0x7c00}, /* the tie above the largest: infinity */
      {F16, -1e6, 0xfc00},
      {F16, 0x1p-24, 0x0001},
      {F16, 0x1p-25, 0x0000},     /* a tie: to the even zero */
      {F16, 0x1.8p-24, 0x0002},   /* a tie: to 2 */
      {F16, 0x1.0000001p-25, 1},  /* above the tie */
      {F16, 0x1p-14, 0x0400},     /* the smallest normal */
      {F16, 0x1.ffcp-15, 0x0400}, /* the largest subnormal + half */
      {F16, 1 + 0x1p-11, 0x3c00}, /* a tie: to 1 */
      {F16, 1 + 0x1.8p-10, 0x3c02},
      {F16, 1 + 0x1p-11 + 0x1p-40, 0x3c01}, /* once, not through f32 */
      {F16, 1.0 / 3, 0x3555},
      {F16, -0.0, 0x8000},
      {F16, INFINITY, 0x7c00},
      {BF16, 1.0, 0x3f80},
      {BF16, 0x1.fep127, 0x7f7f},
      {BF16, 0x1.fep127 + 0x1p119, 0x7f80},
      {BF16, 0x1.fep127 + 0x1p118, 0x7f7f},
      {BF16, 1 + 0x1p-8, 0x3f80},
      {BF16, 1 + 0x1.8p-7, 0x3f82},
      {BF16, 0x1p-133, 0x0001},
      {BF16, 0x1p-134, 0x0000},
      {BF16, -0x1p-126, 0x8080},
      {BF16, 1e39, 0x7f80},
      {F32, 0x1.fffffep127, 0x7f7fffff},
      {F32, 0x1.ffffffp127, 0x7f800000},
      {F32, 0x1p-150, 0},
      {F32, 0x1.8p-149, 2},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    const uint64_t got = cf_fmt_encode(k[i].dt, k[i].v);
    ck_assert_msg(got == k[i].bits, "%s %a: 0x%llx, expected 0x%llx",
                  cf_fmt_name(k[i].dt), k[i].v, (unsigned long long)got,
                  (unsigned long long)k[i].bits);
    const double back = cf_fmt_decode(k[i].dt, k[i].bits);
    ck_assert(cf_fmt_same(cf_fmt_round(k[i].dt, k[i].v), back));
  }
  ck_assert(isnan(cf_fmt_decode(F16, cf_fmt_encode(F16, NAN))));
  ck_assert_uint_eq(cf_fmt_encode(BF16, NAN), 0x7fc0);
  ck_assert_uint_eq(cf_fmt_encode(F16, -NAN), 0xfe00);
}
END_TEST

/* Every 16-bit pattern: its value encodes back to it (a NaN decodes as a
 * NaN), and is the value half.h decodes. */
START_TEST(every_pattern) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    const double a = cf_fmt_decode(F16, h), b = cf_fmt_decode(BF16, h);
    const double ha = tpc_f16_to_f32((uint16_t)h);
    const double hb = tpc_bf16_to_f32((uint16_t)h);
    ck_assert(cf_fmt_same(a, ha));
    ck_assert(cf_fmt_same(b, hb));
    if (!isnan(a))
      ck_assert_uint_eq(cf_fmt_encode(F16, a), h);
    if (!isnan(b))
      ck_assert_uint_eq(cf_fmt_encode(BF16, b), h);
    unsigned char buf[2];
    cf_fmt_store_bits(F16, buf, 0, h);
    ck_assert(cf_fmt_same(cf_fmt_load(F16, buf, 0), a));
  }
}
END_TEST

/* The nearest of the format's values to v, by search: the two neighbours
 * of v's rounding in the bit order and the rounding itself, the nearest
 * taken, an exact tie to the even pattern. Independent of how round_to
 * decides. */
static int nearest_ok(uint32_t dt, double v) {
  const double r = cf_fmt_round(dt, v);
  if (isinf(r)) /* beyond the largest plus half a step, or its tie */
    return fabs(v) >=
           cf_fmt_max(dt) + ldexp(1.0, cf_fmt_of(dt)->emax - cf_fmt_of(dt)->p);
  const uint64_t b = cf_fmt_encode(dt, r);
  const uint64_t sign = (uint64_t)1 << (cf_fmt_of(dt)->bits - 1);
  for (int d = -1; d <= 1; d += 2) {
    const uint64_t nb = (b & ~sign) == 0 && d < 0 ? b ^ sign : b + d;
    const double n = cf_fmt_decode(dt, nb);
    if (isnan(n) || isinf(n))
      continue;
    const double dr = fabs(v - r), dn = fabs(v - n);
    if (dn < dr || (dn == dr && (nb & 1) == 0 && (b & 1) != 0))
      return 0;
  }
  return 1;
}

START_TEST(nearest_by_search) {
  static const uint32_t dts[] = {F16, BF16, F32};
  for (size_t k = 0; k < 3; k++) {
    const cf_fmt *f = cf_fmt_of(dts[k]);
    for (int i = 0; i < samples(200000); i++) {
      /* Exponents across the format's range, subnormals to overflow, and
       * values one format grid point plus a bit of the next finer. */
      const int e =
          f->emin - f->p - 1 +
          (int)(next_u64() % (uint64_t)(f->emax - f->emin + f->p + 3));
      double v = ldexp(1 + (double)(next_u64() >> 11) * 0x1p-53, e);
      if (i % 3 == 0) /* a midpoint, exactly */
        v = cf_fmt_round(dts[k], v) +
            ldexp(1.0, (e < f->emin ? f->emin : e) - f->p);
      if (next_u64() & 1)
        v = -v;
      ck_assert_msg(nearest_ok(dts[k], v), "%s: %a rounds to %a",
                    cf_fmt_name(dts[k]), v, cf_fmt_round(dts[k], v));
    }
  }
}
END_TEST

/* Against plugins/common/half.h and the machine's own f32 conversion. */
START_TEST(agrees_with_half_h) {
  for (int i = 0; i < samples(1000000); i++) {
    const uint32_t u = (uint32_t)next_u64();
    const float f = tpc_bits_f32(u);
    if (isnan(f)) {
      ck_assert(isnan(cf_fmt_decode(F16, tpc_f32_to_f16(f))));
      continue;
    }
    ck_assert_uint_eq(cf_fmt_encode(F16, f), tpc_f32_to_f16(f));
    ck_assert_uint_eq(cf_fmt_encode(BF16, f), tpc_f32_to_bf16(f));
    ck_assert_uint_eq(cf_fmt_encode(F32, f), u);
    /* doubles near the 16-bit ranges, with bits below f32's */
    const double d = ldexp((double)(next_u64() >> 11) * 0x1p-52,
                           -30 + (int)(next_u64() % 50));
    ck_assert_uint_eq(cf_fmt_encode(F16, d), tpc_f64_to_f16(d));
    ck_assert_uint_eq(cf_fmt_encode(BF16, d), tpc_f64_to_bf16(d));
    if (fabs(d) <= FLT_MAX)
      ck_assert(cf_fmt_round(F32, d) == (double)(float)d);
  }
}
END_TEST

/* ------------------------------------------------------------ tolerance -- */

START_TEST(tolerance_classes) {
  double r, a;
  const double uh = 0x1p-11, ub = 0x1p-8;
  cf_fmt_tolerance(F32, CF_CLASS_EXACT, &r, &a);
  ck_assert(r == 1e-5 && a == 1e-6);
  cf_fmt_tolerance(F64, CF_CLASS_ACCUM, &r, &a);
  ck_assert(r == 1e-10 && a == 1e-10);
  cf_fmt_tolerance(F16, CF_CLASS_EXACT, &r, &a);
  ck_assert(r == 2 * uh / (1 - uh) && a == 0x1p-23);
  ck_assert(r > 9.77e-4 && r < 9.78e-4);
  cf_fmt_tolerance(F16, CF_CLASS_TRANS, &r, &a);
  ck_assert(r == (2 * uh + (1 + uh) * 1e-4) / (1 - uh));
  ck_assert(a == (1 + uh) * 1e-5 + 0x1p-23);
  ck_assert(r > 1.077e-3 && r < 1.078e-3);
  cf_fmt_tolerance(BF16, CF_CLASS_EXACT, &r, &a);
  ck_assert(r == 2 * ub / (1 - ub) && a == 0x1p-125);
  ck_assert(r > 7.84e-3 && r < 7.85e-3);
  cf_fmt_tolerance(BF16, CF_CLASS_ACCUM, &r, &a);
  ck_assert(r == (2 * ub + (1 + ub) * 1e-4) / (1 - ub));
  ck_assert(a == (1 + ub) * 1e-4 + 0x1p-125);
  ck_assert(r > 7.943e-3 && r < 7.945e-3);
}
END_TEST

/* The derivation: a result within f32's class of the exact value x,
 * rounded to the format, passes against x rounded once; tried where it is
 * hardest, next to the format's rounding boundaries, and at random. */
START_TEST(tolerance_derivation) {
  static const uint32_t dts[] = {F16, BF16};
  for (size_t k = 0; k < 2; k++) {
    const cf_fmt *f = cf_fmt_of(dts[k]);
    double rt, at;
    cf_fmt_tolerance(dts[k], CF_CLASS_TRANS, &rt, &at);
    for (int i = 0; i < samples(300000); i++) {
      const int e = f->emin - f->p +
                    (int)(next_u64() % (uint64_t)(f->emax - f->emin + f->p));
      double x = ldexp(1 + (double)(next_u64() >> 11) * 0x1p-53, e);
      if (i & 1) /* next to a midpoint */
        x = cf_fmt_round(dts[k], x) +
            ldexp(1.0, (e < f->emin ? f->emin : e) - f->p) *
                (1 + ((double)(next_u64() >> 11) * 0x1p-53 - 0.5) * 1e-3);
      const double delta = ((double)(next_u64() >> 11) * 0x1p-53 * 2 - 1);
      const double fx = x * (1 + delta * 1e-4) + delta * 1e-5;
      const double got = cf_fmt_round(dts[k], fx),
                   want = cf_fmt_round(dts[k], x);
      if (isinf(got) || isinf(want))
        continue;
      ck_assert_msg(fabs(got - want) <= at + rt * fabs(want),
                    "%s: x %a, f %a: got %a, want %a", cf_fmt_name(dts[k]), x,
                    fx, got, want);
    }
  }
}
END_TEST

/* ---------------------------------------------------------------- model -- */

START_TEST(model_roundings) {
  ck_assert_double_eq(
      cf_model_eltwise(TYTO_PLUGIN_OP_ADD, F16, 1, 0x1p-11, 0, 0), 1.0);
  ck_assert_double_eq(
      cf_model_eltwise(TYTO_PLUGIN_OP_ADD, F16, 1 + 0x1p-10, 0x1p-11, 0, 0),
      1 + 0x1p-9);
  ck_assert_double_eq(
      cf_model_eltwise(TYTO_PLUGIN_OP_MUL, BF16, 3, 1 + 0x1p-7, 0, 0),
      3 + 0x1p-5);
  ck_assert(isinf(cf_model_eltwise(TYTO_PLUGIN_OP_ADD, F16, 65504, 16, 0, 0)));
  ck_assert_double_eq(
      cf_model_eltwise(TYTO_PLUGIN_OP_ADD, F16, 65504, 15.5, 0, 0), 65504);
  ck_assert(isinf(cf_model_eltwise(TYTO_PLUGIN_OP_SQUARE, F16, 300, 0, 0, 0)));
  ck_assert_double_eq(
      cf_model_eltwise(TYTO_PLUGIN_OP_SQUARE, BF16, 300, 0, 0, 0), 90112);
  ck_assert(isinf(cf_model_eltwise(TYTO_PLUGIN_OP_EXP, F16, 12, 0, 0, 0)));
  ck_assert_double_eq(cf_model_eltwise(TYTO_PLUGIN_OP_CAST, F16,
                                       1 + 0x1p-11 + 0x1p-40, 0, 0, 0),
                      1 + 0x1p-10);
  /* The flush of the computation: f32's. */
  ck_assert_double_eq(cf_flush(F16, 0x1p-24), 0x1p-24);
  ck_assert(cf_flush(BF16, 0x1p-130) == 0 &&
            signbit(cf_flush(BF16, -0x1p-130)));
  ck_assert_double_eq(cf_flush(F64, 0x1p-130), 0x1p-130);
}
END_TEST

/* The model's two answers for a 16-bit FMA: once, and through f32. */
START_TEST(model_two_paths) {
  cf_case *c = calloc(1, sizeof *c);
  static const int64_t one[1] = {1};
  double a = 3, b = 341.5, cc = 0x1p-24; /* all f16 */
  double *in[3] = {&a, &b, &cc};
  cf_expect once, via;
  ck_assert_ptr_nonnull(c);
  c->op = TYTO_PLUGIN_OP_FMA;
  c->dtype = F16;
  c->n_in = 3;
  c->n_out = 1;
  for (int i = 0; i < 3; i++)
    cf_tensor_set(&c->in[i], F16, 1, one, NULL, 0);
  cf_tensor_set(&c->out[0], F16, 1, one, NULL, 0);
  /* a*b + c = 1024.5 + 2^-24 exactly: once, above the tie between 1024
   * and 1025 (up); in f32 the 2^-24 is lost, and the tie goes to the even
   * 1024. */
  ck_assert_int_eq(cf_model_run(c, in, 0, 0, &once), 0);
  ck_assert_int_eq(cf_model_run(c, in, 0, 1, &via), 0);
  ck_assert_double_eq(once.want[0][0], 1025);
  ck_assert_double_eq(via.want[0][0], 1024);
  cf_expect_free(&once);
  cf_expect_free(&via);
  free(c);
}
END_TEST

/* ------------------------------------------------------------ catalogue -- */

static const cf_case *find(const cf_case *cs, size_t n, const char *op,
                           const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(cs[i].op_name, op) == 0 && strcmp(cs[i].name, name) == 0)
      return &cs[i];
  return NULL;
}

START_TEST(catalogue_16) {
  static const uint32_t dts[] = {F16, BF16};
  for (size_t k = 0; k < 2; k++) {
    cf_case *cs = NULL;
    size_t n = 0;
    int linalg = 0, casts[4] = {0}, stepwise = 0;
    ck_assert_int_eq(cf_catalogue_build(dts[k], NULL, &cs, &n), 0);
    for (size_t i = 0; i < n; i++) {
      const cf_case *c = &cs[i];
      ck_assert_uint_eq(c->dtype, dts[k]);
      if (c->op >= TYTO_PLUGIN_OP_INV &&
          c->op <= TYTO_PLUGIN_OP_TRIANGULAR_SOLVE) {
        ck_assert_int_eq(c->expect, CF_EXPECT_UNSUPPORTED);
        linalg++;
      }
      if (c->op == TYTO_PLUGIN_OP_CAST) {
        ck_assert(c->bitwise && c->special);
        ck_assert_uint_eq(c->in[0].l.dtype, dts[k]);
        casts[c->out[0].l.dtype]++;
      }
      if (c->op == TYTO_PLUGIN_OP_FUSED) {
        ck_assert_int_eq(c->expect, CF_EXPECT_STEPWISE);
        stepwise++;
      }
      ck_assert_uint_eq(cf_case_dtypes(c) & ~0xfu, 0);
      /* Inputs are exact in their dtype; indices inside their axis. */
      void *in[CF_MAX_IN], *out[CF_MAX_OUT];
      ck_assert_int_eq(cf_values_make(c, 7 + i, in, out), 0);
      if (c->op == TYTO_PLUGIN_OP_GATHER && !c->special) {
        const int64_t ext = c->in[0].l.shape[c->iattrs[0]];
        for (int64_t j = 0; j < c->in[1].storage; j++) {
          const double x = cf_fmt_load(dts[k], in[1], j);
          ck_assert_msg(x >= 0 && x < (double)ext && x == floor(x),
                        "gather %s: index %g, extent %lld", c->name, x,
                        (long long)ext);
        }
      }
      cf_values_free(in, out);
    }
    ck_assert_int_eq(linalg, 7);
    for (int d = 0; d < 4; d++)
      ck_assert_int_ge(casts[d], 11);
    ck_assert_int_ge(stepwise, 70);
    /* The argmax case fits the dtype's whole numbers. */
    ck_assert_ptr_nonnull(find(cs, n, "argmax", "[64,256] axis 1"));
    ck_assert_ptr_null(find(cs, n, "argmax", "[64,1031] axis 1"));
    free(cs);
  }
}
END_TEST

START_TEST(catalogue_casts) {
  cf_case *cs = NULL;
  size_t n = 0;
  ck_assert_int_eq(cf_catalogue_build(F64, "cast", &cs, &n), 0);
  /* f64 to f16: the double-rounding trap is among the boundaries. */
  const cf_case *t = find(cs, n, "cast", "to f16: ties, overflow, subnormals");
  ck_assert_ptr_nonnull(t);
  int trap = 0, over = 0;
  for (uint32_t i = 0; i < t->in[0].n_list; i++) {
    trap |= t->in[0].list[i] == 1 + 0x1p-11 + 0x1p-30;
    over |= t->in[0].list[i] == 65520.0;
  }
  ck_assert(trap && over);
  ck_assert_ptr_null(find(cs, n, "cast", "to f64: ties, overflow, subnormals"));
  free(cs);
  /* Every pattern of a 16-bit source, once each. */
  ck_assert_int_eq(cf_catalogue_build(BF16, "cast", &cs, &n), 0);
  t = find(cs, n, "cast", "to f16: every bit pattern");
  ck_assert_ptr_nonnull(t);
  void *in[CF_MAX_IN], *out[CF_MAX_OUT];
  ck_assert_int_eq(cf_values_make(t, 1, in, out), 0);
  ck_assert_int_eq(t->in[0].storage, 65536);
  for (int64_t j = 0; j < 65536; j++)
    ck_assert_uint_eq(cf_fmt_load_bits(BF16, in[0], j), (uint64_t)j);
  cf_values_free(in, out);
  free(cs);
}
END_TEST

/* The programs that convert: every value's dtype consistent. */
START_TEST(catalogue_mixed) {
  cf_case *cs = NULL;
  size_t n = 0;
  int mixed = 0;
  ck_assert_int_eq(cf_catalogue_build(BF16, "fused", &cs, &n), 0);
  for (size_t i = 0; i < n; i++) {
    const cf_case *c = &cs[i];
    uint32_t dt[CF_MAX_INSTRS];
    int casts = 0;
    for (uint32_t j = 0; j < c->n_instrs; j++) {
      const tyto_plugin_fused_instr *x = &c->instrs[j];
      if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
        dt[j] = c->in[x->arg[0]].l.dtype;
      } else if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
        ck_assert_uint_eq(dt[x->arg[0]], c->out[x->arg[1]].l.dtype);
      } else if (x->op == TYTO_PLUGIN_OP_CAST ||
                 x->op == TYTO_PLUGIN_FUSED_CONST) {
        dt[j] = x->dtype;
        casts += x->op == TYTO_PLUGIN_OP_CAST;
      } else {
        dt[j] = dt[x->arg[0]];
        if (x->op >= TYTO_PLUGIN_OP_ADD && x->op <= TYTO_PLUGIN_OP_GE)
          ck_assert_uint_eq(dt[x->arg[1]], dt[j]);
      }
    }
    mixed += casts > 0;
  }
  ck_assert_int_ge(mixed, 40);
  const cf_case *d =
      find(cs, n, "fused", "D>D'>f64 rounding loss: contiguous [4,33]");
  ck_assert_ptr_nonnull(d);
  ck_assert_uint_eq(cf_case_dtypes(d), TYTO_PLUGIN_DTYPE_BIT(BF16) |
                                           TYTO_PLUGIN_DTYPE_BIT(F16) |
                                           TYTO_PLUGIN_DTYPE_BIT(F64));
  free(cs);
}
END_TEST

START_TEST(special_lists) {
  uint32_t n;
  const double *u = cf_special_list(F16, 1, &n);
  int max = 0, sub = 0, sub2 = 0, over = 0;
  for (uint32_t i = 0; i < n; i++) {
    max |= u[i] == 65504;
    sub |= u[i] == 0x1p-24;
    sub2 |= u[i] == 0x1p-15;
    over |= u[i] == 300; /* its square overflows f16 */
    ck_assert(isnan(u[i]) || cf_fmt_round(F16, u[i]) == u[i]);
  }
  ck_assert(max && sub && sub2 && over);
  const double *b = cf_special_list(BF16, 2, &n);
  int half = 0, bmax = 0;
  for (uint32_t i = 0; i < n; i++) {
    half |= b[i] == 0x1p-8;
    bmax |= b[i] == 0x1.fep127;
    ck_assert(isnan(b[i]) || cf_fmt_round(BF16, b[i]) == b[i]);
  }
  ck_assert(half && bmax);
}
END_TEST

/* ------------------------------------------------------------- integers -- */

/* To an integer: truncated toward zero, saturated, NaN 0 (ops.md, CAST). */
START_TEST(int_from_float) {
  ck_assert_int_eq(cf_fmt_to_int(I32, NAN), 0);
  ck_assert_int_eq(cf_fmt_to_int(I64, -NAN), 0);
  ck_assert_int_eq(cf_fmt_to_int(I32, 2.99), 2);
  ck_assert_int_eq(cf_fmt_to_int(I32, -2.99), -2);
  ck_assert_int_eq(cf_fmt_to_int(I32, -0.5), 0);
  ck_assert_int_eq(cf_fmt_to_int(I32, 2147483647.75), INT32_MAX);
  ck_assert_int_eq(cf_fmt_to_int(I32, 2147483648.0), INT32_MAX);
  ck_assert_int_eq(cf_fmt_to_int(I32, -2147483648.75), INT32_MIN);
  ck_assert_int_eq(cf_fmt_to_int(I32, -2147483649.0), INT32_MIN);
  ck_assert_int_eq(cf_fmt_to_int(I32, INFINITY), INT32_MAX);
  ck_assert_int_eq(cf_fmt_to_int(I32, -INFINITY), INT32_MIN);
  ck_assert_int_eq(cf_fmt_to_int(I64, 0x1p63), INT64_MAX);
  ck_assert_int_eq(cf_fmt_to_int(I64, -0x1p63), INT64_MIN);
  ck_assert_int_eq(cf_fmt_to_int(I64, 0x1p63 - 1024), INT64_MAX - 1023);
  ck_assert_int_eq(cf_fmt_to_int(I64, -1e300), INT64_MIN);
  ck_assert_int_eq(cf_fmt_to_int(I64, 1e19), INT64_MAX);
  /* As a stored value: -0 becomes +0, the limits as doubles. */
  ck_assert(!signbit(cf_fmt_round(I32, -0.0)));
  ck_assert_double_eq(cf_fmt_round(I32, 3e9), 2147483647.0);
  ck_assert_double_eq(cf_fmt_round(I64, -1e30), -0x1p63);
}
END_TEST

/* From an integer: rounded once to nearest, ties to even. */
START_TEST(int_to_float) {
  ck_assert_double_eq(cf_fmt_from_int(F32, 16777217), 16777216.0);
  ck_assert_double_eq(cf_fmt_from_int(F32, 16777219), 16777220.0);
  ck_assert_double_eq(cf_fmt_from_int(F32, -16777217), -16777216.0);
  ck_assert_double_eq(cf_fmt_from_int(F32, INT32_MAX), 0x1p31);
  ck_assert_double_eq(cf_fmt_from_int(F32, INT64_C(2147483584)), 0x1p31);
  ck_assert_double_eq(cf_fmt_from_int(F32, INT64_C(2147483456)), 0x1p31 - 256);
  ck_assert_double_eq(cf_fmt_from_int(BF16, 257), 256.0);
  ck_assert_double_eq(cf_fmt_from_int(BF16, 259), 260.0);
  ck_assert_double_eq(cf_fmt_from_int(BF16, -259), -260.0);
  ck_assert_double_eq(cf_fmt_from_int(F16, 2049), 2048.0);
  ck_assert_double_eq(cf_fmt_from_int(F16, 2051), 2052.0);
  ck_assert_double_eq(cf_fmt_from_int(F16, 65519), 65504.0);
  ck_assert(isinf(cf_fmt_from_int(F16, 65520)));
  ck_assert(cf_fmt_from_int(F16, INT32_MIN) == -INFINITY);
  ck_assert_double_eq(cf_fmt_from_int(F64, (INT64_C(1) << 53) + 1), 0x1p53);
  ck_assert_double_eq(cf_fmt_from_int(F64, (INT64_C(1) << 53) + 3), 0x1p53 + 4);
  ck_assert_double_eq(cf_fmt_from_int(F64, INT64_MAX), 0x1p63);
  ck_assert_double_eq(cf_fmt_from_int(F64, INT64_MIN), -0x1p63);
  ck_assert_double_eq(cf_fmt_from_int(F32, INT64_MIN), -0x1p63);
  /* Just above an f32 tie, below double's precision: one rounding goes
   * up, a conversion through f64 lands on the tie and goes to even. */
  const int64_t trap = (INT64_C(1) << 60) + (INT64_C(1) << 36) + 1;
  ck_assert_double_eq(cf_fmt_from_int(F32, trap), 0x1p60 + 0x1p37);
  ck_assert_double_eq(cf_fmt_from_int(BF16, trap), 0x1p60);
  /* Below 2^53 the integer is a double: the floating converter agrees. */
  for (int i = 0; i < samples(100000); i++) {
    const int64_t n = (int64_t)(next_u64() >> (11 + i % 40)) * (i % 2 ? -1 : 1);
    for (uint32_t d = 0; d < 4; d++)
      ck_assert(cf_fmt_same(cf_fmt_from_int(d, n), cf_fmt_round(d, (double)n)));
  }
}
END_TEST

/* Wrapping: the low bits as two's complement. */
START_TEST(int_wrap) {
  ck_assert_int_eq(cf_fmt_wrap(I32, UINT64_C(0x80000000)), INT32_MIN);
  ck_assert_int_eq(cf_fmt_wrap(I32, UINT64_C(0x100000005)), 5);
  ck_assert_int_eq(cf_fmt_wrap(I32, UINT64_C(0xffffffff)), -1);
  ck_assert_int_eq(cf_fmt_wrap(I64, UINT64_C(0x8000000000000000)), INT64_MIN);
  ck_assert_int_eq(cf_fmt_wrap(I64, ~UINT64_C(0)), -1);
  ck_assert_double_eq(cf_fmt_from_int(I32, (INT64_C(1) << 32) + 7), 7.0);
  ck_assert_double_eq(cf_fmt_from_int(I32, INT64_MIN), 0.0);
  ck_assert_double_eq(cf_fmt_from_int(I64, -5), -5.0);
}
END_TEST

/* w mod 2^32 in [INT32_MIN, INT32_MAX], written out. */
static double wrap32(double w) {
  while (w > 2147483647.0)
    w -= 4294967296.0;
  while (w < -2147483648.0)
    w += 4294967296.0;
  return w;
}

/* The model's integer arithmetic on every pair of i32's limits. */
START_TEST(model_int_wrap) {
  static const uint32_t ops[] = {TYTO_PLUGIN_OP_ADD, TYTO_PLUGIN_OP_SUB,
                                 TYTO_PLUGIN_OP_MUL, TYTO_PLUGIN_OP_NEG,
                                 TYTO_PLUGIN_OP_ABS};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    cf_case *cs = NULL;
    size_t n = 0, found = 0;
    ck_assert_int_eq(cf_catalogue_build(I32, cf_op_name(ops[k]), &cs, &n), 0);
    for (size_t i = 0; i < n; i++) {
      cf_case *c = &cs[i];
      if (strcmp(c->name, "limits, wrapping") != 0)
        continue;
      double *in[CF_MAX_IN] = {NULL};
      void *inb[CF_MAX_IN], *outb[CF_MAX_OUT];
      cf_expect x;
      found++;
      ck_assert_int_eq(cf_values_make(c, 1, inb, outb), 0);
      for (uint32_t j = 0; j < c->n_in; j++) {
        in[j] = malloc((size_t)c->in[j].storage * sizeof(double));
        for (int64_t e = 0; e < c->in[j].storage; e++)
          in[j][e] = cf_fmt_load(I32, inb[j], e);
      }
      ck_assert_int_eq(cf_model_run(c, in, 0, 0, &x), 0);
      for (int64_t e = 0; e < c->out[0].storage; e++) {
        const double a = in[0][e], b = c->n_in > 1 ? in[1][e] : 0;
        double w;
        switch (ops[k]) {
        case TYTO_PLUGIN_OP_ADD: w = wrap32(a + b); break;
        case TYTO_PLUGIN_OP_SUB: w = wrap32(a - b); break;
        case TYTO_PLUGIN_OP_NEG: w = wrap32(-a); break;
        case TYTO_PLUGIN_OP_ABS: w = wrap32(fabs(a)); break;
        default: { /* b in 2^16 pieces: every product exact in double */
          const double bl = fmod(b, 65536.0), bh = (b - bl) / 65536.0;
          w = wrap32(wrap32(a * bl) + wrap32(wrap32(a * bh) * 65536.0));
        }
        }
        ck_assert_msg(x.want[0][e] == w,
                      "%s(%.0f, %.0f): model %.0f, want %.0f",
                      cf_op_name(ops[k]), a, b, x.want[0][e], w);
      }
      cf_expect_free(&x);
      for (uint32_t j = 0; j < c->n_in; j++)
        free(in[j]);
      cf_values_free(inb, outb);
    }
    ck_assert_uint_eq(found, 1);
    free(cs);
  }
}
END_TEST

/* The integer runs: every case model-checked with the dtypes it uses;
 * ARGMAX of a floating input, ONE_HOT into every dtype, refusals. */
START_TEST(catalogue_int) {
  for (uint32_t d = I32; d <= I64; d++) {
    cf_case *cs = NULL;
    size_t n = 0, argf = 0, refuse = 0, oh = 0, cast = 0;
    ck_assert_int_eq(cf_catalogue_build(d, NULL, &cs, &n), 0);
    ck_assert_uint_gt(n, 400);
    for (size_t i = 0; i < n; i++) {
      const cf_case *c = &cs[i];
      const uint32_t m = cf_case_dtypes(c);
      ck_assert(c->special);
      ck_assert(m & TYTO_PLUGIN_DTYPE_BIT(d));
      for (uint32_t j = 0; j < c->n_in; j++)
        ck_assert(m & TYTO_PLUGIN_DTYPE_BIT(c->in[j].l.dtype));
      if (cf_fmt_int(c->out[0].l.dtype) || c->expect != CF_EXPECT_VALUES)
        ck_assert(c->rtol == 0 && c->atol == 0);
      if (c->expect == CF_EXPECT_UNSUPPORTED)
        refuse++;
      else if (c->op == TYTO_PLUGIN_OP_ARGMAX) {
        ck_assert(!cf_fmt_int(c->in[0].l.dtype));
        ck_assert_uint_eq(c->out[0].l.dtype, d);
        argf++;
      } else if (c->op == TYTO_PLUGIN_OP_ONE_HOT) {
        ck_assert_uint_eq(c->in[0].l.dtype, d);
        oh |= 1u << c->out[0].l.dtype;
      } else if (c->op == TYTO_PLUGIN_OP_CAST)
        cast++;
    }
    ck_assert_uint_ge(refuse, 7);
    ck_assert_uint_ge(argf, 4 * 6);
    ck_assert_uint_eq(oh, 0x3fu);     /* all six output dtypes */
    ck_assert_uint_eq(cast, 11 * 10); /* 11 layouts x 10 dtype pairs */
    free(cs);
  }
}
END_TEST

/* Zero tolerance: equal passes, one unit at 2^40 fails. */
START_TEST(compare_exact) {
  double g[2] = {0x1p40, -3}, w[2] = {0x1p40, -3};
  double *gp[1] = {g}, *wp[1] = {w};
  const int64_t cnt[1] = {2};
  cf_cmp r;
  cf_compare_n(1, cnt, gp, wp, 0, 0, &r);
  ck_assert(cf_cmp_pass(&r));
  g[0] += 1;
  cf_compare_n(1, cnt, gp, wp, 0, 0, &r);
  ck_assert(!cf_cmp_pass(&r));
}
END_TEST

/* ---------------------------------------------------------------- loader -- */

/* A FIFO named like a plugin is refused before dlopen, which would wait
 * for a writer forever (this test's short timeout catches that); so is a
 * directory. Neither is ever opened for writing. */
START_TEST(load_refuses_fifo_and_directory) {
  char dir[] = "/tmp/tyto-conform-XXXXXX", fifo[64], sub[64], err[1024];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/tyto_plugin_ff.so", dir);
  snprintf(sub, sizeof sub, "%s/tyto_plugin_dd.so", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  cf_plugin *p = calloc(1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(cf_plugin_load(p, fifo, err, sizeof err), -1);
  ck_assert_msg_contains(err, "tyto_plugin_ff.so: cannot be loaded: is a "
                              "FIFO, not a regular file");
  ck_assert_ptr_null(p->dl);
  ck_assert_int_eq(cf_plugin_load(p, sub, err, sizeof err), -1);
  ck_assert_msg_contains(err, "tyto_plugin_dd.so: cannot be loaded: is a "
                              "directory, not a regular file");
  free(p);
  unlink(fifo);
  rmdir(sub);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conform_units");
  TCase *tc = tcase_create("units");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, formats);
  tcase_add_test(tc, known_bits);
  tcase_add_test(tc, every_pattern);
  tcase_add_test(tc, nearest_by_search);
  tcase_add_test(tc, agrees_with_half_h);
  tcase_add_test(tc, tolerance_classes);
  tcase_add_test(tc, tolerance_derivation);
  tcase_add_test(tc, model_roundings);
  tcase_add_test(tc, model_two_paths);
  tcase_add_test(tc, catalogue_16);
  tcase_add_test(tc, catalogue_casts);
  tcase_add_test(tc, catalogue_mixed);
  tcase_add_test(tc, special_lists);
  tcase_add_test(tc, int_from_float);
  tcase_add_test(tc, int_to_float);
  tcase_add_test(tc, int_wrap);
  tcase_add_test(tc, model_int_wrap);
  tcase_add_test(tc, catalogue_int);
  tcase_add_test(tc, compare_exact);
  suite_add_tcase(s, tc);
  TCase *loader = tcase_create("loader");
  tcase_set_timeout(loader, 10);
  tcase_add_test(loader, load_refuses_fifo_and_directory);
  suite_add_tcase(s, loader);
  return test_run(s);
}
