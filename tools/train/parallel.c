/*
 * tyto-train over several devices at once (parallel.h).
 */
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shares are set from each device's measured rate after this many steps,
 * then again this often. */
#define CALIBRATE_STEPS 3
#define REBALANCE_EVERY 50

struct train_dp {
  train_dp_spec spec;
  tyto_dp *dp;
  /* Per context device: examples, forward-and-backward seconds and
   * waiting seconds over the steps run so far. */
  size_t n_devs;
  double *examples, *seconds, *wait;
  double xch, exposed; /* the gradient exchange, and its part exposed */
  double net_bytes, net_seconds; /* between processes */
  int64_t steps;
  char dropped[64];
  int shares_changed;     /* by the last step's calibration or rebalance */
  int64_t *shards_before; /* n_devs: the replicas' shards before a step */
  char build_err[512];    /* why the builder failed, or "" */
  double scale_before;    /* the loss scale the last step used */
};

tyto_tensor *model_loss(const mf_model *m, tyto_tensor *logits,
                        tyto_tensor *labels) {
  switch (mf_loss_kind(m)) {
  case MF_LOSS_MSE: return tyto_loss_mse(logits, labels);
  case MF_LOSS_L1: return tyto_loss_l1(logits, labels);
  case MF_LOSS_HINGE: return tyto_loss_hinge(logits, labels);
  case MF_LOSS_CROSS_ENTROPY: break;
  }
  return tyto_loss_softmax_cross_entropy(logits, labels);
}

tyto_tensor *train_loss(const mf_model *m, tyto_nn *nn, tyto_tensor *logits,
                        tyto_tensor *labels) {
  tyto_tensor *loss = model_loss(m, logits, labels);
  double l1, l2;
  mf_regularization(m, &l1, &l2);
  size_t nw = tyto_nn_weight_count(nn);
  if ((l1 > 0 || l2 > 0) && nw > 0) {
    tyto_tensor **ws = malloc(nw * sizeof *ws);
    if (!ws)
      return NULL;
    for (size_t i = 0; i < nw; i++)
      ws[i] = tyto_nn_weight(nn, i);
    loss = tyto_add(loss, tyto_loss_regularization(nw, ws, l1, l2));
    free(ws);
  }
  return loss;
}

/* The replica's model for `batch` examples: the tool's network, built as
 * the one-device step builds it (same seed, so the same names, initial
 * values and random ops). */
static tyto_status build(void *user, tyto_graph *g, int64_t batch,
                         tyto_dp_model *m) {
  train_dp *t = user;
  const train_dp_spec *sp = &t->spec;
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = sp->seed;
  no.sync_batch_norm = sp->sync_batch_norm;
  tyto_nn *nn = NULL;
  tyto_status st = tyto_nn_new(g, &no, &nn);
  if (st != TYTO_OK)
    return st;
  int rank = 1 + mf_input_rank(sp->model);
  int64_t shape[TYTO_MAX_RANK];
  shape[0] = batch;
  memcpy(shape + 1, mf_input_shape(sp->model),
         (size_t)(rank - 1) * sizeof *shape);
  int64_t lshape[2] = {batch, sp->classes};
  tyto_tensor *x = tyto_nn_input(nn, rank, shape, "x");
  tyto_tensor *labels = tyto_nn_input(nn, 2, lshape, "labels");
  tyto_tensor *logits =
      mf_build(sp->model, nn, x, t->build_err, sizeof t->build_err);
  if (logits)
    m->loss = train_loss(sp->model, nn, logits, labels);
  if (!logits || !m->loss) {
    if (logits)
      snprintf(t->build_err, sizeof t->build_err, "out of memory");
    tyto_nn_free(nn);
    return TYTO_ERR_INVALID_ARGUMENT;
  }
  /* Cross-entropy is the mean over the labelled rows: a padded last batch
   * weighs each shard by its labelled rows. The other losses average over
   * every row. */
  if (mf_loss_kind(sp->model) == MF_LOSS_CROSS_ENTROPY)
    m->weight = tyto_sum(labels, 0, NULL, 0);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = labels;
  m->n_sums = 1;
  m->sums[0] = tyto_nn_count_correct(logits, labels);
  tyto_dp_model_from_nn(m, nn, 1);
  return TYTO_OK;
}

int train_dp_new(const train_dp_spec *spec, train_dp **out, char *err,
                 size_t n) {
  *out = NULL;
  train_dp *t = calloc(1, sizeof *t);
  size_t nd = tyto_context_device_count(spec->ctx);
  if (!t || !(t->examples = calloc(nd, sizeof(double))) ||
      !(t->seconds = calloc(nd, sizeof(double))) ||
      !(t->wait = calloc(nd, sizeof(double))) ||
      !(t->shards_before = calloc(nd, sizeof(int64_t)))) {
    train_dp_free(t);
    snprintf(err, n, "out of memory");
    return -1;
  }
  t->spec = *spec;
  t->n_devs = nd;
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.batch = spec->batch;
  o.exact_exchange = spec->exact_exchange;
  if (spec->precision != TYTO_F32) {
    o.amp = 1;
    o.amp_dtype = spec->precision;
    o.loss_scale = spec->loss_scale;
  }
  static const size_t first[1] = {0};
  if (spec->first_only) {
    o.n_devices = 1;
    o.devices = first;
    nd = 1;
  }
  /* Whole Philox counters per shard where the batch allows (parallel.h),
   * by the rank with the most devices: every rank must agree. */
  int ranks = tyto_dist_size();
  double most = (double)nd;
  if (ranks > 1) {
    double *per = calloc((size_t)ranks, sizeof *per);
    tyto_status st = per ? TYTO_OK : TYTO_ERR_OUT_OF_MEMORY;
    if (per) {
      per[tyto_dist_rank()] = (double)nd;
      st = tyto_dist_sum(per, (size_t)ranks);
      for (int i = 0; i < ranks && st == TYTO_OK; i++)
        most = per[i] > most ? per[i] : most;
    }
    int oom = per == NULL;
    free(per);
    if (st != TYTO_OK) {
      snprintf(err, n, "%s", oom ? "out of memory" : tyto_errmsg());
      train_dp_free(t);
      return -1;
    }
  }
  o.granularity =
      spec->granularity > 0 ? spec->granularity
      : spec->batch % 4 == 0 && spec->batch >= 4 * (int64_t)most * ranks ? 4
                                                                         : 1;
  o.optim = spec->optim;
  o.rebalance_every =
      spec->rebalance_every >= 0 ? spec->rebalance_every : REBALANCE_EVERY;
  o.calibrate_steps =
      spec->calibrate_steps >= 0 ? spec->calibrate_steps : CALIBRATE_STEPS;
  if (tyto_dp_new(spec->ctx, &o, build, t, &t->dp) != TYTO_OK) {
    snprintf(err, n, "%s", t->build_err[0] ? t->build_err : tyto_errmsg());
    train_dp_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void train_dp_free(train_dp *t) {
  if (!t)
    return;
  tyto_dp_free(t->dp);
  free(t->examples);
  free(t->seconds);
  free(t->wait);
  free(t->shards_before);
  free(t);
}

int train_dp_step(train_dp *t, const void *x, const void *y, int go_on,
                  double *loss, double *correct, const char **dropped) {
  const void *in[2] = {x, y};
  *dropped = NULL;
  t->scale_before = tyto_dp_loss_scale(t->dp);
  /* The shares before the step, to tell a calibration or a rebalance. */
  size_t n_before = tyto_dp_replica_count(t->dp),
         left_before = tyto_dp_left_out_count(t->dp);
  int64_t *before = t->shards_before; /* n_devs >= the replicas */
  for (size_t i = 0; i < n_before && i < t->n_devs; i++)
    before[i] = tyto_dp_replica_shard(t->dp, i);
  t->shares_changed = 0;
  for (;;) {
    if (tyto_dp_step(t->dp, in, loss) == TYTO_OK)
      break;
    /* The figures of a step whose update ran somewhere before the
     * failure (tyto_dp_drop says whether). */
    *loss = tyto_dp_loss(t->dp);
    int f = tyto_dp_failed_replica(t->dp);
    if (!go_on || f < 0 || tyto_dp_replica_count(t->dp) < 2)
      return -1;
    size_t dev = tyto_dp_replica_device(t->dp, (size_t)f);
    snprintf(t->dropped, sizeof t->dropped, "%s",
             tyto_device_get_info(tyto_context_device(t->spec.ctx, dev))->id);
    int applied = 0;
    if (tyto_dp_drop(t->dp, (size_t)f, &applied) != TYTO_OK)
      return -1;
    *dropped = t->dropped;
    if (applied)
      break; /* the step's update ran before the failure */
  }
  if (tyto_dp_sums(t->dp, correct, 1) != TYTO_OK)
    return -1;
  if (!*dropped && n_before <= t->n_devs &&
      tyto_dp_replica_count(t->dp) == n_before &&
      tyto_dp_left_out_count(t->dp) == left_before)
    for (size_t i = 0; i < n_before; i++)
      t->shares_changed |= tyto_dp_replica_shard(t->dp, i) != before[i];
  for (size_t i = 0; i < tyto_dp_replica_count(t->dp); i++) {
    size_t d = tyto_dp_replica_device(t->dp, i);
    if (d >= t->n_devs)
      continue;
    t->examples[d] += (double)tyto_dp_replica_shard(t->dp, i);
    t->seconds[d] += tyto_dp_replica_seconds(t->dp, i) +
                     tyto_dp_replica_update_seconds(t->dp, i);
    t->wait[d] += tyto_dp_replica_wait(t->dp, i);
  }
  t->xch += tyto_dp_exchange_seconds(t->dp);
  t->exposed += tyto_dp_exchange_exposed_seconds(t->dp);
  t->net_bytes += tyto_dp_network_bytes(t->dp);
  t->net_seconds += tyto_dp_network_seconds(t->dp);
  t->steps++;
  /* f16 loss scaling: a skipped update is news (the first ten, then one
   * in a hundred: a scale that starts too high costs a few). */
  int64_t sk = tyto_dp_skipped_steps(t->dp);
  if (tyto_dp_step_skipped(t->dp) && !t->spec.quiet &&
      (sk <= 10 || sk % 100 == 0))
    fprintf(stderr,
            "tyto-train: step %lld skipped its update: a gradient was "
            "infinite or NaN at loss scale %g (%s); the scale is now %g, "
            "%lld steps skipped so far\n",
            (long long)tyto_dp_steps(t->dp), t->scale_before,
            tyto_dtype_name(t->spec.precision), tyto_dp_loss_scale(t->dp),
            (long long)sk);
  return 0;
}

/* Moves state tensor k between the replicas and p. */
static int move(train_dp *t, tyto_program *p, tyto_tensor *s, int pull,
                void **buf, size_t *cap) {
  size_t bytes =
      (size_t)tyto_tensor_numel(s) * tyto_dtype_size(tyto_tensor_dtype(s));
  if (bytes > *cap) {
    void *nb = realloc(*buf, bytes);
    if (!nb)
      return -2;
    *buf = nb;
    *cap = bytes;
  }
  const char *name = tyto_tensor_name(s);
  if (pull)
    return tyto_dp_read(t->dp, name, *buf, bytes) == TYTO_OK &&
                   tyto_program_write_parameter(p, s, *buf, bytes) == TYTO_OK
               ? 0
               : -1;
  return tyto_program_read_parameter(p, s, *buf, bytes) == TYTO_OK &&
                 tyto_dp_write(t->dp, name, *buf, bytes) == TYTO_OK
             ? 0
             : -1;
}

static int move_all(train_dp *t, tyto_program *p, size_t n,
                    tyto_tensor *const *state, int pull) {
  void *buf = NULL;
  size_t cap = 0;
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++)
    rc = move(t, p, state[k], pull, &buf, &cap);
  free(buf);
  return rc;
}

int train_dp_pull(train_dp *t, tyto_program *p, size_t n,
                  tyto_tensor *const *state) {
  return move_all(t, p, n, state, 1);
}

int train_dp_push(train_dp *t, tyto_program *p, size_t n,
                  tyto_tensor *const *state) {
  return move_all(t, p, n, state, 0);
}

int train_dp_shares_changed(const train_dp *t, char *buf, size_t n) {
  if (!t->shares_changed)
    return 0;
  size_t len = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < tyto_dp_replica_count(t->dp) && len < n; i++) {
    size_t dev = tyto_dp_replica_device(t->dp, i);
    int w = snprintf(
        buf + len, n - len, "%s%s %lld", i ? ", " : "",
        tyto_device_get_info(tyto_context_device(t->spec.ctx, dev))->id,
        (long long)tyto_dp_replica_shard(t->dp, i));
    len += w > 0 ? (size_t)w : 0;
  }
  return 1;
}

size_t train_dp_count(const train_dp *t) {
  return tyto_dp_replica_count(t->dp);
}

const tyto_program *train_dp_program(const train_dp *t) {
  return tyto_dp_replica_program(t->dp, 0);
}

size_t train_dp_left_out_count(const train_dp *t) {
  return tyto_dp_left_out_count(t->dp);
}

void train_dp_left_out_get(const train_dp *t, size_t i, train_dp_left *out) {
  size_t dev = 0;
  memset(out, 0, sizeof *out);
  if (tyto_dp_left_out(t->dp, i, &dev, &out->step, &out->unit_seconds,
                       &out->others_seconds) == TYTO_OK)
    out->id = tyto_device_get_info(tyto_context_device(t->spec.ctx, dev))->id;
}

double train_dp_loss_scale(const train_dp *t) {
  return tyto_dp_loss_scale(t->dp);
}

int64_t train_dp_skipped(const train_dp *t) {
  return tyto_dp_skipped_steps(t->dp);
}

void train_dp_network(const train_dp *t, double *bytes_per_step,
                      double *seconds) {
  *bytes_per_step = t->steps ? t->net_bytes / (double)t->steps : 0;
  *seconds = t->net_seconds;
}

int64_t train_dp_rank_batch(const train_dp *t) {
  return tyto_dp_rank_batch(t->dp);
}

void train_dp_exchange(const train_dp *t, double *seconds, double *exposed) {
  *seconds = t->xch;
  *exposed = t->exposed;
}

void train_dp_device_get(const train_dp *t, size_t i, train_dp_device *out) {
  size_t d = tyto_dp_replica_device(t->dp, i);
  out->id = tyto_device_get_info(tyto_context_device(t->spec.ctx, d))->id;
  out->shard = tyto_dp_replica_shard(t->dp, i);
  out->images_per_second =
      d < t->n_devs && t->seconds[d] > 0 ? t->examples[d] / t->seconds[d] : 0;
  out->wait_seconds = d < t->n_devs ? t->wait[d] : 0;
}
