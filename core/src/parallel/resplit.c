/*
 * Re-splitting a data-parallel run (<tyto/parallel.h>): new shares by
 * hand, rebalancing from measured rates, dropping a failed device. Each
 * rebuilds the replicas and carries every parameter, layer state and
 * optimiser state tensor over through host memory (a snapshot).
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

/* Every parameter, layer state and optimiser state tensor of a replica,
 * by name, with its value. */
typedef struct snap_item {
  char *name; /* a copy: the replica may be gone when it is restored */
  void *data;
  size_t bytes;
} snap_item;

typedef struct snapshot {
  snap_item *items;
  size_t n;
} snapshot;

static void snapshot_free(snapshot *sn) {
  for (size_t i = 0; i < sn->n; i++) {
    free(sn->items[i].name);
    free(sn->items[i].data);
  }
  free(sn->items);
  memset(sn, 0, sizeof *sn);
}

static tyto_status snap_one(snapshot *sn, replica *r, tyto_tensor *t) {
  snap_item *it = &sn->items[sn->n];
  const char *name = tyto_tensor_name(t);
  it->bytes =
      (size_t)tyto_tensor_numel(t) * tyto_dtype_size(tyto_tensor_dtype(t));
  if (!name || !tyto_program_uses(r->p, t))
    return TYTO_OK;
  sn->n++; /* freed by snapshot_free from here on */
  if (!(it->name = rt_strdup(name)) ||
      !(it->data = malloc(it->bytes ? it->bytes : 1)))
    return dp_oom();
  return tyto_program_read_parameter(r->p, t, it->data, it->bytes);
}

/* The state of replica r (copied: r may then be freed). */
static tyto_status snapshot_take(snapshot *sn, replica *r) {
  size_t no = tyto_optim_state_count(r->opt);
  size_t cap = r->n_params + r->n_state + no;
  memset(sn, 0, sizeof *sn);
  if (!(sn->items = calloc(cap ? cap : 1, sizeof *sn->items)))
    return dp_oom();
  tyto_status st = TYTO_OK;
  for (size_t k = 0; k < r->n_params && st == TYTO_OK; k++)
    st = snap_one(sn, r, r->params[k]);
  for (size_t k = 0; k < r->n_state && st == TYTO_OK; k++)
    st = snap_one(sn, r, r->state[k]);
  for (size_t k = 0; k < no && st == TYTO_OK; k++)
    st = snap_one(sn, r, tyto_optim_state(r->opt, k));
  return st;
}

/* Builds the replicas for `shard` and writes sn's state into all. */
static tyto_status rebuild(tyto_dp *dp, const int64_t *shard,
                           const snapshot *sn) {
  tyto_status st = dp_build_all(dp, shard);
  for (size_t i = 0; i < sn->n && st == TYTO_OK; i++)
    st = tyto_dp_write(dp, sn->items[i].name, sn->items[i].data,
                       sn->items[i].bytes);
  for (size_t i = 0; i < dp->n; i++)
    dp->window[i] = 0;
  dp->window_steps = 0;
  return st;
}

/* Rebuilds every replica for `shard`, from replica src's state. */
static tyto_status resplit_from(tyto_dp *dp, size_t src, const int64_t *shard) {
  snapshot sn;
  tyto_status st = snapshot_take(&sn, &dp->r[src]);
  if (st == TYTO_OK)
    st = rebuild(dp, shard, &sn);
  snapshot_free(&sn);
  return st;
}

tyto_status tyto_dp_resplit(tyto_dp *dp, const double *weights) {
  if (!dp)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_dp_resplit: dp is NULL");
  int64_t *shard = malloc(dp->n * sizeof *shard);
  if (!shard)
    return dp_oom();
  tyto_status st = dp_split(dp, weights, 0, shard);
  if (st == TYTO_OK && weights && !dp->weights &&
      !(dp->weights = malloc(dp->n * sizeof *dp->weights)))
    st = dp_oom();
  if (st == TYTO_OK) {
    if (weights)
      memcpy(dp->weights, weights, dp->n * sizeof *dp->weights);
    else {
      free(dp->weights);
      dp->weights = NULL;
    }
    st = resplit_from(dp, 0, shard);
  }
  if (st == TYTO_OK)
    dp->calibrate = 0; /* the shares given win over a calibration to come */
  free(shard);
  return st;
}

/* After the calibration's steps, then every rebalance_every steps:
 * shares from the measured rates; the replicas are rebuilt only when the
 * shards change. */
static tyto_status drop_from(tyto_dp *dp, size_t i, size_t src);

/* The slowest device too slow to help, at the rates w (examples per
 * second): its `granularity` examples take at least as long as the other
 * devices take for the whole batch, so that giving it any work lengthens
 * the step. -1 when none is (or when it holds the only optimiser). */
static int too_slow(const tyto_dp *dp, const double *w, double *unit_s,
                    double *others_s) {
  double all = 0;
  for (size_t i = 0; i < dp->n; i++)
    all += w[i];
  int worst = -1;
  for (size_t i = 0; i < dp->n; i++) {
    double others = all - w[i];
    if (!(w[i] > 0) || !(others > 0) || (dp->o.single_optimiser && i == 0))
      continue;
    double unit = (double)dp->o.granularity / w[i],
           rest = (double)dp->local_batch / others;
    if (unit >= rest && (worst < 0 || w[i] < w[worst])) {
      worst = (int)i;
      *unit_s = unit;
      *others_s = rest;
    }
  }
  return worst;
}

tyto_status dp_rebalance(tyto_dp *dp) {
  /* A calibration over several steps leaves the first out: it pays the
   * one-off costs (first launches, cold caches). */
  if (dp->calibrate > 1 && dp->steps == 1)
    return TYTO_OK;
  for (size_t i = 0; i < dp->n; i++)
    dp->window[i] += dp->r[i].seconds[0];
  dp->window_steps++;
  int64_t k = dp->o.rebalance_every;
  int calibrating = dp->calibrate > 0;
  if (calibrating) {
    if (dp->steps < dp->calibrate)
      return TYTO_OK;
    dp->calibrate = 0;
  }
  if (dp->n < 2 || (!calibrating && (k <= 0 || dp->window_steps < k))) {
    if (calibrating) {
      for (size_t i = 0; i < dp->n; i++)
        dp->window[i] = 0;
      dp->window_steps = 0;
    }
    return TYTO_OK;
  }
  double *w = malloc(dp->n * sizeof *w);
  int64_t *shard = malloc(dp->n * sizeof *shard);
  tyto_status st = !w || !shard ? dp_oom() : TYTO_OK;
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++)
    w[i] = dp->window[i] > 0 ? (double)dp->r[i].shard / dp->window[i] : 1.0;
  double unit_s = 0, others_s = 0;
  int slow =
      st == TYTO_OK && !calibrating ? too_slow(dp, w, &unit_s, &others_s) : -1;
  if (slow >= 0) {
    /* Left out: the others split the batch by their rates. */
    if (!dp->weights && !(dp->weights = malloc(dp->n * sizeof *w)))
      st = dp_oom();
    if (st == TYTO_OK) {
      memcpy(dp->weights, w, dp->n * sizeof *w);
      dp->out[dp->n_out].device = dp->r[slow].dev;
      dp->out[dp->n_out].step = dp->steps;
      dp->out[dp->n_out].unit_s = unit_s;
      dp->out[dp->n_out++].others_s = others_s;
      st = drop_from(dp, (size_t)slow, slow == 0 ? 1 : 0);
    }
    free(w);
    free(shard);
    return st;
  }
  if (st == TYTO_OK)
    st = dp_split(dp, w, 1, shard);
  int changed = 0;
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++)
    changed |= shard[i] != dp->r[i].shard;
  if (st == TYTO_OK && changed) {
    if (!dp->weights && !(dp->weights = malloc(dp->n * sizeof *w)))
      st = dp_oom();
    else
      memcpy(dp->weights, w, dp->n * sizeof *w);
    if (st == TYTO_OK)
      st = resplit_from(dp, 0, shard);
  }
  for (size_t i = 0; i < dp->n; i++)
    dp->window[i] = 0;
  dp->window_steps = 0;
  free(w);
  free(shard);
  return st;
}

tyto_status tyto_dp_drop(tyto_dp *dp, size_t i, int *applied) {
  static const char fn[] = "tyto_dp_drop";
  if (!dp)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: dp is NULL", fn);
  if (i >= dp->n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: replica %zu out of range (there are %zu)", fn, i,
                   dp->n);
  if (dp->n == 1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: replica %zu is the only one: nothing would train", fn,
                   i);
  if (dp->ranks > 1)
    return rt_fail(TYTO_ERR_UNSUPPORTED,
                   "%s: rank %d of %d: a device cannot be dropped from a run "
                   "over several processes (the other ranks are inside the "
                   "step's exchange); stop, and resume from the last "
                   "checkpoint without the device",
                   fn, dp->rank, dp->ranks);
  if (dp->o.single_optimiser && i == 0)
    return rt_fail(TYTO_ERR_UNAVAILABLE,
                   "%s: replica 0 holds the only copy of the optimiser's "
                   "state (single_optimiser), which is lost with its "
                   "device; restart from the last checkpoint",
                   fn);
  /* The state to go on from: after the update when a replica applied it
   * (the step failed in its update phase elsewhere), else before it. With
   * a single optimiser, replica 0 (the update is applied when it ran). */
  size_t src = i == 0 ? 1 : 0;
  int done = 0;
  if (dp->failed >= 0 && dp->failed_phase == 1)
    for (size_t j = 0; j < dp->n && !done; j++)
      if (j != i && (size_t)dp->r[j].phase == dp->n_stages + 1 &&
          dp->r[j].st == TYTO_OK && (!dp->o.single_optimiser || j == 0)) {
        src = j;
        done = 1;
      }
  if (applied)
    *applied = done;
  if (done)
    dp->steps++; /* the failed step's update stands */
  return drop_from(dp, i, src);
}

/* Drops replica i and splits the batch over the others by their weights,
 * every one of them set to replica src's state. */
static tyto_status drop_from(tyto_dp *dp, size_t i, size_t src) {
  snapshot sn;
  tyto_status st = snapshot_take(&sn, &dp->r[src]);
  int64_t *shard = NULL;
  if (st == TYTO_OK) {
    dp_replica_free(&dp->r[i]);
    /* Each worker knows its replica by address: none may outlive the
     * move (the rebuild below starts them again). */
    for (size_t j = i + 1; j < dp->n; j++)
      dp_worker_stop(&dp->r[j]);
    memmove(&dp->r[i], &dp->r[i + 1], (dp->n - i - 1) * sizeof *dp->r);
    memset(&dp->r[dp->n - 1], 0, sizeof *dp->r);
    if (dp->weights)
      memmove(&dp->weights[i], &dp->weights[i + 1],
              (dp->n - i - 1) * sizeof *dp->weights);
    dp->n--;
    dp->failed = -1;
    if (!(shard = malloc(dp->n * sizeof *shard)))
      st = dp_oom();
  }
  if (st == TYTO_OK)
    st = dp_split(dp, dp->weights, 1, shard);
  if (st == TYTO_OK)
    st = rebuild(dp, shard, &sn);
  free(shard);
  snapshot_free(&sn);
  return st;
}

size_t tyto_dp_left_out_count(const tyto_dp *dp) {
  return dp ? dp->n_out : 0;
}

tyto_status tyto_dp_left_out(const tyto_dp *dp, size_t i, size_t *device,
                             int64_t *step, double *unit_seconds,
                             double *others_seconds) {
  if (!dp)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_dp_left_out: dp is NULL");
  if (i >= dp->n_out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dp_left_out: %zu out of range (%zu left out so "
                   "far)",
                   i, dp->n_out);
  if (device)
    *device = dp->out[i].device;
  if (step)
    *step = dp->out[i].step;
  if (unit_seconds)
    *unit_seconds = dp->out[i].unit_s;
  if (others_seconds)
    *others_seconds = dp->out[i].others_s;
  return TYTO_OK;
}

int tyto_dp_failed_replica(const tyto_dp *dp) {
  return dp ? dp->failed : -1;
}

int64_t tyto_dp_steps(const tyto_dp *dp) {
  return dp ? dp->steps : 0;
}
