/*
 * MATMUL in bf16 and f16 (ABI 1.5). sdk/docs/ops.md: read the operands
 * exactly into f32, sum in f32 or wider, round each result once to the
 * 16-bit dtype. The descriptor is checked as for f32 and f64 (matmul.c's
 * check: shapes, transposes, broadcast batch axes, one dtype); two paths
 * run it, picked at prepare:
 *
 *  - bf16 on oneDNN's matmul primitive (bf16 source and weights, bf16
 *    destination): its kernels multiply bf16 pairs exactly into f32
 *    accumulators (AVX512-BF16's vdpbf16ps, AMX's tiles, or an f32
 *    emulation) and round the f32 sum once to bf16. Each operand is given
 *    to oneDNN as a strided memory descriptor over the output's batch axes
 *    (extent 1 where it broadcasts), its transpose as swapped strides; a
 *    column-major output turns the product around (C^T = B^T A^T). When
 *    oneDNN offers only its reference code for those strides, the
 *    operands that are not dense are copied (bit for bit) to dense blocks
 *    of the workspace and it is asked again.
 *  - f16 (oneDNN 2.6 has no f16 matmul on a CPU without AVX512-FP16), bf16
 *    where oneDNN runs no fast kernel, is not built in, or is turned off
 *    (TYTO_CPU_NO_DNNL): the inputs are converted exactly to f32 blocks of
 *    the workspace, matmul.c's f32 MATMUL (OpenBLAS sgemm) multiplies them
 *    into an f32 block, and that is rounded once into the output.
 *
 * k = 0 writes zeros; an empty output is nothing to do. Which path an op
 * took is logged at prepare (debug level), and the device description
 * says which one bf16 GEMMs take on this machine (onednn.c).
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
  dnnl_primitive_t prim;
  int swap;                 /* computes C^T = B^T A^T */
  dnnl_memory_desc_t md[3]; /* A, B, C as oneDNN reads them */
  dnnl_memory_desc_t scratch_md;
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
    int s = op->swap;
    cpu_dnnl_arg a[4] = {
        {DNNL_ARG_SRC, &op->md[s], p[s]},
        {DNNL_ARG_WEIGHTS, &op->md[!s], p[!s]},
        {DNNL_ARG_DST, &op->md[2], p[2]},
        {DNNL_ARG_SCRATCHPAD, &op->scratch_md,
         dnnl_memory_desc_get_size(&op->scratch_md) ? ws + op->scratch_at
                                                    : NULL},
    };
    dnnl_status_t st = cpu_dnnl_exec(op->prim, 4, a);
    if (st != dnnl_success)
      return op->host->error_new(
          st == dnnl_out_of_memory ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                   : TYTO_PLUGIN_ERR_DEVICE,
          "matmul: oneDNN's bf16 matmul failed with status %d; set "
          "TYTO_CPU_NO_DNNL=1 to compute through f32",
          (int)st);
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
  if (op->prim)
    dnnl_primitive_destroy(op->prim);
#endif
  free(op);
}

/* ------------------------------------------------------------------------ */
/* oneDNN                                                                    */
/* ------------------------------------------------------------------------ */

#ifdef TYTO_HAVE_DNNL
/* Operand l (A, B or C: a matrix [r, c] after the transpose t, over the
 * output's nb batch axes) as a oneDNN memory descriptor: the output's
 * batch axes (extent 1 where l broadcasts, as oneDNN's matmul broadcasts),
 * then the matrix axes, swapped again when `swap`. Returns 0 when strides
 * cannot say it (a negative one). */
static int mm16_md(const tyto_plugin_layout *l, uint32_t nb, int t, int swap,
                   dnnl_memory_desc_t *md) {
  dnnl_dims_t dims, str;
  uint32_t lb = l->rank - 2;
  int n = (int)nb + 2;
  for (uint32_t ax = 0; ax < nb; ax++) {
    int64_t src = (int64_t)ax - (int64_t)(nb - lb);
    int used = src >= 0 && l->shape[src] > 1 && l->strides[src] != 0;
    dims[ax] = used ? l->shape[src] : 1;
    str[ax] = used ? l->strides[src] : 0;
  }
  int r = (int)nb, c = (int)nb + 1;
  if (t ^ swap)
    r = (int)nb + 1, c = (int)nb;
  dims[r] = l->shape[l->rank - 2];
  str[r] = l->strides[l->rank - 2];
  dims[c] = l->shape[l->rank - 1];
  str[c] = l->strides[l->rank - 1];
  /* Axes of extent 1 never step: give them the span of the rest, the
   * stride of an outermost axis, which oneDNN accepts in any order. */
  int64_t span = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] > 1 && str[i] < 0)
      return 0;
    if (dims[i] > 1)
      span += (dims[i] - 1) * str[i];
  }
  for (int i = 0; i < n; i++)
    if (dims[i] == 1)
      str[i] = span;
  return dnnl_memory_desc_init_by_strides(md, n, dims, dnnl_bf16, str) ==
         dnnl_success;
}

/* Builds the primitive over the operands as they are now staged (the
 * bound layouts, or the copies' dense ones); 1 when oneDNN gave a kernel
 * that is not its reference code. */
static int mm16_try_dnnl(mm16_op *op, const cpu_desc *desc) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  if (!eng)
    return 0;
  const int64_t *ia = desc->d->iattrs;
  int t[3] = {desc->d->n_iattrs ? (int)ia[0] : 0,
              desc->d->n_iattrs ? (int)ia[1] : 0, 0};
  const tyto_plugin_layout *l[3];
  for (int i = 0; i < 3; i++)
    l[i] = op->staged[i] ? &op->st[i].dense : &op->st[i].src;
  uint32_t nb = l[2]->rank - 2;
  /* A column-major output: C^T = B^T A^T is row-major. */
  const tyto_plugin_layout *c = l[2];
  op->swap = c->shape[nb] > 1 && c->shape[nb + 1] > 1 && c->strides[nb] == 1 &&
             c->strides[nb + 1] != 1;
  for (int i = 0; i < 3; i++)
    if (!mm16_md(l[i], nb, t[i], op->swap, &op->md[i]))
      return 0;
  int s = op->swap;
  dnnl_matmul_desc_t mm;
  if (dnnl_matmul_desc_init(&mm, &op->md[s], &op->md[!s], NULL, &op->md[2]) !=
      dnnl_success)
    return 0;
  dnnl_primitive_attr_t attr = cpu_dnnl_attr();
  if (!attr)
    return 0;
  dnnl_primitive_desc_t pd = NULL;
  int ok =
      dnnl_primitive_desc_create(&pd, &mm, attr, eng, NULL) == dnnl_success;
  dnnl_primitive_attr_destroy(attr);
  ok = ok && !cpu_dnnl_is_ref(pd);
  if (ok) {
    const dnnl_memory_desc_t *sp =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp)
      op->scratch_md = *sp;
    else /* a zero descriptor: no bytes */
      memset(&op->scratch_md, 0, sizeof op->scratch_md);
    ok = dnnl_primitive_create(&op->prim, pd) == dnnl_success;
    if (!ok)
      op->prim = NULL;
  }
  if (ok)
    op->host->log(op->host->ctx, TYTO_PLUGIN_LOG_DEBUG,
                  "matmul bf16: oneDNN %s%s", cpu_dnnl_impl(pd),
                  op->swap ? ", as C^T = B^T A^T" : "");
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  return ok;
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
  else if (dtype == TYTO_PLUGIN_DTYPE_BF16 && !cpu_dnnl_off() &&
           mm16_plan_dnnl(op, desc))
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
           "matmul %s: converted to f32 (OpenBLAS sgemm), rounded once",
           cpu_dtype_name(dtype));
  }
  uint64_t used = 0;
  for (int i = 0; i < 3; i++)
    if (op->staged[i])
      op->ws_at[i] = cpu_ws_take(&used, cpu_stage_bytes(&op->st[i]));
  if (op->inner)
    op->inner_at = cpu_ws_take(&used, op->inner->workspace_bytes);
#ifdef TYTO_HAVE_DNNL
  if (op->prim)
    op->scratch_at =
        cpu_ws_take(&used, dnnl_memory_desc_get_size(&op->scratch_md));
#endif
  op->base.workspace_bytes = used;
  *out = &op->base;
  return NULL;
}
