/* Shared helpers for the AD suites: one CPU context per test program,
 * finite-difference checks through the public tyto_gradcheck(), and
 * evaluation of tensors with bound inputs. */
#ifndef TYTO_TESTS_AD_TEST_H
#define TYTO_TESTS_AD_TEST_H

#include "common.h"

#include <math.h>
#include <stdint.h>

#include <tyto/ad.h>

static tyto_context *ad_ctx;

/* Checked fixture: ad_setup()/ad_teardown() around every test case. */
static inline void ad_setup(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &ad_ctx), TYTO_OK);
}

static inline void ad_teardown(void) {
  tyto_context_free(ad_ctx);
  ad_ctx = NULL;
}

/* The context around a test case. In Check's fork mode each test gets a
 * fresh one (the CPU plugin's worker threads do not survive fork()); with
 * CK_FORK=no, as under valgrind, one context serves the whole case, which
 * keeps hwloc discovery and plugin loading out of every test. */
static inline void ad_fixture(TCase *tc) {
  const char *fork_mode = getenv("CK_FORK");
  if (fork_mode && !strcmp(fork_mode, "no"))
    tcase_add_unchecked_fixture(tc, ad_setup, ad_teardown);
  else
    tcase_add_checked_fixture(tc, ad_setup, ad_teardown);
}

/* Deterministic values in [lo, hi) (splitmix64 from `seed`). */
static inline void ad_fill(double *v, int64_t n, double lo, double hi,
                           uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v[i] = lo + (hi - lo) * ((double)(z >> 11) * 0x1.0p-53);
  }
}

/* Runs tyto_gradcheck on f64 y with respect to xs (values as doubles) and
 * fails the test with the checker's message unless it passes. rtol/atol 0:
 * the checker's defaults. */
#define ad_check(y, n, xs, values, rtol_, atol_)                               \
  do {                                                                         \
    tyto_gradcheck_options o_;                                                 \
    tyto_gradcheck_options_init(&o_);                                          \
    o_.rtol = (rtol_);                                                         \
    o_.atol = (atol_);                                                         \
    tyto_gradcheck_report r_;                                                  \
    tyto_graph *g_ = tyto_tensor_graph(y);                                     \
    ck_assert_msg(tyto_graph_status(g_) == TYTO_OK, "graph: %s",               \
                  tyto_graph_error_message(g_));                               \
    tyto_status st_ = tyto_gradcheck(ad_ctx, (y), (n), (xs),                   \
                                     (const void *const *)(values), &o_, &r_); \
    ck_assert_msg(st_ == TYTO_OK, "gradcheck did not run: %s", tyto_errmsg()); \
    ck_assert_msg(r_.passed, "%s:%d: %s", __FILE__, __LINE__, r_.message);     \
    ck_assert_uint_gt(r_.n_checked, 0);                                        \
  } while (0)

/* Evaluates f64 tensor t with inputs (or parameters) xs bound to values;
 * writes numel(t) doubles into out. */
static inline void ad_eval(tyto_tensor *t, size_t n, tyto_tensor *const *xs,
                           const double *const *values, double *out) {
  tyto_graph *g = tyto_tensor_graph(t);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "graph: %s",
                tyto_graph_error_message(g));
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ad_ctx, g, 1, &t, NULL, &p) == TYTO_OK,
                "compile: %s", tyto_errmsg());
  for (size_t k = 0; k < n; k++) {
    size_t bytes = (size_t)tyto_tensor_numel(xs[k]) * sizeof(double);
    tyto_status st =
        tyto_tensor_kind(xs[k]) == TYTO_KIND_PARAMETER
            ? tyto_program_write_parameter(p, xs[k], values[k], bytes)
            : tyto_program_set_input(p, xs[k], values[k], bytes);
    /* An input the program does not read is fine (a zero derivative). */
    ck_assert_msg(st == TYTO_OK ||
                      strstr(tyto_errmsg(), "is not used by this program"),
                  "binding #%lld: %s", (long long)tyto_tensor_index(xs[k]),
                  tyto_errmsg());
  }
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "run: %s", tyto_errmsg());
  ck_assert_int_eq(
      tyto_program_read_output(p, 0, out,
                               (size_t)tyto_tensor_numel(t) * sizeof(double)),
      TYTO_OK);
  tyto_program_free(p);
}

/* f64 t (one element) with the rank-0 input x bound to v. */
static inline double ad_at1(tyto_tensor *t, tyto_tensor *x, double v) {
  const double *vals[1] = {&v};
  double out;
  ad_eval(t, 1, &x, vals, &out);
  return out;
}

/* f and its derivatives of orders 1 to 3 in the rank-0 x, d[mode][order]:
 * forward (mode 0, tyto_diff), reverse (1, tyto_grad) and alternating
 * (2, reverse first). */
static inline void ad_orders(tyto_tensor *f, tyto_tensor *x,
                             tyto_tensor *d[3][4]) {
  d[0][0] = d[1][0] = d[2][0] = f;
  for (int k = 1; k <= 3; k++) {
    d[0][k] = tyto_diff(d[0][k - 1], x);
    d[1][k] = tyto_grad(d[1][k - 1], x);
    d[2][k] = k % 2 ? tyto_grad(d[2][k - 1], x) : tyto_diff(d[2][k - 1], x);
  }
}

/* Every d[mode][order] of ad_orders at x = v equals want[order] within
 * 1e-12 relative (absolute below 1). */
static inline void ad_expect_orders(tyto_tensor *d[3][4], tyto_tensor *x,
                                    double v, const double want[4]) {
  for (int k = 0; k <= 3; k++)
    for (int m = 0; m < 3; m++)
      ck_assert_msg(fabs(ad_at1(d[m][k], x, v) - want[k]) <=
                        1e-12 * fmax(1, fabs(want[k])),
                    "order %d, mode %d, at %g: expected %.17g", k, m, v,
                    want[k]);
}

/* An f64 input of the given shape. */
static inline tyto_tensor *ad_in(tyto_graph *g, int rank, const int64_t *shape,
                                 const char *name) {
  return tyto_input(g, TYTO_F64, rank, shape, name);
}

/* numel(t) values in [-1, 1) (ad_fill from seed), owned by the caller. */
static inline double *ad_vals(const tyto_tensor *t, uint64_t seed) {
  int64_t n = tyto_tensor_numel(t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  ad_fill(v, n, -1.0, 1.0, seed);
  return v;
}

/* got equals want within 1e-12 relative (absolute below 1). */
static inline void ad_expect(const double *got, const double *want, int n,
                             const char *what) {
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= 1e-12 * fmax(1, fabs(want[i])),
                  "%s: element %d is %.17g, expected %.17g", what, i, got[i],
                  want[i]);
}

/* sum(c * z^2) for constant random c: a scalar whose gradient is linear in
 * z, so differentiating that gradient again checks the rules of the
 * adjoint ops it is built from. */
static inline tyto_tensor *ad_weighted_square(tyto_tensor *z, uint64_t seed) {
  double *c = ad_vals(z, seed);
  tyto_tensor *k = tyto_constant(tyto_tensor_graph(z), TYTO_F64,
                                 tyto_tensor_rank(z), tyto_tensor_shape(z), c);
  free(c);
  return tyto_sum(tyto_mul(k, tyto_mul(z, z)), 0, NULL, 0);
}

/* Shorthand for shapes: S(2, 3) is a compound literal {2, 3}. */
#define AD_S(...) ((const int64_t[]){__VA_ARGS__})

#endif
