/*
 * MATMUL in bf16 and f16 (ABI 1.5). sdk/docs/ops.md: read the operands
 * exactly into f32, sum in f32 or wider, round each result once to the
 * 16-bit dtype. The descriptor is checked as for f32 and f64 (matmul.c's
 * check: shapes, transposes, broadcast batch axes, one dtype); two paths
 * run it, picked at prepare:
 *
 *  - on oneDNN's matmul primitive where it has a kernel for the dtype
 *    (asked at prepare; a primitive descriptor it cannot create, or only
 *    its reference code, means no): 16-bit source, weights and
 *    destination; its kernels multiply pairs exactly into f32
 *    accumulators (AVX512-BF16's vdpbf16ps, AMX's tiles, or an f32
 *    emulation for bf16) and round the f32 sum once. Each operand is
 *    given to oneDNN as a strided memory descriptor over the output's
 *    batch axes (extent 1 where it broadcasts), its transpose as swapped
 *    strides; a column-major output turns the product around (C^T = B^T
 *    A^T). When oneDNN offers only its reference code for those strides,
 *    the operands that are not dense are copied (bit for bit) to dense
 *    blocks of the workspace and it is asked again. oneDNN 2.6 has bf16
 *    kernels for every x86-64 CPU with AVX-512 and none for f16 on a CPU
 *    (it added them for AVX512-FP16 later).
 *  - otherwise (f16 with oneDNN 2.6, no oneDNN in the build, or
 *    TYTO_CPU_NO_DNNL): the inputs are converted exactly to f32 blocks of
 *    the workspace, matmul.c's f32 MATMUL (OpenBLAS, or oneDNN for big
 *    products) multiplies them into an f32 block, and that is rounded
 *    once into the output.
 *
 * k = 0 writes zeros; an empty output is nothing to do. Which path an op
 * took is logged at prepare (debug level), and the device description
 * says which one bf16 and f16 GEMMs take on this machine (onednn.c).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "onednn.h"
#include "ops.h"
#include "stage16.h"

enum { MM16_EMPTY, MM16_ZEROS, MM16_DNNL, MM16_F32 };

typedef struct mm16_op {
  cpu_op base;
  const tyto_plugin_host *host;
  int path;
  cpu_stage st[3];   /* A, B, C and their copies */
  int staged[3];     /* whether the operand goes through its copy */
  uint64_t ws_at[3]; /* the copies' offsets in the workspace */
  /* MM16_F32: matmul.c's f32 op on the copies. */
  cpu_op *inner;
  cpu_desc inner_desc;
  uint64_t inner_at;
#ifdef TYTO_HAVE_DNNL
  cpu_dnnl_mm dn;
  uint64_t scratch_at;
#endif
} mm16_op;

static tyto_plugin_error *mm16_exec(const cpu_op *base, const cpu_desc *d,
                                    unsigned char *const *args,
                                    cpu_pool *pool) {
  const mm16_op *op = (const mm16_op *)base;
  if (op->path == MM16_EMPTY)
    return NULL;
  if (op->path == MM16_ZEROS) {
    cpu_stage_zero(&d->out[0].l, args[2]);
    return NULL;
  }
  unsigned char *ws = op->base.workspace_bytes ? args[3] : NULL;
  unsigned char *p[3];
  for (int i = 0; i < 3; i++) {
    const tyto_plugin_layout *l = i < 2 ? &d->in[i].l : &d->out[0].l;
    p[i] = op->staged[i] ? ws + op->ws_at[i] : args[i] + l->offset * 2;
    if (op->staged[i] && i < 2)
      cpu_stage_in(&op->st[i], args[i], p[i], pool);
  }
  if (op->path == MM16_F32) {
    unsigned char *inner_args[4] = {
        p[0], p[1], p[2],
        op->inner->workspace_bytes ? ws + op->inner_at : NULL};
    tyto_plugin_error *e =
        op->inner->run(op->inner, &op->inner_desc, inner_args, pool);
    if (e)
      return e;
  }
#ifdef TYTO_HAVE_DNNL
  if (op->path == MM16_DNNL) {
    dnnl_status_t st = cpu_dnnl_mm_run(&op->dn, p[0], p[1], p[2],
                                       ws ? ws + op->scratch_at : NULL);
    if (st != dnnl_success)
      return op->host->error_new(
          st == dnnl_out_of_memory ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                   : TYTO_PLUGIN_ERR_DEVICE,
          "matmul: oneDNN's %s matmul failed with status %d; set "
          "TYTO_CPU_NO_DNNL=1 to compute through f32",
          cpu_dtype_name(d->out[0].l.dtype), (int)st);
  }
#endif
  if (op->staged[2])
    cpu_stage_out(&op->st[2], p[2], args[2], pool);
  return NULL;
}

static void mm16_destroy(cpu_op *base) {
  mm16_op *op = (mm16_op *)base;
  if (op->inner)
    op->inner->destroy(op->inner);
#ifdef TYTO_HAVE_DNNL
  cpu_dnnl_mm_free(&op->dn);
#endif
  free(op);
}

/* ------------------------------------------------------------------------ */
/* oneDNN                                                                    */
/* ------------------------------------------------------------------------ */

#ifdef TYTO_HAVE_DNNL
/* Builds the primitive over the operands as they are now staged (the
 * bound layouts, or the copies' dense ones); 1 when oneDNN gave a kernel
 * that is not its reference code. */
static int mm16_try_dnnl(mm16_op *op, const cpu_desc *desc) {
  const int64_t *ia = desc->d->iattrs;
  int t[2] = {desc->d->n_iattrs ? (int)ia[0] : 0,
              desc->d->n_iattrs ? (int)ia[1] : 0};
  const tyto_plugin_layout *l[3];
  for (int i = 0; i < 3; i++)
    l[i] = op->staged[i] ? &op->st[i].dense : &op->st[i].src;
  if (cpu_dnnl_mm_make(&op->dn, l, t, NULL) != 1)
    return 0;
  op->host->log(op->host->ctx, TYTO_PLUGIN_LOG_DEBUG, "matmul %s: oneDNN %s%s",
                cpu_dtype_name(l[2]->dtype), op->dn.impl,
                op->dn.swap ? ", as C^T = B^T A^T" : "");
  return 1;
}

/* The oneDNN path: the operands as bound, else the ones that are not
 * dense copied to dense blocks. */
static int mm16_plan_dnnl(mm16_op *op, const cpu_desc *desc) {
  for (int i = 0; i < 3; i++) {
    const tyto_plugin_layout *l = i < 2 ? &desc->in[i].l : &desc->out[0].l;
    cpu_stage_init(&op->st[i], l, l->dtype);
    op->staged[i] = 0;
  }
  if (mm16_try_dnnl(op, desc))
    return 1;
  int more = 0;
  for (int i = 0; i < 3; i++) {
    op->staged[i] = !tpc_dense(&op->st[i].src);
    more |= op->staged[i];
  }
  if (more && mm16_try_dnnl(op, desc))
    return 1;
  memset(op->staged, 0, sizeof op->staged);
  return 0;
}
#endif

/* ------------------------------------------------------------------------ */
/* Through f32                                                               */
/* ------------------------------------------------------------------------ */

static tyto_plugin_error *mm16_plan_f32(const tyto_plugin_host *h, mm16_op *op,
                                        const cpu_desc *desc) {
  cpu_desc *in = &op->inner_desc;
  memset(in, 0, sizeof *in);
  in->d = desc->d; /* its attributes: the transpose flags */
  in->n_in = 2;
  in->n_out = 1;
  for (int i = 0; i < 3; i++) {
    const tyto_plugin_layout *l = i < 2 ? &desc->in[i].l : &desc->out[0].l;
    cpu_stage_init(&op->st[i], l, TYTO_PLUGIN_DTYPE_F32);
    op->staged[i] = 1;
    cpu_stage_reach(&op->st[i], i < 2 ? &in->in[i] : &in->out[0]);
  }
  tyto_plugin_error *e = cpu_matmul_prepare(h, in, &op->inner);
  in->d = NULL; /* the caller's, valid only now; matmul.c's run reads none */
  return e;
}

/* ------------------------------------------------------------------------ */
/* The family                                                                */
/* ------------------------------------------------------------------------ */

tyto_plugin_error *cpu_matmul16_check(const tyto_plugin_host *h,
                                      const cpu_desc *desc) {
  return cpu_matmul_check(h, desc);
}

tyto_plugin_error *cpu_matmul16_prepare(const tyto_plugin_host *h,
                                        const cpu_desc *desc, cpu_op **out) {
  tyto_plugin_error *e = cpu_matmul_check(h, desc);
  if (e)
    return e;
  mm16_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->base.run = mm16_exec;
  op->base.destroy = mm16_destroy;
  op->host = h;
  const tyto_plugin_layout *la = &desc->in[0].l, *lc = &desc->out[0].l;
  int ta = desc->d->n_iattrs ? (int)desc->d->iattrs[0] : 0;
  int64_t k = la->shape[la->rank - (ta ? 2 : 1)];
  uint32_t dtype = lc->dtype;
  if (desc->out[0].empty)
    op->path = MM16_EMPTY;
  else if (k == 0)
    op->path = MM16_ZEROS;
#ifdef TYTO_HAVE_DNNL
  else if (!cpu_dnnl_off() && mm16_plan_dnnl(op, desc))
    op->path = MM16_DNNL;
#endif
  else
    op->path = MM16_F32;
  if (op->path == MM16_F32) {
    e = mm16_plan_f32(h, op, desc);
    if (e) {
      mm16_destroy(&op->base);
      return e;
    }
    h->log(h->ctx, TYTO_PLUGIN_LOG_DEBUG,
           "matmul %s: converted to f32 (f32 MATMUL), rounded once",
           cpu_dtype_name(dtype));
  }
  uint64_t used = 0;
  for (int i = 0; i < 3; i++)
    if (op->staged[i])
      op->ws_at[i] = cpu_ws_take(&used, cpu_stage_bytes(&op->st[i]));
  if (op->inner)
    op->inner_at = cpu_ws_take(&used, op->inner->workspace_bytes);
#ifdef TYTO_HAVE_DNNL
  if (op->dn.prim)
    op->scratch_at = cpu_ws_take(&used, cpu_dnnl_mm_scratch_bytes(&op->dn));
#endif
  op->base.workspace_bytes = used;
  *out = &op->base;
  return NULL;
}
