/*
 * Derivative rules: softmax, log_softmax, conv2d, the pools and their
 * derivative ops.
 *
 * conv2d is bilinear in (x, w): its partial derivatives are the derivative
 * ops conv2d_backward_data (in x) and conv2d_backward_filter (in w), and
 * those are bilinear too, so the three ops' rules are written with each
 * other: with <a, b> the inner product,
 *   <conv2d(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x,
 * dy)>. max_pool2d is linear in x between ties, its tangent
 * max_pool2d_select(x, t) picks t at the first maximum of each window, and
 * max_pool2d_backward(x, dy) is select's adjoint in its second input; both have
 * a zero derivative in x (the positions of the maxima are piecewise constant).
 * avg_pool2d and avg_pool2d_backward are linear and each other's adjoint.
 */
#include "config.h"

#include "rules.h"

/* The conv2d parameters of a CONV2D node or of its derivative ops (whose
 * iattrs start with CONV2D's seven). */
static tyto_conv2d_params conv_params(const tyto_tensor *n) {
  const int64_t *ia = n->iattrs;
  tyto_conv2d_params p = {
      {ia[0], ia[1]}, {ia[2], ia[3]}, {ia[4], ia[5]}, ia[6]};
  return p;
}

/* The pool parameters (kernel, stride, padding; iattrs[0..5]). */
typedef struct pool_params {
  int64_t kh, kw, sh, sw, ph, pw;
} pool_params;

static pool_params pool_of(const tyto_tensor *n) {
  const int64_t *ia = n->iattrs;
  pool_params p = {ia[0], ia[1], ia[2], ia[3], ia[4], ia[5]};
  return p;
}

static tyto_tensor *max_select(tyto_tensor *x, tyto_tensor *t, pool_params p) {
  return tyto_max_pool2d_select(x, t, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
}

static tyto_tensor *max_backward(tyto_tensor *x, tyto_tensor *dy,
                                 pool_params p) {
  return tyto_max_pool2d_backward(x, dy, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
}

static tyto_tensor *avg_forward(tyto_tensor *t, pool_params p) {
  return tyto_avg_pool2d(t, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
}

/* avg_pool2d's adjoint onto an input shaped as `like`. */
static tyto_tensor *avg_backward(tyto_tensor *dy, const tyto_tensor *like,
                                 pool_params p) {
  return tyto_avg_pool2d_backward(dy, like->shape[2], like->shape[3], p.kh,
                                  p.kw, p.sh, p.sw, p.ph, p.pw);
}

/* The data adjoint of a convolution onto an input shaped as `like`. */
static tyto_tensor *conv_data(tyto_tensor *dy, tyto_tensor *w,
                              const tyto_tensor *like,
                              const tyto_conv2d_params *p) {
  return tyto_conv2d_backward_data(dy, w, like->shape[2], like->shape[3], p);
}

/* The filter adjoint of a convolution, for a filter shaped as `like`. */
static tyto_tensor *conv_filter(tyto_tensor *x, tyto_tensor *dy,
                                const tyto_tensor *like,
                                const tyto_conv2d_params *p) {
  return tyto_conv2d_backward_filter(x, dy, like->shape[2], like->shape[3], p);
}

/* y * (v - sum(v * y, axis)): the softmax Jacobian (symmetric) applied to
 * v, for y = softmax(x). */
static tyto_tensor *softmax_apply(tyto_tensor *y, tyto_tensor *v, int axis) {
  tyto_tensor *s = tyto_sum(tyto_mul(v, y), 1, &axis, 1);
  return tyto_mul(y, tyto_sub(v, s));
}

/* v - softmax(x) * sum(v, axis) with softmax(x) = exp(y), y = log_softmax(x):
 * the log_softmax Jacobian transposed, applied to v. */
static tyto_tensor *log_softmax_vjp(tyto_tensor *y, tyto_tensor *v, int axis) {
  tyto_tensor *s = tyto_sum(v, 1, &axis, 1);
  return tyto_sub(v, tyto_mul(tyto_exp(y), s));
}

/* v - sum(softmax(x) * v, axis): the log_softmax Jacobian applied to v. */
static tyto_tensor *log_softmax_jvp(tyto_tensor *y, tyto_tensor *v, int axis) {
  return tyto_sub(v, tyto_sum(tyto_mul(tyto_exp(y), v), 1, &axis, 1));
}

int ad_vjp_nn(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
              tyto_tensor **adj) {
  tyto_tensor *a = n->inputs[0], *b = n->n_inputs > 1 ? n->inputs[1] : NULL;
  if (tyto_tensor_numel(n) == 0)
    return 0; /* an empty result has a zero adjoint */
  switch (n->op) {
  case TYTO_OP_SOFTMAX:
    adj[0] = softmax_apply(n, g, (int)n->iattrs[0]);
    return 0;
  case TYTO_OP_LOG_SOFTMAX:
    adj[0] = log_softmax_vjp(n, g, (int)n->iattrs[0]);
    return 0;
  case TYTO_OP_CONV2D: {
    tyto_conv2d_params p = conv_params(n);
    if (need[0])
      adj[0] = conv_data(g, b, a, &p);
    if (need[1])
      adj[1] = conv_filter(a, g, b, &p);
    if (n->n_inputs > 2 && need[2]) {
      int axes[3] = {0, 2, 3};
      adj[2] = tyto_sum(g, 3, axes, 0);
    }
    return 0;
  }
  case TYTO_OP_CONV2D_BACKWARD_DATA: {
    /* (dy, w) -> dx: a convolution of G gives dy's adjoint, and w's is the
     * filter gradient of a convolution of G producing dy. */
    tyto_conv2d_params p = conv_params(n);
    if (need[0])
      adj[0] = tyto_conv2d(g, b, NULL, &p);
    if (need[1])
      adj[1] = conv_filter(g, a, b, &p);
    return 0;
  }
  case TYTO_OP_CONV2D_BACKWARD_FILTER: {
    /* (x, dy) -> dw: G plays the filter. */
    tyto_conv2d_params p = conv_params(n);
    if (need[0])
      adj[0] = conv_data(b, g, a, &p);
    if (need[1])
      adj[1] = tyto_conv2d(a, g, NULL, &p);
    return 0;
  }
  case TYTO_OP_MAX_POOL2D: adj[0] = max_backward(a, g, pool_of(n)); return 0;
  case TYTO_OP_MAX_POOL2D_BACKWARD:
    /* (x, dy): no adjoint for x. */
    if (need[1])
      adj[1] = max_select(a, g, pool_of(n));
    return 0;
  case TYTO_OP_MAX_POOL2D_SELECT:
    /* (x, t): no adjoint for x. */
    if (need[1])
      adj[1] = max_backward(a, g, pool_of(n));
    return 0;
  case TYTO_OP_AVG_POOL2D: adj[0] = avg_backward(g, a, pool_of(n)); return 0;
  case TYTO_OP_AVG_POOL2D_BACKWARD:
    adj[0] = avg_forward(g, pool_of(n));
    return 0;
  default:
    graph_fail(n->graph, "ad: op %s has no VJP rule in rules_nn.c",
               tyto_op_name(n->op));
    return -1;
  }
}

tyto_tensor *ad_jvp_nn(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_tensor *a = n->inputs[0], *b = n->n_inputs > 1 ? n->inputs[1] : NULL;
  tyto_tensor *ta = tan[0], *tb = n->n_inputs > 1 ? tan[1] : NULL;
  if (tyto_tensor_numel(n) == 0)
    return NULL;
  switch (n->op) {
  case TYTO_OP_SOFTMAX: return softmax_apply(n, ta, (int)n->iattrs[0]);
  case TYTO_OP_LOG_SOFTMAX: return log_softmax_jvp(n, ta, (int)n->iattrs[0]);
  case TYTO_OP_CONV2D: {
    tyto_conv2d_params p = conv_params(n);
    tyto_tensor *tbias = n->n_inputs > 2 ? tan[2] : NULL, *r = NULL;
    /* The bias tangent rides on the first convolution built. */
    if (ta) {
      r = tyto_conv2d(ta, b, tbias, &p);
      tbias = NULL;
    }
    if (tb) {
      r = ad_add(r, tyto_conv2d(a, tb, tbias, &p));
      tbias = NULL;
    }
    if (tbias) {
      int64_t s[4] = {1, n->shape[1], 1, 1};
      r = tyto_broadcast_to(tyto_reshape(tbias, 4, s), 4, n->shape);
    }
    return r;
  }
  case TYTO_OP_CONV2D_BACKWARD_DATA: {
    tyto_conv2d_params p = conv_params(n);
    tyto_tensor *r = ta ? conv_data(ta, b, n, &p) : NULL;
    return tb ? ad_add(r, conv_data(a, tb, n, &p)) : r;
  }
  case TYTO_OP_CONV2D_BACKWARD_FILTER: {
    tyto_conv2d_params p = conv_params(n);
    tyto_tensor *r = ta ? conv_filter(ta, b, n, &p) : NULL;
    return tb ? ad_add(r, conv_filter(a, tb, n, &p)) : r;
  }
  case TYTO_OP_MAX_POOL2D: return max_select(a, ta, pool_of(n));
  case TYTO_OP_MAX_POOL2D_BACKWARD:
    return tb ? max_backward(a, tb, pool_of(n)) : NULL;
  case TYTO_OP_MAX_POOL2D_SELECT:
    return tb ? max_select(a, tb, pool_of(n)) : NULL;
  case TYTO_OP_AVG_POOL2D: return avg_forward(ta, pool_of(n));
  case TYTO_OP_AVG_POOL2D_BACKWARD: return avg_backward(ta, n, pool_of(n));
  default:
    return graph_fail(n->graph, "ad: op %s has no JVP rule in rules_nn.c",
                      tyto_op_name(n->op));
  }
}
