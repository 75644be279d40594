/*
 * Reductions, SOFTMAX and LOG_SOFTMAX on the CPU plugin, through the plugin
 * ABI (harness.h), against float64 / long double references written here.
 *
 * Tolerances: f64 results within 1e-12 relative (plus 1e-12 absolute);
 * f32 results within 2e-6 relative (plus 1e-6 absolute) of the reference
 * computed from the same f32-rounded inputs (the plugin accumulates in
 * double and rounds once to f32, about 6e-8).
 */
#include "cpu/harness.h"

#include <float.h>
#include <math.h>

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  harness_close(&hx);
}

static const uint32_t reductions[] = {
    TYTO_PLUGIN_OP_SUM,        TYTO_PLUGIN_OP_MEAN,
    TYTO_PLUGIN_OP_MAX_REDUCE, TYTO_PLUGIN_OP_MIN_REDUCE,
    TYTO_PLUGIN_OP_PROD,       TYTO_PLUGIN_OP_ARGMAX,
    TYTO_PLUGIN_OP_ARGMIN,     TYTO_PLUGIN_OP_LOG_SUM_EXP,
    TYTO_PLUGIN_OP_NORM_L1,    TYTO_PLUGIN_OP_NORM_L2};
#define N_REDUCTIONS (sizeof reductions / sizeof reductions[0])

static const char *op_name(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_SUM: return "sum";
  case TYTO_PLUGIN_OP_MEAN: return "mean";
  case TYTO_PLUGIN_OP_MAX_REDUCE: return "max_reduce";
  case TYTO_PLUGIN_OP_MIN_REDUCE: return "min_reduce";
  case TYTO_PLUGIN_OP_PROD: return "prod";
  case TYTO_PLUGIN_OP_ARGMAX: return "argmax";
  case TYTO_PLUGIN_OP_ARGMIN: return "argmin";
  case TYTO_PLUGIN_OP_LOG_SUM_EXP: return "log_sum_exp";
  case TYTO_PLUGIN_OP_NORM_L1: return "norm_l1";
  case TYTO_PLUGIN_OP_NORM_L2: return "norm_l2";
  case TYTO_PLUGIN_OP_SOFTMAX: return "softmax";
  case TYTO_PLUGIN_OP_LOG_SOFTMAX: return "log_softmax";
  default: return "?";
  }
}

static int is_arg(uint32_t op) {
  return op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
}

/* A small deterministic generator: uniform in [lo, hi), rounded to f32
 * when the dtype is f32 so that the reference sees what the plugin sees. */
static uint64_t rng = 88172645463325252ull;
static double uniform(double lo, double hi, uint32_t dtype) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double v = lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
  return dtype == F32 ? (double)(float)v : v;
}

static double rtol_of(uint32_t dtype) {
  return dtype == F32 ? 2e-6 : 1e-12;
}
static double atol_of(uint32_t dtype) {
  return dtype == F32 ? 1e-6 : 1e-12;
}

/* The reference: reduces the values in row-major order of the reduced
 * axes, in long double. */
static double ref_fold(uint32_t op, const long double *v, int64_t n) {
  long double acc;
  int64_t best = -1;
  switch (op) {
  case TYTO_PLUGIN_OP_SUM:
  case TYTO_PLUGIN_OP_MEAN:
  case TYTO_PLUGIN_OP_NORM_L1:
  case TYTO_PLUGIN_OP_NORM_L2:
    acc = 0;
    for (int64_t i = 0; i < n; i++)
      acc += op == TYTO_PLUGIN_OP_NORM_L1   ? fabsl(v[i])
             : op == TYTO_PLUGIN_OP_NORM_L2 ? v[i] * v[i]
                                            : v[i];
    if (op == TYTO_PLUGIN_OP_MEAN)
      return n ? (double)(acc / n) : NAN;
    return op == TYTO_PLUGIN_OP_NORM_L2 ? (double)sqrtl(acc) : (double)acc;
  case TYTO_PLUGIN_OP_PROD:
    acc = 1;
    for (int64_t i = 0; i < n; i++)
      acc *= v[i];
    return (double)acc;
  case TYTO_PLUGIN_OP_MAX_REDUCE:
  case TYTO_PLUGIN_OP_MIN_REDUCE:
    acc = op == TYTO_PLUGIN_OP_MAX_REDUCE ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; i++) {
      if (isnan(v[i]))
        return NAN;
      if (op == TYTO_PLUGIN_OP_MAX_REDUCE ? v[i] > acc : v[i] < acc)
        acc = v[i];
    }
    return (double)acc;
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_ARGMIN:
    for (int64_t i = 0; i < n; i++) {
      if (isnan(v[i]))
        return (double)i;
      if (best < 0 ||
          (op == TYTO_PLUGIN_OP_ARGMAX ? v[i] > v[best] : v[i] < v[best]))
        best = i;
    }
    return (double)best;
  case TYTO_PLUGIN_OP_LOG_SUM_EXP: {
    long double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) {
      if (isnan(v[i]))
        return NAN;
      if (v[i] > m)
        m = v[i];
    }
    if (isinf(m))
      return (double)m;
    for (int64_t i = 0; i < n; i++)
      s += expl(v[i] - m);
    return (double)(m + logl(s));
  }
  default: ck_abort_msg("no reference for op %u", op);
  }
  return 0;
}

/* Output shape of a keep-dims reduction. */
static void kept_shape(uint32_t rank, const int64_t *shape, const int64_t *axes,
                       uint32_t n_axes, int64_t *out) {
  for (uint32_t a = 0; a < rank; a++)
    out[a] = shape[a];
  for (uint32_t i = 0; i < n_axes; i++)
    out[axes[i]] = 1;
}

/* Steps a multi-index in row-major order; returns 0 after the last. */
static int next_index(int64_t *idx, const int64_t *shape, uint32_t rank) {
  for (uint32_t a = rank; a-- > 0;) {
    if (++idx[a] < shape[a])
      return 1;
    idx[a] = 0;
  }
  return 0;
}

static int64_t numel(const int64_t *shape, uint32_t rank) {
  int64_t n = 1;
  for (uint32_t a = 0; a < rank; a++)
    n *= shape[a];
  return n;
}

/* Checks every element of y (a keep-dims reduction of x over axes)
 * against the reference. */
static void check_reduction(uint32_t op, const h_tensor *x, const h_tensor *y,
                            const int64_t *axes, uint32_t n_axes) {
  uint32_t rank = x->layout.rank;
  const int64_t *shape = x->layout.shape;
  int64_t rshape[TYTO_PLUGIN_MAX_RANK], oshape[TYTO_PLUGIN_MAX_RANK];
  unsigned char red[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < n_axes; i++)
    red[axes[i]] = 1;
  for (uint32_t a = 0; a < rank; a++)
    rshape[a] = red[a] ? shape[a] : 1;
  kept_shape(rank, shape, axes, n_axes, oshape);
  int64_t count = numel(rshape, rank);
  long double *vals = malloc((size_t)(count ? count : 1) * sizeof *vals);
  if (numel(oshape, rank) == 0) {
    free(vals);
    return;
  }
  int64_t o[TYTO_PLUGIN_MAX_RANK] = {0};
  do {
    int64_t r[TYTO_PLUGIN_MAX_RANK] = {0}, idx[TYTO_PLUGIN_MAX_RANK];
    int64_t n = 0;
    if (count > 0)
      do {
        for (uint32_t a = 0; a < rank; a++)
          idx[a] = red[a] ? r[a] : o[a];
        vals[n++] = x->values[h_at(x, idx)];
      } while (next_index(r, rshape, rank));
    double want = ref_fold(op, vals, n);
    double got = y->values[h_at(y, o)];
    ck_assert_msg(
        h_close(got, want, rtol_of(x->layout.dtype), atol_of(x->layout.dtype)),
        "%s %s: output element %lld is %.17g, expected %.17g", op_name(op),
        x->layout.dtype == F32 ? "f32" : "f64", (long long)(h_at(y, o)), got,
        want);
  } while (next_index(o, oshape, rank));
  free(vals);
}

/* Values suited to op: PROD gets factors near 1 (no overflow in f32). */
static void fill_random(h_tensor *x, uint32_t op) {
  for (int64_t i = 0; i < x->storage; i++)
    x->values[i] = op == TYTO_PLUGIN_OP_PROD
                       ? uniform(0.5, 1.5, x->layout.dtype)
                       : uniform(-2, 2, x->layout.dtype);
}

/* Runs op over axes of a fresh row-major random tensor of the given shape,
 * into a row-major keep-dims output, and checks it. */
static void reduce_case(uint32_t op, uint32_t dtype, uint32_t rank,
                        const int64_t *shape, const int64_t *axes,
                        uint32_t n_axes) {
  int64_t oshape[TYTO_PLUGIN_MAX_RANK];
  kept_shape(rank, shape, axes, n_axes, oshape);
  h_tensor x = h_tensor_new(dtype, rank, shape, NULL);
  h_tensor y = h_tensor_new(dtype, rank, oshape, NULL);
  fill_random(&x, op);
  const char *err = harness_run(&hx, op, &x, 1, &y, 1, axes, n_axes, NULL, 0);
  ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
  check_reduction(op, &x, &y, axes, n_axes);
  h_tensor_free(&x);
  h_tensor_free(&y);
}

/* Every reduction, both dtypes, over one, several and all axes (first,
 * middle, last) of rank-3 and rank-4 inputs. */
START_TEST(test_axes) {
  static const int64_t s3[] = {3, 4, 5}, s4[] = {2, 3, 4, 5};
  static const int64_t a0[] = {0}, a1[] = {1}, a2[] = {2}, a3[] = {3},
                       a02[] = {0, 2}, a012[] = {0, 1, 2}, a12[] = {1, 2},
                       a13[] = {1, 3}, a0123[] = {0, 1, 2, 3}, a01[] = {0, 1};
  struct {
    uint32_t rank;
    const int64_t *shape, *axes;
    uint32_t n;
  } cases[] = {{3, s3, a0, 1},   {3, s3, a1, 1},   {3, s3, a2, 1},
               {3, s3, a02, 2},  {3, s3, a012, 3}, {3, s3, a01, 2},
               {4, s4, a0, 1},   {4, s4, a1, 1},   {4, s4, a2, 1},
               {4, s4, a3, 1},   {4, s4, a12, 2},  {4, s4, a13, 2},
               {4, s4, a0123, 4}};
  for (size_t k = 0; k < N_REDUCTIONS; k++)
    for (uint32_t dt = F32; dt <= F64; dt++)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (is_arg(reductions[k]) && cases[c].n != 1)
          continue;
        reduce_case(reductions[k], dt, cases[c].rank, cases[c].shape,
                    cases[c].axes, cases[c].n);
      }
}
END_TEST

/* An input seen through a permuted, stepped and flipped layout with an
 * offset, into an output with gaps between its elements: elements outside
 * the output's layout keep their sentinel. */
START_TEST(test_strided) {
  static const int64_t shape[] = {4, 3, 5};
  static const int64_t ax1[] = {1}, ax02[] = {0, 2}, ax2[] = {2},
                       ax012[] = {0, 1, 2};
  const int64_t *axsets[] = {ax1, ax02, ax2, ax012};
  const uint32_t nax[] = {1, 2, 1, 3};
  for (size_t k = 0; k < N_REDUCTIONS; k++)
    for (uint32_t dt = F32; dt <= F64; dt++)
      for (size_t c = 0; c < 4; c++) {
        uint32_t op = reductions[k];
        if (is_arg(op) && nax[c] != 1)
          continue;
        /* Storage of [5, 2*3+1, 2*4+1]; the logical [4,3,5] tensor is
         * element (i, j, l) -> storage (4 - l, 2*j + 1, 8 - 2*i): axis 0
         * flipped and stepped, axis 2 transposed to the front, flipped. */
        int64_t st_shape[] = {5, 7, 9};
        h_tensor x = h_tensor_new(dt, 3, st_shape, NULL);
        fill_random(&x, op);
        x.layout.shape[0] = shape[0];
        x.layout.shape[1] = shape[1];
        x.layout.shape[2] = shape[2];
        x.layout.strides[0] = -2;
        x.layout.strides[1] = 2 * 9;
        x.layout.strides[2] = -7 * 9;
        x.layout.offset = 4 * 63 + 9 + 8;
        int64_t oshape[3];
        kept_shape(3, shape, axsets[c], nax[c], oshape);
        /* Output: column-major with a step of 2, offset 3. */
        int64_t on = numel(oshape, 3);
        int64_t ostore[] = {2 * on + 3};
        h_tensor y = h_tensor_new(dt, 1, ostore, NULL);
        for (int64_t i = 0; i < y.storage; i++)
          y.values[i] = 7777;
        y.layout.rank = 3;
        int64_t step = 2;
        for (uint32_t a = 0; a < 3; a++) {
          y.layout.shape[a] = oshape[a];
          y.layout.strides[a] = step;
          step *= oshape[a];
        }
        y.layout.offset = 3;
        const char *err =
            harness_run(&hx, op, &x, 1, &y, 1, axsets[c], nax[c], NULL, 0);
        ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
        check_reduction(op, &x, &y, axsets[c], nax[c]);
        for (int64_t i = 0; i < y.storage; i++)
          if (i < 3 || (i - 3) % 2 != 0)
            ck_assert_double_eq(y.values[i], 7777);
        h_tensor_free(&x);
        h_tensor_free(&y);
      }
}
END_TEST

/* A scalar with no axes reduces to itself (or its magnitude, or index 0
 * of nothing reduced for no op here). */
START_TEST(test_rank0) {
  for (uint32_t dt = F32; dt <= F64; dt++)
    for (size_t k = 0; k < N_REDUCTIONS; k++) {
      uint32_t op = reductions[k];
      if (is_arg(op))
        continue;
      double v = -3.5;
      h_tensor x = h_tensor_new(dt, 0, NULL, &v);
      h_tensor y = h_tensor_new(dt, 0, NULL, NULL);
      const char *err = harness_run(&hx, op, &x, 1, &y, 1, NULL, 0, NULL, 0);
      ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
      double want = op == TYTO_PLUGIN_OP_NORM_L1 || op == TYTO_PLUGIN_OP_NORM_L2
                        ? 3.5
                        : -3.5;
      ck_assert_msg(h_close(y.values[0], want, 1e-7, 0), "%s: %g", op_name(op),
                    y.values[0]);
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
}
END_TEST

/* Empty reductions give each op's identity; an empty kept axis gives an
 * empty output; ARGMAX/ARGMIN of an empty axis are refused. */
START_TEST(test_empty) {
  static const int64_t shape[] = {2, 0, 3}, oshape[] = {2, 1, 3},
                       eshape[] = {1, 0, 3}, ax1[] = {1}, ax0[] = {0};
  for (uint32_t dt = F32; dt <= F64; dt++)
    for (size_t k = 0; k < N_REDUCTIONS; k++) {
      uint32_t op = reductions[k];
      h_tensor x = h_tensor_new(dt, 3, shape, NULL);
      h_tensor y = h_tensor_new(dt, 3, oshape, NULL);
      const char *err = harness_run(&hx, op, &x, 1, &y, 1, ax1, 1, NULL, 0);
      if (is_arg(op)) {
        char want[200];
        snprintf(want, sizeof want,
                 "%s: axis 1 has extent 0, and an empty axis has no index of "
                 "its extreme",
                 op_name(op));
        ck_assert_ptr_nonnull(err);
        ck_assert_str_eq(err, want);
      } else {
        ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
        double want = op == TYTO_PLUGIN_OP_MEAN          ? NAN
                      : op == TYTO_PLUGIN_OP_PROD        ? 1
                      : op == TYTO_PLUGIN_OP_MAX_REDUCE  ? -INFINITY
                      : op == TYTO_PLUGIN_OP_MIN_REDUCE  ? INFINITY
                      : op == TYTO_PLUGIN_OP_LOG_SUM_EXP ? -INFINITY
                                                         : 0;
        for (int i = 0; i < 6; i++)
          ck_assert_msg(h_close(y.values[i], want, 0, 0), "%s: %g", op_name(op),
                        y.values[i]);
      }
      h_tensor_free(&y);
      /* Reducing a non-empty axis of an empty tensor: nothing to write. */
      y = h_tensor_new(dt, 3, eshape, NULL);
      err = harness_run(&hx, op, &x, 1, &y, 1, ax0, 1, NULL, 0);
      ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
}
END_TEST

/* Kahan-compensated long double sum: the reference for long sums. */
static long double kahan(const double *v, int64_t n) {
  long double s = 0, c = 0;
  for (int64_t i = 0; i < n; i++) {
    long double yk = (long double)v[i] - c, t = s + yk;
    c = (t - s) - yk;
    s = t;
  }
  return s;
}

/* A 1e6-element full sum: f32 within 2^-23 relative of the exact sum of
 * its f32 inputs (one rounding to f32 plus a negligible double error; a
 * naive float accumulator is off by ~1e-4 here), f64 within 1e-13. This
 * also runs the chunked path (one output, 1e6 elements). */
START_TEST(test_long_sum) {
  const int64_t n = 1000000;
  for (uint32_t dt = F32; dt <= F64; dt++) {
    h_tensor x = h_tensor_new(dt, 1, &n, NULL);
    for (int64_t i = 0; i < n; i++)
      x.values[i] = uniform(0, 1, dt);
    int64_t one = 1, ax = 0;
    h_tensor y = h_tensor_new(dt, 1, &one, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_SUM, &x, 1, &y, 1, &ax, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    double want = (double)kahan(x.values, n);
    double tol = dt == F32 ? 0x1p-23 : 1e-13;
    ck_assert_msg(fabs(y.values[0] - want) <= tol * want,
                  "sum of 1e6: %.17g, expected %.17g", y.values[0], want);
    /* The same through MEAN and NORM_L1 (all inputs are positive). */
    err = harness_run(&hx, TYTO_PLUGIN_OP_MEAN, &x, 1, &y, 1, &ax, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    ck_assert(fabs(y.values[0] - want / n) <= tol * want / n);
    err =
        harness_run(&hx, TYTO_PLUGIN_OP_NORM_L1, &x, 1, &y, 1, &ax, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    ck_assert(fabs(y.values[0] - want) <= tol * want);
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
}
END_TEST

/* Long reductions of a few outputs (the chunked path) for every op:
 * [3, 50000] over axis 1, and [50000, 2] over axis 0 (strided runs). */
START_TEST(test_long_rows) {
  static const int64_t s1[] = {3, 50000}, s2[] = {50000, 2}, ax1[] = {1},
                       ax0[] = {0};
  for (size_t k = 0; k < N_REDUCTIONS; k++)
    for (uint32_t dt = F32; dt <= F64; dt++) {
      if (reductions[k] == TYTO_PLUGIN_OP_PROD)
        continue; /* a product of 50000 factors leaves the range */
      reduce_case(reductions[k], dt, 2, s1, ax1, 1);
      reduce_case(reductions[k], dt, 2, s2, ax0, 1);
    }
}
END_TEST

/* Ties go to the first index, also across chunks of a long axis; a NaN
 * counts as the extreme (the first NaN wins, as NumPy's argmax). */
START_TEST(test_arg_ties) {
  for (uint32_t dt = F32; dt <= F64; dt++) {
    double v[] = {1, 3, 3, 2, -1, -1};
    int64_t n = 6, one = 1, ax = 0;
    h_tensor x = h_tensor_new(dt, 1, &n, v);
    h_tensor y = h_tensor_new(dt, 1, &one, NULL);
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMAX, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 1);
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMIN, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 4);
    x.values[3] = NAN;
    x.values[5] = NAN;
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMAX, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 3);
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMIN, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 3);
    h_tensor_free(&x);
    /* 100000 equal values with two maxima far apart, in different chunks. */
    n = 100000;
    x = h_tensor_new(dt, 1, &n, NULL);
    x.values[70000] = 5;
    x.values[90000] = 5;
    x.values[30000] = -5;
    x.values[99999] = -5;
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMAX, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 70000);
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMIN, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 30000);
    /* All equal: index 0. */
    x.values[70000] = x.values[90000] = x.values[30000] = x.values[99999] = 0;
    ck_assert_ptr_null(
        harness_run(&hx, TYTO_PLUGIN_OP_ARGMAX, &x, 1, &y, 1, &ax, 1, NULL, 0));
    ck_assert_double_eq(y.values[0], 0);
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
}
END_TEST

/* MAX/MIN (and every other reduction but ARG*) propagate NaN wherever it
 * sits, also in a long chunked row; infinities are ordinary extremes. */
START_TEST(test_nan) {
  for (uint32_t dt = F32; dt <= F64; dt++)
    for (size_t k = 0; k < N_REDUCTIONS; k++) {
      uint32_t op = reductions[k];
      if (is_arg(op))
        continue;
      for (int64_t n = 4; n <= 40000; n *= 10000) {
        for (int64_t pos = 0; pos < n; pos += n - 1) {
          int64_t one = 1, ax = 0;
          h_tensor x = h_tensor_new(dt, 1, &n, NULL);
          for (int64_t i = 0; i < n; i++)
            x.values[i] = 1;
          x.values[pos] = NAN;
          h_tensor y = h_tensor_new(dt, 1, &one, NULL);
          ck_assert_ptr_null(
              harness_run(&hx, op, &x, 1, &y, 1, &ax, 1, NULL, 0));
          ck_assert_msg(isnan(y.values[0]), "%s of %lld with NaN at %lld: %g",
                        op_name(op), (long long)n, (long long)pos, y.values[0]);
          h_tensor_free(&x);
          h_tensor_free(&y);
        }
      }
    }
  for (uint32_t dt = F32; dt <= F64; dt++) {
    double v[] = {1, INFINITY, -INFINITY, 2};
    int64_t n = 4, one = 1, ax = 0;
    h_tensor x = h_tensor_new(dt, 1, &n, v);
    h_tensor y = h_tensor_new(dt, 1, &one, NULL);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MAX_REDUCE, &x, 1, &y, 1,
                                   &ax, 1, NULL, 0));
    ck_assert(isinf(y.values[0]) && y.values[0] > 0);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MIN_REDUCE, &x, 1, &y, 1,
                                   &ax, 1, NULL, 0));
    ck_assert(isinf(y.values[0]) && y.values[0] < 0);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_LOG_SUM_EXP, &x, 1, &y,
                                   1, &ax, 1, NULL, 0));
    ck_assert(isinf(y.values[0]) && y.values[0] > 0);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_NORM_L2, &x, 1, &y, 1,
                                   &ax, 1, NULL, 0));
    ck_assert(isinf(y.values[0]) && y.values[0] > 0);
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
}
END_TEST

/* LOG_SUM_EXP of large and very negative values without overflow or
 * underflow; all -inf gives -inf. NORM_L2 of f64 values near 1e200 (whose
 * squares overflow) and f32 values near 1e30. */
START_TEST(test_stable) {
  for (uint32_t dt = F32; dt <= F64; dt++) {
    int64_t n = 3, one = 1, ax = 0;
    double big[] = {1000, 1000, 999};
    h_tensor x = h_tensor_new(dt, 1, &n, big);
    h_tensor y = h_tensor_new(dt, 1, &one, NULL);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_LOG_SUM_EXP, &x, 1, &y,
                                   1, &ax, 1, NULL, 0));
    double want = 1000 + log(2 + exp(-1.0));
    ck_assert_msg(h_close(y.values[0], want, rtol_of(dt), 0), "%.17g",
                  y.values[0]);
    for (int i = 0; i < 3; i++)
      x.values[i] = -big[i];
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_LOG_SUM_EXP, &x, 1, &y,
                                   1, &ax, 1, NULL, 0));
    want = -999 + log(1 + 2 * exp(-1.0));
    ck_assert_msg(h_close(y.values[0], want, rtol_of(dt), 0), "%.17g",
                  y.values[0]);
    for (int i = 0; i < 3; i++)
      x.values[i] = -INFINITY;
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_LOG_SUM_EXP, &x, 1, &y,
                                   1, &ax, 1, NULL, 0));
    ck_assert(isinf(y.values[0]) && y.values[0] < 0);
    double scale = dt == F32 ? 1e30 : 1e200;
    double v[] = {3 * scale, -4 * scale, 0};
    memcpy(x.values, v, sizeof v);
    if (dt == F32)
      for (int i = 0; i < 3; i++)
        x.values[i] = (float)x.values[i];
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_NORM_L2, &x, 1, &y, 1,
                                   &ax, 1, NULL, 0));
    /* hypot: no overflow, even where long double is only double (as
     * under valgrind). */
    want = hypot(x.values[0], x.values[1]);
    ck_assert_msg(h_close(y.values[0], want, rtol_of(dt), 0), "%.17g vs %.17g",
                  y.values[0], want);
    h_tensor_free(&x);
    h_tensor_free(&y);
    /* 50000 values of 1e200 in f64 (chunked): 1e200 * sqrt(50000). */
    if (dt == F64) {
      n = 50000;
      x = h_tensor_new(dt, 1, &n, NULL);
      for (int64_t i = 0; i < n; i++)
        x.values[i] = i % 2 ? 1e200 : -1e200;
      y = h_tensor_new(dt, 1, &one, NULL);
      ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_NORM_L2, &x, 1, &y, 1,
                                     &ax, 1, NULL, 0));
      ck_assert_msg(h_close(y.values[0], 1e200 * sqrt(50000.0), 1e-12, 0),
                    "%.17g", y.values[0]);
      h_tensor_free(&x);
      h_tensor_free(&y);
    }
  }
}
END_TEST

/* Softmax rows sum to 1 and equal exp(x - lse); log-softmax equals
 * x - lse; over the first, middle and last axis of a rank-3 input, with
 * large values (1000 +- 2), and into a strided output. */
/* Checks y = (log_)softmax(x) over axis against exp(x - lse) / x - lse
 * from the long double reference, and that each row sums to 1. */
static void check_softmax(int lg, const h_tensor *x, const h_tensor *y,
                          int64_t axis, double atol) {
  uint32_t rank = x->layout.rank, dt = x->layout.dtype;
  const int64_t *shape = x->layout.shape;
  int64_t n = shape[axis];
  long double *v = malloc((size_t)n * sizeof *v);
  int64_t o[TYTO_PLUGIN_MAX_RANK] = {0};
  do {
    if (o[axis] != 0)
      continue;
    int64_t idx[TYTO_PLUGIN_MAX_RANK];
    memcpy(idx, o, sizeof idx);
    for (int64_t j = 0; j < n; j++) {
      idx[axis] = j;
      v[j] = x->values[h_at(x, idx)];
    }
    double lse = ref_fold(TYTO_PLUGIN_OP_LOG_SUM_EXP, v, n);
    double total = 0;
    for (int64_t j = 0; j < n; j++) {
      idx[axis] = j;
      double got = y->values[h_at(y, idx)];
      double want = lg ? (double)(v[j] - lse) : exp((double)v[j] - lse);
      ck_assert_msg(h_close(got, want, rtol_of(dt), atol),
                    "%s f%d axis %lld: %.17g, expected %.17g",
                    lg ? "log_softmax" : "softmax", dt == F32 ? 32 : 64,
                    (long long)axis, got, want);
      total += lg ? exp(got) : got;
    }
    ck_assert_msg(fabs(total - 1) <= (dt == F32 ? 1e-5 : 1e-12) * (n / 5 + 1),
                  "row sums to %.17g", total);
  } while (next_index(o, shape, rank));
  free(v);
}

/* Softmax rows sum to 1 and equal exp(x - lse); log-softmax equals
 * x - lse; over the first, middle and last axis of a rank-3 input, with
 * large values (1000 +- 2), and into a strided output. */
START_TEST(test_softmax) {
  static const int64_t shape[] = {3, 4, 5};
  for (uint32_t dt = F32; dt <= F64; dt++)
    for (int lg = 0; lg < 2; lg++)
      for (int64_t axis = 0; axis < 3; axis++)
        for (int large = 0; large < 2; large++) {
          uint32_t op =
              lg ? TYTO_PLUGIN_OP_LOG_SOFTMAX : TYTO_PLUGIN_OP_SOFTMAX;
          h_tensor x = h_tensor_new(dt, 3, shape, NULL);
          for (int64_t i = 0; i < x.storage; i++)
            x.values[i] = uniform(large ? 998 : -3, large ? 1002 : 3, dt);
          /* Output: reversed strides (column-major) with offset 1. */
          int64_t store_n = 61;
          h_tensor y = h_tensor_new(dt, 1, &store_n, NULL);
          y.layout.rank = 3;
          y.layout.shape[0] = 3;
          y.layout.shape[1] = 4;
          y.layout.shape[2] = 5;
          y.layout.strides[0] = 1;
          y.layout.strides[1] = 3;
          y.layout.strides[2] = 12;
          y.layout.offset = 1;
          const char *err =
              harness_run(&hx, op, &x, 1, &y, 1, &axis, 1, NULL, 0);
          ck_assert_msg(err == NULL, "%s: %s", op_name(op), err);
          check_softmax(lg, &x, &y, axis, lg && large ? 1e-4 : atol_of(dt));
          ck_assert_double_eq(y.values[0], 0); /* before the offset */
          h_tensor_free(&x);
          h_tensor_free(&y);
        }
}
END_TEST

/* Enough outputs and work to be cut into blocks for the pool: every op
 * over each axis of [500, 70], softmax over each axis, and a softmax row
 * whose first element dominates (the rest underflow to 0). */
START_TEST(test_many_outputs) {
  static const int64_t shape[] = {500, 70};
  for (uint32_t dt = F32; dt <= F64; dt++) {
    for (int64_t axis = 0; axis < 2; axis++) {
      for (size_t k = 0; k < N_REDUCTIONS; k++)
        reduce_case(reductions[k], dt, 2, shape, &axis, 1);
      for (int lg = 0; lg < 2; lg++) {
        h_tensor x = h_tensor_new(dt, 2, shape, NULL);
        h_tensor y = h_tensor_new(dt, 2, shape, NULL);
        for (int64_t i = 0; i < x.storage; i++)
          x.values[i] = uniform(-10, 10, dt);
        const char *err = harness_run(
            &hx, lg ? TYTO_PLUGIN_OP_LOG_SOFTMAX : TYTO_PLUGIN_OP_SOFTMAX, &x,
            1, &y, 1, &axis, 1, NULL, 0);
        ck_assert_msg(err == NULL, "%s", err);
        check_softmax(lg, &x, &y, axis, atol_of(dt));
        h_tensor_free(&x);
        h_tensor_free(&y);
      }
    }
  }
  /* Reductions over outer axes of inputs whose last axis is contiguous
   * (panels of neighbouring outputs, two panels for 300 columns). */
  static const int64_t s3[] = {6, 3, 300}, s4[] = {3, 5, 20},
                       s5[] = {2000, 4, 16}, a0[] = {0}, a01[] = {0, 1},
                       a1[] = {1};
  for (uint32_t dt = F32; dt <= F64; dt++)
    for (size_t k = 0; k < N_REDUCTIONS; k++) {
      reduce_case(reductions[k], dt, 3, s3, a0, 1);
      reduce_case(reductions[k], dt, 3, s4, a1, 1);
      reduce_case(reductions[k], dt, 3, s5, a1, 1); /* many short panels */
      if (!is_arg(reductions[k]))
        reduce_case(reductions[k], dt, 3, s3, a01, 2);
    }
  double v[] = {0, -800, -900};
  int64_t n = 3, ax = 0;
  h_tensor x = h_tensor_new(F64, 1, &n, v);
  h_tensor y = h_tensor_new(F64, 1, &n, NULL);
  ck_assert_ptr_null(
      harness_run(&hx, TYTO_PLUGIN_OP_SOFTMAX, &x, 1, &y, 1, &ax, 1, NULL, 0));
  ck_assert_double_eq(y.values[0], 1);
  ck_assert_double_eq(y.values[1], 0);
  ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_LOG_SOFTMAX, &x, 1, &y, 1,
                                 &ax, 1, NULL, 0));
  ck_assert_double_eq(y.values[0], 0);
  ck_assert_double_eq(y.values[2], -900);
  h_tensor_free(&x);
  h_tensor_free(&y);
}
END_TEST

/* Runs op with the given axes on x [2,3,4] into y of shape oshape and
 * returns the error message (NULL on success). */
static const char *try_reduce(uint32_t op, const int64_t *axes, uint32_t n,
                              const int64_t *oshape, uint32_t orank) {
  static const int64_t shape[] = {2, 3, 4};
  h_tensor x = h_tensor_new(F32, 3, shape, NULL);
  h_tensor y = h_tensor_new(F32, orank, oshape, NULL);
  const char *err = harness_run(&hx, op, &x, 1, &y, 1, axes, n, NULL, 0);
  h_tensor_free(&x);
  h_tensor_free(&y);
  return err;
}

START_TEST(test_errors) {
  static const int64_t o1[] = {2, 1, 4}, o02[] = {1, 3, 1}, full[] = {2, 3, 4};
  const char *e;
  e = try_reduce(TYTO_PLUGIN_OP_SUM, (int64_t[]){3}, 1, o1, 3);
  ck_assert_str_eq(e, "sum: axis 3 is out of range for an input of rank 3 "
                      "(axes are 0 to rank - 1)");
  e = try_reduce(TYTO_PLUGIN_OP_MEAN, (int64_t[]){-1}, 1, o1, 3);
  ck_assert_str_eq(e, "mean: axis -1 is out of range for an input of rank 3 "
                      "(axes are 0 to rank - 1)");
  e = try_reduce(TYTO_PLUGIN_OP_SUM, (int64_t[]){1, 1}, 2, o1, 3);
  ck_assert_str_eq(e, "sum: axis 1 is repeated; each axis may be reduced once");
  e = try_reduce(TYTO_PLUGIN_OP_MAX_REDUCE, (int64_t[]){2, 0}, 2, o02, 3);
  ck_assert_str_eq(e, "max_reduce: axes must be ascending, but axis 0 follows "
                      "axis 2");
  e = try_reduce(TYTO_PLUGIN_OP_SUM, (int64_t[]){1}, 1, o02, 3);
  ck_assert_str_eq(e, "sum: output shape [1,3,1] should be [2,1,4] (the "
                      "input's, with each reduced axis kept at extent 1)");
  e = try_reduce(TYTO_PLUGIN_OP_SUM, (int64_t[]){1}, 1, (int64_t[]){2, 4}, 2);
  ck_assert_str_eq(e, "sum: output shape [2,4] should be [2,1,4] (the "
                      "input's, with each reduced axis kept at extent 1)");
  e = try_reduce(TYTO_PLUGIN_OP_SOFTMAX, (int64_t[]){1}, 1, o1, 3);
  ck_assert_str_eq(e, "softmax: output shape [2,1,4] should be [2,3,4] (the "
                      "input's shape)");
  e = try_reduce(TYTO_PLUGIN_OP_ARGMAX, (int64_t[]){0, 2}, 2, o02, 3);
  ck_assert_str_eq(e, "argmax: expected exactly one axis as integer "
                      "attribute, got 2 axes");
  e = try_reduce(TYTO_PLUGIN_OP_ARGMIN, NULL, 0, full, 3);
  ck_assert_str_eq(e, "argmin: expected exactly one axis as integer "
                      "attribute, got 0 axes");
  e = try_reduce(TYTO_PLUGIN_OP_LOG_SOFTMAX, (int64_t[]){0, 1}, 2, full, 3);
  ck_assert_str_eq(e, "log_softmax: expected the axis as the only integer "
                      "attribute, got 2 integer attributes");
  e = try_reduce(TYTO_PLUGIN_OP_SOFTMAX, (int64_t[]){3}, 1, full, 3);
  ck_assert_str_eq(e, "softmax: axis 3 is out of range for an input of rank 3 "
                      "(axes are 0 to rank - 1)");
  /* Counts and dtypes. */
  static const int64_t shape[] = {2, 3, 4};
  h_tensor x[2] = {h_tensor_new(F32, 3, shape, NULL),
                   h_tensor_new(F32, 3, shape, NULL)};
  h_tensor y = h_tensor_new(F64, 3, o1, NULL);
  int64_t ax = 1;
  e = harness_run(&hx, TYTO_PLUGIN_OP_SUM, x, 2, &y, 1, &ax, 1, NULL, 0);
  ck_assert_str_eq(e, "sum: expected 1 input and 1 output, got 2 and 1");
  e = harness_run(&hx, TYTO_PLUGIN_OP_PROD, x, 1, x + 1, 0, &ax, 1, NULL, 0);
  ck_assert_str_eq(e, "prod: expected 1 input and 1 output, got 1 and 0");
  e = harness_run(&hx, TYTO_PLUGIN_OP_NORM_L2, x, 1, &y, 1, &ax, 1, NULL, 0);
  ck_assert_str_eq(e, "norm_l2: input is f32 but output is f64");
  h_tensor_free(&x[0]);
  h_tensor_free(&x[1]);
  h_tensor_free(&y);
}
END_TEST

static Suite *reduce_suite(void) {
  Suite *s = suite_create("cpu_reduce");
  TCase *tc = tcase_create("reduce");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_axes);
  tcase_add_test(tc, test_strided);
  tcase_add_test(tc, test_rank0);
  tcase_add_test(tc, test_empty);
  tcase_add_test(tc, test_long_sum);
  tcase_add_test(tc, test_long_rows);
  tcase_add_test(tc, test_arg_ties);
  tcase_add_test(tc, test_nan);
  tcase_add_test(tc, test_stable);
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_many_outputs);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(reduce_suite());
}
