/* The update rules of the optimisers, one function each, as ops on one
 * parameter with rank-0 per-run coefficients broadcast against it (the
 * formulas are those of <tyto/optim.h>, which follow PyTorch's
 * torch.optim). */
#include "config.h"

#include <math.h>

#include "optim_internal.h"

/* The state suffixes, in creation order, per kind. */
static const char *const sgd_momentum_state[] = {".b"};
static const char *const square_sum_state[] = {".s"};
static const char *const adam_state[] = {".m", ".v"};

size_t optim_rule_state_count(const tyto_optim_options *opts) {
  switch (opts->kind) {
  case TYTO_OPTIM_SGD: return opts->momentum != 0.0 ? 1 : 0;
  case TYTO_OPTIM_ADAGRAD:
  case TYTO_OPTIM_RMSPROP: return 1;
  case TYTO_OPTIM_ADAM:
  case TYTO_OPTIM_ADAMW: return 2;
  }
  return 0;
}

const char *optim_rule_state_suffix(const tyto_optim_options *opts, size_t i) {
  if (i >= optim_rule_state_count(opts))
    return NULL;
  switch (opts->kind) {
  case TYTO_OPTIM_SGD: return sgd_momentum_state[i];
  case TYTO_OPTIM_ADAGRAD:
  case TYTO_OPTIM_RMSPROP: return square_sum_state[i];
  case TYTO_OPTIM_ADAM:
  case TYTO_OPTIM_ADAMW: return adam_state[i];
  }
  return NULL;
}

static tyto_tensor *scalar(const optim_build *b, double v) {
  return tyto_scalar(b->g, b->dtype, v);
}

/* 1 - beta^k for the update number k, as -expm1(k ln beta) with ln beta
 * taken in double precision. PyTorch computes 1 - beta^k in double on the
 * host; in a float32 graph 1 - pow(beta, k) would start from beta rounded
 * to float32 (0.999f is 0.99900001287) and keep only 5 significant digits
 * of 1 - 0.999^k, so every Adam update would be scaled by 1 + 6e-6. */
static tyto_tensor *one_minus_pow(const optim_build *b, double beta) {
  if (beta == 0.0)
    return scalar(b, 1.0);
  return tyto_neg(tyto_expm1(tyto_mul_scalar(b->k, log(beta))));
}

void optim_rule_prepare(optim_build *b) {
  if (b->opts->kind != TYTO_OPTIM_ADAM && b->opts->kind != TYTO_OPTIM_ADAMW)
    return;
  /* Kingma and Ba 2015, Algorithm 1, bias corrections 1 - b^k at run time
   * from the step counter; arranged as PyTorch's Adam does:
   * step_size = lr / (1 - b1^k), denom = sqrt(v) / sqrt(1 - b2^k) + eps. */
  tyto_tensor *one = scalar(b, 1.0);
  tyto_tensor *c1 = one_minus_pow(b, b->opts->beta1);
  tyto_tensor *c2 = one_minus_pow(b, b->opts->beta2);
  b->adam_step_size = tyto_div(b->lr, c1);
  b->adam_rc2 = tyto_rsqrt(c2);
  if (b->opts->kind == TYTO_OPTIM_ADAMW && b->opts->weight_decay != 0.0)
    b->adamw_keep =
        tyto_sub(one, tyto_mul_scalar(b->lr, b->opts->weight_decay));
}

/* p - lr * u */
static tyto_tensor *descend(const optim_build *b, tyto_tensor *p,
                            tyto_tensor *u) {
  return tyto_sub(p, tyto_mul(b->lr, u));
}

/* SGD with momentum mu and optional Nesterov (Sutskever et al. 2013, in
 * PyTorch's form, dampening 0): b = mu b + g, which gives b = g at the
 * first update since b starts at zero. */
static void sgd(optim_build *b, tyto_tensor *p, tyto_tensor *g) {
  const tyto_optim_options *o = b->opts;
  if (o->momentum == 0.0) {
    optim_update(b, p, descend(b, p, g), 0);
    return;
  }
  tyto_tensor *buf = optim_state_new(b, p, ".b");
  tyto_tensor *buf1 = tyto_add(tyto_mul_scalar(buf, o->momentum), g);
  tyto_tensor *step =
      o->nesterov ? tyto_add(g, tyto_mul_scalar(buf1, o->momentum)) : buf1;
  optim_update(b, p, descend(b, p, step), 0);
  optim_update(b, buf, buf1, 0);
}

/* g / (sqrt(s) + eps) */
static tyto_tensor *scaled(const optim_build *b, tyto_tensor *g,
                           tyto_tensor *s) {
  return tyto_div(g, tyto_add_scalar(tyto_sqrt(s), b->opts->eps));
}

/* Adagrad (Duchi et al. 2011): s += g^2. */
static void adagrad(optim_build *b, tyto_tensor *p, tyto_tensor *g) {
  tyto_tensor *s = optim_state_new(b, p, ".s");
  tyto_tensor *s1 = tyto_add(s, tyto_square(g));
  optim_update(b, p, descend(b, p, scaled(b, g, s1)), 0);
  optim_update(b, s, s1, 0);
}

/* RMSprop (Tieleman and Hinton 2012, lecture 6.5): s = alpha s + (1 -
 * alpha) g^2. */
static void rmsprop(optim_build *b, tyto_tensor *p, tyto_tensor *g) {
  double alpha = b->opts->alpha;
  tyto_tensor *s = optim_state_new(b, p, ".s");
  tyto_tensor *s1 = tyto_add(tyto_mul_scalar(s, alpha),
                             tyto_mul_scalar(tyto_square(g), 1.0 - alpha));
  optim_update(b, p, descend(b, p, scaled(b, g, s1)), 0);
  optim_update(b, s, s1, 0);
}

/* Adam (Kingma and Ba 2015, Algorithm 1); AdamW adds the decoupled decay
 * p -= lr wd p from the old p (Loshchilov and Hutter 2019, Algorithm 2,
 * as PyTorch's AdamW). */
static void adam(optim_build *b, tyto_tensor *p, tyto_tensor *g) {
  const tyto_optim_options *o = b->opts;
  tyto_tensor *m = optim_state_new(b, p, ".m");
  tyto_tensor *v = optim_state_new(b, p, ".v");
  tyto_tensor *m1 = tyto_add(tyto_mul_scalar(m, o->beta1),
                             tyto_mul_scalar(g, 1.0 - o->beta1));
  tyto_tensor *v1 = tyto_add(tyto_mul_scalar(v, o->beta2),
                             tyto_mul_scalar(tyto_square(g), 1.0 - o->beta2));
  tyto_tensor *denom =
      tyto_add_scalar(tyto_mul(tyto_sqrt(v1), b->adam_rc2), o->eps);
  tyto_tensor *u = tyto_mul(b->adam_step_size, tyto_div(m1, denom));
  tyto_tensor *base = b->adamw_keep ? tyto_mul(p, b->adamw_keep) : p;
  optim_update(b, p, tyto_sub(base, u), 0);
  optim_update(b, m, m1, 0);
  optim_update(b, v, v1, 0);
}

void optim_rule_apply(optim_build *b, tyto_tensor *p, tyto_tensor *g) {
  const tyto_optim_options *o = b->opts;
  /* L2 regularisation through the gradient, as PyTorch's weight_decay
   * (AdamW decouples it instead). */
  if (o->weight_decay != 0.0 && o->kind != TYTO_OPTIM_ADAMW)
    g = tyto_add(g, tyto_mul_scalar(p, o->weight_decay));
  switch (o->kind) {
  case TYTO_OPTIM_SGD: sgd(b, p, g); break;
  case TYTO_OPTIM_ADAGRAD: adagrad(b, p, g); break;
  case TYTO_OPTIM_RMSPROP: rmsprop(b, p, g); break;
  case TYTO_OPTIM_ADAM:
  case TYTO_OPTIM_ADAMW: adam(b, p, g); break;
  }
}
