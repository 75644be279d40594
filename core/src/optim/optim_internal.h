/*
 * The optimiser's internals, shared by optim.c (options, validation, the
 * build and the accessors), schedule.c (learning rate, clipping,
 * accumulation) and rules.c (the per-optimiser update rules).
 *
 * Everything is built from public ops: the per-run coefficients are rank-0
 * tensors computed from the step counter, broadcast against the
 * parameters, so that the elementwise update of each parameter fuses into
 * one kernel.
 */
#ifndef TYTO_OPTIM_INTERNAL_H
#define TYTO_OPTIM_INTERNAL_H

#include <stddef.h>

#include <tyto/graph.h>
#include <tyto/ops.h>
#include <tyto/optim.h>

struct tyto_optim {
  tyto_optim_options opts; /* a full copy, defaults filled in */
  /* Parameter updates: the parameters, then their new values. */
  size_t n_updates, cap_updates;
  tyto_tensor **update_params, **update_values;
  /* State parameters in creation order. */
  size_t n_state, cap_state;
  tyto_tensor **state;
  tyto_tensor *step, *micro; /* micro: NULL unless accumulate > 1 */
  tyto_tensor *lr, *grad_norm;
};

/* What the rules need while building: the graph, the options and the
 * rank-0 tensors of this run. */
typedef struct optim_build {
  tyto_optim *o;
  tyto_graph *g;
  tyto_dtype dtype;
  const tyto_optim_options *opts;
  tyto_tensor *step;  /* "optim.step": updates applied before this run */
  tyto_tensor *k;     /* step + 1: the number of the update this run makes */
  tyto_tensor *lr;    /* the schedule's value for update k */
  tyto_tensor *apply; /* 0/1: this run applies the update; NULL when
                       * every run does (accumulate 1) */
  /* Adam's per-run coefficients (NULL for the other kinds). */
  tyto_tensor *adam_step_size; /* lr / (1 - b1^k) */
  tyto_tensor *adam_rc2;       /* 1 / sqrt(1 - b2^k) */
  tyto_tensor *adamw_keep;     /* 1 - lr wd (AdamW with weight decay) */
  char *name;                  /* scratch for state names */
  size_t name_cap;
} optim_build;

/* ---- optim.c ------------------------------------------------------- */

/* A new state parameter shaped as p (rank 0 when p is NULL) named
 * "<p's name><suffix>" (or suffix alone when p is NULL); recorded in the
 * state list. */
tyto_tensor *optim_state_new(optim_build *b, tyto_tensor *p,
                             const char *suffix);
/* Records the update param <- value. With accumulation, parameters and
 * state keep their value on the runs that do not apply (a where on the
 * apply flag, exact for non-finite values too); `always` skips that (the
 * accumulator and the counters). */
void optim_update(optim_build *b, tyto_tensor *param, tyto_tensor *value,
                  int always);

/* ---- schedule.c ---------------------------------------------------- */

/* The rank-0 learning rate of update b->k (schedule, then warm-up). */
tyto_tensor *optim_schedule_lr(optim_build *b);
/* Gradient accumulation for the n parameters: makes the accumulators and
 * the micro counter, sets b->apply, records the accumulators' updates and
 * replaces each non-NULL grads[i] by the mean acc'/K. No-op when
 * accumulate is 1. */
void optim_accumulate(optim_build *b, size_t n, tyto_tensor *const *params,
                      tyto_tensor **grads);
/* Sets b->o->grad_norm to the global L2 norm of grads (before clipping),
 * then clips grads in place: by value, then by global norm, as the options
 * ask. */
void optim_clip(optim_build *b, size_t n, tyto_tensor **grads);

/* ---- rules.c ------------------------------------------------------- */

/* Per-run coefficients the rule needs (Adam's bias corrections). */
void optim_rule_prepare(optim_build *b);
/* The update of parameter p from its gradient g (after accumulation and
 * clipping, before weight decay): makes its state and records the
 * updates of p and its state. */
void optim_rule_apply(optim_build *b, tyto_tensor *p, tyto_tensor *g);
/* The number of state tensors the rule keeps per parameter. */
size_t optim_rule_state_count(const tyto_optim_options *opts);
/* Their name suffixes (".m", ".v", ...), i from 0 to the count. */
const char *optim_rule_state_suffix(const tyto_optim_options *opts, size_t i);

#endif
