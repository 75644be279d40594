/* Reductions over sets of axes, with or without keepdims. */
#include "dtype.h"
#include "node.h"
#include "shape.h"

static int is_reduction(tyto_op op) {
  return op >= TYTO_OP_SUM && op <= TYTO_OP_NORM_L2 && op != TYTO_OP_ARGMAX &&
         op != TYTO_OP_ARGMIN;
}

/* Builds the reduction of x over the axes in mask. */
static tyto_tensor *reduce_new(tyto_graph *g, tyto_op op, tyto_tensor *x,
                               tyto_dtype dtype, unsigned mask, int keepdims) {
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
  return node_new(g, op, dtype, rank, shape, 1, &x, n_i, iattrs, 0, NULL);
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
  return reduce_new(g, op, x, x->dtype, mask, keepdims);
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

/* ARGMAX or ARGMIN of x along axis, in dtype (x's own when `own`). An
 * integer dtype is the ABI's output; another floating dtype than x's is
 * the index computed in i64 and cast (exact: the extent is checked). */
static tyto_tensor *arg_reduce(const char *name, tyto_op op, tyto_tensor *x,
                               int axis, int keepdims, int own,
                               tyto_dtype dtype) {
  tyto_tensor *err;
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  tyto_dtype dt = own ? x->dtype : dtype;
  const dtype_info *di = dtype_info_of(dt);
  if (!di)
    return graph_fail(g,
                      "%s: unknown dtype %d (expected i32, i64 or a "
                      "floating dtype)",
                      name, (int)dtype);
  if (dtype_is_int(x->dtype))
    return graph_fail(g,
                      "%s: x is %s; %s takes floating-point tensors "
                      "(tyto_cast it to f32 first)",
                      name, tyto_dtype_name(x->dtype), name);
  int a;
  if (shape_axis(g, name, x, axis, &a) < 0)
    return &g->error;
  char s[SHAPE_STR];
  if (x->shape[a] == 0)
    return graph_fail(g, "%s: axis of an empty extent in %s", name,
                      tensor_shape_str(s, x));
  /* Every index, up to extent - 1, must be a value of dt. */
  double top = dtype_index_top(dt);
  if ((double)(x->shape[a] - 1) > top)
    return graph_fail(g,
                      "%s: axis extent %lld exceeds %.0f: %s holds indices "
                      "exactly only up to %.0f (%s)",
                      name, (long long)x->shape[a], top + 1, di->name, top,
                      di->integer ? "ask tyto_argmax_as for i64"
                                  : "ask tyto_argmax_as for i32 or i64");
  if (!di->integer && dt != x->dtype)
    return tyto_cast(reduce_new(g, op, x, TYTO_I64, 1u << a, keepdims), dt);
  return reduce_new(g, op, x, dt, 1u << a, keepdims);
}

tyto_tensor *tyto_argmax(tyto_tensor *x, int axis, int keepdims) {
  return arg_reduce("argmax", TYTO_OP_ARGMAX, x, axis, keepdims, 1, TYTO_F32);
}

tyto_tensor *tyto_argmin(tyto_tensor *x, int axis, int keepdims) {
  return arg_reduce("argmin", TYTO_OP_ARGMIN, x, axis, keepdims, 1, TYTO_F32);
}

tyto_tensor *tyto_argmax_as(tyto_tensor *x, int axis, int keepdims,
                            tyto_dtype dtype) {
  return arg_reduce("argmax_as", TYTO_OP_ARGMAX, x, axis, keepdims, 0, dtype);
}

tyto_tensor *tyto_argmin_as(tyto_tensor *x, int axis, int keepdims,
                            tyto_dtype dtype) {
  return arg_reduce("argmin_as", TYTO_OP_ARGMIN, x, axis, keepdims, 0, dtype);
}
