/*
 * Streamed sends (tyto_program_stream_sends): during phase 0, each send is
 * copied to host memory as soon as the launch that completes it is queued,
 * and handed to the caller's function once the copy has landed, while the
 * device goes on with the rest of the backward pass. Data-parallel
 * training reduces a gradient while the next ones are still computed
 * (parallel/dp.c).
 *
 * A send is ready after the last launch of its stage's phase that writes
 * any of its bytes (its producer, a fused kernel's output, a workspace in
 * its range), or at the phase's start when an earlier phase wrote it.
 * Its copy is queued on its device's stream right after that launch, with
 * an event behind it; after the whole phase is queued the sends are
 * delivered in the order they become ready, each once its event has
 * completed. A range replayed as a graph queues every copy behind the
 * graph: the sends then arrive together at the end of the replay.
 *
 * On a device whose memory is the host's (TYTO_DEVICE_UNIFIED_MEMORY: the
 * CPU plugin) nothing is copied: the caller is handed the send's own
 * memory, which the planner gives to the send alone from its launch until
 * the program's next run (compile/memory.c), once the event behind its
 * last launch has completed.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdlib.h>

#include "sends.h"
#include "program.h"
#include "../runtime/error.h"

static int overlaps(const exec_slot *s, uint32_t dev,
                    const tyto_plugin_buffer *buf, uint64_t off,
                    uint64_t bytes) {
  return s->dev == dev && s->buf == buf && off < s->offset + s->bytes &&
         s->offset < off + bytes;
}

/* 1 + the index in p->launch of the last launch of phase `stage` that
 * writes slot s; the phase's first index when none does (an input, a
 * parameter, a value of an earlier phase); SIZE_MAX when a copy between
 * devices writes it (ready once the range's copies are done). */
static size_t ready_index(const tyto_program *p, int s, size_t stage) {
  const exec_slot *sl = &p->slots[s];
  if (sl->xfer)
    return SIZE_MAX;
  size_t ready = p->phase_at[stage];
  for (size_t i = p->phase_at[stage]; i < p->phase_at[stage + 1]; i++) {
    const exec_kernel *k = &p->kernels[p->launch[i]];
    if (k->skip || k->xfer)
      continue;
    int writes = k->workspace && k->workspace_bytes &&
                 overlaps(sl, k->dev, k->workspace, k->workspace_offset,
                          k->workspace_bytes);
    for (uint32_t j = 0; j < k->n_out && !writes; j++) {
      int o = k->out[j];
      if (o >= 0) {
        const exec_slot *w = &p->slots[o];
        writes = overlaps(sl, w->dev, w->buf, w->offset, w->bytes);
      }
    }
    if (writes)
      ready = i + 1;
  }
  return ready;
}

static int by_ready(const void *a, const void *b) {
  const exec_sent *x = a, *y = b;
  if (x->stage != y->stage)
    return x->stage < y->stage ? -1 : 1;
  if (x->ready != y->ready)
    return x->ready < y->ready ? -1 : 1;
  return x->send < y->send ? -1 : x->send > y->send;
}

void exec_sends_free(tyto_program *p) {
  for (size_t j = 0; j < p->n_streamed; j++) {
    exec_sent *x = &p->streamed[j];
    uint32_t d = p->slots[p->send_slot[x->send]].dev;
    if (x->ev)
      exec_fns(p, d)->event_destroy(exec_handle(p, d), x->ev);
    if (x->pinned)
      exec_fns(p, d)->host_free_pinned(exec_handle(p, d), x->host);
    else if (!x->mapped)
      free(x->host);
  }
  free(p->streamed);
  p->streamed = NULL;
  p->n_streamed = 0;
  p->send_fn = NULL;
  p->send_user = NULL;
}

tyto_status tyto_program_stream_sends(tyto_program *p, tyto_program_send_fn fn,
                                      void *user) {
  static const char fn_name[] = "tyto_program_stream_sends";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn_name);
  exec_sends_free(p);
  if (!fn)
    return TYTO_OK;
  if (!p->n_sends)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: the program has no exchanges (compile it with "
                   "tyto_program_options.n_exchanges)",
                   fn_name);
  p->streamed = calloc(p->n_sends, sizeof *p->streamed);
  if (!p->streamed)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn_name);
  p->n_streamed = p->n_sends;
  for (size_t i = 0; i < p->n_sends; i++) {
    exec_sent *x = &p->streamed[i];
    const exec_slot *sl = &p->slots[p->send_slot[i]];
    const tyto_plugin_device_fns *f = exec_fns(p, sl->dev);
    tyto_plugin_device *d = exec_handle(p, sl->dev);
    size_t size = sl->bytes ? (size_t)sl->bytes : 1;
    x->send = i;
    x->stage = p->send_stage[i];
    x->ready = ready_index(p, p->send_slot[i], x->stage);
    x->bytes = (size_t)sl->bytes;
    tyto_plugin_error *e = f->event_create(d, &x->ev);
    if (e) {
      x->ev = NULL;
      exec_sends_free(p);
      return rt_fail_plugin(e, "%s: creating an event on %s failed", fn_name,
                            exec_dev_id(p, sl->dev));
    }
    void *own = NULL;
    if (f->buffer_host_ptr &&
        (p->devs[sl->dev].dev->info.flags & TYTO_DEVICE_UNIFIED_MEMORY) &&
        sl->buf && (own = f->buffer_host_ptr(d, sl->buf))) {
      x->host = (char *)own + sl->offset;
      x->mapped = 1;
    } else if (f->host_alloc_pinned && f->host_free_pinned &&
               (p->devs[sl->dev].dev->info.flags & TYTO_DEVICE_PINNED_HOST) &&
               !f->host_alloc_pinned(d, size, &x->host) && x->host) {
      x->pinned = 1;
    } else if (posix_memalign(&x->host, 64, size) != 0) {
      x->host = NULL;
      exec_sends_free(p);
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory for send %zu (%zu bytes)", fn_name,
                     i, size);
    }
  }
  qsort(p->streamed, p->n_streamed, sizeof *p->streamed, by_ready);
  p->send_fn = fn;
  p->send_user = user;
  return TYTO_OK;
}

tyto_status tyto_program_send_order(const tyto_program *p, size_t *order,
                                    size_t n) {
  static const char fn[] = "tyto_program_send_order";
  if (!p || (!order && n))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   p ? "order" : "program");
  if (n != p->n_sends)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: n is %zu; the program has %zu sends", fn, n,
                   p->n_sends);
  if (p->n_streamed) {
    for (size_t j = 0; j < n; j++)
      order[j] = p->streamed[j].send;
    return TYTO_OK;
  }
  exec_sent *v = malloc((n ? n : 1) * sizeof *v);
  if (!v)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  for (size_t i = 0; i < n; i++) {
    v[i].send = i;
    v[i].stage = p->send_stage[i];
    v[i].ready = ready_index(p, p->send_slot[i], v[i].stage);
  }
  qsort(v, n, sizeof *v, by_ready);
  for (size_t j = 0; j < n; j++)
    order[j] = v[j].send;
  free(v);
  return TYTO_OK;
}

void exec_sends_begin(tyto_program *p, size_t stage) {
  size_t j = 0;
  while (j < p->n_streamed && p->streamed[j].stage < stage)
    j++;
  p->next_streamed = p->first_streamed = j;
  p->stream_stage = stage;
}

tyto_plugin_error *exec_sends_queue(tyto_program *p, size_t done,
                                    uint32_t *dev) {
  for (; p->next_streamed < p->n_streamed; p->next_streamed++) {
    exec_sent *x = &p->streamed[p->next_streamed];
    if (x->stage != p->stream_stage || x->ready > done)
      break;
    const exec_slot *sl = &p->slots[p->send_slot[x->send]];
    const tyto_plugin_device_fns *f = exec_fns(p, sl->dev);
    tyto_plugin_device *d = exec_handle(p, sl->dev);
    tyto_plugin_stream *s = p->devs[sl->dev].stream;
    tyto_plugin_error *e = NULL;
    if (x->bytes && !x->mapped)
      e = f->copy_d2h(d, s, x->host, sl->buf, sl->offset, x->bytes);
    if (!e)
      e = f->event_record(d, x->ev, s);
    if (e) {
      *dev = sl->dev;
      return e;
    }
  }
  return NULL;
}

tyto_plugin_error *exec_sends_deliver(tyto_program *p, uint32_t *dev) {
  tyto_plugin_error *e = exec_sends_queue(p, SIZE_MAX, dev);
  for (size_t j = p->first_streamed;
       j < p->n_streamed && p->streamed[j].stage == p->stream_stage && !e;
       j++) {
    exec_sent *x = &p->streamed[j];
    uint32_t sd = p->slots[p->send_slot[x->send]].dev;
    e = exec_fns(p, sd)->event_synchronize(exec_handle(p, sd), x->ev);
    if (e)
      *dev = sd;
    else
      p->send_fn(p->send_user, x->send, x->host, x->bytes);
  }
  return e;
}
