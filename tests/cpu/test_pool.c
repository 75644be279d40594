/* The CPU plugin's worker pool (plugins/cpu/pool.c, linked in directly):
 * every index runs exactly once, workers really run alongside the caller,
 * and concurrent callers are serialised without losing work. */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "pool.h"

typedef struct counts {
  atomic_int *hits;
  size_t n;
} counts;

static void count_fn(void *ctx, size_t i) {
  counts *c = ctx;
  if (i < c->n) /* an index past n would show as a missed one */
    atomic_fetch_add(&c->hits[i], 1);
}

/* Runs [0, n) once on `pool` and checks each index was hit exactly once. */
static void check_once(cpu_pool *pool, size_t n) {
  counts c = {calloc(n ? n : 1, sizeof(atomic_int)), n};
  ck_assert_ptr_nonnull(c.hits);
  for (size_t i = 0; i < n; i++)
    atomic_init(&c.hits[i], 0);
  cpu_pool_for(pool, n, count_fn, &c);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += atomic_load(&c.hits[i]) != 1;
  ck_assert_msg(bad == 0, "n = %zu: %zu indices not run exactly once", n, bad);
  free(c.hits);
}

START_TEST(test_each_index_once) {
  static const size_t ns[] = {0, 1, 2, 7, 64, 1000, 1000000};
  static const unsigned threads[] = {1, 2, 4};
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    cpu_pool *pool = cpu_pool_new(threads[t], NULL);
    ck_assert_ptr_nonnull(pool);
    ck_assert_uint_eq(cpu_pool_size(pool), threads[t]);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
      check_once(pool, ns[i]);
    /* The pool is reused job after job. */
    for (int rep = 0; rep < 200; rep++)
      check_once(pool, (size_t)rep % 13);
    cpu_pool_free(pool);
  }
}
END_TEST

START_TEST(test_bound_and_unbindable) {
  /* Bound to CPU 0 only (every worker shares it), to a set hwloc cannot
   * parse, and to CPUs this machine lacks: binding failures are not
   * fatal and the work still gets done. */
  static const char *sets[] = {"0", "not-a-cpuset", "4000-4003", ""};
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    cpu_pool *pool = cpu_pool_new(3, sets[s]);
    ck_assert_ptr_nonnull(pool);
    ck_assert_uint_eq(cpu_pool_size(pool), 3);
    check_once(pool, 10007);
    cpu_pool_free(pool);
  }
  cpu_pool_free(NULL);
  ck_assert_uint_eq(cpu_pool_size(NULL), 1);
}
END_TEST

/* Index 0 and 1 each wait (up to 10 s) until both are running at once:
 * only true parallelism between a worker and the caller gets past. */
typedef struct meet {
  atomic_int arrived;
  atomic_int met;
} meet;

static void meet_fn(void *ctx, size_t i) {
  meet *m = ctx;
  (void)i;
  atomic_fetch_add(&m->arrived, 1);
  struct timespec ms = {0, 1000000};
  for (int k = 0; k < 10000 && atomic_load(&m->arrived) < 2; k++)
    nanosleep(&ms, NULL);
  if (atomic_load(&m->arrived) >= 2)
    atomic_fetch_add(&m->met, 1);
}

START_TEST(test_workers_run_in_parallel) {
  cpu_pool *pool = cpu_pool_new(2, NULL);
  ck_assert_ptr_nonnull(pool);
  meet m;
  atomic_init(&m.arrived, 0);
  atomic_init(&m.met, 0);
  cpu_pool_for(pool, 2, meet_fn, &m);
  ck_assert_int_eq(atomic_load(&m.met), 2);
  cpu_pool_free(pool);
}
END_TEST

typedef struct caller {
  cpu_pool *pool;
  int failures;
} caller;

static void *caller_main(void *arg) {
  caller *c = arg;
  const size_t n = 4099;
  atomic_int *hits = calloc(n, sizeof *hits);
  for (int rep = 0; rep < 100 && hits; rep++) {
    for (size_t i = 0; i < n; i++)
      atomic_init(&hits[i], 0);
    counts cs = {hits, n};
    cpu_pool_for(c->pool, n, count_fn, &cs);
    for (size_t i = 0; i < n; i++)
      c->failures += atomic_load(&hits[i]) != 1;
  }
  if (!hits)
    c->failures = -1;
  free(hits);
  return NULL;
}

START_TEST(test_two_callers) {
  cpu_pool *pool = cpu_pool_new(3, NULL);
  ck_assert_ptr_nonnull(pool);
  caller a = {pool, 0}, b = {pool, 0};
  pthread_t ta, tb;
  ck_assert_int_eq(pthread_create(&ta, NULL, caller_main, &a), 0);
  ck_assert_int_eq(pthread_create(&tb, NULL, caller_main, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ck_assert_int_eq(a.failures, 0);
  ck_assert_int_eq(b.failures, 0);
  cpu_pool_free(pool);
}
END_TEST

static Suite *pool_suite(void) {
  Suite *s = suite_create("cpu_pool");
  TCase *tc = tcase_create("pool");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_each_index_once);
  tcase_add_test(tc, test_bound_and_unbindable);
  tcase_add_test(tc, test_workers_run_in_parallel);
  tcase_add_test(tc, test_two_callers);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(pool_suite());
}
