/* RANDOM_UNIFORM, RANDOM_NORMAL, RANDOM_BERNOULLI on the CPU plugin: the
 * generator against Random123's known answers, the stream's definition
 * (sdk/docs/random.md: seed, counters, lanes, offsets, strided outputs),
 * sample moments, and the errors of invalid calls. */
#include "harness.h"

#include <math.h>

#include "../../plugins/cpu/philox.h"

/* Philox4x32-10 known answers from Random123's kat_vectors. */
START_TEST(philox_known_answers) {
  static const struct {
    uint32_t ctr[4], key[2], want[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
    uint32_t out[4];
    tyto_philox4x32_10(kat[t].ctr, kat[t].key, out);
    for (int j = 0; j < 4; j++)
      ck_assert_msg(out[j] == kat[t].want[j],
                    "vector %zu word %d: %08x != %08x", t, j, out[j],
                    kat[t].want[j]);
  }
  /* The stream's block: key = (low, high) of the seed, counter = (low,
   * high) of n, 0, 0. */
  uint32_t out[4];
  tyto_philox_block(UINT64_C(0xffffffffffffffff), 0, out);
  uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0xffffffff, 0xffffffff}, want[4];
  tyto_philox4x32_10(ctr, key, want);
  ck_assert_mem_eq(out, want, sizeof out);
  tyto_philox_block(UINT64_C(0x299f31d0a4093822), UINT64_C(0x85a308d3243f6a88),
                    out);
  uint32_t ctr2[4] = {0x243f6a88, 0x85a308d3, 0, 0},
           key2[2] = {0xa4093822, 0x299f31d0};
  tyto_philox4x32_10(ctr2, key2, want);
  ck_assert_mem_eq(out, want, sizeof out);
}
END_TEST

/* Draws n values of op with seed/offset into a fresh row-major tensor. */
static h_tensor draw(harness *hx, uint32_t op, uint32_t dtype, int64_t n,
                     int64_t seed, int64_t offset, double a, double b) {
  h_tensor y = h_tensor_new(dtype, 1, (int64_t[]){n}, NULL);
  int64_t ia[2] = {seed, offset};
  double fa[2] = {a, b};
  uint32_t nf = op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2;
  const char *err = harness_run(hx, op, NULL, 0, &y, 1, ia, 2, fa, nf);
  ck_assert_msg(err == NULL, "%s", err);
  return y;
}

/* Seed 0, counter 0 is the first known answer: the op's first four
 * elements are its words through the documented conversions. */
START_TEST(uniform_is_the_documented_stream) {
  harness hx;
  harness_open(&hx);
  const uint32_t r[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  h_tensor y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, F64, 4, 0, 0, 0, 1);
  for (int j = 0; j < 4; j++)
    ck_assert_double_eq(y.values[j], ((double)r[j] + 0.5) / 4294967296.0);
  h_tensor_free(&y);
  y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, F32, 4, 0, 0, 0, 1);
  for (int j = 0; j < 4; j++)
    ck_assert_double_eq(y.values[j], ((double)(r[j] >> 9) + 0.5) / 8388608.0);
  h_tensor_free(&y);
  /* low + (high - low) * u, one rounding (fma) */
  y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, F64, 4, 0, 0, -2, 6);
  for (int j = 0; j < 4; j++)
    ck_assert_double_eq(y.values[j],
                        fma(8.0, ((double)r[j] + 0.5) / 4294967296.0, -2.0));
  h_tensor_free(&y);
  /* A seed with both halves set and a large offset: element i is word
   * i%4 of block (seed, offset + i/4). */
  int64_t seed = (int64_t)UINT64_C(0x0123456789abcdef), off = INT64_C(1) << 40;
  y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, F64, 11, seed, off, 0, 1);
  for (int64_t i = 0; i < 11; i++) {
    uint32_t w[4];
    tyto_philox_block((uint64_t)seed, (uint64_t)off + (uint64_t)(i / 4), w);
    ck_assert_double_eq(y.values[i], tyto_philox_u01_f64(w[i % 4]));
  }
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

START_TEST(normal_and_bernoulli_follow_the_lanes) {
  harness hx;
  harness_open(&hx);
  const double two_pi = 6.283185307179586;
  h_tensor y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, F64, 10, 42, 7, 1, 3);
  for (int64_t i = 0; i < 10; i++) {
    uint32_t w[4];
    tyto_philox_block(42, 7 + (uint64_t)(i / 4), w);
    int l = (int)(i % 4), p = l & ~1;
    double u1 = ((double)w[p] + 0.5) / 4294967296.0,
           u2 = ((double)w[p + 1] + 0.5) / 4294967296.0;
    double z =
        sqrt(-2 * log(u1)) * (l % 2 ? sin(two_pi * u2) : cos(two_pi * u2));
    ck_assert_msg(h_close(y.values[i], 1 + 3 * z, 1e-13, 1e-13),
                  "f64 normal %lld: %.17g, expected %.17g", (long long)i,
                  y.values[i], 1 + 3 * z);
  }
  h_tensor_free(&y);
  y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, F32, 10, 42, 7, 1, 3);
  for (int64_t i = 0; i < 10; i++) {
    uint32_t w[4];
    tyto_philox_block(42, 7 + (uint64_t)(i / 4), w);
    int l = (int)(i % 4), p = l & ~1;
    double u1 = ((double)(w[p] >> 9) + 0.5) / 8388608.0,
           u2 = ((double)(w[p + 1] >> 9) + 0.5) / 8388608.0;
    double z =
        sqrt(-2 * log(u1)) * (l % 2 ? sin(two_pi * u2) : cos(two_pi * u2));
    /* f32 arithmetic: a few ulp of the radius and angle */
    ck_assert_msg(h_close(y.values[i], 1 + 3 * z, 1e-5, 1e-5),
                  "f32 normal %lld: %.9g, expected %.9g", (long long)i,
                  y.values[i], 1 + 3 * z);
  }
  h_tensor_free(&y);
  for (int f = 0; f < 2; f++) {
    y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_BERNOULLI, f ? F64 : F32, 9, 5, 0, 0.4,
             0);
    for (int64_t i = 0; i < 9; i++) {
      uint32_t w[4];
      tyto_philox_block(5, (uint64_t)(i / 4), w);
      double u = ((double)w[i % 4] + 0.5) / 4294967296.0;
      ck_assert_double_eq(y.values[i], u < 0.4 ? 1.0 : 0.0);
    }
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

/* Outputs long enough for the plugin's many-counter path (16 counters at a
 * time, then one at a time; two pool tasks at 5000): every element is the
 * documented conversion of its block, also where the counter's low word
 * wraps into the high one. */
START_TEST(long_draws_follow_the_blocks) {
  harness hx;
  harness_open(&hx);
  const int64_t seed = (int64_t)UINT64_C(0x0123456789abcdef),
                offs[2] = {3, (INT64_C(1) << 32) - 40};
  const int64_t ns[3] = {64, 203, 5000};
  for (int f = 0; f < 2; f++)
    for (int k = 0; k < 2; k++)
      for (int m = 0; m < 3; m++)
        for (int o = 0; o < 2; o++) {
          uint32_t op = k ? TYTO_PLUGIN_OP_RANDOM_BERNOULLI
                          : TYTO_PLUGIN_OP_RANDOM_UNIFORM;
          h_tensor y = draw(&hx, op, f ? F64 : F32, ns[m], seed, offs[o],
                            k ? 0.3 : -1.5, 2.5);
          for (int64_t i = 0; i < ns[m]; i++) {
            uint32_t w[4];
            tyto_philox_block((uint64_t)seed,
                              (uint64_t)offs[o] + (uint64_t)(i / 4), w);
            uint32_t r = w[i % 4];
            double want =
                k   ? (tyto_philox_u01_f64(r) < 0.3 ? 1.0 : 0.0)
                : f ? fma(4.0, tyto_philox_u01_f64(r), -1.5)
                    : (double)fmaf(4.0f, tyto_philox_u01_f32(r), -1.5f);
            ck_assert_msg(y.values[i] == want,
                          "%s %s n %lld offset %lld: element %lld is %.17g, "
                          "expected %.17g",
                          f ? "f64" : "f32", k ? "bernoulli" : "uniform",
                          (long long)ns[m], (long long)offs[o], (long long)i,
                          y.values[i], want);
          }
          h_tensor_free(&y);
        }
  harness_close(&hx);
}
END_TEST

START_TEST(seeds_and_offsets) {
  harness hx;
  harness_open(&hx);
  for (uint32_t op = TYTO_PLUGIN_OP_RANDOM_UNIFORM;
       op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI; op++) {
    double p0 = op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 0.5 : 0;
    h_tensor a = draw(&hx, op, F32, 20, 1234, 0, p0, 1);
    h_tensor b = draw(&hx, op, F32, 20, 1234, 0, p0, 1);
    h_tensor c = draw(&hx, op, F32, 20, 1235, 0, p0, 1);
    /* 10 elements at offset 2 (counters 2..4) are elements 8..17 of a
     * draw at offset 0: the offset counts counters, 4 elements each. */
    h_tensor d = draw(&hx, op, F32, 10, 1234, 2, p0, 1);
    int differ = 0;
    for (int i = 0; i < 20; i++) {
      ck_assert_double_eq(a.values[i], b.values[i]);
      differ += a.values[i] != c.values[i];
    }
    ck_assert_int_ge(differ, (op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 3 : 19));
    for (int i = 0; i < 10; i++)
      ck_assert_double_eq(d.values[i], a.values[8 + i]);
    h_tensor_free(&a);
    h_tensor_free(&b);
    h_tensor_free(&c);
    h_tensor_free(&d);
  }
  harness_close(&hx);
}
END_TEST

/* A transposed output with an offset receives the row-major stream at its
 * strided positions, and nothing else is written. */
START_TEST(strided_output) {
  harness hx;
  harness_open(&hx);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = f ? F64 : F32;
    /* 3 x 5, and 70 x 90 (6300 elements: more than one pool chunk of
     * 4096) */
    for (int big = 0; big < 2; big++) {
      const int64_t R = big ? 70 : 3, C = big ? 90 : 5, S = R * C + 5;
      h_tensor ref =
          draw(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, dt, R * C, 9, 3, 0, 1);
      h_tensor y = h_tensor_new(dt, 1, (int64_t[]){S}, NULL);
      for (int64_t i = 0; i < S; i++)
        y.values[i] = -99;
      y.layout.rank = 2;
      y.layout.shape[0] = R;
      y.layout.shape[1] = C;
      y.layout.strides[0] = 1;
      y.layout.strides[1] = R;
      y.layout.offset = 2;
      const char *err =
          harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, NULL, 0, &y, 1,
                      (int64_t[]){9, 3}, 2, (double[]){0, 1}, 2);
      ck_assert_msg(err == NULL, "%s", err);
      char *written = calloc((size_t)S, 1);
      for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
          int64_t at = h_at(&y, (int64_t[]){i, j});
          written[at] = 1;
          ck_assert_double_eq(y.values[at], ref.values[i * C + j]);
        }
      for (int64_t i = 0; i < S; i++)
        if (!written[i])
          ck_assert_double_eq(y.values[i], -99);
      free(written);
      h_tensor_free(&ref);
      h_tensor_free(&y);
    }
  }
  harness_close(&hx);
}
END_TEST

static void moments(const h_tensor *y, int64_t n, double *mean, double *var,
                    double *lo, double *hi) {
  double s = 0, s2 = 0;
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    s += y->values[i];
    *lo = fmin(*lo, y->values[i]);
    *hi = fmax(*hi, y->values[i]);
  }
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++)
    s2 += (y->values[i] - *mean) * (y->values[i] - *mean);
  *var = s2 / (double)(n - 1);
}

/* 1e6 draws (1e5 under valgrind, with bounds scaled by sqrt(10)); bounds
 * are 5 standard errors of each statistic. */
START_TEST(sample_moments) {
  harness hx;
  harness_open(&hx);
  const int64_t n = getenv("TYTO_TEST_UNDER_VALGRIND") ? 100000 : 1000000;
  const double k = sqrt(1e6 / (double)n);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = f ? F64 : F32;
    double mean, var, lo, hi;
    /* uniform on (2, 5): mean 3.5 (se 8.7e-4), variance 0.75 (se 6.7e-4) */
    h_tensor y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, dt, n, 77, 0, 2, 5);
    moments(&y, n, &mean, &var, &lo, &hi);
    ck_assert_msg(fabs(mean - 3.5) < 0.0044 * k, "uniform mean %g", mean);
    ck_assert_msg(fabs(var - 0.75) < 0.0034 * k, "uniform variance %g", var);
    ck_assert_msg(lo > 2 && hi < 5, "uniform range [%g, %g]", lo, hi);
    h_tensor_free(&y);
    /* normal(1, 2): mean 1 (se 2e-3), variance 4 (se 5.7e-3) */
    y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, dt, n, 78, 0, 1, 2);
    moments(&y, n, &mean, &var, &lo, &hi);
    ck_assert_msg(fabs(mean - 1) < 0.01 * k, "normal mean %g", mean);
    ck_assert_msg(fabs(var - 4) < 0.029 * k, "normal variance %g", var);
    double s3 = 0, s4 = 0;
    for (int64_t i = 0; i < n; i++) {
      double z = (y.values[i] - mean) / sqrt(var);
      s3 += z * z * z;
      s4 += z * z * z * z;
    }
    /* skewness 0 (se 2.4e-3), kurtosis 3 (se 4.9e-3) */
    ck_assert_msg(fabs(s3 / (double)n) < 0.013 * k, "normal skewness %g",
                  s3 / (double)n);
    ck_assert_msg(fabs(s4 / (double)n - 3) < 0.025 * k, "normal kurtosis %g",
                  s4 / (double)n);
    h_tensor_free(&y);
    /* bernoulli(0.3): mean 0.3 (se 4.6e-4), values 0 or 1 */
    y = draw(&hx, TYTO_PLUGIN_OP_RANDOM_BERNOULLI, dt, n, 79, 0, 0.3, 0);
    moments(&y, n, &mean, &var, &lo, &hi);
    ck_assert_msg(fabs(mean - 0.3) < 0.0023 * k, "bernoulli mean %g", mean);
    for (int64_t i = 0; i < n; i++)
      ck_assert(y.values[i] == 0 || y.values[i] == 1);
    h_tensor_free(&y);
  }
  harness_close(&hx);
}
END_TEST

START_TEST(invalid_calls) {
  harness hx;
  harness_open(&hx);
  h_tensor y = h_tensor_new(F32, 1, (int64_t[]){4}, NULL);
  h_tensor x = h_tensor_new(F32, 1, (int64_t[]){4}, NULL);
  int64_t ia[2] = {1, 0};
  const char *err;
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_BERNOULLI, NULL, 0, &y, 1, ia, 2,
                    (double[]){1.5}, 1);
  ck_assert_str_eq(err, "random_bernoulli: expected a probability p in [0, "
                        "1], got 1.5");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, NULL, 0, &y, 1, ia, 2,
                    (double[]){3, 1}, 2);
  ck_assert_str_eq(err, "random_uniform: expected finite low <= high in the "
                        "output's dtype f32, got low 3, high 1");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, NULL, 0, &y, 1, ia, 2,
                    (double[]){0, 1e300}, 2);
  ck_assert_str_eq(err, "random_uniform: expected finite low <= high in the "
                        "output's dtype f32, got low 0, high 1e+300");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, NULL, 0, &y, 1, ia, 2,
                    (double[]){0, -1}, 2);
  ck_assert_str_eq(err, "random_normal: expected a finite mean and a finite "
                        "stddev >= 0 in the output's dtype f32, got mean 0, "
                        "stddev -1");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, NULL, 0, &y, 1, ia, 1,
                    (double[]){0, 1}, 2);
  ck_assert_str_eq(err, "random_normal: expected 2 integer attributes (seed, "
                        "offset), got 1");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_NORMAL, NULL, 0, &y, 1, ia, 2,
                    (double[]){0}, 1);
  ck_assert_str_eq(err, "random_normal: expected 2 real attributes (mean, "
                        "stddev), got 1");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, &x, 1, &y, 1, ia, 2,
                    (double[]){0, 1}, 2);
  /* One input is the step (ABI 1.3): it must be rank 0. */
  ck_assert_str_eq(err, "random_uniform: the step input must be a rank-0 f32 "
                        "tensor, got rank 1 f32");
  err = harness_run(&hx, TYTO_PLUGIN_OP_RANDOM_UNIFORM, (h_tensor[]){x, x}, 2,
                    &y, 1, ia, 2, (double[]){0, 1}, 2);
  ck_assert_str_eq(err, "random_uniform: expected 0 inputs (or a step) and 1 "
                        "output, got 2 and 1");
  h_tensor_free(&x);
  h_tensor_free(&y);
  harness_close(&hx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_random");
  TCase *tc = tcase_create("philox");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, philox_known_answers);
  tcase_add_test(tc, uniform_is_the_documented_stream);
  tcase_add_test(tc, normal_and_bernoulli_follow_the_lanes);
  tcase_add_test(tc, long_draws_follow_the_blocks);
  tcase_add_test(tc, seeds_and_offsets);
  tcase_add_test(tc, strided_output);
  tcase_add_test(tc, sample_moments);
  tcase_add_test(tc, invalid_calls);
  suite_add_tcase(s, tc);
  return test_run(s);
}
