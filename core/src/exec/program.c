/*
 * Programs at run time: launching the kernels in the planned order, each
 * on its device's stream, with the copies between devices; host access to
 * inputs, outputs and parameters; the figures compile left behind. The
 * compile driver that builds a program is compile/compile.c.
 *
 * A run over several devices: every device has one in-order stream. A
 * kernel reads only slots of its own device; a copy between devices is a
 * step of the plan like any kernel. A peer copy is queued on the
 * consumer's stream after an event of the producer's, and the producer
 * waits on the copy's event before it may reuse the source's memory. A
 * staged copy is downloaded on the producer's stream in chunks, each
 * marked by an event; the upload is queued only when a consumer kernel is
 * about to be launched (or at the end of the run), so that the host keeps
 * queueing independent work on other devices meanwhile, and chunk i goes
 * up while chunk i + 1 still comes down.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "program.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

static const char *slot_text(const tyto_program *p, const exec_slot *sl,
                             char *buf, const char *is) {
  const tyto_tensor *t = sl->t;
  size_t size = EXEC_DESC;
  uint64_t bytes = sl->bytes;
  long long index = (long long)exec_user_index(p, t);
  char dims[TYTO_MAX_RANK * 21 + 1] = "";
  size_t d = 0;
  for (int i = 0; i < t->rank; i++)
    d += (size_t)snprintf(dims + d, sizeof dims - d, "%s%lld", i ? "," : "",
                          (long long)t->shape[i]);
  /* One bounded call: a long name is cut, never written past buf. */
  snprintf(buf, size, "%s%s%.64s%s (#%lld)%s%s[%s] (%llu bytes)",
           tyto_kind_name(t->kind), t->name ? " '" : "", t->name ? t->name : "",
           t->name ? "'" : "", index, is, tyto_dtype_name(t->dtype), dims,
           (unsigned long long)bytes);
  return buf;
}

const char *exec_slot_desc(const tyto_program *p, const exec_slot *sl,
                           char *buf) {
  return slot_text(p, sl, buf, " is ");
}

const char *exec_slot_name(const tyto_program *p, const exec_slot *sl,
                           char *buf) {
  return slot_text(p, sl, buf, ", ");
}

int64_t exec_user_index(const tyto_program *p, const tyto_tensor *t) {
  return p->user_index && t->index >= 0 ? p->user_index[t->index] : -1;
}

double exec_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void drop(tyto_plugin_error *e) {
  if (e)
    rt_error_free(e);
}

void exec_release(tyto_program *p) {
  /* Nothing may still run: wait for every stream first. */
  for (size_t i = 0; i < p->n_devs; i++)
    if (p->devs[i].stream)
      drop(exec_fns(p, (uint32_t)i)
               ->stream_synchronize(exec_handle(p, (uint32_t)i),
                                    p->devs[i].stream));
  exec_sends_free(p);
  for (size_t r = 0; p->graphs && r < p->n_phases + 1; r++)
    if (p->graphs[r].g)
      exec_fns(p, 0)->graph_destroy(exec_handle(p, 0), p->graphs[r].g);
  for (size_t i = 0; i < p->n_xfers; i++) {
    exec_xfer *x = &p->xfers[i];
    uint32_t a = p->slots[x->src].dev, b = p->slots[x->dst].dev;
    for (uint32_t c = 0; c < EXEC_MAX_CHUNKS; c++)
      if (x->done_src[c])
        exec_fns(p, a)->event_destroy(exec_handle(p, a), x->done_src[c]);
    if (x->done_dst)
      exec_fns(p, b)->event_destroy(exec_handle(p, b), x->done_dst);
    if (x->pinned_host)
      exec_fns(p, a)->host_free_pinned(exec_handle(p, a), x->staging);
    else
      free(x->staging);
  }
  for (size_t i = 0; i < p->n_kernels; i++) {
    exec_kernel *k = &p->kernels[i];
    const tyto_plugin_device_fns *f = exec_fns(p, k->dev);
    tyto_plugin_device *d = exec_handle(p, k->dev);
    if (k->k && f->kernel_release)
      f->kernel_release(d, k->k);
    if (k->workspace_owned)
      rt_buffer_free(p->devs[k->dev].dev, k->workspace);
    for (size_t j = 0; j < EXEC_MAX_IO; j++)
      rt_buffer_free(p->devs[k->dev].dev, k->scratch[j]);
    free(k->in_l);
    free(k->blob);
  }
  for (size_t i = 0; i < p->n_slots; i++)
    if (p->slots[i].owned)
      rt_buffer_free(p->devs[p->slots[i].dev].dev, p->slots[i].buf);
  for (size_t i = 0; i < p->n_devs; i++) {
    const tyto_plugin_device_fns *f = exec_fns(p, (uint32_t)i);
    tyto_plugin_device *d = exec_handle(p, (uint32_t)i);
    if (p->devs[i].stream)
      f->stream_destroy(d, p->devs[i].stream);
    rt_buffer_free(p->devs[i].dev, p->devs[i].arena);
  }
}

void tyto_program_free(tyto_program *p) {
  if (!p)
    return;
  if (p->profile && p->prof_runs)
    exec_profile_report(p);
  free(p->prof_seconds);
  if (p->devs)
    exec_release(p);
  free(p->devs);
  free(p->xfers);
  free(p->copies);
  free(p->kernels);
  free(p->launch);
  free(p->fused_first);
  free(p->fused_next);
  free(p->slots);
  free(p->slot_of);
  free(p->user_slot);
  free(p->user_index);
  free(p->upd_param);
  free(p->upd_value);
  free(p->send_slot);
  free(p->recv_index);
  free(p->send_stage);
  free(p->phase_at);
  free(p->graphs);
  free(p->outputs);
  free(p->out_slot);
  free(p->pass_stats);
  tyto_graph_free(p->graph);
  struct tyto_context *ctx = p->ctx;
  free(p);
  rt_context_release(ctx); /* the last: its devices close with it */
}

size_t tyto_program_output_count(const tyto_program *p) {
  return p ? p->n_outputs : 0;
}

tyto_tensor *tyto_program_output(const tyto_program *p, size_t i) {
  return p && i < p->n_outputs ? p->outputs[i] : NULL;
}

/* The slot of t in p when t is a node of `kind` the program uses. */
static int find(const tyto_program *p, const char *fn, const tyto_tensor *t,
                tyto_kind kind, tyto_status *st) {
  *st = TYTO_ERR_INVALID_ARGUMENT;
  if (!p) {
    rt_fail(*st, "%s: program is NULL", fn);
    return -1;
  }
  if (!t) {
    rt_fail(*st, "%s: tensor is NULL", fn);
    return -1;
  }
  const char *kname = tyto_kind_name(kind);
  if (t->kind != kind) {
    const char *has = tyto_kind_name(t->kind);
    rt_fail(*st, "%s: tensor #%lld is %s %s tensor, not %s %s", fn,
            (long long)t->index, strchr("aeiou", has[0]) ? "an" : "a", has,
            strchr("aeiou", kname[0]) ? "an" : "a", kname);
    return -1;
  }
  int s = -1;
  if (t->graph == p->src && t->index >= 0 && (size_t)t->index < p->n_graph)
    s = p->user_slot[t->index];
  if (s < 0) {
    rt_fail(*st, "%s: %s %s%s%s(#%lld) is not used by this program", fn, kname,
            t->name ? "'" : "", t->name ? t->name : "", t->name ? "' " : "",
            (long long)t->index);
    return -1;
  }
  *st = TYTO_OK;
  return s;
}

static tyto_status check_bytes(const tyto_program *p, const char *fn,
                               const exec_slot *sl, size_t bytes) {
  if (bytes == sl->bytes)
    return TYTO_OK;
  char d[EXEC_DESC];
  return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s, got %zu bytes", fn,
                 exec_slot_desc(p, sl, d), bytes);
}

static tyto_status to_device(tyto_program *p, const char *fn, exec_slot *sl,
                             const void *src, size_t bytes) {
  tyto_status st = check_bytes(p, fn, sl, bytes);
  if (st != TYTO_OK)
    return st;
  if (!src && bytes)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
  if (bytes) {
    tyto_plugin_error *e = exec_fns(p, sl->dev)
                               ->copy_h2d(exec_handle(p, sl->dev), NULL,
                                          sl->buf, sl->offset, src, bytes);
    if (e)
      return rt_fail_plugin(e, "%s: copy to %s failed", fn,
                            exec_dev_id(p, sl->dev));
  }
  return TYTO_OK;
}

static tyto_status to_host(tyto_program *p, const char *fn, exec_slot *sl,
                           void *dst, size_t bytes) {
  tyto_status st = check_bytes(p, fn, sl, bytes);
  if (st != TYTO_OK)
    return st;
  if (!dst && bytes)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: dst is NULL", fn);
  if (bytes) {
    tyto_plugin_error *e = exec_fns(p, sl->dev)
                               ->copy_d2h(exec_handle(p, sl->dev), NULL, dst,
                                          sl->buf, sl->offset, bytes);
    if (e)
      return rt_fail_plugin(e, "%s: copy from %s failed", fn,
                            exec_dev_id(p, sl->dev));
  }
  return TYTO_OK;
}

tyto_status tyto_program_set_input(tyto_program *p, tyto_tensor *input,
                                   const void *data, size_t bytes) {
  static const char fn[] = "tyto_program_set_input";
  tyto_status st;
  int s = find(p, fn, input, TYTO_KIND_INPUT, &st);
  if (s < 0)
    return st;
  if ((st = to_device(p, fn, &p->slots[s], data, bytes)) == TYTO_OK)
    p->slots[s].set = 1;
  return st;
}

void *exec_input_in_place(tyto_program *p, const tyto_tensor *t, size_t bytes) {
  tyto_status st;
  int s = find(p, "exec_input_in_place", t, TYTO_KIND_INPUT, &st);
  if (s < 0) {
    rt_clear_error();
    return NULL;
  }
  const exec_slot *sl = &p->slots[s];
  const tyto_plugin_device_fns *f = exec_fns(p, sl->dev);
  if (sl->bytes != bytes || !sl->buf || sl->src >= 0 ||
      sl->buf == p->devs[sl->dev].arena || !f->buffer_host_ptr ||
      !(p->devs[sl->dev].dev->info.flags & TYTO_DEVICE_UNIFIED_MEMORY))
    return NULL;
  char *h = f->buffer_host_ptr(exec_handle(p, sl->dev), sl->buf);
  return h ? h + sl->offset : NULL;
}

void exec_input_written(tyto_program *p, const tyto_tensor *t) {
  tyto_status st;
  int s = find(p, "exec_input_written", t, TYTO_KIND_INPUT, &st);
  if (s >= 0)
    p->slots[s].set = 1;
}

tyto_status tyto_program_write_parameter(tyto_program *p, tyto_tensor *param,
                                         const void *src, size_t bytes) {
  static const char fn[] = "tyto_program_write_parameter";
  tyto_status st;
  int s = find(p, fn, param, TYTO_KIND_PARAMETER, &st);
  return s < 0 ? st : to_device(p, fn, &p->slots[s], src, bytes);
}

tyto_status tyto_program_read_parameter(tyto_program *p, tyto_tensor *param,
                                        void *dst, size_t bytes) {
  static const char fn[] = "tyto_program_read_parameter";
  tyto_status st;
  int s = find(p, fn, param, TYTO_KIND_PARAMETER, &st);
  return s < 0 ? st : to_host(p, fn, &p->slots[s], dst, bytes);
}

tyto_status tyto_program_read_output(tyto_program *p, size_t i, void *dst,
                                     size_t bytes) {
  static const char fn[] = "tyto_program_read_output";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  if (i >= p->n_outputs)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: output %zu out of range (the program has %zu)", fn, i,
                   p->n_outputs);
  if (!p->ran)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   p->failed ? "%s: the program's last run failed, so its "
                               "outputs hold no result; run it again once "
                               "the cause is fixed"
                             : "%s: the program has not run yet; call "
                               "tyto_program_run first",
                   fn);
  return to_host(p, fn, &p->slots[p->out_slot[i]], dst, bytes);
}

static tyto_plugin_binding bind(tyto_plugin_buffer *b, uint64_t offset) {
  tyto_plugin_binding x;
  x.struct_size = sizeof x;
  x.buffer = b;
  x.offset = offset;
  return x;
}

/* Where a failure happened, for the message: the device and the copy. */
typedef struct run_fail {
  uint32_t dev;
  const char *what; /* "a launch", "a copy from cpu:0" ... */
} run_fail;

/* Chunk c of a staged copy of `bytes`: [*off, *off + *len). */
static void chunk(const exec_xfer *x, uint64_t bytes, uint32_t c, uint64_t *off,
                  uint64_t *len) {
  uint64_t per = (bytes + x->n_chunks - 1) / x->n_chunks;
  *off = (uint64_t)c * per;
  *len = *off >= bytes ? 0 : (bytes - *off < per ? bytes - *off : per);
}

/* The producer's half of copy x: queued at the copy's place in the order.
 * A peer copy is queued whole, on the consumer's stream. */
static tyto_plugin_error *xfer_start(tyto_program *p, exec_xfer *x,
                                     run_fail *where) {
  const exec_slot *src = &p->slots[x->src], *dst = &p->slots[x->dst];
  uint32_t a = src->dev, b = dst->dev;
  const tyto_plugin_device_fns *fa = exec_fns(p, a), *fb = exec_fns(p, b);
  tyto_plugin_device *da = exec_handle(p, a), *db = exec_handle(p, b);
  tyto_plugin_stream *sa = p->devs[a].stream, *sb = p->devs[b].stream;
  tyto_plugin_error *e = NULL;
  where->dev = a;
  if (!src->bytes)
    return NULL;
  if (x->route == EXEC_ROUTE_PEER) {
    /* b waits for a's producer; a waits for the copy before it may reuse
     * the source's memory. */
    if ((e = fa->event_record(da, x->done_src[0], sa)) ||
        (e = fb->event_wait(db, sb, x->done_src[0])))
      return e;
    where->dev = b;
    if ((e = fb->copy_peer(db, sb, dst->buf, dst->offset, da, src->buf,
                           src->offset, src->bytes)) ||
        (e = fb->event_record(db, x->done_dst, sb)))
      return e;
    where->dev = a;
    return fa->event_wait(da, sa, x->done_dst);
  }
  for (uint32_t c = 0; c < x->n_chunks && !e; c++) {
    uint64_t off, len;
    chunk(x, src->bytes, c, &off, &len);
    if (len && !(e = fa->copy_d2h(da, sa, (unsigned char *)x->staging + off,
                                  src->buf, src->offset + off, len)))
      e = fa->event_record(da, x->done_src[c], sa);
  }
  x->pending = !e;
  return e;
}

/* The consumer's half of a staged copy: each chunk is queued on the
 * consumer's stream once the producer has downloaded it. */
static tyto_plugin_error *xfer_finish(tyto_program *p, exec_xfer *x,
                                      run_fail *where) {
  const exec_slot *src = &p->slots[x->src], *dst = &p->slots[x->dst];
  uint32_t a = src->dev, b = dst->dev;
  tyto_plugin_error *e = NULL;
  x->pending = 0;
  for (uint32_t c = 0; c < x->n_chunks && !e; c++) {
    uint64_t off, len;
    chunk(x, src->bytes, c, &off, &len);
    if (!len)
      continue;
    where->dev = a;
    if ((e = exec_fns(p, a)->event_synchronize(exec_handle(p, a),
                                               x->done_src[c])))
      break;
    where->dev = b;
    e = exec_fns(p, b)->copy_h2d(exec_handle(p, b), p->devs[b].stream, dst->buf,
                                 dst->offset + off,
                                 (unsigned char *)x->staging + off, len);
  }
  return e;
}

/* Finishes the staged copies that write the slots kernel k reads. */
static tyto_plugin_error *inputs_ready(tyto_program *p, const exec_kernel *k,
                                       run_fail *where) {
  tyto_plugin_error *e = NULL;
  for (uint32_t j = 0; j < k->n_in && !e; j++) {
    const exec_slot *sl = &p->slots[k->in[j]];
    if (sl->xfer && p->xfers[sl->xfer - 1].pending)
      e = xfer_finish(p, &p->xfers[sl->xfer - 1], where);
  }
  return e;
}

static tyto_plugin_error *launch(tyto_program *p, exec_kernel *k) {
  tyto_plugin_binding in[EXEC_MAX_IO], out[EXEC_MAX_IO], ws;
  for (uint32_t j = 0; j < k->n_in; j++) {
    const exec_slot *sl = &p->slots[k->in[j]];
    in[j] = bind(sl->buf, sl->offset);
  }
  for (uint32_t j = 0; j < k->n_out; j++) {
    const exec_slot *sl = k->out[j] < 0 ? NULL : &p->slots[k->out[j]];
    out[j] = sl ? bind(sl->buf, sl->offset) : bind(k->scratch[j], 0);
  }
  ws = bind(k->workspace, k->workspace_offset);
  return exec_fns(p, k->dev)->launch(exec_handle(p, k->dev),
                                     p->devs[k->dev].stream, k->k, in, k->n_in,
                                     out, k->n_out, k->workspace ? &ws : NULL);
}

/* Fails when an input the launches [from, to) may read was never set:
 * every input for a whole run, all but the recvs for phase 0, the recvs
 * of stage k - 1 for phase k (the rest were checked by earlier phases). */
static tyto_status check_set(const tyto_program *p, const char *fn, int phase) {
  for (size_t s = 0; s < p->n_slots; s++) {
    const exec_slot *sl = &p->slots[s];
    if (sl->kind != TYTO_KIND_INPUT || sl->set || sl->src >= 0 ||
        (phase == 0 && sl->recv) || (phase > 0 && sl->recv != phase))
      continue;
    char d[EXEC_DESC];
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: %s and was never set; bind it with "
                   "tyto_program_set_input%s",
                   fn, exec_slot_desc(p, sl, d),
                   sl->recv ? " (it receives an exchange: set it after the "
                              "phase that computes its send)"
                            : "");
  }
  return TYTO_OK;
}

/* ---- graphs ---------------------------------------------------------------
 * A one-device program on a plugin that records (CUDA Graphs) runs each
 * range eagerly once, records it on its second run (by then every lazy
 * set-up inside the plugin's launches is done) and replays the recording
 * from then on. Bindings never change between runs (slots, scratch and
 * workspaces are fixed at compile; inputs are copied into their slots), so
 * a replay is the same work as the launches. */

/* Why range [from, to) of p cannot be recorded, into p->graph_note; 0
 * when it can. */
static int graph_refused(tyto_program *p, size_t from, size_t to) {
  const tyto_plugin_device_fns *f = exec_fns(p, 0);
  const char *why = NULL;
  if (p->n_devs != 1 || p->n_xfers)
    why = "programs over several devices are not recorded";
  else if (p->profile)
    why = "TYTO_PROFILE times each launch on its own";
  else if (!f->graph_begin || !f->graph_end || !f->graph_launch ||
           !f->graph_destroy)
    why = "its plugin cannot record graphs";
  if (why) {
    snprintf(p->graph_note, sizeof p->graph_note, "%s", why);
    return 1;
  }
  for (size_t i = from; i < to; i++) {
    const exec_kernel *k = &p->kernels[p->launch[i]];
    if (!k->skip && (k->flags & TYTO_PLUGIN_KERNEL_HOST_SYNC)) {
      snprintf(p->graph_note, sizeof p->graph_note,
               "%s reads device memory back on the host at launch",
               k->update ? "an update copy"
                         : tyto_op_name(p->slots[k->slot].t->op));
      return 1;
    }
  }
  return 0;
}

static tyto_plugin_error *launch(tyto_program *p, exec_kernel *k);

/* Records [from, to) into gr->g. Nothing recorded runs: on failure the
 * caller runs the range eagerly. */
static void graph_record(tyto_program *p, exec_graph *gr, size_t from,
                         size_t to) {
  const tyto_plugin_device_fns *f = exec_fns(p, 0);
  tyto_plugin_device *d = exec_handle(p, 0);
  tyto_plugin_stream *s = p->devs[0].stream;
  tyto_plugin_error *e = f->graph_begin(d, s), *e2 = NULL;
  tyto_plugin_graph *g = NULL;
  if (!e) {
    for (size_t i = from; i < to && !e; i++)
      if (!p->kernels[p->launch[i]].skip)
        e = launch(p, &p->kernels[p->launch[i]]);
    e2 = f->graph_end(d, s, &g);
  }
  if (!e && !e2 && g) {
    gr->g = g;
    rt_log(&p->devs[0].dev->ctx->log, TYTO_LOG_INFO, "tyto",
           "%s: %zu launches recorded as a graph; later runs replay it",
           exec_dev_id(p, 0), to - from);
    return;
  }
  if (g)
    f->graph_destroy(d, g);
  tyto_plugin_error *why = e ? e : e2;
  snprintf(p->graph_note, sizeof p->graph_note, "recording failed: %s",
           why ? rt_error_message(why) : "the plugin returned no graph");
  drop(e);
  drop(e2);
  gr->refused = 1;
  rt_log(&p->devs[0].dev->ctx->log, TYTO_LOG_INFO, "tyto",
         "%s: runs are not recorded as a graph: %s", exec_dev_id(p, 0),
         p->graph_note);
}

/* Launches [from, to) of p->launch, finishes the copies still pending
 * and waits for every device. */
static tyto_status run_range(tyto_program *p, const char *fn, size_t from,
                             size_t to, size_t range) {
  tyto_plugin_error *e = NULL;
  run_fail where = {0, "a launch"};
  double t_run = p->profile ? exec_now() : 0;
  exec_graph *gr = &p->graphs[range];
  /* Range 1 + k is phase k; every phase but the last ends with sends. */
  int streaming = range >= 1 && range < p->n_phases && p->n_streamed;
  if (streaming)
    exec_sends_begin(p, range - 1);
  if (p->no_graphs && !p->graph_note[0])
    snprintf(p->graph_note, sizeof p->graph_note,
             "turned off (tyto_program_options.no_graphs or TYTO_GRAPHS=off)");
  if (!p->no_graphs && !gr->g && !gr->refused && gr->eager_runs >= 1) {
    if (graph_refused(p, from, to))
      gr->refused = 1;
    else
      graph_record(p, gr, from, to);
  }
  if (gr->g) {
    e = exec_fns(p, 0)->graph_launch(exec_handle(p, 0), p->devs[0].stream,
                                     gr->g);
    if (!e)
      p->devs[0].stats.graph_replays++;
    from = to; /* nothing left to launch one by one */
  } else if (from < to) {
    gr->eager_runs++;
  }
  if (streaming && !e) {
    where.what = "a copy of a send";
    e = exec_sends_queue(p, from, &where.dev);
  }
  for (size_t i = from; i < to && !e; i++) {
    exec_kernel *k = &p->kernels[p->launch[i]];
    double t_k = p->profile ? exec_now() : 0;
    if (k->xfer) {
      where.what = "a copy between devices";
      e = xfer_start(p, &p->xfers[k->xfer - 1], &where);
    } else {
      where.what = "a copy between devices";
      if ((e = inputs_ready(p, k, &where)))
        break;
      where.what = "a launch";
      where.dev = k->dev;
      e = launch(p, k);
    }
    if (p->profile && !e) {
      /* A staged copy is timed whole, download and upload. */
      if (k->xfer && p->xfers[k->xfer - 1].pending)
        e = xfer_finish(p, &p->xfers[k->xfer - 1], &where);
      for (size_t d = 0; d < p->n_devs && !e; d++)
        e = exec_fns(p, (uint32_t)d)
                ->stream_synchronize(exec_handle(p, (uint32_t)d),
                                     p->devs[d].stream);
      p->prof_seconds[p->launch[i]] += exec_now() - t_k;
    }
    if (streaming && !e) {
      where.what = "a copy of a send";
      e = exec_sends_queue(p, i + 1, &where.dev);
    }
  }
  /* The copies nothing read in the run (into outputs and parameters). A
   * launch that failed keeps its own description. */
  if (!e)
    where.what = "a copy between devices";
  for (size_t i = 0; i < p->n_xfers && !e; i++)
    if (p->xfers[i].pending)
      e = xfer_finish(p, &p->xfers[i], &where);
  if (streaming && !e) {
    where.what = "a copy of a send";
    e = exec_sends_deliver(p, &where.dev);
  }
  /* Every stream is waited for, failed or not: nothing of this run may
   * still be queued when the caller goes on. */
  tyto_plugin_error *e2 = NULL;
  uint32_t d2 = 0;
  for (size_t d = 0; d < p->n_devs; d++) {
    tyto_plugin_error *x = exec_fns(p, (uint32_t)d)
                               ->stream_synchronize(exec_handle(p, (uint32_t)d),
                                                    p->devs[d].stream);
    if (x && !e2) {
      e2 = x;
      d2 = (uint32_t)d;
    } else {
      drop(x);
    }
  }
  for (size_t i = 0; i < p->n_xfers; i++)
    p->xfers[i].pending = 0;
  if (p->profile) {
    p->prof_total += exec_now() - t_run;
    p->prof_runs += to == p->n_launch;
  }
  if (e) {
    drop(e2);
    return rt_fail_plugin(e, "%s: %s on %s failed", fn, where.what,
                          exec_dev_id(p, where.dev));
  }
  if (e2)
    return rt_fail_plugin(e2, "%s: a kernel on %s failed", fn,
                          exec_dev_id(p, d2));
  return TYTO_OK;
}

tyto_status tyto_program_run(tyto_program *p) {
  static const char fn[] = "tyto_program_run";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  tyto_status st = check_set(p, fn, -1);
  p->next_phase = 0;
  if (st != TYTO_OK)
    return st; /* nothing launched: the outputs are as they were */
  st = run_range(p, fn, 0, p->n_launch, 0);
  /* A failed run leaves the outputs part old, part new: none is readable
   * until a run succeeds. */
  p->ran = st == TYTO_OK;
  p->failed = st != TYTO_OK;
  return st;
}

tyto_status tyto_program_run_phase(tyto_program *p, int phase) {
  static const char fn[] = "tyto_program_run_phase";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  size_t np = p->n_phases;
  if (phase < 0 || (size_t)phase >= np)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: phase %d: expected 0 .. %zu (the program has %zu "
                   "phase%s%s)",
                   fn, phase, np - 1, np, np == 1 ? "" : "s",
                   np == 1 ? ": without exchanges, phase 0 is the whole run"
                           : "");
  if (phase > 0 && p->next_phase != (size_t)phase)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: phase %d needs phase %d run first (since the last "
                   "phase %zu)",
                   fn, phase, phase - 1, np - 1);
  tyto_status st = check_set(p, fn, np > 1 ? phase : -1);
  if (st != TYTO_OK)
    return st;
  size_t from = p->phase_at[phase], to = p->phase_at[phase + 1];
  st = run_range(p, fn, from, to, np > 1 ? 1 + (size_t)phase : 0);
  p->next_phase =
      st == TYTO_OK && (size_t)phase + 1 < np ? (size_t)phase + 1 : 0;
  if (st == TYTO_OK && to == p->n_launch) {
    p->ran = 1;
    p->failed = 0;
  } else if (st != TYTO_OK) {
    p->ran = 0;
    p->failed = 1;
  }
  return st;
}

int tyto_program_phase_count(const tyto_program *p) {
  return p ? (int)p->n_phases : 0;
}

int tyto_program_exchange_stage(const tyto_program *p, size_t i) {
  return p && i < p->n_sends ? (int)p->send_stage[i] : -1;
}

tyto_status tyto_program_read_send(tyto_program *p, size_t i, void *dst,
                                   size_t bytes) {
  static const char fn[] = "tyto_program_read_send";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  if (i >= p->n_sends)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: send %zu out of range (the program has %zu)", fn, i,
                   p->n_sends);
  /* Computed by this step's phases (or by the last whole run). */
  if (p->next_phase ? p->next_phase <= p->send_stage[i] : !p->ran)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: the program has not run phase %zu yet (which "
                   "computes send %zu)",
                   fn, p->send_stage[i], i);
  return to_host(p, fn, &p->slots[p->send_slot[i]], dst, bytes);
}

tyto_status tyto_program_recv_sends(tyto_program *p) {
  static const char fn[] = "tyto_program_recv_sends";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  if (!p->n_sends)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: the program has no exchanges", fn);
  if (!p->next_phase)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: phase 0 has not run since the last phase (%zu), so "
                   "no exchange is due",
                   fn, p->n_phases - 1);
  tyto_status st = TYTO_OK;
  void *host = NULL;
  for (size_t i = 0; i < p->n_sends && st == TYTO_OK; i++) {
    if (p->send_stage[i] != p->next_phase - 1)
      continue; /* another stage's */
    int64_t r = p->recv_index[i];
    int d = r >= 0 && (size_t)r < p->n_graph ? p->user_slot[r] : -1;
    if (d < 0 || !p->slots[d].recv)
      continue; /* read by nothing */
    exec_slot *src = &p->slots[p->send_slot[i]], *dst = &p->slots[d];
    if (src->bytes != dst->bytes)
      return rt_fail(TYTO_ERR_INTERNAL,
                     "%s: send %zu has %llu bytes, its "
                     "recv %llu",
                     fn, i, (unsigned long long)src->bytes,
                     (unsigned long long)dst->bytes);
    if (src->dev == dst->dev) {
      tyto_plugin_error *e =
          src->bytes
              ? exec_fns(p, src->dev)
                    ->copy_d2d(exec_handle(p, src->dev),
                               p->devs[src->dev].stream, dst->buf, dst->offset,
                               src->buf, src->offset, src->bytes)
              : NULL;
      if (e)
        st = rt_fail_plugin(e, "%s: a copy on %s failed", fn,
                            exec_dev_id(p, src->dev));
    } else {
      /* On two devices (placement): through host memory. */
      void *nh = realloc(host, src->bytes ? (size_t)src->bytes : 1);
      if (!nh)
        st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
      else if ((st = to_host(p, fn, src, host = nh, (size_t)src->bytes)) ==
               TYTO_OK)
        st = to_device(p, fn, dst, host, (size_t)dst->bytes);
    }
    if (st == TYTO_OK)
      dst->set = 1;
  }
  free(host);
  return st;
}

int exec_uses(const tyto_program *p, const tyto_tensor *t) {
  return t->graph == p->src && t->index >= 0 && (size_t)t->index < p->n_graph &&
         p->user_slot[t->index] >= 0;
}

int tyto_program_uses(const tyto_program *p, const tyto_tensor *t) {
  return p && t &&
         (t->kind == TYTO_KIND_INPUT || t->kind == TYTO_KIND_PARAMETER) &&
         exec_uses(p, t);
}

tyto_status tyto_program_stats_get(const tyto_program *p,
                                   tyto_program_stats *stats) {
  if (!p || !stats)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_program_stats_get: %s is NULL",
                   p ? "stats" : "program");
  size_t n = stats->struct_size;
  if (n < sizeof n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_program_stats_get: stats->struct_size %zu is too "
                   "small; set it to sizeof(tyto_program_stats)",
                   n);
  if (n > sizeof *stats)
    n = sizeof *stats;
  memcpy((char *)stats + sizeof n, (const char *)&p->stats + sizeof n,
         n - sizeof n);
  return TYTO_OK;
}

size_t tyto_program_device_count(const tyto_program *p) {
  return p ? p->n_devs : 0;
}

/* Copies the first min(caller's, ours) bytes past struct_size. */
static tyto_status copy_out(const char *fn, void *dst, const void *src,
                            size_t ours) {
  size_t n = *(const size_t *)dst;
  if (n < sizeof n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: struct_size %zu is too small; set it to the "
                   "struct's sizeof",
                   fn, n);
  if (n > ours)
    n = ours;
  memcpy((char *)dst + sizeof n, (const char *)src + sizeof n, n - sizeof n);
  return TYTO_OK;
}

tyto_status tyto_program_device_stats_get(const tyto_program *p, size_t i,
                                          tyto_program_device_stats *out) {
  static const char fn[] = "tyto_program_device_stats_get";
  if (!p || !out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   p ? "out" : "program");
  if (i >= p->n_devs)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: device %zu out of range (the program has %zu)", fn, i,
                   p->n_devs);
  p->devs[i].stats.graph_note = i == 0 && p->graph_note[0] ? p->graph_note
                                : i == 0                   ? NULL
                                         : "programs over several devices are "
                                           "not recorded";
  return copy_out(fn, out, &p->devs[i].stats, sizeof p->devs[i].stats);
}

size_t tyto_program_copy_count(const tyto_program *p) {
  return p ? p->n_xfers : 0;
}

tyto_status tyto_program_copy_get(const tyto_program *p, size_t i,
                                  tyto_program_copy *out) {
  static const char fn[] = "tyto_program_copy_get";
  if (!p || !out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   p ? "out" : "program");
  if (i >= p->n_xfers)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: copy %zu out of range (the program makes %zu)", fn, i,
                   p->n_xfers);
  return copy_out(fn, out, &p->copies[i], sizeof p->copies[i]);
}

int tyto_program_tensor_device(const tyto_program *p, const tyto_tensor *t) {
  if (!p || !t || !exec_uses(p, t))
    return -1;
  return (int)p->devs[p->slots[p->user_slot[t->index]].dev].ctx_index;
}

static double mib(uint64_t b) {
  return (double)b / (1024.0 * 1024.0);
}

tyto_status tyto_program_report_placement(const tyto_program *p, FILE *f) {
  static const char fn[] = "tyto_program_report_placement";
  if (!p || !f)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   p ? "f" : "program");
  uint64_t bytes = 0;
  for (size_t i = 0; i < p->n_xfers; i++)
    bytes += p->copies[i].bytes;
  fprintf(f,
          "placement: %zu device%s, %zu cop%s between them (%.3f MiB per "
          "run)\n",
          p->n_devs, p->n_devs == 1 ? "" : "s", p->n_xfers,
          p->n_xfers == 1 ? "y" : "ies", mib(bytes));
  size_t w = 6;
  for (size_t i = 0; i < p->n_devs; i++)
    if (strlen(p->devs[i].stats.id) > w)
      w = strlen(p->devs[i].stats.id);
  fprintf(f, "  %-*s %7s %8s %10s %12s %10s\n", (int)w, "device", "nodes",
          "kernels", "fallbacks", "planned MiB", "arena MiB");
  for (size_t i = 0; i < p->n_devs; i++) {
    const tyto_program_device_stats *s = &p->devs[i].stats;
    fprintf(f, "  %-*s %7zu %8zu %10zu %12.3f %10.3f\n", (int)w, s->id,
            s->nodes, s->kernels, s->fallbacks, mib(s->planned_bytes),
            mib(s->arena_bytes));
  }
  for (size_t i = 0; i < p->n_xfers; i++) {
    const tyto_program_copy *c = &p->copies[i];
    char who[96];
    if (c->tensor >= 0)
      snprintf(who, sizeof who, "#%lld%s%.40s%s", (long long)c->tensor,
               c->name ? " '" : "", c->name ? c->name : "", c->name ? "'" : "");
    else
      snprintf(who, sizeof who, "(made by the passes)");
    fprintf(f, "  copy %s (%s) %s -> %s, %llu bytes, %s\n", who, c->op,
            p->devs[p->slots[p->xfers[i].src].dev].stats.id,
            p->devs[p->slots[p->xfers[i].dst].dev].stats.id,
            (unsigned long long)c->bytes, c->route);
  }
  if (ferror(f))
    return rt_fail(TYTO_ERR_IO, "%s: writing the report failed", fn);
  return TYTO_OK;
}
