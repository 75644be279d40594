/* The CPU plugin's 16-bit dtypes (F16, BF16; ABI 1.5) through the plugin
 * ABI, part 3 of 3: reductions, softmax, layout ops, poolings and random
 * numbers, each against a float64 reference computed from the exact
 * 16-bit inputs (tolerances derived at red_tolerance()), or bit for bit
 * where the result is defined as the f32 op's rounded once (poolings,
 * random numbers) or as moved values (PAD, GATHER, ONE_HOT). SCATTER_ADD
 * and the reductions must round once: a sum of many small terms that a
 * 16-bit accumulator would lose is checked exactly.
 *
 * Part 1 is test_half.c; part 2 test_half_elt.c. */
#include "cpu/half_test.h"

#define OPC(o) TYTO_PLUGIN_OP_##o

static double unit(uint32_t dt) {
  return dt == BF16 ? 0x1p-8 : 0x1p-11;
}

/* A row-major tensor of values drawn from [lo, hi], rounded to dt. */
static h_tensor random_tensor(uint32_t dt, uint32_t rank, const int64_t *shape,
                              double lo, double hi) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  for (int64_t i = 0; i < t.storage; i++)
    t.values[i] = round_to(rnd_in(lo, hi), dt);
  return t;
}

/* The same tensor stored transposed on its last two axes. */
static void transpose_layout(h_tensor *t) {
  uint32_t r = t->layout.rank;
  int64_t s = t->layout.strides[r - 2];
  t->layout.strides[r - 2] = 1;
  t->layout.strides[r - 1] = t->layout.shape[r - 2];
  (void)s;
  for (int a = (int)r - 3; a >= 0; a--)
    t->layout.strides[a] = t->layout.strides[a + 1] * t->layout.shape[a + 1];
}

/* Steps idx through shape (row-major); 0 after the last. */
static int next(int64_t *idx, uint32_t rank, const int64_t *shape) {
  for (uint32_t a = rank; a-- > 0;) {
    if (++idx[a] < shape[a])
      return 1;
    idx[a] = 0;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Reductions and softmax                                                    */
/* ------------------------------------------------------------------------ */

/* The float64 value of a reduction over the `n` exact elements v. */
static double ref_reduce(uint32_t op, const double *v, int64_t n) {
  double s = 0,
         m = op == OPC(MIN_REDUCE) || op == OPC(ARGMIN) ? INFINITY : -INFINITY;
  int64_t at = -1;
  if (op == OPC(PROD))
    s = 1;
  for (int64_t i = 0; i < n; i++) {
    double x = v[i];
    switch (op) {
    case OPC(SUM):
    case OPC(MEAN): s += x; break;
    case OPC(NORM_L1): s += fabs(x); break;
    case OPC(NORM_L2): s += x * x; break;
    case OPC(PROD): s *= x; break;
    case OPC(MAX_REDUCE): m = x != x || m != m ? NAN : x > m ? x : m; break;
    case OPC(MIN_REDUCE): m = x != x || m != m ? NAN : x < m ? x : m; break;
    case OPC(LOG_SUM_EXP): m = x > m || x != x ? x : m; break;
    default: /* ARGMAX, ARGMIN: the first NaN, else the first extreme */
      if (at >= 0 && v[at] != v[at])
        break;
      if (at < 0 || x != x || (op == OPC(ARGMAX) ? x > v[at] : x < v[at]))
        at = i;
    }
  }
  switch (op) {
  case OPC(MEAN): return s / (double)n;
  case OPC(NORM_L2): return sqrt(s);
  case OPC(MAX_REDUCE):
  case OPC(MIN_REDUCE): return m;
  case OPC(ARGMAX):
  case OPC(ARGMIN): return (double)at;
  case OPC(LOG_SUM_EXP): {
    if (m != m || isinf(m))
      return m;
    double e = 0;
    for (int64_t i = 0; i < n; i++)
      e += exp(v[i] - m);
    return m + log(e);
  }
  default: return s;
  }
}

/* The tolerance of a reduction's 16-bit result against its exact value
 * `want`, from elements of total magnitude `mag` (sum of |x|, of x^2 for
 * NORM_L2), n of them.
 *
 * The plugin reads the exact elements into f32 and accumulates in double:
 * sums err by at most n 2^-53 mag, products by n 2^-53 |want|; MAX, MIN
 * and the ARG ops are exact. LOG_SUM_EXP's terms come from f32's expf (at
 * most 2 ulps, 2^-23 relative), so their sum errs by 2^-23 relative and
 * its log by 2^-23 absolute. The result, a double, is then rounded once:
 * u |want| more (u the unit roundoff, 2^-8 bf16, 2^-11 f16), plus a, half
 * f16's smallest subnormal or bf16's FTZ flush, below the normal range. */
static double red_tolerance(uint32_t op, uint32_t dt, double want, double mag,
                            int64_t n) {
  double a = dt == BF16 ? 0x1p-126 : 0x1p-25, acc = 0;
  switch (op) {
  case OPC(MAX_REDUCE):
  case OPC(MIN_REDUCE):
  case OPC(ARGMAX):
  case OPC(ARGMIN): return 0;
  case OPC(PROD): acc = (double)n * 0x1p-52 * fabs(want); break;
  case OPC(LOG_SUM_EXP): acc = 0x1p-22; break;
  case OPC(NORM_L2): acc = (double)n * 0x1p-52 * sqrt(mag); break;
  default: acc = (double)n * 0x1p-52 * mag;
  }
  return unit(dt) * fabs(want) + acc + a;
}

/* Reduces x (any layout) over the axes `ax` and checks every output. */
static void check_reduce(harness *hx, uint32_t op, h_tensor *x,
                         const int64_t *ax, uint32_t n_ax) {
  const uint32_t dt = x->layout.dtype, rank = x->layout.rank;
  int64_t oshape[TYTO_PLUGIN_MAX_RANK];
  unsigned char red[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t k = 0; k < n_ax; k++)
    red[ax[k]] = 1;
  int64_t count = 1;
  for (uint32_t a = 0; a < rank; a++) {
    oshape[a] = red[a] ? 1 : x->layout.shape[a];
    count *= red[a] ? x->layout.shape[a] : 1;
  }
  h_tensor y = h_tensor_new(dt, rank, oshape, NULL);
  const char *e = harness_run(hx, op, x, 1, &y, 1, ax, n_ax, NULL, 0);
  ck_assert_msg(e == NULL, "%s", e);
  double *v = malloc((size_t)count * sizeof *v);
  int64_t o[TYTO_PLUGIN_MAX_RANK] = {0};
  do {
    /* The elements of output o, in row-major order of the reduced axes. */
    int64_t i[TYTO_PLUGIN_MAX_RANK], n = 0;
    memcpy(i, o, sizeof i);
    double mag = 0;
    do {
      v[n] = x->values[h_at(x, i)];
      mag += op == OPC(NORM_L2) ? v[n] * v[n] : fabs(v[n]);
      n++;
      uint32_t a = rank;
      while (a-- > 0) {
        if (!red[a])
          continue;
        if (++i[a] < x->layout.shape[a])
          break;
        i[a] = 0;
      }
      if (a == UINT32_MAX)
        break;
    } while (1);
    double want = ref_reduce(op, v, n), got = y.values[h_at(&y, o)];
    if (isfinite(want) && isinf(round_to(want, dt))) /* beyond the dtype */
      ck_assert_msg(got == round_to(want, dt), "op %u %s: got %a, want %a", op,
                    dt_name(dt), got, want);
    else if (isfinite(want))
      ck_assert_msg(fabs(got - want) <= red_tolerance(op, dt, want, mag, n),
                    "op %u %s over %lld: got %a, want %a", op, dt_name(dt),
                    (long long)n, got, want);
    else
      ck_assert_msg(same(got, want), "op %u %s: got %a, want %a", op,
                    dt_name(dt), got, want);
  } while (next(o, rank, oshape));
  free(v);
  h_tensor_free(&y);
}

START_TEST(test_reductions) {
  harness hx;
  harness_open(&hx);
  static const uint32_t ops[] = {
      OPC(SUM),    OPC(MEAN),        OPC(MAX_REDUCE), OPC(MIN_REDUCE),
      OPC(PROD),   OPC(LOG_SUM_EXP), OPC(NORM_L1),    OPC(NORM_L2),
      OPC(ARGMAX), OPC(ARGMIN)};
  for (uint32_t dt = F16; dt <= BF16; dt++)
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
      uint32_t op = ops[k];
      int arg = op == OPC(ARGMAX) || op == OPC(ARGMIN);
      double lo = op == OPC(PROD) ? 0.9 : -3, hi = op == OPC(PROD) ? 1.1 : 3;
      /* rows (one run each), with a NaN and an infinity in two of them */
      h_tensor x = random_tensor(dt, 2, (int64_t[]){37, 250}, lo, hi);
      x.values[5] = NAN;
      x.values[250 + 7] = INFINITY;
      check_reduce(&hx, op, &x, (int64_t[]){1}, 1);
      /* columns (the column mode), and the same transposed (strided runs) */
      check_reduce(&hx, op, &x, (int64_t[]){0}, 1);
      transpose_layout(&x);
      check_reduce(&hx, op, &x, (int64_t[]){1}, 1);
      h_tensor_free(&x);
      if (arg)
        continue;
      /* two axes of three; and a long reduction cut into chunks */
      x = random_tensor(dt, 3, (int64_t[]){4, 5, 6}, lo, hi);
      check_reduce(&hx, op, &x, (int64_t[]){0, 2}, 2);
      h_tensor_free(&x);
      x = random_tensor(dt, 2, (int64_t[]){3, 50000}, lo / 3, hi / 3);
      if (op == OPC(PROD))
        for (int64_t i = 0; i < x.storage; i++)
          x.values[i] = round_to(rnd_in(0.999, 1.001), dt);
      check_reduce(&hx, op, &x, (int64_t[]){1}, 1);
      h_tensor_free(&x);
    }
  harness_close(&hx);
}
END_TEST

/* A sum whose terms a 16-bit accumulator would lose one by one: the
 * result must be the exact sum rounded once. */
START_TEST(test_reduce_rounds_once) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    /* 1 then 1000 terms of a quarter of 1's ulp: each alone rounds away. */
    double q = unit(dt) / 2;
    h_tensor x = h_tensor_new(dt, 1, (int64_t[]){1001}, NULL);
    x.values[0] = 1;
    for (int64_t i = 1; i < 1001; i++)
      x.values[i] = q;
    h_tensor y = h_tensor_new(dt, 1, (int64_t[]){1}, NULL);
    ck_assert_ptr_null(
        harness_run(&hx, OPC(SUM), &x, 1, &y, 1, (int64_t[]){0}, 1, NULL, 0));
    ck_assert_msg(y.values[0] == round_to(1 + 1000 * q, dt), "%s: %a",
                  dt_name(dt), y.values[0]);
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

/* ARG* store the index in the dtype: refused where it would not be exact
 * (beyond 2^8 in bf16, 2^11 in f16). */
START_TEST(test_arg_extent) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    int64_t ok = dt == BF16 ? 257 : 2049;
    for (int64_t n = ok; n <= ok + 1; n++) {
      h_tensor x = random_tensor(dt, 2, (int64_t[]){2, n}, -3, 3);
      x.values[n - 1] = 100; /* the largest at the last index */
      h_tensor y = h_tensor_new(dt, 2, (int64_t[]){2, 1}, NULL);
      const char *e = harness_run(&hx, OPC(ARGMAX), &x, 1, &y, 1,
                                  (int64_t[]){1}, 1, NULL, 0);
      if (n == ok) {
        ck_assert_msg(e == NULL, "%s", e);
        ck_assert(y.values[0] == (double)(n - 1));
      } else {
        char want[200];
        snprintf(want, sizeof want,
                 "argmax: axis 1 has extent %lld, but %s holds whole numbers "
                 "exactly only up to %lld; cast the input to f32 first",
                 (long long)n, dt_name(dt), (long long)ok - 1);
        ck_assert_str_eq(e, want);
      }
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
  }
  harness_close(&hx);
}
END_TEST

/* Softmax and log-softmax along each axis, rows with -inf and NaN.
 *
 * Tolerance: the terms exp(x - m) come from f32's expf (2^-23 relative),
 * the sum and the quotient are in double, so softmax errs by 2^-22
 * relative and log-softmax (x - m - log(sum)) by 2^-22 absolute before
 * the one rounding to the dtype (u |want|, plus a below the normal
 * range). */
START_TEST(test_softmax) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F16; dt <= BF16; dt++)
    for (int lg = 0; lg < 2; lg++)
      for (int64_t axis = 0; axis < 2; axis++) {
        const int64_t shape[2] = {37, 301};
        h_tensor x = random_tensor(dt, 2, shape, -6, 6);
        x.values[301 + 3] = -INFINITY;
        x.values[2 * 301 + 9] = NAN;
        h_tensor y = h_tensor_new(dt, 2, shape, NULL);
        uint32_t op = lg ? OPC(LOG_SOFTMAX) : OPC(SOFTMAX);
        ck_assert_ptr_null(
            harness_run(&hx, op, &x, 1, &y, 1, &axis, 1, NULL, 0));
        int64_t n = shape[axis], other = shape[1 - axis];
        for (int64_t r = 0; r < other; r++) {
          double m = -INFINITY, s = 0;
          int nan = 0;
          for (int64_t i = 0; i < n; i++) {
            double v = x.values[axis ? r * 301 + i : i * 301 + r];
            nan |= v != v;
            m = v > m ? v : m;
          }
          for (int64_t i = 0; i < n; i++)
            s += exp(x.values[axis ? r * 301 + i : i * 301 + r] - m);
          for (int64_t i = 0; i < n; i++) {
            int64_t at = axis ? r * 301 + i : i * 301 + r;
            double v = x.values[at], got = y.values[at];
            double want = nan ? NAN : lg ? v - m - log(s) : exp(v - m) / s;
            if (!isfinite(want)) {
              ck_assert_msg(same(got, want), "got %a want %a", got, want);
              continue;
            }
            double tol = unit(dt) * fabs(want) +
                         0x1p-22 * (lg ? 1 : fabs(want)) +
                         (dt == BF16 ? 0x1p-126 : 0x1p-25);
            ck_assert_msg(fabs(got - want) <= tol,
                          "%s %s axis %lld: got %a want %a",
                          lg ? "log_softmax" : "softmax", dt_name(dt),
                          (long long)axis, got, want);
          }
        }
        h_tensor_free(&x);
        h_tensor_free(&y);
      }
  harness_close(&hx);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Layout ops                                                                */
/* ------------------------------------------------------------------------ */

/* PAD (constant, rounded once; reflect) and GATHER move values exactly;
 * ONE_HOT reads 16-bit indices. */
START_TEST(test_pad_gather_one_hot) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    h_tensor x = random_tensor(dt, 2, (int64_t[]){6, 9}, -3, 3);
    x.values[4] = NAN;
    x.values[5] = -0.0;
    x.values[6] = dt == F16 ? 0x1p-24 : 0x1p-130; /* subnormals move too */
    transpose_layout(&x);
    for (int mode = 0; mode < 2; mode++) {
      const int64_t pa[5] = {mode, 2, 1, 3, 2};
      h_tensor y = h_tensor_new(dt, 2, (int64_t[]){9, 14}, NULL);
      const double c = 0.1;
      ck_assert_ptr_null(
          harness_run(&hx, OPC(PAD), &x, 1, &y, 1, pa, 5, &c, 1));
      for (int64_t r = 0; r < 9; r++)
        for (int64_t q = 0; q < 14; q++) {
          int64_t i = r - 2, j = q - 3;
          double want;
          if (mode == 0 && (i < 0 || i >= 6 || j < 0 || j >= 9)) {
            want = round_to(0.1, dt);
          } else {
            i = i < 0 ? -i : i >= 6 ? 10 - i : i;
            j = j < 0 ? -j : j >= 9 ? 16 - j : j;
            want = x.values[h_at(&x, (int64_t[]){i, j})];
          }
          ck_assert(same(y.values[r * 14 + q], want));
        }
      h_tensor_free(&y);
    }
    /* GATHER rows of x by 16-bit indices (-0 is index 0). */
    h_tensor ind = h_tensor_new(dt, 2, (int64_t[]){2, 3}, NULL);
    const double iv[6] = {5, -0.0, 2, 2, 0, 4};
    memcpy(ind.values, iv, sizeof iv);
    h_tensor g = h_tensor_new(dt, 3, (int64_t[]){2, 3, 9}, NULL);
    ck_assert_ptr_null(harness_run(&hx, OPC(GATHER), (h_tensor[]){x, ind}, 2,
                                   &g, 1, (int64_t[]){0}, 1, NULL, 0));
    for (int64_t k = 0; k < 6; k++)
      for (int64_t j = 0; j < 9; j++)
        ck_assert(same(g.values[k * 9 + j],
                       x.values[h_at(&x, (int64_t[]){(int64_t)iv[k], j})]));
    /* ONE_HOT: whole numbers in [0, depth) light their place; others
     * (1.5, 7, NaN, -1) give a row of zeros. */
    const double hv[8] = {0, 2, -0.0, 1.5, 7, NAN, 3, -1};
    h_tensor hi = h_tensor_new(dt, 1, (int64_t[]){8}, hv);
    h_tensor oh = h_tensor_new(dt, 2, (int64_t[]){8, 4}, NULL);
    ck_assert_ptr_null(
        harness_run(&hx, OPC(ONE_HOT), &hi, 1, &oh, 1, NULL, 0, NULL, 0));
    for (int64_t k = 0; k < 8; k++)
      for (int64_t j = 0; j < 4; j++)
        ck_assert(oh.values[k * 4 + j] == (hv[k] == (double)j ? 1.0 : 0.0));
    h_tensor_free(&hi);
    h_tensor_free(&oh);
    h_tensor_free(&ind);
    h_tensor_free(&g);
    h_tensor_free(&x);
  }
  harness_close(&hx);
}
END_TEST

/* SCATTER_ADD sums in f32 and rounds once: 200 updates of a quarter of
 * 1's ulp into one element add up; a 16-bit accumulator would keep 1.
 * And random updates against float64 (tolerance: f32 sums of n terms err
 * by n 2^-24 of their magnitude, then one rounding, u |want|). */
START_TEST(test_scatter_add) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    const double q = unit(dt) / 2;
    h_tensor base = h_tensor_new(dt, 2, (int64_t[]){4, 3}, NULL);
    for (int64_t i = 0; i < 12; i++)
      base.values[i] = 1;
    h_tensor ind = h_tensor_new(dt, 1, (int64_t[]){200}, NULL);
    h_tensor upd = h_tensor_new(dt, 2, (int64_t[]){200, 3}, NULL);
    for (int64_t i = 0; i < 200; i++)
      ind.values[i] = 1;
    for (int64_t i = 0; i < 600; i++)
      upd.values[i] = q;
    h_tensor y = h_tensor_new(dt, 2, (int64_t[]){4, 3}, NULL);
    ck_assert_ptr_null(harness_run(&hx, OPC(SCATTER_ADD),
                                   (h_tensor[]){base, ind, upd}, 3, &y, 1,
                                   (int64_t[]){0}, 1, NULL, 0));
    for (int64_t i = 0; i < 12; i++)
      ck_assert_msg(y.values[i] == (i / 3 == 1 ? round_to(1 + 200 * q, dt) : 1),
                    "%s: element %lld is %a", dt_name(dt), (long long)i,
                    y.values[i]);
    /* Random: 300 updates into 40 rows. */
    h_tensor b2 = random_tensor(dt, 2, (int64_t[]){40, 5}, -3, 3);
    h_tensor i2 = h_tensor_new(dt, 1, (int64_t[]){300}, NULL);
    h_tensor u2 = random_tensor(dt, 2, (int64_t[]){300, 5}, -3, 3);
    for (int64_t i = 0; i < 300; i++)
      i2.values[i] = (double)(rnd64() % 40);
    transpose_layout(&u2);
    h_tensor y2 = h_tensor_new(dt, 2, (int64_t[]){40, 5}, NULL);
    ck_assert_ptr_null(harness_run(&hx, OPC(SCATTER_ADD),
                                   (h_tensor[]){b2, i2, u2}, 3, &y2, 1,
                                   (int64_t[]){0}, 1, NULL, 0));
    for (int64_t r = 0; r < 40; r++)
      for (int64_t c = 0; c < 5; c++) {
        double want = b2.values[r * 5 + c], mag = fabs(want);
        int64_t n = 1;
        for (int64_t i = 0; i < 300; i++)
          if (i2.values[i] == (double)r) {
            double v = u2.values[h_at(&u2, (int64_t[]){i, c})];
            want += v;
            mag += fabs(v);
            n++;
          }
        double tol = unit(dt) * fabs(want) + (double)n * 0x1p-24 * mag +
                     (dt == BF16 ? 0x1p-126 : 0x1p-25);
        ck_assert(fabs(y2.values[r * 5 + c] - want) <= tol);
      }
    h_tensor ts[] = {base, ind, upd, y, b2, i2, u2, y2};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++)
      h_tensor_free(&ts[k]);
  }
  harness_close(&hx);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Poolings and random numbers: the f32 op's values, rounded once            */
/* ------------------------------------------------------------------------ */

/* A dense row-major f32 copy of t's elements (a copy of the f32 copy runs
 * the f32 kernels the 16-bit op runs between its conversions: the
 * poolings convert into dense f32 operands). */
static h_tensor dense_f32(const h_tensor *t) {
  h_tensor d = h_tensor_new(F32, t->layout.rank, t->layout.shape, NULL);
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (d.storage > 0 && t->layout.rank > 0)
    do
      d.values[h_at(&d, idx)] = t->values[h_at(t, idx)];
    while (next(idx, t->layout.rank, t->layout.shape));
  else if (t->layout.rank == 0)
    d.values[0] = t->values[t->layout.offset];
  return d;
}

/* Runs op on the 16-bit tensors and on dense f32 copies of them, and
 * checks out == the f32 output rounded once to out's dtype. */
static void check_as_f32(harness *hx, uint32_t op, h_tensor *in, uint32_t n_in,
                         h_tensor *out, const int64_t *ia, uint32_t n_ia,
                         const double *fa, uint32_t n_fa) {
  const uint32_t dt = out->layout.dtype, rank = out->layout.rank;
  h_tensor in32[3], out32 = dense_f32(out);
  for (uint32_t j = 0; j < n_in; j++)
    in32[j] = dense_f32(&in[j]);
  const char *e = harness_run(hx, op, in, n_in, out, 1, ia, n_ia, fa, n_fa);
  ck_assert_msg(e == NULL, "op %u %s: %s", op, dt_name(dt), e);
  e = harness_run(hx, op, in32, n_in, &out32, 1, ia, n_ia, fa, n_fa);
  ck_assert_msg(e == NULL, "op %u f32: %s", op, e);
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  do {
    double got = out->values[h_at(out, idx)],
           r32 = out32.values[h_at(&out32, idx)];
    ck_assert_msg(same(got, round_to(r32, dt)),
                  "op %u %s: got %a, the f32 op's rounded %a", op, dt_name(dt),
                  got, round_to(r32, dt));
  } while (next(idx, rank, out->layout.shape));
  for (uint32_t j = 0; j < n_in; j++)
    h_tensor_free(&in32[j]);
  h_tensor_free(&out32);
}

START_TEST(test_pooling) {
  harness hx;
  harness_open(&hx);
  const int64_t a[6] = {3, 3, 2, 2, 1, 1}; /* kernel, stride, pad */
  const int64_t xs[4] = {2, 3, 9, 11}, ys[4] = {2, 3, 5, 6};
  for (uint32_t dt = F16; dt <= BF16; dt++) {
    h_tensor x = random_tensor(dt, 4, xs, -3, 3);
    for (int64_t i = 0; i < x.storage; i += 7)
      x.values[i] = round_to(floor(x.values[i]), dt); /* ties in windows */
    transpose_layout(&x); /* H and W swapped in memory */
    h_tensor t = random_tensor(dt, 4, xs, -3, 3),
             dy = random_tensor(dt, 4, ys, -3, 3);
    h_tensor y = h_tensor_new(dt, 4, ys, NULL),
             dx = h_tensor_new(dt, 4, xs, NULL);
    check_as_f32(&hx, OPC(MAX_POOL2D), &x, 1, &y, a, 6, NULL, 0);
    /* and against float64: each output is its window's largest */
    for (int64_t n = 0; n < 2; n++)
      for (int64_t c = 0; c < 3; c++)
        for (int64_t oh = 0; oh < 5; oh++)
          for (int64_t ow = 0; ow < 6; ow++) {
            double m = -INFINITY;
            for (int64_t ih = 2 * oh - 1; ih <= 2 * oh + 1; ih++)
              for (int64_t iw = 2 * ow - 1; iw <= 2 * ow + 1; iw++)
                if (ih >= 0 && ih < 9 && iw >= 0 && iw < 11) {
                  double v = x.values[h_at(&x, (int64_t[]){n, c, ih, iw})];
                  m = v > m ? v : m;
                }
            ck_assert(y.values[h_at(&y, (int64_t[]){n, c, oh, ow})] == m);
          }
    check_as_f32(&hx, OPC(AVG_POOL2D), &x, 1, &y, a, 6, NULL, 0);
    check_as_f32(&hx, OPC(MAX_POOL2D_BACKWARD), (h_tensor[]){x, dy}, 2, &dx, a,
                 6, NULL, 0);
    check_as_f32(&hx, OPC(MAX_POOL2D_SELECT), (h_tensor[]){x, t}, 2, &y, a, 6,
                 NULL, 0);
    check_as_f32(&hx, OPC(AVG_POOL2D_BACKWARD), &dy, 1, &dx, a, 6, NULL, 0);
    h_tensor ts[] = {x, t, dy, y, dx};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++)
      h_tensor_free(&ts[k]);
  }
  harness_close(&hx);
}
END_TEST

/* The same Philox values as f32, each rounded once (random.md), with and
 * without a step; bounds are checked in the output's dtype. */
START_TEST(test_random) {
  harness hx;
  harness_open(&hx);
  static const struct {
    uint32_t op;
    double fa[2];
    uint32_t n_fa;
  } ops[] = {{OPC(RANDOM_UNIFORM), {-1, 3}, 2},
             {OPC(RANDOM_NORMAL), {0.5, 2}, 2},
             {OPC(RANDOM_BERNOULLI), {0.3, 0}, 1}};
  const int64_t ia[2] = {0x1234567887654321LL, 77};
  for (uint32_t dt = F16; dt <= BF16; dt++)
    for (size_t k = 0; k < 3; k++)
      for (int step = 0; step < 2; step++) {
        h_tensor y = h_tensor_new(dt, 2, (int64_t[]){7, 143}, NULL);
        transpose_layout(&y);
        const double sv = 5;
        h_tensor s = h_tensor_new(dt, 0, NULL, &sv);
        check_as_f32(&hx, ops[k].op, &s, step ? 1 : 0, &y, ia, 2, ops[k].fa,
                     ops[k].n_fa);
        h_tensor_free(&s);
        h_tensor_free(&y);
      }
  h_tensor y = h_tensor_new(F16, 1, (int64_t[]){4}, NULL);
  const double wide[2] = {-1e5, 1};
  ck_assert_str_eq(
      harness_run(&hx, OPC(RANDOM_UNIFORM), NULL, 0, &y, 1, ia, 2, wide, 2),
      "random_uniform: expected finite low <= high in the "
      "output's dtype f16, got low -100000, high 1");
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

static Suite *half_ops_suite(void) {
  Suite *s = suite_create("cpu_half_ops");
  TCase *tc = tcase_create("half_ops");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_reductions);
  tcase_add_test(tc, test_reduce_rounds_once);
  tcase_add_test(tc, test_arg_extent);
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_pad_gather_one_hot);
  tcase_add_test(tc, test_scatter_add);
  tcase_add_test(tc, test_pooling);
  tcase_add_test(tc, test_random);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(half_ops_suite());
}
