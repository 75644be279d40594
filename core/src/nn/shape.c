/* Layers that only move or combine values: flatten, reshape, concat, add,
 * and user functions (lambda). */
#include "config.h"

#include <limits.h>

#include "nn_internal.h"

tyto_tensor *tyto_nn_flatten(tyto_tensor *x) {
  if (!x || x->kind == TYTO_KIND_ERROR)
    return x;
  if (x->rank < 1)
    return graph_fail(x->graph, "flatten: x must have rank >= 1, got []");
  int64_t rest = 1;
  for (int i = 1; i < x->rank; i++)
    rest *= x->shape[i];
  if (x->rank == 2)
    return x;
  return tyto_reshape(x, 2, (const int64_t[]){x->shape[0], rest});
}

tyto_tensor *tyto_nn_reshape(tyto_tensor *x, int rank, const int64_t *shape) {
  if (!x || x->kind == TYTO_KIND_ERROR)
    return x;
  char s[SHAPE_STR];
  if (x->rank < 1)
    return graph_fail(x->graph, "nn_reshape: x must have rank >= 1, got []");
  if (rank < 0 || rank > TYTO_MAX_RANK - 1 || (rank > 0 && !shape))
    return graph_fail(x->graph,
                      "nn_reshape: %d extents%s for x %s; the batch axis "
                      "leaves room for at most %d",
                      rank, rank > 0 && !shape ? " (NULL)" : "",
                      tensor_shape_str(s, x), TYTO_MAX_RANK - 1);
  int64_t full[TYTO_MAX_RANK];
  full[0] = x->shape[0];
  for (int i = 0; i < rank; i++)
    full[i + 1] = shape[i];
  return tyto_reshape(x, rank + 1, full);
}

tyto_tensor *tyto_nn_concat(size_t n, tyto_tensor *const *xs, int axis) {
  if (!n || !xs)
    return NULL;
  if (n > INT_MAX) {
    for (size_t i = 0; i < n; i++)
      if (xs[i])
        return graph_fail(xs[i]->graph, "nn_concat: %zu tensors is too many",
                          n);
    return NULL;
  }
  return tyto_concat((int)n, xs, axis);
}

tyto_tensor *tyto_nn_add(size_t n, tyto_tensor *const *xs) {
  tyto_tensor *err;
  if (!n || !xs)
    return NULL;
  tyto_graph *g = graph_check("nn_add", n, xs, 1, &err);
  if (!g)
    return err;
  for (size_t i = 1; i < n; i++) {
    int same = xs[i]->rank == xs[0]->rank;
    for (int d = 0; same && d < xs[0]->rank; d++)
      same = xs[i]->shape[d] == xs[0]->shape[d];
    if (!same) {
      char a[SHAPE_STR], b[SHAPE_STR];
      return graph_fail(g, "nn_add: shapes differ: %s and %s (tensor %zu)",
                        tensor_shape_str(a, xs[0]), tensor_shape_str(b, xs[i]),
                        i);
    }
  }
  tyto_tensor *y = xs[0];
  for (size_t i = 1; i < n; i++)
    y = tyto_add(y, xs[i]);
  return y;
}

tyto_tensor *tyto_nn_lambda(tyto_nn *nn, tyto_tensor *x, tyto_nn_lambda_fn fn,
                            void *user) {
  tyto_tensor *err;
  if (nn_check(nn, "lambda", NULL, 0, x, 0, TYTO_MAX_RANK, &err) < 0)
    return err;
  if (!fn)
    return nn_fail(nn, "lambda", NULL, "function is NULL");
  tyto_tensor *y = fn(x, user);
  if (!y)
    return nn_fail(nn, "lambda", NULL, "the function returned NULL");
  if (y->kind == TYTO_KIND_ERROR) {
    if (tyto_graph_status(nn->g) == TYTO_OK)
      return nn_fail(nn, "lambda", NULL,
                     "the function returned an error tensor");
    return &nn->g->error;
  }
  if (y->graph != nn->g)
    return nn_fail(nn, "lambda", NULL,
                   "the function returned a tensor of another graph");
  return y;
}
