/*
 * Streams and events. Streams are non-blocking so they never serialise with
 * the legacy default stream (which other libraries in the process may use);
 * events carry no timing, which makes record/wait cheaper.
 */
#include <stdlib.h>

#include "cuda_plugin.h"

/* A NULL stream means "no stream": for event record/wait that is the
 * legacy default stream, which the synchronous copies use. */
static cudaStream_t raw(const tyto_plugin_stream *s) {
  return s != NULL ? s->stream : cudaStreamLegacy;
}

tyto_plugin_error *tcu_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_stream *s;
  tyto_plugin_error *err;
  cudaError_t e;
  if (out == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "stream_create: out is NULL");
  *out = NULL;
  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  s = calloc(1, sizeof *s);
  if (s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "stream_create: out of host memory");
  e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(s);
    return tcu_cuda_error(host, e, "cuda:%d: cudaStreamCreateWithFlags",
                          dev->index);
  }
  s->device = dev->index;
  *out = s;
  return NULL;
}

/* The ABI promises the stream's work is finished when this returns (the
 * host frees buffers next); cudaStreamDestroy alone would not wait. */
void tcu_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s) {
  const tyto_plugin_host *host = dev->state->host;
  cudaError_t e;
  if (s == NULL)
    return;
  e = cudaSetDevice(s->device);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(s->stream);
  if (e != cudaSuccess)
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: work on a stream being destroyed failed: %s", s->device,
              cudaGetErrorName(e));
  e = cudaStreamDestroy(s->stream);
  if (e != cudaSuccess)
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: cudaStreamDestroy failed: %s", s->device,
              cudaGetErrorName(e));
  (void)cudaGetLastError();
  free(s);
}

tyto_plugin_error *tcu_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "stream_synchronize: stream is NULL");
  if ((err = tcu_use(host, s->device)) != NULL)
    return err;
  e = cudaStreamSynchronize(s->stream);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaStreamSynchronize", s->device);
  return NULL;
}

/* A CUDA event that was never recorded already counts as complete for
 * query, synchronize and stream waits, as the ABI wants of a new event. */
tyto_plugin_error *tcu_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_event *ev;
  tyto_plugin_error *err;
  cudaError_t e;
  if (out == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_create: out is NULL");
  *out = NULL;
  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  ev = calloc(1, sizeof *ev);
  if (ev == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "event_create: out of host memory");
  e = cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(ev);
    return tcu_cuda_error(host, e, "cuda:%d: cudaEventCreateWithFlags",
                          dev->index);
  }
  ev->device = dev->index;
  *out = ev;
  return NULL;
}

void tcu_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *ev) {
  const tyto_plugin_host *host = dev->state->host;
  cudaError_t e;
  if (ev == NULL)
    return;
  e = cudaSetDevice(ev->device);
  if (e == cudaSuccess)
    e = cudaEventDestroy(ev->event);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: cudaEventDestroy failed: %s", ev->device,
              cudaGetErrorName(e));
  }
  free(ev);
}

tyto_plugin_error *tcu_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *ev,
                                    tyto_plugin_stream *s) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (ev == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_record: event is NULL");
  /* CUDA requires event and stream of one device (context). */
  if (s != NULL && s->device != ev->device)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_record: the event belongs to cuda:%d, the "
                           "stream to cuda:%d; record on a stream of the "
                           "event's device",
                           ev->device, s->device);
  if ((err = tcu_use(host, ev->device)) != NULL)
    return err;
  e = cudaEventRecord(ev->event, raw(s));
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaEventRecord", ev->device);
  return NULL;
}

/* The stream may belong to another device of this plugin: CUDA allows a
 * stream to wait on an event of any device in the process. */
tyto_plugin_error *tcu_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s,
                                  tyto_plugin_event *ev) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  int device = s != NULL ? s->device : dev->index;
  if (ev == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_wait: event is NULL");
  if ((err = tcu_use(host, device)) != NULL)
    return err;
  e = cudaStreamWaitEvent(raw(s), ev->event, 0);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e,
                          "cudaStreamWaitEvent (stream of cuda:%d, event of "
                          "cuda:%d)",
                          device, ev->device);
  return NULL;
}

tyto_plugin_error *tcu_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *ev) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (ev == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_synchronize: event is NULL");
  if ((err = tcu_use(host, ev->device)) != NULL)
    return err;
  e = cudaEventSynchronize(ev->event);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaEventSynchronize", ev->device);
  return NULL;
}

/* Pending is not a failure: it only clears *complete. */
tyto_plugin_error *tcu_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *ev, int *complete) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (ev == NULL || complete == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "event_query: %s is NULL",
                           ev == NULL ? "event" : "complete");
  *complete = 0;
  if ((err = tcu_use(host, ev->device)) != NULL)
    return err;
  e = cudaEventQuery(ev->event);
  if (e == cudaErrorNotReady) {
    /* Clear it so the runtime's last-error slot stays meaningful. */
    (void)cudaGetLastError();
    return NULL;
  }
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaEventQuery", ev->device);
  *complete = 1;
  return NULL;
}
