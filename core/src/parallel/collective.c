/*
 * The in-process collective (collective.h): one accumulator in double;
 * contributions are added in the order they come, which dp.c makes the
 * replicas' order, so the sum does not depend on which replica finished
 * first.
 */
#include "config.h"

#include <stdlib.h>

#include "collective.h"
#include "../runtime/error.h"

typedef struct in_process {
  coll base;
  double *acc;
  size_t n, max_n;
  int first; /* no contribution yet: the next one is stored, not added */
} in_process;

static tyto_status ip_begin(coll *c, size_t n) {
  in_process *ip = (in_process *)c;
  if (n > ip->max_n)
    return rt_fail(TYTO_ERR_INTERNAL,
                   "dp: a reduction of %zu elements, the collective holds "
                   "%zu",
                   n, ip->max_n);
  ip->n = n;
  ip->first = 1; /* saves a pass of zeros over the accumulator */
  return TYTO_OK;
}

static tyto_status ip_add(coll *c, const void *x, tyto_dtype dt,
                          double weight) {
  in_process *ip = (in_process *)c;
  double *acc = ip->acc;
  size_t n = ip->n;
  if (dt == TYTO_F64) {
    const double *v = x;
    if (ip->first)
      for (size_t j = 0; j < n; j++)
        acc[j] = weight * v[j];
    else
      for (size_t j = 0; j < n; j++)
        acc[j] += weight * v[j];
  } else {
    const float *v = x;
    if (ip->first)
      for (size_t j = 0; j < n; j++)
        acc[j] = weight * (double)v[j];
    else
      for (size_t j = 0; j < n; j++)
        acc[j] += weight * (double)v[j];
  }
  ip->first = 0;
  return TYTO_OK;
}

static tyto_status ip_finish(coll *c, tyto_dtype dt, void *out) {
  in_process *ip = (in_process *)c;
  if (ip->first) /* no contribution at all: zeros */
    for (size_t j = 0; j < ip->n; j++)
      ip->acc[j] = 0;
  if (dt == TYTO_F64) {
    double *o = out;
    for (size_t j = 0; j < ip->n; j++)
      o[j] = ip->acc[j];
  } else {
    float *o = out;
    for (size_t j = 0; j < ip->n; j++)
      o[j] = (float)ip->acc[j];
  }
  return TYTO_OK;
}

static tyto_status ip_sum(coll *c, double *x) {
  (void)c;
  (void)x; /* one process: its own sum is the total */
  return TYTO_OK;
}

static void ip_free(coll *c) {
  in_process *ip = (in_process *)c;
  if (ip)
    free(ip->acc);
  free(ip);
}

static const coll_ops in_process_ops = {ip_begin, ip_add, ip_finish, ip_sum,
                                        ip_free};

coll *coll_in_process(size_t max_n) {
  in_process *ip = calloc(1, sizeof *ip);
  if (!ip || !(ip->acc = malloc((max_n ? max_n : 1) * sizeof *ip->acc))) {
    free(ip);
    return NULL;
  }
  ip->base.ops = &in_process_ops;
  ip->max_n = max_n;
  return &ip->base;
}
