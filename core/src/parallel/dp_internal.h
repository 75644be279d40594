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
  size_t dev; /* among the context's selected devices */
  int64_t shard, start;
  tyto_graph *g;
  tyto_tensor *loss;
  size_t n_inputs;
  tyto_tensor *inputs[MAX_INPUTS];
  tyto_tensor **params, **grads, **recvs; /* n_params each */
  tyto_tensor **sends, **recv_of_send;    /* the exchanges */
  size_t n_x, n_params;
  tyto_tensor *weight_in; /* the weight's recv (read by nothing) */
  size_t n_state;         /* the layers' updated state */
  tyto_tensor **state;
  tyto_optim *opt;
  tyto_program *p;
  /* A phase run on a thread: its outcome and time. */
  pthread_t thread;
  int threaded;
  int phase;
  tyto_status st;
  char *msg;
  double seconds[2]; /* each phase's, last step */
  double wait;       /* for the slowest replica's phase 0 */
  double share;      /* of the last step's mean */
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
  size_t n_x;   /* exchanges: the gradients, then the weight if any */
  int weighted; /* the model gives a weight (the last exchange) */
  tyto_dtype dtype;
  size_t *x_numel; /* per exchange: elements */
  coll *coll;      /* the exchange's transport (collective.h) */
  void *host;      /* one exchange in the model's dtype */
};

tyto_status dp_oom(void);
void dp_replica_free(replica *r);
/* The shards for weights (NULL: equal) into shard[] (dp.c). */
tyto_status dp_split(const tyto_dp *dp, const double *weights, int floor1,
                     int64_t *shard);
/* Builds every replica for shard[] (dp.c). */
tyto_status dp_build_all(tyto_dp *dp, const int64_t *shard);
/* After a step: rebalances every rebalance_every steps (resplit.c). */
tyto_status dp_rebalance(tyto_dp *dp);

#endif
