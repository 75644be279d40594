/*
 * The in-process collective (collective.h): one accumulator in double;
 * contributions are added in the order they come, which dp.c makes the
 * replicas' order, so the sum does not depend on which replica finished
 * first. When every contribution is at hand (the streamed exchange),
 * reduce() makes the same sums block by block in a buffer that stays in
 * L1, reading each contribution and writing the result once: a third of
 * the memory traffic of add() and finish() (with the seed CNN's 6.5M
 * gradients over two devices, the exchange went from 30 to 22 ms of host
 * work a step on a 2-core Zen 4). Large reductions are
 * split over threads by element: each element still sees the same additions in
 * the same order, so the bits do not depend on the thread count either.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "collective.h"
#include "../runtime/error.h"

/* Elements per thread below which one thread does it all (a thread costs
 * tens of microseconds; 64 Ki doubles take about as long). */
#define MIN_PER_THREAD ((size_t)1 << 16)
#define MAX_THREADS 8

typedef struct coll_kern coll_kern;

typedef struct in_process {
  coll base;
  double *acc;
  size_t n, max_n;
  int first;   /* no contribution yet: the next one is stored, not added */
  int threads; /* the most a reduction is split over */
  const coll_kern *k;
} in_process;

enum { ADD, FINISH, REDUCE };

/* One thread's share of a pass over elements [lo, hi). */
typedef struct span {
  in_process *ip;
  int kind, first;
  const void *x;
  void *out;
  tyto_dtype dt;
  double w;
  size_t lo, hi;
  /* REDUCE: m contributions and their weights, n_out outputs. */
  const void *const *xs;
  const double *ws;
  size_t m;
  void *const *outs;
  size_t n_out;
} span;

/* Elements per block of REDUCE: its partial sums stay in L1. */
#define REDUCE_BLOCK 1024

/* The loops, one version per instruction set (collective_kern.h). */
struct coll_kern {
  void (*fold)(double *restrict acc, const void *x, size_t off, tyto_dtype dt,
               double w, int first, size_t n);
  void (*round_out)(void *out, size_t off, const double *restrict acc,
                    tyto_dtype dt, int empty, size_t n);
  /* round_out with stores that bypass the caches, for the outputs of
   * large reductions: they are read only in the next phase, long after,
   * and a cached store would first read every line it writes (a third of
   * the exchange's memory traffic). The same bits; an _mm_sfence() ends
   * the reduction. round_out itself where there are no such stores. */
  void (*round_out_nt)(void *out, size_t off, const double *restrict acc,
                       tyto_dtype dt, int empty, size_t n);
};

/* Elements of a thread's share of REDUCE from which its outputs bypass
 * the caches (256 KiB of f32: more than a core's L2 keeps for long). */
#define NT_MIN ((size_t)1 << 16)

/* Vectorised: GCC's -O2 leaves these loops scalar (with the seed CNN's
 * 6.5M gradients over two devices they were a third of the exchange's
 * host time). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COLL_X86 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")
#endif

/* Non-temporal f32 stores of COLL_NT_W elements rounded from doubles, to
 * COLL_NT_ALIGN-byte aligned addresses. */
#ifdef COLL_X86
#define COLL_NT_W 4
#define COLL_NT_ALIGN 16
#define COLL_NT_STORE(o, a)                                                    \
  _mm_stream_ps(o, _mm_movelh_ps(_mm_cvtpd_ps(_mm_loadu_pd(a)),                \
                                 _mm_cvtpd_ps(_mm_loadu_pd((a) + 2))))
#endif
#define COLL_SUF sse2
#include "collective_kern.h"
#undef COLL_SUF

#ifdef COLL_X86
#pragma GCC push_options
#pragma GCC target("avx2")
#define COLL_NT_W 8
#define COLL_NT_ALIGN 32
#define COLL_NT_STORE(o, a)                                                    \
  _mm256_stream_ps(                                                            \
      o, _mm256_insertf128_ps(                                                 \
             _mm256_castps128_ps256(_mm256_cvtpd_ps(_mm256_loadu_pd(a))),      \
             _mm256_cvtpd_ps(_mm256_loadu_pd((a) + 4)), 1))
#define COLL_SUF avx2
#include "collective_kern.h"
#undef COLL_SUF
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2", "prefer-vector-width=512")
#define COLL_NT_W 8
#define COLL_NT_ALIGN 32
#define COLL_NT_STORE(o, a)                                                    \
  _mm256_stream_ps(o, _mm512_cvtpd_ps(_mm512_loadu_pd(a)))
#define COLL_SUF avx512
#include "collective_kern.h"
#undef COLL_SUF
#pragma GCC pop_options
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

static const coll_kern *kern_pick(void) {
#ifdef COLL_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
    return &kern_avx512;
  if (__builtin_cpu_supports("avx2"))
    return &kern_avx2;
#endif
  return &kern_sse2;
}

/* One thread's share [lo, hi) of a pass. REDUCE goes block by block:
 * the first contribution stored and the others added in order into a
 * block of doubles, then rounded out, per element the operations ADD and
 * FINISH make, in their order. */
static void run_span(const span *s) {
  const coll_kern *k = s->ip->k;
  size_t lo = s->lo, hi = s->hi;
  if (s->kind == REDUCE) {
    int nt = hi - lo >= NT_MIN;
    double acc[REDUCE_BLOCK];
    for (size_t b = lo; b < hi; b += REDUCE_BLOCK) {
      size_t e = hi - b < REDUCE_BLOCK ? hi - b : REDUCE_BLOCK;
      for (size_t i = 0; i < s->m; i++)
        k->fold(acc, s->xs[i], b, s->dt, s->ws[i], i == 0, e);
      for (size_t o = 0; o < s->n_out; o++)
        (nt ? k->round_out_nt : k->round_out)(s->outs[o], b, acc, s->dt,
                                              s->m == 0, e);
    }
#ifdef COLL_X86
    if (nt)
      _mm_sfence(); /* the streamed stores before whatever reads them */
#endif
  } else if (s->kind == FINISH) {
    k->round_out(s->out, lo, s->ip->acc + lo, s->dt, s->first, hi - lo);
  } else {
    k->fold(s->ip->acc + lo, s->x, lo, s->dt, s->w, s->first, hi - lo);
  }
}

static void *span_thread(void *arg) {
  run_span(arg);
  return NULL;
}

/* The pass of `base` over every element, split over up to ip->threads
 * threads (this one included); a thread that cannot start leaves its
 * share to this one. */
static void run_all(in_process *ip, const span *base) {
  size_t n = ip->n;
  int t = ip->threads;
  if ((size_t)t > n / MIN_PER_THREAD)
    t = (int)(n / MIN_PER_THREAD);
  if (t <= 1) {
    span s = *base;
    s.lo = 0;
    s.hi = n;
    run_span(&s);
    return;
  }
  span s[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  size_t chunk = (n + (size_t)t - 1) / (size_t)t;
  for (int i = 0; i < t; i++) {
    s[i] = *base;
    s[i].lo = (size_t)i * chunk;
    s[i].hi = s[i].lo + chunk < n ? s[i].lo + chunk : n;
    if (i > 0)
      started[i] = pthread_create(&th[i], NULL, span_thread, &s[i]) == 0;
  }
  for (int i = 0; i < t; i++)
    if (!started[i])
      run_span(&s[i]); /* the first share, and any whose thread failed */
  for (int i = 1; i < t; i++)
    if (started[i])
      pthread_join(th[i], NULL);
}

static tyto_status ip_begin(coll *c, size_t item, size_t n) {
  in_process *ip = (in_process *)c;
  (void)item;
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
  span s = {
      .ip = ip, .kind = ADD, .first = ip->first, .x = x, .dt = dt, .w = weight};
  run_all(ip, &s);
  ip->first = 0;
  return TYTO_OK;
}

static tyto_status ip_finish(coll *c, tyto_dtype dt, void *out) {
  in_process *ip = (in_process *)c;
  span s = {.ip = ip, .kind = FINISH, .first = ip->first, .out = out, .dt = dt};
  run_all(ip, &s);
  return TYTO_OK;
}

static tyto_status ip_reduce(coll *c, size_t item, size_t n,
                             const void *const *xs, const double *ws, size_t m,
                             tyto_dtype dt, void *const *outs, size_t n_out) {
  in_process *ip = (in_process *)c;
  (void)item;
  ip->n = n; /* no accumulator: any n */
  span s = {.ip = ip,
            .kind = REDUCE,
            .dt = dt,
            .xs = xs,
            .ws = ws,
            .m = m,
            .outs = outs,
            .n_out = n_out};
  run_all(ip, &s);
  return TYTO_OK;
}

static tyto_status ip_flush(coll *c) {
  (void)c; /* finish wrote the totals */
  return TYTO_OK;
}

static tyto_status ip_sum(coll *c, double *x, size_t n) {
  (void)c;
  (void)x; /* one process: its own sum is the total */
  (void)n;
  return TYTO_OK;
}

static void ip_traffic(coll *c, double *bytes, double *seconds) {
  (void)c;
  *bytes = *seconds = 0;
}

static void ip_free(coll *c) {
  in_process *ip = (in_process *)c;
  if (ip)
    free(ip->acc);
  free(ip);
}

static const coll_ops in_process_ops = {.begin = ip_begin,
                                        .add = ip_add,
                                        .finish = ip_finish,
                                        .flush = ip_flush,
                                        .reduce = ip_reduce,
                                        .progress = NULL,
                                        .sum = ip_sum,
                                        .traffic = ip_traffic,
                                        .free = ip_free};

coll *coll_in_process_threads(size_t max_n, int threads) {
  in_process *ip = calloc(1, sizeof *ip);
  if (!ip || !(ip->acc = malloc((max_n ? max_n : 1) * sizeof *ip->acc))) {
    free(ip);
    return NULL;
  }
  ip->base.ops = &in_process_ops;
  ip->max_n = max_n;
  ip->k = kern_pick();
  ip->threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
  return &ip->base;
}

coll *coll_in_process(size_t max_n) {
  /* Half the online CPUs: the devices' own host threads (the CPU
   * plugin's pool, PoCL, the GPU drivers' submission) keep the rest. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return coll_in_process_threads(max_n, cpus > 1 ? (int)(cpus / 2) : 1);
}
