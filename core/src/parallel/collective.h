/*
 * Collectives of data-parallel training (parallel/dp.c): the gradient
 * exchange as a weighted all-reduce over every replica of a run, behind
 * an interface with one implementation per transport:
 *
 * - in-process (collective.c, now): every replica is in this process;
 *   the host sums their contributions in double, in replica order;
 * - MPI (coll_mpi.c): each process sums its own replicas in order, as
 *   here, in double; the processes' partial sums, grouped into buckets,
 *   are added by MPI_Iallreduce in double while the backward pass goes on,
 *   and rounded once to the dtype (docs/distributed.md says what that
 *   order guarantees).
 *
 * A reduction: begin(item, n), then add() each local contribution in replica
 * order, then finish() into the caller's buffer, rounded once to the
 * dtype. The buffer holds the result after flush(), which ends every
 * reduction finished since the last flush (in process: at once).
 * sum() totals numbers over every participant (the examples the loss
 * averages over, for the weights; the loss).
 */
#ifndef TYTO_PARALLEL_COLLECTIVE_H
#define TYTO_PARALLEL_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>
#include <tyto/status.h>

typedef struct coll coll;

typedef struct coll_ops {
  /* Item `item` (its place in the exchange, the same on every rank) of
   * n elements. */
  tyto_status (*begin)(coll *c, size_t item, size_t n);
  /* Adds weight * x, x n elements of dtype dt (f32 or f64) in host
   * memory. */
  tyto_status (*add)(coll *c, const void *x, tyto_dtype dt, double weight);
  /* The total over every participant, into out (n elements of dt), by
   * the next flush(). */
  tyto_status (*finish)(coll *c, tyto_dtype dt, void *out);
  /* Ends every reduction finished since the last flush: their outputs
   * hold the totals. */
  tyto_status (*flush)(coll *c);
  /* Optional (NULL: not offered): a whole reduction at once, as begin(item,
   * n), add(xs[i], dt, ws[i]) for i < m in order and finish(dt, out)
   * would make it, with their bits, in one pass over memory (no
   * accumulator written and read back), written to each of the n_out
   * outputs (the recvs of the replicas whose memory is the host's). The
   * xs stay readable until it returns. */
  tyto_status (*reduce)(coll *c, size_t item, size_t n, const void *const *xs,
                        const double *ws, size_t m, tyto_dtype dt,
                        void *const *outs, size_t n_out);
  /* Lets reductions in flight move on, without waiting (MPI's progress
   * is made inside its calls); NULL: nothing to do. */
  tyto_status (*progress)(coll *c);
  /* x[0 .. n) becomes the sum of x over every participant. */
  tyto_status (*sum)(coll *c, double *x, size_t n);
  /* Since the last call: bytes sent to other processes, and seconds
   * spent waiting for them; both 0 in process. */
  void (*traffic)(coll *c, double *bytes, double *seconds);
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

/* The MPI collective over the run's ranks (dist.h), for n_local local
 * replicas (one: each contribution is used at once, straight into the
 * buffer that travels) and n_items reductions between flushes, item i of
 * item_n[i] elements: each rank's partial sums travel as `wire` (f32 or f64);
 * consecutive items are sent together in buckets of about bucket_bytes, in item
 * order, as soon as all of a bucket's items are finished; `step` points to the
 * step counter its messages name. NULL when out of memory (or built without
 * MPI). */
coll *coll_mpi(size_t n_local, size_t n_items, const size_t *item_n,
               tyto_dtype wire, size_t bucket_bytes, const int64_t *step);

#endif
