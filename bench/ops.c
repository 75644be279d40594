/*
 * bench/ops: kernel throughput of the CPU plugin, side by side with the
 * reference in the same run: matmul against OpenBLAS's cblas_?gemm called
 * directly (square products, and a dense layer's three at a small batch,
 * which the plugin gives to oneDNN where it has brgemm kernels),
 * elementwise ops and reductions against a STREAM-style triad.
 * Kernels are prepared once and launched repeatedly through the plugin ABI,
 * as a compiled program will. Prints a table, then one machine-readable
 * line starting with "BENCH ".
 *
 *   build/bench/ops [--quick]
 *
 * Not a test: nothing here fails on timing.
 */
#include "config.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/tyto.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench {
  tyto_device *dev;
  const tyto_plugin_device_fns *f;
  tyto_plugin_device *h;
  tyto_plugin_stream *s;
} bench;

static tyto_plugin_layout packed(uint32_t dtype, uint32_t rank,
                                 const int64_t *shape) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dtype;
  l.rank = rank;
  int64_t n = 1;
  for (uint32_t i = rank; i-- > 0;) {
    l.shape[i] = shape[i];
    l.strides[i] = n;
    n *= shape[i];
  }
  return l;
}

static size_t bytes_of(const tyto_plugin_layout *l) {
  size_t n = l->dtype == TYTO_PLUGIN_DTYPE_F32 ? 4 : 8;
  for (uint32_t i = 0; i < l->rank; i++)
    n *= (size_t)l->shape[i];
  return n;
}

/* Seconds per launch of one op (best of `reps` timed batches), or a
 * negative value when the device does not run it (reason in *why). */
static double time_op(bench *b, uint32_t op, const tyto_plugin_layout *in,
                      uint32_t n_in, const tyto_plugin_layout *out,
                      const int64_t *iattrs, uint32_t n_iattrs,
                      const double *fattrs, uint32_t n_fattrs, int iters,
                      char *why, size_t why_cap) {
  tyto_plugin_op_desc d = {sizeof d, op,     n_in,     1,      in, out,
                           n_iattrs, iattrs, n_fattrs, fattrs, 0,  NULL};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_error *e = b->f->prepare(b->h, &d, &k, &ki);
  if (e) {
    snprintf(why, why_cap, "%s", rt_error_message(e));
    rt_error_free(e);
    return -1;
  }
  tyto_plugin_buffer *bufs[5] = {0};
  tyto_plugin_binding bi[4], bo, bw = {sizeof bw, NULL, 0};
  for (uint32_t i = 0; i <= n_in; i++) {
    const tyto_plugin_layout *l = i < n_in ? &in[i] : out;
    size_t n = bytes_of(l);
    void *init = calloc(1, n ? n : 1);
    /* Inputs spread over [-2.5, 2.5), inside the domain of every op timed
     * here: a libm function then takes its branches as on real data (on
     * inputs all equal, glibc's erff ran 2.7 times faster than on these). */
    if (i < n_in && l->dtype == TYTO_PLUGIN_DTYPE_F32)
      for (size_t j = 0; j < n / 4; j++)
        ((float *)init)[j] = -2.5f + 0.005f * (float)(j % 1000);
    else if (i < n_in)
      for (size_t j = 0; j < n / 8; j++)
        ((double *)init)[j] = -2.5 + 0.005 * (double)(j % 1000);
    b->f->buffer_alloc(b->h, n, &bufs[i]);
    b->f->copy_h2d(b->h, NULL, bufs[i], 0, init, n);
    free(init);
    tyto_plugin_binding *bd = i < n_in ? &bi[i] : &bo;
    bd->struct_size = sizeof *bd;
    bd->buffer = bufs[i];
    bd->offset = 0;
  }
  if (ki.workspace_bytes) {
    b->f->buffer_alloc(b->h, ki.workspace_bytes, &bufs[4]);
    bw.buffer = bufs[4];
  }
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) { /* the first is a warm-up */
    double t0 = now();
    for (int it = 0; it < iters; it++)
      if ((e = b->f->launch(b->h, b->s, k, bi, n_in, &bo, 1,
                            ki.workspace_bytes ? &bw : NULL)) != NULL)
        break;
    if (!e)
      e = b->f->stream_synchronize(b->h, b->s);
    if (e) {
      snprintf(why, why_cap, "%s", rt_error_message(e));
      rt_error_free(e);
      best = -1;
      break;
    }
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  for (int i = 0; i < 5; i++)
    b->f->buffer_free(b->h, bufs[i]);
  b->f->kernel_release(b->h, k);
  return best;
}

/* STREAM triad a = b + s*c on `threads` threads: the memory-bound
 * reference for elementwise ops. */
typedef struct triad_job {
  float *a, *b, *c;
  size_t lo, hi;
} triad_job;

static void *triad_part(void *arg) {
  triad_job *j = arg;
  for (size_t i = j->lo; i < j->hi; i++)
    j->a[i] = j->b[i] + 3.0f * j->c[i];
  return NULL;
}

static double triad(size_t n, int threads, int iters) {
  float *a = malloc(n * 4), *bb = malloc(n * 4), *c = malloc(n * 4);
  for (size_t i = 0; i < n; i++)
    a[i] = 0, bb[i] = 1, c[i] = 2;
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = now();
    for (int it = 0; it < iters; it++) {
      pthread_t tid[16];
      triad_job jobs[16];
      for (int t = 0; t < threads; t++) {
        jobs[t] = (triad_job){a, bb, c, n * t / threads, n * (t + 1) / threads};
        if (t)
          pthread_create(&tid[t], NULL, triad_part, &jobs[t]);
      }
      triad_part(&jobs[0]);
      for (int t = 1; t < threads; t++)
        pthread_join(tid[t], NULL);
    }
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  free(a);
  free(bb);
  free(c);
  return best;
}

/* Row-major C[m,n] = op(A) op(B) through cblas_?gemm on `threads`
 * threads, A stored [m,k] ([k,m] when ta), B [k,n] ([n,k] when tb): the
 * best of 3 timed rounds. */
static double blas_gemm(int m, int n, int k, int ta, int tb, int f64,
                        int threads, int iters) {
  size_t e = f64 ? 8 : 4;
  void *a = calloc((size_t)m * k, e), *bm = calloc((size_t)k * n, e),
       *c = calloc((size_t)m * n, e);
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans,
                       TB = tb ? CblasTrans : CblasNoTrans;
  int lda = ta ? m : k, ldb = tb ? k : n;
  /* OpenBLAS on every core: the CPU plugin sets it to one thread once
   * its pool runs a GEMM (matmul.c), which would leave the reference
   * one core. */
  int before = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = now();
    for (int it = 0; it < iters; it++) {
      if (f64)
        cblas_dgemm(CblasRowMajor, TA, TB, m, n, k, 1.0, a, lda, bm, ldb, 0.0,
                    c, n);
      else
        cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, 1.0f, a, lda, bm, ldb, 0.0f,
                    c, n);
    }
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  openblas_set_num_threads(before);
  free(a);
  free(bm);
  free(c);
  return best;
}

/* A product's row: the plugin's seconds t (negative: not run, why) and
 * the reference's r, as GFLOP/s. */
static void gemm_row(const char *label, double t, double r, double flop,
                     const char *why) {
  if (t < 0)
    printf("%-28s %12s %12.1f %12s %8s  (%s)\n", label, "-", flop / r / 1e9,
           "GFLOP/s", "-", why);
  else
    printf("%-28s %12.1f %12.1f %12s %7.0f%%\n", label, flop / t / 1e9,
           flop / r / 1e9, "GFLOP/s", 100 * r / t);
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  tyto_context_options o;
  tyto_context_options_init(&o);
  o.devices = "cpu";
  tyto_context *ctx;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    fprintf(stderr, "bench/ops: %s\n", tyto_errmsg());
    return 1;
  }
  bench b;
  b.dev = tyto_context_device(ctx, 0);
  b.f = &b.dev->plugin->dfns;
  b.h = b.dev->handle;
  b.f->stream_create(b.h, &b.s);
  const tyto_topology *topo = tyto_context_topology(ctx);
  printf("bench/ops on %s (%u cores), tyto %s\n\n", b.dev->info.name,
         topo->cores, tyto_version());
  printf("%-28s %12s %12s %12s %8s\n", "op", "tyto", "reference", "unit",
         "ratio");
  char json[8192];
  size_t jn = (size_t)snprintf(json, sizeof json, "BENCH {\"bench\":\"ops\"");
  char why[512];

  int sizes[] = {256, 512, 1024};
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t si = 0; si < 3; si++) {
      int n = sizes[si];
      if (quick && n > 512)
        continue;
      int iters = n >= 1024 ? 3 : n >= 512 ? 10 : 40;
      uint32_t dt = f64 ? TYTO_PLUGIN_DTYPE_F64 : TYTO_PLUGIN_DTYPE_F32;
      int64_t sh[2] = {n, n};
      tyto_plugin_layout in[2] = {packed(dt, 2, sh), packed(dt, 2, sh)};
      tyto_plugin_layout out = packed(dt, 2, sh);
      int64_t tr[2] = {0, 0};
      double t = time_op(&b, TYTO_PLUGIN_OP_MATMUL, in, 2, &out, tr, 2, NULL, 0,
                         iters, why, sizeof why);
      double r = blas_gemm(n, n, n, 0, 0, f64, (int)topo->cores, iters);
      double flop = 2.0 * n * n * (double)n;
      char label[64];
      snprintf(label, sizeof label, "matmul %s %dx%dx%d", f64 ? "f64" : "f32",
               n, n, n);
      gemm_row(label, t, r, flop, why);
      jn += (size_t)snprintf(json + jn, sizeof json - jn,
                             ",\"matmul_%s_%d\":{\"tyto\":%.3f,\"blas\":%.3f}",
                             f64 ? "f64" : "f32", n, t < 0 ? 0 : flop / t / 1e9,
                             flop / r / 1e9);
    }

  /* A dense layer at a small batch (the seed CNN's 6272 -> 1024 at 64
   * images): the forward product and its two gradients. */
  static const struct {
    const char *name, *key;
    int m, n, k, ta, tb;
  } dense[] = {{"dense fwd", "dense_fwd", 64, 1024, 6272, 0, 0},
               {"dense dx", "dense_dx", 64, 6272, 1024, 0, 1},
               {"dense dw", "dense_dw", 6272, 1024, 64, 1, 0}};
  for (size_t di = 0; di < sizeof dense / sizeof dense[0] && !quick; di++) {
    int m = dense[di].m, nn = dense[di].n, k = dense[di].k;
    int ta = dense[di].ta, tb = dense[di].tb, iters = 5;
    int64_t sa[2] = {ta ? k : m, ta ? m : k},
            sb[2] = {tb ? nn : k, tb ? k : nn}, sc[2] = {m, nn};
    tyto_plugin_layout in[2] = {packed(TYTO_PLUGIN_DTYPE_F32, 2, sa),
                                packed(TYTO_PLUGIN_DTYPE_F32, 2, sb)};
    tyto_plugin_layout out = packed(TYTO_PLUGIN_DTYPE_F32, 2, sc);
    int64_t tr[2] = {ta, tb};
    double t = time_op(&b, TYTO_PLUGIN_OP_MATMUL, in, 2, &out, tr, 2, NULL, 0,
                       iters, why, sizeof why);
    double r = blas_gemm(m, nn, k, ta, tb, 0, (int)topo->cores, iters);
    double flop = 2.0 * m * nn * (double)k;
    char label[64];
    snprintf(label, sizeof label, "matmul f32 %s %dx%dx%d", dense[di].name, m,
             nn, k);
    gemm_row(label, t, r, flop, why);
    jn += (size_t)snprintf(json + jn, sizeof json - jn,
                           ",\"matmul_f32_%s\":{\"tyto\":%.3f,"
                           "\"blas\":%.3f}",
                           dense[di].key, t < 0 ? 0 : flop / t / 1e9,
                           flop / r / 1e9);
  }

  size_t n = quick ? (size_t)1 << 22 : (size_t)1 << 24;
  int iters = quick ? 5 : 10;
  double tri1 = triad(n, 1, iters), tri2 = triad(n, (int)topo->cores, iters);
  double tri_bytes = 12.0 * (double)n;
  printf("%-28s %12s %12.1f %12s\n", "STREAM triad f32, 1 thread", "",
         tri_bytes / tri1 / 1e9, "GB/s");
  printf("%-28s %12s %12.1f %12s\n", "STREAM triad f32, all cores", "",
         tri_bytes / tri2 / 1e9, "GB/s");
  struct {
    const char *name;
    uint32_t op, n_in;
    double bytes_per_elem;
  } ew[] = {{"add f32", TYTO_PLUGIN_OP_ADD, 2, 12},
            {"mul f32", TYTO_PLUGIN_OP_MUL, 2, 12},
            {"fma f32", TYTO_PLUGIN_OP_FMA, 3, 16},
            {"relu f32", TYTO_PLUGIN_OP_RELU, 1, 8},
            {"exp f32", TYTO_PLUGIN_OP_EXP, 1, 8},
            {"tanh f32", TYTO_PLUGIN_OP_TANH, 1, 8},
            {"erf f32", TYTO_PLUGIN_OP_ERF, 1, 8},
            {"copy f32", TYTO_PLUGIN_OP_COPY, 1, 8}};
  for (size_t i = 0; i < sizeof ew / sizeof ew[0]; i++) {
    int64_t sh[1] = {(int64_t)n};
    tyto_plugin_layout in[3], out = packed(TYTO_PLUGIN_DTYPE_F32, 1, sh);
    for (uint32_t k = 0; k < ew[i].n_in; k++)
      in[k] = packed(TYTO_PLUGIN_DTYPE_F32, 1, sh);
    double t = time_op(&b, ew[i].op, in, ew[i].n_in, &out, NULL, 0, NULL, 0,
                       iters, why, sizeof why);
    double gbs = t > 0 ? ew[i].bytes_per_elem * (double)n / t / 1e9 : 0;
    char label[64];
    snprintf(label, sizeof label, "%s, %zu M", ew[i].name, n >> 20);
    if (t < 0)
      printf("%-28s %12s %12.1f %12s %8s  (%s)\n", label, "-",
             tri_bytes / tri2 / 1e9, "GB/s", "-", why);
    else
      printf("%-28s %12.1f %12.1f %12s %7.0f%%\n", label, gbs,
             tri_bytes / tri2 / 1e9, "GB/s",
             100 * gbs / (tri_bytes / tri2 / 1e9));
    jn += (size_t)snprintf(json + jn, sizeof json - jn, ",\"%s\":%.3f",
                           ew[i].name, gbs);
  }
  {
    int64_t sh[1] = {(int64_t)n}, one[1] = {1}, axes[1] = {0};
    tyto_plugin_layout in = packed(TYTO_PLUGIN_DTYPE_F32, 1, sh);
    tyto_plugin_layout out = packed(TYTO_PLUGIN_DTYPE_F32, 1, one);
    double t = time_op(&b, TYTO_PLUGIN_OP_SUM, &in, 1, &out, axes, 1, NULL, 0,
                       iters, why, sizeof why);
    double gbs = t > 0 ? 4.0 * (double)n / t / 1e9 : 0;
    char label[64];
    snprintf(label, sizeof label, "sum f32, %zu M", n >> 20);
    if (t < 0)
      printf("%-28s %12s %12.1f %12s %8s  (%s)\n", label, "-",
             tri_bytes / tri2 / 1e9, "GB/s", "-", why);
    else
      printf("%-28s %12.1f %12.1f %12s %7.0f%%\n", label, gbs,
             tri_bytes / tri2 / 1e9, "GB/s",
             100 * gbs / (tri_bytes / tri2 / 1e9));
    jn +=
        (size_t)snprintf(json + jn, sizeof json - jn, ",\"sum f32\":%.3f", gbs);
  }
  snprintf(json + jn, sizeof json - jn,
           ",\"triad_1t\":%.3f,\"triad_all\":%.3f}", tri_bytes / tri1 / 1e9,
           tri_bytes / tri2 / 1e9);
  printf("\n%s\n", json);
  b.f->stream_destroy(b.h, b.s);
  tyto_context_free(ctx);
  return 0;
}
