/*
 * Programs: compile (collect the needed nodes, one buffer each, lower and
 * prepare every kernel, upload constants), run (launch in order on one
 * stream, then synchronize) and host access to inputs, outputs and
 * parameters. Everything goes through the device's plugin table.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "program.h"
#include "../passes/passes.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

void tyto_program_options_init(tyto_program_options *opts) {
  if (opts) {
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
  }
}

static const tyto_plugin_device_fns *fns(const tyto_program *p) {
  return &p->dev->plugin->dfns;
}

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

void tyto_program_free(tyto_program *p) {
  if (!p)
    return;
  if (p->profile && p->prof_runs)
    exec_profile_report(p);
  free(p->prof_seconds);
  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_device *d = p->dev->handle;
  if (p->stream) {
    tyto_plugin_error *e = f->stream_synchronize(d, p->stream);
    if (e)
      rt_error_free(e);
    f->stream_destroy(d, p->stream);
  }
  for (size_t i = 0; i < p->n_kernels; i++) {
    exec_kernel *k = &p->kernels[i];
    if (k->k && f->kernel_release)
      f->kernel_release(d, k->k);
    if (k->workspace_owned)
      f->buffer_free(d, k->workspace);
    for (size_t j = 0; j < EXEC_MAX_IO; j++)
      f->buffer_free(d, k->scratch[j]);
    free(k->in_l);
    free(k->blob);
  }
  for (size_t i = 0; i < p->n_slots; i++)
    if (p->slots[i].owned)
      f->buffer_free(d, p->slots[i].buf);
  f->buffer_free(d, p->arena);
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
  free(p->outputs);
  free(p->out_slot);
  free(p->pass_stats);
  tyto_graph_free(p->graph);
  free(p);
}

size_t tyto_program_output_count(const tyto_program *p) {
  return p ? p->n_outputs : 0;
}

tyto_tensor *tyto_program_output(const tyto_program *p, size_t i) {
  return p && i < p->n_outputs ? p->outputs[i] : NULL;
}

/* Marks every node the outputs depend on; creation order is topological,
 * so one backward sweep suffices. */
static unsigned char *mark_needed(tyto_graph *g, size_t n_outputs,
                                  tyto_tensor *const *outputs) {
  unsigned char *need = calloc(g->n_nodes ? g->n_nodes : 1, 1);
  if (!need)
    return NULL;
  for (size_t i = 0; i < n_outputs; i++)
    need[outputs[i]->index] = 1;
  for (size_t i = g->n_nodes; i-- > 0;) {
    if (!need[i])
      continue;
    const tyto_tensor *t = g->nodes[i];
    for (size_t j = 0; j < t->n_inputs; j++)
      need[t->inputs[j]->index] = 1;
  }
  return need;
}

static tyto_status check_outputs(const char *fn, tyto_graph *g,
                                 size_t n_outputs,
                                 tyto_tensor *const *outputs) {
  if (!g)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: graph is NULL", fn);
  if (g->status != TYTO_OK)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: graph is in error: %s; fix the first failing op", fn,
                   g->message);
  if (n_outputs == 0 || !outputs)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: expected at least one output, got none", fn);
  for (size_t i = 0; i < n_outputs; i++) {
    const tyto_tensor *t = outputs[i];
    if (!t)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: output %zu is NULL", fn,
                     i);
    if (t->kind == TYTO_KIND_ERROR)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: output %zu is an error tensor", fn, i);
    if (t->graph != g || t->index < 0 || (size_t)t->index >= g->n_nodes ||
        g->nodes[t->index] != t)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: output %zu belongs to another graph", fn, i);
  }
  return TYTO_OK;
}

int64_t exec_user_index(const tyto_program *p, const tyto_tensor *t) {
  return p->user_index && t->index >= 0 ? p->user_index[t->index] : -1;
}

static tyto_status plugin_fail(const tyto_program *p, tyto_plugin_error *e,
                               const char *what, const tyto_tensor *t) {
  int64_t i = exec_user_index(p, t);
  if (i < 0)
    return rt_fail_plugin(e,
                          "compile on %s: %s for %s (made by the graph "
                          "passes)",
                          p->dev->info.id, what, tyto_op_name(t->op));
  return rt_fail_plugin(e, "compile on %s: %s for %s (tensor #%lld)",
                        p->dev->info.id, what, tyto_op_name(t->op),
                        (long long)i);
}

/* Fills the descriptor of k, asks supports_op and prepares it; records
 * the workspace it needs and allocates scratch for outputs of -1. */
tyto_status exec_prepare(tyto_program *p, exec_kernel *k,
                         const tyto_tensor *t) {
  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_device *d = p->dev->handle;
  tyto_plugin_op_desc *desc = &k->desc;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->op = k->op;
  desc->n_inputs = k->n_in;
  desc->n_outputs = k->n_out;
  desc->inputs = k->n_in ? k->in_l : NULL;
  desc->outputs = k->out_l;
  desc->n_iattrs = k->n_iattrs;
  desc->iattrs = k->n_iattrs ? k->iattrs : NULL;
  desc->n_fattrs = k->n_fattrs;
  desc->fattrs = k->n_fattrs ? k->fattrs : NULL;
  desc->blob_size = k->blob_size;
  desc->blob = k->blob;
  if (!f->prepare || !f->launch)
    return rt_fail(TYTO_ERR_UNSUPPORTED,
                   "compile: device %s runs no kernels (a memory-only "
                   "device); select another with TYTO_DEVICES",
                   p->dev->info.id);
  tyto_plugin_error *e = NULL;
  if (f->supports_op && (e = f->supports_op(d, desc)))
    return plugin_fail(p, e, "the device refuses a kernel", t);
  tyto_plugin_kernel_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  e = f->prepare(d, desc, &k->k, &info);
  /* The descriptor (and the blob it points to) lives through prepare
   * only. */
  free(k->blob);
  k->blob = NULL;
  desc->blob = NULL;
  if (e)
    return plugin_fail(p, e, "preparing a kernel failed", t);
  k->workspace_bytes = info.workspace_bytes;
  for (uint32_t i = 0; i < k->n_out; i++) {
    if (k->out[i] >= 0)
      continue;
    int64_t n = 1;
    for (uint32_t a = 0; a < k->out_l[i].rank; a++)
      n *= k->out_l[i].shape[a];
    if ((e = f->buffer_alloc(d, (uint64_t)n * tyto_dtype_size(t->dtype),
                             &k->scratch[i])))
      return plugin_fail(p, e, "allocating a scratch buffer failed", t);
  }
  return TYTO_OK;
}

double exec_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether the device runs fused elementwise kernels: asked once with the
 * smallest fused program (y = -x). */
static int device_fuses(const tyto_program *p) {
  const tyto_plugin_device_fns *f = fns(p);
  if (!f->supports_op || !f->prepare)
    return 0;
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = TYTO_PLUGIN_DTYPE_F32;
  l.rank = 1;
  l.shape[0] = 1;
  l.strides[0] = 1;
  tyto_plugin_fused_instr ins[3];
  memset(ins, 0, sizeof ins);
  for (int i = 0; i < 3; i++)
    ins[i].struct_size = sizeof ins[i];
  ins[0].op = TYTO_PLUGIN_FUSED_INPUT;
  ins[1].op = TYTO_PLUGIN_OP_NEG;
  ins[2].op = TYTO_PLUGIN_FUSED_OUTPUT;
  ins[2].arg[0] = 1;
  tyto_plugin_fused_program prog = {sizeof prog, 3, ins};
  tyto_plugin_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = TYTO_PLUGIN_OP_FUSED;
  desc.n_inputs = desc.n_outputs = 1;
  desc.inputs = desc.outputs = &l;
  desc.blob_size = sizeof prog;
  desc.blob = &prog;
  tyto_plugin_error *e = f->supports_op(p->dev->handle, &desc);
  if (e)
    rt_error_free(e);
  return e == NULL;
}

/* Runs the passes: p->graph is the optimised copy of what the outputs
 * need, p->user_slot is filled later from the map. */
static tyto_status optimise(tyto_program *p, tyto_graph *g, size_t n_outputs,
                            tyto_tensor *const *outputs, unsigned off,
                            tyto_tensor **map, pass_graph *pg) {
  pass_graph in = {g, n_outputs, (tyto_tensor **)outputs};
  pass_options opt = {device_fuses(p)};
  char msg[512];
  size_t n_stats = 0;
  if (passes_run(&in, pg, map, off, &opt, 8, &p->pass_stats, &n_stats, msg,
                 sizeof msg) < 0)
    return rt_fail(TYTO_ERR_INTERNAL, "compile: %s", msg);
  p->stats.n_passes = n_stats;
  p->stats.passes = p->pass_stats;
  p->graph = pg->g;
  return TYTO_OK;
}

/* What tyto_program_compile() was asked, options resolved. */
typedef struct compile_opts {
  unsigned passes_off;
  int plan;
  size_t n_updates;
  tyto_tensor *const *update_params;
  tyto_tensor *const *update_values;
} compile_opts;

static tyto_status compile(tyto_program *p, tyto_graph *g, size_t n_outputs,
                           tyto_tensor *const *outputs, const compile_opts *o) {
  double t0 = exec_now();
  size_t n_u = o->n_updates, n_all = n_outputs + 2 * n_u;
  p->src = g;
  p->n_graph = g->n_nodes;
  p->outputs = malloc(n_outputs * sizeof *p->outputs);
  p->out_slot = malloc(n_outputs * sizeof *p->out_slot);
  p->user_slot = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *p->user_slot);
  p->upd_param = malloc((n_u ? n_u : 1) * sizeof *p->upd_param);
  p->upd_value = malloc((n_u ? n_u : 1) * sizeof *p->upd_value);
  tyto_tensor **map = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *map);
  /* The passes keep the outputs, the update values and the updated
   * parameters (an update needs its parameter even when nothing reads
   * it). */
  tyto_tensor **all = malloc(n_all * sizeof *all);
  if (!p->outputs || !p->out_slot || !p->user_slot || !p->upd_param ||
      !p->upd_value || !map || !all) {
    free(map);
    free(all);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  memcpy(all, outputs, n_outputs * sizeof *all);
  if (n_u) {
    memcpy(all + n_outputs, o->update_values, n_u * sizeof *all);
    memcpy(all + n_outputs + n_u, o->update_params, n_u * sizeof *all);
  }
  unsigned char *need = mark_needed(g, n_all, all);
  if (!need) {
    free(map);
    free(all);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  uint64_t naive = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    if (need[i]) {
      const tyto_tensor *t = g->nodes[i];
      p->stats.nodes_before++;
      p->stats.edges_before += t->n_inputs;
      naive += exec_round_up((uint64_t)tyto_tensor_numel(t) *
                             tyto_dtype_size(t->dtype));
    }
  free(need);
  memcpy(p->outputs, outputs, n_outputs * sizeof *p->outputs);
  p->n_outputs = n_outputs;
  p->n_updates = n_u;
  pass_graph pg;
  tyto_status st = optimise(p, g, n_all, all, o->passes_off, map, &pg);
  free(all);
  if (st != TYTO_OK) {
    free(map);
    return st;
  }
  tyto_graph *og = p->graph;
  p->stats.passes_seconds = exec_now() - t0;

  /* One slot per node the (optimised) outputs need. */
  need = mark_needed(og, pg.n_out, pg.outs);
  p->slot_of = malloc((og->n_nodes ? og->n_nodes : 1) * sizeof *p->slot_of);
  p->slots = calloc(og->n_nodes ? og->n_nodes : 1, sizeof *p->slots);
  if (!need || !p->slot_of || !p->slots) {
    free(need);
    free(map);
    free(pg.outs);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  for (size_t i = 0; i < og->n_nodes; i++) {
    p->slot_of[i] = -1;
    if (need[i]) {
      tyto_tensor *t = og->nodes[i];
      exec_slot *sl = &p->slots[p->n_slots];
      p->slot_of[i] = (int)p->n_slots++;
      sl->t = t;
      sl->kind = t->kind;
      sl->bytes = (uint64_t)tyto_tensor_numel(t) * tyto_dtype_size(t->dtype);
      p->stats.nodes_after++;
      p->stats.edges_after += t->n_inputs;
      p->stats.fused_nodes += t->op == TYTO_OP_FUSED;
    }
  }
  free(need);
  p->user_index =
      malloc((og->n_nodes ? og->n_nodes : 1) * sizeof *p->user_index);
  if (!p->user_index) {
    free(map);
    free(pg.outs);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  for (size_t i = 0; i < og->n_nodes; i++)
    p->user_index[i] = -1;
  for (size_t i = g->n_nodes; i-- > 0;) {
    p->user_slot[i] = map[i] ? p->slot_of[map[i]->index] : -1;
    if (map[i])
      p->user_index[map[i]->index] = (int64_t)i; /* the first wins */
  }
  for (size_t i = 0; i < n_outputs; i++)
    p->out_slot[i] = p->slot_of[pg.outs[i]->index];
  for (size_t i = 0; i < n_u; i++) {
    p->upd_value[i] = p->slot_of[pg.outs[n_outputs + i]->index];
    p->upd_param[i] = p->slot_of[pg.outs[n_outputs + n_u + i]->index];
  }
  free(map);
  free(pg.outs);

  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_error *e = f->stream_create(p->dev->handle, &p->stream);
  if (e)
    return rt_fail_plugin(e, "compile: creating a stream on %s failed",
                          p->dev->info.id);
  double t1 = exec_now();
  /* The FUSED_OUTPUT slots of each FUSED slot, ascending, for lowering. */
  size_t ns1 = p->n_slots ? p->n_slots : 1;
  p->fused_first = malloc(ns1 * sizeof *p->fused_first);
  p->fused_next = malloc(ns1 * sizeof *p->fused_next);
  if (!p->fused_first || !p->fused_next)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  for (size_t s = 0; s < p->n_slots; s++)
    p->fused_first[s] = -1;
  for (size_t s = p->n_slots; s-- > 0;) {
    const tyto_tensor *t = p->slots[s].t;
    p->fused_next[s] = -1;
    if (t->op != TYTO_OP_FUSED_OUTPUT)
      continue;
    int fs = p->slot_of[t->inputs[0]->index];
    p->fused_next[s] = p->fused_first[fs];
    p->fused_first[fs] = (int)s;
  }
  for (size_t s = 0; s < p->n_slots; s++) {
    tyto_op op = p->slots[s].t->op;
    if (op == TYTO_OP_INPUT || op == TYTO_OP_PARAMETER ||
        op == TYTO_OP_CONSTANT)
      continue;
    size_t first = p->n_kernels;
    if ((st = exec_lower(p, (int)s)) != TYTO_OK)
      return st;
    for (size_t i = first; i < p->n_kernels; i++)
      if ((st = exec_prepare(p, &p->kernels[i], p->slots[s].t)) != TYTO_OK)
        return st;
  }
  free(p->fused_first);
  free(p->fused_next);
  p->fused_first = p->fused_next = NULL;
  p->stats.prepare_seconds = exec_now() - t1;
  st = exec_plan_memory(p, o->plan);
  p->stats.naive_bytes = naive;
  p->stats.kernels = p->n_launch;
  const char *prof = getenv("TYTO_PROFILE");
  if (st == TYTO_OK && prof && prof[0] && strcmp(prof, "0") != 0) {
    p->prof_seconds = calloc(p->n_kernels ? p->n_kernels : 1, sizeof(double));
    if (!p->prof_seconds)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
    p->profile = 1;
  }
  return st;
}

/* "parameter 'w' (#3) f32[4,4]" */
static const char *brief(char *buf, size_t size, const tyto_tensor *t) {
  char dims[TYTO_MAX_RANK * 21 + 1] = "";
  size_t d = 0;
  for (int i = 0; i < t->rank; i++)
    d += (size_t)snprintf(dims + d, sizeof dims - d, "%s%lld", i ? "," : "",
                          (long long)t->shape[i]);
  snprintf(buf, size, "%s%s%.64s%s (#%lld) %s[%s]", tyto_kind_name(t->kind),
           t->name ? " '" : "", t->name ? t->name : "", t->name ? "'" : "",
           (long long)t->index, tyto_dtype_name(t->dtype), dims);
  return buf;
}

static tyto_status check_updates(const tyto_graph *g, const compile_opts *o) {
  static const char fn[] = "compile: update";
  size_t nu = o->n_updates;
  if (nu && (!o->update_params || !o->update_values))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%ss: n_updates is %zu but update_params or update_values "
                   "is NULL",
                   fn, nu);
  if (!nu)
    return TYTO_OK;
  /* Per node of g: the first and second updates of it (SIZE_MAX: none),
   * so that finding an update's duplicates takes no scan of the others. */
  size_t n = g->n_nodes ? g->n_nodes : 1;
  size_t *first = malloc(n * sizeof *first),
         *second = malloc(n * sizeof *second);
  if (!first || !second) {
    free(first);
    free(second);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  for (size_t i = 0; i < g->n_nodes; i++)
    first[i] = second[i] = SIZE_MAX;
  for (size_t j = 0; j < nu; j++) {
    const tyto_tensor *pm = o->update_params[j];
    if (!pm || pm->graph != g)
      continue;
    if (first[pm->index] == SIZE_MAX)
      first[pm->index] = j;
    else if (second[pm->index] == SIZE_MAX)
      second[pm->index] = j;
  }
  tyto_status st = TYTO_OK;
  for (size_t i = 0; i < nu && st == TYTO_OK; i++) {
    const tyto_tensor *pm = o->update_params[i], *v = o->update_values[i];
    char a[160], b[160];
    if (!pm || !v) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: %s is NULL", fn, i,
                   pm ? "the value" : "the parameter");
      break;
    }
    if (pm->graph != g || v->graph != g || v->kind == TYTO_KIND_ERROR) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: the %s is %s", fn, i,
                   pm->graph != g ? "parameter" : "value",
                   v->kind == TYTO_KIND_ERROR && pm->graph == g
                       ? "an error tensor"
                       : "a tensor of another graph");
      break;
    }
    if (pm->kind != TYTO_KIND_PARAMETER) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: expected a parameter to update, found %s", fn, i,
                   brief(a, sizeof a, pm));
      break;
    }
    if (v->dtype != pm->dtype || v->rank != pm->rank ||
        memcmp(v->shape, pm->shape, (size_t)v->rank * sizeof *v->shape)) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: %s cannot take the value of %s (dtype or "
                   "shape differ)",
                   fn, i, brief(a, sizeof a, pm), brief(b, sizeof b, v));
      break;
    }
    /* The lowest other update of pm before i, and of v (any other). */
    size_t twice = first[pm->index] < i ? first[pm->index] : SIZE_MAX;
    size_t of_v = first[v->index] != i ? first[v->index] : second[v->index];
    if (twice != SIZE_MAX && twice <= of_v)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: %s is already updated by update %zu", fn, i,
                   brief(a, sizeof a, pm), twice);
    /* p <- q while q <- ...: each copy would wait for the other. */
    else if (of_v != SIZE_MAX)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: the value is %s, which update %zu changes "
                   "in the same run; give it as a computed value "
                   "(read it into an output first) or update in two "
                   "programs",
                   fn, i, brief(a, sizeof a, v), of_v);
  }
  free(first);
  free(second);
  return st;
}

tyto_status tyto_program_compile(tyto_context *ctx, tyto_graph *g,
                                 size_t n_outputs, tyto_tensor *const *outputs,
                                 const tyto_program_options *opts,
                                 tyto_program **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "compile: out is NULL");
  *out = NULL;
  if (!ctx)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "compile: context is NULL");
  tyto_status st = check_outputs("compile", g, n_outputs, outputs);
  if (st != TYTO_OK)
    return st;
  size_t di = 0;
  if (opts && opts->struct_size >=
                  offsetof(tyto_program_options, device) + sizeof opts->device)
    di = opts->device;
  tyto_device *dev = tyto_context_device(ctx, di);
  if (!dev || !dev->handle)
    return rt_fail(TYTO_ERR_NOT_FOUND,
                   "compile: no selected device %zu (the context has %zu); "
                   "select devices with TYTO_DEVICES",
                   di, tyto_context_device_count(ctx));
  unsigned passes_off = 0;
  int plan = 1;
  if (opts && opts->struct_size >= offsetof(tyto_program_options, passes_off) +
                                       sizeof opts->passes_off)
    passes_off = opts->passes_off;
  if (opts &&
      opts->struct_size >= offsetof(tyto_program_options, no_memory_plan) +
                               sizeof opts->no_memory_plan)
    plan = !opts->no_memory_plan;
  if (passes_off & ~(unsigned)TYTO_PASS_ALL)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "compile: passes_off 0x%x has bits outside TYTO_PASS_ALL "
                   "(0x%x)",
                   passes_off, (unsigned)TYTO_PASS_ALL);
  compile_opts co = {passes_off, plan, 0, NULL, NULL};
  if (opts &&
      opts->struct_size >= offsetof(tyto_program_options, update_values) +
                               sizeof opts->update_values) {
    co.n_updates = opts->n_updates;
    co.update_params = opts->update_params;
    co.update_values = opts->update_values;
    if ((st = check_updates(g, &co)) != TYTO_OK)
      return st;
  }
  tyto_program *p = calloc(1, sizeof *p);
  if (!p)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  p->dev = dev;
  if ((st = compile(p, g, n_outputs, outputs, &co)) != TYTO_OK) {
    tyto_program_free(p);
    return st;
  }
  *out = p;
  return TYTO_OK;
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
    rt_fail(*st, "%s: tensor #%lld is a %s tensor, not %s %s", fn,
            (long long)t->index, tyto_kind_name(t->kind),
            kind == TYTO_KIND_INPUT ? "an" : "a", kname);
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
    tyto_plugin_error *e =
        fns(p)->copy_h2d(p->dev->handle, NULL, sl->buf, 0, src, bytes);
    if (e)
      return rt_fail_plugin(e, "%s: copy to %s failed", fn, p->dev->info.id);
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
    tyto_plugin_error *e =
        fns(p)->copy_d2h(p->dev->handle, NULL, dst, sl->buf, 0, bytes);
    if (e)
      return rt_fail_plugin(e, "%s: copy from %s failed", fn, p->dev->info.id);
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
                   "%s: the program has not run yet; call tyto_program_run "
                   "first",
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

tyto_status tyto_program_run(tyto_program *p) {
  static const char fn[] = "tyto_program_run";
  if (!p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: program is NULL", fn);
  for (size_t s = 0; s < p->n_slots; s++) {
    const exec_slot *sl = &p->slots[s];
    if (sl->kind == TYTO_KIND_INPUT && !sl->set) {
      char d[EXEC_DESC];
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: %s and was never set; bind it with "
                     "tyto_program_set_input",
                     fn, exec_slot_desc(p, sl, d));
    }
  }
  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_device *d = p->dev->handle;
  tyto_plugin_error *e = NULL;
  double t_run = p->profile ? exec_now() : 0;
  for (size_t i = 0; i < p->n_launch && !e; i++) {
    exec_kernel *k = &p->kernels[p->launch[i]];
    double t_k = p->profile ? exec_now() : 0;
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
    e = f->launch(d, p->stream, k->k, in, k->n_in, out, k->n_out,
                  k->workspace ? &ws : NULL);
    if (p->profile && !e) {
      e = f->stream_synchronize(d, p->stream);
      p->prof_seconds[p->launch[i]] += exec_now() - t_k;
    }
  }
  tyto_plugin_error *e2 = f->stream_synchronize(d, p->stream);
  if (p->profile) {
    p->prof_total += exec_now() - t_run;
    p->prof_runs++;
  }
  if (e) {
    if (e2)
      rt_error_free(e2);
    return rt_fail_plugin(e, "%s: a launch on %s failed", fn, p->dev->info.id);
  }
  if (e2)
    return rt_fail_plugin(e2, "%s: a kernel on %s failed", fn, p->dev->info.id);
  p->ran = 1;
  return TYTO_OK;
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
