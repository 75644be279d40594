/*
 * What a data-parallel run reports (<tyto/parallel.h>): the last step's
 * loss, sums and exchange times, each replica's device, shard and times,
 * and its parameters and optimiser state by name.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include <tyto/optim.h>
#include <tyto/parallel.h>

#include "../graph/dtype.h"
#include "../graph/shape.h"
#include "../runtime/error.h"

#include "dp_internal.h"

const tyto_program *tyto_dp_replica_program(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].p : NULL;
}

double tyto_dp_exchange_seconds(const tyto_dp *dp) {
  return dp ? dp->xch_seconds : NAN;
}

double tyto_dp_exchange_exposed_seconds(const tyto_dp *dp) {
  return dp ? dp->xch_exposed : NAN;
}

double tyto_dp_network_bytes(const tyto_dp *dp) {
  return dp ? dp->net_bytes : NAN;
}

double tyto_dp_network_seconds(const tyto_dp *dp) {
  return dp ? dp->net_seconds : NAN;
}

int tyto_dp_rank(const tyto_dp *dp) {
  return dp ? dp->rank : -1;
}

int64_t tyto_dp_rank_start(const tyto_dp *dp) {
  return dp ? dp->rank_start : -1;
}

int64_t tyto_dp_rank_batch(const tyto_dp *dp) {
  return dp ? dp->local_batch : -1;
}

double tyto_dp_loss(const tyto_dp *dp) {
  return dp ? dp->loss : NAN;
}

tyto_status tyto_dp_sums(const tyto_dp *dp, double *out, size_t n) {
  static const char fn[] = "tyto_dp_sums";
  if (!dp || (!out && n))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   dp ? "out" : "dp");
  if (n > dp->n_sums)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: %zu sums asked for; the model has %zu", fn, n,
                   dp->n_sums);
  memcpy(out, dp->sums, n * sizeof *out);
  return TYTO_OK;
}

size_t tyto_dp_replica_count(const tyto_dp *dp) {
  return dp ? dp->n : 0;
}

size_t tyto_dp_replica_device(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].dev : SIZE_MAX;
}

int64_t tyto_dp_replica_shard(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].shard : -1;
}

double tyto_dp_replica_seconds(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].seconds[0] : -1;
}

double tyto_dp_replica_update_seconds(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].seconds[1] : -1;
}

double tyto_dp_replica_wait(const tyto_dp *dp, size_t i) {
  return dp && i < dp->n ? dp->r[i].wait : -1;
}

/* ---------------------------------------------------------------------- */
/* Queries                                                                 */

/* Replica r's parameter or optimiser state named `name`, or NULL. */
static tyto_tensor *find(const replica *r, const char *name, size_t np) {
  for (size_t k = 0; k < np; k++) {
    const char *n = tyto_tensor_name(r->params[k]);
    if (n && strcmp(n, name) == 0)
      return r->params[k];
  }
  for (size_t k = 0; k < r->n_state; k++) {
    const char *n = tyto_tensor_name(r->state[k]);
    if (n && strcmp(n, name) == 0)
      return r->state[k];
  }
  for (size_t k = 0; k < tyto_optim_state_count(r->opt); k++) {
    tyto_tensor *t = tyto_optim_state(r->opt, k);
    const char *n = tyto_tensor_name(t);
    if (n && strcmp(n, name) == 0)
      return t;
  }
  return NULL;
}

static tyto_status access(tyto_dp *dp, const char *fn, const char *name,
                          int write, void *buf, size_t bytes) {
  if (!dp || !name || (!buf && bytes))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !dp     ? "dp"
                   : !name ? "name"
                           : "the buffer");
  for (size_t i = 0; i < (write ? dp->n : 1); i++) {
    replica *r = &dp->r[i];
    tyto_tensor *t = find(r, name, r->n_params);
    if (!t && i > 0)
      continue; /* the optimiser's state lives on replica 0 alone */
    if (!t)
      return rt_fail(TYTO_ERR_NOT_FOUND,
                     "%s: no parameter or optimiser state named '%.200s'", fn,
                     name);
    size_t want =
        (size_t)tyto_tensor_numel(t) * tyto_dtype_size(tyto_tensor_dtype(t));
    if (bytes != want) {
      char sh[SHAPE_STR];
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: '%.200s' is %s%s (%zu bytes), got %zu bytes", fn,
                     name, tyto_dtype_name(tyto_tensor_dtype(t)),
                     tensor_shape_str(sh, t), want, bytes);
    }
    tyto_status st = write ? tyto_program_write_parameter(r->p, t, buf, bytes)
                           : tyto_program_read_parameter(r->p, t, buf, bytes);
    if (st != TYTO_OK)
      return st;
  }
  return TYTO_OK;
}

tyto_status tyto_dp_read(tyto_dp *dp, const char *name, void *dst,
                         size_t bytes) {
  return access(dp, "tyto_dp_read", name, 0, dst, bytes);
}

tyto_status tyto_dp_write(tyto_dp *dp, const char *name, const void *src,
                          size_t bytes) {
  return access(dp, "tyto_dp_write", name, 1, (void *)src, bytes);
}
