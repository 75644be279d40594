/* Batch normalisation (Ioffe and Szegedy 2015) over axis 1, with running
 * statistics updated as PyTorch's BatchNorm does. */
#include "config.h"

#include "nn_internal.h"

tyto_tensor *tyto_nn_batch_norm(tyto_nn *nn, const char *name, tyto_tensor *x,
                                double momentum, double eps) {
  tyto_tensor *err;
  const char *kind = "batch_norm";
  if (nn_check(nn, kind, name, 1, x, 2, TYTO_MAX_RANK, &err) < 0)
    return err;
  if (momentum == 0)
    momentum = 0.1;
  if (eps == 0)
    eps = 1e-5;
  if (!(momentum > 0 && momentum <= 1))
    return nn_fail(nn, kind, name, "momentum %g outside (0, 1]", momentum);
  if (!(eps > 0))
    return nn_fail(nn, kind, name, "eps %g must be positive", eps);
  int r = x->rank;
  int64_t ch = x->shape[1], count = ch ? tyto_tensor_numel(x) / ch : 0;
  char s[SHAPE_STR];
  if (nn->mode == TYTO_NN_TRAIN && count < 2)
    return nn_fail(nn, kind, name,
                   "x %s has %lld value%s per channel; TRAIN mode needs more "
                   "than one for the batch variance",
                   nn_shape(s, x), (long long)count, count == 1 ? "" : "s");
  tyto_tensor *gamma =
      nn_param(nn, kind, name, "gamma", 1, &ch, nn_init_of(TYTO_INIT_DEFAULT),
               nn_init_of(TYTO_INIT_ONES), 0);
  tyto_tensor *beta =
      nn_param(nn, kind, name, "beta", 1, &ch, nn_init_of(TYTO_INIT_DEFAULT),
               nn_init_of(TYTO_INIT_ZEROS), 0);
  tyto_tensor *rmean =
      nn_param(nn, kind, name, "running_mean", 1, &ch,
               nn_init_of(TYTO_INIT_DEFAULT), nn_init_of(TYTO_INIT_ZEROS), 1);
  tyto_tensor *rvar =
      nn_param(nn, kind, name, "running_var", 1, &ch,
               nn_init_of(TYTO_INIT_DEFAULT), nn_init_of(TYTO_INIT_ONES), 1);
  tyto_tensor *ps[4] = {gamma, beta, rmean, rvar};
  for (int i = 0; i < 4; i++)
    if (ps[i]->kind == TYTO_KIND_ERROR)
      return ps[i];
  /* Per-channel vectors broadcast as [1, C, 1, ...]. */
  int64_t bshape[TYTO_MAX_RANK];
  int axes[TYTO_MAX_RANK], n_axes = 0;
  for (int i = 0; i < r; i++) {
    bshape[i] = i == 1 ? ch : 1;
    if (i != 1)
      axes[n_axes++] = i;
  }
  tyto_tensor *gb = tyto_reshape(gamma, r, bshape);
  tyto_tensor *bb = tyto_reshape(beta, r, bshape);
  if (nn->mode == TYTO_NN_EVAL) {
    /* y = x scale + shift: scale = gamma / sqrt(var + eps), shift = beta -
     * mean scale, both per channel. */
    tyto_tensor *scale =
        tyto_mul(gamma, tyto_rsqrt(tyto_add_scalar(rvar, eps)));
    tyto_tensor *shift = tyto_sub(beta, tyto_mul(rmean, scale));
    return tyto_add(tyto_mul(x, tyto_reshape(scale, r, bshape)),
                    tyto_reshape(shift, r, bshape));
  }
  tyto_tensor *mean = tyto_mean(x, n_axes, axes, 1);
  tyto_tensor *xc = tyto_sub(x, mean);
  tyto_tensor *var = tyto_mean(tyto_square(xc), n_axes, axes, 1); /* biased */
  tyto_tensor *scale = tyto_mul(tyto_rsqrt(tyto_add_scalar(var, eps)), gb);
  tyto_tensor *y = tyto_add(tyto_mul(xc, scale), bb);
  /* Running statistics: r' = (1 - momentum) r + momentum s, with the
   * unbiased variance (PyTorch's rule). */
  tyto_tensor *mean_c = tyto_reshape(mean, 1, &ch);
  tyto_tensor *var_c = tyto_mul_scalar(tyto_reshape(var, 1, &ch),
                                       (double)count / (double)(count - 1));
  tyto_tensor *rmean2 = tyto_add(tyto_mul_scalar(rmean, 1 - momentum),
                                 tyto_mul_scalar(mean_c, momentum));
  tyto_tensor *rvar2 = tyto_add(tyto_mul_scalar(rvar, 1 - momentum),
                                tyto_mul_scalar(var_c, momentum));
  if (y->kind == TYTO_KIND_ERROR || rmean2->kind == TYTO_KIND_ERROR ||
      rvar2->kind == TYTO_KIND_ERROR)
    return &nn->g->error;
  if (nn_add_update(nn, rmean, rmean2) < 0 ||
      nn_add_update(nn, rvar, rvar2) < 0)
    return graph_oom(nn->g, kind);
  return y;
}
