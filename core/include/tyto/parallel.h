/*
 * Data-parallel training over several devices of one context, of any
 * plugins (docs/data-parallel.md). One replica of the training step per
 * device, built by the caller for that device's share of the batch; the
 * host splits each global batch into contiguous shards, runs every
 * replica's forward and backward at once, combines the gradients weighted
 * by shard size in a fixed order (so that the update equals the
 * one-device update on the whole batch up to rounding, whatever the
 * split and whatever the timing), and every replica then applies the same
 * update with its own copy of the optimiser state, in lock-step.
 * Random ops (dropout) are keyed by an example's index in the global
 * batch, not by its device: any split draws the same masks.
 */
#ifndef TYTO_PARALLEL_H
#define TYTO_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/context.h>
#include <tyto/graph.h>
#include <tyto/nn.h>
#include <tyto/optim.h>
#include <tyto/program.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x summed over the replicas of a data-parallel step: every replica gets
 * the same sum of every replica's x (of one shape on all of them; over
 * several processes, of every rank's replicas). What synchronised
 * statistics are built from (tyto_nn_options.sync_batch_norm: a batch
 * norm's channel sums over the whole global batch). Outside a
 * data-parallel step (one device, tyto_program_run) it is x itself, so a
 * model behaves the same alone and on one replica. AD differentiates it
 * as the sum it is: the gradient that reaches x is the sum over the
 * replicas of each one's, weighted by their shares of the loss, at every
 * order (docs/data-parallel.md). Each one costs the step a pause: the
 * replicas wait for each other there, in the forward pass and again in
 * the backward. */
TYTO_API tyto_tensor *tyto_replica_sum(tyto_tensor *x);

/* What one replica trains, built by the caller's tyto_dp_build_fn. */
typedef struct tyto_dp_model {
  /* A one-element loss: the MEAN over the batch (so that shards combine
   * by their sizes). */
  tyto_tensor *loss;
  /* The inputs fed each step, each with the batch as axis 0 (images,
   * labels...). */
  size_t n_inputs;
  tyto_tensor *inputs[16];
  /* The parameters trained: named, of one dtype. At most 4096. */
  size_t n_params;
  tyto_tensor **params; /* the builder's memory; read during tyto_dp_new */
  /* How many examples the loss averages over, a one-element tensor
   * computed from the inputs (the labelled rows of a batch with padding:
   * for tyto_loss_softmax_cross_entropy the sum of the labels); NULL: the
   * batch. Shards are weighted by it, so that the step's loss and
   * gradient are those of the whole batch's mean. */
  tyto_tensor *weight;
  /* The layers' own state updates (tyto_nn_update_params/values: the
   * dropout step, batch norm's running statistics), applied on each
   * replica with its own values; 0: none. */
  size_t n_updates;
  tyto_tensor *const *update_params;
  tyto_tensor *const *update_values;
  /* Called with owner once the replica is compiled (or its build failed),
   * to free what the builder made for it (a tyto_nn, say); NULL: none. */
  void *owner;
  void (*owner_free)(void *owner);
  /* Figures summed over the replicas each step (the correct predictions
   * of each shard, say): one-element tensors of the graph, at most 8;
   * tyto_dp_sums() gives the last step's. */
  size_t n_sums;
  tyto_tensor *sums[8];
} tyto_dp_model;

/* Fills what a tyto_nn network knows of m: its parameters, its layers'
 * state updates (dropout's step, batch norm's running statistics) and,
 * when `owns`, the network itself as m's owner, freed once the replica is
 * compiled (without `owns` the caller keeps it, say for
 * tyto_nn_initial_value, and frees it). The loss, inputs, weight and sums
 * stay the builder's to set. */
TYTO_API void tyto_dp_model_from_nn(tyto_dp_model *m, tyto_nn *nn, int owns);

/* Builds the model into g (a fresh graph) for a batch of `batch` examples
 * and describes it in *out. Must build the same model for every batch
 * (the same parameters, in the same order; the same random ops in the
 * same order): it is called once per replica and once for the whole
 * batch. Returns TYTO_OK or an error status (with tyto_errmsg set). */
typedef tyto_status (*tyto_dp_build_fn)(void *user, tyto_graph *g,
                                        int64_t batch, tyto_dp_model *out);

typedef struct tyto_dp_options {
  /* sizeof(tyto_dp_options); set by tyto_dp_options_init(). */
  size_t struct_size;
  /* The devices (indices among the context's selected ones), one replica
   * each. n_devices 0: every selected device. */
  size_t n_devices;
  const size_t *devices;
  /* The global batch, split into one shard per device. */
  int64_t batch;
  /* Each device's share of the batch (n_devices weights, > 0), rounded to
   * whole multiples of `granularity` examples; NULL: equal shares. */
  const double *weights;
  /* Shards are multiples of this many examples (default 1); a shard of 0
   * is allowed only when its weight is 0. */
  int64_t granularity;
  /* The optimiser every replica runs (tyto_optim_options_init). */
  tyto_optim_options optim;
  /* Every this many steps, the shares are set again from each device's
   * measured rate over those steps (examples per second of forward and
   * backward), keeping every device at least `granularity` examples,
   * except a device too slow to help: one whose `granularity` examples
   * take at least as long as the other devices take for the whole batch.
   * It is left out of the run from then on (tyto_dp_left_out says so).
   * 0: never (the shares stay as given). */
  int64_t rebalance_every;
  /* 0 (default): every replica keeps the optimiser's state and applies
   * the update itself, in lock-step (no parameter traffic; the update's
   * time and the state's memory on every device). 1: the first device
   * alone keeps the state and runs the optimiser, and the host copies its
   * new parameters to the other replicas after each step (docs/
   * data-parallel.md measures both). */
  int single_optimiser;
  /* 0 (default): each gradient is combined as soon as every replica has
   * computed it, while the backward pass computes the next (through
   * tyto_program_stream_sends), so that the exchange hides behind the
   * backward pass. 1: the gradients are combined after every replica's
   * whole backward pass (to measure what the overlap saves). Both give
   * the same bits. */
  int no_overlap;
  /* Several processes (<tyto/distributed.h>, docs/distributed.md): when
   * tyto_dist_init joined several ranks, `batch` is the global batch of
   * every rank together, each rank trains on its equal share of it (in
   * multiples of `granularity`, rank order), split over its own devices
   * as above, and the gradients are combined across the ranks too; every
   * rank passes the same options and the same global batch to
   * tyto_dp_step. 1: this process's devices only, whatever the ranks. */
  int local_only;
  /* Across processes, gradients travel in buckets of about this many
   * bytes, each sent as soon as the backward pass has made all of its
   * gradients; 0: 25 MiB. */
  size_t bucket_bytes;
  /* Across processes: 0 (default), each rank's sum over its devices
   * travels in the model's dtype, rounded once before the ranks' sums are
   * added (as other frameworks all-reduce gradients); 1, in double, so
   * that the total is rounded once, after (twice the bytes for an f32
   * model; with two ranks, the bits of one process over the same
   * devices). docs/distributed.md measures both. */
  int exact_exchange;
  /* Automatic mixed precision (docs/precision.md). 0 (default): every op
   * runs in the model's dtype. 1: the model is rewritten by tyto_autocast
   * (<tyto/precision.h>) with amp_dtype as its low dtype before it is
   * differentiated, so that the products, and the ops the rule list lets
   * follow them, run forward and backward in amp_dtype, while the
   * parameters (the master weights), their gradients, the exchange and
   * the optimiser's state stay in the model's dtype. */
  int amp;
  /* TYTO_BF16 (default) or TYTO_F16 for an f32 model (TYTO_F32 for an
   * f64 one). */
  tyto_dtype amp_dtype;
  /* Loss scaling, for f16's narrow range: the loss is multiplied by the
   * scale before the backward pass, and the gradients divided by it
   * before the update. loss_scale: the first scale (0, default: 65536
   * with f16 AMP, else 1). dynamic_scale: -1 (default) on with f16 AMP,
   * else off; 0 off; 1 on. With it on, a step whose gradients hold an
   * infinity or NaN on any replica or rank skips its update (every
   * replica alike; tyto_dp_step_skipped, tyto_dp_skipped_steps) and
   * multiplies the scale by scale_backoff (0: 0.5); scale_interval steps
   * in a row without one (0: 2000) multiply it by scale_growth (0: 2).
   * A scale that is a power of two scales exactly. */
  double loss_scale;
  int dynamic_scale;
  double scale_growth, scale_backoff;
  int64_t scale_interval;
  /* Calibration: the shares are first set from each device's measured
   * rate over the run's first steps, rather than after rebalance_every
   * steps. -1 (default): after 3 steps when rebalance_every is on and no
   * weights were given, else none; 0: none; N >= 1: after N steps. The
   * first step pays one-off costs (first launches, cold caches) and is
   * left out of the measure unless N is 1. Calibration sets the shares
   * only, every device keeping at least `granularity` examples: a device
   * is left out as too slow to help only at a rebalance, on the evidence
   * of a whole window of rebalance_every steps. The rebalancing window
   * starts again after it. tyto_dp_resplit ends a calibration not yet
   * made (the shares given win). */
  int64_t calibrate_steps;
} tyto_dp_options;

typedef struct tyto_dp tyto_dp;

TYTO_API void tyto_dp_options_init(tyto_dp_options *o);

/* Builds and compiles one replica per device. `build` and `user` are
 * kept: re-splitting (tyto_dp_resplit, rebalancing, tyto_dp_drop) builds
 * replicas again, so user must outlive dp. Errors: an empty device
 * list or a device the context lacks, a batch below 1 or smaller than the
 * number of devices, a granularity below 1 or above the batch, a weight
 * that is not positive and finite, a negative rebalance_every, a
 * calibrate_steps below -1, a switch
 * (single_optimiser, no_overlap, local_only, exact_exchange, amp) other
 * than 0 or 1, a model whose loss is not one element or
 * whose replicas differ (parameters, inputs, random ops), and whatever
 * building and compiling a replica raise, named by device. */
TYTO_API tyto_status tyto_dp_new(tyto_context *ctx, const tyto_dp_options *opts,
                                 tyto_dp_build_fn build, void *user,
                                 tyto_dp **out);
TYTO_API void tyto_dp_free(tyto_dp *dp); /* NULL ok */

/* One training step on a global batch: inputs[k] holds input k for all
 * `batch` examples, row-major with the batch first (as the model's input
 * for the whole batch would). *loss (may be NULL) gets the batch's mean
 * loss. A replica that fails ends the step with an error naming its
 * device; the parameters are then as before the step on every replica
 * whose update did not run, so continue only after restoring them. */
TYTO_API tyto_status tyto_dp_step(tyto_dp *dp, const void *const *inputs,
                                  double *loss);

/* Sets new shares (n weights, as tyto_dp_options.weights; NULL: equal)
 * and rebuilds the replicas whose shard changed, carrying the parameters,
 * the layers' state and the optimiser's state over from replica 0. */
TYTO_API tyto_status tyto_dp_resplit(tyto_dp *dp, const double *weights);

/* After a step failed on replica i's device (tyto_dp_failed_replica):
 * drops that replica and splits the batch over the others, every one of
 * them set to the state of a surviving replica. *applied (may be NULL) is
 * 1 when the failed step's update was applied (the failure came after
 * it), 0 when the step should be run again. Fails when i is the only
 * replica. */
TYTO_API tyto_status tyto_dp_drop(tyto_dp *dp, size_t i, int *applied);

/* The last step's sums (tyto_dp_model.sums), each added over the
 * replicas in their order in double, into out[0 .. n), and its mean loss
 * (as tyto_dp_step gives it; NaN before any step). Both are known once
 * the step's forward and backward ran on every replica: a step that
 * failed in its update still has them. n may be less than the model's
 * count, not more. */
TYTO_API tyto_status tyto_dp_sums(const tyto_dp *dp, double *out, size_t n);

/* Loss scaling (tyto_dp_options.loss_scale): the scale the next step
 * uses (1 without scaling), whether the last step skipped its update for
 * an infinite or NaN gradient, and how many steps did so far. */
TYTO_API double tyto_dp_loss_scale(const tyto_dp *dp);
TYTO_API int tyto_dp_step_skipped(const tyto_dp *dp);
TYTO_API int64_t tyto_dp_skipped_steps(const tyto_dp *dp);
TYTO_API double tyto_dp_loss(const tyto_dp *dp);

/* The devices rebalancing left out as too slow to help (rebalance_every),
 * in the order they were: their count, and the i-th's device (an index
 * among the context's selected devices), the steps run when it was left
 * out, the seconds its `granularity` examples took and the seconds the
 * other devices took for the whole batch, at their measured rates. */
TYTO_API size_t tyto_dp_left_out_count(const tyto_dp *dp);
TYTO_API tyto_status tyto_dp_left_out(const tyto_dp *dp, size_t i,
                                      size_t *device, int64_t *step,
                                      double *unit_seconds,
                                      double *others_seconds);

/* The replica whose device failed the last step, or -1. */
TYTO_API int tyto_dp_failed_replica(const tyto_dp *dp);

/* Steps run so far (the failed one not counted). */
TYTO_API int64_t tyto_dp_steps(const tyto_dp *dp);

/* The replicas: their count, and replica i's device (an index among the
 * context's selected devices) and shard (examples per step). */
TYTO_API size_t tyto_dp_replica_count(const tyto_dp *dp);
TYTO_API size_t tyto_dp_replica_device(const tyto_dp *dp, size_t i);
TYTO_API int64_t tyto_dp_replica_shard(const tyto_dp *dp, size_t i);

/* Replica i's compiled program, for its figures (tyto_program_stats_get,
 * tyto_program_device_stats_get: graph replays, copies between devices);
 * NULL when i is out of range. Valid until the replicas are rebuilt
 * (re-splitting, rebalancing, dropping a device). */
TYTO_API const tyto_program *tyto_dp_replica_program(const tyto_dp *dp,
                                                     size_t i);

/* Seconds replica i spent in its last step's forward and backward (phase
 * 0), and waiting for the slowest replica before the exchange. */
TYTO_API double tyto_dp_replica_seconds(const tyto_dp *dp, size_t i);
TYTO_API double tyto_dp_replica_wait(const tyto_dp *dp, size_t i);
/* Seconds replica i spent in its last step's update (phase 1). */
TYTO_API double tyto_dp_replica_update_seconds(const tyto_dp *dp, size_t i);

/* The last step's exchange: the seconds spent combining the gradients
 * (copying them to the host, the weighted sum, the copies back), and of
 * them the seconds after the slowest replica's backward pass had ended,
 * which the overlap did not hide (tyto_dp_options.no_overlap). */
TYTO_API double tyto_dp_exchange_seconds(const tyto_dp *dp);
TYTO_API double tyto_dp_exchange_exposed_seconds(const tyto_dp *dp);

/* The last step's traffic between processes (0 with one): the bytes this
 * rank sent into MPI reductions (the payload; a ring all-reduce moves
 * about twice that per rank), and the seconds it waited for them after
 * its own backward pass. */
TYTO_API double tyto_dp_network_bytes(const tyto_dp *dp);
TYTO_API double tyto_dp_network_seconds(const tyto_dp *dp);

/* This process's rank and part of the global batch: its first example
 * and its count (all of it with one rank). */
TYTO_API int tyto_dp_rank(const tyto_dp *dp);
TYTO_API int64_t tyto_dp_rank_start(const tyto_dp *dp);
TYTO_API int64_t tyto_dp_rank_batch(const tyto_dp *dp);

/* A parameter, layer state or optimiser state tensor by name ("fc1.w",
 * "nn.step", "fc1.w.m", "optim.step"): read from replica 0 (all replicas
 * hold the same parameters and optimiser state; a batch norm's running
 * statistics are each replica's own), or written to every replica.
 * bytes must be the tensor's size; errors name the call and the tensor
 * ("tyto_dp_read: 'b1' is f32[16] (64 bytes), got 4 bytes"), and an
 * unknown name is TYTO_ERR_NOT_FOUND. */
TYTO_API tyto_status tyto_dp_read(tyto_dp *dp, const char *name, void *dst,
                                  size_t bytes);
TYTO_API tyto_status tyto_dp_write(tyto_dp *dp, const char *name,
                                   const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_PARALLEL_H */
