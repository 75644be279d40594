/*
 * The OpenCL plugin's integer dtypes i32 and i64 (ABI 1.6), driven through
 * the plugin ABI on the machine's OpenCL device 0 (PoCL on CI machines),
 * against references computed here with integer arithmetic
 * (sdk/docs/ops.md, "Integer dtypes"):
 *
 *  - i32 and i64 listed in the device's dtypes;
 *  - CAST from f32, f64 and bf16 (f16 where the device has it) to each:
 *    truncation toward zero, saturation at the limits, NaN and infinities;
 *    from each to f32, f64 and bf16: round to nearest even, ties, i64
 *    beyond 2^53 and values an intermediate f32 or f64 rounding would
 *    round twice; i64 to i32 keeps the low bits, i32 to i64
 *    sign-extends;
 *  - COPY (a stepped input), FILL (dense and stepped) and PAD (constant,
 *    reflect), the value converted as CAST converts a double;
 *  - NEG ABS SIGN ADD SUB MUL MAX MIN EQ NE LT LE GT GE WHERE over every
 *    pair of values around 0 and the limits, wrapping;
 *  - SUM (wrapping), MAX_REDUCE, MIN_REDUCE over each axis and both;
 *    ARGMAX and ARGMIN of f32 (and f64) into each, with ties, -0 and NaN;
 *  - GATHER, SCATTER_ADD (repeated indices, wrapping) and ONE_HOT with
 *    indices of each, data of each and of f32, ONE_HOT into several
 *    dtypes; a bad index fails the launch;
 *  - ops and combinations the contract does not list refused as
 *    UNSUPPORTED.
 * Every integer result is checked exactly. Exits 77 when the machine has no
 * OpenCL device, or under valgrind (TYTO_TEST_UNDER_VALGRIND).
 */
#include "harness.h"

#include <sys/stat.h>
#include <unistd.h>

#define I32 TYTO_PLUGIN_DTYPE_I32
#define I64 TYTO_PLUGIN_DTYPE_I64
#define F32 TYTO_PLUGIN_DTYPE_F32
#define F64 TYTO_PLUGIN_DTYPE_F64
#define BF16 TYTO_PLUGIN_DTYPE_BF16
#define F16 TYTO_PLUGIN_DTYPE_F16
#define MAXN 96

static int has_f64, has_f16;

/* Storage for up to MAXN elements of any dtype. */
typedef struct arr {
  int64_t v[MAXN];
} arr;

/* v wrapped to dt (two's complement, as C's unsigned arithmetic gives). */
static int64_t wrap(uint32_t dt, uint64_t v) {
  if (dt == I64)
    return (int64_t)v;
  uint32_t u = (uint32_t)v;
  return u >= 0x80000000u ? (int64_t)u - 0x100000000 : (int64_t)u;
}

static int64_t geti(uint32_t dt, const arr *a, int64_t i) {
  return dt == I32 ? ((const int32_t *)a->v)[i] : a->v[i];
}

static void puti(uint32_t dt, arr *a, int64_t i, int64_t v) {
  if (dt == I32)
    ((int32_t *)a->v)[i] = (int32_t)wrap(I32, (uint64_t)v);
  else
    a->v[i] = v;
}

static int64_t imin(uint32_t dt) {
  return dt == I32 ? INT32_MIN : INT64_MIN;
}
static int64_t imax(uint32_t dt) {
  return dt == I32 ? INT32_MAX : INT64_MAX;
}

/* CAST of double v to dt: toward zero, saturated, NaN 0. */
static int64_t ref_to_int(uint32_t dt, double v) {
  double lim = dt == I32 ? 0x1p31 : 0x1p63;
  if (isnan(v))
    return 0;
  if (v >= lim)
    return imax(dt);
  if (v < -lim)
    return imin(dt);
  return (int64_t)trunc(v);
}

/* x rounded to p significant bits, to nearest, ties to even, exactly
 * (integer arithmetic), beyond `max` an infinity. */
static double ref_int_round(int64_t x, int p, double max) {
  uint64_t a = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
  int e = 0;
  while (e < 64 && (a >> e) > 1)
    e++; /* a's top bit */
  double r;
  if (e < p) {
    r = (double)a;
  } else {
    int s = e - p + 1;
    uint64_t m = a >> s, rem = a & ((UINT64_C(1) << s) - 1),
             half = UINT64_C(1) << (s - 1);
    if (rem > half || (rem == half && (m & 1)))
      m++;
    r = ldexp((double)m, s);
  }
  if (r > max)
    r = INFINITY;
  return x < 0 ? -r : r;
}

static tyto_plugin_error *run(tyto_plugin_device *dev, uint32_t op,
                              uint32_t n_in, const tyto_plugin_layout *l,
                              const tyto_plugin_layout *out, const int64_t *ia,
                              uint32_t nia, double fa, arr *hs) {
  tyto_plugin_op_desc d = desc_of(op, n_in, l, 1, out);
  d.iattrs = ia;
  d.n_iattrs = nia;
  d.fattrs = &fa;
  d.n_fattrs = 1;
  void *h[4];
  for (uint32_t i = 0; i <= n_in; i++)
    h[i] = hs[i].v;
  return run_op(dev, &d, h);
}

/* ------------------------------------------------------------------ CAST -- */

static void test_cast_to_int(tyto_plugin_device *dev, uint32_t from,
                             uint32_t to) {
  static const double v[] = {
      NAN,          INFINITY,      -INFINITY,      0.0,
      -0.0,         0.5,           -0.5,           2.5,
      -2.5,         2.9999,        -2.9999,        1e-30,
      65504.0,      -65504.0,      2147483520.0,   2147483647.9,
      2147483648.0, -2147483648.0, -2147483648.9,  -2147483904.0,
      3e9,          -3e9,          0x1p52 + 1.5,   9223372036854774784.0,
      0x1p63,       -0x1p63,       -0x1p63 - 2048, 1e19,
      -1e300};
  int n = (int)(sizeof v / sizeof v[0]);
  int64_t shape[1] = {n};
  tyto_plugin_layout l = layout(from, 1, shape), o = layout(to, 1, shape);
  arr h[2];
  memset(h, 0, sizeof h);
  for (int i = 0; i < n; i++)
    put_value(from, h[0].v, i, v[i]);
  if (!OK(run(dev, TYTO_PLUGIN_OP_CAST, 1, &l, &o, NULL, 0, 0, h)))
    return;
  for (int i = 0; i < n; i++) {
    double x = get_value(from, h[0].v, i); /* the value the dtype holds */
    int64_t want = ref_to_int(to, x), got = geti(to, &h[1], i);
    CHECK(got == want, "cast %s %.17g -> %s: got %lld, want %lld",
          dt_name(from), x, dt_name(to), (long long)got, (long long)want);
  }
}

static void test_cast_from_int(tyto_plugin_device *dev, uint32_t from,
                               uint32_t to) {
  static const int64_t v32[] = {0,
                                1,
                                -1,
                                255,
                                257,
                                -259,
                                2049,
                                16777217,
                                16777219,
                                -16777217,
                                INT32_MAX,
                                INT32_MIN,
                                (1 << 30) + (1 << 22) + 1,
                                (1 << 30) + (1 << 22),
                                (1 << 30) + 3 * (1 << 22),
                                123456789};
  static const int64_t v64[] = {((int64_t)1 << 53) + 1,
                                ((int64_t)1 << 53) + 3,
                                -(((int64_t)1 << 53) + 1),
                                INT64_MAX,
                                INT64_MIN,
                                ((int64_t)1 << 60) + ((int64_t)1 << 52) + 1,
                                ((int64_t)1 << 60) + ((int64_t)1 << 52),
                                ((int64_t)1 << 60) + 3 * ((int64_t)1 << 52),
                                ((int64_t)1 << 62) + ((int64_t)1 << 38) + 1,
                                -((int64_t)1 << 62) - ((int64_t)1 << 38),
                                ((int64_t)1 << 40) + ((int64_t)1 << 16) + 1,
                                ((int64_t)1 << 24) + 1,
                                ((int64_t)1 << 33) + 5};
  int n32 = (int)(sizeof v32 / sizeof v32[0]);
  int n = n32 + (from == I64 ? (int)(sizeof v64 / sizeof v64[0]) : 0);
  int64_t shape[1] = {n};
  tyto_plugin_layout l = layout(from, 1, shape), o = layout(to, 1, shape);
  arr h[2];
  memset(h, 0, sizeof h);
  for (int i = 0; i < n; i++)
    puti(from, &h[0], i, i < n32 ? v32[i] : v64[i - n32]);
  if (!OK(run(dev, TYTO_PLUGIN_OP_CAST, 1, &l, &o, NULL, 0, 0, h)))
    return;
  for (int i = 0; i < n; i++) {
    int64_t x = geti(from, &h[0], i);
    if (to == I32 || to == I64) {
      int64_t got = geti(to, &h[1], i), want = wrap(to, (uint64_t)x);
      CHECK(got == want, "cast %s %lld -> %s: got %lld, want %lld",
            dt_name(from), (long long)x, dt_name(to), (long long)got,
            (long long)want);
      continue;
    }
    int p = to == F64 ? 53 : to == F32 ? 24 : to == BF16 ? 8 : 11;
    double max = to == F64    ? 0x1.fffffffffffffp1023
                 : to == F32  ? 0x1.fffffep127
                 : to == BF16 ? 0x1.fep127
                              : 65504.0;
    double want = ref_int_round(x, p, max), got = get_value(to, h[1].v, i);
    CHECK(got == want, "cast %s %lld -> %s: got %.17g, want %.17g",
          dt_name(from), (long long)x, dt_name(to), got, want);
  }
}

/* ---------------------------------------------------- COPY, FILL, PAD -- */

static void test_copy_fill_pad(tyto_plugin_device *dev, uint32_t dt) {
  int64_t n5[1] = {5}, n10[1] = {10};
  /* FILL, dense (a buffer fill) and every other element (a kernel) */
  static const double fv[] = {3.7, -3.7, NAN, 1e20, -1e20, 0x1p31, -0.0};
  for (int s = 0; s < 2; s++)
    for (size_t j = 0; j < sizeof fv / sizeof fv[0]; j++) {
      tyto_plugin_layout o = layout(dt, 1, s ? n10 : n5);
      if (s) {
        o.shape[0] = 5;
        o.strides[0] = 2;
      }
      arr h[1];
      for (int i = 0; i < 10; i++)
        puti(dt, &h[0], i, 99);
      if (!OK(run(dev, TYTO_PLUGIN_OP_FILL, 0, NULL, &o, NULL, 0, fv[j], h)))
        continue;
      for (int i = 0; i < (s ? 10 : 5); i++) {
        int64_t want = s && i % 2 ? 99 : ref_to_int(dt, fv[j]);
        CHECK(geti(dt, &h[0], i) == want, "fill %s %g [%d]: got %lld",
              dt_name(dt), fv[j], i, (long long)geti(dt, &h[0], i));
      }
    }
  /* COPY of a stepped input (a kernel, not a buffer copy) */
  tyto_plugin_layout l = layout(dt, 1, n10), o = layout(dt, 1, n5);
  l.shape[0] = 5;
  l.strides[0] = 2;
  arr h[2];
  for (int i = 0; i < 10; i++)
    puti(dt, &h[0], i, i == 0 ? imin(dt) : i == 2 ? imax(dt) : i * 3 - 7);
  if (OK(run(dev, TYTO_PLUGIN_OP_COPY, 1, &l, &o, NULL, 0, 0, h)))
    for (int i = 0; i < 5; i++)
      CHECK(geti(dt, &h[1], i) == geti(dt, &h[0], 2 * i), "copy %s [%d]",
            dt_name(dt), i);
  /* PAD: constant (-2.7 is -2) and reflect */
  int64_t n3[1] = {3}, n6[1] = {6};
  l = layout(dt, 1, n3);
  o = layout(dt, 1, n6);
  for (int i = 0; i < 3; i++)
    puti(dt, &h[0], i, i == 2 ? imin(dt) : 10 + i);
  for (int mode = 0; mode < 2; mode++) {
    int64_t ia[3] = {mode, mode ? 2 : 1, mode ? 1 : 2};
    if (!OK(run(dev, TYTO_PLUGIN_OP_PAD, 1, &l, &o, ia, 3, -2.7, h)))
      continue;
    static const int src[2][6] = {{-1, 0, 1, 2, -1, -1}, {2, 1, 0, 1, 2, 1}};
    for (int i = 0; i < 6; i++) {
      int k = src[mode][i];
      int64_t want = k < 0 ? -2 : geti(dt, &h[0], k);
      CHECK(geti(dt, &h[1], i) == want, "pad %s mode %d [%d]: got %lld",
            dt_name(dt), mode, i, (long long)geti(dt, &h[1], i));
    }
  }
}

/* ------------------------------------------------------------ eltwise -- */

static int64_t ref_elt(uint32_t op, uint32_t dt, int64_t a, int64_t b,
                       int64_t c) {
  uint64_t x = (uint64_t)a, y = (uint64_t)b;
  switch (op) {
  case TYTO_PLUGIN_OP_NEG: return wrap(dt, 0 - x);
  case TYTO_PLUGIN_OP_ABS: return a < 0 ? wrap(dt, 0 - x) : a;
  case TYTO_PLUGIN_OP_SIGN: return (a > 0) - (a < 0);
  case TYTO_PLUGIN_OP_ADD: return wrap(dt, x + y);
  case TYTO_PLUGIN_OP_SUB: return wrap(dt, x - y);
  case TYTO_PLUGIN_OP_MUL: return wrap(dt, x * y);
  case TYTO_PLUGIN_OP_MAX: return a > b ? a : b;
  case TYTO_PLUGIN_OP_MIN: return a < b ? a : b;
  case TYTO_PLUGIN_OP_EQ: return a == b;
  case TYTO_PLUGIN_OP_NE: return a != b;
  case TYTO_PLUGIN_OP_LT: return a < b;
  case TYTO_PLUGIN_OP_LE: return a <= b;
  case TYTO_PLUGIN_OP_GT: return a > b;
  case TYTO_PLUGIN_OP_GE: return a >= b;
  default: return a != 0 ? b : c; /* WHERE */
  }
}

static void test_eltwise(tyto_plugin_device *dev, uint32_t dt) {
  const int64_t v[9] = {imin(dt), imin(dt) + 1, -7,      -1, 0, 1,
                        7,        imax(dt) - 1, imax(dt)};
  static const uint32_t ops[] = {
      TYTO_PLUGIN_OP_NEG, TYTO_PLUGIN_OP_ABS, TYTO_PLUGIN_OP_SIGN,
      TYTO_PLUGIN_OP_ADD, TYTO_PLUGIN_OP_SUB, TYTO_PLUGIN_OP_MUL,
      TYTO_PLUGIN_OP_MAX, TYTO_PLUGIN_OP_MIN, TYTO_PLUGIN_OP_EQ,
      TYTO_PLUGIN_OP_NE,  TYTO_PLUGIN_OP_LT,  TYTO_PLUGIN_OP_LE,
      TYTO_PLUGIN_OP_GT,  TYTO_PLUGIN_OP_GE,  TYTO_PLUGIN_OP_WHERE};
  /* [9, 9]: x varies along axis 0, y along axis 1 (broadcast inputs) */
  int64_t sh[2] = {9, 9}, s9[1] = {9};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    uint32_t op = ops[k];
    uint32_t ar = op <= TYTO_PLUGIN_OP_SIGN    ? 1
                  : op == TYTO_PLUGIN_OP_WHERE ? 3
                                               : 2;
    tyto_plugin_layout l[3], o = layout(dt, 2, sh);
    for (uint32_t j = 0; j < ar; j++) {
      l[j] = layout(dt, 1, s9);
      l[j].rank = 2;
      l[j].shape[0] = l[j].shape[1] = 9;
      l[j].strides[0] = j == 1 ? 0 : 1;
      l[j].strides[1] = j == 1 ? 1 : 0;
    }
    arr h[4];
    memset(h, 0, sizeof h);
    for (int i = 0; i < 9; i++) {
      puti(dt, &h[0], i, v[i]);
      puti(dt, &h[1], i, v[8 - i] ^ 5);
      puti(dt, &h[2], i, 42 + i);
    }
    if (!OK(run(dev, op, ar, l, &o, NULL, 0, 0, h)))
      continue;
    for (int i = 0; i < 9; i++)
      for (int j = 0; j < 9; j++) {
        int64_t a = geti(dt, &h[0], i), b = geti(dt, &h[1], j),
                c = geti(dt, &h[2], i);
        int64_t want = ref_elt(op, dt, a, b, c),
                got = geti(dt, &h[ar], i * 9 + j);
        CHECK(got == want, "%s %u (%lld, %lld): got %lld, want %lld",
              dt_name(dt), (unsigned)op, (long long)a, (long long)b,
              (long long)got, (long long)want);
      }
  }
}

/* ----------------------------------------------------------- reductions -- */

static void test_reduce(tyto_plugin_device *dev, uint32_t dt) {
  int64_t sh[2] = {3, 4};
  arr h[2];
  int64_t x[12];
  for (int i = 0; i < 12; i++)
    x[i] = i % 5 == 0 ? imax(dt) : i % 5 == 1 ? imin(dt) + 3 : i * 7 - 40;
  static const uint32_t ops[3] = {TYTO_PLUGIN_OP_SUM, TYTO_PLUGIN_OP_MAX_REDUCE,
                                  TYTO_PLUGIN_OP_MIN_REDUCE};
  static const int64_t axes[3][2] = {{0, 0}, {1, 0}, {0, 1}};
  static const uint32_t naxes[3] = {1, 1, 2};
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < 3; a++) {
      int red0 = a != 1, red1 = a != 0;
      int64_t osh[2] = {red0 ? 1 : 3, red1 ? 1 : 4};
      tyto_plugin_layout l = layout(dt, 2, sh), o = layout(dt, 2, osh);
      for (int i = 0; i < 12; i++)
        puti(dt, &h[0], i, x[i]);
      if (!OK(run(dev, ops[k], 1, &l, &o, axes[a], naxes[a], 0, h)))
        continue;
      for (int r = 0; r < osh[0]; r++)
        for (int c = 0; c < osh[1]; c++) {
          uint64_t s = 0;
          int64_t mx = imin(dt), mn = imax(dt);
          for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
              if ((!red0 && i != r) || (!red1 && j != c))
                continue;
              int64_t e = x[i * 4 + j];
              s += (uint64_t)e;
              mx = e > mx ? e : mx;
              mn = e < mn ? e : mn;
            }
          int64_t want = k == 0 ? wrap(dt, s) : k == 1 ? mx : mn;
          int64_t got = geti(dt, &h[1], r * osh[1] + c);
          CHECK(got == want,
                "%s reduce %d axes %d [%d, %d]: got %lld, "
                "want %lld",
                dt_name(dt), k, a, r, c, (long long)got, (long long)want);
        }
    }
}

static void test_argmax(tyto_plugin_device *dev, uint32_t in, uint32_t dt) {
  static const double x[4][5] = {{1, 5, 5, 2, 0},
                                 {1, 2, 3, NAN, NAN},
                                 {-0.0, 0.0, -1, -2, -2},
                                 {NAN, -INFINITY, INFINITY, 7, 7}};
  static const int64_t want[2][4] = {{1, 3, 0, 0}, {4, 3, 3, 0}};
  int64_t sh[2] = {4, 5}, osh[2] = {4, 1}, ax = 1;
  for (int m = 0; m < 2; m++) {
    tyto_plugin_layout l = layout(in, 2, sh), o = layout(dt, 2, osh);
    arr h[2];
    for (int i = 0; i < 20; i++)
      put_value(in, h[0].v, i, x[i / 5][i % 5]);
    if (!OK(run(dev, m ? TYTO_PLUGIN_OP_ARGMIN : TYTO_PLUGIN_OP_ARGMAX, 1, &l,
                &o, &ax, 1, 0, h)))
      continue;
    for (int r = 0; r < 4; r++)
      CHECK(geti(dt, &h[1], r) == want[m][r], "arg%s %s -> %s row %d: %lld",
            m ? "min" : "max", dt_name(in), dt_name(dt), r,
            (long long)geti(dt, &h[1], r));
  }
}

/* ------------------------------------------------- GATHER .. ONE_HOT -- */

static void put_num(uint32_t dt, arr *a, int64_t i, int64_t v) {
  if (dt == I32 || dt == I64)
    puti(dt, a, i, v);
  else
    put_value(dt, a->v, i, (double)v);
}

static int64_t get_num(uint32_t dt, const arr *a, int64_t i) {
  return dt == I32 || dt == I64 ? geti(dt, a, i)
                                : (int64_t)get_value(dt, a->v, i);
}

static void test_index(tyto_plugin_device *dev, uint32_t xt, uint32_t dt) {
  /* data [4, 3]; indices [5] along axis 0 */
  int64_t dsh[2] = {4, 3}, ish[1] = {5}, osh[2] = {5, 3}, ax = 0;
  static const int64_t ind[5] = {3, 0, 3, 1, 2};
  int big = dt == I32 || dt == I64;
  int64_t data[12];
  for (int i = 0; i < 12; i++)
    data[i] = big && i == 4 ? imax(dt) : big && i == 7 ? imin(dt) : i * 11 - 30;
  tyto_plugin_layout l[3] = {layout(dt, 2, dsh), layout(xt, 1, ish)},
                     o = layout(dt, 2, osh);
  arr h[4];
  memset(h, 0, sizeof h);
  for (int i = 0; i < 12; i++)
    put_num(dt, &h[0], i, data[i]);
  for (int i = 0; i < 5; i++)
    put_num(xt, &h[1], i, ind[i]);
  if (OK(run(dev, TYTO_PLUGIN_OP_GATHER, 2, l, &o, &ax, 1, 0, h)))
    for (int i = 0; i < 15; i++)
      CHECK(get_num(dt, &h[2], i) == data[ind[i / 3] * 3 + i % 3],
            "gather %s[%s] [%d]: got %lld", dt_name(dt), dt_name(xt), i,
            (long long)get_num(dt, &h[2], i));
  /* a bad index fails the launch */
  put_num(xt, &h[1], 2, 4);
  expect_err_(run(dev, TYTO_PLUGIN_OP_GATHER, 2, l, &o, &ax, 1, 0, h),
              TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "index 4",
              "gather with index 4 of 4", __LINE__);
  put_num(xt, &h[1], 2, ind[2]);

  /* SCATTER_ADD: base [4, 3], the indices above, updates [5, 3] */
  l[2] = layout(dt, 2, osh);
  tyto_plugin_layout so = layout(dt, 2, dsh);
  for (int i = 0; i < 15; i++)
    put_num(dt, &h[2], i, big && i == 0 ? imax(dt) : i - 4);
  if (OK(run(dev, TYTO_PLUGIN_OP_SCATTER_ADD, 3, l, &so, &ax, 1, 0, h)))
    for (int i = 0; i < 12; i++) {
      uint64_t s = (uint64_t)data[i];
      for (int q = 0; q < 5; q++)
        if (ind[q] == i / 3)
          s += (uint64_t)(big && q * 3 + i % 3 == 0 ? imax(dt)
                                                    : q * 3 + i % 3 - 4);
      int64_t want = big ? wrap(dt, s) : (int64_t)s;
      CHECK(get_num(dt, &h[3], i) == want,
            "scatter_add %s[%s] [%d]: got %lld, want %lld", dt_name(dt),
            dt_name(xt), i, (long long)get_num(dt, &h[3], i), (long long)want);
    }
}

static void test_one_hot(tyto_plugin_device *dev, uint32_t xt, uint32_t ot) {
  static const int64_t ind[6] = {0, 2, -1, 3, 1, INT32_MIN};
  int64_t ish[1] = {6}, osh[2] = {6, 3};
  tyto_plugin_layout l = layout(xt, 1, ish), o = layout(ot, 2, osh);
  arr h[2];
  for (int i = 0; i < 6; i++)
    puti(xt, &h[0], i, ind[i]);
  if (!OK(run(dev, TYTO_PLUGIN_OP_ONE_HOT, 1, &l, &o, NULL, 0, 0, h)))
    return;
  for (int i = 0; i < 18; i++)
    CHECK(get_num(ot, &h[1], i) == (ind[i / 3] == i % 3),
          "one_hot %s -> %s [%d]: got %lld", dt_name(xt), dt_name(ot), i,
          (long long)get_num(ot, &h[1], i));
}

/* ------------------------------------------------------------- refused -- */

static void expect_refused(tyto_plugin_device *dev, const char *what,
                           uint32_t op, uint32_t n_in,
                           const tyto_plugin_layout *l,
                           const tyto_plugin_layout *o, uint32_t nia) {
  int64_t ia[1] = {0};
  tyto_plugin_op_desc d = desc_of(op, n_in, l, 1, o);
  d.iattrs = ia;
  d.n_iattrs = nia;
  tyto_plugin_error *e = df->supports_op(dev, &d);
  CHECK(e != NULL && e->code == TYTO_PLUGIN_ERR_UNSUPPORTED, "%s refused: %s",
        what, e != NULL ? e->msg : "accepted");
  if (e != NULL)
    err_free(e);
}

static void test_refused(tyto_plugin_device *dev, uint32_t dt) {
  int64_t s3[1] = {3}, s31[2] = {3, 1}, s33[2] = {3, 3};
  uint32_t other = dt == I32 ? I64 : I32;
  tyto_plugin_layout i = layout(dt, 1, s3), f = layout(F32, 1, s3),
                     j = layout(other, 1, s3), ii[2] = {i, i}, ij[2] = {i, j};
  expect_refused(dev, "exp", TYTO_PLUGIN_OP_EXP, 1, &i, &i, 0);
  expect_refused(dev, "div", TYTO_PLUGIN_OP_DIV, 2, ii, &i, 0);
  expect_refused(dev, "add of two integer dtypes", TYTO_PLUGIN_OP_ADD, 2, ij,
                 &i, 0);
  expect_refused(dev, "neg into f32", TYTO_PLUGIN_OP_NEG, 1, &i, &f, 0);
  expect_refused(dev, "fused", TYTO_PLUGIN_OP_FUSED, 1, &i, &i, 0);
  tyto_plugin_layout m = layout(dt, 2, s33), m1 = layout(dt, 2, s31);
  expect_refused(dev, "one_hot of f32 indices into an integer",
                 TYTO_PLUGIN_OP_ONE_HOT, 1, &f, &m1, 0);
  expect_refused(dev, "mean", TYTO_PLUGIN_OP_MEAN, 1, &m, &m1, 1);
  expect_refused(dev, "prod", TYTO_PLUGIN_OP_PROD, 1, &m, &m1, 1);
  expect_refused(dev, "argmax of an integer", TYTO_PLUGIN_OP_ARGMAX, 1, &m, &m1,
                 1);
  expect_refused(dev, "softmax", TYTO_PLUGIN_OP_SOFTMAX, 1, &m, &m, 1);
  expect_refused(dev, "matmul", TYTO_PLUGIN_OP_MATMUL, 2,
                 (tyto_plugin_layout[2]){m, m}, &m, 0);
}

/* ----------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : TEST_OPENCL_PLUGIN;
  char root[] = "/tmp/tyto-ocl-int-XXXXXX";
  int rc = suite_begin(path, root);
  if (rc != 0)
    return rc;
  tyto_plugin_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  tyto_plugin_device *dev = NULL;
  if (OK(info->fns->device_query(state, 0, &di)) &&
      OK(info->fns->device_open(state, 0, &dev))) {
    printf("%s: dtypes 0x%x\n", di.name, (unsigned)di.dtypes);
    has_f64 = (di.dtypes & TYTO_PLUGIN_DTYPE_BIT(F64)) != 0;
    has_f16 = (di.dtypes & TYTO_PLUGIN_DTYPE_BIT(F16)) != 0;
    CHECK(di.dtypes & TYTO_PLUGIN_DTYPE_BIT(I32), "i32 listed");
    CHECK(di.dtypes & TYTO_PLUGIN_DTYPE_BIT(I64), "i64 listed");
    const uint32_t floats[4] = {F32, F64, BF16, F16};
    const uint32_t ints[2] = {I32, I64};
    for (int a = 0; a < 2; a++) {
      uint32_t dt = ints[a];
      for (int b = 0; b < 4; b++) {
        uint32_t f = floats[b];
        if ((f == F64 && !has_f64) || (f == F16 && !has_f16))
          continue;
        test_cast_to_int(dev, f, dt);
        test_cast_from_int(dev, dt, f);
        test_argmax(dev, f, dt);
        test_index(dev, dt, f);
      }
      test_cast_from_int(dev, dt, ints[1 - a]);
      test_cast_from_int(dev, dt, dt);
      test_copy_fill_pad(dev, dt);
      test_eltwise(dev, dt);
      test_reduce(dev, dt);
      for (int b = 0; b < 2; b++)
        test_index(dev, dt, ints[b]);
      const uint32_t outs[4] = {dt, ints[1 - a], F32, BF16};
      for (int b = 0; b < 4; b++)
        test_one_hot(dev, dt, outs[b]);
      test_refused(dev, dt);
    }
    df->device_close(dev);
  }
  plugin_stop();
  return suite_end(root);
}
