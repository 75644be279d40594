/*
 * tyto-train over several devices at once: the glue between the tool's
 * model (a model file's layers, its loss) and the library's data-parallel
 * training (<tyto/parallel.h>, docs/data-parallel.md).
 *
 * The tool keeps its one-device programs: the evaluation, and the
 * training step compiled on the first device, which holds the state that
 * checkpoints save and resumes restore. Data-parallel steps run on the
 * replicas; the state moves between them and that program by name
 * (train_dp_pull, train_dp_push) only around checkpoints, evaluations and
 * resumes, so a checkpoint is one file whatever the devices, and a run
 * resumes on any other set of them.
 */
#ifndef TYTO_TOOLS_TRAIN_PARALLEL_H
#define TYTO_TOOLS_TRAIN_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/tyto.h>

#include "model_file.h"

/* The model's loss kind over logits and labels (what evaluation reports). */
tyto_tensor *model_loss(const mf_model *m, tyto_tensor *logits,
                        tyto_tensor *labels);

/* The training loss of the model: its loss kind over logits and labels,
 * plus its L1/L2 regularisation of the network's weights. NULL on out of
 * memory (the graph's status says why otherwise). */
tyto_tensor *train_loss(const mf_model *m, tyto_nn *nn, tyto_tensor *logits,
                        tyto_tensor *labels);

typedef struct train_dp train_dp;

typedef struct train_dp_spec {
  tyto_context *ctx;
  const mf_model *model;
  uint64_t seed;
  int64_t batch, classes;
  tyto_optim_options optim;
  int exact_exchange;  /* tyto_dp_options' (over several ranks) */
  int sync_batch_norm; /* tyto_nn_options' */
  int first_only;      /* the context's first device alone (over ranks) */
  /* Automatic mixed precision: TYTO_F32 (off), TYTO_BF16 or TYTO_F16, and
   * the first loss scale (0: the library's default). */
  tyto_dtype precision;
  double loss_scale;
  int quiet; /* no line for each update skipped by loss scaling */
  /* tyto_dp_options': the shares set from the measured rates after
   * calibrate_steps steps and every rebalance_every steps (-1: 3 and 50;
   * 0: never), in multiples of granularity examples (0: 4 where the batch
   * allows, else 1). */
  int64_t calibrate_steps, rebalance_every, granularity;
} train_dp_spec;

/* One replica per selected device, equal shares rounded to whole
 * multiples of the granularity (Philox counters: a model with dropout
 * needs shards that start on a whole counter), set from the measured
 * speeds after the calibration's steps, then again every rebalance_every
 * steps. Returns 0, or -1 with the message in err. */
int train_dp_new(const train_dp_spec *spec, train_dp **out, char *err,
                 size_t n);
void train_dp_free(train_dp *t);

/* One step on a global batch: *loss its mean loss, *correct its correct
 * predictions. On a failed device: with `go_on`, the device is dropped,
 * the step run again where its update did not happen, and *dropped set to
 * the lost device's id (static storage until train_dp_free); without, -1
 * and tyto_errmsg() names the device and the step. */
int train_dp_step(train_dp *t, const void *x, const void *y, int go_on,
                  double *loss, double *correct, const char **dropped);

/* The state (parameters, layers' state, optimiser state) by name: from the
 * replicas into program p (pull), or from p into every replica (push).
 * Returns 0, -1 with tyto_errmsg() set, or -2 when out of host memory. */
int train_dp_pull(train_dp *t, tyto_program *p, size_t n,
                  tyto_tensor *const *state);
int train_dp_push(train_dp *t, tyto_program *p, size_t n,
                  tyto_tensor *const *state);

/* Per device, over the steps run so far: its id, its examples per step
 * now, its forward-and-backward rate (examples per second) and the seconds
 * it waited for the slowest device. */
size_t train_dp_count(const train_dp *t);
typedef struct train_dp_device {
  const char *id;
  int64_t shard;
  double images_per_second, wait_seconds;
} train_dp_device;
void train_dp_device_get(const train_dp *t, size_t i, train_dp_device *out);

/* Whether the last step changed the devices' shares from their measured
 * rates (calibration or rebalancing; not a device dropped or left out):
 * then 1, with "cpu:0 40, opencl:0 24" in buf. */
int train_dp_shares_changed(const train_dp *t, char *buf, size_t n);

/* The first replica's program (its graph replays, for the report). */
const tyto_program *train_dp_program(const train_dp *t);

/* The devices left out as too slow to help (tyto_dp_left_out): the id, the
 * step, the seconds one unit of examples took on it and the seconds the
 * others took for the batch. */
typedef struct train_dp_left {
  const char *id;
  int64_t step;
  double unit_seconds, others_seconds;
} train_dp_left;
size_t train_dp_left_out_count(const train_dp *t);
void train_dp_left_out_get(const train_dp *t, size_t i, train_dp_left *out);

/* Over the steps run so far: the seconds spent exchanging gradients, and
 * of them the seconds after the slowest device's backward pass ended. */
void train_dp_exchange(const train_dp *t, double *seconds, double *exposed);

/* Between processes (under mpirun), over the steps run so far: the bytes
 * this rank sent per step, and the seconds it waited for the others. */
/* Loss scaling: the scale now, and the steps skipped for an infinite or
 * NaN gradient so far. */
double train_dp_loss_scale(const train_dp *t);
int64_t train_dp_skipped(const train_dp *t);

void train_dp_network(const train_dp *t, double *bytes_per_step,
                      double *seconds);

/* This rank's examples per step (the batch, with one rank). */
int64_t train_dp_rank_batch(const train_dp *t);

#endif /* TYTO_TOOLS_TRAIN_PARALLEL_H */
