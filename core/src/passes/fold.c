/*
 * Constant folding: ops whose inputs are all constants are evaluated at
 * compile time, on the host in double precision (then rounded to the
 * dtype through the dtype table, so f16 and bf16 fold too), so the device never
 * runs them. A result of one value becomes a FULL (no data, whatever its size):
 * elementwise ops of uniform constants, views and reductions of a FULL,
 * concatenations of equal FULLs. Elementwise results of other constants are
 * materialised only up to FOLD_MAX_ELEMENTS, so folding never trades a kernel
 * for a large constant upload. Integer arithmetic is left to the device
 * (it wraps; an i64 need not fit a double); integer views fold. A REPLICA_SUM
 * is never folded (its value is known only when the replicas exchange).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../graph/dtype.h"
#include "passes.h"

enum { FOLD_MAX_ELEMENTS = 4096 };

/* v rounded to dt, as a double. */
static double round_to(tyto_dtype dt, double v) {
  const dtype_info *di = dtype_info_of(dt);
  _Alignas(8) unsigned char e[8];
  di->store(e, 0, v);
  return di->load(e, 0);
}

static tyto_tensor *full_like(tyto_graph *g, const tyto_tensor *t, double v) {
  return tyto_full(g, t->dtype, t->rank, t->shape, round_to(t->dtype, v));
}

static double elem(const tyto_tensor *x, int64_t i) {
  if (x->op == TYTO_OP_FULL)
    return x->fattrs[0];
  return dtype_info_of(x->dtype)->load(x->data, (size_t)i);
}

/* An elementwise op over constants, element by element with NumPy
 * broadcasting of each input to t's shape. */
static tyto_tensor *fold_elementwise(const tyto_tensor *t, tyto_tensor **ins,
                                     tyto_graph *g) {
  double attr = t->n_fattrs ? t->fattrs[0] : 0.0;
  double u[3] = {0, 0, 0};
  int uniform = 1;
  for (size_t k = 0; k < t->n_inputs; k++)
    uniform &= pass_uniform_value(ins[k], &u[k]);
  if (uniform)
    return full_like(g, t, pass_eval_scalar(t->op, u[0], u[1], u[2], attr));
  int64_t n = tyto_tensor_numel(t);
  if (n > FOLD_MAX_ELEMENTS)
    return NULL;
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v)
    return graph_oom(g, "fold");
  for (int64_t i = 0; i < n; i++) {
    double a[3] = {0, 0, 0};
    for (size_t k = 0; k < t->n_inputs; k++) {
      const tyto_tensor *x = ins[k];
      /* The flat index of position i of t in x, broadcast. */
      int64_t rem = i, xi = 0, xs = 1;
      for (int d = t->rank - 1, e = x->rank - 1; d >= 0; d--, e--) {
        int64_t c = rem % t->shape[d];
        rem /= t->shape[d];
        if (e >= 0) {
          if (x->shape[e] != 1)
            xi += c * xs;
          xs *= x->shape[e];
        }
      }
      a[k] = elem(x, xi);
    }
    v[i] = pass_eval_scalar(t->op, a[0], a[1], a[2], attr);
  }
  tyto_tensor *c = tyto_constant(g, t->dtype, t->rank, t->shape, v);
  free(v);
  return c;
}

static tyto_tensor *fold_reduce(const tyto_tensor *t, double v,
                                const tyto_tensor *x, tyto_graph *g) {
  double count = 1;
  for (size_t j = 1; j < t->n_iattrs; j++)
    count *= (double)x->shape[t->iattrs[j]];
  if (count == 0)
    return NULL;
  switch (t->op) {
  case TYTO_OP_SUM: return full_like(g, t, v * count);
  case TYTO_OP_MEAN:
  case TYTO_OP_REDUCE_MAX:
  case TYTO_OP_REDUCE_MIN: return full_like(g, t, v);
  case TYTO_OP_PROD: return full_like(g, t, pow(v, count));
  case TYTO_OP_ARGMAX:
  case TYTO_OP_ARGMIN: return v == v ? full_like(g, t, 0.0) : NULL;
  case TYTO_OP_LOG_SUM_EXP: return full_like(g, t, v + log(count));
  case TYTO_OP_NORM_L1: return full_like(g, t, fabs(v) * count);
  case TYTO_OP_NORM_L2: return full_like(g, t, fabs(v) * sqrt(count));
  default: return NULL;
  }
}

static tyto_tensor *fold_rule(void *ctx, const tyto_tensor *t,
                              tyto_tensor **ins, tyto_graph *g, long *changed) {
  (void)ctx;
  if (t->n_inputs == 0)
    return NULL;
  for (size_t k = 0; k < t->n_inputs; k++)
    if (ins[k]->op != TYTO_OP_FULL && ins[k]->op != TYTO_OP_CONSTANT)
      return NULL;
  double v;
  tyto_tensor *r = NULL;
  /* Integer arithmetic wraps, and an i64 may not fit a double: the host's
   * double evaluation is for floating dtypes only. */
  int ints = dtype_is_int(t->dtype);
  for (size_t k = 0; k < t->n_inputs; k++)
    ints |= dtype_is_int(ins[k]->dtype);
  int computes = pass_is_elementwise(t->op) || t->op == TYTO_OP_CAST ||
                 (t->op >= TYTO_OP_SUM && t->op <= TYTO_OP_NORM_L2);
  if (ints && computes)
    return NULL;
  if (pass_is_elementwise(t->op) || t->op == TYTO_OP_CAST) {
    r = fold_elementwise(t, ins, g);
  } else if (t->op >= TYTO_OP_SUM && t->op <= TYTO_OP_NORM_L2) {
    if (ins[0]->op == TYTO_OP_FULL)
      r = fold_reduce(t, ins[0]->fattrs[0], ins[0], g);
  } else {
    switch (t->op) {
    case TYTO_OP_STOP_GRADIENT: /* the constant itself (AD is done) */
    case TYTO_OP_RESHAPE:
      if (ins[0]->op == TYTO_OP_CONSTANT) {
        r = pass_clone(g, ins[0], NULL);
        if (r->kind != TYTO_KIND_ERROR) {
          for (int i = 0; i < t->rank; i++)
            r->shape[i] = t->shape[i];
          r->rank = t->rank;
        }
        break;
      }
      /* fall through */
    case TYTO_OP_PERMUTE:
    case TYTO_OP_BROADCAST_TO:
    case TYTO_OP_SLICE:
    case TYTO_OP_TILE:
    case TYTO_OP_FLIP:
      if (ins[0]->op == TYTO_OP_FULL)
        r = full_like(g, t, ins[0]->fattrs[0]);
      break;
    case TYTO_OP_PAD:
      /* Constant padding with the FULL's own value. */
      if (ins[0]->op == TYTO_OP_FULL && t->iattrs[0] == 0 &&
          t->fattrs[0] == ins[0]->fattrs[0])
        r = full_like(g, t, ins[0]->fattrs[0]);
      break;
    case TYTO_OP_CONCAT:
      if (pass_uniform_value(ins[0], &v) && ins[0]->op == TYTO_OP_FULL) {
        size_t k = 1;
        while (k < t->n_inputs && ins[k]->op == TYTO_OP_FULL &&
               ins[k]->fattrs[0] == v)
          k++;
        if (k == t->n_inputs)
          r = full_like(g, t, v);
      }
      break;
    /* Never folded, a constant's included: on a data-parallel replica it
     * is a sum over the devices, which the host cannot see here. */
    case TYTO_OP_REPLICA_SUM:
    default: break;
    }
  }
  if (r)
    (*changed)++;
  return r;
}

long pass_fold(const pass_graph *in, pass_graph *out, tyto_tensor **map,
               const pass_options *opt, char *msg, size_t msg_size) {
  (void)opt;
  /* No copy when nothing has constant inputs only. */
  int any = 0;
  for (size_t i = 0; i < in->g->n_nodes && !any; i++) {
    const tyto_tensor *t = in->g->nodes[i];
    if (t->n_inputs == 0)
      continue;
    any = 1;
    for (size_t k = 0; k < t->n_inputs && any; k++)
      any = t->inputs[k]->op == TYTO_OP_FULL ||
            t->inputs[k]->op == TYTO_OP_CONSTANT;
  }
  if (!any)
    return 0;
  return pass_rewrite(in, out, map, fold_rule, NULL, "fold", msg, msg_size);
}
