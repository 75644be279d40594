/*
 * Collectives of data-parallel training (parallel/dp.c): the gradient
 * exchange as a weighted all-reduce over every replica of a run, behind
 * an interface with one implementation per transport:
 *
 * - in-process (collective.c, now): every replica is in this process;
 *   the host sums their contributions in double, in replica order;
 * - MPI (issue 17): each process sums its own replicas in order, as here,
 *   then the processes' partial sums are combined in rank order (gathered
 *   and summed identically at every rank, not by the MPI library's
 *   reduction tree), so that every rank holds the same bits whatever the
 *   timing and the library.
 *
 * A reduction: begin(n), then add() each local contribution in replica
 * order, then finish() into the caller's buffer, rounded once to the
 * dtype. sum() totals one number over every participant (the examples
 * the loss averages over, for the weights).
 */
#ifndef TYTO_PARALLEL_COLLECTIVE_H
#define TYTO_PARALLEL_COLLECTIVE_H

#include <stddef.h>

#include <tyto/graph.h>
#include <tyto/status.h>

typedef struct coll coll;

typedef struct coll_ops {
  tyto_status (*begin)(coll *c, size_t n);
  /* Adds weight * x, x n elements of dtype dt (f32 or f64) in host
   * memory. */
  tyto_status (*add)(coll *c, const void *x, tyto_dtype dt, double weight);
  /* The total over every participant, into out (n elements of dt). */
  tyto_status (*finish)(coll *c, tyto_dtype dt, void *out);
  /* *x becomes the sum of *x over every participant. */
  tyto_status (*sum)(coll *c, double *x);
  void (*free)(coll *c);
} coll_ops;

struct coll {
  const coll_ops *ops;
};

/* The in-process collective, for reductions of at most max_n elements,
 * each split over up to half the online CPUs (at most 8) when large;
 * NULL when out of memory. coll_in_process_threads sets the thread count
 * (1 to 8). The bits do not depend on it. */
coll *coll_in_process(size_t max_n);
coll *coll_in_process_threads(size_t max_n, int threads);

#endif
