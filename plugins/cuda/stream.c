/*
 * Streams and events. Streams are non-blocking so they never serialise with
 * the legacy default stream (which other libraries in the process may use);
 * events carry no timing, which makes record/wait cheaper.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

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
  /* The fault words (cuda_plugin.h). Without them the kernels that need
   * them read their inputs back at launch instead, so a failure here only
   * costs speed. */
  void *host_words = NULL;
  if (cudaHostAlloc(&host_words, 4 * sizeof(uint32_t), cudaHostAllocMapped) ==
      cudaSuccess) {
    void *dev_words = NULL;
    memset(host_words, 0, 4 * sizeof(uint32_t));
    if (cudaHostGetDevicePointer(&dev_words, host_words, 0) == cudaSuccess) {
      s->fault = host_words;
      s->fault_dev = dev_words;
    } else {
      (void)cudaFreeHost(host_words);
    }
  }
  (void)cudaGetLastError();
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
  if (s->fault != NULL && cudaFreeHost((void *)s->fault) != cudaSuccess)
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: cudaFreeHost failed for a stream's fault words",
              s->device);
  (void)cudaGetLastError();
  free(s);
}

void tcu_note_launch(tyto_plugin_stream *s, uint32_t op) {
  if (s->capturing)
    s->cap_ops[s->n_cap++ % TCU_RECENT] = op;
  else
    s->recent[s->n_recent++ % TCU_RECENT] = op;
}

/* "matmul, add, relu" or "..., conv2d, relu: the last 8 of 40 launches",
 * oldest first, into buf. */
static void recent_ops(const tyto_plugin_stream *s, char *buf, size_t size) {
  uint64_t n = s->n_recent, first = n > TCU_RECENT ? n - TCU_RECENT : 0;
  size_t used = 0;
  buf[0] = '\0';
  if (n == 0) {
    snprintf(buf, size, "copies only");
    return;
  }
  for (uint64_t i = first; i < n && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s",
                             i > first ? ", " : "launches of ",
                             tcu_op_name(s->recent[i % TCU_RECENT]));
  if (first > 0 && used < size)
    snprintf(buf + used, size - used, ": the last %d of %llu", TCU_RECENT,
             (unsigned long long)n);
}

/* The fault a kernel on s reported (cuda_plugin.h), as an error; the words
 * are cleared for the next run. After the stream has synchronised. */
static tyto_plugin_error *fault_error(tyto_plugin_device *dev,
                                      tyto_plugin_stream *s) {
  uint32_t code = s->fault[0];
  uint64_t bits = (uint64_t)s->fault[2] | (uint64_t)s->fault[3] << 32;
  double v;
  memcpy(&v, &bits, sizeof v);
  s->fault[0] = s->fault[2] = s->fault[3] = 0;
  uint32_t op = code - 1;
  if (op >= TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "%s on cuda:%d: step %g is not in [0, "
                                    "2^53] (sdk/docs/random.md)",
                                    tcu_op_name(op), s->device, v);
  return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "%s on cuda:%d: a kernel refused its input",
                                  tcu_op_name(op), s->device);
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
  if (e != cudaSuccess) {
    char ops[160];
    recent_ops(s, ops, sizeof ops);
    s->n_recent = 0;
    return tcu_cuda_error(host, e,
                          "cuda:%d: the work queued since the stream's last "
                          "synchronisation (%s)",
                          s->device, ops);
  }
  s->n_recent = 0;
  if (s->fault != NULL && s->fault[0] != 0)
    return fault_error(dev, s);
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

/* ---- graphs ---------------------------------------------------------------
 * Stream capture: between graph_begin and graph_end the stream records
 * instead of running. ThreadLocal mode, so that other threads (replicas
 * of a data-parallel step on other devices) may keep allocating and
 * synchronising while this one records. */

tyto_plugin_error *tcu_graph_begin(tyto_plugin_device *dev,
                                   tyto_plugin_stream *s) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "graph_begin: stream is NULL");
  if ((err = tcu_use(host, s->device)) != NULL)
    return err;
  e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaStreamBeginCapture",
                          s->device);
  s->capturing = 1;
  s->n_cap = 0;
  return NULL;
}

tyto_plugin_error *tcu_graph_end(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_graph **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaGraph_t graph = NULL;
  cudaError_t e;
  if (out == NULL || s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "graph_end: %s is NULL", s ? "out" : "stream");
  *out = NULL;
  if ((err = tcu_use(host, s->device)) != NULL)
    return err;
  /* Ends the capture whatever happened during it, so the stream runs
   * again; a capture a forbidden call invalidated fails here. */
  s->capturing = 0;
  e = cudaStreamEndCapture(s->stream, &graph);
  if (e != cudaSuccess) {
    err = tcu_cuda_error(host, e, "cuda:%d: cudaStreamEndCapture", s->device);
    if (graph != NULL)
      (void)cudaGraphDestroy(graph);
    return err;
  }
  tyto_plugin_graph *g = calloc(1, sizeof *g);
  if (g == NULL) {
    (void)cudaGraphDestroy(graph);
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "graph_end: out of host memory");
  }
  g->device = s->device;
  memcpy(g->ops, s->cap_ops, sizeof g->ops);
  g->n_ops = s->n_cap;
  e = cudaGraphInstantiate(&g->exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    free(g);
    return tcu_cuda_error(host, e, "cuda:%d: cudaGraphInstantiate", s->device);
  }
  /* Uploading now moves the set-up cost out of the first replay. */
  e = cudaGraphUpload(g->exec, s->stream);
  if (e != cudaSuccess) {
    err = tcu_cuda_error(host, e, "cuda:%d: cudaGraphUpload", s->device);
    (void)cudaGraphExecDestroy(g->exec);
    free(g);
    return err;
  }
  *out = g;
  return NULL;
}

tyto_plugin_error *tcu_graph_launch(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    tyto_plugin_graph *g) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (s == NULL || g == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "graph_launch: %s is NULL", s ? "graph" : "stream");
  if (g->device != s->device)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "graph_launch: a graph of cuda:%d on a stream of "
                           "cuda:%d",
                           g->device, s->device);
  if ((err = tcu_use(host, s->device)) != NULL)
    return err;
  e = cudaGraphLaunch(g->exec, s->stream);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaGraphLaunch", s->device);
  uint64_t first = g->n_ops > TCU_RECENT ? g->n_ops - TCU_RECENT : 0;
  for (uint64_t i = first; i < g->n_ops; i++)
    tcu_note_launch(s, g->ops[i % TCU_RECENT]);
  s->n_recent += first; /* the count stays true */
  return NULL;
}

void tcu_graph_destroy(tyto_plugin_device *dev, tyto_plugin_graph *g) {
  const tyto_plugin_host *host = dev->state->host;
  if (g == NULL)
    return;
  if (cudaSetDevice(g->device) != cudaSuccess ||
      cudaGraphExecDestroy(g->exec) != cudaSuccess)
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: cudaGraphExecDestroy failed", g->device);
  (void)cudaGetLastError();
  free(g);
}
