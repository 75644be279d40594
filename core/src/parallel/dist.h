/*
 * The run's processes (<tyto/distributed.h>), as the data-parallel layer
 * and its MPI collective (coll_mpi.c) use them. Every wait on the other
 * ranks goes through dist_wait, which gives up after the run's timeout
 * and names the ranks that never reached the wait: each rank announces
 * every collective it starts (dist_announce) to every other rank with a
 * small message, so that a rank stuck before a collective, or dead, is
 * known by the count it announced last.
 */
#ifndef TYTO_PARALLEL_DIST_H
#define TYTO_PARALLEL_DIST_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/distributed.h>

#ifdef TYTO_HAVE_MPI
#include <mpi.h>

/* tyto's own communicator (a duplicate of MPI_COMM_WORLD). */
MPI_Comm dist_comm(void);

/* Announces that this rank starts its next collective, and returns that
 * collective's number (1, 2, ...). */
int64_t dist_announce(void);

/* Waits for n requests, the collective `what` numbered seq (from
 * dist_announce), with the run's timeout; on timeout or an MPI error the
 * run is broken: this and every later call fail, naming the ranks that
 * did not reach collective seq. */
tyto_status dist_wait(MPI_Request *rq, int n, int64_t seq, const char *what);

/* Whether n requests are done (1), without waiting; -1 on an MPI error
 * (raised as dist_wait would). */
int dist_test(MPI_Request *rq, int n, const char *what);

/* MPI call `what` failed with rc: the run is broken (as after a timeout);
 * raises "rank R: what: MPI's message". */
tyto_status dist_fail(int rc, const char *what);
#endif

/* Whether the run's ranks can still talk (no wait has failed): TYTO_OK,
 * or the failure that broke them, raised again. */
tyto_status dist_usable(void);

/* x[0 .. n) becomes the sum of x over every rank, in double (each rank
 * gets the same bits); `what` names it in errors. One rank: unchanged. */
tyto_status dist_sum(double *x, size_t n, const char *what);

/* Checks that every rank has the same n values; names[i] names value i
 * in the error, which says `what`, the first rank that differs from rank
 * 0 and both values (names starting with '#' are hashes: "differs"). */
tyto_status dist_agree_values(const char *what, size_t n,
                              const char *const *names, const int64_t *vals);

/* FNV-1a, 64 bits, of bytes, continuing from h (start at DIST_FNV0). */
#define DIST_FNV0 UINT64_C(14695981039346656037)
uint64_t dist_hash(uint64_t h, const void *data, size_t bytes);

#endif
