/*
 * The CPU plugin's `[cpu] threads` option: cpu:0 takes it (its compute
 * units are its threads), values that are not a whole number from 1 to the
 * hardware threads are refused with what was expected, and oneDNN's
 * OpenMP team follows it, so that a product's bits do not depend on
 * OMP_NUM_THREADS.
 *
 * The last is checked in child processes, because OpenMP reads
 * OMP_NUM_THREADS once, when oneDNN loads it: each child sets it (1, then
 * 4), opens cpu:0 with threads = 1 and computes two weight gradients
 * whose long sums oneDNN splits over its threads when it has several: a
 * dense layer's, C = A^T B (k = 8192, 64 x 64 outputs), and a
 * convolution's filter gradient (x [64, 32, 12, 12], 64 filters of 5 x 5).
 * The two children must agree to the bit. Both are also checked against
 * float64 sums, within 1e-5 sqrt(k) sum |a b|.
 */
#include "cpu/harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { K = 8192, M = 64, N = 64 };

/* A context on cpu:0 with the config `text`; NULL and the error in *why
 * when it is refused. */
static tyto_context *open_conf(const char *text, char *why, size_t cap) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  o.config_path = test_write_file(text);
  tyto_context *ctx = NULL;
  tyto_status st = tyto_context_new(&o, &ctx);
  unlink(o.config_path);
  if (st != TYTO_OK) {
    snprintf(why, cap, "%s", tyto_errmsg());
    return NULL;
  }
  return ctx;
}

START_TEST(threads_taken) {
  char why[1024];
  tyto_context *ctx = open_conf("[cpu]\nthreads = 1\n", why, sizeof why);
  ck_assert_msg(ctx, "threads = 1 refused: %s", why);
  const tyto_device_info *info =
      tyto_device_get_info(tyto_context_device(ctx, 0));
  ck_assert_uint_eq(info->compute_units, 1);
  tyto_context_free(ctx);
  /* The default: one per core, at least one and at most the CPUs. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  ctx = open_conf("[cpu]\n", why, sizeof why);
  ck_assert_msg(ctx, "%s", why);
  unsigned cu =
      tyto_device_get_info(tyto_context_device(ctx, 0))->compute_units;
  ck_assert_msg(cu >= 1 && (long)cu <= cpus, "%u threads, %ld CPUs", cu, cpus);
  tyto_context_free(ctx);
  if (cpus >= 2) {
    ctx = open_conf("[cpu]\nthreads = 2\n", why, sizeof why);
    ck_assert_msg(ctx, "threads = 2 refused: %s", why);
    ck_assert_uint_eq(
        tyto_device_get_info(tyto_context_device(ctx, 0))->compute_units, 2);
    tyto_context_free(ctx);
  }
}
END_TEST

/* The warnings of a context, for bad_threads. */
static char warned[4096];
static void keep_warnings(void *user, tyto_log_level level, const char *origin,
                          const char *message) {
  (void)user;
  (void)origin;
  size_t n = strlen(warned);
  if (level <= TYTO_LOG_WARN && n + 1 < sizeof warned)
    snprintf(warned + n, sizeof warned - n, "%s\n", message);
}

START_TEST(bad_threads) {
  static const char *const bad[] = {
      "0", "-1", "two", "1.5",    "3x",
      "",  "+",  "1 2", "999999", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[128], why[1024], want[128];
    snprintf(text, sizeof text, "[cpu]\nthreads = %s\n", bad[i]);
    tyto_context *ctx = open_conf(text, why, sizeof why);
    if (ctx)
      tyto_context_free(ctx);
    ck_assert_msg(!ctx, "threads = '%s' was taken", bad[i]);
    snprintf(want, sizeof want,
             "option threads=\"%s\" is not valid: expected a "
             "whole number from 1 to ",
             bad[i]);
    ck_assert_msg(strstr(why, want), "threads = '%s': %s", bad[i], why);
  }
  /* Where the selection does not name cpu:0 (the default: whatever is
   * found, PoCL's device say), the context goes on without it, and the
   * mistake is a warning, not silence. */
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = NULL;
  o.log_fn = keep_warnings;
  o.log_level = TYTO_LOG_WARN;
  o.config_path = test_write_file("[cpu]\nthreads = 0\n");
  warned[0] = '\0';
  tyto_context *ctx = NULL;
  tyto_status st = tyto_context_new(&o, &ctx);
  unlink(o.config_path);
  if (st == TYTO_OK)
    tyto_context_free(ctx);
  ck_assert_msg(strstr(warned, "plugin cpu: probe failed: option "
                               "threads=\"0\" is not valid"),
                "status %s; warnings:\n%s", tyto_status_name(st), warned);
}
END_TEST

/* Values with every bit of f32's mantissa (uniform in [-0.5, 0.5), exact
 * in f32): sums of products of them round, so that another order of
 * summation shows in the last bits. */
static double value(unsigned seed, size_t i) {
  uint32_t s = seed * 2654435761u + (uint32_t)i * 2246822519u + 12345u;
  s ^= s >> 15;
  s *= 2654435761u;
  s ^= s >> 13;
  return (double)(s >> 8) / 16777216.0 - 0.5;
}

/* The conv's geometry: x [CN, CC, CH, CH], dy [CN, CO, CH - CK + 1, ...],
 * dw [CO, CC, CK, CK]; stride 1, no padding. */
enum { CN = 64, CC = 32, CH = 12, CO = 64, CK = 5, CY = CH - CK + 1 };
enum { N_MM = M * N, N_DW = CO * CC * CK * CK, N_OUT = N_MM + N_DW };

static int write_all(int fd, const void *p, size_t bytes) {
  for (size_t done = 0; done < bytes;) {
    ssize_t w = write(fd, (const char *)p + done, bytes - done);
    if (w <= 0)
      return -1;
    done += (size_t)w;
  }
  return 0;
}

/* The child: with OMP_NUM_THREADS = omp and cpu:0 at threads = 1, the
 * dense layer's weight gradient C = A^T B and a convolution's filter
 * gradient, their values (doubles) to fd. Exits 0, or 1 with a message
 * on fd instead. */
static void child(int fd, const char *omp, int threads) {
  setenv("OMP_NUM_THREADS", omp, 1);
  char why[1024], text[64];
  snprintf(text, sizeof text, "[cpu]\nthreads = %d\n", threads);
  harness hx;
  hx.ctx = open_conf(text, why, sizeof why);
  if (!hx.ctx) {
    (void)!write(fd, why, strlen(why));
    _exit(1);
  }
  hx.dev = tyto_context_device(hx.ctx, 0);
  h_tensor a = h_tensor_new(F32, 2, (int64_t[]){K, M}, NULL);
  h_tensor b = h_tensor_new(F32, 2, (int64_t[]){K, N}, NULL);
  h_tensor c = h_tensor_new(F32, 2, (int64_t[]){M, N}, NULL);
  h_tensor x = h_tensor_new(F32, 4, (int64_t[]){CN, CC, CH, CH}, NULL);
  h_tensor dy = h_tensor_new(F32, 4, (int64_t[]){CN, CO, CY, CY}, NULL);
  h_tensor dw = h_tensor_new(F32, 4, (int64_t[]){CO, CC, CK, CK}, NULL);
  for (int64_t i = 0; i < a.storage; i++)
    a.values[i] = value(1, (size_t)i);
  for (int64_t i = 0; i < b.storage; i++)
    b.values[i] = value(2, (size_t)i);
  for (int64_t i = 0; i < x.storage; i++)
    x.values[i] = value(3, (size_t)i);
  for (int64_t i = 0; i < dy.storage; i++)
    dy.values[i] = value(4, (size_t)i);
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_MATMUL, (h_tensor[]){a, b},
                                2, &c, 1, (int64_t[]){1, 0}, 2, NULL, 0);
  if (!err)
    err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER,
                      (h_tensor[]){x, dy}, 2, &dw, 1,
                      (int64_t[]){1, 1, 0, 0, 1, 1, 1}, 7, NULL, 0);
  int rc = 0;
  if (err) {
    (void)!write(fd, err, strlen(err));
    rc = 1;
  } else if (write_all(fd, c.values, N_MM * sizeof(double)) != 0 ||
             write_all(fd, dw.values, N_DW * sizeof(double)) != 0) {
    rc = 1;
  }
  h_tensor_free(&a);
  h_tensor_free(&b);
  h_tensor_free(&c);
  h_tensor_free(&x);
  h_tensor_free(&dy);
  h_tensor_free(&dw);
  tyto_context_free(hx.ctx);
  _exit(rc);
}

/* Runs the child with OMP_NUM_THREADS = omp and [cpu] threads; its N_OUT
 * values into out. */
static void run_child(const char *omp, int threads, double *out) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    child(fds[1], omp, threads);
  }
  close(fds[1]);
  char *buf = (char *)out;
  size_t got = 0, want = N_OUT * sizeof(double);
  for (;;) {
    ssize_t r = read(fds[0], buf + got, want - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
    if (got == want)
      break;
  }
  close(fds[0]);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "OMP_NUM_THREADS=%s: the child failed: %.*s", omp,
                (int)(got < 1024 ? got : 1024), buf);
  ck_assert_uint_eq(got, want);
}

static void same_bits(const char *what, const double *one, const double *four,
                      size_t n) {
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&one[i], &four[i], sizeof(double)) != 0 && !differ++)
      first = i;
  ck_assert_msg(!differ,
                "%s: %zu of %zu values differ between OMP_NUM_THREADS=1 and "
                "4 (the first, [%zu]: %.9g against %.9g): oneDNN did not run "
                "on cpu:0's one thread",
                what, differ, n, first, one[first], four[first]);
}

START_TEST(onednn_team_follows_threads) {
  /* Valgrind hides AVX-512 (no oneDNN kernel splits these sums there),
   * runs threads one at a time, and counts the libraries' own leaks at
   * each child's exit against its status: nothing to learn under it. */
  if (getenv("TYTO_TEST_UNDER_VALGRIND")) {
    printf("onednn_team_follows_threads: not under valgrind\n");
    return;
  }
  double *one = malloc(N_OUT * sizeof *one),
         *four = malloc(N_OUT * sizeof *four);
  ck_assert(one && four);
  run_child("1", 1, one);
  run_child("4", 1, four);
  /* Against float64 sums: C in full, dw at every 7th element. */
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        double p = value(1, (size_t)k * M + i) * value(2, (size_t)k * N + j);
        ref += p;
        mag += fabs(p);
      }
      ck_assert_msg(fabs(one[i * N + j] - ref) <= 1e-5 * sqrt((double)K) * mag,
                    "C[%d][%d] = %.9g, float64 %.9g", i, j, one[i * N + j],
                    ref);
    }
  for (int w = 0; w < N_DW; w += 7) {
    int kw = w % CK, kh = w / CK % CK, c = w / (CK * CK) % CC,
        o = w / (CK * CK * CC);
    double ref = 0, mag = 0;
    for (int n = 0; n < CN; n++)
      for (int oh = 0; oh < CY; oh++)
        for (int ow = 0; ow < CY; ow++) {
          double p =
              value(4, (size_t)(((n * CO + o) * CY + oh) * CY + ow)) *
              value(3, (size_t)(((n * CC + c) * CH + oh + kh) * CH + ow + kw));
          ref += p;
          mag += fabs(p);
        }
    ck_assert_msg(fabs(one[N_MM + w] - ref) <=
                      1e-5 * sqrt((double)(CN * CY * CY)) * mag,
                  "dw[%d] = %.9g, float64 %.9g", w, one[N_MM + w], ref);
  }
  same_bits("the product A^T B", one, four, N_MM);
  same_bits("the filter gradient", one + N_MM, four + N_MM, N_DW);
  /* The control: on 2 threads, where oneDNN splits these sums (AVX-512
   * machines: brgemm and its convolutions), the bits differ from 1, so
   * that the check above could have failed. Elsewhere (no oneDNN kernel
   * for them, one CPU) it shows nothing, and says so. */
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
    run_child("1", 2, four);
    size_t differ = 0;
    for (size_t i = 0; i < N_OUT; i++)
      differ += memcmp(&one[i], &four[i], sizeof(double)) != 0;
    printf("cpu:0 on 2 threads against 1: %zu of %d values differ%s\n", differ,
           N_OUT,
           differ ? ""
                  : " (oneDNN does not split these sums here: the "
                    "check above shows nothing on this machine)");
  }
  free(one);
  free(four);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_threads");
  TCase *tc = tcase_create("threads");
  tcase_set_timeout(tc, 120);
  /* First, before anything in this process loads the plugin (with
   * CK_FORK=no, under valgrind, the tests share one process). */
  tcase_add_test(tc, onednn_team_follows_threads);
  tcase_add_test(tc, threads_taken);
  tcase_add_test(tc, bad_threads);
  suite_add_tcase(s, tc);
  return test_run(s);
}
