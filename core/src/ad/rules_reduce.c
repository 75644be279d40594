/*
 * Derivative rules of the reductions and of MATMUL.
 *
 * A reduction of x over some axes (iattrs: keepdims, then the axes) has a
 * Jacobian that is diagonal in the kept axes, so both modes use one
 * per-element weight w = dy/dx shaped as x: the VJP is the adjoint
 * reshaped to keep the reduced axes (extent 1) times w, the JVP is the
 * same reduction of tangent * w as a sum. The weights are written with the
 * node's output where possible (exp(x - lse), x / norm) and with WHERE and
 * comparisons at non-differentiable points, as <tyto/ad.h> documents, so
 * they can be differentiated again.
 */
#include "config.h"

#include "rules.h"

/* The reduced axes of reduction n, as ints; returns their count. */
static int reduced_axes(const tyto_tensor *n, int *axes) {
  int k = 0;
  for (size_t i = 1; i < n->n_iattrs; i++)
    axes[k++] = (int)n->iattrs[i];
  return k;
}

/* t, shaped as n (the reduction's output), reshaped to x's rank with the
 * reduced axes of extent 1: it then broadcasts against x. */
static tyto_tensor *keep(const tyto_tensor *n, tyto_tensor *t) {
  const tyto_tensor *x = n->inputs[0];
  if (n->iattrs[0] || n->n_iattrs == 1 || !t || tyto_tensor_is_error(t))
    return t; /* keepdims, or nothing reduced: already so */
  int64_t shape[TYTO_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    shape[i] = x->shape[i];
  for (size_t i = 1; i < n->n_iattrs; i++)
    shape[n->iattrs[i]] = 1;
  return tyto_reshape(t, x->rank, shape);
}

/* The count of elements each output element reduces. */
static double reduced_count(const tyto_tensor *n) {
  const tyto_tensor *x = n->inputs[0];
  double c = 1;
  for (size_t i = 1; i < n->n_iattrs; i++)
    c *= (double)x->shape[n->iattrs[i]];
  return c;
}

/* The same reduction's layout applied to a sum: t shaped as x summed over
 * n's axes, shaped as n. */
static tyto_tensor *sum_like(const tyto_tensor *n, tyto_tensor *t) {
  int axes[TYTO_MAX_RANK];
  int k = reduced_axes(n, axes);
  return tyto_sum(t, k, axes, (int)n->iattrs[0]);
}

/* dy/dx as a tensor shaped as x (broadcasting against keep()-shaped
 * tensors), for the reductions whose derivative is not a plain
 * broadcast. NULL for the ops with derivative zero. */
static tyto_tensor *reduce_weight(tyto_tensor *n) {
  tyto_tensor *x = n->inputs[0];
  int axes[TYTO_MAX_RANK];
  int k = reduced_axes(n, axes);
  switch (n->op) {
  case TYTO_OP_REDUCE_MAX:
  case TYTO_OP_REDUCE_MIN: {
    /* Shared evenly among the elements equal to the extremum. */
    tyto_tensor *mask = tyto_eq(x, keep(n, n));
    return tyto_div(mask, tyto_sum(mask, k, axes, 1));
  }
  case TYTO_OP_PROD: {
    /* Exact with zeros: with z zeros among the reduced elements and p the
     * product of the others, dy/dx_i is p / x_i when z = 0, p at the zero
     * when z = 1, and 0 when z >= 2. The zeros are replaced by ones so no
     * division by zero is ever evaluated (nor differentiated). */
    tyto_tensor *zero = ad_scalar(x, 0.0), *one = ad_scalar(x, 1.0);
    tyto_tensor *is0 = tyto_eq(x, zero);
    tyto_tensor *safe = tyto_where(is0, one, x);
    tyto_tensor *nz = tyto_sum(is0, k, axes, 1);
    tyto_tensor *p = tyto_prod(safe, k, axes, 1);
    tyto_tensor *at_zero = tyto_mul(is0, tyto_eq(nz, one));
    return tyto_mul(
        p, tyto_where(tyto_eq(nz, zero), tyto_reciprocal(safe), at_zero));
  }
  case TYTO_OP_LOG_SUM_EXP: /* softmax: exp(x - y) */
    return tyto_exp(tyto_sub(x, keep(n, n)));
  case TYTO_OP_NORM_L1: /* sign(0) = 0 */ return tyto_sign(x);
  case TYTO_OP_NORM_L2: {
    /* x / y, and 0 where y = 0 (then x = 0 too: divide by 1 instead). */
    tyto_tensor *y = keep(n, n);
    tyto_tensor *safe =
        tyto_where(tyto_eq(y, ad_scalar(x, 0.0)), ad_scalar(x, 1.0), y);
    return tyto_div(x, safe);
  }
  default: /* ARGMAX, ARGMIN */ return NULL;
  }
}

/* MATMUL: op(A) op(B) with op a transpose where the flags say. The
 * adjoints are again products of g with the other operand, arranged with
 * transpose flags so that no transpose is materialised; broadcast batch
 * axes are summed away. */
static int vjp_matmul(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                      tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
  int ta = (int)n->iattrs[0], tb = (int)n->iattrs[1];
  if (need[0]) {
    /* d op(A) = g op(B)^T; A^T's adjoint is its transpose. */
    tyto_tensor *da =
        !ta ? tyto_matmul(g, b, 0, !tb) : tyto_matmul(b, g, tb, 1);
    adj[0] = ad_sum_to(da, a);
  }
  if (need[1]) {
    /* d op(B) = op(A)^T g */
    tyto_tensor *db =
        !tb ? tyto_matmul(a, g, !ta, 0) : tyto_matmul(g, a, 1, ta);
    adj[1] = ad_sum_to(db, b);
  }
  return 0;
}

int ad_vjp_reduce(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                  tyto_tensor **adj) {
  if (n->op == TYTO_OP_MATMUL) {
    vjp_matmul(n, g, need, adj);
  } else if (n->op == TYTO_OP_SUM || n->op == TYTO_OP_MEAN) {
    tyto_tensor *gk = keep(n, g);
    if (n->op == TYTO_OP_MEAN)
      gk = tyto_mul_scalar(gk, 1.0 / reduced_count(n));
    adj[0] = ad_broadcast_like(gk, n->inputs[0]);
  } else {
    tyto_tensor *w = reduce_weight(n);
    /* mul broadcasts the kept-axes adjoint over x */
    adj[0] = w ? tyto_mul(keep(n, g), w) : NULL;
  }
  for (size_t i = 0; i < n->n_inputs; i++)
    if (adj[i] && tyto_tensor_is_error(adj[i]))
      return -1;
  return n->graph->status == TYTO_OK ? 0 : -1;
}

tyto_tensor *ad_jvp_reduce(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *r;
  if (n->op == TYTO_OP_MATMUL) {
    tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
    int ta = (int)n->iattrs[0], tb = (int)n->iattrs[1];
    r = ad_add(tan[0] ? tyto_matmul(tan[0], b, ta, tb) : NULL,
               tan[1] ? tyto_matmul(a, tan[1], ta, tb) : NULL);
  } else if (n->op == TYTO_OP_SUM || n->op == TYTO_OP_MEAN) {
    /* linear: the same reduction of the tangent */
    int axes[TYTO_MAX_RANK];
    int k = reduced_axes(n, axes);
    r = tyto_reduce(n->op, tan[0], k, axes, (int)n->iattrs[0]);
  } else {
    tyto_tensor *w = reduce_weight(n);
    r = w ? sum_like(n, tyto_mul(tan[0], w)) : NULL;
  }
  if (n->graph->status != TYTO_OK)
    return &n->graph->error;
  return r;
}
