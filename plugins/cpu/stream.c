/*
 * Streams and events on the CPU. A stream is a worker thread that runs its
 * FIFO of commands in order; an event is a marker queued on a stream that
 * becomes done when the worker reaches it. Waiting on an event from another
 * stream queues a command that blocks that stream's worker until then, so
 * cross-stream dependencies behave as on a GPU.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "pool.h"

static cpu_marker *marker_new(void) {
  cpu_marker *m = calloc(1, sizeof *m);
  if (m)
    m->refs = 1;
  return m;
}

/* Caller holds st->marker_mu. */
static void marker_unref_locked(cpu_marker *m) {
  if (m && --m->refs == 0)
    free(m);
}

static void marker_unref(tyto_plugin_state *st, cpu_marker *m) {
  pthread_mutex_lock(&st->marker_mu);
  marker_unref_locked(m);
  pthread_mutex_unlock(&st->marker_mu);
}

static tyto_plugin_error *run_cmd(tyto_plugin_stream *s, cpu_cmd *c) {
  tyto_plugin_state *st = s->dev->st;
  tyto_plugin_error *err = NULL;
  switch (c->kind) {
  case CPU_CMD_COPY:
    memmove(c->u.copy.dst, c->u.copy.src, (size_t)c->u.copy.size);
    break;
  case CPU_CMD_LAUNCH:
    err = cpu_kernel_run(st->host, c->u.launch.kernel, c->u.launch.args);
    free(c->u.launch.args);
    break;
  case CPU_CMD_SIGNAL: {
    pthread_mutex_lock(&s->mu);
    int failed = s->error != NULL;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&st->marker_mu);
    c->u.marker->done = 1;
    c->u.marker->failed = failed;
    marker_unref_locked(c->u.marker);
    pthread_cond_broadcast(&st->marker_cv);
    pthread_mutex_unlock(&st->marker_mu);
    break;
  }
  case CPU_CMD_WAIT:
    pthread_mutex_lock(&st->marker_mu);
    while (!c->u.marker->done)
      pthread_cond_wait(&st->marker_cv, &st->marker_mu);
    marker_unref_locked(c->u.marker);
    pthread_mutex_unlock(&st->marker_mu);
    break;
  }
  return err;
}

/* Racy peeks, confirmed under the lock by the caller. */
static int has_work(void *ctx) {
  tyto_plugin_stream *s = ctx;
  return __atomic_load_n(&s->head, __ATOMIC_RELAXED) != NULL ||
         __atomic_load_n(&s->quit, __ATOMIC_RELAXED);
}

typedef struct sync_wait {
  tyto_plugin_stream *s;
  uint64_t target;
} sync_wait;

static int reached(void *ctx) {
  sync_wait *w = ctx;
  return __atomic_load_n(&w->s->completed, __ATOMIC_ACQUIRE) >= w->target;
}

static void *worker(void *arg) {
  tyto_plugin_stream *s = arg;
  cpu_flush_subnormals();
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!s->head && !s->quit) {
      pthread_mutex_unlock(&s->mu);
      cpu_spin(has_work, s, CPU_SPIN_NS);
      pthread_mutex_lock(&s->mu);
    }
    while (!s->head && !s->quit)
      pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head)
      break; /* quit, and nothing left to run */
    cpu_cmd *c = s->head;
    __atomic_store_n(&s->head, c->next, __ATOMIC_RELAXED);
    if (!s->head)
      s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    tyto_plugin_error *err = run_cmd(s, c);
    free(c);
    pthread_mutex_lock(&s->mu);
    if (err && !s->error)
      s->error = err;
    else if (err) /* only the first error is reported */
      s->dev->st->host->error_free(err);
    __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
    /* Synchronize waits for the queue to drain: wake it then, not after
     * every command. */
    if (!s->head)
      pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

tyto_plugin_error *cpu_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out) {
  const tyto_plugin_host *h = dev->st->host;
  tyto_plugin_stream *s = calloc(1, sizeof *s);
  if (!s)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory creating a stream");
  s->dev = dev;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int rc = pthread_create(&s->thread, NULL, worker, s);
  if (rc != 0) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return h->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                        "cannot start a stream thread: %s", strerror(rc));
  }
  *out = s;
  return NULL;
}

void cpu_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s) {
  (void)dev;
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  __atomic_store_n(&s->quit, 1, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL); /* the worker drains the queue first */
  const tyto_plugin_host *h = s->dev->st->host;
  if (s->error) {
    h->log(h->ctx, TYTO_PLUGIN_LOG_WARN,
           "a stream was destroyed with an unreported error: %s",
           h->error_message(s->error));
    h->error_free(s->error);
  }
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

tyto_plugin_error *cpu_stream_enqueue(tyto_plugin_stream *s, cpu_cmd *cmd) {
  cmd->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = cmd;
  else
    __atomic_store_n(&s->head, cmd, __ATOMIC_RELEASE);
  s->tail = cmd;
  s->enqueued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

tyto_plugin_error *cpu_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s) {
  (void)dev;
  pthread_mutex_lock(&s->mu);
  sync_wait w = {s, s->enqueued};
  if (s->completed < w.target) {
    pthread_mutex_unlock(&s->mu);
    cpu_spin(reached, &w, CPU_SPIN_NS);
    pthread_mutex_lock(&s->mu);
  }
  while (s->completed < w.target)
    pthread_cond_wait(&s->cv, &s->mu);
  tyto_plugin_error *err = s->error;
  s->error = NULL;
  pthread_mutex_unlock(&s->mu);
  return err;
}

tyto_plugin_error *cpu_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out) {
  tyto_plugin_event *e = calloc(1, sizeof *e);
  if (!e)
    return dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "out of memory creating an event");
  e->dev = dev;
  *out = e;
  return NULL;
}

void cpu_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *e) {
  if (!e)
    return;
  marker_unref(dev->st, e->marker);
  free(e);
}

static tyto_plugin_error *queue_marker(tyto_plugin_stream *s, cpu_cmd_kind kind,
                                       cpu_marker *m) {
  cpu_cmd *c = calloc(1, sizeof *c);
  if (!c)
    return s->dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                       "out of memory queueing an event");
  c->kind = kind;
  c->u.marker = m;
  return cpu_stream_enqueue(s, c);
}

tyto_plugin_error *cpu_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *e,
                                    tyto_plugin_stream *s) {
  const tyto_plugin_host *h = dev->st->host;
  if (!e || !s)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "event_record needs an event and a stream");
  cpu_marker *m = marker_new();
  if (!m)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory recording an event");
  m->refs = 2; /* the event and the queued signal */
  /* Publish the new marker before queueing its signal, under the lock that
   * event_wait and event_synchronize read it with. */
  pthread_mutex_lock(&dev->st->marker_mu);
  cpu_marker *old = e->marker;
  e->marker = m;
  marker_unref_locked(old);
  pthread_mutex_unlock(&dev->st->marker_mu);
  tyto_plugin_error *err = queue_marker(s, CPU_CMD_SIGNAL, m);
  if (err) {
    /* Never queued: nothing will signal it; mark it done so no one waits
     * for ever, and drop the queue's reference. */
    pthread_mutex_lock(&dev->st->marker_mu);
    m->done = m->failed = 1;
    marker_unref_locked(m);
    pthread_cond_broadcast(&dev->st->marker_cv);
    pthread_mutex_unlock(&dev->st->marker_mu);
    return err;
  }
  return NULL;
}

tyto_plugin_error *cpu_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, tyto_plugin_event *e) {
  tyto_plugin_state *st = dev->st;
  if (!e || !s)
    return st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                               "event_wait needs a stream and an event");
  pthread_mutex_lock(&st->marker_mu);
  cpu_marker *m = e->marker;
  int pending = m && !m->done;
  if (pending)
    m->refs++;
  pthread_mutex_unlock(&st->marker_mu);
  if (!pending)
    return NULL;
  tyto_plugin_error *err = queue_marker(s, CPU_CMD_WAIT, m);
  if (err)
    marker_unref(st, m);
  return err;
}

/* Reads the event's state under the marker lock; waits first when asked.
 * The error reports work before the event that failed. */
static tyto_plugin_error *event_state(tyto_plugin_state *st,
                                      tyto_plugin_event *e, int wait,
                                      int *complete) {
  pthread_mutex_lock(&st->marker_mu);
  while (wait && e->marker && !e->marker->done)
    pthread_cond_wait(&st->marker_cv, &st->marker_mu);
  *complete = !e->marker || e->marker->done;
  int failed = e->marker && e->marker->failed;
  pthread_mutex_unlock(&st->marker_mu);
  return failed ? st->host->error_new(TYTO_PLUGIN_ERR_DEVICE,
                                      "work recorded by the event failed; "
                                      "the stream's synchronize reports how")
                : NULL;
}

tyto_plugin_error *cpu_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *e) {
  int complete;
  return event_state(dev->st, e, 1, &complete);
}

tyto_plugin_error *cpu_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *e, int *complete) {
  return event_state(dev->st, e, 0, complete);
}
