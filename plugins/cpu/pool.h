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
