/*
 * The data-parallel layer's internals, shared by dp.c (building the
 * replicas, a step, queries) and resplit.c (re-splitting, rebalancing,
 * dropping a failed device).
 */
#ifndef TYTO_PARALLEL_DP_INTERNAL_H
#define TYTO_PARALLEL_DP_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <tyto/parallel.h>
#include <tyto/program.h>

#include "collective.h"

#define MAX_PARAMS 4096
#define MAX_INPUTS 16

typedef struct replica {
  struct tyto_dp *dp;
  size_t dev; /* among the context's selected devices */
  int64_t shard, start;
  tyto_graph *g;
  tyto_tensor *loss;
  size_t n_sums; /* outputs 1 .. n_sums: the model's sums */
  tyto_tensor *sums[8];
  size_t n_inputs;
  tyto_tensor *inputs[MAX_INPUTS];
  tyto_tensor **params, **grads, **recvs; /* n_params each */
  /* The exchanges: the gradients (sends[0 .. n_gx)), then the figures
   * the host reads after phase 0: the weight (x_weight, if the model has
   * one), the loss (x_loss) and the sums (from x_sums); their recvs are
   * read by nothing. */
  tyto_tensor **sends, **recv_of_send;
  size_t n_x, n_gx, n_params;
  size_t x_weight, x_loss, x_sums;
  tyto_tensor *weight_in; /* the weight's recv, or NULL: no weight */
  /* Replica sums (replica.c), exchanges x_rs .. x_rs + n_rs - 1 after the
   * figures: each one's operand and input, kind (TYTO_REPLICA_SUM_*) and
   * stage, in n_rs_stages stages (0: none; the gradients and the figures
   * go after the last, in phase n_rs_stages), and every exchange's stage
   * (stages[0 .. n_x)); x_weight's is weight_stage. */
  size_t x_rs, n_rs, n_rs_stages, weight_stage;
  tyto_tensor **rs_send, **rs_recv;
  int *rs_kind;
  size_t *rs_stage, *stages;
  tyto_tensor **rs_uv; /* the layers' update values, rebuilt */
  size_t n_state;      /* the layers' updated state */
  tyto_tensor **state;
  tyto_optim *opt;
  tyto_program *p;
  /* A phase run on a thread: its outcome and time. */
  /* The replica's worker (step.c): started at its first phase and kept
   * until the replica is freed, so that a step does not start and join a
   * thread per phase (tens of microseconds each, on steps of a
   * millisecond for small models). Under w_mu: go (a phase to run),
   * busy (running it), quit. threaded: this phase runs on the worker. */
  pthread_t thread;
  pthread_mutex_t w_mu;
  pthread_cond_t w_cv;
  int worker, go, busy, quit;
  int threaded;
  int phase;
  tyto_status st;
  char *msg;
  /* Phase 0's streamed sends (dp.c, under dp->mu): where each landed
   * (NULL: not yet), and whether the phase's thread has ended. */
  const void **got;
  /* Per gradient, where the combined one is written in place: its recv's
   * memory when the device's is the host's (exec_input_in_place), else
   * NULL (it is copied in from dp->reduced). */
  void **direct;
  int ended;
  double t_end;      /* when phase 0 ended (now()) */
  double seconds[2]; /* each phase's, last step */
  double wait;       /* for the slowest replica's phase 0 */
  double share;      /* of the last step's mean */
  /* Share 0 (padding alone), yet its gradient counts, at weight 1: the
   * model sums statistics over the replicas, which its rows enter, and
   * its own loss was finite (so its direct gradient is zero). pad_ok:
   * none of what it added to the backward's sums in this step was
   * infinite or NaN (a loss that is NaN on padding alone leaves it out). */
  int pad_in, pad_ok;
  /* Mixed precision (amp.c): the layers' update values rewritten, and
   * with loss scaling the scale's inputs (phase 0, phase 1), the
   * gradients handed to the optimiser and the non-finite figure's send
   * (x_flag, after the sums). */
  tyto_tensor **amp_uv, **amp_grads;
  tyto_tensor *scale_in, *inv_scale_in;
  size_t x_flag;
} replica;

struct tyto_dp {
  tyto_context *ctx;
  tyto_dp_options o;
  tyto_dp_build_fn build;
  void *user;
  size_t n;
  replica *r;
  double *weights; /* n shares, or NULL: equal */
  int64_t steps;
  int failed, failed_phase; /* the last step's failed replica, or -1 */
  double *window; /* per replica: phase 0 seconds since the last rebalance */
  int64_t window_steps;
  /* The calibration (tyto_dp_options.calibrate_steps, resolved): after
   * this many steps; 0 once made, or none. */
  int64_t calibrate;
  size_t n_stages; /* of replica sums, as each replica's n_rs_stages */
  int rs_shares;   /* some replica sum is of kind SHARES (a backward's) */
  size_t rs_done;  /* stages exchanged in this step */
  size_t n_x;      /* exchanges, as each replica's */
  size_t n_gx;     /* of them the gradients, first */
  int weighted;    /* the model gives a weight */
  tyto_dtype dtype;
  size_t *x_numel; /* per exchange: elements */
  coll *coll;      /* the exchange's transport (collective.h) */
  void *host;      /* one exchange in the model's dtype */
  /* The overlapped exchange: the gradients in the order replica 0
   * completes them, their combined values (at red_off[k] elements of
   * reduced), and the lock and signal of the streamed sends. */
  size_t *order;
  void *reduced;
  size_t *red_off;
  double *red_t; /* per gradient: when its sum started and ended */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  double xch_seconds, xch_exposed; /* the last step's */
  /* Devices left out by rebalancing as too slow (at most the initial n). */
  size_t n_out;
  struct {
    size_t device;
    int64_t step;
    double unit_s, others_s;
  } * out;
  /* The run's processes (docs/distributed.md): this one's rank among
   * `ranks` (1: this process alone), and its part of the global batch,
   * [rank_start, rank_start + local_batch), split over its replicas. */
  int rank, ranks;
  int dist_failed; /* a step failed over several ranks: no more */
  int64_t local_batch, rank_start;
  size_t *slot;  /* per gradient: its place in the exchange */
  char *xdone;   /* per gradient: finished in this step's exchange */
  char *xdirect; /* ... and written into the recvs in place (direct) */
  double net_bytes, net_seconds; /* the last step's, between processes */
  size_t n_sums; /* the model's sums, and the last step's totals */
  double sums[8];
  double loss; /* the last step's mean loss, once its phase 0 ran */
  /* Loss scaling (amp.c): on, dynamic, the scale the next step uses, the
   * steps in a row without a non-finite gradient, the steps skipped, and
   * whether the last one was. */
  int scaling, dynamic;
  double scale;
  int64_t good, skipped;
  int last_skipped;
};

tyto_status dp_oom(void);
/* Stops replica r's worker thread, if it has one (step.c). */
void dp_worker_stop(replica *r);
void dp_replica_free(replica *r);
/* The shards for weights (NULL: equal) into shard[] (dp.c). */
tyto_status dp_split(const tyto_dp *dp, const double *weights, int floor1,
                     int64_t *shard);
/* Builds every replica for shard[] (dp.c). */
tyto_status dp_build_all(tyto_dp *dp, const int64_t *shard);
/* The overlapped exchange's buffers and the replicas' streamed sends,
 * built with the replicas and freed (step.c). */
tyto_status dp_build_exchange(tyto_dp *dp);
void dp_free_exchange(tyto_dp *dp);
/* Mixed precision (amp.c): the options checked and defaults resolved
 * (at tyto_dp_new); a replica's model rewritten by tyto_autocast; the
 * tensor to differentiate (the loss, times the scale's input when
 * scaling); the non-finite figure to send (NULL when not scaling); the
 * gradients the optimiser takes (*out); the scale's inputs fed before
 * phase 0; and, from the step's added figure, whether to skip its
 * update (1), adjusting the scale. */
tyto_status dp_amp_init(tyto_dp *dp);
tyto_status dp_amp_rewrite(tyto_dp *dp, replica *r, tyto_dp_model *m);
tyto_tensor *dp_amp_loss(tyto_dp *dp, replica *r);
tyto_tensor *dp_amp_flag(tyto_dp *dp, replica *r);
tyto_status dp_amp_grads(tyto_dp *dp, replica *r, tyto_tensor ***out);
tyto_status dp_amp_feed(tyto_dp *dp);
int dp_amp_after(tyto_dp *dp, double flag);
/* Replica sums (replica.c): in replica r's graph, the tensors roots[0 ..
 * n) rebuilt with every TYTO_OP_REPLICA_SUM they need turned into an
 * input (r->rs_*; each root's phase, the replica sums above it, into
 * levels[k]); and, in a step, stage `stage`'s sums made and set into
 * every replica once its phase has run on them all. */
tyto_status dp_rs_rewrite(replica *r, size_t n, tyto_tensor **roots,
                          size_t *levels, const char *who);
tyto_status dp_rs_exchange(tyto_dp *dp, size_t stage);
/* With more than one replica in the run, the replica sums of r's loss,
 * gradients, weight, sums and layer updates (in *m) made exchanges; and
 * the replicas' sums checked against each other once all are built. */
tyto_status dp_rs_model(tyto_dp *dp, replica *r, tyto_dp_model *m,
                        const char *who);
tyto_status dp_rs_check(const tyto_dp *dp);
/* Seconds on a monotonic clock (dp.c). */
double dp_now(void);
/* After a step: calibrates, then rebalances every rebalance_every steps
 * (resplit.c). */
tyto_status dp_rebalance(tyto_dp *dp);

#endif
