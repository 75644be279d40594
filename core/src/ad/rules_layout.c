/*
 * Derivative rules: layout (reshape .. slice_backward) and indexing
 * (gather, scatter_add, one_hot).
 *
 * Every op here is linear in its differentiated inputs, so each JVP applies
 * the op itself to the tangents and each VJP applies its adjoint: reshape
 * and permute are undone, broadcast_to and tile sum what they copied, slice
 * and slice_backward, gather and scatter_add are each other's adjoints, pad
 * is undone by a slice (constant mode) or folds the mirrored parts back
 * (reflect mode). The adjoints are built from the same family of ops, so
 * they are differentiable again.
 */
#include "config.h"

#include "rules.h"

/* A tyto_slice taking count[i] elements from starts[i] by steps[i] on every
 * axis: the resolved (start, step) of a SLICE node turned back into Python
 * bounds. Every count must be positive (empty results are handled by the
 * callers as zeros). A negative step that walks past index 0 needs the
 * omitted bound TYTO_END, as -1 would count from the end. */
static tyto_tensor *slice_counts(tyto_tensor *t, const int64_t *starts,
                                 const int64_t *steps, const int64_t *count) {
  int64_t stops[TYTO_MAX_RANK];
  for (int i = 0; i < t->rank; i++) {
    int64_t stop = starts[i] + count[i] * steps[i];
    stops[i] = steps[i] < 0 && stop < 0 ? TYTO_END : stop;
  }
  return tyto_slice(t, starts, stops, steps);
}

/* Splits a SLICE/SLICE_BACKWARD iattrs array (start, step per axis). */
static void starts_steps(const tyto_tensor *n, int rank, int64_t *starts,
                         int64_t *steps) {
  for (int i = 0; i < rank; i++) {
    starts[i] = n->iattrs[2 * i];
    steps[i] = n->iattrs[2 * i + 1];
  }
}

/* t[lo:lo+len] along axis a, the other axes whole. */
static tyto_tensor *cut(tyto_tensor *t, int a, int64_t lo, int64_t len) {
  return tyto_slice_axis(t, a, lo, lo + len, 1);
}

/* Zeros placed before and after t along axis a. */
static tyto_tensor *pad_axis(tyto_tensor *t, int a, int64_t before,
                             int64_t after) {
  int64_t b[TYTO_MAX_RANK] = {0}, e[TYTO_MAX_RANK] = {0};
  b[a] = before;
  e[a] = after;
  return tyto_pad(t, b, e, TYTO_PAD_CONSTANT, 0.0);
}

/* The adjoint of a reflect pad of one axis a (extent m in the input, b
 * mirrored before and e after): output j < b reads x[b - j] and output
 * b + m + k reads x[m - 2 - k]. The middle maps straight back; each mirrored
 * part, flipped, lands on a contiguous run of x: [1, b] and [m-1-e, m-2]. */
static tyto_tensor *reflect_adjoint_axis(tyto_tensor *g, int a, int64_t m,
                                         int64_t b, int64_t e) {
  int axis = a;
  tyto_tensor *r = cut(g, a, b, m);
  if (b > 0) {
    tyto_tensor *left = tyto_flip(cut(g, a, 0, b), 1, &axis);
    r = tyto_add(r, pad_axis(left, a, 1, m - 1 - b));
  }
  if (e > 0) {
    tyto_tensor *right = tyto_flip(cut(g, a, b + m, e), 1, &axis);
    r = tyto_add(r, pad_axis(right, a, m - 1 - e, 1));
  }
  return r;
}

static tyto_tensor *pad_adjoint(tyto_tensor *n, tyto_tensor *g) {
  const tyto_tensor *x = n->inputs[0];
  const int64_t *ia = n->iattrs;
  if (ia[0] == TYTO_PAD_CONSTANT) {
    int64_t starts[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
      starts[i] = ia[1 + 2 * i];
      steps[i] = 1;
    }
    return slice_counts(g, starts, steps, x->shape);
  }
  /* Reflect padding is separable: the pad is one 1-D reflection per axis,
   * so its adjoint folds one axis at a time. */
  tyto_tensor *r = g;
  for (int i = 0; i < x->rank; i++)
    if (ia[1 + 2 * i] || ia[2 + 2 * i])
      r = reflect_adjoint_axis(r, i, x->shape[i], ia[1 + 2 * i], ia[2 + 2 * i]);
  return r;
}

/* The adjoint of tile: the repetitions summed. Axis i of g (extent
 * reps[i] * e[i]) is viewed as [reps[i], e[i]] through a rank-3 reshape
 * [P, reps[i], e[i] * Q] and summed over the middle axis, one tiled axis
 * at a time; pairing each repetition axis with its extent would double the
 * rank past 8. */
static tyto_tensor *tile_adjoint(tyto_tensor *n, tyto_tensor *g) {
  const tyto_tensor *x = n->inputs[0];
  int rank = n->rank, lead = rank - x->rank;
  int64_t ext[TYTO_MAX_RANK]; /* the input's extents with leading ones */
  for (int i = 0; i < rank; i++)
    ext[i] = i < lead ? 1 : x->shape[i - lead];
  tyto_tensor *r = g;
  for (int i = 0; i < rank; i++) {
    int64_t reps = n->iattrs[i];
    if (reps == 1)
      continue;
    /* Axes before i are summed already; those after are still whole. */
    int64_t p = 1, q = ext[i];
    for (int j = 0; j < i; j++)
      p *= ext[j];
    for (int j = i + 1; j < rank; j++)
      q *= n->shape[j];
    int64_t s3[3] = {p, reps, q};
    int axis = 1;
    r = tyto_sum(tyto_reshape(r, 3, s3), 1, &axis, 0);
  }
  return ad_reshape_like(r, x);
}

int ad_vjp_layout(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                  tyto_tensor **adj) {
  tyto_tensor *x = n->inputs[0];
  /* Empty results and empty inputs have zero adjoints (an empty result
   * also has no meaningful slice start to rebuild). */
  if (tyto_tensor_numel(n) == 0 || n->op == TYTO_OP_ONE_HOT ||
      (n->n_inputs == 1 && tyto_tensor_numel(x) == 0))
    return 0;
  switch (n->op) {
  case TYTO_OP_RESHAPE: adj[0] = ad_reshape_like(g, x); return 0;
  case TYTO_OP_PERMUTE: {
    int inv[TYTO_MAX_RANK];
    for (int i = 0; i < n->rank; i++)
      inv[n->iattrs[i]] = i;
    adj[0] = tyto_permute(g, n->rank, inv);
    return 0;
  }
  case TYTO_OP_BROADCAST_TO: adj[0] = ad_sum_to(g, x); return 0;
  case TYTO_OP_SLICE: {
    int64_t starts[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
    starts_steps(n, n->rank, starts, steps);
    adj[0] = tyto_slice_backward(g, x->rank, x->shape, starts, steps);
    return 0;
  }
  case TYTO_OP_SLICE_BACKWARD: {
    /* slice_backward places x into zeros; its adjoint takes that part. */
    int64_t starts[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
    starts_steps(n, n->rank, starts, steps);
    adj[0] = slice_counts(g, starts, steps, x->shape);
    return 0;
  }
  case TYTO_OP_CONCAT: {
    int a = (int)n->iattrs[0];
    int64_t at = 0;
    for (size_t i = 0; i < n->n_inputs; i++) {
      int64_t len = n->inputs[i]->shape[a];
      if (need[i] && tyto_tensor_numel(n->inputs[i]))
        adj[i] = cut(g, a, at, len);
      at += len;
    }
    return 0;
  }
  case TYTO_OP_PAD: adj[0] = pad_adjoint(n, g); return 0;
  case TYTO_OP_TILE: adj[0] = tile_adjoint(n, g); return 0;
  case TYTO_OP_FLIP: {
    int axes[TYTO_MAX_RANK];
    for (size_t i = 0; i < n->n_iattrs; i++)
      axes[i] = (int)n->iattrs[i];
    adj[0] = n->n_iattrs ? tyto_flip(g, (int)n->n_iattrs, axes) : g;
    return 0;
  }
  case TYTO_OP_GATHER:
    /* The indices are piecewise constant: only the data has an adjoint. */
    if (need[0])
      adj[0] = tyto_scatter_add(ad_zeros_like(x), n->inputs[1], g,
                                (int)n->iattrs[0]);
    return 0;
  case TYTO_OP_SCATTER_ADD:
    if (need[0])
      adj[0] = g;
    if (need[2])
      adj[2] = tyto_gather(g, n->inputs[1], (int)n->iattrs[0]);
    return 0;
  default:
    graph_fail(n->graph, "ad: op %s has no VJP rule in rules_layout.c",
               tyto_op_name(n->op));
    return -1;
  }
}

tyto_tensor *ad_jvp_layout(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *t = tan[0];
  if (tyto_tensor_numel(n) == 0 || n->op == TYTO_OP_ONE_HOT ||
      (n->n_inputs == 1 && tyto_tensor_numel(n->inputs[0]) == 0))
    return NULL;
  switch (n->op) {
  case TYTO_OP_RESHAPE: return ad_reshape_like(t, n);
  case TYTO_OP_PERMUTE: {
    int perm[TYTO_MAX_RANK];
    for (int i = 0; i < n->rank; i++)
      perm[i] = (int)n->iattrs[i];
    return tyto_permute(t, n->rank, perm);
  }
  case TYTO_OP_BROADCAST_TO: return ad_broadcast_like(t, n);
  case TYTO_OP_SLICE: {
    int64_t starts[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
    starts_steps(n, n->rank, starts, steps);
    return slice_counts(t, starts, steps, n->shape);
  }
  case TYTO_OP_SLICE_BACKWARD: {
    int64_t starts[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
    starts_steps(n, n->rank, starts, steps);
    return tyto_slice_backward(t, n->rank, n->shape, starts, steps);
  }
  case TYTO_OP_CONCAT: {
    /* Zeros stand in for the inputs without a tangent. */
    tyto_tensor *parts[64], **p = parts;
    size_t k = n->n_inputs;
    if (k > sizeof parts / sizeof parts[0] &&
        !(p = graph_alloc(n->graph, k * sizeof *p)))
      return graph_oom(n->graph, "jvp");
    for (size_t i = 0; i < k; i++)
      p[i] = ad_or_zeros(tan[i], n->inputs[i]);
    return tyto_concat((int)k, p, (int)n->iattrs[0]);
  }
  case TYTO_OP_PAD: {
    /* Linear in x in both modes: the padding constant has no tangent. */
    const tyto_tensor *x = n->inputs[0];
    int64_t b[TYTO_MAX_RANK], e[TYTO_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
      b[i] = n->iattrs[1 + 2 * i];
      e[i] = n->iattrs[2 + 2 * i];
    }
    return tyto_pad(t, b, e, (tyto_pad_mode)n->iattrs[0], 0.0);
  }
  case TYTO_OP_TILE: return tyto_tile(t, (int)n->n_iattrs, n->iattrs);
  case TYTO_OP_FLIP: {
    int axes[TYTO_MAX_RANK];
    for (size_t i = 0; i < n->n_iattrs; i++)
      axes[i] = (int)n->iattrs[i];
    return n->n_iattrs ? tyto_flip(t, (int)n->n_iattrs, axes) : t;
  }
  case TYTO_OP_GATHER:
    return t ? tyto_gather(t, n->inputs[1], (int)n->iattrs[0]) : NULL;
  case TYTO_OP_SCATTER_ADD: {
    tyto_tensor *tu = tan[2];
    if (!tu)
      return t;
    return tyto_scatter_add(ad_or_zeros(t, n->inputs[0]), n->inputs[1], tu,
                            (int)n->iattrs[0]);
  }
  default:
    return graph_fail(n->graph, "ad: op %s has no JVP rule in rules_layout.c",
                      tyto_op_name(n->op));
  }
}
