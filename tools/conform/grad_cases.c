/*
 * The graphs of grad mode (see grad.h). Each builds a scalar loss from
 * inputs (and parameters), takes its gradients with tyto_grads() and lists
 * the loss, a few intermediate values and every gradient as outputs. The
 * graphs are chosen so that, once differentiated and compiled, they run
 * the device's fused elementwise kernels, reductions, matmul with
 * transposes, softmax, conv2d and its two derivatives, both poolings and
 * their derivatives (and MAX_POOL2D_SELECT through a Jacobian-vector
 * product), pad, gather and scatter_add, random ops with a step, and the
 * linear algebra ops.
 */
#include "grad.h"

#include <stdio.h>
#include <string.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define A(...) ((const int[]){__VA_ARGS__})

/* An input (parameter: 1 for a parameter) with values uniform in [lo, hi]
 * or as `v` says. */
static tyto_tensor *input_v(cf_grad_graph *G, const char *name, int parameter,
                            int rank, const int64_t *shape, cf_values v,
                            double lo, double hi) {
  tyto_tensor *t = parameter ? tyto_parameter(G->g, G->dtype, rank, shape, name)
                             : tyto_input(G->g, G->dtype, rank, shape, name);
  if (G->n_in < CF_GRAD_MAX_IN) {
    cf_grad_input *in = &G->in[G->n_in++];
    in->t = t;
    in->parameter = parameter;
    in->values = v;
    in->lo = lo;
    in->hi = hi;
  }
  return t;
}

static tyto_tensor *input(cf_grad_graph *G, const char *name, int rank,
                          const int64_t *shape, double lo, double hi) {
  return input_v(G, name, 0, rank, shape, CF_UNIFORM, lo, hi);
}

static void output(cf_grad_graph *G, const char *name, tyto_tensor *t) {
  if (G->n_out < CF_GRAD_MAX_OUT) {
    snprintf(G->out_name[G->n_out], sizeof G->out_name[0], "%s", name);
    G->out[G->n_out++] = t;
  }
}

/* Outputs the loss y and its gradients with respect to the n tensors xs
 * (named "d" + the tensor's name), from one reverse sweep. */
static void grads(cf_grad_graph *G, tyto_tensor *y, size_t n,
                  tyto_tensor *const *xs) {
  tyto_tensor *gs[CF_GRAD_MAX_IN];
  char name[32];
  output(G, "loss", y);
  tyto_grads(y, n, xs, gs);
  for (size_t i = 0; i < n; i++) {
    const char *xn = tyto_tensor_name(xs[i]);
    snprintf(name, sizeof name, "d%.30s", xn ? xn : "?");
    output(G, name, gs[i]);
  }
}

static tyto_tensor *total(tyto_tensor *x) {
  return tyto_sum(x, 0, NULL, 0);
}

/* A constant of whole numbers (indices). */
static tyto_tensor *indices(cf_grad_graph *G, int64_t n, const double *v) {
  return tyto_constant(G->g, G->dtype, 1, &n, v);
}

/* Mean over rows of -sum(labels * log_softmax(logits)): softmax
 * cross-entropy against one-hot labels of class indices `cls`. */
static tyto_tensor *cross_entropy(cf_grad_graph *G, tyto_tensor *logits,
                                  int64_t n, const double *cls,
                                  int64_t classes) {
  tyto_tensor *labels = tyto_one_hot(indices(G, n, cls), classes);
  tyto_tensor *ll =
      tyto_sum(tyto_mul(labels, tyto_log_softmax(logits, 1)), 1, A(1), 0);
  return tyto_neg(tyto_mean(ll, 0, NULL, 0));
}

/* ----------------------------------------------------------- elementwise -- */

static void g_chain(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 2, S(8, 33), -2, 2);
  tyto_tensor *w = input(G, "w", 2, S(8, 33), -2, 2);
  tyto_tensor *t =
      tyto_add(tyto_mul(tyto_tanh(tyto_add_scalar(tyto_mul(x, w), 0.5)),
                        tyto_sigmoid(x)),
               tyto_exp(tyto_neg(tyto_square(x))));
  output(G, "t", t);
  tyto_tensor *xs[2] = {x, w};
  grads(G, total(tyto_square(t)), 2, xs);
}

static void g_broadcast(cf_grad_graph *G) {
  tyto_tensor *a = input(G, "a", 3, S(4, 1, 5), -2, 2);
  tyto_tensor *b = input(G, "b", 2, S(3, 5), -2, 2);
  tyto_tensor *d = tyto_div(tyto_sub(a, b), tyto_add_scalar(tyto_square(b), 1));
  tyto_tensor *z = tyto_where(tyto_gt(a, b), tyto_log1p(tyto_square(d)),
                              tyto_mul(tyto_max(a, b), tyto_softplus(d)));
  output(G, "z", z);
  tyto_tensor *xs[2] = {a, b};
  grads(G, tyto_mean(z, 0, NULL, 0), 2, xs);
}

static void g_unary(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 2, S(6, 20), 0.1, 2);
  tyto_tensor *t =
      tyto_add(tyto_add(tyto_pow(tyto_sqrt(x), tyto_cos(x)),
                        tyto_mul(tyto_erf(x), tyto_atan(x))),
               tyto_add(tyto_elu(tyto_sin(tyto_mul_scalar(x, 3)), 0.7),
                        tyto_leaky_relu(tyto_sub_scalar(x, 1), 0.1)));
  output(G, "t", t);
  grads(G, total(t), 1, &x);
}

/* ------------------------------------------------------------ reductions -- */

static void g_reduce(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 3, S(6, 7, 8), -2, 2);
  tyto_tensor *s = tyto_sum(x, 1, A(2), 1);
  tyto_tensor *m = tyto_mean(x, 2, A(0, 2), 0);
  tyto_tensor *mx = tyto_reduce_max(x, 1, A(1), 0);
  tyto_tensor *lse = tyto_log_sum_exp(x, 1, A(2), 0);
  output(G, "sum", s);
  output(G, "max", mx);
  output(G, "log_sum_exp", lse);
  tyto_tensor *y = tyto_add(
      tyto_add(total(tyto_square(s)), total(tyto_mul(m, m))),
      tyto_add(tyto_add(total(mx), total(lse)), tyto_norm_l2(x, 0, NULL, 0)));
  grads(G, y, 1, &x);
}

/* Layer normalisation: means and variances kept as [5,1] and broadcast. */
static void g_layernorm(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 2, S(5, 9), -2, 2);
  tyto_tensor *w = input(G, "w", 2, S(5, 9), -1, 1);
  tyto_tensor *c = tyto_sub(x, tyto_mean(x, 1, A(1), 1));
  tyto_tensor *v = tyto_mean(tyto_square(c), 1, A(1), 1);
  tyto_tensor *y = tyto_mul(c, tyto_rsqrt(tyto_add_scalar(v, 1e-5)));
  output(G, "y", y);
  tyto_tensor *xs[2] = {x, w};
  grads(G, total(tyto_mul(y, w)), 2, xs);
}

/* ---------------------------------------------------------------- matmul -- */

static void g_matmul(cf_grad_graph *G) {
  tyto_tensor *a = input(G, "a", 2, S(5, 7), -1, 1);
  tyto_tensor *b = input(G, "b", 2, S(3, 7), -1, 1);
  tyto_tensor *c = input(G, "c", 2, S(5, 4), -1, 1);
  tyto_tensor *p = tyto_matmul(a, b, 0, 1); /* [5,3] */
  tyto_tensor *q = tyto_matmul(a, c, 1, 0); /* [7,4] */
  output(G, "a b^T", p);
  output(G, "a^T c", q);
  tyto_tensor *xs[3] = {a, b, c};
  grads(G, tyto_add(total(tyto_square(p)), total(tyto_tanh(q))), 3, xs);
}

static void g_matmul_batch(cf_grad_graph *G) {
  tyto_tensor *a = input(G, "a", 3, S(2, 4, 6), -1, 1);
  tyto_tensor *b = input(G, "b", 2, S(6, 3), -1, 1);
  tyto_tensor *y = tyto_matmul(a, b, 0, 0);
  output(G, "y", y);
  tyto_tensor *xs[2] = {a, b};
  grads(G, tyto_mul_scalar(total(tyto_square(y)), 0.5), 2, xs);
}

/* --------------------------------------------------------------- softmax -- */

static void g_softmax_ce(cf_grad_graph *G) {
  static const double cls[8] = {0, 3, 4, 1, 1, 2, 0, 4};
  tyto_tensor *x = input(G, "x", 2, S(8, 10), -2, 2);
  tyto_tensor *w = input(G, "w", 2, S(10, 5), -1, 1);
  tyto_tensor *logits = tyto_matmul(x, w, 0, 0);
  output(G, "softmax", tyto_softmax(logits, 1));
  tyto_tensor *xs[2] = {x, w};
  grads(G, cross_entropy(G, logits, 8, cls, 5), 2, xs);
}

/* ---------------------------------------------------------------- conv2d -- */

static void g_conv(cf_grad_graph *G) {
  tyto_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  tyto_tensor *x = input(G, "x", 4, S(2, 3, 9, 9), -1, 1);
  tyto_tensor *w = input(G, "w", 4, S(4, 3, 3, 3), -1, 1);
  tyto_tensor *b = input(G, "b", 1, S(4), -1, 1);
  tyto_tensor *y = tyto_conv2d(x, w, b, &p);
  output(G, "y", y);
  tyto_tensor *xs[3] = {x, w, b};
  grads(G, tyto_mul_scalar(total(tyto_square(y)), 0.5), 3, xs);
}

static void g_conv_strided(cf_grad_graph *G) {
  tyto_conv2d_params pg = {{1, 2}, {1, 0}, {1, 1}, 2};
  tyto_conv2d_params pd = {{2, 2}, {0, 0}, {2, 2}, 1};
  tyto_tensor *x = input(G, "x", 4, S(1, 4, 8, 9), -1, 1);
  tyto_tensor *w = input(G, "w", 4, S(6, 2, 3, 2), -1, 1);
  tyto_tensor *x2 = input(G, "x2", 4, S(2, 3, 11, 12), -1, 1);
  tyto_tensor *w2 = input(G, "w2", 4, S(5, 3, 3, 3), -1, 1);
  tyto_tensor *y = tyto_conv2d(x, w, NULL, &pg);
  tyto_tensor *y2 = tyto_conv2d(x2, w2, NULL, &pd);
  output(G, "y groups", y);
  output(G, "y dilated", y2);
  tyto_tensor *xs[4] = {x, w, x2, w2};
  grads(G, tyto_add(total(tyto_tanh(y)), total(tyto_square(y2))), 4, xs);
}

/* ----------------------------------------------------------------- pools -- */

static void g_max_pool(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 4, S(2, 3, 9, 10), -2, 2);
  tyto_tensor *v = input(G, "v", 4, S(2, 3, 5, 5), -1, 1);
  tyto_tensor *t = input(G, "t", 4, S(2, 3, 9, 10), -1, 1);
  tyto_tensor *y = tyto_max_pool2d(x, 3, 3, 2, 2, 1, 1);
  output(G, "y", y);
  /* The tangent of the pool along t: MAX_POOL2D_SELECT. */
  output(G, "jvp along t", tyto_jacobianv(y, x, t));
  tyto_tensor *xs[2] = {x, v};
  grads(G, total(tyto_mul(y, v)), 2, xs);
}

static void g_avg_pool(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 4, S(2, 3, 9, 10), -2, 2);
  tyto_tensor *y = tyto_avg_pool2d(x, 3, 2, 1, 2, 1, 0);
  tyto_tensor *z = tyto_max_pool2d(x, 2, 2, 2, 2, 0, 0);
  output(G, "avg", y);
  output(G, "max", z);
  grads(G, tyto_add(total(tyto_square(y)), total(tyto_sin(z))), 1, &x);
}

/* ---------------------------------------------------------------- layout -- */

static void g_pad_gather(cf_grad_graph *G) {
  static const double idx[7] = {0, 3, 3, 7, 1, 7, 2}; /* rows of [8, 9] */
  tyto_tensor *x = input(G, "x", 2, S(5, 6), -2, 2);
  tyto_tensor *p1 =
      tyto_pad(x, S(1, 2), S(2, 1), TYTO_PAD_REFLECT, 0); /* [8, 9] */
  tyto_tensor *p2 = tyto_pad(x, S(0, 1), S(1, 0), TYTO_PAD_CONSTANT, 0.5);
  tyto_tensor *g = tyto_gather(p1, indices(G, 7, idx), 0);
  output(G, "gathered", g);
  output(G, "constant pad", p2);
  grads(G, tyto_add(total(tyto_square(g)), total(tyto_sin(p2))), 1, &x);
}

static void g_scatter(cf_grad_graph *G) {
  static const double idx[6] = {1, 4, 1, 0, 4, 1}, cls[5] = {3, 0, 2, 2, 1};
  tyto_tensor *base = input(G, "base", 2, S(5, 4), -2, 2);
  tyto_tensor *upd = input(G, "updates", 2, S(6, 4), -2, 2);
  tyto_tensor *s = tyto_scatter_add(base, indices(G, 6, idx), upd, 0);
  tyto_tensor *oh = tyto_one_hot(indices(G, 5, cls), 4);
  output(G, "scattered", s);
  tyto_tensor *xs[2] = {base, upd};
  grads(G, total(tyto_mul(tyto_square(s), tyto_add_scalar(oh, 0.5))), 2, xs);
}

/* ---------------------------------------------------------------- random -- */

/* Dropout with p = 0.7 kept: the mask is drawn from the stream of a step
 * parameter that each run advances; the outputs are read after the second
 * run (step 4). */
static void g_dropout(cf_grad_graph *G) {
  tyto_tensor *x = input(G, "x", 2, S(16, 20), -2, 2);
  tyto_tensor *step = input_v(G, "step", 1, 0, NULL, CF_WHOLE, 3, 3);
  tyto_tensor *mask = tyto_random_stepped(TYTO_OP_RANDOM_BERNOULLI, step, 2,
                                          S(16, 20), 0.7, 0, 11);
  tyto_tensor *y = tyto_mul(x, tyto_div_scalar(mask, 0.7));
  output(G, "mask", mask);
  G->n_upd = 1;
  G->upd_param[0] = step;
  G->upd_value[0] = tyto_add_scalar(step, 1);
  G->runs = 2;
  grads(G, total(tyto_tanh(y)), 1, &x);
}

/* ------------------------------------------------------------------- mlp -- */

static void g_mlp(cf_grad_graph *G) {
  static const double cls[16] = {0, 1, 2, 3, 4, 0, 1, 2,
                                 3, 4, 4, 3, 2, 1, 0, 0};
  tyto_tensor *x = input(G, "x", 2, S(16, 12), -1, 1);
  tyto_tensor *w1 = input_v(G, "w1", 1, 2, S(12, 20), CF_UNIFORM, -0.5, 0.5);
  tyto_tensor *b1 = input_v(G, "b1", 1, 1, S(20), CF_UNIFORM, -0.1, 0.1);
  tyto_tensor *w2 = input_v(G, "w2", 1, 2, S(20, 5), CF_UNIFORM, -0.5, 0.5);
  tyto_tensor *b2 = input_v(G, "b2", 1, 1, S(5), CF_UNIFORM, -0.1, 0.1);
  tyto_tensor *h = tyto_relu(tyto_add(tyto_matmul(x, w1, 0, 0), b1));
  tyto_tensor *logits = tyto_add(tyto_matmul(h, w2, 0, 0), b2);
  output(G, "logits", logits);
  tyto_tensor *xs[4] = {w1, b1, w2, b2};
  grads(G, cross_entropy(G, logits, 16, cls, 5), 4, xs);
}

/* ---------------------------------------------------------------- linalg -- */

static void g_solve(cf_grad_graph *G) {
  tyto_tensor *a = input_v(G, "a", 0, 2, S(4, 4), CF_DIAG_DOMINANT, -1, 1);
  tyto_tensor *b = input(G, "b", 2, S(4, 2), -2, 2);
  tyto_tensor *x = tyto_solve(a, b);
  output(G, "solve", x);
  tyto_tensor *y = tyto_add(tyto_add(total(x), tyto_logdet(a)),
                            total(tyto_square(tyto_inv(a))));
  tyto_tensor *xs[2] = {a, b};
  grads(G, y, 2, xs);
}

/* QR's signs are not unique: the loss uses Q and R squared, which do not
 * depend on them, and Q and R themselves are not outputs. */
static void g_factor(cf_grad_graph *G) {
  tyto_tensor *s = input_v(G, "s", 0, 2, S(4, 4), CF_SPD, -1, 1);
  tyto_tensor *a = input_v(G, "a", 0, 2, S(5, 3), CF_DIAG_DOMINANT, -1, 1);
  tyto_tensor *b = input(G, "b", 2, S(4, 2), -2, 2);
  tyto_tensor *w = input(G, "w", 2, S(5, 3), -1, 1);
  tyto_tensor *l = tyto_cholesky(s), *q = NULL, *r = NULL;
  tyto_tensor *x = tyto_triangular_solve(l, b, 1, 0, 0);
  tyto_qr(a, &q, &r);
  output(G, "cholesky", l);
  output(G, "triangular_solve", x);
  tyto_tensor *y = tyto_add(
      tyto_add(total(tyto_square(x)), tyto_det(s)),
      tyto_add(total(tyto_mul(tyto_square(q), w)), total(tyto_square(r))));
  tyto_tensor *xs[3] = {s, a, b};
  grads(G, y, 3, xs);
}

/* ------------------------------------------------------------------ table --
 */

static const cf_grad_case cases[] = {
    {"elementwise", "tanh(x*w+.5)*sigmoid(x)+exp(-x^2)", g_chain},
    {"elementwise", "broadcast: where, max, div, log1p", g_broadcast},
    {"elementwise", "pow, sqrt, erf, atan, elu, leaky_relu", g_unary},
    {"reduce", "sum, mean, max, log_sum_exp, norm", g_reduce},
    {"reduce", "layer norm (keepdims broadcast)", g_layernorm},
    {"matmul", "a b^T, a^T c", g_matmul},
    {"matmul", "batched [2,4,6] x broadcast [6,3]", g_matmul_batch},
    {"softmax", "softmax cross-entropy", g_softmax_ce},
    {"conv2d", "3x3 s1 p1 + bias", g_conv},
    {"conv2d", "groups 2 s(1,2) p(1,0); dilation 2", g_conv_strided},
    {"pool", "max 3x3 s2 p1: grad and jvp", g_max_pool},
    {"pool", "avg 3x2 s(1,2) p(1,0); max 2x2", g_avg_pool},
    {"layout", "pad reflect+constant, gather", g_pad_gather},
    {"layout", "scatter_add (repeats), one_hot", g_scatter},
    {"random", "dropout: bernoulli with a step", g_dropout},
    {"mlp", "2-layer MLP, cross-entropy", g_mlp},
    {"linalg", "solve, inv, logdet", g_solve},
    {"linalg", "cholesky, triangular_solve, qr, det", g_factor},
};

const cf_grad_case *cf_grad_cases(size_t *n) {
  *n = sizeof cases / sizeof cases[0];
  return cases;
}

int cf_grad_group_known(const char *group) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (strcmp(cases[i].group, group) == 0)
      return 1;
  return 0;
}
