/*
 * A small asynchronous test plugin for the conformance kit's own tests,
 * built several times (tests/Makefile.am): once correct, and once with each
 * of the faults below, which tyto-conform must find. It claims the CPU as
 * one device whose streams are worker threads that run their commands in
 * order, each after a delay (KP_DELAY_US).
 *
 * Streams run on demand, as a driver that batches work until it is flushed
 * may: a stream's worker starts the commands queued so far only when the
 * host waits for them (stream_synchronize, stream_destroy, or
 * event_synchronize and event_query on an event the stream recorded), or
 * when another stream waits for one of its events. Work queued on a stream
 * is therefore still pending whenever the caller moves on, however the
 * threads are scheduled, and a build with an ordering fault gives the wrong
 * bytes every time, not by luck: an event_wait that does not wait lets
 * stream B run while A, never asked for, has not started.
 *
 * Kernels: COPY, FILL, NEG, RELU, ADD and MAX in f32, f64, f16 and bf16
 * and CAST between any two of them, over any strided layouts, with the
 * semantics of sdk/docs/ops.md (16-bit values computed in f32, converted by
 * plugins/common/half.h); every other op is unsupported.
 *
 *   KP_NAME             module name: the file is tyto_plugin_<KP_NAME>.so
 *   KP_NOOP_EVENT_WAIT  event_wait() does nothing
 *   KP_BAD_RELU         relu is x > 0 ? x : 0 (NaN -> 0, -0 -> +0)
 *   KP_SUPPORTS_LIES    supports_op() accepts every op, prepare() does not
 *   KP_RELEASE_DROPS    kernel_release() drops the launches still queued
 *   KP_H2D_EAGER        copy_h2d() on a stream copies at once, ahead of the
 *                       stream's queued work
 *   KP_LAZY_NULL_H2D    copy_h2d() with stream NULL returns before it has
 *                       read the host memory: it copies at the plugin's
 *                       next call
 *   KP_DUP_CLAIM        its probe claims device number 0 twice
 *   KP_NO_RELEASE       no kernel_release(), which is optional: not a fault
 *                       (its kernels are never freed)
 *   KP_TRUNC16          16-bit results are truncated (rounded toward zero),
 *                       not rounded to nearest with ties to even
 *   KP_CAST_VIA_F32     CAST from f64 to f16 or bf16 rounds to f32 first
 *                       (a double rounding)
 *   KP_WIDE16           16-bit elements are written as 32-bit words whose
 *                       upper half is zero: past the last element, and over
 *                       the gaps of a stepped output
 *   KP_LINALG16         linear algebra in f16 and bf16 is refused with
 *                       INVALID_ARGUMENT, not UNSUPPORTED
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/plugin.h>

#include "half.h"

#ifndef KP_DELAY_US
#define KP_DELAY_US 1000
#endif

#define CAT3(a, b, c) a##b##c
#define ENTRY(name) CAT3(tyto_plugin_, name, _LTX_init)
#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct kp_event kp_event;
typedef struct tyto_plugin_kernel kp_kernel;

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  pthread_mutex_t mu; /* events and kernel references */
  pthread_cond_t cv;  /* an event was signalled */
};

struct tyto_plugin_buffer {
  unsigned char *p;
  uint64_t size;
};

struct tyto_plugin_event {
  uint64_t recorded, done; /* generations: the last recorded, signalled */
  int refs;                /* the handle and the queued commands */
  /* The stream of the last recording; read only while done < recorded,
   * when that stream cannot have been destroyed (stream_destroy runs its
   * work, the signal included, first). */
  struct tyto_plugin_stream *by;
};

struct tyto_plugin_kernel {
  uint32_t op, dtype, n_in;
  tyto_plugin_layout in[3], out;
  double attr;
  int refs, released;
};

enum { CMD_COPY, CMD_LAUNCH, CMD_SIGNAL, CMD_WAIT, CMD_QUIT };

typedef struct kp_cmd {
  int kind;
  struct kp_cmd *next;
  void *dst;
  const void *src;
  uint64_t size;
  kp_kernel *k;
  unsigned char *args[4]; /* inputs then the output, at the bound offset */
  struct tyto_plugin_event *e;
  uint64_t gen;
  struct tyto_plugin_stream *by; /* CMD_WAIT: the stream that records gen */
  uint64_t seq;                  /* its place on its stream, from 1 */
} kp_cmd;

struct tyto_plugin_stream {
  tyto_plugin_state *st;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a command arrived or one finished */
  kp_cmd *head, *tail;
  uint64_t queued; /* commands queued so far */
  uint64_t opened; /* the worker may run commands up to this one */
  int busy;
};

struct tyto_plugin_device {
  tyto_plugin_state *st;
#ifdef KP_LAZY_NULL_H2D
  pthread_mutex_t mu;
  void *dst; /* the copy_h2d still to do, or NULL */
  const void *src;
  uint64_t size;
#endif
};

/* KP_LAZY_NULL_H2D: does the copy_h2d put off by the last call. */
static void lazy(tyto_plugin_device *d) {
#ifdef KP_LAZY_NULL_H2D
  pthread_mutex_lock(&d->mu);
  if (d->dst)
    memcpy(d->dst, d->src, (size_t)d->size);
  d->dst = NULL;
  pthread_mutex_unlock(&d->mu);
#else
  (void)d;
#endif
}

static tyto_plugin_error *oom(tyto_plugin_state *st) {
  return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ------------------------------------------------------------- kernels -- */

static double load(uint32_t dt, const unsigned char *p, int64_t i) {
  uint16_t h;
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  if (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16) {
    memcpy(&h, p + 2 * i, 2);
    return dt == TYTO_PLUGIN_DTYPE_F16 ? tpc_f16_to_f32(h) : tpc_bf16_to_f32(h);
  }
  double d;
  memcpy(&d, p + 8 * i, 8);
  return d;
}

/* v as an f32, rounded as IEEE rounding gives: from halfway between the
 * largest finite value and 2^128 on, an infinity; below, that largest. */
static float to_f32(double v) {
  if (fabs(v) >= 0x1.ffffffp127)
    return v > 0 ? INFINITY : -INFINITY;
  if (fabs(v) > 0x1.fffffep127)
    return v > 0 ? 0x1.fffffep127f : -0x1.fffffep127f;
  return (float)v;
}

/* v (an f32 result, or with from_f64 a value of f64) as 16-bit bits. */
static uint16_t to_16(uint32_t dt, double v, int from_f64) {
#ifdef KP_TRUNC16
  /* The fault: drop the low bits, whatever they hold. */
  uint32_t u = tpc_f32_bits(to_f32(v));
  (void)from_f64;
  if (dt == TYTO_PLUGIN_DTYPE_BF16 || (u & 0x7fffffffu) >= 0x7f800000u)
    return dt == TYTO_PLUGIN_DTYPE_BF16 ? (uint16_t)(u >> 16)
                                        : tpc_f32_to_f16(to_f32(v));
  return tpc_f32_to_f16(tpc_bits_f32(u & 0xffffe000u));
#else
#ifdef KP_CAST_VIA_F32
  from_f64 = 0;
#endif
  if (from_f64)
    return dt == TYTO_PLUGIN_DTYPE_F16 ? tpc_f64_to_f16(v) : tpc_f64_to_bf16(v);
  return dt == TYTO_PLUGIN_DTYPE_F16 ? tpc_f32_to_f16(to_f32(v))
                                     : tpc_f32_to_bf16(to_f32(v));
#endif
}

static void store(uint32_t dt, unsigned char *p, int64_t i, double v,
                  int from_f64) {
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    float f = to_f32(v);
    memcpy(p + 4 * i, &f, 4);
  } else if (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16) {
    uint16_t h = to_16(dt, v, from_f64);
#ifdef KP_WIDE16
    const uint32_t w = h; /* little-endian: the value, then two zeros */
    memcpy(p + 2 * i, &w, 4);
#else
    memcpy(p + 2 * i, &h, 2);
#endif
  } else {
    memcpy(p + 8 * i, &v, 8);
  }
}

static double apply(const kp_kernel *k, const double *x) {
  switch (k->op) {
  case TYTO_PLUGIN_OP_COPY:
  case TYTO_PLUGIN_OP_CAST: return x[0];
  case TYTO_PLUGIN_OP_FILL: return k->attr;
  case TYTO_PLUGIN_OP_NEG: return -x[0];
#ifdef KP_BAD_RELU
  case TYTO_PLUGIN_OP_RELU: return x[0] > 0 ? x[0] : 0;
#else
  case TYTO_PLUGIN_OP_RELU: return x[0] < 0 ? 0 : x[0];
#endif
  case TYTO_PLUGIN_OP_ADD: return x[0] + x[1];
  default: /* MAX */ return (x[0] > x[1] || x[0] != x[0]) ? x[0] : x[1];
  }
}

/* Runs k over its output's shape, row-major; an f32 kernel rounds its
 * operands and its result to f32. */
static void run_kernel(const kp_kernel *k, unsigned char *const *args) {
  const tyto_plugin_layout *o = &k->out;
  int64_t n = 1, idx[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t a = 0; a < o->rank; a++)
    n *= o->shape[a];
  for (int64_t e = 0; e < n; e++) {
    double x[3];
    for (uint32_t i = 0; i < k->n_in; i++) {
      int64_t off = k->in[i].offset;
      for (uint32_t a = 0; a < o->rank; a++)
        off += idx[a] * k->in[i].strides[a];
      x[i] = load(k->in[i].dtype, args[i], off);
    }
    int64_t off = o->offset;
    for (uint32_t a = 0; a < o->rank; a++)
      off += idx[a] * o->strides[a];
    /* A CAST from f64, and FILL's attribute, round once from f64; any
     * other result is an f32 one for a 16-bit dtype. */
    store(k->dtype, args[k->n_in], off, apply(k, x),
          k->op == TYTO_PLUGIN_OP_FILL ||
              (k->op == TYTO_PLUGIN_OP_CAST &&
               k->in[0].dtype == TYTO_PLUGIN_DTYPE_F64));
    for (uint32_t a = o->rank; a-- > 0;)
      if (++idx[a] < o->shape[a])
        break;
      else
        idx[a] = 0;
  }
}

static void kernel_unref(tyto_plugin_state *st, kp_kernel *k) {
  pthread_mutex_lock(&st->mu);
  int last = --k->refs == 0;
  pthread_mutex_unlock(&st->mu);
  if (last)
    free(k);
}

static void event_unref(tyto_plugin_state *st, struct tyto_plugin_event *e) {
  pthread_mutex_lock(&st->mu);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&st->mu);
  if (last)
    free(e);
}

/* ------------------------------------------------------------- streams -- */

/* Lets s run every command queued on it so far. */
static void open_stream(tyto_plugin_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->opened = s->queued;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Opens the stream that will signal generation gen of e, unless it has
 * already. Takes st->mu (before s->mu, the one lock order). */
static void open_for(tyto_plugin_state *st, struct tyto_plugin_event *e,
                     uint64_t gen, tyto_plugin_stream *by) {
  pthread_mutex_lock(&st->mu);
  if (e->done < gen && by)
    open_stream(by);
  pthread_mutex_unlock(&st->mu);
}

static void delay(void) {
  struct timespec ts = {0, KP_DELAY_US * 1000L};
  nanosleep(&ts, NULL);
}

static void run_cmd(tyto_plugin_stream *s, kp_cmd *c) {
  tyto_plugin_state *st = s->st;
  switch (c->kind) {
  case CMD_COPY:
    delay();
    memmove(c->dst, c->src, (size_t)c->size);
    break;
  case CMD_LAUNCH: {
    delay();
    pthread_mutex_lock(&st->mu);
    int dropped = c->k->released;
    pthread_mutex_unlock(&st->mu);
#ifndef KP_RELEASE_DROPS
    dropped = 0;
#endif
    if (!dropped)
      run_kernel(c->k, c->args);
    kernel_unref(st, c->k);
    break;
  }
  case CMD_SIGNAL:
    pthread_mutex_lock(&st->mu);
    if (c->gen > c->e->done)
      c->e->done = c->gen;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    event_unref(st, c->e);
    break;
  case CMD_WAIT:
    open_for(st, c->e, c->gen, c->by);
    pthread_mutex_lock(&st->mu);
    while (c->e->done < c->gen)
      pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    event_unref(st, c->e);
    break;
  default: break;
  }
}

static void *worker(void *arg) {
  tyto_plugin_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head || s->head->seq > s->opened)
      pthread_cond_wait(&s->cv, &s->mu);
    kp_cmd *c = s->head;
    s->head = c->next;
    if (!s->head)
      s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    int quit = c->kind == CMD_QUIT;
    run_cmd(s, c);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->busy = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (quit)
      return NULL;
  }
}

static tyto_plugin_error *enqueue(tyto_plugin_stream *s, kp_cmd *c) {
  kp_cmd *q = malloc(sizeof *q);
  if (!q)
    return oom(s->st);
  *q = *c;
  q->next = NULL;
  pthread_mutex_lock(&s->mu);
  q->seq = ++s->queued;
  if (s->tail)
    s->tail->next = q;
  else
    s->head = q;
  s->tail = q;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void drain(tyto_plugin_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->opened = s->queued;
  pthread_cond_broadcast(&s->cv);
  while (s->head || s->busy)
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static tyto_plugin_error *kp_stream_create(tyto_plugin_device *d,
                                           tyto_plugin_stream **out) {
  tyto_plugin_stream *s = calloc(1, sizeof *s);
  if (!s)
    return oom(d->st);
  s->st = d->st;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, worker, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return d->st->host->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                                  "cannot start a stream thread");
  }
  *out = s;
  return NULL;
}

static void kp_stream_destroy(tyto_plugin_device *d, tyto_plugin_stream *s) {
  kp_cmd quit = {.kind = CMD_QUIT};
  (void)d;
  if (!s)
    return;
  if (enqueue(s, &quit) != NULL)
    drain(s); /* out of memory: the worker still runs what it has */
  else
    open_stream(s);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static tyto_plugin_error *kp_sync(tyto_plugin_device *d,
                                  tyto_plugin_stream *s) {
  lazy(d);
  drain(s);
  return NULL;
}

/* -------------------------------------------------------------- events -- */

static tyto_plugin_error *kp_event_create(tyto_plugin_device *d,
                                          tyto_plugin_event **out) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return oom(d->st);
  (*out)->refs = 1;
  return NULL;
}

static void kp_event_destroy(tyto_plugin_device *d, tyto_plugin_event *e) {
  if (e)
    event_unref(d->st, e);
}

static tyto_plugin_error *kp_event_record(tyto_plugin_device *d,
                                          tyto_plugin_event *e,
                                          tyto_plugin_stream *s) {
  kp_cmd c = {.kind = CMD_SIGNAL, .e = e};
  pthread_mutex_lock(&d->st->mu);
  c.gen = ++e->recorded;
  e->by = s;
  e->refs++;
  pthread_mutex_unlock(&d->st->mu);
  tyto_plugin_error *err = enqueue(s, &c);
  if (err) {
    pthread_mutex_lock(&d->st->mu);
    e->done = c.gen; /* nothing will signal it */
    e->refs--;
    pthread_mutex_unlock(&d->st->mu);
  }
  return err;
}

static tyto_plugin_error *kp_event_wait(tyto_plugin_device *d,
                                        tyto_plugin_stream *s,
                                        tyto_plugin_event *e) {
#ifdef KP_NOOP_EVENT_WAIT
  (void)d, (void)s, (void)e;
  return NULL;
#else
  kp_cmd c = {.kind = CMD_WAIT, .e = e};
  pthread_mutex_lock(&d->st->mu);
  c.gen = e->recorded;
  c.by = e->done < c.gen ? e->by : NULL;
  e->refs++;
  pthread_mutex_unlock(&d->st->mu);
  tyto_plugin_error *err = enqueue(s, &c);
  if (err)
    event_unref(d->st, e);
  return err;
#endif
}

static tyto_plugin_error *kp_event_sync(tyto_plugin_device *d,
                                        tyto_plugin_event *e) {
  pthread_mutex_lock(&d->st->mu);
  uint64_t gen = e->recorded;
  if (e->done < gen)
    open_stream(e->by);
  while (e->done < gen)
    pthread_cond_wait(&d->st->cv, &d->st->mu);
  pthread_mutex_unlock(&d->st->mu);
  return NULL;
}

static tyto_plugin_error *kp_event_query(tyto_plugin_device *d,
                                         tyto_plugin_event *e, int *complete) {
  pthread_mutex_lock(&d->st->mu);
  *complete = e->done >= e->recorded;
  if (!*complete)
    open_stream(e->by);
  pthread_mutex_unlock(&d->st->mu);
  return NULL;
}

/* -------------------------------------------------------------- memory -- */

static tyto_plugin_error *kp_alloc(tyto_plugin_device *d, uint64_t size,
                                   tyto_plugin_buffer **out) {
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  void *mem = NULL;
  if (b && posix_memalign(&mem, 64, size ? (size_t)size : 1) == 0)
    b->p = mem;
  if (!b || !b->p) {
    free(b);
    return oom(d->st);
  }
  b->size = size;
  *out = b;
  return NULL;
}

static void kp_free(tyto_plugin_device *d, tyto_plugin_buffer *b) {
  lazy(d);
  if (b)
    free(b->p);
  free(b);
}

static tyto_plugin_error *range(tyto_plugin_device *d, tyto_plugin_buffer *b,
                                uint64_t off, uint64_t size) {
  if (off > b->size || size > b->size - off)
    return d->st->host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "copy of %llu bytes at offset %llu overruns a buffer of %llu bytes",
        (unsigned long long)size, (unsigned long long)off,
        (unsigned long long)b->size);
  return NULL;
}

/* A copy on s, or done now when s is NULL. */
static tyto_plugin_error *copy(tyto_plugin_device *d, tyto_plugin_stream *s,
                               void *dst, const void *src, uint64_t size) {
  lazy(d);
  if (!s) {
    memmove(dst, src, (size_t)size);
    return NULL;
  }
  kp_cmd c = {.kind = CMD_COPY, .dst = dst, .src = src, .size = size};
  return enqueue(s, &c);
}

static tyto_plugin_error *kp_h2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t off,
                                 const void *src, uint64_t size) {
  tyto_plugin_error *e = range(d, dst, off, size);
#ifdef KP_H2D_EAGER
  if (!e && s) {
    memcpy(dst->p + off, src, (size_t)size);
    return NULL;
  }
#endif
#ifdef KP_LAZY_NULL_H2D
  if (!e && !s) {
    lazy(d);
    pthread_mutex_lock(&d->mu);
    d->dst = dst->p + off;
    d->src = src;
    d->size = size;
    pthread_mutex_unlock(&d->mu);
    return NULL;
  }
#endif
  return e ? e : copy(d, s, dst->p + off, src, size);
}

static tyto_plugin_error *kp_d2h(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 void *dst, tyto_plugin_buffer *src,
                                 uint64_t off, uint64_t size) {
  tyto_plugin_error *e = range(d, src, off, size);
  return e ? e : copy(d, s, dst, src->p + off, size);
}

static tyto_plugin_error *kp_d2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t doff,
                                 tyto_plugin_buffer *src, uint64_t soff,
                                 uint64_t size) {
  tyto_plugin_error *e = range(d, dst, doff, size);
  if (!e)
    e = range(d, src, soff, size);
  return e ? e : copy(d, s, dst->p + doff, src->p + soff, size);
}

/* ------------------------------------------------------------- kernels -- */

static int arity(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_FILL: return 0;
  case TYTO_PLUGIN_OP_COPY:
  case TYTO_PLUGIN_OP_CAST:
  case TYTO_PLUGIN_OP_NEG:
  case TYTO_PLUGIN_OP_RELU: return 1;
  case TYTO_PLUGIN_OP_ADD:
  case TYTO_PLUGIN_OP_MAX: return 2;
  default: return -1;
  }
}

static int float_dtype(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F32 || dt == TYTO_PLUGIN_DTYPE_F64 ||
         dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16;
}

static tyto_plugin_error *check(tyto_plugin_device *d,
                                const tyto_plugin_op_desc *desc) {
  const tyto_plugin_host *h = d->st->host;
  const int n = arity(desc->op);
#ifdef KP_LINALG16
  const uint32_t dt = desc->n_outputs ? desc->outputs[0].dtype : 0;
  if (desc->op >= TYTO_PLUGIN_OP_INV &&
      desc->op <= TYTO_PLUGIN_OP_TRIANGULAR_SOLVE &&
      (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "op %u: a 16-bit dtype", desc->op);
#endif
  if (n < 0)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u is not one of this test device's", desc->op);
  if (desc->n_inputs != (uint32_t)n || desc->n_outputs != 1 ||
      (desc->op == TYTO_PLUGIN_OP_FILL && desc->n_fattrs < 1))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "op %u: expected %d inputs and 1 output", desc->op, n);
  const tyto_plugin_layout *o = &desc->outputs[0];
  if (!float_dtype(o->dtype) || o->rank > TYTO_PLUGIN_MAX_RANK)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u: dtype %u is not f32, f64, f16 or bf16",
                        desc->op, o->dtype);
  for (int i = 0; i < n; i++) {
    const tyto_plugin_layout *l =
        TYTO_PLUGIN_AT(tyto_plugin_layout, desc->inputs, i);
    const int cast = desc->op == TYTO_PLUGIN_OP_CAST;
    if ((cast ? !float_dtype(l->dtype) : l->dtype != o->dtype) ||
        l->rank != o->rank)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "op %u: input %d differs from the output in dtype "
                          "or rank",
                          desc->op, i);
    for (uint32_t a = 0; a < o->rank; a++)
      if (l->shape[a] != o->shape[a])
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "op %u: input %d is not of the output's shape",
                            desc->op, i);
  }
  return NULL;
}

static tyto_plugin_error *kp_supports(tyto_plugin_device *d,
                                      const tyto_plugin_op_desc *desc) {
#ifdef KP_SUPPORTS_LIES
  (void)d, (void)desc;
  return NULL;
#else
  return check(d, desc);
#endif
}

static tyto_plugin_error *kp_prepare(tyto_plugin_device *d,
                                     const tyto_plugin_op_desc *desc,
                                     tyto_plugin_kernel **out,
                                     tyto_plugin_kernel_info *info) {
  tyto_plugin_error *e = check(d, desc);
  if (e)
    return e;
  kp_kernel *k = calloc(1, sizeof *k);
  if (!k)
    return oom(d->st);
  k->op = desc->op;
  k->n_in = desc->n_inputs;
  for (uint32_t i = 0; i < k->n_in; i++)
    k->in[i] = *TYTO_PLUGIN_AT(tyto_plugin_layout, desc->inputs, i);
  k->out = *TYTO_PLUGIN_AT(tyto_plugin_layout, desc->outputs, 0);
  k->dtype = k->out.dtype;
  k->attr = desc->n_fattrs ? desc->fattrs[0] : 0;
  k->refs = 1;
  (void)info; /* no workspace */
  *out = k;
  return NULL;
}

#ifndef KP_NO_RELEASE
static void kp_release(tyto_plugin_device *d, tyto_plugin_kernel *k) {
  if (!k)
    return;
  pthread_mutex_lock(&d->st->mu);
  k->released = 1;
  pthread_mutex_unlock(&d->st->mu);
  kernel_unref(d->st, k);
}
#endif

static tyto_plugin_error *kp_launch(tyto_plugin_device *d,
                                    tyto_plugin_stream *s, kp_kernel *k,
                                    const tyto_plugin_binding *in, uint32_t nin,
                                    const tyto_plugin_binding *out,
                                    uint32_t nout,
                                    const tyto_plugin_binding *ws) {
  (void)ws;
  if (nin != k->n_in || nout != 1)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "launch: expected %u inputs and 1 output",
                                  k->n_in);
  kp_cmd c = {.kind = CMD_LAUNCH, .k = k};
  lazy(d);
  for (uint32_t i = 0; i < nin; i++) {
    const tyto_plugin_binding *b = TYTO_PLUGIN_AT(tyto_plugin_binding, in, i);
    c.args[i] = b->buffer->p + b->offset;
  }
  c.args[nin] = out[0].buffer->p + out[0].offset;
  pthread_mutex_lock(&d->st->mu);
  k->refs++;
  pthread_mutex_unlock(&d->st->mu);
  tyto_plugin_error *e = enqueue(s, &c);
  if (e)
    kernel_unref(d->st, k);
  return e;
}

/* -------------------------------------------------------------- plugin -- */

static tyto_plugin_error *kp_probe(tyto_plugin_state *st,
                                   const tyto_plugin_hw_device *offer,
                                   uint32_t n, const tyto_plugin_claims *c) {
  (void)st;
  for (uint32_t i = 0; i < n; i++)
    if (TYTO_PLUGIN_AT(tyto_plugin_hw_device, offer, i)->kind ==
        TYTO_PLUGIN_HW_CPU) {
      c->claim(c->ctx, (int32_t)i, 0, "kit test device");
#ifdef KP_DUP_CLAIM
      c->claim(c->ctx, (int32_t)i, 0, "kit test device, again");
#endif
      break;
    }
  return NULL;
}

static tyto_plugin_error *kp_query(tyto_plugin_state *st, uint32_t ordinal,
                                   tyto_plugin_device_info *info) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND, "no device %u",
                               ordinal);
  info->name = "kit test device";
  info->vendor = "tyto tests";
  info->driver_version = "";
  info->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32) |
                 TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64) |
                 TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16) |
                 TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_BF16);
  info->flags = TYTO_PLUGIN_CAP_ASYNC;
  info->memory_bytes = (uint64_t)1 << 30;
  info->alignment = 64;
  info->compute_units = 1;
  info->numa_node = -1;
  info->pci_bus_id = "";
  return NULL;
}

static tyto_plugin_error *kp_open(tyto_plugin_state *st, uint32_t ordinal,
                                  tyto_plugin_device **out) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND, "no device %u",
                               ordinal);
  tyto_plugin_device *d = calloc(1, sizeof *d);
  if (!d)
    return oom(st);
  d->st = st;
#ifdef KP_LAZY_NULL_H2D
  pthread_mutex_init(&d->mu, NULL);
#endif
  *out = d;
  return NULL;
}

static void kp_close(tyto_plugin_device *d) {
  lazy(d);
#ifdef KP_LAZY_NULL_H2D
  pthread_mutex_destroy(&d->mu);
#endif
  free(d);
}

static void kp_shutdown(tyto_plugin_state *st) {
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
  free(st);
}

static const tyto_plugin_fns kp_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = kp_probe,
    .device_query = kp_query,
    .device_open = kp_open,
    .shutdown = kp_shutdown,
};

static const tyto_plugin_device_fns kp_dfns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = kp_close,
    .buffer_alloc = kp_alloc,
    .buffer_free = kp_free,
    .stream_create = kp_stream_create,
    .stream_destroy = kp_stream_destroy,
    .stream_synchronize = kp_sync,
    .event_create = kp_event_create,
    .event_destroy = kp_event_destroy,
    .event_record = kp_event_record,
    .event_wait = kp_event_wait,
    .event_synchronize = kp_event_sync,
    .event_query = kp_event_query,
    .copy_h2d = kp_h2d,
    .copy_d2h = kp_d2h,
    .copy_d2d = kp_d2d,
    .supports_op = kp_supports,
    .prepare = kp_prepare,
#ifndef KP_NO_RELEASE
    .kernel_release = kp_release,
#endif
    .launch = kp_launch,
};

static const tyto_plugin_info kp_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = STR(KP_NAME),
    .vendor = "tyto tests",
    .version = "0.0.1",
    .license = "MIT",
    .description = "an asynchronous test device for the conformance kit",
    .fns = &kp_fns,
    .device_fns = &kp_dfns,
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
    ENTRY(KP_NAME)(const tyto_plugin_host *host, const tyto_plugin_info **info,
                   tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
ENTRY(KP_NAME)(const tyto_plugin_host *host, const tyto_plugin_info **info,
               tyto_plugin_state **state) {
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  st->host = host;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  *info = &kp_info;
  *state = st;
  return NULL;
}
