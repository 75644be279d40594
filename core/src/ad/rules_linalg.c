/*
 * Derivative rules: linear algebra on the last two axes (INV, DET, LOGDET,
 * SOLVE, CHOLESKY, QR, TRIANGULAR_SOLVE), batched over the leading axes.
 *
 * Every rule is written with public ops (matmul, the linalg ops
 * themselves, masks as constants), so the derivative can be differentiated
 * again. Below, X^T is the transpose of the last two axes, X^-T the
 * inverse transposed, and tril/triu the lower/upper triangle.
 */
#include "config.h"

#include <stdlib.h>

#include "rules.h"

/* X^T on the last two axes. */
static tyto_tensor *mT(tyto_tensor *x) {
  return tyto_transpose(x, -1, -2);
}

/* x [...] as [..., 1, 1], to scale a batch of matrices. */
static tyto_tensor *unsqueeze2(tyto_tensor *x) {
  if (tyto_tensor_is_error(x))
    return x;
  int64_t shape[TYTO_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    shape[i] = x->shape[i];
  shape[x->rank] = shape[x->rank + 1] = 1;
  return tyto_reshape(x, x->rank + 2, shape);
}

/* The sum over the last two axes: tr(X^T Y) for x * y. */
static tyto_tensor *sum2(tyto_tensor *x) {
  static const int axes[2] = {-2, -1};
  return tyto_sum(x, 2, axes, 0);
}

/* Which [k, k] mask: element (i, j) is kept when ... */
typedef enum mask_kind {
  MASK_LOWER,        /* j <= i */
  MASK_STRICT_LOWER, /* j < i */
  MASK_UPPER,        /* j >= i */
  MASK_STRICT_UPPER, /* j > i */
  MASK_PHI           /* j < i, and j == i with weight 1/2 */
} mask_kind;

/* A [k, k] constant mask in like's graph and dtype: it broadcasts over any
 * batch axes, and k*k values stay small next to the factorisations that
 * need it. */
static tyto_tensor *mask(const tyto_tensor *like, int64_t k, mask_kind kind) {
  size_t count = (size_t)(k * k);
  double *v = malloc((count ? count : 1) * sizeof *v);
  if (!v)
    return graph_oom(like->graph, "ad");
  for (int64_t i = 0; i < k; i++)
    for (int64_t j = 0; j < k; j++) {
      double m = 0;
      switch (kind) {
      case MASK_LOWER: m = j <= i; break;
      case MASK_STRICT_LOWER: m = j < i; break;
      case MASK_UPPER: m = j >= i; break;
      case MASK_STRICT_UPPER: m = j > i; break;
      case MASK_PHI: m = j < i ? 1.0 : j == i ? 0.5 : 0.0; break;
      }
      v[i * k + j] = m;
    }
  int64_t shape[2] = {k, k};
  tyto_tensor *t = tyto_constant(like->graph, like->dtype, 2, shape, v);
  free(v);
  return t;
}

/* ---------------------------------------------------------------------- */
/* INV, DET, LOGDET, SOLVE                                                 */

/* d(A^-1) = -A^-1 dA A^-1; its adjoint: Abar = -A^-T G A^-T. */
static tyto_tensor *inv_jvp(tyto_tensor *y, tyto_tensor *da) {
  return tyto_neg(tyto_matmul(tyto_matmul(y, da, 0, 0), y, 0, 0));
}

static tyto_tensor *inv_vjp(tyto_tensor *y, tyto_tensor *g) {
  return tyto_neg(tyto_matmul(tyto_matmul(y, g, 1, 0), y, 0, 1));
}

/* d log|det A| = tr(A^-1 dA) (Jacobi's formula), so the gradient of logdet
 * is A^-T and that of det is det(A) A^-T. Both are built on tyto_inv so
 * that they can be differentiated again. At a singular A, logdet's
 * gradient is truly infinite, while det's (the transposed adjugate) is
 * finite but comes out non-finite from this form. */
static tyto_tensor *logdet_jvp(tyto_tensor *a, tyto_tensor *da) {
  return sum2(tyto_mul(mT(tyto_inv(a)), da));
}

static tyto_tensor *logdet_vjp(tyto_tensor *a, tyto_tensor *g) {
  return tyto_mul(unsqueeze2(g), mT(tyto_inv(a)));
}

/* X = A^-1 B: dX = A^-1 (dB - dA X); Bbar = A^-T G, Abar = -Bbar X^T, each
 * summed back over the batch axes its operand was broadcast along. */
static int solve_vjp(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                     tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
  tyto_tensor *bbar = tyto_solve(mT(a), g);
  if (need[1])
    adj[1] = ad_sum_to(bbar, b);
  if (need[0])
    adj[0] = ad_sum_to(tyto_neg(tyto_matmul(bbar, n, 0, 1)), a);
  return tyto_graph_status(n->graph) == TYTO_OK ? 0 : -1;
}

static tyto_tensor *solve_jvp(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *a = n->inputs[0];
  tyto_tensor *rhs =
      ad_sub(tan[1], tan[0] ? tyto_matmul(tan[0], n, 0, 0) : NULL);
  /* dB alone may have fewer batch axes than X; A^-1 dB then broadcasts. */
  return ad_broadcast_like(tyto_solve(a, rhs), n);
}

/* ---------------------------------------------------------------------- */
/* TRIANGULAR_SOLVE                                                        */

/* The part of A the solve reads: its triangle, without the diagonal when
 * that is taken as ones. */
static tyto_tensor *tri_mask(tyto_tensor *a, int lower, int unit) {
  int64_t k = a->shape[a->rank - 1];
  return mask(a, k,
              lower ? (unit ? MASK_STRICT_LOWER : MASK_LOWER)
                    : (unit ? MASK_STRICT_UPPER : MASK_UPPER));
}

/* op(T) X = B with T the triangle read: dX = op(T)^-1 (dB - op(dT) X);
 * Bbar = op(T)^-T G and Tbar = -Bbar X^T (transposed back when op is a
 * transpose), masked to the triangle read, as the rest of A never
 * matters. */
static int trisolve_vjp(tyto_tensor *n, tyto_tensor *g,
                        const unsigned char *need, tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
  int lower = (int)n->iattrs[0], trans = (int)n->iattrs[1],
      unit = (int)n->iattrs[2];
  tyto_tensor *bbar = tyto_triangular_solve(a, g, lower, !trans, unit);
  if (need[1])
    adj[1] = ad_sum_to(bbar, b);
  if (need[0]) {
    tyto_tensor *tbar =
        trans ? tyto_matmul(n, bbar, 0, 1) : tyto_matmul(bbar, n, 0, 1);
    adj[0] = ad_sum_to(tyto_neg(tyto_mul(tbar, tri_mask(a, lower, unit))), a);
  }
  return tyto_graph_status(n->graph) == TYTO_OK ? 0 : -1;
}

static tyto_tensor *trisolve_jvp(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *a = n->inputs[0];
  int lower = (int)n->iattrs[0], trans = (int)n->iattrs[1],
      unit = (int)n->iattrs[2];
  tyto_tensor *rhs = tan[1];
  if (tan[0]) {
    tyto_tensor *dt = tyto_mul(tan[0], tri_mask(a, lower, unit));
    rhs = ad_sub(rhs, tyto_matmul(dt, n, trans, 0));
  }
  return ad_broadcast_like(tyto_triangular_solve(a, rhs, lower, trans, unit),
                           n);
}

/* ---------------------------------------------------------------------- */
/* CHOLESKY                                                                */

/* A = L L^T, after Murray 2016 ("Differentiation of the Cholesky
 * decomposition") and PyTorch's cholesky_backward. With Phi(X) the lower
 * triangle of X with its diagonal halved:
 *   dL = L Phi(L^-1 dA L^-T),
 *   Abar = L^-T sym(Phi(L^T Lbar)) L^-1, sym(X) = (X + X^T) / 2.
 * Only symmetric A are meaningful, so the derivative is that of
 * cholesky(sym(A)): the JVP symmetrises dA too, which keeps the two rules
 * each other's adjoint for any dA. L^-1 dA^T L^-T is the transpose of
 * L^-1 dA L^-T and is as good once symmetrised, so it is formed with two
 * triangular solves and a single transpose. */
static tyto_tensor *cholesky_jvp(tyto_tensor *l, tyto_tensor *da) {
  int64_t k = l->shape[l->rank - 1];
  tyto_tensor *z = tyto_triangular_solve(l, da, 1, 0, 0); /* L^-1 dA */
  tyto_tensor *w = tyto_triangular_solve(l, mT(z), 1, 0, 0);
  tyto_tensor *s = tyto_mul_scalar(tyto_add(w, mT(w)), 0.5);
  return tyto_matmul(l, tyto_mul(s, mask(l, k, MASK_PHI)), 0, 0);
}

static tyto_tensor *cholesky_vjp(tyto_tensor *l, tyto_tensor *g) {
  int64_t k = l->shape[l->rank - 1];
  tyto_tensor *p = tyto_mul(tyto_matmul(l, g, 1, 0), mask(l, k, MASK_PHI));
  tyto_tensor *s = tyto_mul_scalar(tyto_add(p, mT(p)), 0.5);
  /* U = L^-T S; then L^-T U^T = L^-T S L^-1 as S is symmetric. */
  tyto_tensor *u = tyto_triangular_solve(l, s, 1, 1, 0);
  return tyto_triangular_solve(l, mT(u), 1, 1, 0);
}

/* ---------------------------------------------------------------------- */
/* QR                                                                      */

/* The reduced QR of a full-rank A [..., m, n], m >= n: Q [..., m, n] with
 * orthonormal columns, R [..., n, n] upper triangular. Writing C = Q^T dA
 * R^-1 and Omega = tril(C, -1) - tril(C, -1)^T (Q^T dQ, skew), K = C -
 * Omega is upper triangular and
 *   dR = K R,  dQ = dA R^-1 - Q K
 * (Walter and Lehmann 2018; Liao et al. 2019). The adjoint of that map is
 *   M = R Rbar^T - Qbar^T Q,  Abar = (Qbar + Q copyltu(M)) R^-T,
 * copyltu(M) the symmetric matrix whose lower triangle is M's. */

/* Y = dA R^-1 (R upper triangular): R^T Y^T = dA^T. */
static tyto_tensor *right_inv(tyto_tensor *x, tyto_tensor *r, int transpose) {
  return mT(tyto_triangular_solve(r, mT(x), 0, !transpose, 0));
}

/* The tangents of Q and R of the square-or-tall QR (R [..., k, k]), into
 * *dq and *dr (either may be NULL: not wanted). n, the QR node, gives the
 * masks their graph and dtype: q and r may be error tensors here. */
static void qr_tall_jvp(tyto_tensor *n, int64_t k, tyto_tensor *q,
                        tyto_tensor *r, tyto_tensor *da, tyto_tensor **dq,
                        tyto_tensor **dr) {
  tyto_tensor *y = right_inv(da, r, 0);
  tyto_tensor *c = tyto_matmul(q, y, 1, 0);
  tyto_tensor *low = tyto_mul(c, mask(n, k, MASK_STRICT_LOWER));
  tyto_tensor *kk = tyto_add(tyto_sub(c, low), mT(low)); /* C - Omega */
  if (dr)
    *dr = tyto_matmul(kk, r, 0, 0);
  if (dq)
    *dq = tyto_sub(y, tyto_matmul(q, kk, 0, 0));
}

/* Abar of the square-or-tall QR from Qbar and Rbar (either NULL). */
static tyto_tensor *qr_tall_vjp(tyto_tensor *n, int64_t k, tyto_tensor *q,
                                tyto_tensor *r, tyto_tensor *qbar,
                                tyto_tensor *rbar) {
  tyto_tensor *m = ad_sub(rbar ? tyto_matmul(r, rbar, 0, 1) : NULL,
                          qbar ? tyto_matmul(qbar, q, 1, 0) : NULL);
  tyto_tensor *low = tyto_mul(m, mask(n, k, MASK_STRICT_LOWER));
  tyto_tensor *sym = tyto_add(tyto_mul(m, mask(n, k, MASK_LOWER)), mT(low));
  tyto_tensor *b = ad_add(qbar, tyto_matmul(q, sym, 0, 0));
  return right_inv(b, r, 1);
}

/* For m < n the factorisation is that of the square part: A = [X | Y] with
 * X [..., m, m], X = Q U and R = [U | V], V = Q^T Y. So dV = dQ^T Y + Q^T
 * dY, and in reverse Y's adjoint is Q Vbar and Q's grows by Y Vbar^T. */
static tyto_tensor *first_cols(tyto_tensor *x, int64_t m) {
  return tyto_slice_axis(x, -1, 0, m, 1);
}

static tyto_tensor *last_cols(tyto_tensor *x, int64_t m) {
  return tyto_slice_axis(x, -1, m, TYTO_END, 1);
}

static tyto_tensor *concat_cols(tyto_tensor *x, tyto_tensor *y) {
  tyto_tensor *xs[2] = {x, y};
  return tyto_concat(2, xs, -1);
}

/* Both factors of n's factorisation: n is one; the other comes from a new
 * tyto_qr() call, which common-subexpression elimination merges with the
 * original. */
static void qr_factors(tyto_tensor *n, tyto_tensor **q, tyto_tensor **r) {
  tyto_qr(n->inputs[0], q, r);
  if (n->iattrs[0] == 0)
    *q = n;
  else
    *r = n;
}

static tyto_tensor *qr_jvp(tyto_tensor *n, tyto_tensor *da) {
  tyto_tensor *a = n->inputs[0], *q, *r, *dq = NULL, *dr = NULL;
  int which = (int)n->iattrs[0];
  int64_t m = a->shape[a->rank - 2], cols = a->shape[a->rank - 1];
  qr_factors(n, &q, &r);
  if (m >= cols) {
    qr_tall_jvp(n, cols, q, r, da, which ? NULL : &dq, which ? &dr : NULL);
    return which ? dr : dq;
  }
  tyto_tensor *du = NULL;
  qr_tall_jvp(n, m, q, first_cols(r, m), first_cols(da, m), &dq,
              which ? &du : NULL);
  if (!which)
    return dq;
  tyto_tensor *dv = tyto_add(tyto_matmul(dq, last_cols(a, m), 1, 0),
                             tyto_matmul(q, last_cols(da, m), 1, 0));
  return concat_cols(du, dv);
}

static tyto_tensor *qr_vjp(tyto_tensor *n, tyto_tensor *g) {
  tyto_tensor *a = n->inputs[0], *q, *r;
  int which = (int)n->iattrs[0];
  int64_t m = a->shape[a->rank - 2], cols = a->shape[a->rank - 1];
  qr_factors(n, &q, &r);
  tyto_tensor *qbar = which ? NULL : g, *rbar = which ? g : NULL;
  if (m >= cols)
    return qr_tall_vjp(n, cols, q, r, qbar, rbar);
  tyto_tensor *u = first_cols(r, m), *ybar = NULL, *ubar = NULL;
  if (rbar) {
    tyto_tensor *vbar = last_cols(rbar, m);
    ubar = first_cols(rbar, m);
    qbar = tyto_matmul(last_cols(a, m), vbar, 0, 1);
    ybar = tyto_matmul(q, vbar, 0, 0);
  }
  tyto_tensor *xbar = qr_tall_vjp(n, m, q, u, qbar, ubar);
  /* Without Rbar, Y does not reach Q: its adjoint is zero. */
  if (!ybar) {
    int64_t shape[TYTO_MAX_RANK];
    for (int i = 0; i < a->rank; i++)
      shape[i] = a->shape[i];
    shape[a->rank - 1] = cols - m;
    ybar = tyto_full(a->graph, a->dtype, a->rank, shape, 0.0);
  }
  return concat_cols(xbar, ybar);
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */

int ad_vjp_linalg(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                  tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0];
  switch (n->op) {
  case TYTO_OP_INV: adj[0] = inv_vjp(n, g); break;
  case TYTO_OP_LOGDET: adj[0] = logdet_vjp(a, g); break;
  case TYTO_OP_DET: adj[0] = logdet_vjp(a, tyto_mul(g, n)); break;
  case TYTO_OP_SOLVE: return solve_vjp(n, g, need, adj);
  case TYTO_OP_TRIANGULAR_SOLVE: return trisolve_vjp(n, g, need, adj);
  case TYTO_OP_CHOLESKY: adj[0] = cholesky_vjp(n, g); break;
  case TYTO_OP_QR: adj[0] = qr_vjp(n, g); break;
  default:
    graph_fail(n->graph, "ad: internal: %s is not a linalg op",
               tyto_op_name(n->op));
    return -1;
  }
  return tyto_graph_status(n->graph) == TYTO_OK ? 0 : -1;
}

tyto_tensor *ad_jvp_linalg(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *a = n->inputs[0], *da = tan[0];
  switch (n->op) {
  case TYTO_OP_SOLVE: return solve_jvp(n, tan);
  case TYTO_OP_TRIANGULAR_SOLVE: return trisolve_jvp(n, tan);
  default: break;
  }
  /* The single-input ops: tan[0] is not NULL here. */
  switch (n->op) {
  case TYTO_OP_INV: return inv_jvp(n, da);
  case TYTO_OP_LOGDET: return logdet_jvp(a, da);
  case TYTO_OP_DET: return tyto_mul(n, logdet_jvp(a, da));
  case TYTO_OP_CHOLESKY: return cholesky_jvp(n, da);
  case TYTO_OP_QR: return qr_jvp(n, da);
  default:
    return graph_fail(n->graph, "ad: internal: %s is not a linalg op",
                      tyto_op_name(n->op));
  }
}
