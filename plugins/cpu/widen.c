/*
 * The poolings (MAX_POOL2D .. AVG_POOL2D_BACKWARD) in F16 and BF16: conv.c's
 * f32 kernels with the conversions at the edges. Each input is cast into
 * a dense f32 copy in the workspace, the f32 op runs on the copies, and
 * each output is rounded once from its dense f32 result into its own
 * layout. So a result is the f32 op's on the exact inputs, rounded once to
 * the dtype, as sdk/docs/ops.md's "Dtypes" asks, and the poolings keep one
 * implementation. (The conversions cost two passes over memory; the
 * poolings are a small part of a network's time.)
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct widen_op {
  cpu_op base;
  cpu_op *inner;  /* conv.c's op, prepared for fdesc */
  cpu_desc fdesc; /* every operand dense f32 (fdesc.d NULL after prepare) */
  cpu_cast cast[2 * CPU_MAX_IO]; /* inputs to f32, then f32 to outputs */
  uint64_t off[2 * CPU_MAX_IO];  /* the f32 copies in the workspace */
  uint64_t inner_off;            /* the inner op's workspace */
} widen_op;

/* A dense row-major f32 layout of l's shape, measured as kernels.c would. */
static cpu_reach dense_f32(const cpu_reach *r) {
  cpu_reach d = *r;
  d.l.dtype = TYTO_PLUGIN_DTYPE_F32;
  d.l.offset = 0;
  int64_t st = 1;
  for (uint32_t a = d.l.rank; a-- > 0;) {
    d.l.strides[a] = st;
    st *= d.l.shape[a];
  }
  d.lo_bytes = 0;
  d.end_bytes = r->empty ? 0 : st * 4;
  return d;
}

/* The f32 descriptor of desc. */
static void widen_desc(const cpu_desc *desc, cpu_desc *f) {
  *f = *desc;
  for (uint32_t j = 0; j < desc->n_in; j++)
    f->in[j] = dense_f32(&desc->in[j]);
  for (uint32_t k = 0; k < desc->n_out; k++)
    f->out[k] = dense_f32(&desc->out[k]);
}

tyto_plugin_error *cpu_widen_check(const tyto_plugin_host *h,
                                   const cpu_desc *desc) {
  const char *name = cpu_op_name(desc->d->op);
  if (desc->n_out < 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected an output, got none", name);
  const uint32_t dt = desc->out[0].l.dtype;
  for (uint32_t j = 0; j < desc->n_in + desc->n_out; j++) {
    int is_in = j < desc->n_in;
    const tyto_plugin_layout *l =
        is_in ? &desc->in[j].l : &desc->out[j - desc->n_in].l;
    if (l->dtype != dt)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: %s %u is %s but output 0 is %s (all operands "
                          "must have one dtype)",
                          name, is_in ? "input" : "output",
                          is_in ? j : j - desc->n_in, cpu_dtype_name(l->dtype),
                          cpu_dtype_name(dt));
  }
  cpu_desc f;
  widen_desc(desc, &f);
  return cpu_conv_check(h, &f);
}

static tyto_plugin_error *widen_run(const cpu_op *base, const cpu_desc *d,
                                    unsigned char *const *args,
                                    cpu_pool *pool) {
  const widen_op *op = (const widen_op *)base;
  const uint32_t n = d->n_in + d->n_out;
  unsigned char *ws = args[n];
  unsigned char *f[2 * CPU_MAX_IO + 1];
  for (uint32_t j = 0; j < n; j++)
    f[j] = ws ? ws + op->off[j] : NULL; /* no workspace: all empty */
  f[n] = op->inner->workspace_bytes ? ws + op->inner_off : NULL;
  for (uint32_t j = 0; j < d->n_in; j++)
    cpu_cast_run(&op->cast[j], args[j], f[j], pool);
  tyto_plugin_error *e = op->inner->run(op->inner, &op->fdesc, f, pool);
  for (uint32_t k = d->n_in; !e && k < n; k++)
    cpu_cast_run(&op->cast[k], f[k], args[k], pool);
  return e;
}

static void widen_destroy(cpu_op *base) {
  widen_op *op = (widen_op *)base;
  if (op->inner)
    op->inner->destroy(op->inner);
  free(op);
}

tyto_plugin_error *cpu_widen_prepare(const tyto_plugin_host *h,
                                     const cpu_desc *desc, cpu_op **out) {
  tyto_plugin_error *e = cpu_widen_check(h, desc);
  if (e)
    return e;
  widen_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "%s: out of memory preparing the kernel",
                        cpu_op_name(desc->d->op));
  op->base.run = widen_run;
  op->base.destroy = widen_destroy;
  widen_desc(desc, &op->fdesc);
  e = cpu_conv_prepare(h, &op->fdesc, &op->inner);
  if (e) {
    free(op);
    return e;
  }
  op->fdesc.d = NULL; /* the caller's, valid only now */
  uint64_t at = 0;
  for (uint32_t j = 0; j < desc->n_in + desc->n_out; j++) {
    int is_in = j < desc->n_in;
    const cpu_reach *r = is_in ? &desc->in[j] : &desc->out[j - desc->n_in];
    const cpu_reach *fr =
        is_in ? &op->fdesc.in[j] : &op->fdesc.out[j - desc->n_in];
    op->off[j] = at;
    at = (at + (uint64_t)fr->end_bytes + 63) & ~(uint64_t)63;
    if (is_in)
      cpu_cast_plan(&op->cast[j], &r->l, &fr->l);
    else
      cpu_cast_plan(&op->cast[j], &fr->l, &r->l);
  }
  op->inner_off = at;
  op->base.workspace_bytes = at + op->inner->workspace_bytes;
  *out = &op->base;
  return NULL;
}
