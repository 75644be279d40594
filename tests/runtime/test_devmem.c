/*
 * Device memory accounting (tyto_device_memory_get): tyto_buffer_new and
 * compiled programs count their buffers on every device this build can
 * open here; the peak, its reset, struct_size versioning, many buffers
 * freed out of order, and threads allocating at once.
 */
#include "common.h"

#include <pthread.h>
#include <stddef.h>

static tyto_context *open_all(void) {
  tyto_context_options o;
  test_options(&o, 0);
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

static tyto_device_memory memory_of(const tyto_device *dev) {
  tyto_device_memory m = {.struct_size = sizeof m};
  ck_assert_msg(tyto_device_memory_get(dev, &m) == TYTO_OK, "%s",
                tyto_errmsg());
  return m;
}

START_TEST(buffers_are_counted_with_their_peak) {
  tyto_context *ctx = open_all();
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++) {
    tyto_device *dev = tyto_context_device(ctx, i);
    const char *id = tyto_device_get_info(dev)->id;
    tyto_device_memory m0 = memory_of(dev);
    ck_assert_uint_ge(m0.peak_bytes, m0.bytes_in_use);
    ck_assert_uint_ge(m0.total_allocations, m0.n_allocations);

    tyto_buffer *a, *b, *empty;
    ck_assert_int_eq(tyto_buffer_new(dev, 1000, &a), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_new(dev, 4096, &b), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_new(dev, 0, &empty), TYTO_OK);
    tyto_device_memory m = memory_of(dev);
    ck_assert_msg(m.bytes_in_use == m0.bytes_in_use + 5096,
                  "%s: %llu bytes in use, expected %llu", id,
                  (unsigned long long)m.bytes_in_use,
                  (unsigned long long)m0.bytes_in_use + 5096);
    ck_assert_uint_eq(m.n_allocations, m0.n_allocations + 3);
    ck_assert_uint_eq(m.total_allocations, m0.total_allocations + 3);
    ck_assert_uint_ge(m.peak_bytes, m0.bytes_in_use + 5096);

    /* Freeing lowers what is in use, never the peak. */
    tyto_buffer_free(b);
    tyto_device_memory after = memory_of(dev);
    ck_assert_uint_eq(after.bytes_in_use, m0.bytes_in_use + 1000);
    ck_assert_uint_eq(after.peak_bytes, m.peak_bytes);
    ck_assert_uint_eq(after.n_allocations, m0.n_allocations + 2);

    /* A reset starts the peak over from what is in use. */
    ck_assert_int_eq(tyto_device_memory_reset_peak(dev), TYTO_OK);
    after = memory_of(dev);
    ck_assert_uint_eq(after.peak_bytes, m0.bytes_in_use + 1000);
    ck_assert_int_eq(tyto_buffer_new(dev, 300, &b), TYTO_OK);
    tyto_buffer_free(b);
    after = memory_of(dev);
    ck_assert_uint_eq(after.peak_bytes, m0.bytes_in_use + 1300);
    ck_assert_uint_eq(after.total_allocations, m0.total_allocations + 4);

    tyto_buffer_free(a);
    tyto_buffer_free(empty);
    after = memory_of(dev);
    ck_assert_uint_eq(after.bytes_in_use, m0.bytes_in_use);
    ck_assert_uint_eq(after.n_allocations, m0.n_allocations);
  }
  tyto_context_free(ctx);
}
END_TEST

/* Sizes 64 * (k + 1) for k < N, freed in an order that interleaves the
 * table's probe chains: every free must find its buffer's size. */
START_TEST(many_buffers_freed_out_of_order) {
  enum { N = 1500 };
  tyto_context *ctx = open_all();
  tyto_device *dev = tyto_context_device(ctx, 0);
  ck_assert_int_eq(tyto_device_memory_reset_peak(dev), TYTO_OK);
  tyto_device_memory m0 = memory_of(dev);
  static tyto_buffer *bufs[N];
  uint64_t sum = 0;
  for (size_t k = 0; k < N; k++) {
    ck_assert_int_eq(tyto_buffer_new(dev, 64 * (k + 1), &bufs[k]), TYTO_OK);
    sum += 64 * (k + 1);
  }
  tyto_device_memory m = memory_of(dev);
  ck_assert_uint_eq(m.bytes_in_use, m0.bytes_in_use + sum);
  ck_assert_uint_eq(m.n_allocations, m0.n_allocations + N);
  /* 7 is prime to N: k -> 7k mod N visits every buffer once. */
  for (size_t j = 0; j < N; j++) {
    size_t k = 7 * j % N;
    tyto_buffer_free(bufs[k]);
    sum -= 64 * (k + 1);
    if (j % 97 == 0 || j == N - 1) {
      m = memory_of(dev);
      ck_assert_msg(m.bytes_in_use == m0.bytes_in_use + sum,
                    "after %zu frees: %llu bytes in use, expected %llu", j + 1,
                    (unsigned long long)m.bytes_in_use,
                    (unsigned long long)(m0.bytes_in_use + sum));
    }
  }
  ck_assert_uint_eq(m.n_allocations, m0.n_allocations);
  ck_assert_uint_eq(m.peak_bytes, m0.bytes_in_use + 64ull * N * (N + 1) / 2);
  tyto_context_free(ctx);
}
END_TEST

/* y = relu(x w) + b, compiled with the memory plan and without it: the
 * program holds what the planner says it uses, and freeing the program
 * gives it all back. */
START_TEST(a_program_holds_what_it_planned_and_gives_it_back) {
  tyto_context *ctx = open_all();
  for (int plan = 1; plan >= 0; plan--) {
    tyto_device *dev = tyto_context_device(ctx, 0);
    tyto_device_memory m0 = memory_of(dev);
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = tyto_input(g, TYTO_F32, 2, (int64_t[]){8, 16}, "x");
    tyto_tensor *w = tyto_parameter(g, TYTO_F32, 2, (int64_t[]){16, 4}, "w");
    tyto_tensor *b = tyto_parameter(g, TYTO_F32, 1, (int64_t[]){4}, "b");
    tyto_tensor *y = tyto_add(tyto_relu(tyto_matmul(x, w, 0, 0)), b);
    tyto_program_options o;
    tyto_program_options_init(&o);
    o.no_memory_plan = !plan;
    tyto_program *p;
    ck_assert_msg(tyto_program_compile(ctx, g, 1, &y, &o, &p) == TYTO_OK, "%s",
                  tyto_errmsg());
    tyto_program_stats st = {.struct_size = sizeof st};
    ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
    float xs[8 * 16] = {0};
    ck_assert_int_eq(tyto_program_set_input(p, x, xs, sizeof xs), TYTO_OK);
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());

    /* x, w, b and y have buffers of their own at their exact sizes; the
     * planner's figures round every value up to 64 bytes. */
    uint64_t pinned = 4 * (8 * 16 + 16 * 4 + 4 + 8 * 4);
    tyto_device_memory m = memory_of(dev);
    uint64_t held = m.bytes_in_use - m0.bytes_in_use;
    uint64_t buffers = m.n_allocations - m0.n_allocations;
    if (plan) {
      ck_assert_msg(held == pinned + st.arena_bytes,
                    "with the plan: %llu bytes held, expected %llu + the "
                    "%llu-byte arena",
                    (unsigned long long)held, (unsigned long long)pinned,
                    (unsigned long long)st.arena_bytes);
      ck_assert_uint_eq(buffers, 5);
    } else {
      ck_assert_msg(held > pinned && held <= st.planned_bytes &&
                        held + 63 * buffers >= st.planned_bytes,
                    "without a plan: %llu bytes in %llu buffers held, the "
                    "plan says %llu rounded",
                    (unsigned long long)held, (unsigned long long)buffers,
                    (unsigned long long)st.planned_bytes);
    }
    ck_assert_uint_gt(m.n_allocations, m0.n_allocations);
    ck_assert_uint_ge(m.peak_bytes, m.bytes_in_use);

    tyto_program_free(p);
    tyto_graph_free(g);
    m = memory_of(dev);
    ck_assert_uint_eq(m.bytes_in_use, m0.bytes_in_use);
    ck_assert_uint_eq(m.n_allocations, m0.n_allocations);
  }
  tyto_context_free(ctx);
}
END_TEST

START_TEST(older_structs_and_bad_arguments) {
  tyto_context *ctx = open_all();
  tyto_device *dev = tyto_context_device(ctx, 0);
  tyto_buffer *a;
  ck_assert_int_eq(tyto_buffer_new(dev, 128, &a), TYTO_OK);

  /* A caller built when the struct ended after bytes_in_use: the fields
   * past its struct_size are left alone. */
  tyto_device_memory m;
  memset(&m, 0xab, sizeof m);
  m.struct_size = offsetof(tyto_device_memory, peak_bytes);
  ck_assert_int_eq(tyto_device_memory_get(dev, &m), TYTO_OK);
  ck_assert_uint_ge(m.bytes_in_use, 128);
  ck_assert_uint_eq(m.peak_bytes, 0xababababababababull);
  ck_assert_uint_eq(m.struct_size, offsetof(tyto_device_memory, peak_bytes));

  m.struct_size = 0;
  ck_assert_int_eq(tyto_device_memory_get(dev, &m), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "tyto_device_memory_get: out->struct_size 0 is too small; "
                   "set it to sizeof(tyto_device_memory)");
  m.struct_size = sizeof m;
  ck_assert_int_eq(tyto_device_memory_get(NULL, &m), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "tyto_device_memory_get: device is NULL");
  ck_assert_int_eq(tyto_device_memory_get(dev, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "tyto_device_memory_get: out is NULL");
  ck_assert_int_eq(tyto_device_memory_reset_peak(NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "tyto_device_memory_reset_peak: device is NULL");
  tyto_buffer_free(a);
  tyto_context_free(ctx);
}
END_TEST

enum { THREADS = 4, ROUNDS = 300 };

static void *churn(void *arg) {
  tyto_device *dev = arg;
  tyto_buffer *held[8] = {0};
  for (int r = 0; r < ROUNDS; r++) {
    int k = r % 8;
    tyto_buffer_free(held[k]);
    held[k] = NULL;
    if (tyto_buffer_new(dev, 64 + (size_t)r, &held[k]) != TYTO_OK)
      return (void *)1;
  }
  for (int k = 0; k < 8; k++)
    tyto_buffer_free(held[k]);
  return NULL;
}

START_TEST(threads_allocating_at_once_balance) {
  tyto_context *ctx = open_all();
  tyto_device *dev = tyto_context_device(ctx, 0);
  ck_assert_int_eq(tyto_device_memory_reset_peak(dev), TYTO_OK);
  tyto_device_memory m0 = memory_of(dev);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, churn, dev), 0);
  for (int i = 0; i < THREADS; i++) {
    void *rc;
    ck_assert_int_eq(pthread_join(t[i], &rc), 0);
    ck_assert_ptr_null(rc);
  }
  tyto_device_memory m = memory_of(dev);
  ck_assert_uint_eq(m.bytes_in_use, m0.bytes_in_use);
  ck_assert_uint_eq(m.n_allocations, m0.n_allocations);
  ck_assert_uint_eq(m.total_allocations,
                    m0.total_allocations + THREADS * ROUNDS);
  /* Each thread holds at most 8 buffers of at most 64 + ROUNDS - 1 bytes. */
  ck_assert_uint_le(m.peak_bytes - m0.bytes_in_use,
                    (uint64_t)THREADS * 8 * (64 + ROUNDS - 1));
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("devmem");
  TCase *tc = tcase_create("accounting");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, buffers_are_counted_with_their_peak);
  tcase_add_test(tc, many_buffers_freed_out_of_order);
  tcase_add_test(tc, a_program_holds_what_it_planned_and_gives_it_back);
  tcase_add_test(tc, older_structs_and_bad_arguments);
  tcase_add_test(tc, threads_allocating_at_once_balance);
  suite_add_tcase(s, tc);
  return test_run(s);
}
