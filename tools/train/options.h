/*
 * tyto-train's command line: the options, their parsing and checks, and the
 * optimiser options they make. Internal to tools/.
 */
#ifndef TYTO_TOOLS_TRAIN_OPTIONS_H
#define TYTO_TOOLS_TRAIN_OPTIONS_H

#include <stdint.h>

#include <tyto/tyto.h>

#define PROG "tyto-train"
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

enum { MAX_BATCH = 1 << 16, MAX_EPOCHS = 1000000 };

typedef struct options {
  const char *model, *model_file, *data, *devices, *checkpoint, *plot;
  int64_t epochs, batch, limit, test_limit, validation, eval_every,
      checkpoint_every, max_steps;
  uint64_t seed;
  int resume, json, quiet, progress; /* progress: -1 auto, 0 off, 1 on */
  /* Several selected devices: train on all at once (--data-parallel: 1
   * on, 0 off, -1 auto: on when the selection was chosen, not the
   * default), and go on without a device that fails
   * (--on-device-failure continue). */
  int data_parallel, continue_on_failure;
  /* Over several devices: the shares from the measured rates after
   * --calibrate-steps steps and every --rebalance-every steps (-1: the
   * defaults, 3 and 50), in multiples of --shard-granularity images (0:
   * 4 where the batch allows, else 1). */
  int64_t calibrate_steps, rebalance_every, shard_granularity;
  /* Under an MPI launcher: seconds a wait for the other ranks may take
   * (--dist-timeout; NaN: the library's default, TYTO_DIST_TIMEOUT). */
  double dist_timeout;
  int exact_exchange; /* --exact-exchange: tyto_dp_options' */
  /* --sync-batch-norm: tyto_nn_options' (batch norm over the global
   * batch) */
  int sync_batch_norm;
  /* --precision: TYTO_F32 (default, no mixed precision), TYTO_BF16 or
   * TYTO_F16 (automatic mixed precision, docs/precision.md); --loss-scale:
   * the first loss scale (0: the library's default). */
  tyto_dtype precision;
  double loss_scale;
  /* Optimiser: the kind, and the fields given on the command line (NaN /
   * -1 when not given: the kind's defaults stay). */
  tyto_optim_kind optim;
  double lr, momentum, weight_decay, beta1, beta2, alpha, eps, gamma, min_lr,
      clip_value, clip_norm;
  int nesterov;
  int schedule;
  int64_t step_size, total_steps, warmup, accumulate;
} options;

/* Fills *o from argv. Returns 0, 1 for --help (usage printed to stdout),
 * -1 on a usage error (the message printed to stderr). */
int options_parse(int argc, char **argv, options *o);

/* The optimiser options: the kind's defaults with the fields given. */
void options_optim(const options *o, tyto_optim_options *oo);

#endif /* TYTO_TOOLS_TRAIN_OPTIONS_H */
