/*
 * MATMUL on the CPU plugin against a float64 reference computed here by
 * naive loops: every transpose flag, batch axes broadcast (missing, extent
 * 1, stride 0), layouts that need packing (steps in both axes, negative
 * strides) or go to cblas as transposes (column-major by strides), strided
 * and column-major outputs, k = 0, m = 0, vectors, and the error messages.
 * The "big" case runs f32 products of 2^21 multiply-adds and more, which
 * the plugin gives to oneDNN's brgemm kernels where it has them, in the
 * layouts oneDNN takes and those it does not, and checks from the debug
 * log which library each went to; then the same with TYTO_CPU_NO_DNNL=1.
 *
 * Inputs are multiples of 1/64 in [-2, 2], exact in f32, so the reference
 * sees the very values the device multiplies. Tolerance: |got - ref| <=
 * tol * sqrt(k) * sum_j |a_ij b_jk|, tol = 1e-5 for f32 and 1e-13 for f64
 * (k = 0 must give exact zeros).
 */
#include "cpu/harness.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  harness_close(&hx);
}

static void fill(h_tensor *t, unsigned seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t->storage; i++) {
    s = s * 1664525u + 1013904223u;
    t->values[i] = (double)((int)(s >> 24) - 128) / 64.0; /* [-2, 2) */
  }
}

static h_tensor mk(uint32_t dt, uint32_t rank, const int64_t *shape,
                   unsigned seed) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  fill(&t, seed);
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
 * broadcast right-aligned. */
static void check(const h_tensor *a, int ta, const h_tensor *b, int tb,
                  const h_tensor *c) {
  const tyto_plugin_layout *la = &a->layout, *lb = &b->layout, *lc = &c->layout;
  uint32_t rc = lc->rank, ra = la->rank, rb = lb->rank;
  int64_t k = ta ? la->shape[ra - 2] : la->shape[ra - 1];
  double tol = (lc->dtype == F32 ? 1e-5 : 1e-13) * sqrt((double)(k ? k : 1));
  int64_t total = 1;
  for (uint32_t i = 0; i < rc; i++)
    total *= lc->shape[i];
  for (int64_t lin = 0; lin < total; lin++) {
    int64_t idx[8], ia[8], ib[8], rest = lin;
    for (uint32_t i = rc; i-- > 0;) {
      idx[i] = rest % lc->shape[i];
      rest /= lc->shape[i];
    }
    for (uint32_t i = 0; i + 2 < ra; i++) {
      uint32_t ci = i + rc - ra;
      ia[i] = la->shape[i] == 1 ? 0 : idx[ci];
    }
    for (uint32_t i = 0; i + 2 < rb; i++) {
      uint32_t ci = i + rc - rb;
      ib[i] = lb->shape[i] == 1 ? 0 : idx[ci];
    }
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
    double got = c->values[h_at(c, idx)];
    ck_assert_msg(fabs(got - s) <= tol * mag,
                  "element %lld: got %.17g, expected %.17g (tol %.3g)",
                  (long long)lin, got, s, tol * mag);
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

START_TEST(transpose_flags) {
  uint32_t dt = _i < 4 ? F32 : F64;
  int ta = _i & 1, tb = (_i >> 1) & 1;
  plain(dt, 5, 7, 3, ta, tb);
  plain(dt, 33, 65, 17, ta, tb);
  plain(dt, 130, 97, 70, ta, tb); /* big enough to split over the pool */
  plain(dt, 301, 70, 20, ta, tb); /* split by rows, a partial block */
  plain(dt, 20, 70, 301, ta, tb); /* split by columns */
}
END_TEST

/* A GEMM split over the pool into a column-major output (C^T = B^T A^T
 * per block). */
START_TEST(split_into_a_column_major_output) {
  uint32_t dt = _i ? F64 : F32;
  int64_t m = 97, k = 60, n = 250;
  h_tensor a = mk(dt, 2, (int64_t[]){m, k}, 3),
           b = mk(dt, 2, (int64_t[]){k, n}, 4),
           c = h_tensor_new(dt, 2, (int64_t[]){n, m}, NULL);
  view(&c, 2, (int64_t[]){m, n}, (int64_t[]){1, m}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(vectors) {
  uint32_t dt = _i ? F64 : F32;
  plain(dt, 1, 7, 1, 0, 0); /* dot */
  plain(dt, 1, 7, 5, 0, 0); /* row vector x matrix */
  plain(dt, 6, 7, 1, 0, 0); /* matrix x column vector */
  plain(dt, 1, 7, 5, 1, 1); /* the same, transposed storage */
  plain(dt, 6, 7, 1, 1, 1);
  plain(dt, 6, 1, 4, 0, 0); /* outer product */
}
END_TEST

START_TEST(k_zero_gives_zeros) {
  uint32_t dt = _i ? F64 : F32;
  h_tensor a = mk(dt, 2, (int64_t[]){3, 0}, 1),
           b = mk(dt, 2, (int64_t[]){0, 4}, 2),
           c = mk(dt, 2, (int64_t[]){3, 4}, 3); /* non-zero before */
  run_ok(&a, 0, &b, 0, &c);
  for (int i = 0; i < 12; i++)
    ck_assert(c.values[i] == 0.0);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* Batched, with transposes. */
  a = mk(dt, 3, (int64_t[]){2, 0, 3}, 1);
  b = mk(dt, 2, (int64_t[]){4, 0}, 2);
  c = mk(dt, 3, (int64_t[]){2, 3, 4}, 3);
  run_ok(&a, 1, &b, 1, &c);
  for (int i = 0; i < 24; i++)
    ck_assert(c.values[i] == 0.0);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(empty_output) {
  h_tensor a = mk(F32, 2, (int64_t[]){0, 3}, 1),
           b = mk(F32, 2, (int64_t[]){3, 4}, 2),
           c = h_tensor_new(F32, 2, (int64_t[]){0, 4}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&c);
  a = mk(F32, 3, (int64_t[]){0, 2, 3}, 1);
  c = h_tensor_new(F32, 3, (int64_t[]){0, 2, 4}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(batch_broadcast) {
  uint32_t dt = _i ? F64 : F32;
  /* [2,1,4,5] x [3,5,6] -> [2,3,4,6]: both broadcast. */
  h_tensor a = mk(dt, 4, (int64_t[]){2, 1, 4, 5}, 1),
           b = mk(dt, 3, (int64_t[]){3, 5, 6}, 2),
           c = h_tensor_new(dt, 4, (int64_t[]){2, 3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* [3,4,5] x [5,6]: b shared by every batch (folds into one GEMM). */
  a = mk(dt, 3, (int64_t[]){3, 4, 5}, 1);
  b = mk(dt, 2, (int64_t[]){5, 6}, 2);
  c = h_tensor_new(dt, 3, (int64_t[]){3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&b);
  /* The same with b transposed by its flag. */
  b = mk(dt, 2, (int64_t[]){6, 5}, 2);
  run_ok(&a, 0, &b, 1, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* [4,5] x [3,5,6]: a shared. */
  a = mk(dt, 2, (int64_t[]){4, 5}, 1);
  b = mk(dt, 3, (int64_t[]){3, 5, 6}, 2);
  c = h_tensor_new(dt, 3, (int64_t[]){3, 4, 6}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  /* a with a stride-0 batch axis of extent 3 (a broadcast view). */
  a = mk(dt, 2, (int64_t[]){4, 5}, 1);
  view(&a, 3, (int64_t[]){3, 4, 5}, (int64_t[]){0, 5, 1}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* Many small GEMMs (spread over the pool), b packed once. */
  a = mk(dt, 3, (int64_t[]){40, 3, 4}, 1);
  b = mk(dt, 2, (int64_t[]){8, 10}, 2);
  view(&b, 2, (int64_t[]){4, 5}, (int64_t[]){20, 2}, 1); /* steps: packed */
  c = h_tensor_new(dt, 3, (int64_t[]){40, 3, 5}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}
END_TEST

START_TEST(strided_inputs) {
  uint32_t dt = _i ? F64 : F32;
  /* a [4,5] with steps in both axes (packed); b [5,6] column-major by
   * strides (straight to cblas as a transpose). */
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
  /* Negative strides (a flipped): packed. */
  a = mk(dt, 2, (int64_t[]){4, 5}, 1);
  view(&a, 2, (int64_t[]){4, 5}, (int64_t[]){-5, -1}, 19);
  view(&b, 2, (int64_t[]){5, 6}, (int64_t[]){6, 1}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  /* Rows with padding (ld > columns): direct. */
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
  uint32_t dt = _i ? F64 : F32;
  h_tensor a = mk(dt, 2, (int64_t[]){4, 5}, 1),
           b = mk(dt, 2, (int64_t[]){5, 6}, 2),
           c = mk(dt, 2, (int64_t[]){8, 14}, 3);
  h_tensor orig = mk(dt, 2, (int64_t[]){8, 14}, 3);
  /* Steps in both axes: computed in the workspace and scattered; the
   * elements between must keep their values. */
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){28, 2}, 1);
  run_ok(&a, 0, &b, 0, &c);
  for (int64_t i = 0; i < c.storage; i++) {
    int64_t r = i / 14, col = i % 14;
    int in_view = r % 2 == 0 && col % 2 == 1 && col <= 11;
    if (!in_view)
      ck_assert(c.values[i] == orig.values[i]);
  }
  /* Column-major output: computed as C^T = B^T A^T. */
  view(&c, 2, (int64_t[]){4, 6}, (int64_t[]){1, 4}, 0);
  run_ok(&a, 0, &b, 0, &c);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  h_tensor_free(&orig);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Big f32 products: oneDNN's brgemm kernels where cpu:0 says it has them  */
/* ------------------------------------------------------------------------ */

/* The debug log of the context these tests open: each op the plugin
 * hands to oneDNN logs "matmul f32 ...: oneDNN <impl>". */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logged[1 << 14];
static size_t n_logged;

static void keep_log(void *user, tyto_log_level level, const char *origin,
                     const char *message) {
  (void)user;
  (void)level;
  (void)origin;
  pthread_mutex_lock(&log_mu);
  int w =
      snprintf(logged + n_logged, sizeof logged - n_logged, "%s\n", message);
  if (w > 0 && (size_t)w < sizeof logged - n_logged)
    n_logged += (size_t)w;
  pthread_mutex_unlock(&log_mu);
}

static void forget_log(void) {
  pthread_mutex_lock(&log_mu);
  n_logged = 0;
  logged[0] = '\0';
  pthread_mutex_unlock(&log_mu);
}

/* _i 0: as the plugin chooses; 1: with TYTO_CPU_NO_DNNL=1 (OpenBLAS). */
static void open_logging(int no_dnnl) {
  if (no_dnnl)
    setenv("TYTO_CPU_NO_DNNL", "1", 1);
  else
    unsetenv("TYTO_CPU_NO_DNNL");
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  o.log_level = TYTO_LOG_DEBUG;
  o.log_fn = keep_log;
  ck_assert_msg(tyto_context_new(&o, &hx.ctx) == TYTO_OK, "%s", tyto_errmsg());
  hx.dev = tyto_context_device(hx.ctx, 0);
  forget_log();
}

/* Runs and checks c = op(a) op(b), then that it went to oneDNN exactly
 * when `dnnl` (the log of its prepare says so). */
static void run_path(h_tensor *a, int ta, h_tensor *b, int tb, h_tensor *c,
                     int dnnl, const char *what) {
  forget_log();
  run_ok(a, ta, b, tb, c);
  pthread_mutex_lock(&log_mu);
  int took = strstr(logged, "matmul f32") && strstr(logged, ": oneDNN brg");
  pthread_mutex_unlock(&log_mu);
  ck_assert_msg(took == dnnl, "%s: %s oneDNN; the log:\n%s", what,
                took ? "went to" : "did not go to", logged);
}

START_TEST(big_products_on_onednn) {
  open_logging(_i);
  const char *v = hx.dev->info.driver_version;
  /* Where the plugin takes the path at all (what tyto-info shows). */
  int brg = strstr(v, "f32 matmul on its brg") != NULL;
  ck_assert_msg(brg || strstr(v, "f32 matmul on OpenBLAS"),
                "driver_version \"%s\"", v);
  if (_i)
    ck_assert_msg(!brg, "TYTO_CPU_NO_DNNL=1, yet \"%s\"", v);
  /* Under valgrind, which hides AVX-512 from oneDNN (no brgemm, so no
   * oneDNN path to check) and runs these sizes fifty times slower, one
   * product of each size class. */
  int quick = getenv("TYTO_TEST_UNDER_VALGRIND") != NULL && !brg;
  /* 130 x 128 x 129 multiply-adds: over 2^21, in all four flags. */
  for (int f = 0; f < (quick ? 1 : 4); f++) {
    int ta = f & 1, tb = f >> 1;
    int64_t m = 130, k = 128, n = 129;
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    h_tensor a = mk(F32, 2, sa, 1), b = mk(F32, 2, sb, 2),
             c = h_tensor_new(F32, 2, (int64_t[]){m, n}, NULL);
    run_path(&a, ta, &b, tb, &c, brg, "plain");
    h_tensor_free(&a);
    h_tensor_free(&b);
    h_tensor_free(&c);
  }
  /* Just under 2^21 multiply-adds, and 31 rows: OpenBLAS. */
  h_tensor a = mk(F32, 2, (int64_t[]){127, 128}, 3),
           b = mk(F32, 2, (int64_t[]){128, 128}, 4),
           c = h_tensor_new(F32, 2, (int64_t[]){127, 128}, NULL);
  run_path(&a, 0, &b, 0, &c, 0, "127 x 128 x 128");
  h_tensor_free(&a);
  h_tensor_free(&c);
  a = mk(F32, 2, (int64_t[]){31, 4096}, 3);
  h_tensor_free(&b);
  b = mk(F32, 2, (int64_t[]){4096, 64}, 4);
  c = h_tensor_new(F32, 2, (int64_t[]){31, 64}, NULL);
  run_path(&a, 0, &b, 0, &c, 0, "31 rows");
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  if (quick) {
    harness_close(&hx);
    unsetenv("TYTO_CPU_NO_DNNL");
    return;
  }
  /* A batch of three: [3,64,176] x [3,176,200]. */
  a = mk(F32, 3, (int64_t[]){3, 64, 176}, 5);
  b = mk(F32, 3, (int64_t[]){3, 176, 200}, 6);
  c = h_tensor_new(F32, 3, (int64_t[]){3, 64, 200}, NULL);
  run_path(&a, 0, &b, 0, &c, brg, "batch");
  h_tensor_free(&a);
  /* Batch axes broadcast both ways, [2,1,64,176] x [3,176,200] (oneDNN
   * 2.6 offers only its JIT sgemm: OpenBLAS), and a given as a stride-0
   * batch axis (2.6 offers brgemm); which path a version takes is its
   * own, so these check the numbers only. */
  a = mk(F32, 4, (int64_t[]){2, 1, 64, 176}, 5);
  h_tensor_free(&c);
  c = h_tensor_new(F32, 4, (int64_t[]){2, 3, 64, 200}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&c);
  a = mk(F32, 2, (int64_t[]){64, 176}, 5);
  view(&a, 3, (int64_t[]){3, 64, 176}, (int64_t[]){0, 176, 1}, 0);
  c = h_tensor_new(F32, 3, (int64_t[]){3, 64, 200}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* Rows with padding and an offset in a, b row-major (oneDNN 2.6's
   * brgemm takes dense rows only; right on either path). */
  a = mk(F32, 2, (int64_t[]){140, 133}, 7);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){133, 1}, 3);
  b = mk(F32, 2, (int64_t[]){128, 150}, 8);
  c = h_tensor_new(F32, 2, (int64_t[]){140, 150}, NULL);
  run_ok(&a, 0, &b, 0, &c);
  /* Offsets alone (dense matrices inside longer buffers), in a, b and
   * c: each must be applied. */
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  a = mk(F32, 2, (int64_t[]){141, 128}, 7);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){128, 1}, 128);
  b = mk(F32, 2, (int64_t[]){129, 150}, 8);
  view(&b, 2, (int64_t[]){128, 150}, (int64_t[]){150, 1}, 150);
  c = h_tensor_new(F32, 2, (int64_t[]){142, 150}, NULL);
  view(&c, 2, (int64_t[]){140, 150}, (int64_t[]){150, 1}, 300);
  run_path(&a, 0, &b, 0, &c, brg, "offsets");
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* A column-major output, computed as C^T = B^T A^T, from a and b
   * column-major by their strides: the turned-around product is plain. */
  a = mk(F32, 2, (int64_t[]){128, 140}, 7);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){1, 140}, 0);
  b = mk(F32, 2, (int64_t[]){150, 128}, 8);
  view(&b, 2, (int64_t[]){128, 150}, (int64_t[]){1, 128}, 0);
  c = h_tensor_new(F32, 2, (int64_t[]){150, 140}, NULL);
  view(&c, 2, (int64_t[]){140, 150}, (int64_t[]){1, 140}, 0);
  run_path(&a, 0, &b, 0, &c, brg, "column-major output");
  h_tensor_free(&a);
  h_tensor_free(&c);
  /* Column-major outputs from transposed operands and over a batch:
   * right on whichever path oneDNN's offer gives. */
  h_tensor_free(&b);
  for (int f = 1; f < 4; f++) {
    int ta = f & 1, tb = f >> 1;
    a = mk(F32, 2, ta ? (int64_t[]){128, 140} : (int64_t[]){140, 128}, 7);
    b = mk(F32, 2, tb ? (int64_t[]){150, 128} : (int64_t[]){128, 150}, 8);
    c = h_tensor_new(F32, 2, (int64_t[]){150, 140}, NULL);
    view(&c, 2, (int64_t[]){140, 150}, (int64_t[]){1, 140}, 0);
    run_ok(&a, ta, &b, tb, &c);
    h_tensor_free(&a);
    h_tensor_free(&b);
    h_tensor_free(&c);
  }
  a = mk(F32, 3, (int64_t[]){2, 140, 128}, 7);
  b = mk(F32, 3, (int64_t[]){2, 128, 150}, 8);
  c = h_tensor_new(F32, 3, (int64_t[]){2, 150, 140}, NULL);
  view(&c, 3, (int64_t[]){2, 140, 150}, (int64_t[]){150 * 140, 1, 140}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  /* b column-major by its strides again, for what follows. */
  b = mk(F32, 2, (int64_t[]){150, 128}, 8);
  view(&b, 2, (int64_t[]){128, 150}, (int64_t[]){1, 128}, 0);
  /* The same output from a with padded rows: right on either path. */
  a = mk(F32, 2, (int64_t[]){140, 133}, 7);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){133, 1}, 3);
  c = h_tensor_new(F32, 2, (int64_t[]){150, 140}, NULL);
  view(&c, 2, (int64_t[]){140, 150}, (int64_t[]){1, 140}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&c);
  /* A strided output between other values, which must stay. */
  c = mk(F32, 2, (int64_t[]){141, 300}, 9);
  h_tensor orig = mk(F32, 2, (int64_t[]){141, 300}, 9);
  view(&c, 2, (int64_t[]){140, 150}, (int64_t[]){300, 2}, 1);
  forget_log();
  run_ok(&a, 0, &b, 0, &c);
  for (int64_t i = 0; i < c.storage; i++) {
    int64_t r = i / 300, col = i % 300;
    if (!(r < 140 && col % 2 == 1 && col <= 299))
      ck_assert(c.values[i] == orig.values[i]);
  }
  h_tensor_free(&a);
  h_tensor_free(&c);
  h_tensor_free(&orig);
  /* Negative strides (a flipped): oneDNN cannot say them; OpenBLAS. */
  a = mk(F32, 2, (int64_t[]){140, 128}, 10);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){-128, -1}, 140 * 128 - 1);
  c = h_tensor_new(F32, 2, (int64_t[]){140, 150}, NULL);
  run_path(&a, 0, &b, 0, &c, 0, "negative strides");
  h_tensor_free(&a);
  /* Steps in both axes of a, and a row of b repeated (stride 0): right
   * on whichever path takes them. */
  a = mk(F32, 2, (int64_t[]){280, 256}, 11);
  view(&a, 2, (int64_t[]){140, 128}, (int64_t[]){512, 2}, 1);
  forget_log();
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&b);
  b = mk(F32, 2, (int64_t[]){1, 150}, 12);
  view(&b, 2, (int64_t[]){128, 150}, (int64_t[]){0, 1}, 0);
  run_ok(&a, 0, &b, 0, &c);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  harness_close(&hx);
  unsetenv("TYTO_CPU_NO_DNNL");
}
END_TEST

static void expect_error(uint32_t dt_a, uint32_t ra, const int64_t *sa,
                         uint32_t rb, const int64_t *sb, uint32_t rc,
                         const int64_t *sc, const int64_t *flags,
                         uint32_t n_flags, const char *message) {
  h_tensor a = h_tensor_new(dt_a, ra, sa, NULL),
           b = h_tensor_new(F32, rb, sb, NULL),
           c = h_tensor_new(F32, rc, sc, NULL);
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, flags, n_flags, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, message);
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
}

START_TEST(errors) {
  expect_error(F32, 2, (int64_t[]){64, 784}, 2, (int64_t[]){128, 10}, 2,
               (int64_t[]){64, 10}, NULL, 0,
               "matmul: inner dimensions differ: [64,784] x [128,10]");
  expect_error(F32, 2, (int64_t[]){64, 784}, 2, (int64_t[]){784, 10}, 2,
               (int64_t[]){64, 10}, (int64_t[]){1, 0}, 2,
               "matmul: inner dimensions differ: [64,784]^T x [784,10]");
  expect_error(F32, 3, (int64_t[]){2, 4, 5}, 3, (int64_t[]){3, 5, 6}, 3,
               (int64_t[]){2, 4, 6}, NULL, 0,
               "matmul: batch axes do not broadcast: [2,4,5] x [3,5,6]");
  expect_error(F32, 3, (int64_t[]){2, 4, 5}, 2, (int64_t[]){5, 6}, 3,
               (int64_t[]){2, 4, 7}, NULL, 0,
               "matmul: output is [2,4,7], expected [2,4,6] for [2,4,5] x "
               "[5,6]");
  expect_error(F32, 1, (int64_t[]){5}, 2, (int64_t[]){5, 6}, 1, (int64_t[]){6},
               NULL, 0,
               "matmul: both inputs need rank 2 or more, got [5] x [5,6]");
  expect_error(F32, 2, (int64_t[]){4, 5}, 2, (int64_t[]){5, 6}, 2,
               (int64_t[]){4, 6}, (int64_t[]){0, 2}, 2,
               "matmul: transpose flag iattrs[1] must be 0 or 1, got 2");
  expect_error(F32, 2, (int64_t[]){4, 5}, 2, (int64_t[]){5, 6}, 2,
               (int64_t[]){4, 6}, (int64_t[]){0}, 1,
               "matmul: expected 0 or 2 integer attributes (the transpose "
               "flags of the inputs), got 1");
  expect_error(F64, 2, (int64_t[]){4, 5}, 2, (int64_t[]){5, 6}, 2,
               (int64_t[]){4, 6}, NULL, 0,
               "matmul: inputs and output must share one dtype, got f64 x "
               "f32 -> f32");
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu matmul");
  TCase *tc = tcase_create("matmul");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, transpose_flags, 0, 8);
  tcase_add_loop_test(tc, split_into_a_column_major_output, 0, 2);
  tcase_add_loop_test(tc, vectors, 0, 2);
  tcase_add_loop_test(tc, k_zero_gives_zeros, 0, 2);
  tcase_add_test(tc, empty_output);
  tcase_add_loop_test(tc, batch_broadcast, 0, 2);
  tcase_add_loop_test(tc, strided_inputs, 0, 2);
  tcase_add_loop_test(tc, strided_outputs, 0, 2);
  tcase_add_test(tc, errors);
  suite_add_tcase(s, tc);
  TCase *big = tcase_create("big");
  tcase_set_timeout(big, 120);
  tcase_add_loop_test(big, big_products_on_onednn, 0, 2);
  suite_add_tcase(s, big);
  return test_run(s);
}
