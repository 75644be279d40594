/* What happens around the update rule: the learning-rate schedule computed
 * from the step counter at run time, gradient accumulation over several
 * runs, and gradient clipping by value and by global norm. */
#include "config.h"

#include <math.h>

#include "optim_internal.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static tyto_tensor *scalar(const optim_build *b, double v) {
  return tyto_scalar(b->g, b->dtype, v);
}

/* The schedules of <tyto/optim.h> at update k, written with k - 1 = step. */
tyto_tensor *optim_schedule_lr(optim_build *b) {
  const tyto_optim_options *o = b->opts;
  tyto_tensor *lr = NULL;
  switch (o->schedule) {
  case TYTO_SCHEDULE_CONSTANT: lr = scalar(b, o->lr); break;
  case TYTO_SCHEDULE_STEP: {
    /* PyTorch's StepLR: lr gamma^floor((k - 1) / step_size). */
    tyto_tensor *e = tyto_floor(tyto_div_scalar(b->step, (double)o->step_size));
    lr = tyto_mul_scalar(tyto_pow(scalar(b, o->gamma), e), o->lr);
    break;
  }
  case TYTO_SCHEDULE_EXPONENTIAL:
    /* PyTorch's ExponentialLR: lr gamma^(k - 1). */
    lr = tyto_mul_scalar(tyto_pow(scalar(b, o->gamma), b->step), o->lr);
    break;
  case TYTO_SCHEDULE_COSINE: {
    /* Loshchilov and Hutter 2017 (SGDR), eq. 5 without restarts, held at
     * min_lr once k - 1 reaches T (PyTorch's CosineAnnealingLR in closed
     * form up to T). */
    double t = (double)o->total_steps;
    tyto_tensor *phase =
        tyto_mul_scalar(tyto_min(b->step, scalar(b, t)), M_PI / t);
    tyto_tensor *half = tyto_mul_scalar(tyto_add_scalar(tyto_cos(phase), 1.0),
                                        (o->lr - o->min_lr) / 2.0);
    lr = tyto_add_scalar(half, o->min_lr);
    break;
  }
  }
  if (o->warmup_steps > 0) {
    /* Linear warm-up: min(1, k / W). */
    tyto_tensor *w = tyto_min(scalar(b, 1.0),
                              tyto_div_scalar(b->k, (double)o->warmup_steps));
    lr = tyto_mul(lr, w);
  }
  return lr;
}

void optim_accumulate(optim_build *b, size_t n, tyto_tensor *const *params,
                      tyto_tensor **grads) {
  int64_t kk = b->opts->accumulate;
  if (kk <= 1)
    return;
  double K = (double)kk;
  tyto_tensor *micro = optim_state_new(b, NULL, "optim.micro");
  b->o->micro = micro;
  tyto_tensor *next = tyto_add_scalar(micro, 1.0);
  /* The K-th run of each group applies: micro + 1 == K, as 0 or 1. */
  b->apply = tyto_eq(next, scalar(b, K));
  tyto_tensor *zero = scalar(b, 0.0);
  optim_update(b, micro, tyto_where(b->apply, zero, next), 1);
  for (size_t i = 0; i < n; i++) {
    if (!grads[i])
      continue;
    tyto_tensor *acc = optim_state_new(b, params[i], ".acc");
    tyto_tensor *acc1 = tyto_add(acc, grads[i]);
    optim_update(b, acc, tyto_where(b->apply, zero, acc1), 1);
    grads[i] = tyto_div_scalar(acc1, K);
  }
}

/* The rank-0 sum of every element of every gradient squared. */
static tyto_tensor *sum_squares(const optim_build *b, size_t n,
                                tyto_tensor *const *grads) {
  tyto_tensor *total = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!grads[i])
      continue;
    tyto_tensor *s = tyto_sum(tyto_square(grads[i]), 0, NULL, 0);
    total = total ? tyto_add(total, s) : s;
  }
  return total ? total : scalar(b, 0.0);
}

void optim_clip(optim_build *b, size_t n, tyto_tensor **grads) {
  const tyto_optim_options *o = b->opts;
  tyto_tensor *norm = tyto_sqrt(sum_squares(b, n, grads));
  b->o->grad_norm = norm;
  if (o->clip_value > 0.0) {
    /* PyTorch's clip_grad_value_: clamp into [-c, c]. */
    tyto_tensor *hi = scalar(b, o->clip_value);
    tyto_tensor *lo = scalar(b, -o->clip_value);
    for (size_t i = 0; i < n; i++)
      if (grads[i])
        grads[i] = tyto_min(tyto_max(grads[i], lo), hi);
    if (o->clip_norm > 0.0)
      norm = tyto_sqrt(sum_squares(b, n, grads));
  }
  if (o->clip_norm > 0.0) {
    /* PyTorch's clip_grad_norm_: scale by min(1, c / (||g|| + 1e-6)). */
    tyto_tensor *coef =
        tyto_min(scalar(b, 1.0), tyto_div(scalar(b, o->clip_norm),
                                          tyto_add_scalar(norm, 1e-6)));
    for (size_t i = 0; i < n; i++)
      if (grads[i])
        grads[i] = tyto_mul(grads[i], coef);
  }
}
