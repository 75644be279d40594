/* Shared helpers for the nn suites: one CPU context per test, the inputs
 * of bench/nn_reference.py (nn_fill), running a layer with bound values
 * against reference constants, and finite-difference checks. */
#ifndef TYTO_TESTS_NN_TEST_H
#define TYTO_TESTS_NN_TEST_H

#include "common.h"

#include <math.h>
#include <stdint.h>

#include <tyto/ad.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})

static tyto_context *nn_ctx;

static inline void nn_setup(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &nn_ctx), TYTO_OK);
}

static inline void nn_teardown(void) {
  tyto_context_free(nn_ctx);
  nn_ctx = NULL;
}

/* A fresh context per test in Check's fork mode; one per case with
 * CK_FORK=no (valgrind), as tests/ad/ad_test.h does. */
static inline void nn_fixture(TCase *tc) {
  const char *fork_mode = getenv("CK_FORK");
  if (fork_mode && !strcmp(fork_mode, "no"))
    tcase_add_unchecked_fixture(tc, nn_setup, nn_teardown);
  else
    tcase_add_checked_fixture(tc, nn_setup, nn_teardown);
}

/* bench/nn_reference.py's fill(): ((i+1) 7919 + k 104729) mod 1009,
 * divided by 504.5, minus 1, times scale, plus offset -- the same IEEE
 * operations, so both sides see the same bits. Distinct for n <= 1009. */
static inline void nn_fill(double *v, int64_t n, int k, double scale,
                           double offset) {
  for (int64_t i = 0; i < n; i++) {
    int64_t m = ((i + 1) * 7919 + (int64_t)k * 104729) % 1009;
    v[i] = (double)m / 504.5 - 1.0;
    if (scale != 1.0)
      v[i] *= scale;
    if (offset != 0.0)
      v[i] += offset;
  }
}

/* A network of dtype in graph g, seed 0, TRAIN mode. */
static inline tyto_nn *nn_make(tyto_graph *g, tyto_dtype dtype, uint64_t seed) {
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  o.dtype = dtype;
  o.seed = seed;
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_OK);
  return nn;
}

/* The parameter or state tensor of nn named `name`. */
static inline tyto_tensor *nn_named(const tyto_nn *nn, const char *name) {
  for (size_t i = 0; i < tyto_nn_parameter_count(nn); i++)
    if (!strcmp(tyto_tensor_name(tyto_nn_parameter(nn, i)), name))
      return tyto_nn_parameter(nn, i);
  for (size_t i = 0; i < tyto_nn_state_count(nn); i++)
    if (!strcmp(tyto_tensor_name(tyto_nn_state(nn, i)), name))
      return tyto_nn_state(nn, i);
  ck_abort_msg("no parameter or state '%s'", name);
  return NULL;
}

/* Compiles outs (with nn's state updates when nn is not NULL). */
static inline tyto_program *nn_compile(tyto_graph *g, size_t n,
                                       tyto_tensor *const *outs,
                                       const tyto_nn *nn) {
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "graph: %s",
                tyto_graph_error_message(g));
  tyto_program_options o;
  tyto_program_options_init(&o);
  if (nn) {
    o.n_updates = tyto_nn_update_count(nn);
    o.update_params = tyto_nn_update_params(nn);
    o.update_values = tyto_nn_update_values(nn);
  }
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(nn_ctx, g, n, outs, &o, &p) == TYTO_OK,
                "compile: %s", tyto_errmsg());
  return p;
}

/* Binds t (an input or a parameter) to bytes of v. */
static inline void nn_bind_raw(tyto_program *p, tyto_tensor *t, const void *v,
                               size_t bytes) {
  tyto_status st = tyto_tensor_kind(t) == TYTO_KIND_PARAMETER
                       ? tyto_program_write_parameter(p, t, v, bytes)
                       : tyto_program_set_input(p, t, v, bytes);
  ck_assert_msg(st == TYTO_OK, "binding '%s': %s", tyto_tensor_name(t),
                tyto_errmsg());
}

/* A value to bind: nn_fill(k, scale, offset), or `v` when not NULL. */
typedef struct nn_bind {
  tyto_tensor *t;
  int k;
  double scale, offset;
  const double *v;
} nn_bind;

/* The values of b, malloc'd. */
static inline double *nn_bind_values(const nn_bind *b) {
  int64_t n = tyto_tensor_numel(b->t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  if (b->v)
    memcpy(v, b->v, (size_t)n * sizeof *v);
  else
    nn_fill(v, n, b->k, b->scale, b->offset);
  return v;
}

/* Binds f64 values to every b. */
static inline void nn_bind_all(tyto_program *p, size_t n, const nn_bind *b) {
  for (size_t i = 0; i < n; i++) {
    double *v = nn_bind_values(&b[i]);
    nn_bind_raw(p, b[i].t, v,
                (size_t)tyto_tensor_numel(b[i].t) * sizeof(double));
    free(v);
  }
}

/* got equals want within rtol relative (absolute below 1); prints the
 * worst error into the test's log. */
static inline void nn_expect(const double *got, const double *want, int64_t n,
                             double rtol, const char *what) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double err = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
    ck_assert_msg(err <= rtol,
                  "%s: element %lld is %.17g, expected %.17g (error %.3g > "
                  "%.3g)",
                  what, (long long)i, got[i], want[i], err, rtol);
    if (err > worst)
      worst = err;
  }
  printf("%-28s %5lld values, worst relative error %.3g\n", what, (long long)n,
         worst);
}

/* Asserts t's shape. */
static inline void nn_expect_shape(const tyto_tensor *t, int rank,
                                   const int64_t *shape, const char *what) {
  ck_assert_msg(tyto_tensor_rank(t) == rank, "%s: rank %d, expected %d", what,
                tyto_tensor_rank(t), rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(tyto_tensor_shape(t)[i] == shape[i],
                  "%s: extent %d is %lld, expected %lld", what, i,
                  (long long)tyto_tensor_shape(t)[i], (long long)shape[i]);
}

/* Runs f64 y once with the n bindings and compares it with ref. */
static inline void nn_check_ref(tyto_tensor *y, size_t n, const nn_bind *b,
                                const double *ref, int64_t n_ref, double rtol,
                                const char *what) {
  tyto_graph *g = tyto_tensor_graph(y);
  ck_assert_int_eq(tyto_tensor_numel(y), n_ref);
  tyto_program *p = nn_compile(g, 1, &y, NULL);
  nn_bind_all(p, n, b);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "run: %s", tyto_errmsg());
  double *out = malloc((size_t)n_ref * sizeof *out);
  ck_assert_ptr_nonnull(out);
  ck_assert_int_eq(
      tyto_program_read_output(p, 0, out, (size_t)n_ref * sizeof *out),
      TYTO_OK);
  nn_expect(out, ref, n_ref, rtol, what);
  free(out);
  tyto_program_free(p);
}

#define NN_REF(name) REF_##name, (int64_t)(sizeof REF_##name / sizeof(double))

/* Checks the derivatives of f64 y with respect to the n bound tensors
 * (tyto_gradcheck's default f64 tolerances, both modes); every input and
 * parameter y reads must be among them or in fixed/fixed_v. */
static inline void nn_gradcheck_fixed(tyto_tensor *y, size_t n,
                                      const nn_bind *b, size_t n_fixed,
                                      tyto_tensor *const *fixed,
                                      const void *const *fixed_v,
                                      const char *what) {
  tyto_graph *g = tyto_tensor_graph(y);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "graph: %s",
                tyto_graph_error_message(g));
  tyto_tensor *xs[16];
  double *vals[16];
  ck_assert_uint_le(n, 16);
  for (size_t i = 0; i < n; i++) {
    xs[i] = b[i].t;
    vals[i] = nn_bind_values(&b[i]);
  }
  tyto_gradcheck_options o;
  tyto_gradcheck_options_init(&o);
  o.seed = 7;
  o.n_fixed = n_fixed;
  o.fixed = fixed;
  o.fixed_values = fixed_v;
  tyto_gradcheck_report r;
  tyto_status st =
      tyto_gradcheck(nn_ctx, y, n, xs, (const void *const *)vals, &o, &r);
  ck_assert_msg(st == TYTO_OK, "%s: gradcheck did not run: %s", what,
                tyto_errmsg());
  ck_assert_msg(r.passed, "%s: %s", what, r.message);
  ck_assert_uint_gt(r.n_checked, 0);
  printf("%-28s gradcheck %zu elements, worst ratio %.3g\n", what, r.n_checked,
         r.ratio);
  for (size_t i = 0; i < n; i++)
    free(vals[i]);
}

static inline void nn_gradcheck(tyto_tensor *y, size_t n, const nn_bind *b,
                                const char *what) {
  nn_gradcheck_fixed(y, n, b, 0, NULL, NULL, what);
}

/* The graph's status must be an error whose message contains `want`. */
static inline void nn_expect_error(tyto_graph *g, const char *want) {
  ck_assert_int_eq(tyto_graph_status(g), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_graph_error_message(g), want);
}

#endif
