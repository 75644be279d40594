/*
 * Automatic mixed precision (<tyto/precision.h>, docs/precision.md): the
 * rule list, and the rewrite that applies it to the computation behind a
 * few tensors.
 *
 * The rewrite walks the nodes the tensors need in creation order (inputs
 * before their consumers) and gives each a counterpart in the dtype its
 * rule picks: the node itself when nothing changes, else a copy reading
 * its operands' counterparts, cast where their dtype differs. Casts are
 * memoised per value and dtype, so a value read in two dtypes is cast
 * once to each. Everything is appended to the same graph (graphs are
 * append-only arenas); what the outputs no longer need is dropped at
 * compile time.
 */
#include "config.h"

#include <stdlib.h>

#include <tyto/precision.h>

#include "dtype.h"
#include "node.h"
#include "../runtime/error.h"

tyto_amp_rule tyto_amp_rule_of(tyto_op op) {
  switch (op) {
  case TYTO_OP_INPUT:
  case TYTO_OP_PARAMETER:
  case TYTO_OP_CONSTANT:
  case TYTO_OP_FULL:
  case TYTO_OP_RANDOM_UNIFORM:
  case TYTO_OP_RANDOM_NORMAL:
  case TYTO_OP_RANDOM_BERNOULLI: return TYTO_AMP_SOURCE;

  /* The products: 16-bit operands, f32 accumulation, the low dtype's
   * rate. Their derivatives are products of the same dtypes. */
  case TYTO_OP_MATMUL:
  case TYTO_OP_CONV2D:
  case TYTO_OP_CONV2D_BACKWARD_DATA:
  case TYTO_OP_CONV2D_BACKWARD_FILTER: return TYTO_AMP_LOW;

  /* Range: exp and its kin overflow f16 (e^11.1 > 65504) and lose the
   * small end of bf16; log, pow and the reciprocals amplify the 2^-8
   * rounding of their operand. */
  case TYTO_OP_EXP:
  case TYTO_OP_EXPM1:
  case TYTO_OP_LOG:
  case TYTO_OP_LOG1P:
  case TYTO_OP_POW:
  case TYTO_OP_RSQRT:
  case TYTO_OP_RECIPROCAL:
  case TYTO_OP_TAN:
  case TYTO_OP_ASIN:
  case TYTO_OP_ACOS:
  case TYTO_OP_SINH:
  case TYTO_OP_COSH:
  case TYTO_OP_ACOSH:
  case TYTO_OP_ATANH:
  case TYTO_OP_ERF:
  case TYTO_OP_SOFTPLUS:
  /* Accumulations whose result is read as a whole: a sum of n values of
   * bf16 size carries n times the rounding; statistics (batch norm's mean
   * and variance) and the loss are built of these. */
  case TYTO_OP_SUM:
  case TYTO_OP_MEAN:
  case TYTO_OP_PROD:
  case TYTO_OP_LOG_SUM_EXP:
  case TYTO_OP_NORM_L1:
  case TYTO_OP_NORM_L2:
  /* The same sums, over the replicas of a data-parallel step (a
   * synchronised batch norm's statistics). */
  case TYTO_OP_REPLICA_SUM:
  case TYTO_OP_SOFTMAX:
  case TYTO_OP_LOG_SOFTMAX:
  /* Index values: a bf16 holds whole numbers exactly only up to 256. */
  case TYTO_OP_ARGMAX:
  case TYTO_OP_ARGMIN:
  case TYTO_OP_GATHER:
  case TYTO_OP_SCATTER_ADD:
  case TYTO_OP_ONE_HOT:
  /* Linear algebra runs in f32 or f64 only. */
  case TYTO_OP_INV:
  case TYTO_OP_DET:
  case TYTO_OP_LOGDET:
  case TYTO_OP_SOLVE:
  case TYTO_OP_CHOLESKY:
  case TYTO_OP_QR:
  case TYTO_OP_TRIANGULAR_SOLVE:
  /* A rule written by the user for the dtype they built it in. */
  case TYTO_OP_CUSTOM_DERIVATIVE: return TYTO_AMP_WIDE;

  default: return TYTO_AMP_FOLLOW;
  }
}

typedef struct amp {
  tyto_graph *g;
  tyto_dtype low;
  size_t low_size;
  tyto_tensor **map;     /* counterpart of node i */
  tyto_tensor **to_orig; /* its cast to node i's own dtype */
  tyto_tensor **to_low;  /* its cast to the low dtype */
} amp;

/* The counterpart of x (a node of the original graph) in dtype `want`. */
static tyto_tensor *get(amp *a, const tyto_tensor *x, tyto_dtype want) {
  size_t i = (size_t)x->index;
  tyto_tensor *m = a->map[i];
  if (m->dtype == want)
    return m;
  tyto_tensor **memo = want == x->dtype ? &a->to_orig[i]
                       : want == a->low ? &a->to_low[i]
                                        : NULL;
  if (memo && *memo)
    return *memo;
  uint32_t scope = a->g->scope;
  a->g->scope = x->pin; /* the cast runs where its value does */
  tyto_tensor *c = tyto_cast(m, want);
  a->g->scope = scope;
  if (memo)
    *memo = c;
  return c;
}

/* The dtype node t runs in. */
static tyto_dtype pick(const amp *a, const tyto_tensor *t) {
  if (t->op == TYTO_OP_CAST || dtype_is_int(t->dtype))
    return t->dtype;
  if (tyto_dtype_size(t->dtype) <= a->low_size)
    return t->dtype; /* as narrow as the low dtype already */
  switch (tyto_amp_rule_of(t->op)) {
  case TYTO_AMP_LOW: return a->low;
  case TYTO_AMP_FOLLOW: {
    /* The widest of its computed operands; sources follow. */
    int any = 0;
    size_t widest = 0;
    tyto_dtype d = t->dtype;
    for (size_t k = 0; k < t->n_inputs; k++) {
      const tyto_tensor *in = t->inputs[k];
      if (tyto_amp_rule_of(in->op) == TYTO_AMP_SOURCE ||
          dtype_is_int(in->dtype))
        continue;
      tyto_dtype md = a->map[in->index]->dtype;
      if (!any || tyto_dtype_size(md) > widest) {
        widest = tyto_dtype_size(md);
        d = md;
      }
      any = 1;
    }
    return any ? d : t->dtype;
  }
  default: return t->dtype; /* SOURCE, WIDE */
  }
}

static tyto_tensor *rewrite(amp *a, tyto_tensor *t) {
  if (t->n_inputs == 0 || t->kind == TYTO_KIND_ERROR)
    return t;
  if (t->op == TYTO_OP_CAST)
    return tyto_cast(a->map[t->inputs[0]->index], t->dtype);
  tyto_dtype d = pick(a, t);
  int source = tyto_amp_rule_of(t->op) == TYTO_AMP_SOURCE;
  tyto_tensor *stack[8], **ins = stack;
  if (t->n_inputs > 8 && !(ins = malloc(t->n_inputs * sizeof *ins)))
    return graph_oom(a->g, "autocast");
  int same = d == t->dtype;
  /* Integer operands stay as they are (indices, labels), and so do the
   * floating operands of an op with an integer result (argmax_as). */
  int keep = source || dtype_is_int(t->dtype);
  for (size_t k = 0; k < t->n_inputs; k++) {
    const tyto_tensor *in = t->inputs[k];
    ins[k] = get(a, in, keep || dtype_is_int(in->dtype) ? in->dtype : d);
    same &= ins[k] == t->inputs[k];
  }
  tyto_tensor *r = same ? t : node_rebuild(a->g, t, d, ins);
  if (ins != stack)
    free(ins);
  return r;
}

tyto_status tyto_autocast(tyto_dtype low, size_t n, tyto_tensor **ys) {
  if (!ys || n == 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_autocast: no tensors given (ys %s, n %zu)",
                   ys ? "set" : "NULL", n);
  const dtype_info *li = dtype_info_of(low);
  if (!li || (low != TYTO_BF16 && low != TYTO_F16 && low != TYTO_F32))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_autocast: %s low dtype %d (expected bf16, f16 or "
                   "f32)",
                   li ? "the" : "unknown", (int)low);
  tyto_graph *g = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!ys[i])
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_autocast: ys[%zu] is "
                     "NULL",
                     i);
    if (g && ys[i]->graph != g)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_autocast: ys[%zu] belongs to another graph than "
                     "ys[0]",
                     i);
    g = ys[i]->graph;
  }
  if (!g || g->status != TYTO_OK)
    return rt_fail(g ? g->status : TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_autocast: the graph is in error: %s",
                   g ? g->message : "an error tensor was given");
  size_t n0 = g->n_nodes;
  amp a = {g,
           low,
           li->size,
           calloc(n0, sizeof(tyto_tensor *)),
           calloc(n0, sizeof(tyto_tensor *)),
           calloc(n0, sizeof(tyto_tensor *))};
  unsigned char *need = graph_needed(g, n, ys);
  tyto_status st = TYTO_OK;
  if (!a.map || !a.to_orig || !a.to_low || !need) {
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                 "tyto_autocast: out of memory for a "
                 "graph of %zu tensors",
                 n0);
    goto done;
  }
  /* Every node the outputs need, in creation order. */
  for (size_t i = 0; i < n0 && g->status == TYTO_OK; i++)
    if (need[i])
      a.map[i] = rewrite(&a, g->nodes[i]);
  for (size_t i = 0; i < n && g->status == TYTO_OK; i++)
    ys[i] = get(&a, ys[i], ys[i]->dtype);
  if (g->status != TYTO_OK)
    st = rt_fail(g->status, "tyto_autocast: %s", g->message);
done:
  free(a.map);
  free(a.to_orig);
  free(a.to_low);
  free(need);
  return st;
}
