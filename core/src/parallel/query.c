/*
 * What a data-parallel run reports (<tyto/parallel.h>): the last step's
 * loss, sums and exchange times, and each replica's device, shard and
 * times.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include <tyto/parallel.h>

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
