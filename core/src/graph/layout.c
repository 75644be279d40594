/* Layout ops that keep or rearrange elements: reshape, permute, transpose,
 * broadcast_to, tile, repeat, flip. Lowering turns most of them into strided
 * COPYs; here they are ordinary nodes. */
#include "node.h"
#include "shape.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

tyto_tensor *tyto_reshape(tyto_tensor *x, int rank, const int64_t *shape) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("reshape", 1, &x, 1, &err);
  if (!g)
    return err;
  if (rank < 0 || rank > TYTO_MAX_RANK)
    return graph_fail(g, "reshape: rank %d %s", rank,
                      rank < 0 ? "is negative" : "exceeds 8");
  if (rank > 0 && !shape)
    return graph_fail(g, "reshape: shape is NULL for rank %d", rank);
  char st[SHAPE_STR], sx[SHAPE_STR];
  shape_str(st, rank, shape);
  tensor_shape_str(sx, x);
  int64_t out[TYTO_MAX_RANK], known = 1;
  int infer = -1;
  for (int i = 0; i < rank; i++) {
    out[i] = shape[i];
    if (shape[i] == -1) {
      if (infer >= 0)
        return graph_fail(g, "reshape: more than one -1 in %s", st);
      infer = i;
    } else if (shape[i] < 0) {
      return graph_fail(g, "reshape: invalid extent %" PRId64 " in %s",
                        shape[i], st);
    } else {
      if (shape[i] > 0 && known > INT64_MAX / shape[i])
        return graph_fail(g, "reshape: %s has more than 2^63 elements", st);
      known *= shape[i];
    }
  }
  int64_t numel = shape_numel(x->rank, x->shape);
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return graph_fail(g, "reshape: cannot infer -1 in %s for %s", st, sx);
    out[infer] = numel / known;
    known = numel;
  }
  if (known != numel)
    return graph_fail(g,
                      "reshape: cannot reshape %s (%" PRId64
                      " elements) to %s (%" PRId64 " elements)",
                      sx, numel, st, known);
  return node_new(g, TYTO_OP_RESHAPE, x->dtype, rank, out, 1, &x, 0, NULL, 0,
                  NULL);
}

/* "[2,0,0]" for a list of ints. */
static char *ints_str(char *buf, int n, const int *v) {
  int64_t w[TYTO_MAX_RANK];
  for (int i = 0; i < n && i < TYTO_MAX_RANK; i++)
    w[i] = v[i];
  return shape_str(buf, n < TYTO_MAX_RANK ? n : TYTO_MAX_RANK, w);
}

static tyto_tensor *permute_named(const char *name, tyto_tensor *x, int rank,
                                  const int *perm) {
  tyto_tensor *err;
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  char sx[SHAPE_STR], sp[SHAPE_STR];
  tensor_shape_str(sx, x);
  if (rank != x->rank || (rank > 0 && !perm))
    return graph_fail(g, "%s: %d axes given for %s", name, rank, sx);
  int64_t iattrs[TYTO_MAX_RANK], shape[TYTO_MAX_RANK];
  unsigned seen = 0;
  for (int i = 0; i < rank; i++) {
    int a = perm[i] < 0 ? perm[i] + rank : perm[i];
    if (a < 0 || a >= rank || (seen & (1u << a)))
      return graph_fail(g, "%s: %s is not a permutation of the axes of %s",
                        name, ints_str(sp, rank, perm), sx);
    seen |= 1u << a;
    iattrs[i] = a;
    shape[i] = x->shape[a];
  }
  return node_new(g, TYTO_OP_PERMUTE, x->dtype, rank, shape, 1, &x,
                  (size_t)rank, iattrs, 0, NULL);
}

tyto_tensor *tyto_permute(tyto_tensor *x, int rank, const int *perm) {
  return permute_named("permute", x, rank, perm);
}

tyto_tensor *tyto_transpose(tyto_tensor *x, int axis0, int axis1) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("transpose", 1, &x, 1, &err);
  if (!g)
    return err;
  int a0, a1, perm[TYTO_MAX_RANK];
  if (shape_axis(g, "transpose", x, axis0, &a0) < 0 ||
      shape_axis(g, "transpose", x, axis1, &a1) < 0)
    return &g->error;
  for (int i = 0; i < x->rank; i++)
    perm[i] = i;
  perm[a0] = a1;
  perm[a1] = a0;
  return permute_named("transpose", x, x->rank, perm);
}

tyto_tensor *tyto_broadcast_to(tyto_tensor *x, int rank, const int64_t *shape) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("broadcast_to", 1, &x, 1, &err);
  if (!g)
    return err;
  if (shape_check(g, "broadcast_to", rank, shape) < 0)
    return &g->error;
  int ok = rank >= x->rank;
  for (int i = 0; ok && i < x->rank; i++) {
    int64_t e = x->shape[x->rank - 1 - i], t = shape[rank - 1 - i];
    ok = e == t || e == 1;
  }
  if (!ok) {
    char sx[SHAPE_STR], st[SHAPE_STR];
    return graph_fail(g, "broadcast_to: cannot broadcast %s to %s",
                      tensor_shape_str(sx, x), shape_str(st, rank, shape));
  }
  return node_new(g, TYTO_OP_BROADCAST_TO, x->dtype, rank, shape, 1, &x, 0,
                  NULL, 0, NULL);
}

tyto_tensor *tyto_tile(tyto_tensor *x, int n_reps, const int64_t *reps) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("tile", 1, &x, 1, &err);
  if (!g)
    return err;
  if (shape_check(g, "tile", n_reps, reps) < 0)
    return &g->error;
  int rank = n_reps > x->rank ? n_reps : x->rank;
  int64_t shape[TYTO_MAX_RANK], r[TYTO_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ix = i - (rank - x->rank), ir = i - (rank - n_reps);
    r[i] = ir >= 0 ? reps[ir] : 1;
    int64_t e = ix >= 0 ? x->shape[ix] : 1;
    if (e > 0 && r[i] > INT64_MAX / e) {
      char sx[SHAPE_STR];
      return graph_fail(g, "tile: result of %s is too large",
                        tensor_shape_str(sx, x));
    }
    shape[i] = e * r[i];
  }
  if (shape_check(g, "tile", rank, shape) < 0)
    return &g->error;
  return node_new(g, TYTO_OP_TILE, x->dtype, rank, shape, 1, &x, (size_t)rank,
                  r, 0, NULL);
}

tyto_tensor *tyto_repeat(tyto_tensor *x, int axis, int64_t repeats) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("repeat", 1, &x, 1, &err);
  if (!g)
    return err;
  char sx[SHAPE_STR];
  tensor_shape_str(sx, x);
  int a;
  if (shape_axis(g, "repeat", x, axis, &a) < 0)
    return &g->error;
  if (repeats < 0)
    return graph_fail(g, "repeat: negative repeats %" PRId64, repeats);
  if (x->rank == TYTO_MAX_RANK)
    return graph_fail(g, "repeat: needs rank below 8, got %s", sx);
  /* [.., n, ..] -> [.., n, 1, ..] -> [.., n, r, ..] -> [.., n*r, ..] */
  int64_t s1[TYTO_MAX_RANK], s3[TYTO_MAX_RANK];
  int r = x->rank;
  for (int i = 0, j = 0; i < r; i++) {
    s1[j++] = x->shape[i];
    if (i == a)
      s1[j++] = 1;
  }
  tyto_tensor *t = tyto_reshape(x, r + 1, s1);
  s1[a + 1] = repeats;
  t = tyto_broadcast_to(t, r + 1, s1);
  if (t->kind == TYTO_KIND_ERROR)
    return t; /* also when n * repeats overflows */
  memcpy(s3, x->shape, (size_t)r * sizeof *s3);
  s3[a] *= repeats;
  return tyto_reshape(t, r, s3);
}

tyto_tensor *tyto_flip(tyto_tensor *x, int n_axes, const int *axes) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("flip", 1, &x, 1, &err);
  if (!g)
    return err;
  unsigned mask;
  if (shape_axes(g, "flip", x, n_axes, axes, &mask) < 0)
    return &g->error;
  int64_t iattrs[TYTO_MAX_RANK];
  size_t n = 0;
  for (int i = 0; i < x->rank; i++)
    if (mask & (1u << i))
      iattrs[n++] = i;
  return node_new(g, TYTO_OP_FLIP, x->dtype, x->rank, x->shape, 1, &x, n,
                  iattrs, 0, NULL);
}
