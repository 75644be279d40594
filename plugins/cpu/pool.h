/*
 * The CPU plugin's worker pool: a fixed set of threads bound to the cores
 * hwloc reports, reused by every kernel (no thread per op). One pool per
 * opened device; the stream worker that runs a kernel hands parallel work
 * to it and takes part itself.
 */
#ifndef TYTO_PLUGIN_CPU_POOL_H
#define TYTO_PLUGIN_CPU_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* Spinning before sleeping. Handing work to a sleeping thread costs a
 * futex wake and a reschedule, 20-50 us on a virtual machine, as long as a
 * whole small kernel: so a thread that runs out of work (a pool worker, a
 * stream's worker, a caller waiting for either) first polls for more for
 * CPU_SPIN_NS, yielding the core at every poll, and only then sleeps. On
 * 2 cores this took an MLP training step from 410 to 250 us. */
#define CPU_SPIN_NS 200000
uint64_t cpu_now_ns(void);

/* Makes the calling thread flush subnormal floats to zero (FTZ and DAZ on
 * x86; nothing elsewhere). Every thread that runs kernels calls it first:
 * an optimiser's second moments decay towards the subnormal range late in
 * training, where each operation costs a hundred times more (a CNN's steps
 * took 20% longer by the end of its first epoch), and deep-learning
 * results do not depend on values below 1e-38. */
void cpu_flush_subnormals(void);
/* Yields the core until pred(ctx) holds or ns nanoseconds pass; returns
 * whether it held. Call without locks held. */
int cpu_spin(int (*pred)(void *ctx), void *ctx, uint64_t ns);

/* Runs fn(ctx, i) for every i in [0, n), spread over the pool's threads and
 * the caller; returns when all are done. Calls from different threads are
 * serialised. fn must not call cpu_pool_for itself. */
void cpu_pool_for(cpu_pool *pool, size_t n, void (*fn)(void *ctx, size_t i),
                  void *ctx);

/* Threads that take part in cpu_pool_for (the caller included). */
unsigned cpu_pool_size(const cpu_pool *pool);

/* Creates a pool of `threads` workers (the caller counts as one, so
 * threads - 1 are started), bound to the CPUs of `cpuset` (hwloc list
 * syntax; NULL or "" for no binding). Returns NULL when out of memory. */
cpu_pool *cpu_pool_new(unsigned threads, const char *cpuset);
void cpu_pool_free(cpu_pool *pool);

#endif
