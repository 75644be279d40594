/* PAD, GATHER, SCATTER_ADD and ONE_HOT on the CPU plugin, in f32 and f64,
 * against hand-computed results, with non-contiguous inputs and outputs,
 * and the exact errors of invalid calls. */
#include "harness.h"

#include <math.h>

/* A rows x cols matrix stored column-major (strides {1, rows}), from
 * row-major values. */
static h_tensor transposed(uint32_t dt, int64_t rows, int64_t cols,
                           const double *v) {
  h_tensor t = h_tensor_new(dt, 2, (int64_t[]){rows, cols}, NULL);
  t.layout.strides[0] = 1;
  t.layout.strides[1] = rows;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      t.values[i + j * rows] = v[i * cols + j];
  return t;
}

/* A vector of n values stored every `step` elements after `offset`; the
 * gaps hold -77. */
static h_tensor spaced(uint32_t dt, int64_t n, int64_t step, int64_t offset,
                       const double *v) {
  int64_t storage = offset + (n - 1) * step + 1;
  h_tensor t = h_tensor_new(dt, 1, (int64_t[]){storage}, NULL);
  for (int64_t i = 0; i < storage; i++)
    t.values[i] = -77;
  t.layout.shape[0] = n;
  t.layout.strides[0] = step;
  t.layout.offset = offset;
  for (int64_t i = 0; i < n; i++)
    t.values[offset + i * step] = v[i];
  return t;
}

/* A fresh row-major output of `shape` whose storage holds -55, and with
 * padding of 3 elements before it (offset 3). */
static h_tensor out_tensor(uint32_t dt, uint32_t rank, const int64_t *shape) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  h_tensor u = h_tensor_new(dt, 1, (int64_t[]){t.storage + 3}, NULL);
  u.layout = t.layout;
  u.layout.offset = 3;
  for (int64_t i = 0; i < u.storage; i++)
    u.values[i] = -55;
  h_tensor_free(&t);
  return u;
}

/* Checks out (row-major element order) against want, and that the three
 * elements before it still hold -55. */
static void expect(const h_tensor *out, const double *want, const char *what) {
  int64_t n = 1;
  for (uint32_t a = 0; a < out->layout.rank; a++)
    n *= out->layout.shape[a];
  for (int64_t i = 0; i < n; i++) {
    int64_t idx[TYTO_PLUGIN_MAX_RANK], r = i;
    for (uint32_t a = out->layout.rank; a-- > 0;) {
      idx[a] = r % out->layout.shape[a];
      r /= out->layout.shape[a];
    }
    double got = out->values[h_at(out, idx)];
    ck_assert_msg(got == want[i], "%s: element %lld is %g, expected %g", what,
                  (long long)i, got, want[i]);
  }
  for (int64_t i = 0; i < out->layout.offset; i++)
    ck_assert_double_eq(out->values[i], -55);
}

static const uint32_t dtypes[2] = {F32, F64};

START_TEST(pad_constant_and_reflect) {
  harness hx;
  harness_open(&hx);
  const double m[6] = {1, 2, 3, 4, 5, 6};
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor x = transposed(dt, 2, 3, m);
    h_tensor y = out_tensor(dt, 2, (int64_t[]){3, 5});
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &y, 1,
                    (int64_t[]){0, 1, 0, 0, 2}, 5, (double[]){9.5}, 1);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y,
           (double[]){9.5, 9.5, 9.5, 9.5, 9.5, 1, 2, 3, 9.5, 9.5, 4, 5, 6, 9.5,
                      9.5},
           "pad constant");
    h_tensor_free(&y);
    /* numpy.pad(m, ((1, 1), (2, 0)), 'reflect') */
    y = out_tensor(dt, 2, (int64_t[]){4, 5});
    err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &y, 1,
                      (int64_t[]){1, 1, 1, 2, 0}, 5, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){6, 5, 4, 5, 6, 3, 2, 1, 2, 3,
                          6, 5, 4, 5, 6, 3, 2, 1, 2, 3},
           "pad reflect 2-d");
    h_tensor_free(&y);
    h_tensor_free(&x);
    /* numpy.pad([1, 2, 3, 4], (2, 3), 'reflect'), a strided input */
    x = spaced(dt, 4, 3, 1, (double[]){1, 2, 3, 4});
    y = out_tensor(dt, 1, (int64_t[]){9});
    err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &y, 1,
                      (int64_t[]){1, 2, 3}, 3, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){3, 2, 1, 2, 3, 4, 3, 2, 1}, "pad reflect 1-d");
    h_tensor_free(&y);
    h_tensor_free(&x);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(pad_errors) {
  harness hx;
  harness_open(&hx);
  h_tensor x = h_tensor_new(F32, 2, (int64_t[]){2, 3}, NULL);
  h_tensor y = h_tensor_new(F32, 2, (int64_t[]){2, 9}, NULL);
  h_tensor z = h_tensor_new(F32, 2, (int64_t[]){3, 3}, NULL);
  h_tensor w = h_tensor_new(F64, 2, (int64_t[]){2, 3}, NULL);
  const char *err;
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &y, 1,
                    (int64_t[]){1, 0, 0, 3, 3}, 5, NULL, 0);
  ck_assert_str_eq(err, "pad: axis 1: reflect pads must be less than the axis "
                        "extent 3, got before 3, after 3");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &z, 1,
                    (int64_t[]){0, 0, 0, 1, 1}, 5, (double[]){0}, 1);
  ck_assert_str_eq(err, "pad: expected output shape [2, 5], found [3, 3]");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &z, 1, (int64_t[]){0, 1, 0},
                    3, (double[]){0}, 1);
  ck_assert_str_eq(err, "pad: expected 5 integer attributes (mode, then "
                        "before and after for each of 2 axes), got 3");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &z, 1,
                    (int64_t[]){2, 1, 0, 0, 0}, 5, (double[]){0}, 1);
  ck_assert_str_eq(err, "pad: expected mode 0 (constant) or 1 (reflect), got "
                        "2");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &z, 1,
                    (int64_t[]){0, -1, 0, 0, 0}, 5, (double[]){0}, 1);
  ck_assert_str_eq(err, "pad: axis 0: expected pads >= 0, got before -1, "
                        "after 0");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &z, 1,
                    (int64_t[]){0, 1, 0, 0, 0}, 5, NULL, 0);
  ck_assert_str_eq(err, "pad: constant mode expects the value as real "
                        "attribute 0, got 0 real attributes");
  err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &w, 1,
                    (int64_t[]){0, 0, 0, 0, 0}, 5, (double[]){0}, 1);
  ck_assert_str_eq(err, "pad: expected input 0 in the output's dtype f64, "
                        "found f32");
  h_tensor_free(&x);
  h_tensor_free(&y);
  h_tensor_free(&z);
  h_tensor_free(&w);
  harness_close(&hx);
}
END_TEST

/* data[i][j] = 10 i + j, 3 x 4, stored column-major. */
static h_tensor data34(uint32_t dt) {
  double v[12];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      v[i * 4 + j] = 10 * i + j;
  return transposed(dt, 3, 4, v);
}

START_TEST(gather_along_axes) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor x = data34(dt);
    h_tensor ind = spaced(dt, 3, 2, 1, (double[]){2, 0, 2});
    h_tensor y = out_tensor(dt, 2, (int64_t[]){3, 4});
    h_tensor in[2] = {x, ind};
    const char *err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1,
                                  (int64_t[]){0}, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23},
           "gather axis 0");
    h_tensor_free(&y);
    h_tensor_free(&ind);
    /* axis 1, indices of shape [2, 2] (column-major): out [3, 2, 2] */
    ind = transposed(dt, 2, 2, (double[]){3, 0, 1, 1});
    in[1] = ind;
    y = out_tensor(dt, 3, (int64_t[]){3, 2, 2});
    err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){1},
                      1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){3, 0, 1, 1, 13, 10, 11, 11, 23, 20, 21, 21},
           "gather axis 1");
    h_tensor_free(&y);
    h_tensor_free(&ind);
    /* a scalar index (rank 0) drops the axis */
    ind = h_tensor_new(dt, 0, NULL, (double[]){2});
    in[1] = ind;
    y = out_tensor(dt, 1, (int64_t[]){3});
    err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){1},
                      1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){2, 12, 22}, "gather scalar index");
    h_tensor_free(&y);
    h_tensor_free(&ind);
    h_tensor_free(&x);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(gather_errors_leave_the_output_alone) {
  harness hx;
  harness_open(&hx);
  h_tensor x = data34(F64);
  h_tensor ind = h_tensor_new(F64, 1, (int64_t[]){2}, (double[]){1, 3});
  h_tensor y = out_tensor(F64, 2, (int64_t[]){2, 4});
  h_tensor in[2] = {x, ind};
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1,
                                (int64_t[]){0}, 1, NULL, 0);
  ck_assert_str_eq(err, "gather: index 3 at position 1 of the indices "
                        "(row-major) is out of range for axis 0 of extent 3 "
                        "(expected 0 to 2)");
  for (int64_t i = 0; i < y.storage; i++)
    ck_assert_double_eq(y.values[i], -55);
  in[1].values[0] = 0.5;
  err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){0}, 1,
                    NULL, 0);
  ck_assert_str_eq(err, "gather: index 0.5 at position 0 of the indices "
                        "(row-major) is not a whole number");
  in[1].values[0] = -1;
  err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){0}, 1,
                    NULL, 0);
  ck_assert_str_eq(err, "gather: index -1 at position 0 of the indices "
                        "(row-major) is out of range for axis 0 of extent 3 "
                        "(expected 0 to 2)");
  err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){1}, 1,
                    NULL, 0);
  ck_assert_str_eq(err, "gather: expected output shape [3, 2] "
                        "(data.shape[:1] + indices.shape + data.shape[2:]), "
                        "found [2, 4]");
  err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){2}, 1,
                    NULL, 0);
  ck_assert_str_eq(err, "gather: expected an axis in [0, 2) for data of rank "
                        "2, got 2");
  err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 1, &y, 1, (int64_t[]){0}, 1,
                    NULL, 0);
  ck_assert_str_eq(err, "gather: expected 2 inputs and 1 output, got 1 and 1");
  h_tensor_free(&x);
  h_tensor_free(&ind);
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

START_TEST(scatter_add_accumulates) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor base =
        h_tensor_new(dt, 2, (int64_t[]){3, 2}, (double[]){1, 1, 1, 1, 1, 1});
    h_tensor ind = spaced(dt, 3, 2, 0, (double[]){2, 0, 2});
    h_tensor upd = transposed(dt, 3, 2, (double[]){1, 2, 3, 4, 5, 6});
    h_tensor y = out_tensor(dt, 2, (int64_t[]){3, 2});
    h_tensor in[3] = {base, ind, upd};
    const char *err = harness_run(&hx, TYTO_PLUGIN_OP_SCATTER_ADD, in, 3, &y, 1,
                                  (int64_t[]){0}, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){4, 5, 1, 1, 7, 9}, "scatter_add axis 0");
    h_tensor_free(&y);
    h_tensor_free(&base);
    h_tensor_free(&ind);
    h_tensor_free(&upd);
    /* axis 1: base [2, 3] (column-major), indices [1, 2], updates
     * [2, 1, 2] */
    base = transposed(dt, 2, 3, (double[]){0, 10, 0, 0, 20, 0});
    ind = h_tensor_new(dt, 2, (int64_t[]){1, 2}, (double[]){0, 2});
    upd = h_tensor_new(dt, 3, (int64_t[]){2, 1, 2}, (double[]){1, 2, 3, 4});
    y = out_tensor(dt, 2, (int64_t[]){2, 3});
    in[0] = base;
    in[1] = ind;
    in[2] = upd;
    err = harness_run(&hx, TYTO_PLUGIN_OP_SCATTER_ADD, in, 3, &y, 1,
                      (int64_t[]){1}, 1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){1, 10, 2, 3, 20, 4}, "scatter_add axis 1");
    h_tensor_free(&y);
    h_tensor_free(&base);
    h_tensor_free(&ind);
    h_tensor_free(&upd);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(scatter_add_errors) {
  harness hx;
  harness_open(&hx);
  h_tensor base = h_tensor_new(F32, 2, (int64_t[]){3, 2}, NULL);
  h_tensor ind = h_tensor_new(F32, 1, (int64_t[]){2}, (double[]){0, 7});
  h_tensor upd = h_tensor_new(F32, 2, (int64_t[]){2, 2}, NULL);
  h_tensor bad = h_tensor_new(F32, 2, (int64_t[]){2, 3}, NULL);
  h_tensor y = out_tensor(F32, 2, (int64_t[]){3, 2});
  h_tensor in[3] = {base, ind, upd};
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_SCATTER_ADD, in, 3, &y, 1,
                                (int64_t[]){0}, 1, NULL, 0);
  ck_assert_str_eq(err, "scatter_add: index 7 at position 1 of the indices "
                        "(row-major) is out of range for axis 0 of extent 3 "
                        "(expected 0 to 2)");
  for (int64_t i = 0; i < y.storage; i++)
    ck_assert_double_eq(y.values[i], -55);
  in[2] = bad;
  err = harness_run(&hx, TYTO_PLUGIN_OP_SCATTER_ADD, in, 3, &y, 1,
                    (int64_t[]){0}, 1, NULL, 0);
  ck_assert_str_eq(err, "scatter_add: expected updates shape [2, 2] "
                        "(base.shape[:0] + indices.shape + base.shape[1:]), "
                        "found [2, 3]");
  in[2] = upd;
  err = harness_run(&hx, TYTO_PLUGIN_OP_SCATTER_ADD, in, 3, &bad, 1,
                    (int64_t[]){0}, 1, NULL, 0);
  ck_assert_str_eq(err, "scatter_add: expected output shape [3, 2] (base's), "
                        "found [2, 3]");
  h_tensor_free(&base);
  h_tensor_free(&ind);
  h_tensor_free(&upd);
  h_tensor_free(&bad);
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

START_TEST(one_hot_rows) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    /* 5, -1 and 1.5 are not whole numbers in [0, 4): all-zero rows */
    h_tensor x = transposed(dt, 2, 3, (double[]){2, 0, 5, 1, -1, 1.5});
    h_tensor y = out_tensor(dt, 3, (int64_t[]){2, 3, 4});
    const char *err = harness_run(&hx, TYTO_PLUGIN_OP_ONE_HOT, &x, 1, &y, 1,
                                  NULL, 0, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    expect(&y, (double[]){0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                          0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
           "one_hot");
    h_tensor_free(&y);
    h_tensor_free(&x);
  }
  h_tensor x = h_tensor_new(F32, 1, (int64_t[]){3}, NULL);
  h_tensor y = h_tensor_new(F32, 2, (int64_t[]){2, 4}, NULL);
  const char *err =
      harness_run(&hx, TYTO_PLUGIN_OP_ONE_HOT, &x, 1, &y, 1, NULL, 0, NULL, 0);
  ck_assert_str_eq(err, "one_hot: expected output shape [3] + [depth], found "
                        "[2, 4]");
  h_tensor_free(&x);
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

/* Outputs bigger than one pool chunk (16384 elements), against references
 * computed here: reflect padding and a gather of a transposed input. */
static int64_t reflect(int64_t j, int64_t e) {
  return j < 0 ? -j : j >= e ? 2 * (e - 1) - j : j;
}

START_TEST(large_outputs_span_chunks) {
  harness hx;
  harness_open(&hx);
  const int64_t r = 150, c = 130;
  double *v = malloc((size_t)(r * c) * sizeof *v);
  for (int64_t i = 0; i < r * c; i++)
    v[i] = (double)(i % 1000) - 500;
  for (int f = 0; f < 2; f++) {
    uint32_t dt = dtypes[f];
    h_tensor x = transposed(dt, r, c, v);
    h_tensor y = out_tensor(dt, 2, (int64_t[]){r + 7, c + 11});
    const char *err = harness_run(&hx, TYTO_PLUGIN_OP_PAD, &x, 1, &y, 1,
                                  (int64_t[]){1, 3, 4, 5, 6}, 5, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    double *want = malloc((size_t)((r + 7) * (c + 11)) * sizeof *want);
    for (int64_t i = 0; i < r + 7; i++)
      for (int64_t j = 0; j < c + 11; j++)
        want[i * (c + 11) + j] = v[reflect(i - 3, r) * c + reflect(j - 5, c)];
    expect(&y, want, "large reflect pad");
    free(want);
    h_tensor_free(&y);
    /* gather 300 rows (i * 7 mod 150) along axis 0: 39000 elements */
    h_tensor ind = h_tensor_new(dt, 1, (int64_t[]){300}, NULL);
    for (int64_t i = 0; i < 300; i++)
      ind.values[i] = (double)(i * 7 % r);
    h_tensor in[2] = {x, ind};
    y = out_tensor(dt, 2, (int64_t[]){300, c});
    err = harness_run(&hx, TYTO_PLUGIN_OP_GATHER, in, 2, &y, 1, (int64_t[]){0},
                      1, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    want = malloc((size_t)(300 * c) * sizeof *want);
    for (int64_t i = 0; i < 300; i++)
      for (int64_t j = 0; j < c; j++)
        want[i * c + j] = v[(i * 7 % r) * c + j];
    expect(&y, want, "large gather");
    free(want);
    h_tensor_free(&y);
    h_tensor_free(&ind);
    h_tensor_free(&x);
  }
  free(v);
  harness_close(&hx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_layout");
  TCase *tc = tcase_create("layout");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, pad_constant_and_reflect);
  tcase_add_test(tc, pad_errors);
  tcase_add_test(tc, gather_along_axes);
  tcase_add_test(tc, gather_errors_leave_the_output_alone);
  tcase_add_test(tc, scatter_add_accumulates);
  tcase_add_test(tc, scatter_add_errors);
  tcase_add_test(tc, one_hot_rows);
  tcase_add_test(tc, large_outputs_span_chunks);
  suite_add_tcase(s, tc);
  return test_run(s);
}
