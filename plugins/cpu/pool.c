/*
 * The worker pool (see pool.h). threads - 1 workers are started once, each
 * bound to one core of the device's cpuset, and sleep on a condition
 * variable between jobs, so an idle pool takes no CPU time from OpenBLAS or
 * oneDNN. A job is a range [0, n) that the workers and the caller drain
 * through one atomic counter: whoever is free takes the next index, which
 * balances uneven work without any up-front split.
 *
 * Synchronisation: `call_mu` serialises whole jobs (calls from several
 * stream threads); `mu`/`wake`/`done` hand a job to the workers and wait
 * until every worker has left it, so the job's fn/ctx stay valid exactly
 * as long as anyone may still call them.
 */
#include "config.h"

#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "pool.h"

typedef struct pool_worker {
  cpu_pool *pool;
  pthread_t thread;
} pool_worker;

struct cpu_pool {
  unsigned threads;  /* the caller included */
  unsigned nworkers; /* started threads */
  pool_worker *workers;

  pthread_mutex_t call_mu; /* one job at a time */
  pthread_mutex_t mu;      /* guards everything below but `next` */
  pthread_cond_t wake;     /* a new job or quit */
  pthread_cond_t done;     /* the last worker left the job */
  uint64_t generation;     /* bumped per job */
  unsigned busy;           /* workers still inside the current job */
  int quit;
  void (*fn)(void *ctx, size_t i);
  void *ctx;
  size_t n;
  atomic_size_t next; /* next index to hand out */
};

/* Takes indices until none are left. */
static void drain(cpu_pool *p, void (*fn)(void *, size_t), void *ctx,
                  size_t n) {
  for (;;) {
    size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (i >= n)
      break;
    fn(ctx, i);
  }
}

uint64_t cpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int cpu_spin(int (*pred)(void *ctx), void *ctx, uint64_t ns) {
  uint64_t end = cpu_now_ns() + ns;
  do {
    if (pred(ctx))
      return 1;
    sched_yield();
  } while (cpu_now_ns() < end);
  return pred(ctx);
}

typedef struct gen_wait {
  cpu_pool *p;
  uint64_t seen;
} gen_wait;

/* Racy peeks, confirmed under the lock. */
static int new_job(void *ctx) {
  gen_wait *g = ctx;
  return __atomic_load_n(&g->p->generation, __ATOMIC_ACQUIRE) != g->seen ||
         __atomic_load_n(&g->p->quit, __ATOMIC_RELAXED);
}

static int all_left(void *ctx) {
  return __atomic_load_n(&((cpu_pool *)ctx)->busy, __ATOMIC_ACQUIRE) == 0;
}

void cpu_flush_subnormals(void) {
#if defined(__SSE2__)
  _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) and DAZ (bit 6) */
#endif
}

static void *worker_main(void *arg) {
  pool_worker *w = arg;
  cpu_flush_subnormals();
  cpu_pool *p = w->pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (!p->quit && p->generation == seen) {
      /* Jobs come in bursts (one per kernel of a program): poll a while
       * before sleeping, as a futex wake costs as much as a small job. */
      gen_wait g = {p, seen};
      pthread_mutex_unlock(&p->mu);
      cpu_spin(new_job, &g, CPU_SPIN_NS);
      pthread_mutex_lock(&p->mu);
    }
    while (!p->quit && p->generation == seen)
      pthread_cond_wait(&p->wake, &p->mu);
    if (p->quit)
      break;
    seen = p->generation;
    void (*fn)(void *, size_t) = p->fn;
    void *ctx = p->ctx;
    size_t n = p->n;
    pthread_mutex_unlock(&p->mu);
    drain(p, fn, ctx, n);
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->busy, p->busy - 1, __ATOMIC_RELEASE);
    if (p->busy == 0)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void cpu_pool_for(cpu_pool *pool, size_t n, void (*fn)(void *ctx, size_t i),
                  void *ctx) {
  if (n == 0)
    return;
  if (!pool || pool->nworkers == 0 || n == 1) {
    for (size_t i = 0; i < n; i++)
      fn(ctx, i);
    return;
  }
  pthread_mutex_lock(&pool->call_mu);
  pthread_mutex_lock(&pool->mu);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n = n;
  atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
  pool->busy = pool->nworkers;
  __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);

  drain(pool, fn, ctx, n);

  /* Every worker must have left the job before fn/ctx go out of scope and
   * before the next job resets the counter. */
  cpu_spin(all_left, pool, CPU_SPIN_NS);
  pthread_mutex_lock(&pool->mu);
  while (pool->busy > 0)
    pthread_cond_wait(&pool->done, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
  pthread_mutex_unlock(&pool->call_mu);
}

unsigned cpu_pool_size(const cpu_pool *pool) {
  return pool ? pool->threads : 1;
}

/* Binds each worker to one core of `cpuset` (the first PU of the core),
 * leaving the set's first core to the caller, which is a stream thread we
 * do not own. With more threads than cores, thread t (the caller is 0)
 * takes the (t / cores)-th PU of core t mod cores: every core's first PU,
 * then every core's second, and so on. Failure to bind is not an error:
 * the workers then float. */
static void bind_workers(cpu_pool *p, const char *cpuset) {
  if (!cpuset || !cpuset[0] || p->nworkers == 0)
    return;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return;
  hwloc_bitmap_t set = hwloc_bitmap_alloc(), one = hwloc_bitmap_alloc();
  if (hwloc_topology_load(topo) == 0 && set && one &&
      hwloc_bitmap_list_sscanf(set, cpuset) == 0 && !hwloc_bitmap_iszero(set)) {
    int ncores =
        hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
    int npus = hwloc_bitmap_weight(set);
    for (unsigned w = 0; w < p->nworkers; w++) {
      unsigned ci = ncores > 1 ? (w + 1) % (unsigned)ncores : 0;
      hwloc_obj_t core = ncores > 1 ? hwloc_get_obj_inside_cpuset_by_type(
                                          topo, set, HWLOC_OBJ_CORE, ci)
                                    : NULL;
      if (core && core->cpuset) {
        /* The (t / ncores)-th PU of the core, in turn over its PUs. */
        hwloc_bitmap_and(one, core->cpuset, set);
        int in_core = hwloc_bitmap_weight(one);
        int k = in_core > 0
                    ? (int)(((w + 1) / (unsigned)ncores) % (unsigned)in_core)
                    : 0,
            id = hwloc_bitmap_first(one);
        while (k-- > 0 && id >= 0)
          id = hwloc_bitmap_next(one, id);
        if (id < 0)
          continue;
        hwloc_bitmap_only(one, (unsigned)id);
      } else if (npus > 0) {
        /* The k-th PU of the set, k = (w + 1) mod npus. */
        int k = (int)((w + 1) % (unsigned)npus), id = hwloc_bitmap_first(set);
        while (k-- > 0 && id >= 0)
          id = hwloc_bitmap_next(set, id);
        if (id < 0)
          continue;
        hwloc_bitmap_only(one, (unsigned)id);
      } else {
        continue;
      }
      (void)hwloc_set_thread_cpubind(topo, p->workers[w].thread, one,
                                     HWLOC_CPUBIND_THREAD);
    }
  }
  hwloc_bitmap_free(one);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
}

cpu_pool *cpu_pool_new(unsigned threads, const char *cpuset) {
  cpu_pool *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  if (threads == 0)
    threads = 1;
  p->threads = threads;
  atomic_init(&p->next, 0);
  if (pthread_mutex_init(&p->call_mu, NULL) != 0) {
    free(p);
    return NULL;
  }
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    pthread_mutex_destroy(&p->call_mu);
    free(p);
    return NULL;
  }
  if (pthread_cond_init(&p->wake, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call_mu);
    free(p);
    return NULL;
  }
  if (pthread_cond_init(&p->done, NULL) != 0) {
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call_mu);
    free(p);
    return NULL;
  }
  if (threads > 1) {
    p->workers = calloc(threads - 1, sizeof *p->workers);
    if (!p->workers) {
      cpu_pool_free(p);
      return NULL;
    }
    for (unsigned i = 0; i + 1 < threads; i++) {
      p->workers[i].pool = p;
      if (pthread_create(&p->workers[i].thread, NULL, worker_main,
                         &p->workers[i]) != 0)
        break; /* run with the workers we got */
      p->nworkers++;
    }
    p->threads = p->nworkers + 1;
    bind_workers(p, cpuset);
  }
  return p;
}

void cpu_pool_free(cpu_pool *pool) {
  if (!pool)
    return;
  pthread_mutex_lock(&pool->mu);
  __atomic_store_n(&pool->quit, 1, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  for (unsigned i = 0; i < pool->nworkers; i++)
    pthread_join(pool->workers[i].thread, NULL);
  free(pool->workers);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->mu);
  pthread_mutex_destroy(&pool->call_mu);
  free(pool);
}
