/*
 * perf mode of tyto-conform (see perf.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sentinel.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cf_bench *next(cf_bench *b, size_t *n, uint32_t op, const char *name,
                      uint32_t dtype) {
  cf_bench *x = &b[(*n)++];
  memset(x, 0, sizeof *x);
  x->c.op = op;
  x->c.op_name = cf_op_name(op);
  x->c.dtype = dtype;
  snprintf(x->c.name, sizeof x->c.name, "%s", name);
  return x;
}

int cf_perf_benches(uint32_t dtype, cf_bench **out, size_t *n) {
  const double es = (double)cf_dtype_size(dtype);
  cf_bench *b = calloc(10, sizeof *b), *x;
  if (b == NULL)
    return -1;
  *n = 0;
  static const int64_t sizes[3] = {256, 512, 1024};
  for (int i = 0; i < 3; i++) {
    char name[40];
    const int64_t s = sizes[i], sh[2] = {s, s};
    snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)s, (long long)s,
             (long long)s);
    x = next(b, n, TYTO_PLUGIN_OP_MATMUL, name, dtype);
    cf_tensor_set(&x->c.in[0], dtype, 2, sh, NULL, 0);
    cf_tensor_set(&x->c.in[1], dtype, 2, sh, NULL, 0);
    cf_tensor_set(&x->c.out[0], dtype, 2, sh, NULL, 0);
    x->c.n_in = 2;
    x->c.n_out = 1;
    x->c.n_iattrs = 2;
    x->work = 2.0 * (double)s * (double)s * (double)s;
    x->unit = "GFLOP/s";
  }
  {
    static const int64_t xs[4] = {8, 64, 56, 56}, ws[4] = {64, 64, 3, 3};
    static const int64_t at[7] = {1, 1, 1, 1, 1, 1, 1};
    x = next(b, n, TYTO_PLUGIN_OP_CONV2D, "[8,64,56,56] 3x3 p1", dtype);
    cf_tensor_set(&x->c.in[0], dtype, 4, xs, NULL, 0);
    cf_tensor_set(&x->c.in[1], dtype, 4, ws, NULL, 0);
    cf_tensor_set(&x->c.out[0], dtype, 4, xs, NULL, 0);
    x->c.n_in = 2;
    x->c.n_out = 1;
    x->c.n_iattrs = 7;
    memcpy(x->c.iattrs, at, sizeof at);
    x->work = 2.0 * 8 * 64 * 56 * 56 * 64 * 9;
    x->unit = "GFLOP/s";
  }
  const int64_t big[1] = {1 << 22};
  x = next(b, n, TYTO_PLUGIN_OP_ADD, "add [4M]", dtype);
  for (int i = 0; i < 2; i++)
    cf_tensor_set(&x->c.in[i], dtype, 1, big, NULL, 0);
  cf_tensor_set(&x->c.out[0], dtype, 1, big, NULL, 0);
  x->c.n_in = 2;
  x->c.n_out = 1;
  x->work = 3.0 * es * (double)big[0];
  x->unit = "GB/s";

  x = next(b, n, TYTO_PLUGIN_OP_COPY, "copy [4M]", dtype);
  cf_tensor_set(&x->c.in[0], dtype, 1, big, NULL, 0);
  cf_tensor_set(&x->c.out[0], dtype, 1, big, NULL, 0);
  x->c.n_in = 1;
  x->c.n_out = 1;
  x->work = 2.0 * es * (double)big[0];
  x->unit = "GB/s";

  /* relu(a * b + 0.5) * tanh(a): five instructions, three streams. */
  x = next(b, n, TYTO_PLUGIN_OP_FUSED, "relu(a*b+.5)*tanh(a) [4M]", dtype);
  for (int i = 0; i < 2; i++)
    cf_tensor_set(&x->c.in[i], dtype, 1, big, NULL, 0);
  cf_tensor_set(&x->c.out[0], dtype, 1, big, NULL, 0);
  x->c.n_in = 2;
  x->c.n_out = 1;
  static const struct {
    uint32_t op, a0, a1;
    double attr;
  } prog[] = {
      {TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0}, {TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0},
      {TYTO_PLUGIN_OP_MUL, 0, 1, 0},      {TYTO_PLUGIN_FUSED_CONST, 0, 0, 0.5},
      {TYTO_PLUGIN_OP_ADD, 2, 3, 0},      {TYTO_PLUGIN_OP_RELU, 4, 0, 0},
      {TYTO_PLUGIN_OP_TANH, 0, 0, 0},     {TYTO_PLUGIN_OP_MUL, 5, 6, 0},
      {TYTO_PLUGIN_FUSED_OUTPUT, 7, 0, 0}};
  for (size_t i = 0; i < sizeof prog / sizeof prog[0]; i++) {
    tyto_plugin_fused_instr *in = &x->c.instrs[x->c.n_instrs++];
    in->struct_size = sizeof *in;
    in->op = prog[i].op;
    in->arg[0] = prog[i].a0;
    in->arg[1] = prog[i].a1;
    in->attr = prog[i].attr;
    in->dtype = dtype;
  }
  x->work = 3.0 * es * (double)big[0];
  x->unit = "GB/s";
  *out = b;
  return 0;
}

cf_status cf_perf_time(cf_device *d, cf_bench *b, int warmup, int reps,
                       double *best, char *err, size_t size) {
  tyto_plugin_op_desc desc;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  cf_gbuf bufs[CF_MAX_IN + CF_MAX_OUT + 1];
  tyto_plugin_binding bind[CF_MAX_IN + CF_MAX_OUT + 1];
  const size_t es = cf_dtype_size(b->c.dtype);
  tyto_plugin_error *e = NULL;
  cf_status st = CF_FAILED;
  uint32_t nb = 0, nt = b->c.n_in + b->c.n_out;

  *best = 0;
  cf_case_desc(&b->c, &desc);
  if (d->fns->supports_op)
    e = d->fns->supports_op(d->dev, &desc);
  if (e == NULL && d->fns->prepare == NULL)
    e = cf_error(TYTO_PLUGIN_ERR_UNSUPPORTED, "memory-only device");
  if (e == NULL)
    e = d->fns->prepare(d->dev, &desc, &k, &ki);
  if (e != NULL) {
    st = e->code == TYTO_PLUGIN_ERR_UNSUPPORTED ? CF_UNSUPPORTED : CF_FAILED;
    cf_error_take(e, err, size);
    return st;
  }
  for (; nb < nt && e == NULL; nb++) {
    const cf_tensor *t =
        nb < b->c.n_in ? &b->c.in[nb] : &b->c.out[nb - b->c.n_in];
    e = cf_gbuf_alloc(d, &bufs[nb], (uint64_t)t->storage * es, NULL);
    bind[nb] =
        (tyto_plugin_binding){sizeof bind[0], bufs[nb].buf, bufs[nb].guard};
  }
  if (e == NULL && ki.workspace_bytes) {
    e = cf_gbuf_alloc(d, &bufs[nb], ki.workspace_bytes, NULL);
    bind[nb] =
        (tyto_plugin_binding){sizeof bind[0], bufs[nb].buf, bufs[nb].guard};
    nb++;
  }
  const tyto_plugin_binding *ws = ki.workspace_bytes ? &bind[nt] : NULL;
  for (int i = 0; i < warmup + reps && e == NULL; i++) {
    double t0 = now();
    e = d->fns->launch(d->dev, d->stream, k, bind, b->c.n_in, bind + b->c.n_in,
                       b->c.n_out, ws);
    if (e == NULL)
      e = d->fns->stream_synchronize(d->dev, d->stream);
    double t = now() - t0;
    if (i >= warmup && (*best == 0 || t < *best))
      *best = t;
  }
  if (e != NULL)
    cf_error_take(e, err, size);
  else
    st = CF_RAN;
  for (uint32_t i = 0; i < nb; i++)
    cf_gbuf_free(d, &bufs[i]);
  if (d->fns->kernel_release)
    d->fns->kernel_release(d->dev, k);
  return st;
}
