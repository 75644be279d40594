/* Reductions over sets of axes, with or without keepdims. */
#include "node.h"
#include "shape.h"

static int is_reduction(tyto_op op) {
  return op >= TYTO_OP_SUM && op <= TYTO_OP_NORM_L2 && op != TYTO_OP_ARGMAX &&
         op != TYTO_OP_ARGMIN;
}

/* Builds the reduction of x over the axes in mask. */
static tyto_tensor *reduce_new(tyto_graph *g, tyto_op op, tyto_tensor *x,
                               unsigned mask, int keepdims) {
  int64_t shape[TYTO_MAX_RANK], iattrs[1 + TYTO_MAX_RANK];
  int rank = 0;
  size_t n_i = 0;
  iattrs[n_i++] = keepdims ? 1 : 0;
  for (int i = 0; i < x->rank; i++) {
    if (mask & (1u << i)) {
      iattrs[n_i++] = i;
      if (keepdims)
        shape[rank++] = 1;
    } else {
      shape[rank++] = x->shape[i];
    }
  }
  return node_new(g, op, x->dtype, rank, shape, 1, &x, n_i, iattrs, 0, NULL);
}

tyto_tensor *tyto_reduce(tyto_op op, tyto_tensor *x, int n_axes,
                         const int *axes, int keepdims) {
  tyto_tensor *err;
  const char *name = is_reduction(op) ? tyto_op_name(op) : "reduce";
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  if (!is_reduction(op))
    return graph_fail(g, "reduce: TYTO_OP %d is not a reduction over axes",
                      (int)op);
  unsigned mask;
  if (shape_axes(g, name, x, n_axes, axes, &mask) < 0)
    return &g->error;
  return reduce_new(g, op, x, mask, keepdims);
}

#define REDUCE(fn, OP)                                                         \
  tyto_tensor *tyto_##fn(tyto_tensor *x, int n_axes, const int *axes,          \
                         int keepdims) {                                       \
    return tyto_reduce(TYTO_OP_##OP, x, n_axes, axes, keepdims);               \
  }
REDUCE(sum, SUM)
REDUCE(mean, MEAN)
REDUCE(reduce_max, REDUCE_MAX)
REDUCE(reduce_min, REDUCE_MIN)
REDUCE(prod, PROD)
REDUCE(log_sum_exp, LOG_SUM_EXP)
REDUCE(norm_l1, NORM_L1)
REDUCE(norm_l2, NORM_L2)

static tyto_tensor *arg_reduce(tyto_op op, tyto_tensor *x, int axis,
                               int keepdims) {
  tyto_tensor *err;
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  int a;
  if (shape_axis(g, name, x, axis, &a) < 0)
    return &g->error;
  if (x->shape[a] == 0) {
    char s[SHAPE_STR];
    return graph_fail(g, "%s: axis of an empty extent in %s", name,
                      tensor_shape_str(s, x));
  }
  return reduce_new(g, op, x, 1u << a, keepdims);
}

tyto_tensor *tyto_argmax(tyto_tensor *x, int axis, int keepdims) {
  return arg_reduce(TYTO_OP_ARGMAX, x, axis, keepdims);
}

tyto_tensor *tyto_argmin(tyto_tensor *x, int axis, int keepdims) {
  return arg_reduce(TYTO_OP_ARGMIN, x, axis, keepdims);
}
