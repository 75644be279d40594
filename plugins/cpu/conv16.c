/*
 * CONV2D, CONV2D_BACKWARD_DATA and CONV2D_BACKWARD_FILTER in bf16 and f16
 * (ABI 1.5). sdk/docs/ops.md: read the operands exactly into f32, sum in
 * f32 or wider, round each result once to the 16-bit dtype. The
 * descriptor is checked as for f32 and f64 (conv.c's check, which the
 * fallback below needs to pass anyway); two paths run it, picked at
 * prepare:
 *
 *  - on oneDNN's direct convolution primitives (forward, backward data,
 *    backward weights) where it has kernels for the dtype (asked at
 *    prepare: oneDNN 2.6 has them for bf16, not for f16 on a CPU), 16-bit
 *    tensors in and out, f32 accumulation, one rounding of each result
 *    (bias included). Most let the primitive choose its tensor formats
 *    (the blocked nChw16c / OIhw16i16o of its AVX512-BF16 kernels:
 *    several times the rate of plain nchw, which oneDNN 2.6 runs as
 *    im2col + GEMM), with reorders, bit for bit, between them and plain
 *    nchw / oihw; 1x1 kernels, data gradients of layers with few channels
 *    and weight gradients over small planes run on plain formats
 *    (cv16_layout). A tensor bound with strides or an offset that plain
 *    formats cannot say is first copied, bit for bit, to a dense block of
 *    the workspace (the output last).
 *  - otherwise (f16 with oneDNN 2.6, oneDNN offering only its reference
 *    code, no oneDNN in the build, TYTO_CPU_NO_DNNL) and for any op with
 *    an empty tensor: the operands are converted exactly to f32 blocks of
 *    the workspace, conv.c's f32 op (oneDNN f32 or im2col + OpenBLAS)
 *    computes an f32 block, rounded once into the output.
 *
 * Which path an op took is logged at prepare (debug level).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/geometry.h"
#include "onednn.h"
#include "ops.h"
#include "stage16.h"

enum { CV16_F32, CV16_DNNL };

/* oneDNN's steps: reorders of the inputs, the convolution, the reorder of
 * the output. */
#define CV16_STEPS 5

typedef struct cv16_op {
  cpu_op base;
  const tyto_plugin_host *host;
  uint32_t code, n_in;
  int path;
  tpc_conv g;
  cpu_stage st[4];   /* the inputs, then the output, and their copies */
  int staged[4];     /* whether a tensor goes through its copy */
  uint64_t ws_at[4]; /* the copies' offsets in the workspace */
  /* CV16_F32: conv.c's f32 op on the copies. */
  cpu_op *inner;
  cpu_desc inner_desc;
  uint64_t inner_at;
#ifdef TYTO_HAVE_DNNL
  dnnl_primitive_t prim;
  int arg[4];                   /* each tensor's oneDNN argument */
  dnnl_memory_desc_t user[4];   /* each tensor in its plain format */
  dnnl_memory_desc_t inside[4]; /* each tensor as the primitive wants it */
  dnnl_primitive_t reorder[4];  /* user <-> inside; NULL when they agree */
  uint64_t inside_at[4];        /* reordered tensors in the workspace */
  dnnl_memory_desc_t scratch[CV16_STEPS]; /* per primitive: 0 conv */
  uint64_t scratch_at;                    /* one region, the largest */
#endif
} cv16_op;

static uint32_t cv16_n(const cv16_op *op) {
  return op->n_in + 1;
}

#ifdef TYTO_HAVE_DNNL
static tyto_plugin_error *dnnl_failed(const cv16_op *op, dnnl_status_t st) {
  return op->host->error_new(
      st == dnnl_out_of_memory ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                               : TYTO_PLUGIN_ERR_DEVICE,
      "%s: oneDNN's %s convolution failed with status %d; set "
      "TYTO_CPU_NO_DNNL=1 to compute through f32",
      cpu_op_name(op->code), cpu_dtype_name(op->st[0].src.dtype), (int)st);
}

/* Runs oneDNN's steps on the tensors at p (bound or copies). */
static dnnl_status_t cv16_run_dnnl(const cv16_op *op, unsigned char *const *p,
                                   unsigned char *ws) {
  uint32_t n = cv16_n(op);
  void *scratch[CV16_STEPS];
  for (int i = 0; i < CV16_STEPS; i++)
    scratch[i] =
        dnnl_memory_desc_get_size(&op->scratch[i]) ? ws + op->scratch_at : NULL;
  void *at[4];
  for (uint32_t i = 0; i < n; i++)
    at[i] = op->reorder[i] ? ws + op->inside_at[i] : p[i];
  dnnl_status_t st = dnnl_success;
  for (uint32_t i = 0; i < op->n_in && st == dnnl_success; i++)
    if (op->reorder[i]) {
      cpu_dnnl_arg a[3] = {
          {DNNL_ARG_FROM, &op->user[i], p[i]},
          {DNNL_ARG_TO, &op->inside[i], at[i]},
          {DNNL_ARG_SCRATCHPAD, &op->scratch[1 + i], scratch[1 + i]}};
      st = cpu_dnnl_exec(op->reorder[i], 3, a);
    }
  if (st == dnnl_success) {
    cpu_dnnl_arg a[5];
    for (uint32_t i = 0; i < n; i++)
      a[i] = (cpu_dnnl_arg){op->arg[i], &op->inside[i], at[i]};
    a[n] = (cpu_dnnl_arg){DNNL_ARG_SCRATCHPAD, &op->scratch[0], scratch[0]};
    st = cpu_dnnl_exec(op->prim, (int)n + 1, a);
  }
  uint32_t o = op->n_in;
  if (st == dnnl_success && op->reorder[o]) {
    cpu_dnnl_arg a[3] = {
        {DNNL_ARG_FROM, &op->inside[o], at[o]},
        {DNNL_ARG_TO, &op->user[o], p[o]},
        {DNNL_ARG_SCRATCHPAD, &op->scratch[1 + o], scratch[1 + o]}};
    st = cpu_dnnl_exec(op->reorder[o], 3, a);
  }
  return st;
}
#endif

static tyto_plugin_error *cv16_exec(const cpu_op *base, const cpu_desc *d,
                                    unsigned char *const *args,
                                    cpu_pool *pool) {
  const cv16_op *op = (const cv16_op *)base;
  unsigned char *ws = op->base.workspace_bytes ? args[op->n_in + 1] : NULL;
  uint32_t n = cv16_n(op);
  unsigned char *p[4];
  for (uint32_t i = 0; i < n; i++) {
    const tyto_plugin_layout *l = i < op->n_in ? &d->in[i].l : &d->out[0].l;
    p[i] = op->staged[i] ? ws + op->ws_at[i] : args[i] + l->offset * 2;
    if (op->staged[i] && i < op->n_in)
      cpu_stage_in(&op->st[i], args[i], p[i], pool);
  }
  if (op->path == CV16_F32) {
    unsigned char *inner_args[5];
    for (uint32_t i = 0; i < n; i++)
      inner_args[i] = p[i];
    inner_args[n] = op->inner->workspace_bytes ? ws + op->inner_at : NULL;
    tyto_plugin_error *e =
        op->inner->run(op->inner, &op->inner_desc, inner_args, pool);
    if (e)
      return e;
  }
#ifdef TYTO_HAVE_DNNL
  if (op->path == CV16_DNNL) {
    dnnl_status_t st = cv16_run_dnnl(op, p, ws);
    if (st != dnnl_success)
      return dnnl_failed(op, st);
  }
#endif
  if (op->staged[op->n_in])
    cpu_stage_out(&op->st[op->n_in], p[op->n_in], args[op->n_in], pool);
  return NULL;
}

static void cv16_destroy(cpu_op *base) {
  cv16_op *op = (cv16_op *)base;
  if (op->inner)
    op->inner->destroy(op->inner);
#ifdef TYTO_HAVE_DNNL
  if (op->prim)
    dnnl_primitive_destroy(op->prim);
  for (int i = 0; i < 4; i++)
    if (op->reorder[i])
      dnnl_primitive_destroy(op->reorder[i]);
#endif
  free(op);
}

/* ------------------------------------------------------------------------ */
/* oneDNN                                                                    */
/* ------------------------------------------------------------------------ */

#ifdef TYTO_HAVE_DNNL
enum { CV16_BLOCKED, CV16_PLAIN };

/* Where oneDNN 2.6's bf16 convolutions run fastest here, by fixed rules
 * rather than timings, so that runs stay bit-reproducible. Measured on 2
 * cores of an AVX512-BF16 EPYC, N 64, reorders included:
 *  - 1x1 kernels are GEMMs, which it runs best on plain nchw: blocked
 *    formats add reorders of whole tensors to kernels 2 to 8 times slower
 *    (C 32, O 32, 28x28: forward 0.35 against 1.1 ms, weight gradient 0.8
 *    against 4.3 ms);
 *  - so is the data gradient of a layer with few input channels per group
 *    (a CNN's first): C 1, O 32, 28x28, 5x5: 0.5 to 0.8 ms plain, 2.2 ms
 *    blocked (and 1.1 ms through f32 with its conversions); C 3: 1.3
 *    against 1.8 ms; even at C 4; blocked ahead from C 8 (2.3 against 3.5
 *    ms);
 *  - the weight gradient over small planes runs best on plain formats (C
 *    64, O 64, 7x7, 3x3: 1.4 against 4.5 ms; even at 14x14);
 *  - everything else on blocked formats (C 32, O 64, 14x14, 3x3: forward
 *    1.2 to 2.4 ms against 6.7, data gradient 1.8 to 2.6 against 5.6). */
static int cv16_layout(const cv16_op *op) {
  const tpc_conv *g = &op->g;
  if (g->KH == 1 && g->KW == 1)
    return CV16_PLAIN;
  if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA && g->C / g->G < 4)
    return CV16_PLAIN;
  if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER && g->OH * g->OW <= 64)
    return CV16_PLAIN;
  return CV16_BLOCKED;
}

/* x, w, bias, y of the geometry in bf16: plain nchw, oihw (goihw with
 * groups) and x, or (any) in the formats the primitive will pick, the
 * bias plain. */
static int cv16_mds(const tpc_conv *g, dnnl_data_type_t dt, int any,
                    dnnl_memory_desc_t md[4]) {
  dnnl_dims_t xd = {g->N, g->C, g->H, g->W}, yd = {g->N, g->O, g->OH, g->OW},
              bd = {g->O};
  dnnl_format_tag_t img = any ? dnnl_format_tag_any : dnnl_nchw;
  int ok =
      dnnl_memory_desc_init_by_tag(&md[0], 4, xd, dt, img) == dnnl_success &&
      dnnl_memory_desc_init_by_tag(&md[2], 1, bd, dt, dnnl_x) == dnnl_success &&
      dnnl_memory_desc_init_by_tag(&md[3], 4, yd, dt, img) == dnnl_success;
  if (g->G > 1) {
    dnnl_dims_t wd = {g->G, g->O / g->G, g->C / g->G, g->KH, g->KW};
    return ok && dnnl_memory_desc_init_by_tag(&md[1], 5, wd, dt,
                                              any ? dnnl_format_tag_any
                                                  : dnnl_goihw) == dnnl_success;
  }
  dnnl_dims_t wd = {g->O, g->C, g->KH, g->KW};
  return ok && dnnl_memory_desc_init_by_tag(&md[1], 4, wd, dt,
                                            any ? dnnl_format_tag_any
                                                : dnnl_oihw) == dnnl_success;
}

/* Each tensor's plain descriptor and oneDNN argument. */
static int cv16_user_mds(cv16_op *op) {
  dnnl_memory_desc_t md[4];
  if (!cv16_mds(&op->g, cpu_dnnl_type16(op->st[0].src.dtype), 0, md))
    return 0;
  const dnnl_memory_desc_t x = md[0], w = md[1], b = md[2], y = md[3];
  switch (op->code) {
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA: /* dy, w -> dx */
    op->user[0] = y, op->arg[0] = DNNL_ARG_DIFF_DST;
    op->user[1] = w, op->arg[1] = DNNL_ARG_WEIGHTS;
    op->user[2] = x, op->arg[2] = DNNL_ARG_DIFF_SRC;
    break;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER: /* x, dy -> dw */
    op->user[0] = x, op->arg[0] = DNNL_ARG_SRC;
    op->user[1] = y, op->arg[1] = DNNL_ARG_DIFF_DST;
    op->user[2] = w, op->arg[2] = DNNL_ARG_DIFF_WEIGHTS;
    break;
  default: /* x, w, (bias) -> y */
    op->user[0] = x, op->arg[0] = DNNL_ARG_SRC;
    op->user[1] = w, op->arg[1] = DNNL_ARG_WEIGHTS;
    if (op->n_in > 2)
      op->user[2] = b, op->arg[2] = DNNL_ARG_BIAS;
    op->user[op->n_in] = y, op->arg[op->n_in] = DNNL_ARG_DST;
    break;
  }
  return 1;
}

/* The convolution's primitive descriptor on plain or blocked formats (the
 * bias always plain); NULL when oneDNN has none. */
static dnnl_primitive_desc_t cv16_pd(const cv16_op *op, int any,
                                     dnnl_primitive_attr_t attr) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  const tpc_conv *g = &op->g;
  dnnl_memory_desc_t md[4];
  dnnl_dims_t strides = {g->sh, g->sw}, pad = {g->ph, g->pw},
              dil = {g->dh - 1, g->dw - 1};
  if (!cv16_mds(g, cpu_dnnl_type16(op->st[0].src.dtype), any, md))
    return NULL;
  int fwd = op->code == TYTO_PLUGIN_OP_CONV2D;
  dnnl_convolution_desc_t cd, bwd;
  int ok =
      dnnl_dilated_convolution_forward_desc_init(
          &cd, fwd ? dnnl_forward_inference : dnnl_forward_training,
          dnnl_convolution_direct, &md[0], &md[1], g->has_bias ? &md[2] : NULL,
          &md[3], strides, dil, pad, pad) == dnnl_success;
  dnnl_primitive_desc_t pd = NULL, hint = NULL;
  if (!ok)
    return NULL;
  if (fwd) {
    /* None of oneDNN 2.6's AMX forward kernels: the first it offers on a
     * Sapphire Rapids, jit:avx512_core_amx_bf16, gives NaN where an
     * infinity in x meets its zero padding (tyto-conform's specials),
     * where ops.md keeps the infinity; the next, brgconv:avx512_core_bf16,
     * keeps it. The backward kernels on AMX keep them and stay. */
    return cpu_dnnl_pd_avoiding(&cd, attr, NULL, "amx");
  }
  /* oneDNN picks a backward implementation from the forward one it would
   * run: a forward training primitive descriptor is the hint. */
  ok = dnnl_primitive_desc_create(&hint, &cd, NULL, eng, NULL) == dnnl_success;
  if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA)
    ok = ok && dnnl_dilated_convolution_backward_data_desc_init(
                   &bwd, dnnl_convolution_direct, &md[0], &md[1], &md[3],
                   strides, dil, pad, pad) == dnnl_success;
  else
    ok = ok && dnnl_dilated_convolution_backward_weights_desc_init(
                   &bwd, dnnl_convolution_direct, &md[0], &md[1], NULL, &md[3],
                   strides, dil, pad, pad) == dnnl_success;
  if (!ok ||
      dnnl_primitive_desc_create(&pd, &bwd, attr, eng, hint) != dnnl_success)
    pd = NULL;
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  return pd;
}

/* A reorder between a tensor's plain format and the primitive's (in: to
 * the primitive's), its scratchpad into *scratch; NULL on failure. */
static dnnl_primitive_t cv16_reorder(const dnnl_memory_desc_t *from,
                                     const dnnl_memory_desc_t *to,
                                     dnnl_primitive_attr_t attr,
                                     dnnl_memory_desc_t *scratch) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t r = NULL;
  if (dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr) !=
      dnnl_success)
    return NULL;
  const dnnl_memory_desc_t *sp =
      dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (sp)
    *scratch = *sp;
  if (dnnl_primitive_create(&r, pd) != dnnl_success)
    r = NULL;
  dnnl_primitive_desc_destroy(pd);
  return r;
}

/* Builds oneDNN's steps into op, reserving their workspace from *used;
 * 0 when oneDNN offers no fast kernel (op is then as before). */
static int cv16_plan_dnnl(cv16_op *op, uint64_t *used) {
  if (!cpu_dnnl_engine() || !cv16_user_mds(op))
    return 0;
  dnnl_primitive_attr_t attr = cpu_dnnl_attr();
  if (!attr)
    return 0;
  dnnl_primitive_desc_t pd = cv16_pd(op, cv16_layout(op) == CV16_BLOCKED, attr);
  int ok = pd && !cpu_dnnl_is_ref(pd);
  uint32_t n = cv16_n(op);
  for (uint32_t i = 0; ok && i < n; i++) {
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, op->arg[i]);
    ok = md != NULL;
    if (!ok)
      break;
    op->inside[i] = *md;
    if (dnnl_memory_desc_equal(md, &op->user[i]))
      continue;
    op->reorder[i] =
        i < op->n_in
            ? cv16_reorder(&op->user[i], md, attr, &op->scratch[1 + i])
            : cv16_reorder(md, &op->user[i], attr, &op->scratch[1 + i]);
    ok = op->reorder[i] != NULL;
  }
  if (ok) {
    const dnnl_memory_desc_t *sp =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp)
      op->scratch[0] = *sp;
    ok = dnnl_primitive_create(&op->prim, pd) == dnnl_success;
    if (!ok)
      op->prim = NULL;
  }
  if (ok)
    op->host->log(op->host->ctx, TYTO_PLUGIN_LOG_DEBUG, "%s %s: oneDNN %s",
                  cpu_op_name(op->code), cpu_dtype_name(op->st[0].src.dtype),
                  cpu_dnnl_impl(pd));
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  if (!ok) {
    for (int i = 0; i < 4; i++) {
      if (op->reorder[i])
        dnnl_primitive_destroy(op->reorder[i]);
      op->reorder[i] = NULL;
    }
    memset(op->scratch, 0, sizeof op->scratch);
    return 0;
  }
  /* Tensors bound as plain formats cannot say go through dense copies. */
  for (uint32_t i = 0; i < n; i++) {
    op->staged[i] = !tpc_dense(&op->st[i].src);
    if (op->staged[i])
      op->ws_at[i] = cpu_ws_take(used, cpu_stage_bytes(&op->st[i]));
    if (op->reorder[i])
      op->inside_at[i] =
          cpu_ws_take(used, dnnl_memory_desc_get_size(&op->inside[i]));
  }
  uint64_t scratch = 0;
  for (int i = 0; i < CV16_STEPS; i++) {
    uint64_t b = dnnl_memory_desc_get_size(&op->scratch[i]);
    scratch = b > scratch ? b : scratch;
  }
  op->scratch_at = cpu_ws_take(used, scratch);
  return 1;
}
#endif

/* ------------------------------------------------------------------------ */
/* Through f32                                                               */
/* ------------------------------------------------------------------------ */

static tyto_plugin_error *cv16_plan_f32(const tyto_plugin_host *h, cv16_op *op,
                                        const cpu_desc *desc, uint64_t *used) {
  cpu_desc *in = &op->inner_desc;
  memset(in, 0, sizeof *in);
  in->d = desc->d; /* its attributes */
  in->n_in = op->n_in;
  in->n_out = 1;
  uint32_t n = cv16_n(op);
  for (uint32_t i = 0; i < n; i++) {
    tyto_plugin_layout l = op->st[i].src;
    cpu_stage_init(&op->st[i], &l, TYTO_PLUGIN_DTYPE_F32);
    op->staged[i] = 1;
    op->ws_at[i] = cpu_ws_take(used, cpu_stage_bytes(&op->st[i]));
    cpu_stage_reach(&op->st[i], i < op->n_in ? &in->in[i] : &in->out[0]);
  }
  tyto_plugin_error *e = cpu_conv_prepare(h, in, &op->inner);
  in->d = NULL; /* the caller's, valid only now; conv.c's run reads none */
  if (!e)
    op->inner_at = cpu_ws_take(used, op->inner->workspace_bytes);
  return e;
}

/* ------------------------------------------------------------------------ */
/* The family                                                                */
/* ------------------------------------------------------------------------ */

tyto_plugin_error *cpu_conv16_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  return cpu_conv_check(h, desc);
}

tyto_plugin_error *cpu_conv16_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  tyto_plugin_error *e = cpu_conv_check(h, desc);
  if (e)
    return e;
  cv16_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->base.run = cv16_exec;
  op->base.destroy = cv16_destroy;
  op->host = h;
  op->code = desc->d->op;
  op->n_in = desc->n_in;
  tpc_operands a;
  char why[1024];
  tpc_operands_init(&a, desc->d, desc->n_in, &desc->in[0].l, sizeof desc->in[0],
                    desc->n_out, &desc->out[0].l, sizeof desc->out[0], 1);
  tpc_conv_check(&a, &op->g, why, sizeof why); /* passed: cpu_conv_check */
  int empty = 0;
  for (uint32_t i = 0; i < cv16_n(op); i++) {
    const cpu_reach *r = i < op->n_in ? &desc->in[i] : &desc->out[0];
    cpu_stage_init(&op->st[i], &r->l, r->l.dtype);
    empty |= r->empty;
  }
  uint32_t dtype = desc->out[0].l.dtype;
  uint64_t used = 0;
  op->path = CV16_F32;
#ifdef TYTO_HAVE_DNNL
  if (!empty && !cpu_dnnl_off() && cv16_plan_dnnl(op, &used))
    op->path = CV16_DNNL;
#else
  (void)empty;
#endif
  if (op->path == CV16_F32) {
    e = cv16_plan_f32(h, op, desc, &used);
    if (e) {
      cv16_destroy(&op->base);
      return e;
    }
    h->log(h->ctx, TYTO_PLUGIN_LOG_DEBUG,
           "%s %s: converted to f32 (conv.c's f32 kernels), rounded once",
           cpu_op_name(op->code), cpu_dtype_name(dtype));
  }
  op->base.workspace_bytes = used;
  *out = &op->base;
  return NULL;
}
