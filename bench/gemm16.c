/*
 * bench/gemm16: the CPU plugin's bf16 and f16 matrix products and
 * convolutions against f32, side by side in one run: OpenBLAS's
 * cblas_sgemm and oneDNN's bf16 matmul called directly, tyto's MATMUL in
 * f32, bf16 and f16, and tyto's CONV2D and its two gradients in f32, bf16
 * and f16. Shapes: square products of 256 to 2048, and the seed CNN's
 * layers at batch 64 (tools/models.c: conv 1->32 5x5 on 28x28, fc
 * 6272->1024, out 1024->10; the fully connected layers forward and both
 * gradients), with a 32->64 3x3 convolution on 14x14 and a 64->64 1x1 one
 * beside them.
 * Kernels are prepared once and launched repeatedly through the plugin ABI,
 * as a compiled program does; each figure is the best of several timed
 * batches (the first a warm-up), in GFLOP/s of the nominal 2 m n k (for a
 * convolution, 2 N O C/G KH KW OH OW). Prints a table, then one
 * machine-readable line starting with "BENCH ".
 *
 *   build/bench/gemm16 [--quick]
 *
 * Not a test: nothing here fails on timing.
 */
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TYTO_HAVE_DNNL
#include <dnnl.h>
#endif

#include <tyto/tyto.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

#define F32 TYTO_PLUGIN_DTYPE_F32
#define F16 TYTO_PLUGIN_DTYPE_F16
#define BF16 TYTO_PLUGIN_DTYPE_BF16

static int reps = 6;
static int cores = 1;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench {
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

static size_t elems_of(const tyto_plugin_layout *l) {
  size_t n = 1;
  for (uint32_t i = 0; i < l->rank; i++)
    n *= (size_t)l->shape[i];
  return n;
}

/* Launches per timed batch for about 0.1 s at 50 GFLOP/s. */
static int iters_for(double flop) {
  double it = 5e9 / flop;
  return it < 1 ? 1 : it > 200 ? 200 : (int)it;
}

/* Seconds per launch of one op (best of the timed batches), or a negative
 * value when the device does not run it (reason in *why). */
static double time_op(bench *b, uint32_t op, const tyto_plugin_layout *in,
                      uint32_t n_in, const tyto_plugin_layout *out,
                      const int64_t *iattrs, uint32_t n_iattrs, int iters,
                      char *why, size_t why_cap) {
  tyto_plugin_op_desc d = {sizeof d, op,     n_in, 1,    in, out,
                           n_iattrs, iattrs, 0,    NULL, 0,  NULL};
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
    size_t n = elems_of(l), esz = l->dtype == F32 ? 4 : 2;
    unsigned char *init = calloc(1, n * esz + 1);
    /* Inputs of 0.5 (0x3f00 in bf16, 0x3800 in f16). */
    for (size_t j = 0; i < n_in && j < n; j++) {
      float half = 0.5f;
      uint16_t h16 = l->dtype == BF16 ? 0x3f00 : 0x3800;
      memcpy(init + j * esz, l->dtype == F32 ? (void *)&half : (void *)&h16,
             esz);
    }
    b->f->buffer_alloc(b->h, n * esz, &bufs[i]);
    b->f->copy_h2d(b->h, NULL, bufs[i], 0, init, n * esz);
    free(init);
    tyto_plugin_binding *bd = i < n_in ? &bi[i] : &bo;
    *bd = (tyto_plugin_binding){sizeof *bd, bufs[i], 0};
  }
  if (ki.workspace_bytes) {
    b->f->buffer_alloc(b->h, ki.workspace_bytes, &bufs[4]);
    bw.buffer = bufs[4];
  }
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) { /* the first is a warm-up */
    double t0 = now();
    for (int it = 0; it < iters && !e; it++)
      e = b->f->launch(b->h, b->s, k, bi, n_in, &bo, 1,
                       ki.workspace_bytes ? &bw : NULL);
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

/* OpenBLAS's sgemm on row-major operands, C = op(A) op(B). */
static double time_sgemm(int64_t m, int64_t n, int64_t k, int ta, int tb,
                         int iters) {
  float *a = calloc((size_t)(m * k), 4), *bm = calloc((size_t)(k * n), 4),
        *c = calloc((size_t)(m * n), 4);
  /* OpenBLAS's own threads on every core; tyto's MATMUL turns them off
   * (it threads the GEMMs itself), so they go back to 1 after. */
  openblas_set_num_threads(cores);
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    double t0 = now();
    for (int it = 0; it < iters; it++)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                  tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                  a, ta ? (int)m : (int)k, bm, tb ? (int)k : (int)n, 0.0f, c,
                  (int)n);
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  openblas_set_num_threads(1);
  free(a);
  free(bm);
  free(c);
  return best;
}

/* oneDNN's bf16 matmul (bf16 in and out, transposes as strides) on its own
 * engine and stream, or -1 without oneDNN. */
static double time_dnnl(int64_t m, int64_t n, int64_t k, int ta, int tb,
                        int iters) {
#ifdef TYTO_HAVE_DNNL
  dnnl_engine_t eng;
  dnnl_stream_t s;
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
    return -1;
  dnnl_stream_create(&s, eng, dnnl_stream_default_flags);
  dnnl_memory_desc_t md[3];
  dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
  dnnl_memory_desc_init_by_tag(&md[0], 2, da, dnnl_bf16,
                               ta ? dnnl_ba : dnnl_ab);
  dnnl_memory_desc_init_by_tag(&md[1], 2, db, dnnl_bf16,
                               tb ? dnnl_ba : dnnl_ab);
  dnnl_memory_desc_init_by_tag(&md[2], 2, dc, dnnl_bf16, dnnl_ab);
  dnnl_matmul_desc_t d;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
  dnnl_matmul_desc_init(&d, &md[0], &md[1], NULL, &md[2]);
  double best = -1;
  if (dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL) == dnnl_success) {
    dnnl_primitive_create(&p, pd);
    dnnl_memory_t mem[3];
    dnnl_exec_arg_t args[3];
    int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    for (int i = 0; i < 3; i++) {
      dnnl_memory_create(&mem[i], &md[i], eng, DNNL_MEMORY_ALLOCATE);
      void *ptr;
      dnnl_memory_get_data_handle(mem[i], &ptr);
      memset(ptr, 0, dnnl_memory_desc_get_size(&md[i]));
      args[i] = (dnnl_exec_arg_t){ids[i], mem[i]};
    }
    best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
      double t0 = now();
      for (int it = 0; it < iters; it++)
        dnnl_primitive_execute(p, s, 3, args);
      dnnl_stream_wait(s);
      double t = (now() - t0) / iters;
      if (rep > 0 && t < best)
        best = t;
    }
    for (int i = 0; i < 3; i++)
      dnnl_memory_destroy(mem[i]);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
  }
  dnnl_stream_destroy(s);
  dnnl_engine_destroy(eng);
  return best;
#else
  (void)m, (void)n, (void)k, (void)ta, (void)tb, (void)iters;
  return -1;
#endif
}

static double gflops(double flop, double t) {
  return t > 0 ? flop / t / 1e9 : 0;
}

static void cell(double g) {
  if (g > 0)
    printf(" %9.1f", g);
  else
    printf(" %9s", "-");
}

typedef struct mm_case {
  const char *name;
  int64_t m, n, k;
  int ta, tb;
} mm_case;

static size_t mm_row(bench *b, const mm_case *c, char *json, size_t jn,
                     size_t cap) {
  double flop = 2.0 * (double)c->m * (double)c->n * (double)c->k;
  int iters = iters_for(flop);
  char why[512];
  int64_t sa[2] = {c->ta ? c->k : c->m, c->ta ? c->m : c->k},
          sb[2] = {c->tb ? c->n : c->k, c->tb ? c->k : c->n},
          sc[2] = {c->m, c->n}, flags[2] = {c->ta, c->tb};
  double g[5];
  g[0] = gflops(flop, time_sgemm(c->m, c->n, c->k, c->ta, c->tb, iters));
  uint32_t dts[3] = {F32, BF16, F16};
  for (int i = 0; i < 3; i++) {
    tyto_plugin_layout in[2] = {packed(dts[i], 2, sa), packed(dts[i], 2, sb)};
    tyto_plugin_layout out = packed(dts[i], 2, sc);
    g[1 + i] = gflops(flop, time_op(b, TYTO_PLUGIN_OP_MATMUL, in, 2, &out,
                                    flags, 2, iters, why, sizeof why));
  }
  g[4] = gflops(flop, time_dnnl(c->m, c->n, c->k, c->ta, c->tb, iters));
  printf("%-30s", c->name);
  cell(g[0]);
  cell(g[1]);
  cell(g[2]);
  cell(g[4]);
  cell(g[3]);
  printf(" %8.2f\n", g[1] > 0 ? g[2] / g[1] : 0);
  return jn + (size_t)snprintf(json + jn, cap - jn,
                               ",\"%s\":{\"sgemm\":%.2f,\"f32\":%.2f,"
                               "\"bf16\":%.2f,\"dnnl_bf16\":%.2f,\"f16\":%.2f}",
                               c->name, g[0], g[1], g[2], g[4], g[3]);
}

typedef struct conv_case {
  const char *name;
  uint32_t op;
  int64_t N, C, H, W, O, K, pad;
} conv_case;

static size_t conv_row(bench *b, const conv_case *c, char *json, size_t jn,
                       size_t cap) {
  int64_t OH = c->H + 2 * c->pad - c->K + 1, OW = c->W + 2 * c->pad - c->K + 1;
  double flop = 2.0 * (double)(c->N * c->O * c->C * c->K * c->K * OH * OW);
  int iters = iters_for(flop);
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, c->K, c->K},
          ys[4] = {c->N, c->O, OH, OW}, a[7] = {1, 1, c->pad, c->pad, 1, 1, 1};
  const int64_t *shapes[3];
  if (c->op == TYTO_PLUGIN_OP_CONV2D)
    shapes[0] = xs, shapes[1] = ws, shapes[2] = ys;
  else if (c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA)
    shapes[0] = ys, shapes[1] = ws, shapes[2] = xs;
  else
    shapes[0] = xs, shapes[1] = ys, shapes[2] = ws;
  char why[512];
  double g[3];
  uint32_t dts[3] = {F32, BF16, F16};
  for (int i = 0; i < 3; i++) {
    tyto_plugin_layout in[2] = {packed(dts[i], 4, shapes[0]),
                                packed(dts[i], 4, shapes[1])};
    tyto_plugin_layout out = packed(dts[i], 4, shapes[2]);
    g[i] = gflops(flop,
                  time_op(b, c->op, in, 2, &out, a, 7, iters, why, sizeof why));
  }
  printf("%-30s %9s", c->name, "");
  cell(g[0]);
  cell(g[1]);
  printf(" %9s", "");
  cell(g[2]);
  printf(" %8.2f\n", g[0] > 0 ? g[1] / g[0] : 0);
  return jn + (size_t)snprintf(json + jn, cap - jn,
                               ",\"%s\":{\"f32\":%.2f,\"bf16\":%.2f,"
                               "\"f16\":%.2f}",
                               c->name, g[0], g[1], g[2]);
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  if (quick)
    reps = 3;
  tyto_context_options o;
  tyto_context_options_init(&o);
  o.devices = "cpu";
  tyto_context *ctx;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    fprintf(stderr, "bench/gemm16: %s\n", tyto_errmsg());
    return 1;
  }
  tyto_device *dev = tyto_context_device(ctx, 0);
  bench b = {&dev->plugin->dfns, dev->handle, NULL};
  b.f->stream_create(b.h, &b.s);
  const tyto_topology *topo = tyto_context_topology(ctx);
  cores = topo->cores ? (int)topo->cores : 1;
  printf("bench/gemm16 on %s (%u cores), tyto %s\n%s\n\n", dev->info.name,
         topo->cores, tyto_version(), dev->info.driver_version);
  printf("%-30s %9s %9s %9s %9s %9s %8s\n", "GFLOP/s", "sgemm", "f32", "bf16",
         "oneDNN", "f16", "bf16/f32");
  printf("%-30s %9s %9s %9s %9s %9s\n", "", "OpenBLAS", "tyto", "tyto", "bf16",
         "tyto");
  char json[8192];
  size_t jn =
      (size_t)snprintf(json, sizeof json, "BENCH {\"bench\":\"gemm16\"");

  mm_case mm[] = {
      {"matmul 256", 256, 256, 256, 0, 0},
      {"matmul 512", 512, 512, 512, 0, 0},
      {"matmul 1024", 1024, 1024, 1024, 0, 0},
      {"matmul 2048", 2048, 2048, 2048, 0, 0},
      {"cnn fc 64x6272 . 6272x1024", 64, 1024, 6272, 0, 0},
      {"cnn fc dW 6272x64^T . 64x1024", 6272, 1024, 64, 1, 0},
      {"cnn fc dx 64x1024 . 1024x6272^T", 64, 6272, 1024, 0, 1},
      {"cnn out 64x1024 . 1024x10", 64, 10, 1024, 0, 0},
  };
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    if (quick && mm[i].m * mm[i].n * mm[i].k > (int64_t)1 << 28)
      continue;
    jn = mm_row(&b, &mm[i], json, jn, sizeof json);
  }
  conv_case cv[] = {
      {"cnn conv fwd", TYTO_PLUGIN_OP_CONV2D, 64, 1, 28, 28, 32, 5, 2},
      {"cnn conv dW", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 64, 1, 28, 28, 32,
       5, 2},
      {"cnn conv dx", TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 64, 1, 28, 28, 32, 5,
       2},
      {"conv 32->64 3x3 14x14 fwd", TYTO_PLUGIN_OP_CONV2D, 64, 32, 14, 14, 64,
       3, 1},
      {"conv 32->64 3x3 14x14 dW", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 64,
       32, 14, 14, 64, 3, 1},
      {"conv 32->64 3x3 14x14 dx", TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 64, 32,
       14, 14, 64, 3, 1},
      {"conv 64->64 1x1 14x14 fwd", TYTO_PLUGIN_OP_CONV2D, 64, 64, 14, 14, 64,
       1, 0},
  };
  for (size_t i = 0; i < sizeof cv / sizeof cv[0]; i++)
    jn = conv_row(&b, &cv[i], json, jn, sizeof json);
  snprintf(json + jn, sizeof json - jn, "}");
  printf("\n%s\n", json);
  b.f->stream_destroy(b.h, b.s);
  tyto_context_free(ctx);
  return 0;
}
