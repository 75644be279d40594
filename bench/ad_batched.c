/*
 * bench/ad_batched: what batched derivatives save. For n scalar points and
 * f(x) = x^3 - 2x, every point's second derivative two ways: the batched
 * Hessian (tyto_hessian_batched: one reverse and one forward sweep for all
 * points) and tyto_hessian of the sum (one forward sweep per point, its
 * diagonal the same numbers). Per n it prints the tensors each derivative
 * adds to the graph, the time to build them, the time to compile the
 * program that computes them (best of 3) and the time to run it once;
 * then a line starting with "BENCH ". The plain Hessian is skipped above
 * n = 2000: besides its graph, it is a dense n x n matrix (800 MB at n =
 * 10,000, where it took 0.4 s to build, 0.16 s to compile and 1.1 s to run
 * here).
 *
 *   build/bench/ad_batched
 *
 * Not a test: tests/ad/test_batched.c checks the values and bounds the
 * graph sizes without timing.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tyto/tyto.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
  size_t tensors;
  double build_s, compile_s, run_s;
} result;

static int measure(tyto_context *ctx, int64_t n, int batched, result *r) {
  double *xv = malloc((size_t)n * sizeof *xv);
  if (!xv)
    return -1;
  for (int64_t i = 0; i < n; i++)
    xv[i] = (double)(i % 17) / 8.0 - 1.0;
  r->compile_s = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = tyto_input(g, TYTO_F64, 1, (int64_t[]){n}, "x");
    tyto_tensor *y =
        tyto_sub(tyto_mul(tyto_square(x), x), tyto_mul_scalar(x, 2.0));
    size_t before = tyto_graph_size(g);
    double t0 = now();
    tyto_tensor *h = batched ? tyto_hessian_batched(y, x)
                             : tyto_hessian(tyto_sum(y, 0, NULL, 0), x);
    double t1 = now();
    r->tensors = tyto_graph_size(g) - before;
    r->build_s = t1 - t0;
    tyto_program *p = NULL;
    if (tyto_graph_status(g) != TYTO_OK ||
        tyto_program_compile(ctx, g, 1, &h, NULL, &p) != TYTO_OK) {
      fprintf(stderr, "ad_batched: %s\n",
              tyto_graph_status(g) != TYTO_OK ? tyto_graph_error_message(g)
                                              : tyto_errmsg());
      tyto_graph_free(g);
      free(xv);
      return -1;
    }
    double t2 = now();
    if (t2 - t1 < r->compile_s)
      r->compile_s = t2 - t1;
    int ok =
        tyto_program_set_input(p, x, xv, (size_t)n * sizeof *xv) == TYTO_OK &&
        tyto_program_run(p) == TYTO_OK;
    r->run_s = now() - t2;
    tyto_program_free(p);
    tyto_graph_free(g);
    if (!ok) {
      fprintf(stderr, "ad_batched: %s\n", tyto_errmsg());
      free(xv);
      return -1;
    }
  }
  free(xv);
  return 0;
}

int main(void) {
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "ad_batched: %s\n", tyto_errmsg());
    return 1;
  }
  static const int64_t ns[] = {10, 100, 1000, 10000};
  char json[2048];
  int jn = snprintf(json, sizeof json, "BENCH {\"bench\":\"ad_batched\"");
  printf("second derivative of x^3 - 2x at n points, on %s\n",
         tyto_device_get_info(tyto_context_device(ctx, 0))->id);
  printf("%7s %-16s %9s %10s %11s %9s\n", "n", "derivative", "tensors",
         "build ms", "compile ms", "run ms");
  int rc = 0;
  for (size_t i = 0; i < sizeof ns / sizeof ns[0] && rc == 0; i++) {
    for (int batched = 1; batched >= 0 && rc == 0; batched--) {
      const char *what = batched ? "hessian_batched" : "hessian of sum";
      if (!batched && ns[i] > 2000) {
        printf("%7lld %-16s %9s (skipped: a dense %lld x %lld Hessian)\n",
               (long long)ns[i], what, "-", (long long)ns[i], (long long)ns[i]);
        continue;
      }
      result r;
      if ((rc = measure(ctx, ns[i], batched, &r)) != 0)
        break;
      printf("%7lld %-16s %9zu %10.2f %11.2f %9.2f\n", (long long)ns[i], what,
             r.tensors, 1e3 * r.build_s, 1e3 * r.compile_s, 1e3 * r.run_s);
      if (jn > 0 && (size_t)jn < sizeof json)
        jn += snprintf(json + jn, sizeof json - (size_t)jn,
                       ",\"%s_%lld\":{\"tensors\":%zu,\"build_s\":%.6g,"
                       "\"compile_s\":%.6g,\"run_s\":%.6g}",
                       batched ? "batched" : "plain", (long long)ns[i],
                       r.tensors, r.build_s, r.compile_s, r.run_s);
    }
  }
  if (rc == 0 && jn > 0 && (size_t)jn < sizeof json - 2)
    printf("%s}\n", json);
  tyto_context_free(ctx);
  return rc ? 1 : 0;
}
