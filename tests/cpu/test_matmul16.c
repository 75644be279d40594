/*
 * MATMUL in bf16 and f16 on the CPU plugin against a float64 reference
 * computed here from the exact 16-bit inputs, on each path an op can take
 * (gemm16_ref.h: bf16 on oneDNN, bf16 through f32, f16): plain products of
 * odd sizes, every transpose flag, batch axes broadcast (missing, extent
 * 1, stride 0), strided, offset, flipped and column-major layouts in and
 * out, k = 1, large k, empty extents, NaN and infinities, f16 overflow, a
 * sum that only an accumulator wider than the dtype gets right, and the
 * refusal of mixed dtypes.
 *
 * Tolerance (gemm16_ref.h): an output element summing k products whose
 * absolute values sum to S passes when |got - want| <= (k + 1) 2^-24 S
 * (1 + u) + u |want| (+ k 2^-126), u = 2^-8 for bf16 and 2^-11 for f16:
 * f32 accumulation in any order, then one rounding to the dtype.
 */
#include "cpu/gemm16_ref.h"

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  path_leave();
  harness_close(&hx);
}

static h_tensor mk(uint32_t dt, uint32_t rank, const int64_t *shape,
                   unsigned seed) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  fill16(&t, seed);
  return t;
}

/* Re-views t's storage with another shape, strides and offset. */
static void view(h_tensor *t, uint32_t rank, const int64_t *shape,
                 const int64_t *strides, int64_t offset) {
  t->layout.rank = rank;
  for (uint32_t i = 0; i < rank; i++) {
    t->layout.shape[i] = shape[i];
    t->layout.strides[i] = strides[i];
  }
  t->layout.offset = offset;
}

/* Checks c = op(a) op(b) against loops over c's indices, batch axes
 * broadcast right-aligned (an extent-1 or missing axis of an input). */
static void check(const h_tensor *a, int ta, const h_tensor *b, int tb,
                  const h_tensor *c) {
  const tyto_plugin_layout *la = &a->layout, *lb = &b->layout, *lc = &c->layout;
  uint32_t rc = lc->rank, ra = la->rank, rb = lb->rank;
  int64_t k = ta ? la->shape[ra - 2] : la->shape[ra - 1];
  int64_t total = 1;
  for (uint32_t i = 0; i < rc; i++)
    total *= lc->shape[i];
  for (int64_t lin = 0; lin < total; lin++) {
    int64_t idx[8], ia[8], ib[8], rest = lin;
    for (uint32_t i = rc; i-- > 0;) {
      idx[i] = rest % lc->shape[i];
      rest /= lc->shape[i];
    }
    for (uint32_t i = 0; i + 2 < ra; i++)
      ia[i] = la->shape[i] == 1 ? 0 : idx[i + rc - ra];
    for (uint32_t i = 0; i + 2 < rb; i++)
      ib[i] = lb->shape[i] == 1 ? 0 : idx[i + rc - rb];
    int64_t row = idx[rc - 2], col = idx[rc - 1];
    double s = 0, mag = 0;
    for (int64_t j = 0; j < k; j++) {
      ia[ra - 2] = ta ? j : row;
      ia[ra - 1] = ta ? row : j;
      ib[rb - 2] = tb ? col : j;
      ib[rb - 1] = tb ? j : col;
      double p = a->values[h_at(a, ia)] * b->values[h_at(b, ib)];
      s += p;
      mag += fabs(p);
    }
    double got = c->values[h_at(c, idx)],
           bound = sum_bound(lc->dtype, k, mag, s);
    ck_assert_msg(within(lc->dtype, got, s, bound),
                  "element %lld: got %.9g, expected %.9g (bound %.3g)",
                  (long long)lin, got, s, bound);
  }
}

static void run_ok(h_tensor *a, int ta, h_tensor *b, int tb, h_tensor *c) {
  int64_t flags[2] = {ta, tb};
  const char *err =
      harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){*a, *b}, 2, c, 1,
                  flags, 2, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  check(a, ta, b, tb, c);
}

/* A plain m x k x n product with the given flags, laid out as stored. */
static void plain(uint32_t dt, int64_t m, int64_t k, int64_t n, int ta,
                  int tb) {
  int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
  h_tensor a = mk(dt, 2, sa, 1), b = mk(dt, 2, sb, 2),
           c = h_tensor_new(dt, 2, (int64_t[]){m, n}, NULL);
  run_ok(&a, ta, &b, tb, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}

/* _i: path * 4 + transpose flags. */
START_TEST(transpose_flags) {
  int path = _i / 4, ta = _i & 1, tb = (_i >> 1) & 1;
  uint32_t dt = path_dtype(path);
  path_enter(path);
  plain(dt, 5, 7, 3, ta, tb);
  plain(dt, 37, 53, 29, ta, tb);
  plain(dt, 130, 97, 70, ta, tb);
  plain(dt, 1, 7, 1, ta, tb); /* dot */
  plain(dt, 6, 1, 4, ta, tb); /* k = 1: an outer product */
}
END_TEST

/* Large k: 2000 random terms, and a sum no 16-bit accumulator gets: 1
 * then 4096 terms of 2^-12 (f16) or 512 of 2^-9 (bf16), each under half
 * an ulp of 1, so that each addition rounded to the dtype would leave 1;
 * summed in f32 they give exactly 2. */
START_TEST(large_k) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  plain(dt, 3, 2000, 5, 0, 0);
  plain(dt, 4, 2001, 3, 1, 1);
  int64_t small = dt == F16 ? 4096 : 512, k = small + 1;
  h_tensor a = h_tensor_new(dt, 2, (int64_t[]){2, k}, NULL),
           b = h_tensor_new(dt, 2, (int64_t[]){k, 1}, NULL),
           c = h_tensor_new(dt, 2, (int64_t[]){2, 1}, NULL);
  for (int64_t j = 0; j < k; j++) {
    a.values[j] = j == 0 ? 1 : 1.0 / (double)small;
    a.values[k + j] = j == k - 1 ? 1 : 1.0 / (double)small; /* 1 last */
    b.values[j] = 1;
  }
  run_ok(&a, 0, &b, 0, &c);
  ck_assert_msg(c.values[0] == 2 && c.values[1] == 2, "got %g and %g, not 2",
                c.values[0], c.values[1]);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(batch_broadcast) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  /* [2,1,4,5] x [3,5,6] -> [2,3,4,6]: both broadcast. */
  h_tensor a = mk(dt, 4, (int64_t[]){2, 1, 4, 5}, 1),
           b = mk(dt, 3, (int64_t[]){3, 5, 6}, 2),
           c = h_tensor_new(dt, 4, (int64_t[]){2, 3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* [3,4,5] x [5,6]: b shared by every batch; and transposed by flag. */
  a = mk(dt, 3, (int64_t[]){3, 4, 5}, 1);
  b = mk(dt, 2, (int64_t[]){5, 6}, 2);
  c = h_tensor_new(dt, 3, (int64_t[]){3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&b);
  b = mk(dt, 2, (int64_t[]){6, 5}, 2);
  run_ok(&a, 0, &b, 1, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* a with a stride-0 batch axis of extent 3 (a broadcast view). */
  a = mk(dt, 2, (int64_t[]){4, 5}, 1);
  view(&a, 3, (int64_t[]){3, 4, 5}, (int64_t[]){0, 5, 1}, 0);
  b = mk(dt, 3, (int64_t[]){3, 5, 6}, 2);
  c = h_tensor_new(dt, 3, (int64_t[]){3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* Many small products, b transposed and broadcast over two axes. */
  a = mk(dt, 4, (int64_t[]){5, 8, 3, 4}, 1);
  b = mk(dt, 3, (int64_t[]){1, 7, 4}, 2);
  c = h_tensor_new(dt, 4, (int64_t[]){5, 8, 3, 7}, NULL);
  run_ok(&a, 0, &b, 1, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(strided_inputs) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  /* a [4,5] with steps in both axes and an offset; b [5,6] column-major
   * by strides. */
  h_tensor a = mk(dt, 2, (int64_t[]){8, 12}, 1),
           b = mk(dt, 2, (int64_t[]){6, 5}, 2),
           c = h_tensor_new(dt, 2, (int64_t[]){4, 6}, NULL);
  view(&a, 2, (int64_t[]){4, 5}, (int64_t[]){24, 2}, 1);
  view(&b, 2, (int64_t[]){5, 6}, (int64_t[]){1, 5}, 0);
  run_ok(&a, 0, &b, 0, &c);
  /* ... and with both flags: the logical views change, not the data. */
  view(&a, 2, (int64_t[]){5, 4}, (int64_t[]){2, 24}, 1);
  view(&b, 2, (int64_t[]){6, 5}, (int64_t[]){5, 1}, 0);
  run_ok(&a, 1, &b, 1, &c);
  h_tensor_free(&a);
  /* Negative strides (a flipped). */
  a = mk(dt, 2, (int64_t[]){4, 5}, 1);
  view(&a, 2, (int64_t[]){4, 5}, (int64_t[]){-5, -1}, 19);
  view(&b, 2, (int64_t[]){5, 6}, (int64_t[]){6, 1}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  /* Rows with padding (ld > columns) at an offset. */
  a = mk(dt, 2, (int64_t[]){4, 9}, 1);
  view(&a, 2, (int64_t[]){4, 5}, (int64_t[]){9, 1}, 2);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* A batched, transposed-by-strides input with a batch step. */
  a = mk(dt, 3, (int64_t[]){6, 5, 4}, 1);
  view(&a, 3, (int64_t[]){3, 4, 5}, (int64_t[]){40, 1, 4}, 0);
  b = mk(dt, 3, (int64_t[]){3, 5, 6}, 2);
  c = h_tensor_new(dt, 3, (int64_t[]){3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(strided_outputs) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  h_tensor a = mk(dt, 2, (int64_t[]){4, 5}, 1),
           b = mk(dt, 2, (int64_t[]){5, 6}, 2),
           c = mk(dt, 2, (int64_t[]){8, 14}, 3);
  h_tensor orig = mk(dt, 2, (int64_t[]){8, 14}, 3);
  /* Steps in both axes and an offset: the elements between keep their
   * values. */
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){28, 2}, 1);
  run_ok(&a, 0, &b, 0, &c);
  for (int64_t i = 0; i < c.storage; i++) {
    int64_t r = i / 14, col = i % 14;
    int in_view = r % 2 == 0 && col % 2 == 1 && col <= 11;
    if (!in_view)
      ck_assert(c.values[i] == orig.values[i]);
  }
  /* Row padding; column-major (C^T = B^T A^T); flipped rows. */
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){14, 1}, 3);
  run_ok(&a, 0, &b, 0, &c);
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){1, 4}, 0);
  run_ok(&a, 0, &b, 0, &c);
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){-6, 1}, 18);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  h_tensor_free(&orig);
}
END_TEST

START_TEST(empty_extents) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  /* k = 0: zeros, plain and batched with transposes. */
  h_tensor a = mk(dt, 2, (int64_t[]){3, 0}, 1),
           b = mk(dt, 2, (int64_t[]){0, 4}, 2),
           c = mk(dt, 2, (int64_t[]){3, 4}, 3);
  run_ok(&a, 0, &b, 0, &c);
  for (int i = 0; i < 12; i++)
    ck_assert(c.values[i] == 0.0);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  a = mk(dt, 3, (int64_t[]){2, 0, 3}, 1);
  b = mk(dt, 2, (int64_t[]){4, 0}, 2);
  c = mk(dt, 3, (int64_t[]){2, 3, 4}, 3);
  run_ok(&a, 1, &b, 1, &c);
  for (int i = 0; i < 24; i++)
    ck_assert(c.values[i] == 0.0);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* m = 0, n = 0, an empty batch: nothing to write. */
  a = mk(dt, 2, (int64_t[]){0, 3}, 1);
  b = mk(dt, 2, (int64_t[]){3, 4}, 2);
  c = h_tensor_new(dt, 2, (int64_t[]){0, 4}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&c);
  a = mk(dt, 2, (int64_t[]){2, 3}, 1);
  h_tensor b0 = mk(dt, 2, (int64_t[]){3, 0}, 2);
  c = h_tensor_new(dt, 2, (int64_t[]){2, 0}, NULL);
  view(&c, 2, (int64_t[]){2, 0}, (int64_t[]){1, 1}, 0);
  run_ok(&a, 0, &b0, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b0);
  h_tensor_free(&c);
  a = mk(dt, 3, (int64_t[]){0, 2, 3}, 1);
  c = h_tensor_new(dt, 3, (int64_t[]){0, 2, 4}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

/* NaN in a row of A makes that row of C NaN; an infinity in a column of B
 * makes that column infinite, or NaN where it meets a zero of A; the
 * specials sit at the ends of odd-k rows, where vector kernels pad. The
 * reference computes all of it in IEEE arithmetic. */
START_TEST(nan_and_infinities) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t m = 9, k = 17, n = 35;
  for (int ta = 0; ta < 2; ta++) {
    h_tensor a = mk(dt, 2, ta ? (int64_t[]){k, m} : (int64_t[]){m, k}, 1),
             b = mk(dt, 2, (int64_t[]){k, n}, 2),
             c = h_tensor_new(dt, 2, (int64_t[]){m, n}, NULL);
    int64_t at[2] = {2, k - 1}, zero[2] = {5, k - 1};
    a.values[h_at(&a, ta ? (int64_t[]){at[1], at[0]} : at)] = NAN;
    a.values[h_at(&a, ta ? (int64_t[]){zero[1], zero[0]} : zero)] = 0;
    b.values[(k - 1) * n + 7] = INFINITY; /* row 5 meets it with a 0 */
    b.values[(k - 1) * n + 30] = -INFINITY;
    b.values[3 * n + 30] = INFINITY; /* two infinities in one column */
    b.values[4 * n + 11] = INFINITY;
    run_ok(&a, ta, &b, 0, &c);
    ck_assert(isnan(c.values[2 * n + 3]));
    ck_assert(isnan(c.values[5 * n + 7]));
    ck_assert(isinf(c.values[0 * n + 11]));
    h_tensor_free(&a);
    h_tensor_free(&b);
    h_tensor_free(&c);
  }
}
END_TEST

/* f16's largest finite value is 65504: a sum beyond it is an infinity,
 * while f32 accumulation reaches it without overflow (256 * 256 * 3 =
 * 196608). bf16 has f32's range and keeps it, exactly. */
START_TEST(overflow_to_infinity) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  h_tensor a = h_tensor_new(dt, 2, (int64_t[]){2, 3}, NULL),
           b = h_tensor_new(dt, 2, (int64_t[]){3, 1}, NULL),
           c = h_tensor_new(dt, 2, (int64_t[]){2, 1}, NULL);
  for (int j = 0; j < 3; j++) {
    a.values[j] = 256;
    a.values[3 + j] = j == 2 ? -64 : 64; /* 64 * 256 * (1 + 1 - 1) */
    b.values[j] = 256;
  }
  run_ok(&a, 0, &b, 0, &c);
  if (dt == F16)
    ck_assert(isinf(c.values[0]) && c.values[0] > 0);
  else
    ck_assert(c.values[0] == 196608);
  ck_assert(c.values[1] == 16384);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

/* Every 16-bit value times 1 comes back as itself: the conversions into
 * f32 and back, over all 2^16 bit patterns (NaN as some NaN, -0 as a zero:
 * a sum's zero sign is open). bf16 subnormals may come back as zeros:
 * oneDNN's bf16 dot products read them as zeros, as DAZ allows. */
START_TEST(every_value_round_trips) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t m = 65536;
  h_tensor a = h_tensor_new(dt, 2, (int64_t[]){m, 1}, NULL),
           b = h_tensor_new(dt, 2, (int64_t[]){1, 1}, NULL),
           c = h_tensor_new(dt, 2, (int64_t[]){m, 1}, NULL);
  for (int64_t i = 0; i < m; i++)
    a.values[i] =
        dt == F16 ? tpc_f16_to_f32((uint16_t)i) : tpc_bf16_to_f32((uint16_t)i);
  b.values[0] = 1;
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, NULL, 0, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  for (int64_t i = 0; i < m; i++) {
    double want = a.values[i], got = c.values[i];
    int flushed = dt == BF16 && fabs(want) < ldexp(1, -126) && got == 0;
    ck_assert_msg(isnan(want) ? isnan(got) : got == want || flushed,
                  "0x%04x: got %.9g, expected %.9g", (unsigned)i, got, want);
  }
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

/* With k = 1 each result is one product, exact in f32 (16 or 22 bits), so
 * it must be that product rounded once to the dtype, ties to even, into
 * the subnormals (f16) and past the largest finite value to an infinity:
 * exponents spread over the dtype's range and beyond. A bf16 product below
 * f32's normals may be flushed to zero (FTZ, as ops.md allows). */
START_TEST(products_round_once) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t m = 97, n = 101;
  int span = dt == F16 ? 15 : 62;
  h_tensor a = h_tensor_new(dt, 2, (int64_t[]){m, 1}, NULL),
           b = h_tensor_new(dt, 2, (int64_t[]){1, n}, NULL),
           c = h_tensor_new(dt, 2, (int64_t[]){m, n}, NULL);
  fill16(&a, 7);
  fill16(&b, 8);
  for (int64_t i = 0; i < m; i++)
    a.values[i] = round16(dt, ldexp(a.values[i], (int)(i % (2 * span)) - span));
  for (int64_t j = 0; j < n; j++)
    b.values[j] =
        round16(dt, ldexp(b.values[j], (int)(j * 7 % (2 * span)) - span));
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, NULL, 0, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double p = a.values[i] * b.values[j], want = round16(dt, p),
             got = c.values[i * n + j];
      int flushed = fabs(p) < ldexp(1, -126) && got == 0; /* FTZ */
      ck_assert_msg(got == want || flushed,
                    "%.9g * %.9g: got %.9g, expected %.9g", a.values[i],
                    b.values[j], got, want);
    }
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

static void expect_error(uint32_t da, uint32_t db, uint32_t dc,
                         const char *message) {
  h_tensor a = h_tensor_new(da, 2, (int64_t[]){4, 5}, NULL),
           b = h_tensor_new(db, 2, (int64_t[]){5, 6}, NULL),
           c = h_tensor_new(dc, 2, (int64_t[]){4, 6}, NULL);
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, NULL, 0, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, message);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}

START_TEST(mixed_dtypes_refused) {
  expect_error(BF16, F16, BF16,
               "matmul: inputs and output must share one dtype, got bf16 x "
               "f16 -> bf16");
  expect_error(F16, F16, F32,
               "matmul: inputs and output must share one dtype, got f16 x "
               "f16 -> f32");
  expect_error(F32, BF16, F32,
               "matmul: inputs and output must share one dtype, got f32 x "
               "bf16 -> f32");
  /* The shape checks are the f32 ones. */
  h_tensor a = h_tensor_new(BF16, 2, (int64_t[]){4, 5}, NULL),
           b = h_tensor_new(BF16, 2, (int64_t[]){6, 6}, NULL),
           c = h_tensor_new(BF16, 2, (int64_t[]){4, 6}, NULL);
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, NULL, 0, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, "matmul: inner dimensions differ: [4,5] x [6,6]");
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

/* cpu:0 lists both 16-bit dtypes and says how bf16 GEMMs run (what
 * tyto-info prints after the vendor). */
START_TEST(device_says_the_path) {
  const tyto_device_info *info = &hx.dev->info;
  ck_assert(info->dtypes & TYTO_PLUGIN_DTYPE_BIT(F16));
  ck_assert(info->dtypes & TYTO_PLUGIN_DTYPE_BIT(BF16));
  const char *v = info->driver_version;
  ck_assert_msg(strstr(v, "bf16") && strstr(v, "f32") && strstr(v, "CPU: "),
                "driver_version \"%s\"", v);
#ifdef TYTO_HAVE_DNNL
  ck_assert_msg(strstr(v, "oneDNN"), "driver_version \"%s\"", v);
#endif
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu matmul 16-bit");
  TCase *tc = tcase_create("matmul16");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, transpose_flags, 0, 4 * N_PATHS);
  tcase_add_loop_test(tc, large_k, 0, N_PATHS);
  tcase_add_loop_test(tc, batch_broadcast, 0, N_PATHS);
  tcase_add_loop_test(tc, strided_inputs, 0, N_PATHS);
  tcase_add_loop_test(tc, strided_outputs, 0, N_PATHS);
  tcase_add_loop_test(tc, empty_extents, 0, N_PATHS);
  tcase_add_loop_test(tc, nan_and_infinities, 0, N_PATHS);
  tcase_add_loop_test(tc, overflow_to_infinity, 0, N_PATHS);
  tcase_add_loop_test(tc, every_value_round_trips, 0, N_PATHS);
  tcase_add_loop_test(tc, products_round_once, 0, N_PATHS);
  tcase_add_test(tc, mixed_dtypes_refused);
  tcase_add_test(tc, device_says_the_path);
  suite_add_tcase(s, tc);
  return test_run(s);
}
