/*
 * The stream, event, copy and kernel-lifetime contract (see contract.h).
 */
#define _DEFAULT_SOURCE
#include "contract.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BIG ((uint64_t)4 << 20) /* bytes of the buffers of a check */
#define N_THREADS 4
#define THREAD_ROUNDS 16
#define SMALL ((uint64_t)64 << 10) /* bytes each thread moves per round */

/* --------------------------------------------------------------- helpers -- */

static const char *watch_what = "";

static void on_alarm(int sig) {
  static const char head[] = "\ntyto-conform: contract check \"";
  static const char tail[] =
      "\" did not finish in 60 s: a stream or event waits forever "
      "-- DOES NOT CONFORM\n";
  (void)sig;
  if (write(STDERR_FILENO, head, sizeof head - 1) < 0 ||
      write(STDERR_FILENO, watch_what, strlen(watch_what)) < 0 ||
      write(STDERR_FILENO, tail, sizeof tail - 1) < 0)
    _exit(1);
  _exit(1);
}

static void watch(const char *what) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  watch_what = what;
  alarm(60);
}

static void unwatch(void) {
  alarm(0);
}

/* Bytes of pattern `seed`: every 4 MiB buffer of a check holds a
 * different one, so a result tells which copy it came from. */
static void pattern(unsigned char *p, uint64_t n, uint32_t seed) {
  uint64_t s = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
  for (uint64_t i = 0; i < n; i++) {
    if (i % 8 == 0)
      s = s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    p[i] = (unsigned char)(s >> (8 * (i % 8)));
  }
}

/* A check's state: the device, up to 6 buffers of BIG bytes and host
 * arrays of as many, the message of its first failure. */
typedef struct chk {
  cf_device *d;
  const tyto_plugin_device_fns *f;
  tyto_plugin_buffer *b[6];
  unsigned char *h[6];
  char msg[1024];
  int failed;
} chk;

/* Records the failure of call `what` (taking e); returns 1 when e. */
static int bad(chk *c, const char *what, tyto_plugin_error *e) {
  if (e == NULL)
    return 0;
  if (!c->failed) {
    char m[900];
    cf_error_take(e, m, sizeof m);
    snprintf(c->msg, sizeof c->msg, "%s failed: %s", what, m);
  } else {
    cf_error_free(e);
  }
  c->failed = 1;
  return 1;
}

static int chk_open(chk *c, cf_device *d, int nbuf) {
  memset(c, 0, sizeof *c);
  c->d = d;
  c->f = d->fns;
  for (int i = 0; i < nbuf; i++) {
    c->h[i] = malloc(BIG);
    if (c->h[i] == NULL) {
      snprintf(c->msg, sizeof c->msg, "out of host memory");
      return c->failed = 1;
    }
    if (bad(c, "buffer_alloc", c->f->buffer_alloc(d->dev, BIG, &c->b[i])))
      return 1;
  }
  return 0;
}

static void chk_close(chk *c) {
  for (int i = 0; i < 6; i++) {
    if (c->b[i])
      c->f->buffer_free(c->d->dev, c->b[i]);
    free(c->h[i]);
  }
}

/* Compares got (BIG bytes) with pattern `seed`; on a difference records
 * what was expected and which of the check's patterns it holds instead. */
static int expect(chk *c, const unsigned char *got, uint32_t seed,
                  const char *what, const char *why) {
  unsigned char *want = malloc(BIG);
  if (want == NULL)
    return 0;
  pattern(want, BIG, seed);
  uint64_t at = 0;
  while (at < BIG && got[at] == want[at])
    at++;
  if (at < BIG && !c->failed) {
    int other = -1;
    for (uint32_t s = 1; s <= 8 && other < 0; s++) {
      pattern(want, BIG, s);
      if (memcmp(got, want, BIG) == 0)
        other = (int)s;
    }
    char found[96];
    if (other > 0)
      snprintf(found, sizeof found, "the bytes of copy %d", other);
    else
      snprintf(found, sizeof found, "other bytes from offset %llu",
               (unsigned long long)at);
    snprintf(c->msg, sizeof c->msg,
             "%s: expected the bytes of copy %u, found %s (%s)", what, seed,
             found, why);
    c->failed = 1;
  }
  free(want);
  return at < BIG;
}

/* Queues a chain of device copies on s that ends by writing `dst` from
 * `src` (both BIG): four copies through two scratch buffers first, so
 * that dst changes only when the chain is nearly done. */
static void slow_chain(chk *c, tyto_plugin_stream *s, tyto_plugin_buffer *dst,
                       tyto_plugin_buffer *src, tyto_plugin_buffer *t1,
                       tyto_plugin_buffer *t2) {
  tyto_plugin_device *dv = c->d->dev;
  if (bad(c, "copy_d2d", c->f->copy_d2d(dv, s, t1, 0, src, 0, BIG)) ||
      bad(c, "copy_d2d", c->f->copy_d2d(dv, s, t2, 0, t1, 0, BIG)) ||
      bad(c, "copy_d2d", c->f->copy_d2d(dv, s, t1, 0, t2, 0, BIG)) ||
      bad(c, "copy_d2d", c->f->copy_d2d(dv, s, t2, 0, t1, 0, BIG)))
    return;
  bad(c, "copy_d2d", c->f->copy_d2d(dv, s, dst, 0, t2, 0, BIG));
}

static void report(chk *c, cf_contract_row row, void *ctx, const char *name) {
  /* Work a failed check left queued must not outlive its buffers. */
  cf_error_free(c->f->stream_synchronize(c->d->dev, c->d->stream));
  unwatch();
  row(ctx, name, c->failed ? CF_FAILED : CF_RAN, c->failed ? c->msg : NULL);
  chk_close(c);
}

/* ---------------------------------------------------------------- copies -- */

/* Copies on one stream run in the order queued: a copy from the host
 * queued behind a copy that reads the same buffer must not overtake it. */
static void in_order_copies(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "stream order: copies";
  chk c;
  watch(name);
  if (!chk_open(&c, d, 5)) {
    tyto_plugin_device *dv = d->dev;
    tyto_plugin_stream *s = d->stream;
    pattern(c.h[0], BIG, 1);
    pattern(c.h[1], BIG, 2);
    /* X = copy 1; Y = X (after a slow chain); X = copy 2; Z = X. */
    if (!bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[0], 0, c.h[0], BIG)))
      slow_chain(&c, s, c.b[1], c.b[0], c.b[3], c.b[4]);
    if (!c.failed &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[0], 0, c.h[1], BIG)) &&
        !bad(&c, "copy_d2d", c.f->copy_d2d(dv, s, c.b[2], 0, c.b[0], 0, BIG)) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[2], c.b[1], 0, BIG)) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[3], c.b[2], 0, BIG)) &&
        !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, s))) {
      expect(&c, c.h[2], 1, "a buffer copied before the next copy_h2d",
             "a copy_h2d ran ahead of the work queued before it");
      expect(&c, c.h[3], 2, "a buffer copied after the second copy_h2d",
             "copies ran out of order");
    }
  }
  report(&c, row, ctx, name);
}

/* A queued copy_h2d has read the host memory once the stream has passed it
 * (here: its event completed), and a copy_d2h has written it; a copy with
 * no stream is complete on return, so its host memory may be reused at
 * once. */
static void host_memory(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "copies and host memory";
  chk c;
  tyto_plugin_event *e = NULL;
  watch(name);
  if (!chk_open(&c, d, 3)) {
    tyto_plugin_device *dv = d->dev;
    tyto_plugin_stream *s = d->stream;
    /* Stream NULL: the source may be overwritten as soon as copy_h2d
     * returns, and copy_d2h's destination is written when it returns. */
    pattern(c.h[0], BIG, 1);
    if (!bad(&c, "copy_h2d (stream NULL)",
             c.f->copy_h2d(dv, NULL, c.b[0], 0, c.h[0], BIG))) {
      pattern(c.h[0], BIG, 2);
      if (!bad(&c, "copy_d2h (stream NULL)",
               c.f->copy_d2h(dv, NULL, c.h[1], c.b[0], 0, BIG)))
        expect(&c, c.h[1], 1, "copy_h2d then copy_d2h with stream NULL",
               "a copy with stream NULL must be complete when it returns");
    }
    /* A stream: once its event is complete the copies are done. */
    pattern(c.h[0], BIG, 3);
    if (!c.failed && !bad(&c, "event_create", c.f->event_create(dv, &e)) &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[1], 0, c.h[0], BIG)))
      slow_chain(&c, s, c.b[0], c.b[1], c.b[2], c.b[1]);
    if (!c.failed &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[1], c.b[0], 0, BIG)) &&
        !bad(&c, "event_record", c.f->event_record(dv, e, s)) &&
        !bad(&c, "event_synchronize", c.f->event_synchronize(dv, e))) {
      expect(&c, c.h[1], 3, "copy_d2h's destination after event_synchronize",
             "event_synchronize returned before the copies it captured were "
             "done");
      /* The stream has passed the copy_h2d: its source is free again. */
      pattern(c.h[0], BIG, 4);
      if (!bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[2], c.b[0], 0, BIG)) &&
          !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, s)))
        expect(&c, c.h[2], 3, "a buffer written by a queued copy_h2d",
               "the copy read its host memory after the stream had passed "
               "it");
    }
    /* event_query: poll until complete, then the work is done. */
    if (!c.failed) {
      pattern(c.h[0], BIG, 5);
      int done = 0;
      if (!bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[1], 0, c.h[0], BIG)))
        slow_chain(&c, s, c.b[0], c.b[1], c.b[2], c.b[1]);
      if (!c.failed &&
          !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[1], c.b[0], 0, BIG)) &&
          !bad(&c, "event_record", c.f->event_record(dv, e, s))) {
        while (!done && !bad(&c, "event_query", c.f->event_query(dv, e, &done)))
          if (!done) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
          }
        if (done)
          expect(&c, c.h[1], 5,
                 "copy_d2h's destination once event_query "
                 "said complete",
                 "event_query said complete before the captured work was");
      }
      bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, s));
    }
    if (e)
      c.f->event_destroy(dv, e);
  }
  report(&c, row, ctx, name);
}

/* ---------------------------------------------------------------- events -- */

static void events(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "events across streams";
  chk c;
  tyto_plugin_stream *a = NULL, *b = NULL;
  tyto_plugin_event *e = NULL, *fresh = NULL;
  watch(name);
  if (!chk_open(&c, d, 6)) {
    tyto_plugin_device *dv = d->dev;
    pattern(c.h[0], BIG, 1);
    pattern(c.h[1], BIG, 2);
    pattern(c.h[2], BIG, 3);
    /* X (buffer 0) holds copy 1; A rewrites it with copy 2 at the end of a
     * slow chain and records E; B waits for E, then reads X. */
    if (!bad(&c, "stream_create", c.f->stream_create(dv, &a)) &&
        !bad(&c, "stream_create", c.f->stream_create(dv, &b)) &&
        !bad(&c, "event_create", c.f->event_create(dv, &e)) &&
        !bad(&c, "copy_h2d (stream NULL)",
             c.f->copy_h2d(dv, NULL, c.b[0], 0, c.h[0], BIG)) &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, a, c.b[1], 0, c.h[1], BIG)))
      slow_chain(&c, a, c.b[0], c.b[1], c.b[2], c.b[3]);
    if (!c.failed && !bad(&c, "event_record", c.f->event_record(dv, e, a)) &&
        !bad(&c, "event_wait", c.f->event_wait(dv, b, e)) &&
        !bad(&c, "copy_d2d", c.f->copy_d2d(dv, b, c.b[4], 0, c.b[0], 0, BIG)) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, b, c.h[3], c.b[4], 0, BIG)) &&
        !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, b)))
      expect(&c, c.h[3], 2,
             "work on stream B queued after event_wait(B, E), E recorded on "
             "A after a copy",
             "event_wait did not make B wait for A's work");
    /* Recording again replaces the captured point: E now follows a second
     * chain that writes copy 3 into X. */
    if (!c.failed &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, a, c.b[1], 0, c.h[2], BIG)))
      slow_chain(&c, a, c.b[0], c.b[1], c.b[2], c.b[3]);
    if (!c.failed && !bad(&c, "event_record", c.f->event_record(dv, e, a)) &&
        !bad(&c, "event_wait", c.f->event_wait(dv, b, e)) &&
        !bad(&c, "copy_d2d", c.f->copy_d2d(dv, b, c.b[5], 0, c.b[0], 0, BIG)) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, b, c.h[4], c.b[5], 0, BIG)) &&
        !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, b)))
      expect(&c, c.h[4], 3,
             "work on B after waiting for an event recorded "
             "a second time",
             "event_wait waited for the event's first recording, not its "
             "last");
    if (!c.failed) {
      int done = 0;
      if (!bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, a)) &&
          !bad(&c, "event_query", c.f->event_query(dv, e, &done)) && !done) {
        snprintf(c.msg, sizeof c.msg,
                 "event_query: expected complete (1) once the stream that "
                 "recorded the event was synchronised, found 0");
        c.failed = 1;
      }
    }
    /* A new event counts as complete: waiting for one never blocks. */
    if (!c.failed && !bad(&c, "event_create", c.f->event_create(dv, &fresh))) {
      int done = 0;
      if (!bad(&c, "event_query", c.f->event_query(dv, fresh, &done)) &&
          !done) {
        snprintf(c.msg, sizeof c.msg,
                 "event_query on a new event: expected complete (1), "
                 "found 0");
        c.failed = 1;
      }
      if (!c.failed)
        watch_what = "events across streams: waiting for a new event";
      if (!c.failed &&
          !bad(&c, "event_synchronize (new event)",
               c.f->event_synchronize(dv, fresh)) &&
          !bad(&c, "event_wait (new event)", c.f->event_wait(dv, b, fresh)))
        bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, b));
    }
    if (a)
      c.f->stream_synchronize(dv, a);
    if (b)
      c.f->stream_synchronize(dv, b);
  }
  if (fresh)
    c.f->event_destroy(d->dev, fresh);
  if (e)
    c.f->event_destroy(d->dev, e);
  if (a)
    c.f->stream_destroy(d->dev, a);
  if (b)
    c.f->stream_destroy(d->dev, b);
  report(&c, row, ctx, name);
}

/* stream_destroy waits for the stream's queued work. */
static void destroy_waits(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "stream_destroy waits for queued work";
  chk c;
  tyto_plugin_stream *s = NULL;
  watch(name);
  if (!chk_open(&c, d, 3)) {
    tyto_plugin_device *dv = d->dev;
    pattern(c.h[0], BIG, 1);
    memset(c.h[1], 0, BIG);
    if (!bad(&c, "stream_create", c.f->stream_create(dv, &s)) &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[0], 0, c.h[0], BIG)))
      slow_chain(&c, s, c.b[0], c.b[0], c.b[1], c.b[2]);
    if (!c.failed &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[1], c.b[0], 0, BIG))) {
      c.f->stream_destroy(dv, s);
      s = NULL;
      expect(&c, c.h[1], 1, "a copy_d2h queued before stream_destroy",
             "stream_destroy returned before the stream's work was done");
    }
    if (s)
      c.f->stream_destroy(dv, s);
  }
  report(&c, row, ctx, name);
}

/* --------------------------------------------------------------- kernels -- */

/* A 1-D kernel of op (COPY: 1 input; FILL: none, fattrs[0] = v) over n
 * elements of dtype dt. Returns the plugin's error. */
static tyto_plugin_error *kernel(cf_device *d, uint32_t op, uint32_t dt,
                                 int64_t n, double v, tyto_plugin_kernel **k) {
  tyto_plugin_layout l;
  tyto_plugin_op_desc desc;
  tyto_plugin_kernel_info ki;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dt;
  l.rank = 1;
  l.shape[0] = n;
  l.strides[0] = 1;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = op;
  desc.n_inputs = op == TYTO_PLUGIN_OP_COPY;
  desc.n_outputs = 1;
  desc.inputs = desc.n_inputs ? &l : NULL;
  desc.outputs = &l;
  desc.n_fattrs = op == TYTO_PLUGIN_OP_FILL;
  desc.fattrs = desc.n_fattrs ? &v : NULL;
  memset(&ki, 0, sizeof ki);
  ki.struct_size = sizeof ki;
  *k = NULL;
  if (d->fns->prepare == NULL)
    return cf_error(TYTO_PLUGIN_ERR_UNSUPPORTED, "memory-only device");
  tyto_plugin_error *e =
      d->fns->supports_op ? d->fns->supports_op(d->dev, &desc) : NULL;
  if (e == NULL)
    e = d->fns->prepare(d->dev, &desc, k, &ki);
  if (e == NULL && ki.workspace_bytes) {
    if (d->fns->kernel_release)
      d->fns->kernel_release(d->dev, *k);
    *k = NULL;
    e = cf_error(TYTO_PLUGIN_ERR_UNSUPPORTED,
                 "the kernel wants a workspace; the check binds none");
  }
  return e;
}

static void release(cf_device *d, tyto_plugin_kernel *k) {
  if (k && d->fns->kernel_release)
    d->fns->kernel_release(d->dev, k);
}

static tyto_plugin_error *launch(cf_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, tyto_plugin_buffer *in,
                                 tyto_plugin_buffer *out) {
  tyto_plugin_binding bi = {sizeof bi, in, 0}, bo = {sizeof bo, out, 0};
  return d->fns->launch(d->dev, s, k, in ? &bi : NULL, in ? 1 : 0, &bo, 1,
                        NULL);
}

/* The dtype the kernel checks use: f32 when listed, else f64; UINT32_MAX
 * when neither. */
static uint32_t kernel_dtype(const cf_device *d) {
  return cf_device_has_dtype(d, TYTO_PLUGIN_DTYPE_F32)   ? TYTO_PLUGIN_DTYPE_F32
         : cf_device_has_dtype(d, TYTO_PLUGIN_DTYPE_F64) ? TYTO_PLUGIN_DTYPE_F64
                                                         : UINT32_MAX;
}

/* How many elements of dtype dt fill `bytes` (0 for UINT32_MAX, which the
 * checks then skip). */
static int64_t elements(uint32_t dt, size_t bytes) {
  const size_t es = cf_dtype_size(dt);
  return es ? (int64_t)(bytes / es) : 0;
}

/* Whether every element of p (n of dtype dt) equals v. */
static int all_equal(const unsigned char *p, uint32_t dt, int64_t n, double v,
                     int64_t *at) {
  for (int64_t i = 0; i < n; i++) {
    double x;
    if (dt == TYTO_PLUGIN_DTYPE_F32) {
      float f;
      memcpy(&f, p + 4 * i, 4);
      x = f;
    } else {
      memcpy(&x, p + 8 * i, 8);
    }
    if (x != v) {
      *at = i;
      return 0;
    }
  }
  return 1;
}

/* Prepares COPY and FILL kernels for the kernel checks; reports the check
 * as unsupported (and returns 1) when the device has none. */
static int kernels_or_skip(cf_device *d, uint32_t dt, int64_t n,
                           tyto_plugin_kernel **cp, tyto_plugin_kernel **f1,
                           tyto_plugin_kernel **f2, const char *name,
                           cf_contract_row row, void *ctx) {
  char m[1024];
  tyto_plugin_error *e = NULL;
  *cp = NULL;
  if (f1)
    *f1 = NULL;
  if (f2)
    *f2 = NULL;
  if (dt == UINT32_MAX)
    e = cf_error(TYTO_PLUGIN_ERR_UNSUPPORTED, "the device lists neither f32 "
                                              "nor f64");
  if (e == NULL)
    e = kernel(d, TYTO_PLUGIN_OP_COPY, dt, n, 0, cp);
  if (e == NULL && f1)
    e = kernel(d, TYTO_PLUGIN_OP_FILL, dt, n, 1.0, f1);
  if (e == NULL && f2)
    e = kernel(d, TYTO_PLUGIN_OP_FILL, dt, n, 2.0, f2);
  if (e == NULL)
    return 0;
  tyto_plugin_code code = cf_error_take(e, m, sizeof m);
  char msg[1100];
  snprintf(msg, sizeof msg, "needs COPY and FILL kernels: %s", m);
  unwatch();
  row(ctx, name,
      code == TYTO_PLUGIN_ERR_UNSUPPORTED ? CF_UNSUPPORTED : CF_FAILED, msg);
  release(d, *cp);
  if (f1)
    release(d, *f1);
  if (f2)
    release(d, *f2);
  return 1;
}

/* Kernels run in the order queued: FILL X=1, COPY Y=X, FILL X=2, COPY
 * Z=X gives Y = 1 and Z = 2. */
static void in_order_kernels(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "stream order: kernels";
  const uint32_t dt = kernel_dtype(d);
  const int64_t n = elements(dt, BIG);
  tyto_plugin_kernel *cp, *f1, *f2;
  chk c;
  watch(name);
  if (kernels_or_skip(d, dt, n, &cp, &f1, &f2, name, row, ctx))
    return;
  if (!chk_open(&c, d, 3)) {
    tyto_plugin_device *dv = d->dev;
    tyto_plugin_stream *s = d->stream;
    int64_t at = 0;
    if (!bad(&c, "launch FILL 1", launch(d, s, f1, NULL, c.b[0])) &&
        !bad(&c, "launch COPY", launch(d, s, cp, c.b[0], c.b[1])) &&
        !bad(&c, "launch FILL 2", launch(d, s, f2, NULL, c.b[0])) &&
        !bad(&c, "launch COPY", launch(d, s, cp, c.b[0], c.b[2])) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[1], c.b[1], 0, BIG)) &&
        !bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[2], c.b[2], 0, BIG)) &&
        !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, s))) {
      if (!all_equal(c.h[1], dt, n, 1.0, &at)) {
        snprintf(c.msg, sizeof c.msg,
                 "COPY launched between FILL 1 and FILL 2: expected 1 in "
                 "every element, element %lld differs: kernels ran out of "
                 "order",
                 (long long)at);
        c.failed = 1;
      } else if (!all_equal(c.h[2], dt, n, 2.0, &at)) {
        snprintf(c.msg, sizeof c.msg,
                 "COPY launched after FILL 2: expected 2 in every element, "
                 "element %lld differs: kernels ran out of order",
                 (long long)at);
        c.failed = 1;
      }
    }
  }
  release(d, cp);
  release(d, f1);
  release(d, f2);
  report(&c, row, ctx, name);
}

/* kernel_release with launches still queued: they must still run. */
static void release_queued(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "kernel released with launches queued";
  const uint32_t dt = kernel_dtype(d);
  const int64_t n = elements(dt, BIG);
  tyto_plugin_kernel *cp, *f1;
  chk c;
  watch(name);
  if (kernels_or_skip(d, dt, n, &cp, &f1, NULL, name, row, ctx))
    return;
  if (!chk_open(&c, d, 4)) {
    tyto_plugin_device *dv = d->dev;
    tyto_plugin_stream *s = d->stream;
    pattern(c.h[0], BIG, 1);
    memset(c.h[1], 0, BIG);
    /* Y = 0; a slow chain; X = 1 and Y = X by kernels released at once. */
    if (!bad(&c, "copy_h2d (stream NULL)",
             c.f->copy_h2d(dv, NULL, c.b[1], 0, c.h[1], BIG)) &&
        !bad(&c, "copy_h2d", c.f->copy_h2d(dv, s, c.b[2], 0, c.h[0], BIG)))
      slow_chain(&c, s, c.b[2], c.b[2], c.b[3], c.b[0]);
    if (!c.failed && !bad(&c, "launch FILL", launch(d, s, f1, NULL, c.b[0])) &&
        !bad(&c, "launch COPY", launch(d, s, cp, c.b[0], c.b[1]))) {
      release(d, f1);
      release(d, cp);
      f1 = cp = NULL;
      int64_t at = 0;
      if (!bad(&c, "copy_d2h", c.f->copy_d2h(dv, s, c.h[2], c.b[1], 0, BIG)) &&
          !bad(&c, "stream_synchronize", c.f->stream_synchronize(dv, s)) &&
          !all_equal(c.h[2], dt, n, 1.0, &at)) {
        snprintf(c.msg, sizeof c.msg,
                 "FILL then COPY launched, both released before they ran: "
                 "expected 1 in every element of the copy, element %lld "
                 "differs: queued launches of a released kernel must still "
                 "run",
                 (long long)at);
        c.failed = 1;
      }
    }
  }
  release(d, cp);
  release(d, f1);
  report(&c, row, ctx, name);
}

/* --------------------------------------------------------------- threads -- */

/* SMALL bytes of whole numbers of dtype dt (any bytes when dt is none of
 * f32, f64): values that a COPY kernel moves unchanged, unlike random
 * bytes, which hold NaNs whose payload a copy need not keep. */
static void values(unsigned char *p, uint32_t dt, uint32_t seed) {
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    for (uint64_t i = 0; i < SMALL / 4; i++) {
      float f = (float)((seed * 7919u + i * 31u) % 100003u);
      memcpy(p + 4 * i, &f, 4);
    }
  } else if (dt == TYTO_PLUGIN_DTYPE_F64) {
    for (uint64_t i = 0; i < SMALL / 8; i++) {
      double v = (double)((seed * 7919u + i * 31u) % 100003u);
      memcpy(p + 8 * i, &v, 8);
    }
  } else {
    pattern(p, SMALL, seed);
  }
}

typedef struct worker {
  cf_device *d;
  uint32_t dt;           /* the dtype of k, or UINT32_MAX */
  tyto_plugin_kernel *k; /* this thread's COPY kernel, or NULL: copy_d2d */
  uint32_t id;
  char msg[1024];
  int failed;
} worker;

static void *thread_main(void *arg) {
  worker *w = arg;
  cf_device *d = w->d;
  const tyto_plugin_device_fns *f = d->fns;
  tyto_plugin_device *dv = d->dev;
  tyto_plugin_stream *s = NULL;
  tyto_plugin_event *e = NULL;
  tyto_plugin_buffer *x = NULL, *y = NULL;
  unsigned char *src = malloc(SMALL), *dst = malloc(SMALL);
  tyto_plugin_error *err = NULL;
  const char *what = "stream_create";
  if (src == NULL || dst == NULL) {
    snprintf(w->msg, sizeof w->msg, "out of host memory");
    w->failed = 1;
  } else if ((err = f->stream_create(dv, &s)) == NULL &&
             (what = "event_create", err = f->event_create(dv, &e)) == NULL &&
             (what = "buffer_alloc", err = f->buffer_alloc(dv, SMALL, &x)) ==
                 NULL &&
             (err = f->buffer_alloc(dv, SMALL, &y)) == NULL) {
    for (uint32_t r = 0; r < THREAD_ROUNDS && err == NULL && !w->failed; r++) {
      const uint32_t seed = 100 + w->id * 1000 + r;
      values(src, w->dt, seed);
      memset(dst, 0, SMALL);
      tyto_plugin_binding bi = {sizeof bi, x, 0}, bo = {sizeof bo, y, 0};
      if ((what = "copy_h2d", err = f->copy_h2d(dv, s, x, 0, src, SMALL)) ||
          (what = w->k ? "launch" : "copy_d2d",
           err = w->k ? f->launch(dv, s, w->k, &bi, 1, &bo, 1, NULL)
                      : f->copy_d2d(dv, s, y, 0, x, 0, SMALL)) ||
          (what = "copy_d2h", err = f->copy_d2h(dv, s, dst, y, 0, SMALL)) ||
          (what = "event_record", err = f->event_record(dv, e, s)) ||
          (what = "event_synchronize", err = f->event_synchronize(dv, e)))
        break;
      unsigned char *want = malloc(SMALL);
      if (want) {
        values(want, w->dt, seed);
        if (memcmp(want, dst, SMALL) != 0) {
          uint64_t at = 0;
          while (want[at] == dst[at])
            at++;
          snprintf(w->msg, sizeof w->msg,
                   "thread %u, round %u: its data came back wrong from byte "
                   "%llu (streams driven from %d threads at once must not "
                   "disturb each other)",
                   w->id, r, (unsigned long long)at, N_THREADS);
          w->failed = 1;
        }
        free(want);
      }
    }
  }
  if (err != NULL) {
    char m[900];
    cf_error_take(err, m, sizeof m);
    snprintf(w->msg, sizeof w->msg, "thread %u: %s failed: %s", w->id, what, m);
    w->failed = 1;
  }
  if (s)
    f->stream_synchronize(dv, s);
  if (e)
    f->event_destroy(dv, e);
  if (x)
    f->buffer_free(dv, x);
  if (y)
    f->buffer_free(dv, y);
  if (s)
    f->stream_destroy(dv, s);
  free(src);
  free(dst);
  return NULL;
}

/* N_THREADS threads, each with its own stream, buffers, event and (when
 * the device has them) COPY kernel, copy data through the device at the
 * same time. */
static void threads(cf_device *d, cf_contract_row row, void *ctx) {
  static const char name[] = "streams from several threads";
  worker w[N_THREADS];
  pthread_t t[N_THREADS];
  int started[N_THREADS] = {0};
  const uint32_t dt = kernel_dtype(d);
  int failed = 0;
  char msg[1024] = "";
  watch(name);
  memset(w, 0, sizeof w);
  for (uint32_t i = 0; i < N_THREADS; i++) {
    w[i].d = d;
    w[i].id = i;
    w[i].dt = dt;
    /* prepare() is never called concurrently for one device: here. */
    if (dt != UINT32_MAX) {
      const int64_t n = elements(dt, SMALL);
      tyto_plugin_error *e = kernel(d, TYTO_PLUGIN_OP_COPY, dt, n, 0, &w[i].k);
      if (e) {
        cf_error_free(e);
        w[i].k = NULL; /* the thread copies with copy_d2d instead */
      }
    }
  }
  for (uint32_t i = 0; i < N_THREADS; i++)
    started[i] = pthread_create(&t[i], NULL, thread_main, &w[i]) == 0;
  for (uint32_t i = 0; i < N_THREADS; i++) {
    if (started[i])
      pthread_join(t[i], NULL);
    else if (!failed)
      snprintf(msg, sizeof msg, "cannot start a thread");
    failed |= !started[i];
    if (w[i].failed && !failed)
      snprintf(msg, sizeof msg, "%s", w[i].msg);
    failed |= w[i].failed;
    release(d, w[i].k);
  }
  unwatch();
  row(ctx, name, failed ? CF_FAILED : CF_RAN, failed ? msg : NULL);
}

void cf_contract_run(cf_device *d, cf_contract_row row, void *ctx) {
  in_order_copies(d, row, ctx);
  host_memory(d, row, ctx);
  events(d, row, ctx);
  destroy_waits(d, row, ctx);
  in_order_kernels(d, row, ctx);
  release_queued(d, row, ctx);
  threads(d, row, ctx);
}
