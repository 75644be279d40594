/* The in-process collective of data-parallel training
 * (core/src/parallel/collective.c): the weighted sum of three
 * contributions, in f32 and f64, at sizes below and above the threading
 * threshold, split over 1, 2, 3 and 8 threads, against a plain loop that
 * adds in the same order: the same bits every time, through add() and
 * finish() and through the one-pass reduce(). A sum with no
 * contribution is zeros; a reduction larger than the collective's room is
 * an error. */
#include "common.h"

#include <math.h>

#include "parallel/collective.h"

static void fill(double *v, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = ((double)((seed >> 8) % 20001) - 10000.0) / 977.0;
  }
}

/* out (n elements, f64 or f32) against ref rounded to its dtype, bit for
 * bit. One assertion for the lot: Check records every assertion that
 * passes, and one per element made this test a write(2) per element. */
static void check_bits(const void *out, const double *ref, size_t n, int f64,
                       int threads, const char *how) {
  size_t i = 0;
  if (f64)
    while (i < n && ((const double *)out)[i] == ref[i])
      i++;
  else
    while (i < n && ((const float *)out)[i] == (float)ref[i])
      i++;
  ck_assert_msg(i == n, "%s: %s n %zu, %d threads, element %zu differs", how,
                f64 ? "f64" : "f32", n, threads, i);
}

START_TEST(same_bits_any_thread_count) {
  static const size_t sizes[] = {0, 5, ((size_t)1 << 16) + 3,
                                 ((size_t)1 << 18) + 7};
  static const int threads[] = {1, 2, 3, 8};
  const double w[3] = {0.5, -1.25, 3e-3};
  size_t most = sizes[3];
  double *x[3], *ref = malloc(most * sizeof *ref);
  float *xf[3];
  ck_assert_ptr_nonnull(ref);
  for (int k = 0; k < 3; k++) {
    x[k] = malloc(most * sizeof *x[k]);
    xf[k] = malloc(most * sizeof *xf[k]);
    ck_assert(x[k] && xf[k]);
    fill(x[k], most, 7u + (unsigned)k);
    for (size_t i = 0; i < most; i++)
      xf[k][i] = (float)x[k][i];
  }
  /* 64-byte aligned, as device buffers are: reduce()'s stores that
   * bypass the caches run (they need 16 to 32). */
  void *out = NULL, *out2 = NULL;
  ck_assert_int_eq(posix_memalign(&out, 64, most * sizeof(double)), 0);
  ck_assert_int_eq(posix_memalign(&out2, 64, most * sizeof(double)), 0);
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      size_t n = sizes[si];
      for (size_t i = 0; i < n; i++) {
        double a = 0;
        for (int k = 0; k < 3; k++)
          a = k == 0 ? w[k] * (f64 ? x[k][i] : (double)xf[k][i])
                     : a + w[k] * (f64 ? x[k][i] : (double)xf[k][i]);
        ref[i] = a;
      }
      for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        coll *c = coll_in_process_threads(most, threads[ti]);
        ck_assert_ptr_nonnull(c);
        tyto_dtype dt = f64 ? TYTO_F64 : TYTO_F32;
        ck_assert_int_eq(c->ops->begin(c, 0, n), TYTO_OK);
        for (int k = 0; k < 3; k++)
          ck_assert_int_eq(
              c->ops->add(c, f64 ? (const void *)x[k] : xf[k], dt, w[k]),
              TYTO_OK);
        ck_assert_int_eq(c->ops->finish(c, dt, out), TYTO_OK);
        check_bits(out, ref, n, f64, threads[ti], "add");
        /* The one-pass reduce(): the same bits, written over what was
         * there in each of its outputs. */
        const void *xs[3];
        void *const outs[2] = {out, out2};
        for (int k = 0; k < 3; k++)
          xs[k] = f64 ? (const void *)x[k] : xf[k];
        memset(out, 0x7f, n * (f64 ? sizeof(double) : sizeof(float)));
        memset(out2, 0x3f, n * (f64 ? sizeof(double) : sizeof(float)));
        ck_assert_int_eq(c->ops->reduce(c, 0, n, xs, w, 3, dt, outs, 2),
                         TYTO_OK);
        check_bits(out, ref, n, f64, threads[ti], "reduce");
        check_bits(out2, ref, n, f64, threads[ti], "reduce, second output");
        c->ops->free(c);
      }
    }
  free(out);
  free(out2);
  free(ref);
  for (int k = 0; k < 3; k++) {
    free(x[k]);
    free(xf[k]);
  }
}
END_TEST

/* The index of the first of n floats that is not v; n when all are. */
static size_t first_not(const float *x, size_t n, float v) {
  size_t i = 0;
  while (i < n && x[i] == v)
    i++;
  return i;
}

START_TEST(empty_sum_and_room) {
  coll *c = coll_in_process(1 << 17);
  ck_assert_ptr_nonnull(c);
  size_t n = (size_t)1 << 17;
  float *out = malloc(n * sizeof *out);
  ck_assert_ptr_nonnull(out);
  for (size_t i = 0; i < n; i++)
    out[i] = 1;
  ck_assert_int_eq(c->ops->begin(c, 0, n), TYTO_OK);
  ck_assert_int_eq(c->ops->finish(c, TYTO_F32, out), TYTO_OK);
  ck_assert_uint_eq(first_not(out, n, 0.0f), n);
  /* reduce() of no contribution: zeros too; of one: weight times it. */
  for (size_t i = 0; i < n; i++)
    out[i] = 1;
  ck_assert_int_eq(
      c->ops->reduce(c, 0, n, NULL, NULL, 0, TYTO_F32, (void *const[]){out}, 1),
      TYTO_OK);
  ck_assert_uint_eq(first_not(out, n, 0.0f), n);
  float *one = malloc(n * sizeof *one);
  ck_assert_ptr_nonnull(one);
  for (size_t i = 0; i < n; i++)
    one[i] = (float)i - 3.5f;
  const void *xs[1] = {one};
  const double w[1] = {0.25};
  ck_assert_int_eq(
      c->ops->reduce(c, 0, n - 5, xs, w, 1, TYTO_F32, (void *const[]){out}, 1),
      TYTO_OK);
  size_t i = 0;
  while (i < n - 5 && out[i] == (float)(0.25 * ((double)i - 3.5)))
    i++;
  ck_assert_uint_eq(i, n - 5);
  ck_assert_float_eq(out[n - 5], 0.0f); /* past n - 5: untouched */
  free(one);
  free(out);
  ck_assert_int_eq(c->ops->begin(c, 0, (1 << 17) + 1), TYTO_ERR_INTERNAL);
  ck_assert_msg(strstr(tyto_errmsg(), "the collective holds"), "%s",
                tyto_errmsg());
  c->ops->free(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("collective");
  TCase *tc = tcase_create("collective");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, same_bits_any_thread_count);
  tcase_add_test(tc, empty_sum_and_room);
  suite_add_tcase(s, tc);
  return test_run(s);
}
