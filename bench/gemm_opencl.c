/*
 * bench/gemm_opencl: matrix products on an OpenCL device two ways, side by
 * side with OpenBLAS in the same run: tyto's register-blocked kernels
 * (the OpenCL plugin's option gemm=tyto, the default on CPU devices) and
 * CLBlast (gemm=clblast, the default on GPUs), each through a compiled
 * program of one MATMUL, and cblas_sgemm called directly on the host.
 * The shapes are the seed CNN's dense layer (6272 inputs, 1024 outputs)
 * at shards of 1, 16 and 64 images (forward, input gradient, weight
 * gradient), its classifier, and squares. Prints a table, then one line
 * starting with "BENCH ".
 *
 *   TYTO_PLUGIN_PATH=build/plugins/opencl/.libs \
 *   POCL_MAX_PTHREAD_COUNT=1 OPENBLAS_NUM_THREADS=1 \
 *     build/bench/gemm_opencl [--device opencl:0] [--reps N] [--quick]
 *
 * Give PoCL and OpenBLAS the same thread count (the line above: one
 * each) for a like-for-like row. --quick: 2 repetitions of the three
 * smallest shapes, to check that it runs. Not a test: nothing here fails
 * on timing.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tyto/tyto.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
  const char *what;
  int64_t m, k, n;
  int ta, tb;
} shape;

static const shape shapes[] = {
    {"dense fwd, 1 image", 1, 6272, 1024, 0, 0},
    {"dense fwd, 16", 16, 6272, 1024, 0, 0},
    {"classifier fwd, 64", 64, 1024, 10, 0, 0},
    {"dense fwd, 64", 64, 6272, 1024, 0, 0},
    {"dense dx, 16", 16, 1024, 6272, 0, 1},
    {"dense dx, 64", 64, 1024, 6272, 0, 1},
    {"dense dW, 16", 6272, 16, 1024, 1, 0},
    {"dense dW, 64", 6272, 64, 1024, 1, 0},
    {"square 512", 512, 512, 512, 0, 0},
    {"square 1024", 1024, 1024, 1024, 0, 0},
};

/* A context on `device` whose [opencl] section sets gemm = `how`, through
 * a config file written for it. NULL (with a message) on failure. */
static tyto_context *context_with(const char *device, const char *how) {
  char path[] = "/tmp/tyto-gemm-bench-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("gemm_opencl: mkstemp");
    return NULL;
  }
  char text[128];
  int len = snprintf(text, sizeof text, "[opencl]\ngemm = %s\n", how);
  ssize_t wrote = write(fd, text, (size_t)len);
  close(fd);
  tyto_context *ctx = NULL;
  if (wrote == len) {
    tyto_context_options o;
    tyto_context_options_init(&o);
    o.config_path = path;
    o.devices = device;
    if (tyto_context_new(&o, &ctx) != TYTO_OK)
      fprintf(stderr, "gemm_opencl: gemm=%s on %s: %s\n", how, device,
              tyto_errmsg());
  }
  unlink(path);
  return ctx;
}

/* Seconds per product of shape s on ctx (the median of reps runs after
 * one warm-up); negative on failure. */
static double time_tyto(tyto_context *ctx, const shape *s, const float *a,
                        const float *b, float *c, int reps) {
  tyto_graph *g = tyto_graph_new();
  int64_t as[2] = {s->ta ? s->k : s->m, s->ta ? s->m : s->k};
  int64_t bs[2] = {s->tb ? s->n : s->k, s->tb ? s->k : s->n};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, as, "a");
  tyto_tensor *y = tyto_input(g, TYTO_F32, 2, bs, "b");
  tyto_tensor *z = tyto_matmul(x, y, s->ta, s->tb);
  tyto_program *p = NULL;
  double best = -1;
  if (tyto_graph_status(g) != TYTO_OK ||
      tyto_program_compile(ctx, g, 1, &z, NULL, &p) != TYTO_OK) {
    fprintf(stderr, "gemm_opencl: %s: %s\n", s->what, tyto_errmsg());
    tyto_graph_free(g);
    return -1;
  }
  size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n),
         nc = (size_t)(s->m * s->n);
  double *t = malloc((size_t)reps * sizeof *t);
  if (t != NULL && tyto_program_set_input(p, x, a, na * sizeof *a) == TYTO_OK &&
      tyto_program_set_input(p, y, b, nb * sizeof *b) == TYTO_OK &&
      tyto_program_run(p) == TYTO_OK &&
      tyto_program_read_output(p, 0, c, nc * sizeof *c) == TYTO_OK) {
    int ok = 1;
    for (int r = 0; r < reps && ok; r++) {
      double t0 = now();
      ok = tyto_program_run(p) == TYTO_OK; /* returns when it is done */
      t[r] = now() - t0;
    }
    if (ok) {
      for (int i = 1; i < reps; i++) /* insertion sort: reps is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
          double v = t[j];
          t[j] = t[j - 1];
          t[j - 1] = v;
        }
      best = t[reps / 2];
    } else {
      fprintf(stderr, "gemm_opencl: %s: %s\n", s->what, tyto_errmsg());
    }
  }
  free(t);
  tyto_program_free(p);
  tyto_graph_free(g);
  return best;
}

static double time_blas(const shape *s, const float *a, const float *b,
                        float *c, int reps) {
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n,
                (int)s->k, 1.0f, a, s->ta ? (int)s->m : (int)s->k, b,
                s->tb ? (int)s->k : (int)s->n, 0.0f, c, (int)s->n);
    double t = now() - t0;
    if (r > 0 && t < best)
      best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  const char *device = "opencl:0";
  int reps = 7, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      device = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else {
      fprintf(stderr,
              "usage: gemm_opencl [--device opencl:N] [--reps N] [--quick]\n");
      return 2;
    }
  }
  if (quick)
    reps = 2;
  if (reps < 1 || reps > 1000) {
    fprintf(stderr, "gemm_opencl: --reps takes 1 to 1000\n");
    return 2;
  }
  size_t n_shapes = quick ? 3 : sizeof shapes / sizeof shapes[0];
  tyto_context *own = context_with(device, "tyto");
  tyto_context *blast = context_with(device, "clblast");
  if (own == NULL || blast == NULL)
    return 1;
  const char *pocl = getenv("POCL_MAX_PTHREAD_COUNT");
  const char *ob = getenv("OPENBLAS_NUM_THREADS");
  printf("f32 matrix products on %s: tyto's kernels (gemm=tyto), CLBlast "
         "(gemm=clblast),\nOpenBLAS's cblas_sgemm on the host; median of %d "
         "runs (OpenBLAS: best).\nThreads: POCL_MAX_PTHREAD_COUNT=%s "
         "OPENBLAS_NUM_THREADS=%s\n\n",
         device, reps, pocl ? pocl : "(unset)", ob ? ob : "(unset)");
  printf("%-20s %18s %9s %9s %9s %8s %8s\n", "product", "m x k x n", "tyto ms",
         "CLBlast", "OpenBLAS", "GFLOP/s", "vs CLB.");
  size_t most = 0;
  for (size_t i = 0; i < n_shapes; i++) {
    const shape *s = &shapes[i];
    size_t e[3] = {(size_t)(s->m * s->k), (size_t)(s->k * s->n),
                   (size_t)(s->m * s->n)};
    for (int j = 0; j < 3; j++)
      most = e[j] > most ? e[j] : most;
  }
  float *a = malloc(most * sizeof *a), *b = malloc(most * sizeof *b),
        *c = malloc(most * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "gemm_opencl: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < most; i++) {
    a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
  }
  char json[8192];
  size_t at = (size_t)snprintf(json, sizeof json,
                               "{\"bench\":\"gemm_opencl\",\"device\":\"%s\","
                               "\"reps\":%d,\"rows\":[",
                               device, reps);
  for (size_t i = 0; i < n_shapes; i++) {
    const shape *s = &shapes[i];
    double tt = time_tyto(own, s, a, b, c, reps);
    double tc = time_tyto(blast, s, a, b, c, reps);
    double tb = time_blas(s, a, b, c, reps);
    double flop = 2.0 * (double)s->m * (double)s->k * (double)s->n;
    char dims[40];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld%s%s", (long long)s->m,
             (long long)s->k, (long long)s->n, s->ta ? " A^T" : "",
             s->tb ? " B^T" : "");
    printf("%-20s %18s %9.2f %9.2f %9.2f %8.1f %7.1fx\n", s->what, dims,
           tt * 1e3, tc * 1e3, tb * 1e3, tt > 0 ? flop / tt / 1e9 : 0.0,
           tt > 0 && tc > 0 ? tc / tt : 0.0);
    if (at < sizeof json)
      at += (size_t)snprintf(
          json + at, sizeof json - at,
          "%s{\"what\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"ta\":%d,"
          "\"tb\":%d,\"tyto_s\":%.6g,\"clblast_s\":%.6g,\"openblas_s\":%.6g}",
          i ? "," : "", s->what, (long long)s->m, (long long)s->k,
          (long long)s->n, s->ta, s->tb, tt, tc, tb);
  }
  printf("\nvs CLB.: CLBlast's time over tyto's kernels'. A time of -1: the "
         "product failed (the message is above).\n");
  if (at < sizeof json)
    snprintf(json + at, sizeof json - at, "]}");
  printf("BENCH %s\n", json);
  free(a);
  free(b);
  free(c);
  tyto_context_free(own);
  tyto_context_free(blast);
  return 0;
}
