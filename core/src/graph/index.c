/* Indexing: gather (NumPy take), index_select, scatter_add, one_hot. Indices
 * are i32 or i64, or whole numbers held in the floating dtype of the data. */
#include "dtype.h"
#include "node.h"
#include "shape.h"

#include <inttypes.h>
#include <string.h>

/* Checks that indices are an integer tensor or have data's floating
 * dtype: "gather: indices are f64; expected i32, i64 or the data's f32". */
static int index_check(tyto_graph *g, const char *name, const tyto_tensor *data,
                       const tyto_tensor *indices) {
  if (dtype_is_int(indices->dtype) || indices->dtype == data->dtype)
    return 0;
  if (dtype_is_int(data->dtype))
    graph_fail(g, "%s: indices are %s; expected i32 or i64", name,
               tyto_dtype_name(indices->dtype));
  else
    graph_fail(g, "%s: indices are %s; expected i32, i64 or the data's %s",
               name, tyto_dtype_name(indices->dtype),
               tyto_dtype_name(data->dtype));
  return -1;
}

/* The shape of gather(data, indices, axis a) into shape; its rank, or -1
 * when above 8. */
static int gather_shape(const tyto_tensor *data, const tyto_tensor *indices,
                        int a, int64_t *shape) {
  int rank = data->rank - 1 + indices->rank;
  if (rank > TYTO_MAX_RANK)
    return -1;
  int n = 0;
  for (int i = 0; i < a; i++)
    shape[n++] = data->shape[i];
  for (int i = 0; i < indices->rank; i++)
    shape[n++] = indices->shape[i];
  for (int i = a + 1; i < data->rank; i++)
    shape[n++] = data->shape[i];
  return rank;
}

static tyto_tensor *gather_named(const char *name, tyto_tensor *data,
                                 tyto_tensor *indices, int axis) {
  tyto_tensor *in[2] = {data, indices}, *err;
  tyto_graph *g = graph_check(name, 2, in, 0, &err);
  if (!g)
    return err;
  int a;
  if (index_check(g, name, data, indices) < 0 ||
      shape_axis(g, name, data, axis, &a) < 0)
    return &g->error;
  int64_t shape[TYTO_MAX_RANK];
  int rank = gather_shape(data, indices, a, shape);
  if (rank < 0) {
    char sd[SHAPE_STR], si[SHAPE_STR];
    return graph_fail(g, "%s: result rank %d exceeds 8 for %s and indices %s",
                      name, data->rank - 1 + indices->rank,
                      tensor_shape_str(sd, data),
                      tensor_shape_str(si, indices));
  }
  int64_t iattr = a;
  return node_new(g, TYTO_OP_GATHER, data->dtype, rank, shape, 2, in, 1, &iattr,
                  0, NULL);
}

tyto_tensor *tyto_gather(tyto_tensor *data, tyto_tensor *indices, int axis) {
  return gather_named("gather", data, indices, axis);
}

tyto_tensor *tyto_index_select(tyto_tensor *data, int axis,
                               tyto_tensor *indices) {
  tyto_tensor *in[2] = {data, indices}, *err;
  tyto_graph *g = graph_check("index_select", 2, in, 0, &err);
  if (!g)
    return err;
  if (indices->rank != 1) {
    char s[SHAPE_STR];
    return graph_fail(g, "index_select: indices must have rank 1, got %s",
                      tensor_shape_str(s, indices));
  }
  return gather_named("index_select", data, indices, axis);
}

tyto_tensor *tyto_scatter_add(tyto_tensor *base, tyto_tensor *indices,
                              tyto_tensor *updates, int axis) {
  tyto_tensor *in[3] = {base, indices, updates}, *err;
  tyto_tensor *values[2] = {base, updates};
  tyto_graph *g = graph_check("scatter_add", 3, in, 0, &err);
  if (!g || !graph_check("scatter_add", 2, values, 1, &err))
    return err;
  int a;
  if (index_check(g, "scatter_add", base, indices) < 0 ||
      shape_axis(g, "scatter_add", base, axis, &a) < 0)
    return &g->error;
  int64_t shape[TYTO_MAX_RANK];
  int rank = gather_shape(base, indices, a, shape);
  if (rank != updates->rank ||
      memcmp(shape, updates->shape, (size_t)rank * sizeof *shape)) {
    char su[SHAPE_STR], se[SHAPE_STR], sb[SHAPE_STR], si[SHAPE_STR];
    if (rank < 0)
      strcpy(se, "(rank above 8)");
    else
      shape_str(se, rank, shape);
    return graph_fail(g,
                      "scatter_add: updates %s do not match %s for base %s, "
                      "indices %s, axis %d",
                      tensor_shape_str(su, updates), se,
                      tensor_shape_str(sb, base), tensor_shape_str(si, indices),
                      axis);
  }
  int64_t iattr = a;
  return node_new(g, TYTO_OP_SCATTER_ADD, base->dtype, base->rank, base->shape,
                  3, in, 1, &iattr, 0, NULL);
}

/* one_hot in dtype, or (own) in the default one. */
static tyto_tensor *one_hot_named(const char *name, tyto_tensor *indices,
                                  int64_t depth, int own, tyto_dtype dtype) {
  tyto_tensor *err;
  tyto_graph *g = graph_check(name, 1, &indices, 1, &err);
  if (!g)
    return err;
  char s[SHAPE_STR];
  tyto_dtype dt = !own                           ? dtype
                  : dtype_is_int(indices->dtype) ? TYTO_F32
                                                 : indices->dtype;
  if (!dtype_info_of(dt))
    return graph_fail(g, "%s: unknown dtype %d", name, (int)dtype);
  /* A floating index counts exactly only up to 2^digits. */
  const dtype_info *ii = dtype_info_of(indices->dtype);
  double top = dtype_index_top(ii->dtype);
  if (!ii->integer && (double)(depth - 1) > top)
    return graph_fail(g,
                      "%s: depth %" PRId64 " exceeds %.0f: %s indices are "
                      "exact only up to %.0f (give i32 or i64 indices)",
                      name, depth, top + 1, ii->name, top);
  if (depth <= 0)
    return graph_fail(g, "%s: depth %" PRId64 " must be positive", name, depth);
  if (indices->rank == TYTO_MAX_RANK)
    return graph_fail(g, "%s: indices need rank below 8, got %s", name,
                      tensor_shape_str(s, indices));
  int64_t shape[TYTO_MAX_RANK];
  memcpy(shape, indices->shape, (size_t)indices->rank * sizeof *shape);
  shape[indices->rank] = depth;
  if (shape_check(g, name, indices->rank + 1, shape) < 0)
    return &g->error;
  /* Floating indices make rows of their own dtype (the ABI's ONE_HOT),
   * cast to another: 0 and 1 are exact in every dtype. */
  tyto_dtype made = dtype_is_int(indices->dtype) ? dt : indices->dtype;
  return tyto_cast(node_new(g, TYTO_OP_ONE_HOT, made, indices->rank + 1, shape,
                            1, &indices, 1, &depth, 0, NULL),
                   dt);
}

tyto_tensor *tyto_one_hot(tyto_tensor *indices, int64_t depth) {
  return one_hot_named("one_hot", indices, depth, 1, TYTO_F32);
}

tyto_tensor *tyto_one_hot_as(tyto_tensor *indices, int64_t depth,
                             tyto_dtype dtype) {
  return one_hot_named("one_hot_as", indices, depth, 0, dtype);
}
