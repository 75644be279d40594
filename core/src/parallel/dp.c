/*
 * Data-parallel training (<tyto/parallel.h>, docs/data-parallel.md).
 *
 * Each replica is the caller's model built for its shard, differentiated,
 * and compiled with an exchange (tyto_program_options.n_exchanges): its
 * phase 0 computes the loss and the gradients (the sends), its phase 1
 * runs the optimiser on the received gradients (the recvs). A step sets
 * each replica's slice of the global batch, runs every phase 0 at once
 * (a thread per replica), combines the gradients on the host, in double
 * precision and in replica order, weighted by shard size (each replica's
 * loss is its shard's mean, so this is the gradient of the global mean),
 * writes the result into every replica and runs every phase 1 at once.
 * Every replica starts from the same parameters and state and applies the
 * same update: they stay equal without a broadcast. This file builds the
 * replicas and answers queries; a step and its exchange are step.c's.
 *
 * Random ops: the model is also built once for the whole batch, without
 * compiling it, to learn each random op's Philox offset there; a
 * replica's random op whose first axis is the batch then starts at the
 * counter of its shard's first example in the global op, the others at
 * the global op's own offset. Philox makes four numbers per counter, so a
 * shard must start at an example whose first element is a multiple of
 * four; tyto_dp_new says so when the split does not allow it.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/ad.h>
#include <tyto/parallel.h>
#include <tyto/program.h>

#include "collective.h"
#include "dist.h"
#include "../graph/dtype.h"
#include "../graph/node.h"
#include "../graph/shape.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

#include "dp_internal.h"

static void nn_owner_free(void *nn) {
  tyto_nn_free(nn);
}

void tyto_dp_model_from_nn(tyto_dp_model *m, tyto_nn *nn, int owns) {
  if (!m || !nn)
    return;
  m->n_params = tyto_nn_parameter_count(nn);
  m->params = (tyto_tensor **)tyto_nn_parameters(nn);
  m->n_updates = tyto_nn_update_count(nn);
  m->update_params = tyto_nn_update_params(nn);
  m->update_values = tyto_nn_update_values(nn);
  m->owner = owns ? nn : NULL;
  m->owner_free = owns ? nn_owner_free : NULL;
}

void tyto_dp_options_init(tyto_dp_options *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->granularity = 1;
  tyto_optim_options_init(&o->optim, TYTO_OPTIM_ADAM);
  o->amp_dtype = TYTO_BF16;
  o->dynamic_scale = -1;
  o->calibrate_steps = -1;
}

tyto_status dp_oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "dp: out of memory");
}

double dp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dp_replica_free(replica *r) {
  dp_worker_stop(r);
  tyto_program_free(r->p);
  tyto_optim_free(r->opt);
  tyto_graph_free(r->g);
  free(r->params);
  free(r->grads);
  free(r->recvs);
  free(r->sends);
  free(r->recv_of_send);
  free(r->state);
  free(r->msg);
  free(r->got);
  free(r->direct);
  free(r->amp_uv);
  free(r->amp_grads);
  free(r->rs_send);
  free(r->rs_recv);
  free(r->rs_kind);
  free(r->rs_stage);
  free(r->stages);
  free(r->rs_uv);
}

void tyto_dp_free(tyto_dp *dp) {
  if (!dp)
    return;
  for (size_t i = 0; i < dp->n; i++)
    dp_replica_free(&dp->r[i]);
  free(dp->r);
  free(dp->weights);
  free(dp->window);
  free(dp->x_numel);
  if (dp->coll)
    dp->coll->ops->free(dp->coll);
  free(dp->host);
  dp_free_exchange(dp);
  free(dp->out);
  free(dp->slot);
  pthread_mutex_destroy(&dp->mu);
  pthread_cond_destroy(&dp->cv);
  tyto_context *ctx = dp->ctx;
  free(dp);
  rt_context_release(ctx);
}

/* The shards: weights (or equal) rounded to multiples of the granularity
 * by largest remainder, in device order on ties, into shard[]. A share
 * that rounds to nothing is an error, or with `floor` one unit, taken
 * from the largest shard. */
tyto_status dp_split(const tyto_dp *dp, const double *weights, int floor1,
                     int64_t *shard) {
  const tyto_dp_options *o = &dp->o;
  int64_t gran = o->granularity, batch = dp->local_batch, units = batch / gran;
  if (batch % gran)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the batch (%lld) is not a multiple of the "
                   "granularity (%lld)",
                   (long long)batch, (long long)gran);
  if ((int64_t)dp->n > units)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: a batch of %lld cannot give %zu devices shards of "
                   "at least %lld examples",
                   (long long)batch, dp->n, (long long)gran);
  double total = 0;
  for (size_t i = 0; i < dp->n; i++) {
    double w = weights ? weights[i] : 1.0;
    if (!(w > 0) || !isfinite(w))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: weight %zu is %g: expected a positive finite share",
                     i, w);
    total += w;
  }
  int64_t given = 0;
  double *rem = malloc(dp->n * sizeof *rem);
  if (!rem)
    return dp_oom();
  for (size_t i = 0; i < dp->n; i++) {
    double exact = (double)units * (weights ? weights[i] : 1.0) / total;
    /* Above 2^53 units, (double)units may round up (to 2^63 for
     * INT64_MAX, which no int64_t holds): a share is at most what is
     * left, so that the shards never sum past the batch. */
    double f = floor(exact);
    shard[i] = f >= (double)(units - given) ? units - given : (int64_t)f;
    rem[i] = exact - (double)shard[i];
    given += shard[i];
  }
  while (given < units) {
    size_t best = 0;
    for (size_t i = 1; i < dp->n; i++)
      if (rem[i] > rem[best])
        best = i;
    shard[best]++;
    rem[best] = -1;
    given++;
  }
  free(rem);
  for (size_t i = 0; i < dp->n; i++) {
    if (shard[i] > 0)
      continue;
    if (!floor1)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: device %zu's share rounds to no examples (batch "
                     "%lld in units of %lld over %zu devices); give it a "
                     "larger weight or a smaller granularity, or leave it "
                     "out",
                     dp->r[i].dev, (long long)batch, (long long)gran, dp->n);
    size_t big = 0;
    for (size_t j = 1; j < dp->n; j++)
      if (shard[j] > shard[big])
        big = j;
    shard[big]--;
    shard[i] = 1;
  }
  for (size_t i = 0; i < dp->n; i++)
    shard[i] *= gran;
  return TYTO_OK;
}

/* Builds model m for `batch` into g, checked. */
static tyto_status build_model(tyto_dp_build_fn build, void *user,
                               tyto_graph *g, int64_t batch, tyto_dp_model *m,
                               const char *who) {
  memset(m, 0, sizeof *m);
  tyto_status st = build(user, g, batch, m);
  if (st != TYTO_OK)
    return st;
  if (tyto_graph_status(g) != TYTO_OK)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: building the model for %s: %s", who,
                   tyto_graph_error_message(g));
  if (!m->loss || tyto_tensor_graph(m->loss) != g)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has no one-element loss of its "
                   "graph (%s)",
                   who,
                   !m->loss ? "the loss is NULL" : "it is another graph's");
  if (tyto_tensor_numel(m->loss) != 1) {
    char sh[SHAPE_STR];
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has no one-element loss of its "
                   "graph (the loss is %s; reduce it to one element, a mean "
                   "over the batch)",
                   who, tensor_shape_str(sh, m->loss));
  }
  if (m->n_inputs < 1 || m->n_inputs > MAX_INPUTS)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has %zu inputs: expected 1 to %d", who,
                   m->n_inputs, MAX_INPUTS);
  for (size_t k = 0; k < m->n_inputs; k++) {
    const tyto_tensor *x = m->inputs[k];
    if (!x || tyto_tensor_graph(x) != g ||
        tyto_tensor_kind(x) != TYTO_KIND_INPUT || tyto_tensor_rank(x) < 1 ||
        tyto_tensor_dim(x, 0) != batch)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: input %zu of the model for %s is not an input of "
                     "its graph with the batch (%lld) as its first axis",
                     k, who, (long long)batch);
  }
  if (m->n_sums > 8)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has %zu sums: expected at most 8", who,
                   m->n_sums);
  for (size_t k = 0; k < m->n_sums; k++)
    if (!m->sums[k] || tyto_tensor_graph(m->sums[k]) != g ||
        tyto_tensor_numel(m->sums[k]) != 1)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: sum %zu of the model for %s is not a one-element "
                     "tensor of its graph",
                     k, who);
  if (m->n_params < 1 || m->n_params > MAX_PARAMS || !m->params)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has %zu parameters: expected 1 to "
                   "%d",
                   who, m->n_params, MAX_PARAMS);
  return TYTO_OK;
}

/* Replica r's model must be the global one's with its shard for the
 * batch; its random ops then take their global counters. */
static tyto_status match_global(const tyto_dp_model *gm, const tyto_graph *gg,
                                replica *r, const tyto_dp_model *rm,
                                const char *who) {
  if (rm->n_params != gm->n_params || rm->n_inputs != gm->n_inputs ||
      rm->n_sums != gm->n_sums)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the model for %s has %zu parameters, %zu inputs and "
                   "%zu sums, for the whole batch %zu, %zu and %zu: the "
                   "builder must build one model whatever the batch",
                   who, rm->n_params, rm->n_inputs, rm->n_sums, gm->n_params,
                   gm->n_inputs, gm->n_sums);
  for (size_t i = 0; i < rm->n_params; i++) {
    const tyto_tensor *a = rm->params[i], *b = gm->params[i];
    const char *na = tyto_tensor_name(a), *nb = tyto_tensor_name(b);
    if (!na || !nb || strcmp(na, nb) != 0 || a->dtype != b->dtype ||
        a->rank != b->rank ||
        memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: parameter %zu ('%s') of the model for %s differs "
                     "from the whole batch's ('%s'): the builder must build "
                     "one model whatever the batch",
                     i, na ? na : "(unnamed)", who, nb ? nb : "(unnamed)");
  }
  /* The random ops, in creation order. */
  size_t j = 0;
  for (size_t i = 0; i < r->g->n_nodes; i++) {
    tyto_tensor *t = r->g->nodes[i];
    if (t->op < TYTO_OP_RANDOM_UNIFORM || t->op > TYTO_OP_RANDOM_BERNOULLI)
      continue;
    while (j < gg->n_nodes && (gg->nodes[j]->op < TYTO_OP_RANDOM_UNIFORM ||
                               gg->nodes[j]->op > TYTO_OP_RANDOM_BERNOULLI))
      j++;
    if (j == gg->n_nodes || gg->nodes[j]->op != t->op ||
        gg->nodes[j]->iattrs[0] != t->iattrs[0])
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: the model for %s has other random ops than for "
                     "the whole batch",
                     who);
    const tyto_tensor *G = gg->nodes[j++];
    int64_t off = G->iattrs[1];
    if (t->rank >= 1 && G->rank == t->rank && t->shape[0] == r->shard &&
        G->shape[0] == gm->inputs[0]->shape[0]) {
      int64_t per = tyto_tensor_numel(G) / G->shape[0];
      if ((r->start * per) % 4)
        return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                       "dp: %s's shard starts at example %lld, where a "
                       "random op of %lld elements per example is not at a "
                       "whole Philox counter (four numbers); use a "
                       "granularity of 4",
                       who, (long long)r->start, (long long)per);
      off += r->start * per / 4;
    }
    t->iattrs[1] = off;
  }
  return TYTO_OK;
}

static tyto_status replica_program(tyto_dp *dp, replica *r,
                                   const tyto_dp_model *mp, const char *who);

static tyto_status build_replica(tyto_dp *dp, size_t i, tyto_dp_build_fn build,
                                 void *user, const tyto_dp_model *gm,
                                 const tyto_graph *gg) {
  replica *r = &dp->r[i];
  const tyto_device_info *info =
      tyto_device_get_info(tyto_context_device(dp->ctx, r->dev));
  char who[96];
  snprintf(who, sizeof who, "%s (%lld examples)", info->id,
           (long long)r->shard);
  if (!(r->g = tyto_graph_new()))
    return dp_oom();
  tyto_dp_model m;
  tyto_status st = build_model(build, user, r->g, r->shard, &m, who);
  if (st == TYTO_OK)
    st = match_global(gm, gg, r, &m, who);
  if (st == TYTO_OK)
    st = replica_program(dp, r, &m, who);
  if (m.owner_free)
    m.owner_free(m.owner);
  return st;
}

/* Differentiates, adds the exchanges and the optimiser, and compiles. */
static tyto_status replica_program(tyto_dp *dp, replica *r,
                                   const tyto_dp_model *mp, const char *who) {
  tyto_dp_model m = *mp;
  tyto_status st;
  size_t np = m.n_params;
  r->n_params = np;
  if ((st = dp_amp_rewrite(dp, r, &m)) != TYTO_OK) {
    char *msg = rt_strdup(tyto_errmsg());
    st = rt_fail(st, "dp: mixed precision for %s: %s", who,
                 msg ? msg : "out of memory");
    free(msg);
    return st;
  }
  r->loss = m.loss;
  r->n_sums = m.n_sums;
  memcpy(r->sums, m.sums, sizeof m.sums);
  r->n_inputs = m.n_inputs;
  memcpy(r->inputs, m.inputs, sizeof m.inputs);
  r->params = malloc(np * sizeof *r->params);
  r->grads = calloc(np, sizeof *r->grads);
  r->recvs = calloc(np, sizeof *r->recvs);
  r->sends = malloc((np + 3 + m.n_sums) * sizeof *r->sends);
  r->recv_of_send = malloc((np + 3 + m.n_sums) * sizeof *r->recv_of_send);
  r->stages = calloc(np + 3 + m.n_sums, sizeof *r->stages);
  r->state = malloc((m.n_updates ? m.n_updates : 1) * sizeof *r->state);
  if (!r->params || !r->grads || !r->recvs || !r->sends || !r->recv_of_send ||
      !r->stages || !r->state)
    return dp_oom();
  memcpy(r->params, m.params, np * sizeof *r->params);
  tyto_grads(dp_amp_loss(dp, r), np, r->params, r->grads);
  if ((st = dp_rs_model(dp, r, &m, who)) != TYTO_OK)
    return st;
  for (size_t k = 0; k < np; k++) {
    if (!r->grads[k])
      continue;
    const tyto_tensor *pm = r->params[k];
    char name[512];
    snprintf(name, sizeof name, "%.500s.grad", tyto_tensor_name(pm));
    r->recvs[k] = tyto_input(r->g, pm->dtype, pm->rank, pm->shape, name);
    r->sends[r->n_x] = r->grads[k];
    r->recv_of_send[r->n_x++] = r->recvs[k];
  }
  r->n_gx = r->n_x;
  /* The weight, the loss and the sums go to the host with the gradients
   * (phase 0), so that a step whose update fails still has its figures;
   * their recvs are read by nothing. */
  if (m.weight) {
    if (tyto_tensor_graph(m.weight) != r->g || tyto_tensor_numel(m.weight) != 1)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: the weight of the model for %s is not a "
                     "one-element tensor of its graph",
                     who);
    r->weight_in =
        tyto_input(r->g, tyto_tensor_dtype(m.weight), 0, NULL, "dp.weight");
    r->x_weight = r->n_x;
    r->sends[r->n_x] = m.weight;
    r->recv_of_send[r->n_x++] = r->weight_in;
  }
  r->x_loss = r->n_x;
  r->sends[r->n_x] = r->loss;
  r->recv_of_send[r->n_x++] =
      tyto_input(r->g, tyto_tensor_dtype(r->loss), 0, NULL, "dp.loss");
  r->x_sums = r->n_x;
  for (size_t k = 0; k < m.n_sums; k++) {
    char name[32];
    snprintf(name, sizeof name, "dp.sum%zu", k);
    r->sends[r->n_x] = m.sums[k];
    r->recv_of_send[r->n_x++] =
        tyto_input(r->g, tyto_tensor_dtype(m.sums[k]), 0, NULL, name);
  }
  tyto_tensor *flag = dp_amp_flag(dp, r);
  if (flag) {
    r->x_flag = r->n_x;
    r->sends[r->n_x] = flag;
    r->recv_of_send[r->n_x++] =
        tyto_input(r->g, tyto_tensor_dtype(flag), 0, NULL, "dp.nonfinite");
  }
  /* Every exchange so far after the last stage of replica sums (the
   * weight as early as it is computed), then the replica sums. */
  for (size_t k = 0; k < r->n_x; k++)
    r->stages[k] = r->n_rs_stages;
  if (m.weight)
    r->stages[r->x_weight] = r->weight_stage;
  r->x_rs = r->n_x;
  if (r->n_rs) {
    size_t nx = r->n_x + r->n_rs;
    tyto_tensor **s = realloc(r->sends, nx * sizeof *s);
    if (s)
      r->sends = s;
    tyto_tensor **v = realloc(r->recv_of_send, nx * sizeof *v);
    if (v)
      r->recv_of_send = v;
    size_t *sg = realloc(r->stages, nx * sizeof *sg);
    if (sg)
      r->stages = sg;
    if (!s || !v || !sg)
      return dp_oom();
    for (size_t j = 0; j < r->n_rs; j++) {
      r->sends[r->n_x] = r->rs_send[j];
      r->stages[r->n_x] = r->rs_stage[j];
      r->recv_of_send[r->n_x++] = r->rs_recv[j];
    }
  }
  if (tyto_graph_status(r->g) != TYTO_OK)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "dp: %s: %s", who,
                   tyto_graph_error_message(r->g));
  /* The optimiser: on every replica, or on the first alone. */
  int optimise = !dp->o.single_optimiser || r == &dp->r[0];
  tyto_tensor **ograds = r->recvs;
  if (optimise && (st = dp_amp_grads(dp, r, &ograds)) != TYTO_OK)
    return st;
  if (optimise && (st = tyto_optim_build(&dp->o.optim, np, r->params, ograds,
                                         &r->opt)) != TYTO_OK)
    return st;
  /* The replica's own device; ops it refuses fall back to the first
   * device of the run (placement inside a replica). */
  size_t devs[2] = {r->dev, dp->r[0].dev};
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_devices = r->dev == dp->r[0].dev ? 1 : 2;
  po.devices = devs;
  po.placement = TYTO_PLACE_PINNED;
  /* The layers' updates, then the optimiser's. */
  size_t nu = m.n_updates + tyto_optim_update_count(r->opt);
  tyto_tensor **up = malloc((nu ? nu : 1) * sizeof *up),
              **uv = malloc((nu ? nu : 1) * sizeof *uv);
  if (!up || !uv) {
    free(up);
    free(uv);
    return dp_oom();
  }
  for (size_t k = 0; k < m.n_updates; k++) {
    up[k] = m.update_params[k];
    uv[k] = m.update_values[k];
    r->state[r->n_state++] = m.update_params[k];
  }
  if (r->opt) {
    memcpy(up + m.n_updates, tyto_optim_update_params(r->opt),
           tyto_optim_update_count(r->opt) * sizeof *up);
    memcpy(uv + m.n_updates, tyto_optim_update_values(r->opt),
           tyto_optim_update_count(r->opt) * sizeof *uv);
  }
  po.n_updates = nu;
  po.update_params = up;
  po.update_values = uv;
  po.n_exchanges = r->n_x;
  po.exchange_sends = r->sends;
  po.exchange_recvs = r->recv_of_send;
  po.exchange_stages = r->stages;
  tyto_tensor *outs[9] = {r->loss};
  memcpy(outs + 1, r->sums, r->n_sums * sizeof *outs);
  st = tyto_program_compile(dp->ctx, r->g, 1 + r->n_sums, outs, &po, &r->p);
  free(up);
  free(uv);
  if (st != TYTO_OK) {
    char *msg = rt_strdup(tyto_errmsg());
    st = rt_fail(st, "dp: compiling the replica on %s: %s", who,
                 msg ? msg : "out of memory");
    free(msg);
  }
  return st;
}

/* Builds the model for the whole batch and every replica for the
 * shards given (replacing what was built), and the exchange's buffers. */
tyto_status dp_build_all(tyto_dp *dp, const int64_t *shard) {
  int64_t start = dp->rank_start; /* the shards' places in the global batch */
  for (size_t i = 0; i < dp->n; i++) {
    size_t dev = dp->r[i].dev;
    dp_replica_free(&dp->r[i]);
    memset(&dp->r[i], 0, sizeof dp->r[i]);
    dp->r[i].dev = dev;
    dp->r[i].shard = shard[i];
    dp->r[i].start = start;
    start += shard[i];
  }
  free(dp->x_numel);
  if (dp->coll)
    dp->coll->ops->free(dp->coll);
  free(dp->host);
  dp_free_exchange(dp);
  dp->x_numel = NULL;
  dp->coll = NULL;
  dp->host = NULL;
  /* The model for the whole batch: its random ops' counters. */
  tyto_status st = TYTO_OK;
  tyto_graph *gg = tyto_graph_new();
  tyto_dp_model gm;
  memset(&gm, 0, sizeof gm);
  if (!gg)
    st = dp_oom();
  if (st == TYTO_OK)
    st = build_model(dp->build, dp->user, gg, dp->o.batch, &gm,
                     "the whole batch");
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++)
    st = build_replica(dp, i, dp->build, dp->user, &gm, gg);
  if (gm.owner_free)
    gm.owner_free(gm.owner);
  tyto_graph_free(gg);
  if (st != TYTO_OK)
    return st;
  replica *r0 = &dp->r[0];
  dp->n_x = r0->n_x;
  dp->n_gx = r0->n_gx;
  dp->n_stages = r0->n_rs_stages;
  dp->rs_shares = 0;
  for (size_t j = 0; j < r0->n_rs; j++)
    dp->rs_shares |= r0->rs_kind[j] == TYTO_REPLICA_SUM_SHARES;
  dp->weighted = r0->weight_in != NULL;
  dp->dtype = tyto_tensor_dtype(r0->loss);
  /* The exchange sums and the optimiser state on the host in the
   * gradients' dtype (collective.c, step.c). */
  if (!dtype_host_arith(dp->dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: the loss and gradients are %s, expected f32 or f64 "
                   "(the gradient exchange sums in the model's dtype)",
                   tyto_dtype_name(dp->dtype));
  dp->n_sums = r0->n_sums;
  size_t most = 1;
  if (!(dp->x_numel = malloc((dp->n_x ? dp->n_x : 1) * sizeof *dp->x_numel)))
    return dp_oom();
  for (size_t k = 0; k < dp->n_x; k++) {
    dp->x_numel[k] = (size_t)tyto_tensor_numel(r0->sends[k]);
    if (dp->x_numel[k] > most)
      most = dp->x_numel[k];
    if (k < dp->n_gx && tyto_tensor_dtype(r0->sends[k]) != dp->dtype)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: the gradients and the loss must have one dtype");
  }
  for (size_t i = 1; i < dp->n; i++)
    if (dp->r[i].n_x != dp->n_x || dp->r[i].n_gx != dp->n_gx ||
        (dp->r[i].weight_in != NULL) != dp->weighted)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: the replicas differ in which parameters the loss "
                     "reaches, or in their replica sums");
  if ((st = dp_rs_check(dp)) != TYTO_OK)
    return st;
  /* Across processes, gradient k goes to the exchange as item slot[k]:
   * the gradients in reverse order, which is about the order the
   * backward pass makes them in, and the same on every rank whatever its
   * devices. */
  free(dp->slot);
  if (!(dp->slot = malloc((dp->n_gx ? dp->n_gx : 1) * sizeof *dp->slot)))
    return dp_oom();
  if (dp->ranks > 1) {
    size_t *item_n = malloc((dp->n_gx ? dp->n_gx : 1) * sizeof *item_n);
    if (!item_n)
      return dp_oom();
    for (size_t k = 0; k < dp->n_gx; k++) {
      dp->slot[k] = dp->n_gx - 1 - k;
      item_n[dp->slot[k]] = dp->x_numel[k];
    }
    dp->coll = coll_mpi(
        dp->n, dp->n_gx, item_n, dp->o.exact_exchange ? TYTO_F64 : dp->dtype,
        dp->o.bucket_bytes ? dp->o.bucket_bytes : (size_t)25 << 20, &dp->steps);
    free(item_n);
  } else {
    for (size_t k = 0; k < dp->n_gx; k++)
      dp->slot[k] = k;
    dp->coll = coll_in_process(most);
  }
  if (!dp->coll || !(dp->host = malloc(most * tyto_dtype_size(dp->dtype))))
    return dp_oom();
  return dp_build_exchange(dp);
}

/* What every rank must share: the options that shape the step and the
 * exchange, and the model's parameters (names, shapes, dtype). */
static tyto_status agree(tyto_dp *dp) {
  const tyto_dp_options *o = &dp->o;
  const tyto_optim_options *op = &o->optim;
  const replica *r0 = &dp->r[0];
  uint64_t h = DIST_FNV0;
  int64_t elements = 0;
  for (size_t k = 0; k < r0->n_params; k++) {
    const tyto_tensor *t = r0->params[k];
    const char *name = tyto_tensor_name(t);
    h = dist_hash(h, name ? name : "", name ? strlen(name) + 1 : 1);
    int rank = tyto_tensor_rank(t);
    h = dist_hash(h, &rank, sizeof rank);
    h = dist_hash(h, tyto_tensor_shape(t), (size_t)rank * sizeof(int64_t));
    elements += tyto_tensor_numel(t);
  }
  double od[] = {op->lr,     op->momentum,   op->weight_decay, op->beta1,
                 op->beta2,  op->alpha,      op->eps,          op->gamma,
                 op->min_lr, op->clip_value, op->clip_norm};
  int64_t oi[] = {op->kind,      op->nesterov,    op->schedule,
                  op->step_size, op->total_steps, op->warmup_steps,
                  op->accumulate};
  uint64_t ho = dist_hash(dist_hash(DIST_FNV0, od, sizeof od), oi, sizeof oi);
  const char *const names[] = {"a global batch of",
                               "a granularity of",
                               "a dtype numbered",
                               "a parameter count of",
                               "a parameter element count of",
                               "#parameters' names and shapes",
                               "a gradient count of",
                               "#optimiser settings",
                               "single_optimiser",
                               "no_overlap",
                               "bucket_bytes",
                               "exact_exchange",
                               "a count of sums of",
                               "a weighted loss (1 yes, 0 no):",
                               "amp (1 on, 0 off):",
                               "an amp dtype numbered",
                               "#loss scaling settings",
                               "a count of replica sums of",
                               "#replica sums' kinds, stages and sizes"};
  double sd[] = {dp->scale, o->scale_growth, o->scale_backoff,
                 (double)o->scale_interval, (double)dp->dynamic};
  uint64_t hs = dist_hash(DIST_FNV0, sd, sizeof sd);
  /* Each stage's sums are added over the ranks in one call, and the
   * shares are summed after the weight's stage: both must line up. */
  uint64_t hr =
      dist_hash(DIST_FNV0, &r0->weight_stage, sizeof r0->weight_stage);
  for (size_t j = 0; j < r0->n_rs; j++) {
    int64_t v[3] = {r0->rs_kind[j], (int64_t)r0->rs_stage[j],
                    tyto_tensor_numel(r0->rs_send[j])};
    hr = dist_hash(hr, v, sizeof v);
  }
  int64_t vals[] = {o->batch,
                    o->granularity,
                    (int64_t)dp->dtype,
                    (int64_t)r0->n_params,
                    elements,
                    (int64_t)h,
                    (int64_t)dp->n_gx,
                    (int64_t)ho,
                    o->single_optimiser,
                    o->no_overlap,
                    (int64_t)o->bucket_bytes,
                    o->exact_exchange,
                    (int64_t)dp->n_sums,
                    dp->weighted,
                    o->amp,
                    o->amp ? (int64_t)o->amp_dtype : -1,
                    (int64_t)hs,
                    (int64_t)r0->n_rs,
                    (int64_t)hr};
  return dist_agree_values("dp: the ranks' models", sizeof vals / sizeof *vals,
                           names, vals);
}

tyto_status tyto_dp_new(tyto_context *ctx, const tyto_dp_options *opts,
                        tyto_dp_build_fn build, void *user, tyto_dp **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_dp_new: out is NULL");
  *out = NULL;
  if (!ctx || !opts || !build)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_dp_new: %s is NULL",
                   !ctx    ? "context"
                   : !opts ? "options"
                           : "build");
  if (opts->struct_size != sizeof *opts)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: options struct_size %zu, expected %zu; "
                   "fill them with tyto_dp_options_init",
                   opts->struct_size, sizeof *opts);
  size_t n_ctx = tyto_context_device_count(ctx);
  size_t n = opts->n_devices ? opts->n_devices : n_ctx;
  if (n == 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: no devices (the context selected none)");
  if (opts->n_devices && !opts->devices)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: n_devices is %zu but devices is NULL",
                   opts->n_devices);
  if (opts->batch < 1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: batch %lld: expected a positive batch, at "
                   "least one example per device (%zu)",
                   (long long)opts->batch, n);
  if (opts->granularity < 1 || opts->granularity > opts->batch)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: granularity %lld: expected 1 to the batch "
                   "(%lld)",
                   (long long)opts->granularity, (long long)opts->batch);
  if (opts->rebalance_every < 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: rebalance_every %lld: expected a number of "
                   "steps, or 0 for never",
                   (long long)opts->rebalance_every);
  if (opts->calibrate_steps < -1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: calibrate_steps %lld: expected a number of "
                   "steps, 0 for none or -1 for the default (3 when "
                   "rebalancing without weights)",
                   (long long)opts->calibrate_steps);
  /* The switches are 0 or 1: another value is a mistake, not "on". */
  const struct {
    const char *name;
    int v;
  } sw[] = {{"single_optimiser", opts->single_optimiser},
            {"no_overlap", opts->no_overlap},
            {"local_only", opts->local_only},
            {"exact_exchange", opts->exact_exchange}};
  for (size_t k = 0; k < sizeof sw / sizeof sw[0]; k++)
    if (sw[k].v != 0 && sw[k].v != 1)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_dp_new: %s %d: expected 0 (off) or 1 (on)",
                     sw[k].name, sw[k].v);
  int ranks = opts->local_only ? 1 : tyto_dist_size();
  /* In whole units of the granularity: n * granularity may overflow. */
  if (ranks > 1 &&
      opts->batch / opts->granularity < (int64_t)ranks * (int64_t)n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: a batch of %lld cannot give %zu devices on "
                   "each of %d ranks shards of at least %lld examples",
                   (long long)opts->batch, n, ranks,
                   (long long)opts->granularity);
  if (opts->batch / opts->granularity < (int64_t)n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: a batch of %lld cannot give %zu devices "
                   "shards of at least %lld examples",
                   (long long)opts->batch, n, (long long)opts->granularity);
  if (opts->batch % opts->granularity)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_new: the batch (%lld) is not a multiple of the "
                   "granularity (%lld)",
                   (long long)opts->batch, (long long)opts->granularity);
  tyto_dp *dp = calloc(1, sizeof *dp);
  if (!dp || !(dp->r = calloc(n, sizeof *dp->r))) {
    free(dp);
    return dp_oom();
  }
  pthread_mutex_init(&dp->mu, NULL);
  pthread_cond_init(&dp->cv, NULL);
  dp->ctx = ctx;
  rt_context_hold(ctx); /* it compiles replicas on ctx until freed */
  dp->o = *opts;
  dp->n = n;
  /* This rank's part of the global batch: equal shares in units of the
   * granularity, the remainder to the first ranks. */
  dp->ranks = ranks;
  dp->rank = ranks > 1 ? tyto_dist_rank() : 0;
  {
    int64_t units = opts->batch / opts->granularity;
    int64_t each = units / ranks, extra = units % ranks;
    dp->local_batch = (each + (dp->rank < extra)) * opts->granularity;
    dp->rank_start =
        ((int64_t)dp->rank * each + (dp->rank < extra ? dp->rank : extra)) *
        opts->granularity;
  }
  tyto_status st = dist_usable();
  for (size_t i = 0; i < n && st == TYTO_OK; i++) {
    dp->r[i].dev = opts->n_devices ? opts->devices[i] : i;
    if (dp->r[i].dev >= n_ctx)
      st = rt_fail(TYTO_ERR_NOT_FOUND,
                   "tyto_dp_new: no selected device %zu (the context has "
                   "%zu)",
                   dp->r[i].dev, n_ctx);
    for (size_t j = 0; j < i && st == TYTO_OK; j++)
      if (dp->r[j].dev == dp->r[i].dev)
        st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_dp_new: device %zu is listed twice", dp->r[i].dev);
  }
  if (st == TYTO_OK)
    st = dp_amp_init(dp);
  dp->build = build;
  dp->user = user;
  dp->failed = -1;
  dp->calibrate = opts->calibrate_steps >= 0 ? opts->calibrate_steps
                  : opts->rebalance_every > 0 && !opts->weights ? 3
                                                                : 0;
  dp->loss = NAN;
  if (st == TYTO_OK && opts->weights) {
    if (!(dp->weights = malloc(n * sizeof *dp->weights)))
      st = dp_oom();
    else
      memcpy(dp->weights, opts->weights, n * sizeof *dp->weights);
  }
  if (st == TYTO_OK && (!(dp->window = calloc(n, sizeof *dp->window)) ||
                        !(dp->out = calloc(n, sizeof *dp->out))))
    st = dp_oom();
  int64_t *shard = st == TYTO_OK ? malloc(n * sizeof *shard) : NULL;
  if (st == TYTO_OK && !shard)
    st = dp_oom();
  if (st == TYTO_OK)
    st = dp_split(dp, dp->weights, 0, shard);
  if (st == TYTO_OK)
    st = dp_build_all(dp, shard);
  free(shard);
  /* Every rank must train the same model the same way: a rank that
   * fails above never comes here, and the others stop at the timeout
   * naming it. */
  if (st == TYTO_OK && ranks > 1)
    st = agree(dp);
  if (st != TYTO_OK) {
    tyto_dp_free(dp);
    return st;
  }
  *out = dp;
  return TYTO_OK;
}
