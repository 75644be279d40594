/*
 * Streams and events.
 *
 * A stream is an in-order cl_command_queue. OpenCL reports a failed command
 * only through that command's event, so every command a stream enqueues
 * keeps its event in the stream's pending list until the next synchronize;
 * completed events are pruned oldest first (an in-order queue completes in
 * order), so the list stays as long as the work still in flight.
 *
 * An event wraps the cl_event of a marker. Waiting on it from a stream of
 * the same cl_context is a barrier on that stream and does not block the
 * host. Each open device has its own context, and OpenCL events cannot sit
 * in another context's wait list, so a wait across devices blocks the
 * calling thread in clWaitForEvents until the event completes, then
 * returns; the work later enqueued on the waiting stream is then ordered
 * after it.
 */
#include "ocl.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define HOST(dev) ((dev)->state->host)

/* Prune once this many commands are pending, so streams that are never
 * synchronized do not grow without bound. */
#define PRUNE_AT 64

tyto_plugin_error *ocl_stream_check(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s, const char *what) {
  if (s == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the stream is NULL", what);
  if (s->dev != dev)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the stream belongs to another open device "
                     "(opencl:%u \"%s\") than the one called (opencl:%u "
                     "\"%s\"); pass the stream's own device",
                     what, (unsigned)(s->dev->info - s->dev->state->devs),
                     s->dev->info->name,
                     (unsigned)(dev->info - dev->state->devs), dev->info->name);
  return NULL;
}

/* The execution status of `ev`: CL_COMPLETE, a positive "not yet" state, or
 * the negative error the command ended with. */
static cl_int event_status(cl_event ev) {
  cl_int status = CL_COMPLETE;
  cl_int err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS,
                              sizeof status, &status, NULL);
  return err == CL_SUCCESS ? status : err;
}

static void note_error(tyto_plugin_stream *s, cl_int status, const char *what) {
  if (status < 0 && s->first_error == CL_SUCCESS) {
    s->first_error = status;
    s->first_error_what = what;
  }
}

/* Releases the leading pending commands that have finished. */
static void prune(tyto_plugin_stream *s) {
  while (s->head < s->count) {
    ocl_pending *p = &s->pending[s->head];
    cl_int status = event_status(p->event);
    if (status > CL_COMPLETE)
      break;
    note_error(s, status, p->what);
    clReleaseEvent(p->event);
    s->head++;
  }
  if (s->head == s->count)
    s->head = s->count = 0;
}

tyto_plugin_error *ocl_stream_reserve(tyto_plugin_stream *s) {
  if (s->count < s->cap)
    return NULL;
  prune(s);
  if (s->head > 0) {
    memmove(s->pending, s->pending + s->head,
            (s->count - s->head) * sizeof *s->pending);
    s->count -= s->head;
    s->head = 0;
  }
  if (s->count < s->cap)
    return NULL;
  size_t cap = s->cap ? s->cap * 2 : 16;
  ocl_pending *p = realloc(s->pending, cap * sizeof *p);
  if (p == NULL)
    return ocl_error(HOST(s->dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "stream: out of host memory tracking %zu commands",
                     s->count);
  s->pending = p;
  s->cap = cap;
  return NULL;
}

void ocl_stream_track(tyto_plugin_stream *s, cl_event ev, const char *what) {
  /* ocl_stream_reserve() made room; a missing event (a driver that gave
   * none) can only be dropped. */
  if (ev == NULL || s->count >= s->cap)
    return;
  s->pending[s->count].event = ev;
  s->pending[s->count].what = what;
  s->count++;
  if (s->count - s->head >= PRUNE_AT)
    prune(s);
}

/* Waits for and releases every pending command, noting the first failure. */
static void drain(tyto_plugin_stream *s) {
  for (size_t i = s->head; i < s->count; i++) {
    note_error(s, event_status(s->pending[i].event), s->pending[i].what);
    clReleaseEvent(s->pending[i].event);
  }
  s->head = s->count = 0;
}

tyto_plugin_error *ocl_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out) {
  if (out == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "stream_create: out is NULL");
  tyto_plugin_stream *s = calloc(1, sizeof *s);
  if (s == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "stream_create: out of host memory");
  s->dev = dev;
  tyto_plugin_error *e = ocl_queue_create(dev, &s->queue);
  if (e != NULL) {
    free(s);
    return e;
  }
  *out = s;
  return NULL;
}

void ocl_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s) {
  (void)dev;
  if (s == NULL)
    return;
  /* The ABI promises the queued work finishes first; releasing the queue
   * alone would only guarantee that eventually. */
  clFinish(s->queue);
  drain(s);
  if (s->first_error != CL_SUCCESS)
    HOST(s->dev)->log(HOST(s->dev)->ctx, TYTO_PLUGIN_LOG_WARN,
                      "stream destroyed with an unreported failure: %s ended "
                      "with %s (%d)",
                      s->first_error_what, ocl_code_name(s->first_error),
                      (int)s->first_error);
  clReleaseCommandQueue(s->queue);
  free(s->pending);
  free(s);
}

tyto_plugin_error *ocl_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s) {
  tyto_plugin_error *e = ocl_stream_check(dev, s, "stream_synchronize");
  if (e != NULL)
    return e;
  cl_int err = clFinish(s->queue);
  drain(s);
  if (s->first_error != CL_SUCCESS) {
    cl_int status = s->first_error;
    const char *what = s->first_error_what;
    s->first_error = CL_SUCCESS;
    s->first_error_what = NULL;
    return ocl_error(HOST(dev), ocl_code_for(status),
                     "stream on \"%s\": an enqueued %s failed with %s (%d)",
                     dev->info->name, what, ocl_code_name(status), (int)status);
  }
  if (err != CL_SUCCESS)
    return ocl_error_cl(HOST(dev), "clFinish", err,
                        "synchronizing a stream "
                        "on \"%s\"",
                        dev->info->name);
  return NULL;
}

tyto_plugin_error *ocl_wait_sync(tyto_plugin_device *dev, cl_event ev,
                                 const char *what) {
  cl_int err = clWaitForEvents(1, &ev);
  cl_int status = event_status(ev);
  clReleaseEvent(ev);
  if (status < 0)
    return ocl_error(HOST(dev), ocl_code_for(status),
                     "%s on \"%s\" failed with %s (%d)", what, dev->info->name,
                     ocl_code_name(status), (int)status);
  if (err != CL_SUCCESS)
    return ocl_error_cl(HOST(dev), "clWaitForEvents", err,
                        "waiting for %s "
                        "on \"%s\"",
                        what, dev->info->name);
  return NULL;
}

/* ---- events ------------------------------------------------------------ */

tyto_plugin_error *ocl_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out) {
  if (out == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "event_create: out is NULL");
  tyto_plugin_event *e = calloc(1, sizeof *e);
  if (e == NULL || pthread_mutex_init(&e->lock, NULL) != 0) {
    free(e);
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "event_create: out of host memory");
  }
  *out = e;
  return NULL;
}

void ocl_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *e) {
  (void)dev;
  if (e == NULL)
    return;
  if (e->event != NULL)
    clReleaseEvent(e->event);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

/* Replaces the captured point with `ev` (which may be NULL: complete). */
static void event_set(tyto_plugin_event *e, cl_event ev, cl_context ctx) {
  pthread_mutex_lock(&e->lock);
  cl_event old = e->event;
  e->event = ev;
  e->context = ctx;
  pthread_mutex_unlock(&e->lock);
  if (old != NULL)
    clReleaseEvent(old);
}

/* The captured cl_event with a reference the caller releases, or NULL. */
static cl_event event_get(tyto_plugin_event *e, cl_context *ctx) {
  pthread_mutex_lock(&e->lock);
  cl_event ev = e->event;
  if (ev != NULL)
    clRetainEvent(ev);
  *ctx = e->context;
  pthread_mutex_unlock(&e->lock);
  return ev;
}

tyto_plugin_error *ocl_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *e,
                                    tyto_plugin_stream *s) {
  if (e == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "event_record: the event is NULL");
  if (s == NULL) {
    /* Work of the NULL stream is complete when its call returns. */
    event_set(e, NULL, NULL);
    return NULL;
  }
  /* The ABI does not say whether `dev` is the event's or the stream's
   * device; the stream's own device is the one that matters. */
  dev = s->dev;
  cl_event ev = NULL;
  cl_int rc = clEnqueueMarkerWithWaitList(s->queue, 0, NULL, &ev);
  if (rc != CL_SUCCESS)
    return ocl_error_cl(HOST(dev), "clEnqueueMarkerWithWaitList", rc,
                        "recording an event on a stream of \"%s\"",
                        dev->info->name);
  /* Submit the stream's work: a caller may poll event_query() or wait from
   * another stream, and unflushed commands need not ever start. */
  clFlush(s->queue);
  event_set(e, ev, dev->context);
  return NULL;
}

tyto_plugin_error *ocl_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *e) {
  if (e == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "event_synchronize: the event is NULL");
  cl_context ctx;
  cl_event ev = event_get(e, &ctx);
  if (ev == NULL)
    return NULL;
  return ocl_wait_sync(dev, ev, "work before the event");
}

tyto_plugin_error *ocl_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, tyto_plugin_event *e) {
  if (e == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "event_wait: the event is NULL");
  if (s == NULL)
    return ocl_event_synchronize(dev, e);
  /* `dev` may be the event's device while `s` is another device's
   * stream (the ABI allows both readings); the stream's device decides. */
  dev = s->dev;
  tyto_plugin_error *err;
  cl_context ctx;
  cl_event ev = event_get(e, &ctx);
  if (ev == NULL)
    return NULL;
  if (ctx != dev->context) {
    /* Another device's context: see the file comment. */
    return ocl_wait_sync(dev, ev, "work before the awaited event");
  }
  if ((err = ocl_stream_reserve(s)) != NULL) {
    clReleaseEvent(ev);
    return err;
  }
  cl_event barrier = NULL;
  cl_int rc = clEnqueueBarrierWithWaitList(s->queue, 1, &ev, &barrier);
  clReleaseEvent(ev);
  if (rc != CL_SUCCESS)
    return ocl_error_cl(HOST(dev), "clEnqueueBarrierWithWaitList", rc,
                        "making a stream of \"%s\" wait for an event",
                        dev->info->name);
  /* A failed awaited command fails the barrier; tracking it carries the
   * failure to this stream's synchronize. */
  ocl_stream_track(s, barrier, "wait for an event");
  return NULL;
}

tyto_plugin_error *ocl_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *e, int *complete) {
  if (e == NULL || complete == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "event_query: the event or the result is NULL");
  *complete = 1;
  cl_context ctx;
  cl_event ev = event_get(e, &ctx);
  if (ev == NULL)
    return NULL;
  cl_int status = event_status(ev);
  clReleaseEvent(ev);
  if (status >= CL_COMPLETE) {
    *complete = status == CL_COMPLETE;
    return NULL;
  }
  return ocl_error(HOST(dev), ocl_code_for(status),
                   "the work before the event failed with %s (%d)",
                   ocl_code_name(status), (int)status);
}
