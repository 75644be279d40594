/* Batch normalisation (Ioffe and Szegedy 2015) over axis 1, with running
 * statistics updated as PyTorch's BatchNorm does, and synchronised over
 * the replicas of a data-parallel step on request. */
#include "config.h"

#include <tyto/parallel.h>

#include "nn_internal.h"

/* A TRAIN-mode batch's statistics over every axis of x but 1. */
typedef struct bn_stats {
  tyto_tensor *mean, *xc, *var; /* x - mean; var biased; mean and var
                                 * shaped [1, C, 1, ...] */
  /* What turns var into the unbiased variance, N / (N - 1): a [1] tensor
   * (synchronised), or NULL and the number `unbias` (local). */
  tyto_tensor *unbias_t;
  double unbias;
} bn_stats;

/* This batch's own: two-pass, the variance from x - mean. */
static bn_stats local_stats(tyto_tensor *x, int n_axes, const int *axes,
                            int64_t count) {
  bn_stats st = {tyto_mean(x, n_axes, axes, 1), NULL, NULL, NULL,
                 (double)count / (double)(count - 1)};
  st.xc = tyto_sub(x, st.mean);
  st.var = tyto_mean(tyto_square(st.xc), n_axes, axes, 1);
  return st;
}

/* The global batch's over the replicas (tyto_nn_options.sync_batch_norm),
 * two-pass like the local ones: the channel sums S and counts N summed
 * over the replicas in one exchange, mean = S / N, then the sums of (x -
 * mean)^2 in a second one, var = their sum / N. Outside data-parallel
 * training a replica sum is its operand, and these are the local ones. */
static bn_stats global_stats(tyto_nn *nn, tyto_tensor *x, int n_axes,
                             const int *axes, const int64_t *bshape,
                             int64_t count) {
  int r = x->rank;
  int64_t ch = x->shape[1], one = 1;
  tyto_tensor *parts[2] = {tyto_sum(x, n_axes, axes, 0),
                           tyto_full(nn->g, nn->dtype, 1, &one, (double)count)};
  tyto_tensor *tot = tyto_replica_sum(tyto_concat(2, parts, 0));
  tyto_tensor *n = tyto_slice_axis(tot, 0, ch, ch + 1, 1);
  bn_stats st = {NULL, NULL, NULL, tyto_div(n, tyto_add_scalar(n, -1.0)), 0};
  st.mean =
      tyto_reshape(tyto_div(tyto_slice_axis(tot, 0, 0, ch, 1), n), r, bshape);
  st.xc = tyto_sub(x, st.mean);
  tyto_tensor *sq = tyto_sum(tyto_square(st.xc), n_axes, axes, 0);
  st.var = tyto_reshape(tyto_div(tyto_replica_sum(sq), n), r, bshape);
  return st;
}

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
  /* Synchronised, only the global batch's count matters, which no one
   * replica's graph can see. */
  if (nn->mode == TYTO_NN_TRAIN && !nn->sync_batch_norm && count < 2)
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
  bn_stats st = nn->sync_batch_norm
                    ? global_stats(nn, x, n_axes, axes, bshape, count)
                    : local_stats(x, n_axes, axes, count);
  tyto_tensor *scale = tyto_mul(tyto_rsqrt(tyto_add_scalar(st.var, eps)), gb);
  tyto_tensor *y = tyto_add(tyto_mul(st.xc, scale), bb);
  /* Running statistics: r' = (1 - momentum) r + momentum s, with the
   * unbiased variance (PyTorch's rule). */
  tyto_tensor *mean_c = tyto_reshape(st.mean, 1, &ch);
  tyto_tensor *var_c = tyto_reshape(st.var, 1, &ch);
  var_c = st.unbias_t ? tyto_mul(var_c, st.unbias_t)
                      : tyto_mul_scalar(var_c, st.unbias);
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
