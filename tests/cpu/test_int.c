/* The CPU plugin's integer dtypes (I32, I64; ABI 1.6) through the plugin
 * ABI and the public API: CAST between every pair against references
 * written here (truncation and saturation computed on doubles, rounding
 * of an integer done in integer arithmetic), wrapping arithmetic at the
 * limits (computed on unsigned types), comparisons, WHERE, reductions
 * over strided and broadcast layouts, ARGMAX/ARGMIN into integers, the
 * index ops with integer indices, the refusals, and an accuracy metric
 * compiled and run through tyto_program. */
#include "cpu/harness.h"

#include <stdint.h>

#define OPC(o) TYTO_PLUGIN_OP_##o

static const uint32_t all_dtypes[] = {F32, F64, F16, BF16, I32, I64};

/* v as dtype dt stores it (floats only). */
static double rnd(double v, uint32_t dt) {
  if (dt == F32)
    return (double)(float)v;
  if (dt == F16 || dt == BF16)
    return ref_decode(ref_encode(v, h_fmt(dt)), h_fmt(dt));
  return v;
}

/* A float truncated and saturated into an integer dtype, NaN to 0. */
static int64_t ref_to_int(double x, uint32_t dt) {
  if (x != x)
    return 0;
  double t = trunc(x);
  double hi = dt == I32 ? 2147483647.0 : 0x1p63,
         lo = dt == I32 ? -0x1p31 : -0x1p63;
  if (dt == I32 ? t > hi : t >= hi)
    return dt == I32 ? INT32_MAX : INT64_MAX;
  if (t < lo)
    return dt == I32 ? INT32_MIN : INT64_MIN;
  return (int64_t)t;
}

/* v rounded once to p significant bits, ties to even, in integers. */
static double ref_round_bits(int64_t v, int p) {
  uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  int len = 0;
  while (len < 64 && (m >> len))
    len++;
  double r;
  if (len <= p) {
    r = (double)m; /* p <= 53: exact */
  } else {
    int sh = len - p;
    uint64_t q = m >> sh, rem = m & ((UINT64_C(1) << sh) - 1);
    uint64_t half = UINT64_C(1) << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
      q++;
    r = ldexp((double)q, sh);
  }
  return v < 0 ? -r : r;
}

static double ref_int_to_float(int64_t v, uint32_t dt) {
  int p = dt == F64 ? 53 : dt == F32 ? 24 : dt == F16 ? 11 : 8;
  double r = ref_round_bits(v, p);
  if (dt == F16 && fabs(r) > 65504)
    return r < 0 ? -INFINITY : INFINITY;
  return r;
}

static int same_double(double a, double b) {
  if (a != a || b != b)
    return a != a && b != b;
  return a == b && signbit(a) == signbit(b);
}

START_TEST(cast_float_to_int) {
  harness hx;
  harness_open(&hx);
  const double src[] = {
      NAN,          INFINITY,      -INFINITY,     -0.0,    0.0,
      2.7,          -2.7,          0.99,          -0.99,   2147483647.5,
      2147483648.0, -2147483648.9, -2147483649.0, 1e300,   -1e300,
      9.3e18,       -9.3e18,       0x1p63,        -0x1p63, 0x1p53 + 2,
      65504,        300.5};
  const int64_t n = sizeof src / sizeof src[0];
  for (int fi = 0; fi < 4; fi++)
    for (int ti = 4; ti < 6; ti++) {
      uint32_t from = all_dtypes[fi], to = all_dtypes[ti];
      h_tensor x = h_tensor_new(from, 1, &n, src);
      h_tensor y = h_tensor_new(to, 1, &n, NULL);
      const char *err =
          harness_run(&hx, OPC(CAST), &x, 1, &y, 1, NULL, 0, NULL, 0);
      ck_assert_msg(!err, "%s", err);
      for (int64_t i = 0; i < n; i++) {
        int64_t want = ref_to_int(rnd(src[i], from), to);
        ck_assert_msg(y.ints[i] == want,
                      "cast %u->%u of %.17g: got %lld, want %lld", from, to,
                      src[i], (long long)y.ints[i], (long long)want);
      }
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
  harness_close(&hx);
}
END_TEST

START_TEST(cast_int_to_float_and_int) {
  harness hx;
  harness_open(&hx);
  /* Ties of f32 (2^24 + 1), bf16 (257, 2^60 + 2^52 exactly), i64 beyond
   * 2^53, and 2^60 + 2^52 + 1, which rounds up in one rounding but to
   * 2^60 through f64 (a tie there) or f32. */
  const int64_t src[] = {0,
                         1,
                         -1,
                         257,
                         259,
                         -257,
                         2049,
                         65519,
                         65520,
                         (1 << 24) + 1,
                         (1 << 24) + 3,
                         INT32_MAX,
                         INT32_MIN,
                         (INT64_C(1) << 53) + 1,
                         (INT64_C(1) << 53) + 3,
                         (INT64_C(1) << 60) + (INT64_C(1) << 52),
                         (INT64_C(1) << 60) + (INT64_C(1) << 52) + 1,
                         -((INT64_C(1) << 60) + (INT64_C(1) << 52) + 1),
                         (INT64_C(1) << 40) + (INT64_C(1) << 16) + 1,
                         INT64_MAX,
                         INT64_MIN,
                         INT64_C(0x180000001)};
  const int64_t n = sizeof src / sizeof src[0];
  for (int fi = 4; fi < 6; fi++)
    for (int ti = 0; ti < 6; ti++) {
      uint32_t from = all_dtypes[fi], to = all_dtypes[ti];
      h_tensor x = h_tensor_new(from, 1, &n, NULL);
      h_tensor y = h_tensor_new(to, 1, &n, NULL);
      for (int64_t i = 0; i < n; i++) /* an I32 input holds the low bits */
        x.ints[i] = from == I32 ? (int32_t)(uint32_t)(uint64_t)src[i] : src[i];
      const char *err =
          harness_run(&hx, OPC(CAST), &x, 1, &y, 1, NULL, 0, NULL, 0);
      ck_assert_msg(!err, "%s", err);
      for (int64_t i = 0; i < n; i++) {
        int64_t v = x.ints[i];
        if (to == I32 || to == I64) {
          int64_t want = to == I32 ? (int32_t)(uint32_t)(uint64_t)v : v;
          ck_assert_msg(y.ints[i] == want, "cast %u->%u of %lld: got %lld",
                        from, to, (long long)v, (long long)y.ints[i]);
        } else {
          double want = ref_int_to_float(v, to);
          ck_assert_msg(same_double(y.values[i], want),
                        "cast %u->%u of %lld: got %.17g, want %.17g", from, to,
                        (long long)v, y.values[i], want);
        }
      }
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
  harness_close(&hx);
}
END_TEST

/* The reference of a wrapping op on unsigned 64-bit patterns, cut to
 * the dtype's width and sign-extended. */
static int64_t wrap(uint64_t u, uint32_t dt) {
  return dt == I32 ? (int32_t)(uint32_t)u : (int64_t)u;
}

static int64_t ref_elt(uint32_t op, int64_t x, int64_t y, int64_t z,
                       uint32_t dt) {
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
  switch (op) {
  case OPC(NEG): return wrap(0 - ux, dt);
  case OPC(ABS): return x < 0 ? wrap(0 - ux, dt) : x;
  case OPC(SIGN): return x > 0 ? 1 : x < 0 ? -1 : 0;
  case OPC(ADD): return wrap(ux + uy, dt);
  case OPC(SUB): return wrap(ux - uy, dt);
  case OPC(MUL): return wrap(ux * uy, dt);
  case OPC(MAX): return x > y ? x : y;
  case OPC(MIN): return x < y ? x : y;
  case OPC(EQ): return x == y;
  case OPC(NE): return x != y;
  case OPC(LT): return x < y;
  case OPC(LE): return x <= y;
  case OPC(GT): return x > y;
  case OPC(GE): return x >= y;
  default: return x != 0 ? y : z; /* WHERE */
  }
}

START_TEST(elementwise_wraps_at_the_limits) {
  harness hx;
  harness_open(&hx);
  static const uint32_t ops[] = {OPC(NEG), OPC(ABS), OPC(SIGN), OPC(ADD),
                                 OPC(SUB), OPC(MUL), OPC(MAX),  OPC(MIN),
                                 OPC(EQ),  OPC(NE),  OPC(LT),   OPC(LE),
                                 OPC(GT),  OPC(GE),  OPC(WHERE)};
  for (int di = 4; di < 6; di++) {
    uint32_t dt = all_dtypes[di];
    int64_t mn = dt == I32 ? INT32_MIN : INT64_MIN,
            mx = dt == I32 ? INT32_MAX : INT64_MAX;
    const int64_t vals[] = {mn, mx, -1, 0, 1, 7, -7, mn + 1, mx - 1, 3};
    const int64_t n = 10;
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
      uint32_t op = ops[oi];
      uint32_t arity = op == OPC(WHERE) ? 3 : op >= OPC(ADD) ? 2 : 1;
      /* a contiguous; b strided (every other element of 2n); c a
       * broadcast scalar (stride 0). */
      h_tensor in[3];
      int64_t two_n = 2 * n, one = 1;
      in[0] = h_tensor_new(dt, 1, &n, NULL);
      in[1] = h_tensor_new(dt, 1, &two_n, NULL);
      in[2] = h_tensor_new(dt, 1, &one, NULL);
      for (int64_t i = 0; i < n; i++) {
        in[0].ints[i] = vals[i];
        in[1].ints[2 * i] = vals[(i * 3 + 1) % n];
        in[1].ints[2 * i + 1] = 12345;
      }
      in[2].ints[0] = mn;
      in[1].layout.shape[0] = n;
      in[1].layout.strides[0] = 2;
      in[2].layout.shape[0] = n;
      in[2].layout.strides[0] = 0;
      h_tensor y = h_tensor_new(dt, 1, &n, NULL);
      const char *err =
          harness_run(&hx, op, in, arity, &y, 1, NULL, 0, NULL, 0);
      ck_assert_msg(!err, "%s", err);
      for (int64_t i = 0; i < n; i++) {
        int64_t want =
            ref_elt(op, in[0].ints[i], in[1].ints[2 * i], in[2].ints[0], dt);
        ck_assert_msg(y.ints[i] == want,
                      "%s %u element %lld: got %lld, "
                      "want %lld",
                      "op", op, (long long)i, (long long)y.ints[i],
                      (long long)want);
      }
      for (int k = 0; k < 3; k++)
        h_tensor_free(&in[k]);
      h_tensor_free(&y);
    }
  }
  harness_close(&hx);
}
END_TEST

START_TEST(fill_and_pad_convert_as_cast) {
  harness hx;
  harness_open(&hx);
  int64_t n = 3, m = 6;
  h_tensor y = h_tensor_new(I32, 1, &n, NULL);
  double v = 1e300;
  ck_assert_ptr_null(
      harness_run(&hx, OPC(FILL), NULL, 0, &y, 1, NULL, 0, &v, 1));
  ck_assert_int_eq(y.ints[2], INT32_MAX);
  v = -2.9;
  ck_assert_ptr_null(
      harness_run(&hx, OPC(FILL), NULL, 0, &y, 1, NULL, 0, &v, 1));
  ck_assert_int_eq(y.ints[0], -2);
  h_tensor x = h_tensor_new(I64, 1, &n, NULL);
  h_tensor p = h_tensor_new(I64, 1, &m, NULL);
  x.ints[0] = INT64_MAX;
  x.ints[1] = INT64_MIN;
  x.ints[2] = (INT64_C(1) << 53) + 1;
  int64_t ia[3] = {0, 1, 2};
  v = -7;
  ck_assert_ptr_null(harness_run(&hx, OPC(PAD), &x, 1, &p, 1, ia, 3, &v, 1));
  const int64_t want[] = {-7, INT64_MAX, INT64_MIN, (INT64_C(1) << 53) + 1,
                          -7, -7};
  for (int i = 0; i < 6; i++)
    ck_assert_int_eq(p.ints[i], want[i]);
  /* COPY through a flip moves the bits. */
  h_tensor c = h_tensor_new(I64, 1, &n, NULL);
  x.layout.strides[0] = -1;
  x.layout.offset = 2;
  ck_assert_ptr_null(
      harness_run(&hx, OPC(COPY), &x, 1, &c, 1, NULL, 0, NULL, 0));
  ck_assert_int_eq(c.ints[0], (INT64_C(1) << 53) + 1);
  ck_assert_int_eq(c.ints[2], INT64_MAX);
  h_tensor_free(&x);
  h_tensor_free(&y);
  h_tensor_free(&p);
  h_tensor_free(&c);
  harness_close(&hx);
}
END_TEST

START_TEST(reductions_over_layouts) {
  harness hx;
  harness_open(&hx);
  static const uint32_t ops[] = {OPC(SUM), OPC(MAX_REDUCE), OPC(MIN_REDUCE)};
  for (int di = 4; di < 6; di++) {
    uint32_t dt = all_dtypes[di];
    int64_t mx = dt == I32 ? INT32_MAX : INT64_MAX;
    int64_t shape[2] = {3, 4};
    for (int lay = 0; lay < 3; lay++)
      for (int oi = 0; oi < 3; oi++)
        for (int axis = 0; axis < 2; axis++) {
          h_tensor x = h_tensor_new(dt, 2, shape, NULL);
          for (int64_t i = 0; i < 12; i++)
            x.ints[i] = i % 5 == 0 ? mx - i : (i * 7919) % 23 - 11;
          if (lay == 1) { /* the transpose of a [4, 3] buffer */
            x.layout.strides[0] = 1;
            x.layout.strides[1] = 3;
          } else if (lay == 2) { /* a row broadcast down axis 0 */
            x.layout.strides[0] = 0;
          }
          int64_t os[2] = {axis == 0 ? 1 : 3, axis == 1 ? 1 : 4};
          h_tensor y = h_tensor_new(dt, 2, os, NULL);
          int64_t ax = axis;
          const char *err =
              harness_run(&hx, ops[oi], &x, 1, &y, 1, &ax, 1, NULL, 0);
          ck_assert_msg(!err, "%s", err);
          for (int64_t o = 0; o < os[0] * os[1]; o++) {
            uint64_t s = 0;
            int64_t m = ops[oi] == OPC(MAX_REDUCE) ? INT64_MIN : INT64_MAX;
            int64_t len = shape[axis];
            for (int64_t k = 0; k < len; k++) {
              int64_t idx[2] = {axis == 0 ? k : o / os[1],
                                axis == 1 ? k : o % os[1]};
              int64_t v = x.ints[h_at(&x, idx)];
              s += (uint64_t)v;
              if (ops[oi] == OPC(MAX_REDUCE) ? v > m : v < m)
                m = v;
            }
            int64_t want = ops[oi] == OPC(SUM) ? wrap(s, dt) : m;
            ck_assert_msg(y.ints[o] == want,
                          "op %u layout %d axis %d out %lld: got %lld, "
                          "want %lld",
                          ops[oi], lay, axis, (long long)o,
                          (long long)y.ints[o], (long long)want);
          }
          h_tensor_free(&x);
          h_tensor_free(&y);
        }
  }
  harness_close(&hx);
}
END_TEST

START_TEST(argmax_into_integers) {
  harness hx;
  harness_open(&hx);
  int64_t shape[2] = {4, 5}, os[2] = {4, 1}, axis = 1;
  const double v[20] = {1,         3,   3,  2,   0,    /* tie: first */
                        -0.0,      0.0, -1, -2,  -0.0, /* -0 and +0 tie */
                        1,         NAN, 5,  NAN, 9,    /* first NaN */
                        -INFINITY, -5,  -5, -9,  INFINITY};
  const int64_t want_max[4] = {1, 0, 1, 4}, want_min[4] = {4, 3, 1, 0};
  for (int ti = 4; ti < 6; ti++)
    for (int fi = 0; fi < 4; fi++) {
      h_tensor x = h_tensor_new(all_dtypes[fi], 2, shape, v);
      h_tensor y = h_tensor_new(all_dtypes[ti], 2, os, NULL);
      ck_assert_ptr_null(
          harness_run(&hx, OPC(ARGMAX), &x, 1, &y, 1, &axis, 1, NULL, 0));
      for (int r = 0; r < 4; r++)
        ck_assert_int_eq(y.ints[r], want_max[r]);
      ck_assert_ptr_null(
          harness_run(&hx, OPC(ARGMIN), &x, 1, &y, 1, &axis, 1, NULL, 0));
      for (int r = 0; r < 4; r++)
        ck_assert_int_eq(y.ints[r], want_min[r]);
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
  harness_close(&hx);
}
END_TEST

START_TEST(index_ops_with_integer_indices) {
  harness hx;
  harness_open(&hx);
  for (int ii = 4; ii < 6; ii++)
    for (int di = 0; di < 6; di++) {
      uint32_t it = all_dtypes[ii], dt = all_dtypes[di];
      int dint = dt == I32 || dt == I64;
      int64_t ds[2] = {3, 2}, is = 4, gs[2] = {4, 2};
      h_tensor data = h_tensor_new(dt, 2, ds, NULL);
      for (int64_t i = 0; i < 6; i++) {
        data.values[i] = (double)(i * 3 - 4);
        if (dint)
          data.ints[i] = dt == I64 ? INT64_MAX - i : (int64_t)(i * 3 - 4);
      }
      h_tensor ind = h_tensor_new(it, 1, &is, NULL);
      const int64_t iv[4] = {2, 0, 2, 1};
      memcpy(ind.ints, iv, sizeof iv);
      h_tensor g = h_tensor_new(dt, 2, gs, NULL);
      int64_t axis = 0;
      h_tensor gin[2] = {data, ind};
      const char *err =
          harness_run(&hx, OPC(GATHER), gin, 2, &g, 1, &axis, 1, NULL, 0);
      ck_assert_msg(!err, "%s", err);
      for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < 2; c++) {
          int64_t src = iv[r] * 2 + c;
          if (dint)
            ck_assert_int_eq(g.ints[r * 2 + c], data.ints[src]);
          else
            ck_assert(g.values[r * 2 + c] == rnd(data.values[src], dt));
        }
      /* SCATTER_ADD: the updates at repeated rows accumulate (wrapping). */
      h_tensor out = h_tensor_new(dt, 2, ds, NULL);
      h_tensor sin[3] = {data, ind, g};
      err = harness_run(&hx, OPC(SCATTER_ADD), sin, 3, &out, 1, &axis, 1, NULL,
                        0);
      ck_assert_msg(!err, "%s", err);
      for (int64_t i = 0; i < 6; i++) {
        int64_t times = 1; /* base itself */
        for (int k = 0; k < 4; k++)
          times += iv[k] * 2 + i % 2 == i;
        if (dint)
          ck_assert_int_eq(out.ints[i],
                           wrap((uint64_t)data.ints[i] * (uint64_t)times, dt));
        else
          ck_assert(out.values[i] == rnd(rnd(data.values[i], dt) * times, dt));
      }
      /* Out of range, negative or huge: the launch fails naming it. */
      const int64_t bad[2] = {-1, INT64_C(1) << 40};
      for (int b = 0; b < (it == I64 ? 2 : 1); b++) {
        ind.ints[3] = bad[b];
        h_tensor gin2[2] = {data, ind};
        err = harness_run(&hx, OPC(GATHER), gin2, 2, &g, 1, &axis, 1, NULL, 0);
        ck_assert_msg(err && strstr(err, "index") && strstr(err, "position 3"),
                      "%s", err ? err : "no error");
      }
      h_tensor_free(&data);
      h_tensor_free(&ind);
      h_tensor_free(&g);
      h_tensor_free(&out);
    }
  /* ONE_HOT: integer indices into any dtype; -1 and 2^40 give zero rows. */
  for (int ii = 4; ii < 6; ii++)
    for (int oi = 0; oi < 6; oi++) {
      int64_t n = 4, os[2] = {4, 3};
      h_tensor ind = h_tensor_new(all_dtypes[ii], 1, &n, NULL);
      const int64_t iv[4] = {2, -1, 0,
                             all_dtypes[ii] == I64 ? INT64_C(1) << 40 : 3};
      memcpy(ind.ints, iv, sizeof iv);
      h_tensor y = h_tensor_new(all_dtypes[oi], 2, os, NULL);
      ck_assert_ptr_null(
          harness_run(&hx, OPC(ONE_HOT), &ind, 1, &y, 1, NULL, 0, NULL, 0));
      for (int64_t r = 0; r < 4; r++)
        for (int64_t k = 0; k < 3; k++)
          ck_assert(y.values[r * 3 + k] == (iv[r] == k ? 1.0 : 0.0));
      h_tensor_free(&ind);
      h_tensor_free(&y);
    }
  harness_close(&hx);
}
END_TEST

START_TEST(refusals_say_why) {
  harness hx;
  harness_open(&hx);
  int64_t n = 4, one = 1, sq[2] = {2, 2};
  h_tensor a = h_tensor_new(I32, 1, &n, NULL);
  h_tensor b = h_tensor_new(I32, 1, &n, NULL);
  const char *err = harness_run(&hx, OPC(EXP), &a, 1, &b, 1, NULL, 0, NULL, 0);
  ck_assert_msg(err && strstr(err, "exp") && strstr(err, "i32") &&
                    strstr(err, "not supported"),
                "%s", err ? err : "no error");
  h_tensor c = h_tensor_new(I64, 1, &n, NULL);
  h_tensor r = h_tensor_new(I64, 1, &one, NULL);
  int64_t axis = 0;
  err = harness_run(&hx, OPC(MEAN), &c, 1, &r, 1, &axis, 1, NULL, 0);
  ck_assert_msg(err && strstr(err, "mean") && strstr(err, "not supported"),
                "%s", err ? err : "no error");
  err = harness_run(&hx, OPC(ARGMAX), &c, 1, &r, 1, &axis, 1, NULL, 0);
  ck_assert_msg(err && strstr(err, "argmax") && strstr(err, "not supported"),
                "%s", err ? err : "no error");
  h_tensor m[3] = {h_tensor_new(I32, 2, sq, NULL),
                   h_tensor_new(I32, 2, sq, NULL),
                   h_tensor_new(I32, 2, sq, NULL)};
  err = harness_run(&hx, OPC(MATMUL), m, 2, &m[2], 1, NULL, 0, NULL, 0);
  ck_assert_msg(err && strstr(err, "matmul") && strstr(err, "not supported"),
                "%s", err ? err : "no error");
  /* Mixed integer dtypes in an arithmetic op: invalid, not run. */
  h_tensor ab[2] = {a, c};
  err = harness_run(&hx, OPC(ADD), ab, 2, &b, 1, NULL, 0, NULL, 0);
  ck_assert_msg(err != NULL, "add of i32 and i64 ran");
  for (int k = 0; k < 3; k++)
    h_tensor_free(&m[k]);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  h_tensor_free(&r);
  harness_close(&hx);
}
END_TEST

/* Accuracy of logits against i64 labels, compiled on the CPU device:
 * mean(cast(eq(argmax_as(logits, 1, 0, I64), labels), f32)). */
START_TEST(accuracy_through_the_public_api) {
  harness hx;
  harness_open(&hx);
  tyto_graph *g = tyto_graph_new();
  int64_t ls[2] = {5, 3}, n = 5;
  const double logits[15] = {0.1, 0.7, 0.2,  /* 1 */ 3, 2, 1, /* 0 */
                             NAN, 1,   2,                     /* 0: the NaN */
                             -1,  -1,  -0.5, /* 2 */ 4, 4, 0 /* 0: tie */};
  const int64_t labels[5] = {1, 0, 1, 2, (INT64_C(1) << 53) + 1};
  tyto_tensor *x = tyto_constant(g, TYTO_F32, 2, ls, logits);
  tyto_tensor *lab =
      tyto_constant_raw(g, TYTO_I64, 1, &n, labels, sizeof labels);
  tyto_tensor *pred = tyto_argmax_as(x, 1, 0, TYTO_I64);
  tyto_tensor *acc =
      tyto_mean(tyto_cast(tyto_eq(pred, lab), TYTO_F32), 0, NULL, 0);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  tyto_tensor *outs[2] = {acc, pred};
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(hx.ctx, g, 2, outs, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  float a;
  int64_t pr[5];
  ck_assert_msg(tyto_program_read_output(p, 0, &a, sizeof a) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_msg(tyto_program_read_output(p, 1, pr, sizeof pr) == TYTO_OK, "%s",
                tyto_errmsg());
  const int64_t want[5] = {1, 0, 0, 2, 0};
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(pr[i], want[i]);
  ck_assert_msg(a == 0.6f, "accuracy %g, want 0.6", (double)a);
  tyto_program_free(p);
  tyto_graph_free(g);
  harness_close(&hx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_int");
  TCase *tc = tcase_create("int");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cast_float_to_int);
  tcase_add_test(tc, cast_int_to_float_and_int);
  tcase_add_test(tc, elementwise_wraps_at_the_limits);
  tcase_add_test(tc, fill_and_pad_convert_as_cast);
  tcase_add_test(tc, reductions_over_layouts);
  tcase_add_test(tc, argmax_into_integers);
  tcase_add_test(tc, index_ops_with_integer_indices);
  tcase_add_test(tc, refusals_say_why);
  tcase_add_test(tc, accuracy_through_the_public_api);
  suite_add_tcase(s, tc);
  return test_run(s);
}
