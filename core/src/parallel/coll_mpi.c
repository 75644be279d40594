/*
 * The MPI collective (collective.h): the hierarchical exchange of a
 * data-parallel step over several processes.
 *
 * Inside the process, each reduction is summed over the local replicas
 * in their order by the in-process collective, in double, and rounded
 * once to the wire dtype into a staging buffer: the model's dtype, or
 * double (tyto_dp_options.exact_exchange). Once a bucket's worth of
 * elements is staged (bucket_bytes), the bucket goes to MPI_Iallreduce
 * (MPI_SUM) in calls of CALL_BYTES, a few in flight at a time, while the
 * next reductions go on: the data-parallel step finishes each gradient as
 * soon as the backward pass has made it on every local device, so the
 * buckets travel while the backward pass computes the next gradients
 * (progress() keeps MPI moving while the step waits for its devices).
 * flush() waits for every call, each wait bounded by the run's timeout
 * (dist.h), and writes every total in its dtype.
 *
 * Order: MPI adds the ranks' partial sums in an order of its own. In
 * double, rounded once to f32 after, the bits are those of one process
 * over the same devices except where the double sums differ in their
 * last bits near an f32 rounding boundary (for two ranks, a + b is b + a:
 * always the same bits). In f32, each rank's partial sum is rounded
 * before the ranks' are added: within a rounding or two of that.
 * docs/distributed.md says more.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective.h"
#include "dist.h"
#include "../runtime/error.h"

#ifdef TYTO_HAVE_MPI

/* Elements per MPI call: a bucket goes out in calls of at most this many
 * bytes, at most IN_FLIGHT of them at once, the next posted as one
 * completes (inside progress() and flush()), so that a large bucket
 * moves while the backward pass goes on instead of being posted whole. */
#define CALL_BYTES ((size_t)4 << 20)
#define IN_FLIGHT 2

typedef struct call {
  size_t off, n;
  MPI_Request rq;
  int64_t seq;
} call;

typedef struct mpi_coll {
  coll base;
  coll *local;
  tyto_dtype wire; /* what travels: f32 or f64 */
  size_t es;       /* its size */
  MPI_Datatype mpi_dt;
  size_t n_items, n_buckets, bucket_n;
  size_t item, n; /* the reduction begun: its item and size */
  /* One local replica: its contribution goes straight to the stage,
   * without the accumulator (the same bits: w * x in double, rounded
   * once). */
  int single, n_added;
  size_t *item_n;   /* per item (canonical order): elements */
  size_t *item_off; /* its offset in stage */
  size_t *item_bk;  /* its bucket */
  void **item_out;  /* where finish() asked for its total, or NULL */
  tyto_dtype *item_dt;
  size_t *bk_first; /* per bucket: its first item (n_buckets + 1) */
  size_t *bk_left;  /* items not finished yet */
  char *stage;      /* every item's partial sums, then totals (wire) */
  size_t next_bk;   /* the next bucket to queue (buckets go in order) */
  call *calls;      /* queued; [done, posted) in flight */
  size_t n_calls, cap_calls, posted, done;
  const int64_t *step;
  double bytes, seconds;
} mpi_coll;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void what_of(const mpi_coll *m, char *buf, size_t n) {
  snprintf(buf, n, "step %lld's gradient exchange",
           (long long)(m->step ? *m->step + 1 : 0));
}

/* Posts queued calls while fewer than IN_FLIGHT are in flight. */
static tyto_status pump(mpi_coll *m) {
  while (m->posted < m->n_calls && m->posted - m->done < IN_FLIGHT) {
    tyto_status st = dist_usable();
    if (st != TYTO_OK)
      return st;
    call *c = &m->calls[m->posted];
    c->seq = dist_announce();
    int rc = MPI_Iallreduce(MPI_IN_PLACE, m->stage + c->off * m->es, (int)c->n,
                            m->mpi_dt, MPI_SUM, dist_comm(), &c->rq);
    if (rc != MPI_SUCCESS) {
      char w[96];
      what_of(m, w, sizeof w);
      return dist_fail(rc, w);
    }
    m->posted++;
    m->bytes += (double)(c->n * m->es);
  }
  return TYTO_OK;
}

/* Queues bucket b's calls. */
static tyto_status queue_bucket(mpi_coll *m, size_t b) {
  size_t lo = m->item_off[m->bk_first[b]];
  size_t hi = m->item_off[m->bk_first[b + 1]];
  size_t per = CALL_BYTES / m->es;
  for (size_t at = lo; at < hi; at += per) {
    if (m->n_calls == m->cap_calls) {
      size_t cap = m->cap_calls ? 2 * m->cap_calls : 32;
      call *c = realloc(m->calls, cap * sizeof *c);
      if (!c)
        return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "dp: out of memory");
      m->calls = c;
      m->cap_calls = cap;
    }
    m->calls[m->n_calls++] =
        (call){.off = at, .n = hi - at < per ? hi - at : per};
  }
  return TYTO_OK;
}

/* Queues every bucket that is whole, in bucket order (every rank makes
 * the same calls in the same order, whatever order its devices finish
 * the gradients in), and posts what may be. */
static tyto_status queue_ready(mpi_coll *m) {
  tyto_status st = TYTO_OK;
  while (st == TYTO_OK && m->next_bk < m->n_buckets &&
         m->bk_left[m->next_bk] == 0)
    st = queue_bucket(m, m->next_bk++);
  return st == TYTO_OK ? pump(m) : st;
}

static tyto_status mc_begin(coll *c, size_t item, size_t n) {
  mpi_coll *m = (mpi_coll *)c;
  if (item >= m->n_items || n != m->item_n[item] || m->item_out[item])
    return rt_fail(TYTO_ERR_INTERNAL,
                   "dp: exchange item %zu of %zu (%zu elements) begun "
                   "twice or with the wrong size",
                   item, m->n_items, n);
  m->item = item;
  m->n = n;
  m->n_added = 0;
  return m->local->ops->begin(m->local, 0, n);
}

/* The one local contribution, w * x in double, rounded once to the wire
 * into dst, as the accumulator would give it. */
static void stage_one(mpi_coll *m, void *dst, const void *x, tyto_dtype dt,
                      double w) {
  size_t n = m->n;
  if (m->wire == TYTO_F64) {
    double *o = dst;
    if (dt == TYTO_F64)
      for (size_t j = 0; j < n; j++)
        o[j] = w * ((const double *)x)[j];
    else
      for (size_t j = 0; j < n; j++)
        o[j] = w * (double)((const float *)x)[j];
  } else {
    float *o = dst;
    if (dt == TYTO_F64)
      for (size_t j = 0; j < n; j++)
        o[j] = (float)(w * ((const double *)x)[j]);
    else
      for (size_t j = 0; j < n; j++)
        o[j] = (float)(w * (double)((const float *)x)[j]);
  }
}

static tyto_status mc_add(coll *c, const void *x, tyto_dtype dt,
                          double weight) {
  mpi_coll *m = (mpi_coll *)c;
  if (m->single && m->n_added == 0) {
    /* Used now: the caller may reuse x's memory for the next. */
    stage_one(m, m->stage + m->item_off[m->item] * m->es, x, dt, weight);
    m->n_added++;
    return TYTO_OK;
  }
  if (m->single)
    return rt_fail(TYTO_ERR_INTERNAL,
                   "dp: a second contribution to an exchange built for "
                   "one local replica");
  m->n_added++;
  return m->local->ops->add(m->local, x, dt, weight);
}

static tyto_status mc_finish(coll *c, tyto_dtype dt, void *out) {
  mpi_coll *m = (mpi_coll *)c;
  size_t it = m->item;
  /* The local sum, rounded once to what travels. */
  void *dst = m->stage + m->item_off[it] * m->es;
  tyto_status st = TYTO_OK;
  if (!m->single)
    st = m->local->ops->finish(m->local, m->wire, dst);
  else if (m->n_added == 0) /* its replica counted nothing: all padding */
    memset(dst, 0, m->n * m->es);
  if (st != TYTO_OK)
    return st;
  m->item_out[it] = out;
  m->item_dt[it] = dt;
  m->bk_left[m->item_bk[it]]--;
  return queue_ready(m);
}

static tyto_status mc_progress(coll *c) {
  mpi_coll *m = (mpi_coll *)c;
  char w[96];
  while (m->done < m->posted) {
    what_of(m, w, sizeof w);
    int d = dist_test(&m->calls[m->done].rq, 1, w);
    if (d < 0)
      return TYTO_ERR_UNAVAILABLE;
    if (!d)
      break;
    m->done++;
    tyto_status st = pump(m);
    if (st != TYTO_OK)
      return st;
  }
  return TYTO_OK;
}

/* Back to no item finished. */
static void reset(mpi_coll *m) {
  for (size_t b = 0; b < m->n_buckets; b++)
    m->bk_left[b] = m->bk_first[b + 1] - m->bk_first[b];
  memset(m->item_out, 0, m->n_items * sizeof *m->item_out);
  m->next_bk = 0;
  m->n_calls = m->posted = m->done = 0;
}

static tyto_status mc_flush(coll *c) {
  mpi_coll *m = (mpi_coll *)c;
  tyto_status st = TYTO_OK;
  if (m->next_bk < m->n_buckets)
    st = rt_fail(TYTO_ERR_INTERNAL,
                 "dp: the exchange ended with bucket %zu of %zu unsent",
                 m->next_bk + 1, m->n_buckets);
  char w[96];
  what_of(m, w, sizeof w);
  double t0 = now();
  while (st == TYTO_OK && m->done < m->n_calls) {
    st = pump(m);
    if (st == TYTO_OK)
      st = dist_wait(&m->calls[m->done].rq, 1, m->calls[m->done].seq, w);
    if (st == TYTO_OK)
      m->done++;
  }
  m->seconds += now() - t0;
  for (size_t i = 0; i < m->n_items && st == TYTO_OK; i++) {
    const char *v = m->stage + m->item_off[i] * m->es;
    size_t n = m->item_n[i];
    if (m->item_dt[i] == m->wire) {
      memcpy(m->item_out[i], v, n * m->es);
    } else { /* f64 on the wire, an f32 model */
      const double *d = (const double *)(const void *)v;
      float *o = m->item_out[i];
      for (size_t j = 0; j < n; j++)
        o[j] = (float)d[j];
    }
  }
  reset(m);
  return st;
}

static tyto_status mc_sum(coll *c, double *x, size_t n) {
  mpi_coll *m = (mpi_coll *)c;
  char w[96];
  snprintf(w, sizeof w, "step %lld's sums (weights, losses, statistics)",
           (long long)(m->step ? *m->step + 1 : 0));
  double t0 = now();
  tyto_status st = dist_sum(x, n, w);
  m->seconds += now() - t0;
  m->bytes += (double)n * sizeof *x;
  return st;
}

static void mc_traffic(coll *c, double *bytes, double *seconds) {
  mpi_coll *m = (mpi_coll *)c;
  *bytes = m->bytes;
  *seconds = m->seconds;
  m->bytes = m->seconds = 0;
}

static void mc_free(coll *c) {
  mpi_coll *m = (mpi_coll *)c;
  if (!m)
    return;
  if (m->local)
    m->local->ops->free(m->local);
  free(m->item_n);
  free(m->item_off);
  free(m->item_bk);
  free(m->item_out);
  free(m->item_dt);
  free(m->bk_first);
  free(m->bk_left);
  free(m->stage);
  free(m->calls);
  free(m);
}

static const coll_ops mpi_ops = {.begin = mc_begin,
                                 .add = mc_add,
                                 .finish = mc_finish,
                                 .flush = mc_flush,
                                 .reduce = NULL,
                                 .progress = mc_progress,
                                 .sum = mc_sum,
                                 .traffic = mc_traffic,
                                 .free = mc_free};

coll *coll_mpi(size_t n_local, size_t n_items, const size_t *item_n,
               tyto_dtype wire, size_t bucket_bytes, const int64_t *step) {
  mpi_coll *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->single = n_local == 1;
  m->base.ops = &mpi_ops;
  m->wire = wire == TYTO_F64 ? TYTO_F64 : TYTO_F32;
  m->es = m->wire == TYTO_F64 ? sizeof(double) : sizeof(float);
  m->mpi_dt = m->wire == TYTO_F64 ? MPI_DOUBLE : MPI_FLOAT;
  m->n_items = n_items;
  m->step = step;
  m->bucket_n = bucket_bytes / m->es;
  if (m->bucket_n < 1)
    m->bucket_n = 1;
  size_t k = n_items ? n_items : 1, max_n = 1, total = 0;
  m->item_n = malloc(k * sizeof *m->item_n);
  m->item_off = malloc((k + 1) * sizeof *m->item_off);
  m->item_bk = malloc(k * sizeof *m->item_bk);
  m->item_out = calloc(k, sizeof *m->item_out);
  m->item_dt = calloc(k, sizeof *m->item_dt);
  m->bk_first = malloc((k + 1) * sizeof *m->bk_first);
  m->bk_left = malloc(k * sizeof *m->bk_left);
  if (!m->item_n || !m->item_off || !m->item_bk || !m->item_out ||
      !m->item_dt || !m->bk_first || !m->bk_left) {
    mc_free(&m->base);
    return NULL;
  }
  /* Buckets: consecutive items until one holds bucket_n elements. */
  size_t in_bk = 0;
  for (size_t i = 0; i < n_items; i++) {
    m->item_n[i] = item_n[i];
    m->item_off[i] = total;
    total += item_n[i];
    if (item_n[i] > max_n)
      max_n = item_n[i];
    if (in_bk == 0)
      m->bk_first[m->n_buckets++] = i;
    m->item_bk[i] = m->n_buckets - 1;
    in_bk += item_n[i];
    if (in_bk >= m->bucket_n)
      in_bk = 0;
  }
  m->item_off[n_items] = total;
  m->bk_first[m->n_buckets] = n_items;
  if (!(m->local = coll_in_process(max_n)) ||
      !(m->stage = malloc((total ? total : 1) * m->es))) {
    mc_free(&m->base);
    return NULL;
  }
  reset(m);
  return &m->base;
}

#else

coll *coll_mpi(size_t n_local, size_t n_items, const size_t *item_n,
               tyto_dtype wire, size_t bucket_bytes, const int64_t *step) {
  (void)n_local;
  (void)n_items;
  (void)item_n;
  (void)wire;
  (void)bucket_bytes;
  (void)step;
  return NULL;
}

#endif
