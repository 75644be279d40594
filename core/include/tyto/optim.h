/*
 * Training optimisers, learning-rate schedules, gradient clipping and
 * gradient accumulation, all as graph ops: tyto_optim_build() adds to the
 * graph what one training step does after the gradients, and returns it as
 * parameter updates (tyto_program_options), so that the forward pass, the
 * loss, the gradients and the update compile into one program and the
 * parameters and the optimiser's state never leave the device.
 *
 * The optimiser's state are parameters of the graph, named after the
 * parameter they serve ("fc1.weight.m", "fc1.weight.v"; "optim.step",
 * "optim.micro"): they start at zero as every program parameter does, and
 * a checkpoint of the program's parameters holds them. "optim.step" counts
 * the updates applied (0 before the first), so bias corrections and
 * schedules are computed from it inside the program at every run: nothing
 * is frozen at compile time. In a float32 graph it counts exactly up to
 * 2^24 updates.
 *
 * At update k = step + 1, with g the gradient after accumulation, clipping
 * and (all but AdamW) weight decay g += wd p, and lr the schedule's value:
 *   SGD:      b = mu b + g (b = g at k = 1); p -= lr (g + mu b) with
 *             Nesterov, else p -= lr b (PyTorch's SGD; mu = 0: p -= lr g)
 *   Adagrad:  s += g^2; p -= lr g / (sqrt(s) + eps)
 *   RMSprop:  s = alpha s + (1 - alpha) g^2; p -= lr g / (sqrt(s) + eps)
 *   Adam:     m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *             p -= lr (m / (1 - b1^k)) / (sqrt(v / (1 - b2^k)) + eps)
 *   AdamW:    Adam on the raw gradient, and p -= lr wd p (decoupled,
 *             Loshchilov and Hutter 2019), both from the old p.
 */
#ifndef TYTO_OPTIM_H
#define TYTO_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tyto_optim_kind {
  TYTO_OPTIM_SGD = 0,
  TYTO_OPTIM_ADAGRAD = 1,
  TYTO_OPTIM_RMSPROP = 2,
  TYTO_OPTIM_ADAM = 3,
  TYTO_OPTIM_ADAMW = 4
} tyto_optim_kind;

/* Learning rate at update k (k = 1, 2, ...), before warm-up:
 *   CONSTANT:    lr
 *   STEP:        lr gamma^floor((k - 1) / step_size)
 *   EXPONENTIAL: lr gamma^(k - 1)
 *   COSINE:      min_lr + (lr - min_lr) (1 + cos(pi min(k - 1, T) / T)) / 2
 *                with T = total_steps
 * then, when warmup_steps W > 0, multiplied by min(1, k / W) (linear
 * warm-up). */
typedef enum tyto_schedule_kind {
  TYTO_SCHEDULE_CONSTANT = 0,
  TYTO_SCHEDULE_STEP = 1,
  TYTO_SCHEDULE_EXPONENTIAL = 2,
  TYTO_SCHEDULE_COSINE = 3
} tyto_schedule_kind;

typedef struct tyto_optim_options {
  /* sizeof(tyto_optim_options) as the caller compiled it; set by
   * tyto_optim_options_init(). Fields past it are taken as defaults. */
  size_t struct_size;
  tyto_optim_kind kind;
  double lr;
  double momentum; /* SGD */
  int nesterov;    /* SGD, needs momentum > 0 */
  double weight_decay;
  double beta1, beta2; /* Adam, AdamW */
  double alpha;        /* RMSprop's decay */
  double eps;          /* Adagrad, RMSprop, Adam, AdamW */
  /* Schedule. */
  tyto_schedule_kind schedule;
  int64_t step_size;    /* STEP */
  double gamma;         /* STEP, EXPONENTIAL */
  int64_t total_steps;  /* COSINE */
  double min_lr;        /* COSINE */
  int64_t warmup_steps; /* 0: none */
  /* Clipping, applied in this order to the accumulated gradient; 0: off.
   * By value: each element into [-clip_value, clip_value]. By global norm:
   * every gradient scaled by min(1, clip_norm / (||g|| + 1e-6)) where
   * ||g|| is the L2 norm of all gradients together (PyTorch's
   * clip_grad_norm_). */
  double clip_value;
  double clip_norm;
  /* Runs per update (gradient accumulation; default 1): each run adds its
   * gradient into an accumulator ("<p>.acc"); every accumulate-th run
   * applies the update with their mean and clears it. The other runs leave
   * parameters and the optimiser's state unchanged. */
  int64_t accumulate;
} tyto_optim_options;

/* PyTorch's defaults for the kind: lr 0.01 (SGD, Adagrad, RMSprop) or
 * 0.001 (Adam, AdamW); momentum 0; weight decay 0 (AdamW: 0.01); betas
 * 0.9, 0.999; alpha 0.99; eps 1e-10 (Adagrad), 1e-8 (others); constant
 * schedule, gamma 0.1, no warm-up, no clipping, accumulate 1. */
TYTO_API void tyto_optim_options_init(tyto_optim_options *opts,
                                      tyto_optim_kind kind);

/* Name of a kind or schedule ("adamw", "cosine"), and back (-1: none). */
TYTO_API const char *tyto_optim_kind_name(tyto_optim_kind kind);
TYTO_API int tyto_optim_kind_from_name(const char *name);
TYTO_API const char *tyto_schedule_name(tyto_schedule_kind kind);
TYTO_API int tyto_schedule_from_name(const char *name);

typedef struct tyto_optim tyto_optim;

/* Builds the update of the n parameters params (named, of one graph and
 * dtype) from their gradients grads (shaped as the parameters; NULL for a
 * parameter the loss does not reach: it is left alone). On success *out
 * owns the optimiser: free with tyto_optim_free() (the graph keeps the
 * tensors). Errors, with the graph left unchanged: TYTO_ERR_INVALID_ARGUMENT
 * for bad options ("optim: lr must be positive and finite, got -1";
 * "optim: nesterov needs momentum > 0"; "optim: cosine schedule needs
 * total_steps >= 1"; accumulate above 2^24), a parameter without a name,
 * of another graph or dtype, given twice, of a dtype other than f32 or f64
 * (integers carry no gradient; in 16 bits the step counter would stop at
 * 256), a gradient of another shape, a graph in error, or a graph that
 * already has a parameter of a state name (one optimiser per graph);
 * TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_optim_build(const tyto_optim_options *opts, size_t n,
                                      tyto_tensor *const *params,
                                      tyto_tensor *const *grads,
                                      tyto_optim **out);
TYTO_API void tyto_optim_free(tyto_optim *o); /* NULL ok */

/* The updates to pass to tyto_program_options: every parameter and every
 * state tensor, with its new value. Valid while o lives. */
TYTO_API size_t tyto_optim_update_count(const tyto_optim *o);
TYTO_API tyto_tensor *const *tyto_optim_update_params(const tyto_optim *o);
TYTO_API tyto_tensor *const *tyto_optim_update_values(const tyto_optim *o);

/* The optimiser's state parameters, in this order: "optim.step", then with
 * accumulate > 1 "optim.micro" and each parameter's "<p>.acc", then each
 * parameter's rule state: "<p>.b" (SGD with momentum), "<p>.s" (Adagrad,
 * RMSprop), "<p>.m" and "<p>.v" (Adam, AdamW). Parameters whose gradient
 * is NULL have none. tyto_optim_state() gives NULL past the count. */
TYTO_API size_t tyto_optim_state_count(const tyto_optim *o);
TYTO_API tyto_tensor *tyto_optim_state(const tyto_optim *o, size_t i);

/* Rank-0 tensors of the graph, for logging as program outputs: the step
 * counter (a parameter: the ops of a run see the updates applied before
 * it; read as an output after the run, as every updated parameter is, it
 * counts this run's update too), the learning rate this run's update uses,
 * and the global L2 norm of the gradients (after accumulation: of the mean
 * so far) before clipping. */
TYTO_API tyto_tensor *tyto_optim_step(const tyto_optim *o);
TYTO_API tyto_tensor *tyto_optim_lr(const tyto_optim *o);
TYTO_API tyto_tensor *tyto_optim_grad_norm(const tyto_optim *o);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_OPTIM_H */
