/*
 * The worker pool. This first version runs every task on the calling
 * thread; the threaded, core-bound pool replaces it with the elementwise
 * kernels (see pool.h for the contract both keep).
 */
#include "config.h"

#include <stdlib.h>

#include "pool.h"

struct cpu_pool {
  unsigned threads;
};

void cpu_pool_for(cpu_pool *pool, size_t n, void (*fn)(void *ctx, size_t i),
                  void *ctx) {
  (void)pool;
  for (size_t i = 0; i < n; i++)
    fn(ctx, i);
}

unsigned cpu_pool_size(const cpu_pool *pool) {
  return pool ? pool->threads : 1;
}

cpu_pool *cpu_pool_new(unsigned threads, const char *cpuset) {
  (void)cpuset;
  cpu_pool *p = calloc(1, sizeof *p);
  if (p)
    p->threads = 1;
  (void)threads;
  return p;
}

void cpu_pool_free(cpu_pool *pool) {
  free(pool);
}
