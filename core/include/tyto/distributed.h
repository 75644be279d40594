/*
 * The processes of a run (docs/distributed.md). A program started by an
 * MPI launcher (mpirun, mpiexec, Slurm's srun) is one rank of several;
 * tyto_dist_init joins them, and data-parallel training (<tyto/
 * parallel.h>) then splits each global batch over every rank's devices
 * and combines the gradients across the ranks over MPI. A program
 * started without a launcher, or a tyto built without MPI, is one rank
 * of one and runs unchanged.
 *
 * Every call that waits for the other ranks gives up after a timeout
 * (tyto_dist_set_timeout; default 60 s, or TYTO_DIST_TIMEOUT seconds):
 * a rank that died or hangs makes the others fail with an error that
 * names it, never hang. After such an error the run's processes cannot
 * talk to each other any more: stop (tyto_dist_abort stops every rank).
 *
 * MPI is called from the thread that called tyto_dist_init only (the
 * data-parallel step's calling thread must be that thread).
 */
#ifndef TYTO_DISTRIBUTED_H
#define TYTO_DISTRIBUTED_H

#include <stddef.h>

#include <tyto/status.h>
#include <tyto/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the run's ranks. Under a launcher that started several processes
 * (its environment: Open MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE,
 * Slurm's SLURM_STEP_NUM_TASKS, or PMIx's PMIX_RANK), initialises MPI
 * (unless the program did already: then tyto works on its own duplicate
 * of MPI_COMM_WORLD and leaves MPI to the program) and checks that every
 * rank runs the same tyto; argc and argv may be NULL. Without a launcher,
 * or one that started this process alone, one rank and no MPI. Calling it
 * again does nothing. Errors: TYTO_DIST_TIMEOUT set to something that
 * is not a number of seconds > 0; started by a launcher as one of several
 * ranks by a tyto built without MPI; MPI failing to start; ranks running
 * different tyto versions (named). */
TYTO_API tyto_status tyto_dist_init(int *argc, char ***argv);

/* Leaves the run: finalises MPI if tyto_dist_init started it. Every rank
 * must call it (MPI_Finalize waits for the others). Back to one rank. */
TYTO_API tyto_status tyto_dist_finalize(void);

/* This process's rank (0 .. size - 1) and the number of ranks; 0 and 1
 * before tyto_dist_init or without a launcher. */
TYTO_API int tyto_dist_rank(void);
TYTO_API int tyto_dist_size(void);

/* "mpi" when the ranks talk through MPI, "none" for one rank. */
TYTO_API const char *tyto_dist_transport(void);

/* The MPI library tyto was built with, as it names itself ("Open MPI
 * v4.1.4, ..."; its first line), whether or not the ranks were joined;
 * NULL for a tyto built without MPI. Static storage. */
TYTO_API const char *tyto_dist_library(void);

/* How long a wait for the other ranks may take before it fails naming
 * the ranks that did not come, in seconds (> 0); the default is 60 or
 * TYTO_DIST_TIMEOUT's value. Returns the previous value, or -1 (and no
 * change) for a value that is not positive and finite. */
TYTO_API double tyto_dist_set_timeout(double seconds);
TYTO_API double tyto_dist_timeout(void);

/* Passes on a signal that asked this process to stop (SIGINT, SIGTERM;
 * 0 takes it back): every wait for the other ranks, pending or to come,
 * then gives up a sixth of its timeout after it saw the signal (at least
 * 10 s: 10 s with the default timeout), when the ranks it waits for have
 * not come by then, with an error naming them and the signal, instead of
 * waiting out the whole timeout. A launcher that ends a run (Slurm when a
 * rank died, scancel) signals every rank, and the healthy ones get
 * through the current step within that time; a rank left waiting for a
 * dead one stops and says why, before the launcher's SIGKILL when the
 * grace is shorter than the launcher's wait (Slurm's KillWait, 30 s by
 * default). Safe from any thread and from a signal handler. */
TYTO_API void tyto_dist_interrupt(int sig);

/* Checks that every rank passes the same `bytes` bytes of data (a
 * configuration, a model's description): returns TYTO_OK on every rank,
 * or TYTO_ERR_CONFIG on every rank with a message naming `what` and the
 * first rank whose data differs from rank 0's. One rank: TYTO_OK. */
TYTO_API tyto_status tyto_dist_agree(const char *what, const void *data,
                                     size_t bytes);

/* x[0 .. n) becomes the sum of x over every rank, added in double by MPI
 * (every rank gets the same bits), with the timeout. One rank: x stays. */
TYTO_API tyto_status tyto_dist_sum(double *x, size_t n);

/* Waits until every rank has called it (with the timeout). */
TYTO_API tyto_status tyto_dist_barrier(void);

/* Ends every rank of the run with exit status `code` (MPI_Abort); one
 * rank: exit(code). Does not return. For a rank that cannot go on (a
 * failed step, a lost rank) so that the others stop at once instead of
 * waiting for it. */
TYTO_API void tyto_dist_abort(int code);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_DISTRIBUTED_H */
