/*
 * Mixed precision in the data-parallel step (tyto_dp_options.amp and the
 * loss scaling options; docs/precision.md).
 *
 * Each replica's model is rewritten by tyto_autocast before it is
 * differentiated. With loss scaling, the gradients are those of the loss
 * times a scale fed each step (an input of phase 0), every replica sends
 * one more figure with them, the count of its gradients' elements that
 * are infinite or NaN, and phase 1 hands the
 * optimiser each gradient times the inverse scale (an input of phase 1),
 * which fuses into the optimiser's own elementwise update. The host adds
 * the counts over the replicas and the ranks: any skips the update on
 * every replica and rank alike.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/ops.h>
#include <tyto/precision.h>

#include "../graph/dtype.h"
#include "../runtime/error.h"

#include "dp_internal.h"

tyto_status dp_amp_init(tyto_dp *dp) {
  tyto_dp_options *o = &dp->o;
  dp->scale = 1;
  if (o->amp != 0 && o->amp != 1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: amp %d: expected 0 (off) or 1 (on)", o->amp);
  if (o->amp && o->amp_dtype != TYTO_BF16 && o->amp_dtype != TYTO_F16 &&
      o->amp_dtype != TYTO_F32)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: amp_dtype %s: expected bf16 or f16 (or f32 "
                   "for an f64 model)",
                   tyto_dtype_name(o->amp_dtype) ? tyto_dtype_name(o->amp_dtype)
                                                 : "(unknown)");
  int f16 = o->amp && o->amp_dtype == TYTO_F16;
  if (o->dynamic_scale < -1 || o->dynamic_scale > 1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: dynamic_scale %d: expected -1 (on with f16 "
                   "AMP), 0 or 1",
                   o->dynamic_scale);
  dp->dynamic = o->dynamic_scale == -1 ? f16 : o->dynamic_scale;
  double s = o->loss_scale != 0 ? o->loss_scale : (f16 ? 65536.0 : 1.0);
  if (!(s > 0) || !isfinite(s))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: loss_scale %g: expected a positive finite "
                   "number (0: the default)",
                   o->loss_scale);
  double g = o->scale_growth != 0 ? o->scale_growth : 2.0;
  double b = o->scale_backoff != 0 ? o->scale_backoff : 0.5;
  if (!(g >= 1) || !isfinite(g) || !(b > 0 && b <= 1))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: scale_growth %g and scale_backoff %g: "
                   "expected growth >= 1 and 0 < backoff <= 1",
                   g, b);
  if (o->scale_interval < 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: scale_interval %lld: expected 0 (the "
                   "default, 2000) or more",
                   (long long)o->scale_interval);
  o->scale_growth = g;
  o->scale_backoff = b;
  if (!o->scale_interval)
    o->scale_interval = 2000;
  dp->scale = s;
  dp->scaling = dp->dynamic || s != 1;
  return TYTO_OK;
}

tyto_status dp_amp_rewrite(tyto_dp *dp, replica *r, tyto_dp_model *m) {
  if (!dp->o.amp)
    return TYTO_OK;
  /* The loss, the weight, the sums and the layers' update values: all
   * that the step reads of the model. */
  size_t n = 2 + m->n_sums + m->n_updates, j = 0;
  tyto_tensor **ys = malloc(n * sizeof *ys);
  r->amp_uv = malloc((m->n_updates ? m->n_updates : 1) * sizeof *r->amp_uv);
  if (!ys || !r->amp_uv) {
    free(ys);
    return dp_oom();
  }
  ys[j++] = m->loss;
  if (m->weight)
    ys[j++] = m->weight;
  for (size_t k = 0; k < m->n_sums; k++)
    ys[j++] = m->sums[k];
  for (size_t k = 0; k < m->n_updates; k++)
    ys[j++] = m->update_values[k];
  tyto_status st = tyto_autocast(dp->o.amp_dtype, j, ys);
  if (st == TYTO_OK) {
    j = 0;
    m->loss = ys[j++];
    if (m->weight)
      m->weight = ys[j++];
    for (size_t k = 0; k < m->n_sums; k++)
      m->sums[k] = ys[j++];
    for (size_t k = 0; k < m->n_updates; k++)
      r->amp_uv[k] = ys[j++];
    m->update_values = r->amp_uv;
  }
  free(ys);
  return st;
}

tyto_tensor *dp_amp_loss(tyto_dp *dp, replica *r) {
  if (!dp->scaling)
    return r->loss;
  r->scale_in =
      tyto_input(r->g, tyto_tensor_dtype(r->loss), 0, NULL, "dp.loss_scale");
  return tyto_mul(r->loss, r->scale_in);
}

tyto_tensor *dp_amp_flag(tyto_dp *dp, replica *r) {
  if (!dp->scaling)
    return NULL;
  /* Per gradient, its elements that are not finite: 1 - (|g| <= the
   * largest finite value), which is 1 for an infinity or NaN (a NaN
   * compares false). Comparisons, not g * 0: the algebra pass folds
   * x * 0 to 0, as algebra does and IEEE does not. */
  tyto_tensor *flag = NULL;
  for (size_t k = 0; k < r->n_params; k++) {
    tyto_tensor *g = r->grads[k];
    if (!g)
      continue;
    tyto_dtype dt = tyto_tensor_dtype(g);
    tyto_tensor *fin = tyto_le(
        tyto_abs(g), tyto_scalar(r->g, dt, dt == TYTO_F64 ? DBL_MAX : FLT_MAX));
    tyto_tensor *z = tyto_sum(tyto_sub(tyto_scalar(r->g, dt, 1.0), fin), 0,
                              NULL, 0);
    flag = flag ? tyto_add(flag, z) : z;
  }
  return flag ? flag
              : tyto_scalar(r->g, tyto_tensor_dtype(r->loss), 0.0);
}

tyto_status dp_amp_grads(tyto_dp *dp, replica *r, tyto_tensor ***out) {
  *out = r->recvs;
  if (!dp->scaling)
    return TYTO_OK;
  if (!(r->amp_grads = calloc(r->n_params ? r->n_params : 1,
                              sizeof *r->amp_grads)))
    return dp_oom();
  r->inv_scale_in = tyto_input(r->g, tyto_tensor_dtype(r->loss), 0, NULL,
                               "dp.inverse_loss_scale");
  for (size_t k = 0; k < r->n_params; k++)
    if (r->recvs[k])
      r->amp_grads[k] = tyto_mul(r->recvs[k], r->inv_scale_in);
  *out = r->amp_grads;
  return TYTO_OK;
}

static tyto_status feed(replica *r, tyto_tensor *in, double v) {
  if (!in || !r->p || !tyto_program_uses(r->p, in))
    return TYTO_OK;
  tyto_dtype dt = tyto_tensor_dtype(in);
  _Alignas(8) unsigned char b[8];
  dtype_info_of(dt)->store(b, 0, v);
  return tyto_program_set_input(r->p, in, b, tyto_dtype_size(dt));
}

tyto_status dp_amp_feed(tyto_dp *dp, int phase) {
  tyto_status st = TYTO_OK;
  for (size_t i = 0; i < dp->n && st == TYTO_OK && dp->scaling; i++) {
    replica *r = &dp->r[i];
    st = phase == 0 ? feed(r, r->scale_in, dp->scale)
                    : feed(r, r->inv_scale_in, 1.0 / dp->scale);
  }
  return st;
}

int dp_amp_after(tyto_dp *dp, double flag) {
  dp->last_skipped = 0;
  if (!dp->scaling)
    return 0;
  if (flag != 0) { /* a count of non-finite elements (or NaN) */
    dp->last_skipped = 1;
    dp->skipped++;
    dp->good = 0;
    if (dp->dynamic)
      dp->scale *= dp->o.scale_backoff;
    return 1;
  }
  if (dp->dynamic && ++dp->good >= dp->o.scale_interval) {
    double s = dp->scale * dp->o.scale_growth;
    if (isfinite(s))
      dp->scale = s;
    dp->good = 0;
  }
  return 0;
}

double tyto_dp_loss_scale(const tyto_dp *dp) { return dp ? dp->scale : NAN; }

int tyto_dp_step_skipped(const tyto_dp *dp) {
  return dp ? dp->last_skipped : 0;
}

int64_t tyto_dp_skipped_steps(const tyto_dp *dp) {
  return dp ? dp->skipped : 0;
}
