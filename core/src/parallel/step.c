/*
 * A data-parallel step (<tyto/parallel.h>, docs/data-parallel.md): every
 * replica's phase 0 on a thread of its own, the gradients combined as
 * they arrive (streamed sends, in the order replica 0 computes them,
 * each summed over the replicas in their order: collective.h), written
 * back into every replica, then every phase 1. The replicas themselves
 * are built by dp.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/parallel.h>
#include <tyto/program.h>

#include "collective.h"
#include "dist.h"
#include "../exec/program.h"
#include "../graph/dtype.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

#include "dp_internal.h"

/* ---------------------------------------------------------------------- */
/* The exchange's buffers                                                  */

/* The overlapped exchange's buffers (rebuilt with the replicas). */
void dp_free_exchange(tyto_dp *dp) {
  free(dp->xdone);
  free(dp->xdirect);
  dp->xdone = dp->xdirect = NULL;
  free(dp->order);
  free(dp->reduced);
  free(dp->red_off);
  free(dp->red_t);
  dp->red_t = NULL;
  dp->order = NULL;
  dp->reduced = NULL;
  dp->red_off = NULL;
}

static void on_send(void *user, size_t k, const void *data, size_t bytes) {
  replica *r = user;
  (void)bytes;
  pthread_mutex_lock(&r->dp->mu);
  r->got[k] = data;
  pthread_cond_broadcast(&r->dp->cv);
  pthread_mutex_unlock(&r->dp->mu);
}

/* The overlapped exchange: every replica streams its sends (unless
 * no_overlap); the gradients are combined in the order replica 0
 * completes them, into one buffer. */
tyto_status dp_build_exchange(tyto_dp *dp) {
  size_t es = tyto_dtype_size(dp->dtype), total = 0;
  size_t *all = malloc((dp->n_x ? dp->n_x : 1) * sizeof *all);
  dp->order = malloc((dp->n_gx ? dp->n_gx : 1) * sizeof *dp->order);
  dp->red_off = malloc((dp->n_gx ? dp->n_gx : 1) * sizeof *dp->red_off);
  dp->red_t = malloc(2 * (dp->n_gx + 1) * sizeof *dp->red_t);
  dp->xdone = calloc(dp->n_gx ? dp->n_gx : 1, 1);
  dp->xdirect = calloc(dp->n_gx ? dp->n_gx : 1, 1);
  if (!all || !dp->order || !dp->red_off || !dp->red_t || !dp->xdone ||
      !dp->xdirect) {
    free(all);
    return dp_oom();
  }
  tyto_status st = tyto_program_send_order(dp->r[0].p, all, dp->n_x);
  size_t j = 0;
  for (size_t k = 0; k < dp->n_x && st == TYTO_OK; k++)
    if (all[k] < dp->n_gx)
      dp->order[j++] = all[k];
  free(all);
  for (size_t k = 0; k < dp->n_gx; k++) {
    dp->red_off[k] = total;
    total += dp->x_numel[k];
  }
  if (st == TYTO_OK && !(dp->reduced = malloc((total ? total : 1) * es)))
    st = dp_oom();
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    r->dp = dp;
    free(r->got);
    free(r->direct);
    r->got = calloc(dp->n_x ? dp->n_x : 1, sizeof *r->got);
    r->direct = calloc(dp->n_gx ? dp->n_gx : 1, sizeof *r->direct);
    if (!r->got || !r->direct)
      st = dp_oom();
    else if (!dp->o.no_overlap && (dp->n > 1 || dp->ranks > 1))
      st = tyto_program_stream_sends(r->p, on_send, r);
    for (size_t k = 0; k < dp->n_gx && st == TYTO_OK && r->opt; k++)
      r->direct[k] =
          exec_input_in_place(r->p, r->recv_of_send[k], dp->x_numel[k] * es);
  }
  return st;
}

/* ---------------------------------------------------------------------- */
/* A step                                                                  */

/* The phases of a step: 0 .. S - 1 end with a stage of replica sums
 * (S = dp->n_stages), S with the gradients (the forward and backward
 * passes are phases 0 .. S), S + 1 is the update. */
static void *run_phase(void *arg) {
  replica *r = arg;
  size_t S = r->dp->n_stages;
  double t0 = dp_now();
  r->st = tyto_program_run_phase(r->p, r->phase);
  double t1 = dp_now();
  if ((size_t)r->phase > S)
    r->seconds[1] = t1 - t0;
  else
    r->seconds[0] += t1 - t0;
  free(r->msg);
  r->msg = r->st == TYTO_OK ? NULL : rt_strdup(tyto_errmsg());
  if ((size_t)r->phase == S) {
    pthread_mutex_lock(&r->dp->mu);
    r->ended = 1;
    r->t_end = t1;
    pthread_cond_broadcast(&r->dp->cv);
    pthread_mutex_unlock(&r->dp->mu);
  }
  return NULL;
}

/* The replica's worker: runs each phase it is given, until told to quit. */
static void *worker_main(void *arg) {
  replica *r = arg;
  pthread_mutex_lock(&r->w_mu);
  for (;;) {
    while (!r->go && !r->quit)
      pthread_cond_wait(&r->w_cv, &r->w_mu);
    if (r->quit)
      break;
    r->go = 0;
    pthread_mutex_unlock(&r->w_mu);
    run_phase(r);
    pthread_mutex_lock(&r->w_mu);
    r->busy = 0;
    pthread_cond_broadcast(&r->w_cv);
  }
  pthread_mutex_unlock(&r->w_mu);
  return NULL;
}

/* 1 when replica r has its worker (started now if need be), 0 when no
 * thread is to be had. */
static int worker_start(replica *r) {
  if (r->worker)
    return 1;
  if (pthread_mutex_init(&r->w_mu, NULL) != 0)
    return 0;
  if (pthread_cond_init(&r->w_cv, NULL) != 0) {
    pthread_mutex_destroy(&r->w_mu);
    return 0;
  }
  r->go = r->busy = r->quit = 0;
  if (pthread_create(&r->thread, NULL, worker_main, r) != 0) {
    pthread_cond_destroy(&r->w_cv);
    pthread_mutex_destroy(&r->w_mu);
    return 0;
  }
  r->worker = 1;
  return 1;
}

void dp_worker_stop(replica *r) {
  if (!r->worker)
    return;
  pthread_mutex_lock(&r->w_mu);
  r->quit = 1;
  pthread_cond_broadcast(&r->w_cv);
  pthread_mutex_unlock(&r->w_mu);
  pthread_join(r->thread, NULL);
  pthread_cond_destroy(&r->w_cv);
  pthread_mutex_destroy(&r->w_mu);
  r->worker = 0;
}

/* Starts `phase` on every replica at once, each on its worker (one
 * replica, or no thread to be had: run here, to its end). */
static void all_start(tyto_dp *dp, int phase) {
  for (size_t i = 0; i < dp->n; i++) {
    replica *r = &dp->r[i];
    r->phase = phase;
    r->st = TYTO_OK;
    if (phase == 0) {
      r->ended = 0;
      r->seconds[0] = 0;
      memset(r->got, 0, (dp->n_x ? dp->n_x : 1) * sizeof *r->got);
    }
    /* A thread of its own also for a rank's only replica: the step's
     * thread then sends its gradients while it computes. */
    r->threaded = (dp->n > 1 || dp->ranks > 1) && worker_start(r);
    if (r->threaded) {
      pthread_mutex_lock(&r->w_mu);
      r->busy = r->go = 1;
      pthread_cond_broadcast(&r->w_cv);
      pthread_mutex_unlock(&r->w_mu);
    } else {
      run_phase(r);
    }
  }
}

/* Waits for `phase` on every replica; the first failure (in replica
 * order) is raised here, naming its device. */
static tyto_status all_join(tyto_dp *dp, int phase) {
  for (size_t i = 0; i < dp->n; i++) {
    replica *r = &dp->r[i];
    if (!r->threaded)
      continue;
    pthread_mutex_lock(&r->w_mu);
    while (r->busy)
      pthread_cond_wait(&r->w_cv, &r->w_mu);
    pthread_mutex_unlock(&r->w_mu);
  }
  int update = (size_t)phase > dp->n_stages;
  double slowest = 0;
  for (size_t i = 0; i < dp->n; i++)
    if (dp->r[i].seconds[update] > slowest)
      slowest = dp->r[i].seconds[update];
  for (size_t i = 0; i < dp->n; i++) {
    replica *r = &dp->r[i];
    if ((size_t)phase == dp->n_stages)
      r->wait = slowest - r->seconds[0];
    if (r->st != TYTO_OK) {
      const tyto_device_info *info =
          tyto_device_get_info(tyto_context_device(dp->ctx, r->dev));
      dp->failed = (int)i;
      dp->failed_phase = update; /* 1: the update */
      return rt_fail(r->st, "dp: step %lld: the replica on %s (%s): %s",
                     (long long)dp->steps + 1, info->id,
                     update ? "update" : "forward and backward",
                     r->msg ? r->msg : "failed");
    }
  }
  return TYTO_OK;
}

static tyto_status all_run(tyto_dp *dp, int phase) {
  all_start(dp, phase);
  return all_join(dp, phase);
}

static double read_scalar(const void *p, tyto_dtype dt, size_t i) {
  return dtype_info_of(dt)->load(p, i);
}

/* Waits until every replica has streamed send k (1), or one's phase 0
 * ended without it (0: it failed; all_join says how). Meanwhile, an
 * exchange between processes in flight is kept moving (MPI progresses
 * inside its calls only), every 200 microseconds. */
static int await_send(tyto_dp *dp, size_t k) {
  int ok = 1;
  const coll_ops *co = dp->coll->ops;
  pthread_mutex_lock(&dp->mu);
  for (size_t i = 0; i < dp->n && ok; i++) {
    replica *r = &dp->r[i];
    while (!r->got[k] && !r->ended) {
      if (!co->progress) {
        pthread_cond_wait(&dp->cv, &dp->mu);
        continue;
      }
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      if (pthread_cond_timedwait(&dp->cv, &dp->mu, &ts) != 0) {
        pthread_mutex_unlock(&dp->mu);
        co->progress(dp->coll); /* a failure shows at the flush */
        pthread_mutex_lock(&dp->mu);
      }
    }
    ok = r->got[k] != NULL;
  }
  pthread_mutex_unlock(&dp->mu);
  return ok;
}

/* Each replica's share of the mean: its weight (the examples its loss
 * averages over: the model's weight, else its shard) over the sum. The
 * weights come streamed (`streamed`) or are read from the replicas. */
static tyto_status shares(tyto_dp *dp, int streamed) {
  tyto_status st = TYTO_OK;
  double total = 0;
  for (size_t i = 0; i < dp->n; i++) {
    replica *r = &dp->r[i];
    r->share = (double)r->shard;
    if (dp->weighted) {
      tyto_dtype dt = tyto_tensor_dtype(r->sends[r->x_weight]);
      double v[1];
      const void *src = streamed ? r->got[r->x_weight] : v;
      tyto_status s1 = streamed ? TYTO_OK
                                : tyto_program_read_send(r->p, r->x_weight, v,
                                                         tyto_dtype_size(dt));
      r->share = s1 == TYTO_OK ? read_scalar(src, dt, 0) : 0;
      if (st == TYTO_OK)
        st = s1;
    }
    total += r->share;
  }
  /* Made even when a weight could not be read, as every other rank makes
   * it (the caller counts it made: fail_together). */
  tyto_status s2 = dp->coll->ops->sum(dp->coll, &total, 1);
  if (st == TYTO_OK)
    st = s2;
  for (size_t i = 0; i < dp->n; i++)
    dp->r[i].share /= total; /* 0 / 0: NaN, as the one-device loss */
  return st;
}

/* Replicas whose streamed contributions go to the collective's reduce()
 * in one call (more take the add() path, with the same bits). */
#define DP_REDUCE_AT_ONCE 64

/* Gradient k combined over every replica, in replica order, weighted by
 * the shares (collective.h), into dp->reduced. A replica whose shard
 * holds no example the loss counts (all padding: its mean is 0 / 0, its
 * gradient NaN) has share 0 and is left out, not multiplied by 0; unless
 * the model sums statistics over the replicas and its loss is finite
 * (pad_in): its rows then reach the others' losses through the sums, and
 * its gradient, which holds only that, counts at weight 1. */
static tyto_status reduce_send(tyto_dp *dp, size_t k, int streamed) {
  const coll_ops *co = dp->coll->ops;
  size_t es = tyto_dtype_size(dp->dtype), ne = dp->x_numel[k];
  void *out = (char *)dp->reduced + dp->red_off[k] * es;
  if (streamed && co->reduce && dp->n <= DP_REDUCE_AT_ONCE) {
    /* Every contribution is on the host: one pass, written straight into
     * the recvs that are host memory, and into dp->reduced for the
     * others to copy in. */
    const void *xs[DP_REDUCE_AT_ONCE];
    double ws[DP_REDUCE_AT_ONCE];
    void *outs[DP_REDUCE_AT_ONCE + 1];
    size_t m = 0, n_out = 0;
    int copied = 0;
    for (size_t i = 0; i < dp->n; i++) {
      replica *r = &dp->r[i];
      if (r->opt && r->direct[k])
        outs[n_out++] = r->direct[k];
      copied |= r->opt && !r->direct[k];
      if (r->share == 0 && !r->pad_in)
        continue;
      xs[m] = r->got[k];
      ws[m++] = r->pad_in ? 1.0 : r->share;
    }
    if (copied || !n_out)
      outs[n_out++] = out;
    tyto_status st = co->reduce(dp->coll, dp->slot[k], ne, xs, ws, m, dp->dtype,
                                outs, n_out);
    if (st == TYTO_OK)
      dp->xdone[k] = dp->xdirect[k] = 1;
    return st;
  }
  tyto_status st = co->begin(dp->coll, dp->slot[k], ne);
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    const void *src = dp->host;
    if (r->share == 0 && !r->pad_in)
      continue;
    if (streamed)
      src = r->got[k];
    else
      st = tyto_program_read_send(r->p, k, dp->host, ne * es);
    if (st == TYTO_OK)
      st = co->add(dp->coll, src, dp->dtype, r->pad_in ? 1.0 : r->share);
  }
  if (st == TYTO_OK)
    st = co->finish(dp->coll, dp->dtype, out);
  if (st == TYTO_OK)
    dp->xdone[k] = 1;
  return st;
}

/* Which replicas of share 0 count at weight 1 (reduce_send): with
 * backward sums weighted by the shares, those whose loss is finite. Their
 * losses come streamed (then wait for them) or are read. Returns 0 when a
 * replica's phase ended without its loss (it failed: all_join says how). */
static int pads_in(tyto_dp *dp, int streamed, tyto_status *st) {
  int any = 0;
  for (size_t i = 0; i < dp->n; i++) {
    dp->r[i].pad_in = 0;
    any |= dp->r[i].share == 0;
  }
  if (!any || !dp->rs_shares)
    return 1;
  size_t x = dp->r[0].x_loss;
  if (streamed && !await_send(dp, x))
    return 0;
  for (size_t i = 0; i < dp->n && *st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    if (r->share != 0)
      continue;
    tyto_dtype dt = tyto_tensor_dtype(r->sends[x]);
    double v[1];
    const void *src = streamed ? r->got[x] : v;
    if (!streamed)
      *st = tyto_program_read_send(r->p, x, v, tyto_dtype_size(dt));
    if (*st == TYTO_OK)
      r->pad_in = r->pad_ok && isfinite(read_scalar(src, dt, 0));
  }
  return 1;
}

/* The loss, the sums and, over several ranks, which ranks failed the
 * step, added over the ranks in one call: x[0] the mean's part, then the
 * n_sums sums, then one flag per rank. Returns the first failed rank, or
 * -1 (and -2 when the sum itself failed: st says why). */
static int sum_figures(tyto_dp *dp, double *mean, double *sums, int failed,
                       tyto_status *st) {
  size_t nf = dp->n_sums + (size_t)dp->scaling; /* the non-finite figure */
  size_t n = 1 + nf + (size_t)dp->ranks;
  double *x = calloc(n, sizeof *x);
  if (!x) {
    *st = dp_oom();
    return -2;
  }
  x[0] = *mean;
  memcpy(x + 1, sums, nf * sizeof *x);
  x[1 + nf + (size_t)dp->rank] = failed;
  *st = dp->coll->ops->sum(dp->coll, x, n);
  int first = *st == TYTO_OK ? -1 : -2;
  for (int r = 0; r < dp->ranks && first == -1; r++)
    if (x[1 + nf + (size_t)r] != 0)
      first = r;
  *mean = x[0];
  memcpy(sums, x + 1, nf * sizeof *x);
  free(x);
  return first;
}

/* Zeros in place of stage k's replica sums, over the ranks. */
static tyto_status rs_zeros(tyto_dp *dp, size_t k) {
  const replica *r0 = &dp->r[0];
  size_t total = 0;
  for (size_t j = 0; j < r0->n_rs; j++)
    if (r0->rs_stage[j] == k)
      total += dp->x_numel[r0->x_rs + j];
  double *z = calloc(total ? total : 1, sizeof *z);
  if (!z)
    return dp_oom();
  tyto_status st = dp->coll->ops->sum(dp->coll, z, total);
  free(z);
  return st;
}

/* Over several ranks, a rank whose step failed (status st, its message
 * set) still makes every collective the others make in that step: the
 * weights' sum unless made (shares_done), each gradient not yet finished,
 * as zeros, the flush and the figures' sum carrying its failure, so that
 * the others fail the same step at once, naming it, instead of waiting
 * for it until their timeout. Returns st with its message. */
static tyto_status fail_together(tyto_dp *dp, tyto_status st, int shares_done) {
  if (dp->ranks < 2 || dist_usable() != TYTO_OK)
    return st;
  char *msg = rt_strdup(tyto_errmsg());
  const coll_ops *co = dp->coll->ops;
  size_t es = tyto_dtype_size(dp->dtype);
  double total = 0, mean = 0, sums[9] = {0};
  tyto_status s2 = TYTO_OK;
  size_t ws = dp->weighted ? dp->r[0].weight_stage : 0;
  for (size_t k = dp->rs_done; k < dp->n_stages && s2 == TYTO_OK; k++) {
    if (k >= ws && !shares_done) {
      shares_done = 1;
      s2 = co->sum(dp->coll, &total, 1);
    }
    if (s2 == TYTO_OK)
      s2 = rs_zeros(dp, k);
  }
  if (s2 == TYTO_OK && !shares_done)
    s2 = co->sum(dp->coll, &total, 1);
  for (size_t k = 0; k < dp->n_gx && s2 == TYTO_OK; k++)
    if (!dp->xdone[k]) {
      s2 = co->begin(dp->coll, dp->slot[k], dp->x_numel[k]);
      if (s2 == TYTO_OK)
        s2 = co->finish(dp->coll, dp->dtype,
                        (char *)dp->reduced + dp->red_off[k] * es);
    }
  if (s2 == TYTO_OK)
    s2 = co->flush(dp->coll);
  if (s2 == TYTO_OK)
    sum_figures(dp, &mean, sums, 1, &s2);
  st = rt_fail(st, "%s", msg ? msg : "dp: the step failed");
  free(msg);
  return st;
}

/* single_optimiser: replica 0's new parameters into the others. */
static tyto_status broadcast(tyto_dp *dp) {
  replica *r0 = &dp->r[0];
  tyto_status st = TYTO_OK;
  void *buf = NULL;
  size_t cap = 0;
  for (size_t k = 0; k < r0->n_params && st == TYTO_OK; k++) {
    tyto_tensor *t = r0->params[k];
    size_t bytes =
        (size_t)tyto_tensor_numel(t) * tyto_dtype_size(tyto_tensor_dtype(t));
    if (!tyto_program_uses(r0->p, t))
      continue;
    if (bytes > cap) {
      void *nb = realloc(buf, bytes);
      if (!nb) {
        st = dp_oom();
        break;
      }
      buf = nb;
      cap = bytes;
    }
    st = tyto_program_read_parameter(r0->p, t, buf, bytes);
    for (size_t i = 1; i < dp->n && st == TYTO_OK; i++)
      if (tyto_program_uses(dp->r[i].p, dp->r[i].params[k]))
        st = tyto_program_write_parameter(dp->r[i].p, dp->r[i].params[k], buf,
                                          bytes);
  }
  free(buf);
  return st;
}

static tyto_status step(tyto_dp *dp, const void *const *inputs, double *loss);

/* Across ranks, a failed step leaves the others inside its exchange (or
 * timed out of it): the run cannot go on, and says so. */
tyto_status tyto_dp_step(tyto_dp *dp, const void *const *inputs, double *loss) {
  if (!dp || !inputs)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_dp_step: %s is NULL",
                   dp ? "inputs" : "dp");
  if (dp->ranks > 1 && dp->dist_failed)
    return rt_fail(TYTO_ERR_UNAVAILABLE,
                   "tyto_dp_step: rank %d: step %lld failed, and over several "
                   "ranks the run cannot go on after a failed step; start "
                   "again from the last checkpoint",
                   dp->rank, (long long)dp->steps + 1);
  tyto_status st = step(dp, inputs, loss);
  if (st != TYTO_OK && dp->ranks > 1)
    dp->dist_failed = 1;
  return st;
}

static tyto_status step(tyto_dp *dp, const void *const *inputs, double *loss) {
  tyto_status st = TYTO_OK;
  dp->failed = -1;
  /* Before any failure: fail_together makes the stages not yet made. */
  dp->rs_done = 0;
  for (size_t i = 0; i < dp->n; i++)
    dp->r[i].pad_ok = 1;
  memset(dp->xdone, 0, dp->n_gx ? dp->n_gx : 1);
  memset(dp->xdirect, 0, dp->n_gx ? dp->n_gx : 1);
  /* Each replica's slice of each input. */
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    for (size_t k = 0; k < r->n_inputs && st == TYTO_OK; k++) {
      const tyto_tensor *x = r->inputs[k];
      if (!inputs[k]) {
        st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_dp_step: input %zu is NULL", k);
        break;
      }
      size_t row = (size_t)(tyto_tensor_numel(x) / r->shard) *
                   tyto_dtype_size(tyto_tensor_dtype(x));
      st = tyto_program_set_input(
          r->p, r->inputs[k], (const char *)inputs[k] + (size_t)r->start * row,
          (size_t)r->shard * row);
    }
  }
  if (st == TYTO_OK)
    st = dp_amp_feed(dp);
  if (st != TYTO_OK)
    return fail_together(dp, st, 0);
  /* Phase 0 on every replica, and the exchange as the gradients arrive
   * (streamed), in the order replica 0 computes them: each combined once
   * every replica has it, while the backward pass goes on. */
  /* One replica exchanges with itself, on its device (below). */
  int multi = dp->n > 1 || dp->ranks > 1;
  int streamed = !dp->o.no_overlap && multi;
  size_t n_red = 0; /* gradients summed, with their times in red_t */
  int ok = 1, shared = 0;
  /* The phases that end with replica sums, each exchanged once every
   * replica has run it; the shares, which weight the backward pass's
   * sums, as soon as the weight is known. */
  size_t S = dp->n_stages, ws = dp->weighted ? dp->r[0].weight_stage : 0;
  for (size_t k = 0; k < S && st == TYTO_OK; k++) {
    all_start(dp, (int)k);
    if ((st = all_join(dp, (int)k)) != TYTO_OK)
      return fail_together(dp, st, shared);
    if (k >= ws && !shared) {
      shared = 1;
      st = shares(dp, 0);
    }
    /* Its sum over the ranks is made whatever failed here (it sets
     * rs_done), so that fail_together goes on from the next stage. */
    tyto_status sx = dp_rs_exchange(dp, k);
    if (st == TYTO_OK)
      st = sx;
  }
  if (st != TYTO_OK)
    return fail_together(dp, st, shared);
  int pre_shared = shared;
  all_start(dp, (int)S);
  if (streamed) {
    ok = pre_shared || !dp->weighted || await_send(dp, dp->r[0].x_weight);
    if (ok && !pre_shared)
      st = shares(dp, 1);
    shared = ok;
    if (ok && st == TYTO_OK)
      ok = pads_in(dp, 1, &st);
    for (size_t j = 0; j < dp->n_gx && ok && st == TYTO_OK; j++) {
      size_t k = dp->order[j];
      if ((ok = await_send(dp, k))) {
        dp->red_t[2 * n_red] = dp_now();
        st = reduce_send(dp, k, 1);
        dp->red_t[2 * n_red++ + 1] = dp_now();
      }
    }
    /* The sums in flight between processes (at once in one). */
    if (ok && st == TYTO_OK) {
      dp->red_t[2 * n_red] = dp_now();
      st = dp->coll->ops->flush(dp->coll);
      dp->red_t[2 * n_red++ + 1] = dp_now();
    }
  }
  tyto_status sj = all_join(dp, (int)S);
  if (sj != TYTO_OK)
    return fail_together(dp, sj, shared);
  if (!ok) /* every phase 0 ran, yet a send never came */
    return fail_together(dp,
                         rt_fail(TYTO_ERR_INTERNAL,
                                 "dp: step %lld: a replica's phase 0 ended "
                                 "without streaming all its sends",
                                 (long long)dp->steps + 1),
                         shared);
  if (st == TYTO_OK && !streamed) {
    dp->red_t[0] = dp_now();
    if (!shared) {
      shared = 1;
      st = shares(dp, 0);
    }
    if (st == TYTO_OK)
      pads_in(dp, 0, &st);
    for (size_t j = 0; j < dp->n_gx && st == TYTO_OK && multi; j++)
      st = reduce_send(dp, dp->order[j], 0);
    if (st == TYTO_OK && multi)
      st = dp->coll->ops->flush(dp->coll);
    dp->red_t[1] = dp_now();
    n_red = 1;
  }
  /* The other ranks are still inside the exchange: this one makes the
   * rest of it too, then says it failed. */
  if (st != TYTO_OK)
    return fail_together(dp, st, shared);
  /* The step's figures, from phase 0: the mean loss (each replica's by its
   * share) and the sums, in replica order. */
  double mean = 0, sums[9] = {0};
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    for (size_t k = 0; k <= dp->n_sums + (size_t)dp->scaling && st == TYTO_OK;
         k++) {
      size_t x = k == 0            ? r->x_loss
                 : k <= dp->n_sums ? r->x_sums + k - 1
                                   : r->x_flag;
      tyto_dtype dt = tyto_tensor_dtype(r->sends[x]);
      double v[1];
      st = tyto_program_read_send(r->p, x, v, tyto_dtype_size(dt));
      /* A shard of padding only (share 0): its 0 / 0 loss and gradients
       * are left out of the mean and the exchange, and so is their
       * non-finite count. */
      if (k == 0)
        mean += r->share == 0 ? 0 : r->share * read_scalar(v, dt, 0);
      else if (k <= dp->n_sums || r->share != 0 || r->pad_in)
        sums[k - 1] += read_scalar(v, dt, 0);
    }
  }
  /* Over every process: the shares are of the global batch, so the
   * ranks' parts of the mean add up to it; a rank that failed the step
   * says so in the same sum (fail_together), and every rank fails it. */
  if (st != TYTO_OK && dp->ranks > 1 && dist_usable() == TYTO_OK) {
    char *msg = rt_strdup(tyto_errmsg());
    tyto_status s2;
    sum_figures(dp, &mean, sums, 1, &s2);
    st = rt_fail(st, "%s", msg ? msg : "dp: the step failed");
    free(msg);
    return st;
  }
  if (st == TYTO_OK && dp->ranks > 1) {
    int lost = sum_figures(dp, &mean, sums, 0, &st);
    if (lost >= 0)
      return rt_fail(TYTO_ERR_UNAVAILABLE,
                     "dp: rank %d: step %lld failed on rank %d (its own "
                     "error says why); every rank stops with it, before "
                     "the update",
                     dp->rank, (long long)dp->steps + 1, lost);
  }
  if (st == TYTO_OK) {
    dp->loss = mean;
    memcpy(dp->sums, sums, sizeof dp->sums);
  }
  dp->coll->ops->traffic(dp->coll, &dp->net_bytes, &dp->net_seconds);
  /* The combined gradients into every replica that updates; a replica
   * alone takes its own, on its device (its share is 1: the same bits). */
  size_t es = tyto_dtype_size(dp->dtype);
  double t0 = dp_now();
  if (st == TYTO_OK && !multi)
    st = tyto_program_recv_sends(dp->r[0].p);
  for (size_t k = 0; k < dp->n_gx && st == TYTO_OK && multi; k++)
    for (size_t i = 0; i < dp->n && st == TYTO_OK; i++)
      if (dp->r[i].opt && dp->xdirect[k] && dp->r[i].direct[k])
        exec_input_written(dp->r[i].p, dp->r[i].recv_of_send[k]);
      else if (dp->r[i].opt)
        st = tyto_program_set_input(dp->r[i].p, dp->r[i].recv_of_send[k],
                                    (char *)dp->reduced + dp->red_off[k] * es,
                                    dp->x_numel[k] * es);
  /* The exchange's time, and the part of it after the slowest phase 0
   * ended (the copies back all are). */
  double t1 = dp_now(), last = 0;
  for (size_t i = 0; i < dp->n; i++)
    if (dp->r[i].t_end > last)
      last = dp->r[i].t_end;
  dp->xch_seconds = dp->xch_exposed = t1 - t0;
  for (size_t j = 0; j < n_red; j++) {
    double a = dp->red_t[2 * j], b = dp->red_t[2 * j + 1];
    dp->xch_seconds += b - a;
    dp->xch_exposed += b > last ? b - (a > last ? a : last) : 0;
  }
  /* Loss scaling: the gradients' scale undone in phase 1, or the update
   * skipped when one of them is infinite or NaN (on any replica or rank:
   * the figure was added over them all). */
  int skip = 0;
  if (st == TYTO_OK)
    skip = dp_amp_after(dp, sums[dp->n_sums]);
  if (st == TYTO_OK && !skip)
    st = all_run(dp, (int)S + 1);
  if (st == TYTO_OK && !skip && dp->o.single_optimiser)
    st = broadcast(dp);
  if (st == TYTO_OK && loss)
    *loss = dp->loss;
  if (st != TYTO_OK)
    return st;
  dp->steps++;
  return dp_rebalance(dp);
}
