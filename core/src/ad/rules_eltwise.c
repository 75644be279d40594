/*
 * Derivative rules of the elementwise ops: unary, binary, WHERE and FMA.
 *
 * A unary op's derivative is a product with f'(x), so one function serves
 * both modes: the VJP multiplies the adjoint by f'(x) and the JVP the
 * tangent. f'(x) is written with the node's own output y where that is
 * cheaper and keeps nested derivatives small (exp' = y, tanh' = 1 - y^2).
 *
 * Binary ops broadcast; a VJP contribution is summed back to its input's
 * shape (ad_sum_to), and a JVP that sees only one tangent broadcasts it to
 * the output's shape (ad_broadcast_like).
 *
 * Non-differentiable points follow <tyto/ad.h>: masks are built with
 * comparisons and WHERE (which has no derivative in its condition), so the
 * conventions survive differentiating again.
 */
#include "config.h"

#include "rules.h"

static tyto_tensor *sc(const tyto_tensor *like, double v) {
  return ad_scalar(like, v);
}

/* s * f'(x) for unary node n with input x and output n; NULL when f' is
 * zero. s is the adjoint (VJP) or the tangent (JVP), shaped as n. */
static tyto_tensor *unary_lin(tyto_tensor *n, tyto_tensor *s) {
  tyto_tensor *x = n->inputs[0], *y = n;
  switch (n->op) {
  case TYTO_OP_NEG: return tyto_neg(s);
  case TYTO_OP_ABS: /* abs'(0) = sign(0) = 0 */
    return tyto_mul(s, tyto_sign(x));
  case TYTO_OP_SIGN:
  case TYTO_OP_FLOOR:
  case TYTO_OP_CEIL:
  case TYTO_OP_ROUND: return NULL;
  case TYTO_OP_EXP: return tyto_mul(s, y);
  case TYTO_OP_LOG: return tyto_div(s, x);
  case TYTO_OP_LOG1P: return tyto_div(s, tyto_add_scalar(x, 1.0));
  case TYTO_OP_EXPM1: /* e^x = y + 1 */
    return tyto_mul(s, tyto_add_scalar(y, 1.0));
  case TYTO_OP_SQRT: /* 1 / (2 sqrt x) */
    return tyto_div(s, tyto_mul_scalar(y, 2.0));
  case TYTO_OP_RSQRT: /* -x^(-3/2) / 2 = -y^3 / 2 */
    return tyto_mul(s, tyto_mul_scalar(tyto_mul(y, tyto_square(y)), -0.5));
  case TYTO_OP_SQUARE: return tyto_mul(s, tyto_mul_scalar(x, 2.0));
  case TYTO_OP_RECIPROCAL: /* -1/x^2 = -y^2 */
    return tyto_mul(s, tyto_neg(tyto_square(y)));
  case TYTO_OP_SIN: return tyto_mul(s, tyto_cos(x));
  case TYTO_OP_COS: return tyto_mul(s, tyto_neg(tyto_sin(x)));
  case TYTO_OP_TAN: /* 1 + tan^2 */
    return tyto_mul(s, tyto_add_scalar(tyto_square(y), 1.0));
  case TYTO_OP_ASIN: /* 1 / sqrt(1 - x^2) */
    return tyto_mul(s, tyto_rsqrt(tyto_sub(sc(x, 1.0), tyto_square(x))));
  case TYTO_OP_ACOS:
    return tyto_mul(s,
                    tyto_neg(tyto_rsqrt(tyto_sub(sc(x, 1.0), tyto_square(x)))));
  case TYTO_OP_ATAN: return tyto_div(s, tyto_add_scalar(tyto_square(x), 1.0));
  case TYTO_OP_SINH: return tyto_mul(s, tyto_cosh(x));
  case TYTO_OP_COSH: return tyto_mul(s, tyto_sinh(x));
  case TYTO_OP_TANH: /* 1 - tanh^2 */
    return tyto_mul(s, tyto_sub(sc(x, 1.0), tyto_square(y)));
  case TYTO_OP_ASINH:
    return tyto_mul(s, tyto_rsqrt(tyto_add_scalar(tyto_square(x), 1.0)));
  case TYTO_OP_ACOSH: /* (x - 1)(x + 1) rather than x^2 - 1: no
                         cancellation near 1 */
    return tyto_mul(s, tyto_rsqrt(tyto_mul(tyto_sub_scalar(x, 1.0),
                                           tyto_add_scalar(x, 1.0))));
  case TYTO_OP_ATANH: return tyto_div(s, tyto_sub(sc(x, 1.0), tyto_square(x)));
  case TYTO_OP_SIGMOID: /* y (1 - y) */
    return tyto_mul(s, tyto_mul(y, tyto_sub(sc(x, 1.0), y)));
  case TYTO_OP_RELU: /* relu'(0) = 0; WHERE masks an infinite s cleanly */
    return tyto_where(tyto_gt(x, sc(x, 0.0)), s, sc(x, 0.0));
  case TYTO_OP_LEAKY_RELU: /* the slope for x <= 0 */
    return tyto_where(tyto_gt(x, sc(x, 0.0)), s,
                      tyto_mul_scalar(s, n->fattrs[0]));
  case TYTO_OP_ELU: /* alpha e^x = y + alpha for x <= 0 */
    return tyto_where(tyto_gt(x, sc(x, 0.0)), s,
                      tyto_mul(s, tyto_add_scalar(y, n->fattrs[0])));
  case TYTO_OP_SOFTPLUS: return tyto_mul(s, tyto_sigmoid(x));
  case TYTO_OP_ERF: /* 2/sqrt(pi) e^(-x^2) */
    return tyto_mul(s, tyto_mul_scalar(tyto_exp(tyto_neg(tyto_square(x))),
                                       1.1283791670955126));
  default:
    return graph_fail(n->graph, "ad: internal: %s is not a unary op",
                      tyto_op_name(n->op));
  }
}

/* max(a, b)'s weight for a: 1 where a > b, 1/2 on a tie, else 0 (and
 * min's with the comparisons reversed). Comparisons have no derivative,
 * so the weight is a constant to nested derivatives. */
static tyto_tensor *select_weight(tyto_op op, tyto_tensor *a, tyto_tensor *b) {
  tyto_tensor *w = op == TYTO_OP_MAX ? tyto_add(tyto_ge(a, b), tyto_gt(a, b))
                                     : tyto_add(tyto_le(a, b), tyto_lt(a, b));
  return tyto_mul_scalar(w, 0.5);
}

/* d(a^b)/da = b a^(b-1), shaped as the output. */
static tyto_tensor *pow_da(tyto_tensor *a, tyto_tensor *b) {
  /* Where b = 0 the derivative is 0, but b * a^(b-1) would read 0 * inf
   * at a = 0: the third derivative of x^2 at 0 goes through here. The
   * power reads a safe operand there so no nested derivative sees it. */
  tyto_tensor *b0 = tyto_eq(b, sc(a, 0.0));
  tyto_tensor *as = tyto_where(b0, sc(a, 1.0), a);
  return tyto_where(b0, sc(a, 0.0),
                    tyto_mul(b, tyto_pow(as, tyto_sub_scalar(b, 1.0))));
}

/* d(a^b)/db = a^b log(a) where a > 0, else 0. log reads a safe operand
 * (1 where a <= 0) so that neither this value nor its own derivatives
 * (1/a, masked by the outer WHERE's adjoint, which never multiplies) see
 * a log or a division by zero. */
static tyto_tensor *pow_db(tyto_tensor *n) {
  tyto_tensor *a = n->inputs[0], *zero = sc(a, 0.0);
  tyto_tensor *pos = tyto_gt(a, zero);
  tyto_tensor *la = tyto_log(tyto_where(pos, a, sc(a, 1.0)));
  return tyto_where(pos, tyto_mul(n, la), zero);
}

/* d atan2(a, b) = (b da - a db) / (a^2 + b^2). */
static tyto_tensor *atan2_den(tyto_tensor *a, tyto_tensor *b) {
  return tyto_add(tyto_square(a), tyto_square(b));
}

static int vjp_binary(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                      tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
  tyto_tensor *ga = NULL, *gb = NULL; /* shaped as n */
  switch (n->op) {
  case TYTO_OP_ADD: ga = gb = g; break;
  case TYTO_OP_SUB:
    ga = g;
    /* negate after summing down: the smaller tensor */
    if (need[1])
      adj[1] = ad_neg(ad_sum_to(g, b));
    break;
  case TYTO_OP_MUL:
    if (need[0])
      ga = tyto_mul(g, b);
    if (need[1])
      gb = tyto_mul(g, a);
    break;
  case TYTO_OP_DIV: { /* y = a/b: da = g/b, db = -g y / b */
    tyto_tensor *q = tyto_div(g, b);
    ga = q;
    if (need[1])
      gb = tyto_neg(tyto_mul(q, n));
    break;
  }
  case TYTO_OP_POW:
    if (need[0])
      ga = tyto_mul(g, pow_da(a, b));
    if (need[1])
      gb = tyto_mul(g, pow_db(n));
    break;
  case TYTO_OP_MAX:
  case TYTO_OP_MIN: {
    tyto_tensor *full = tyto_mul(g, select_weight(n->op, a, b));
    ga = full;
    if (need[1])
      gb = tyto_sub(g, full);
    break;
  }
  case TYTO_OP_ATAN2: {
    tyto_tensor *q = tyto_div(g, atan2_den(a, b));
    if (need[0])
      ga = tyto_mul(q, b);
    if (need[1])
      gb = tyto_neg(tyto_mul(q, a));
    break;
  }
  default: /* comparisons: zero */ return 0;
  }
  if (need[0])
    adj[0] = ad_sum_to(ga, a);
  if (need[1] && !adj[1])
    adj[1] = ad_sum_to(gb, b);
  return 0;
}

static tyto_tensor *jvp_binary(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
  tyto_tensor *ta = tan[0], *tb = tan[1], *r = NULL;
  switch (n->op) {
  case TYTO_OP_ADD: r = ad_add(ta, tb); break;
  case TYTO_OP_SUB: r = ad_sub(ta, tb); break;
  case TYTO_OP_MUL:
    r = ad_add(ta ? tyto_mul(ta, b) : NULL, tb ? tyto_mul(a, tb) : NULL);
    break;
  case TYTO_OP_DIV: /* (ta - y tb) / b */
    r = tyto_div(ad_sub(ta, tb ? tyto_mul(n, tb) : NULL), b);
    break;
  case TYTO_OP_POW:
    r = ad_add(ta ? tyto_mul(ta, pow_da(a, b)) : NULL,
               tb ? tyto_mul(tb, pow_db(n)) : NULL);
    break;
  case TYTO_OP_MAX:
  case TYTO_OP_MIN:
    /* b's weight is a's with the arguments swapped: 1/2 on a tie too */
    r = ad_add(ta ? tyto_mul(ta, select_weight(n->op, a, b)) : NULL,
               tb ? tyto_mul(tb, select_weight(n->op, b, a)) : NULL);
    break;
  case TYTO_OP_ATAN2:
    r = tyto_div(
        ad_sub(ta ? tyto_mul(ta, b) : NULL, tb ? tyto_mul(tb, a) : NULL),
        atan2_den(a, b));
    break;
  default: /* comparisons */ return NULL;
  }
  return ad_broadcast_like(r, n);
}

int ad_vjp_eltwise(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                   tyto_tensor **adj) {
  tyto_op op = n->op;
  if (op == TYTO_OP_CAST) { /* the cast back */
    adj[0] = tyto_cast(g, n->inputs[0]->dtype);
  } else if (op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) {
    adj[0] = unary_lin(n, g);
  } else if (op >= TYTO_OP_ADD && op <= TYTO_OP_GE) {
    vjp_binary(n, g, need, adj);
  } else if (op == TYTO_OP_WHERE) { /* the condition gets nothing */
    tyto_tensor *c = n->inputs[0], *zero = sc(n, 0.0);
    if (need[1])
      adj[1] =
          ad_sum_to(ad_broadcast_like(tyto_where(c, g, zero), n), n->inputs[1]);
    if (need[2])
      adj[2] =
          ad_sum_to(ad_broadcast_like(tyto_where(c, zero, g), n), n->inputs[2]);
  } else if (op == TYTO_OP_FMA) { /* a*b + c */
    tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
    if (need[0])
      adj[0] = ad_sum_to(tyto_mul(g, b), a);
    if (need[1])
      adj[1] = ad_sum_to(tyto_mul(g, a), b);
    if (need[2])
      adj[2] = ad_sum_to(g, n->inputs[2]);
  } else {
    graph_fail(n->graph, "ad: internal: %s is not elementwise",
               tyto_op_name(op));
  }
  for (size_t i = 0; i < n->n_inputs; i++)
    if (adj[i] && tyto_tensor_is_error(adj[i]))
      return -1;
  return n->graph->status == TYTO_OK ? 0 : -1;
}

tyto_tensor *ad_jvp_eltwise(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_op op = n->op;
  tyto_tensor *r;
  if (op == TYTO_OP_CAST) {
    r = tan[0] ? tyto_cast(tan[0], n->dtype) : NULL;
  } else if (op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) {
    r = unary_lin(n, tan[0]);
  } else if (op >= TYTO_OP_ADD && op <= TYTO_OP_GE) {
    r = jvp_binary(n, tan);
  } else if (op == TYTO_OP_WHERE) {
    if (!tan[1] && !tan[2])
      return NULL;
    tyto_tensor *zero = sc(n, 0.0);
    r = ad_broadcast_like(tyto_where(n->inputs[0], tan[1] ? tan[1] : zero,
                                     tan[2] ? tan[2] : zero),
                          n);
  } else if (op == TYTO_OP_FMA) {
    tyto_tensor *a = n->inputs[0], *b = n->inputs[1];
    r = tan[0] ? tyto_mul(tan[0], b) : NULL;
    if (tan[1])
      r = r ? tyto_fma(a, tan[1], r) : tyto_mul(a, tan[1]);
    r = ad_broadcast_like(ad_add(r, tan[2]), n);
  } else {
    return graph_fail(n->graph, "ad: internal: %s is not elementwise",
                      tyto_op_name(op));
  }
  if (n->graph->status != TYTO_OK)
    return &n->graph->error;
  return r;
}
