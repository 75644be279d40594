/*
 * The fixture and helpers shared by the CPU plugin's convolution and
 * pooling tests (test_conv.c, test_pool2d.c): one plugin harness per
 * test, inputs that are multiples of 1/64 in [-2, 2] (exact in f32), the
 * switch between oneDNN and the portable path, output extents, and
 * comparisons of rank-4 tensors.
 */
#ifndef TYTO_TESTS_CPU_CONV_FIXTURE_H
#define TYTO_TESTS_CPU_CONV_FIXTURE_H

#include "cpu/harness.h"

#include <math.h>

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  unsetenv("TYTO_CPU_NO_DNNL");
  harness_close(&hx);
}

static void fill(h_tensor *t, unsigned seed) {
  uint32_t s = seed * 2654435761u + 777u;
  for (int64_t i = 0; i < t->storage; i++) {
    s = s * 1664525u + 1013904223u;
    t->values[i] = (double)((int)(s >> 24) - 128) / 64.0;
  }
}

static h_tensor mk(uint32_t dt, uint32_t rank, const int64_t *shape,
                   unsigned seed) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  fill(&t, seed);
  return t;
}

static void set_path(int fallback) {
  if (fallback)
    setenv("TYTO_CPU_NO_DNNL", "1", 1);
  else
    unsetenv("TYTO_CPU_NO_DNNL");
}

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* Compares t (any layout, rank 4) with row-major ref within tol * mag. */
static void compare4(const char *what, const h_tensor *t, const double *ref,
                     const double *mag, double tol) {
  const int64_t *s = t->layout.shape;
  int64_t i = 0;
  for (int64_t a = 0; a < s[0]; a++)
    for (int64_t b = 0; b < s[1]; b++)
      for (int64_t c = 0; c < s[2]; c++)
        for (int64_t d = 0; d < s[3]; d++, i++) {
          double got = t->values[h_at(t, (int64_t[]){a, b, c, d})];
          ck_assert_msg(fabs(got - ref[i]) <= tol * mag[i],
                        "%s[%lld,%lld,%lld,%lld] = %.17g, expected %.17g", what,
                        (long long)a, (long long)b, (long long)c, (long long)d,
                        got, ref[i]);
        }
}

static double inner(const h_tensor *a, const h_tensor *b) {
  const int64_t *s = a->layout.shape;
  double sum = 0;
  for (int64_t i = 0; i < s[0]; i++)
    for (int64_t j = 0; j < s[1]; j++)
      for (int64_t k = 0; k < s[2]; k++)
        for (int64_t l = 0; l < s[3]; l++) {
          const int64_t idx[4] = {i, j, k, l};
          sum += a->values[h_at(a, idx)] * b->values[h_at(b, idx)];
        }
  return sum;
}

#endif
