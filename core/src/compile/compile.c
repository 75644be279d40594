/*
 * The compile driver: tyto_program_compile() takes a graph through the
 * layers in one direction (DESIGN.md): the passes optimise it, lowering
 * turns each node into kernel descriptors, placement puts each on a
 * device and inserts the copies between devices, each device prepares its
 * kernels, and the planner lays out each device's arena. exec/ then only
 * runs the result.
 *
 * When a device refuses a fused node, the node is split back: placement
 * (or, for a program of one device, compile_split_refused) records which
 * ops (or which dtype) the device cannot fuse, and the compile starts
 * again with the passes told to leave those alone; the parts are then
 * placed one by one (a bounded loop: the list only grows).
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compile.h"
#include "../graph/dtype.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

/* Times the fused nodes may be split before the compile gives up (each
 * round adds at least one exclusion). */
#define MAX_ROUNDS 16

void tyto_program_options_init(tyto_program_options *opts) {
  if (opts) {
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
  }
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

static tyto_status plugin_fail(const tyto_program *p, uint32_t dev,
                               tyto_plugin_error *e, const char *what,
                               const tyto_tensor *t) {
  int64_t i = exec_user_index(p, t);
  if (i < 0)
    return rt_fail_plugin(e,
                          "compile on %s: %s for %s (made by the graph "
                          "passes)",
                          exec_dev_id(p, dev), what, tyto_op_name(t->op));
  return rt_fail_plugin(e, "compile on %s: %s for %s (tensor #%lld)",
                        exec_dev_id(p, dev), what, tyto_op_name(t->op),
                        (long long)i);
}

void exec_describe(exec_kernel *k) {
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
}

/* The fused program of k (its blob, alive until prepare; lower.c built
 * it, so its instructions are an array of this host's struct), or NULL. */
static const tyto_plugin_fused_program *fused_program(const exec_kernel *k) {
  return k->op == TYTO_PLUGIN_OP_FUSED && k->blob ? k->blob : NULL;
}

char *exec_dtype_refusal(const tyto_device *dev, const exec_kernel *k) {
  uint32_t missing = 0;
  int found = 0;
  for (uint32_t i = 0; i < k->n_in + k->n_out && !found; i++) {
    const tyto_plugin_layout *l =
        i < k->n_in ? &k->in_l[i] : &k->out_l[i - k->n_in];
    if (l->dtype < 32 && !(dev->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(l->dtype)))
      missing = l->dtype, found = 1;
  }
  /* A program that converts computes in dtypes its operands may lack. */
  const tyto_plugin_fused_program *prog = fused_program(k);
  for (uint32_t i = 0; prog && i < prog->n_instrs && !found; i++) {
    uint32_t dt = prog->instrs[i].dtype;
    if (dt < 32 && !(dev->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(dt)))
      missing = dt, found = 1;
  }
  if (!found)
    return NULL;
  char runs[128] = "";
  size_t n = 0;
  for (uint32_t d = 0; d < 32; d++) {
    const dtype_info *di = dtype_info_of_abi(d);
    if (di && (dev->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(d)) && n < sizeof runs)
      n += (size_t)snprintf(runs + n, sizeof runs - n, "%s%s", n ? ", " : "",
                            di->name);
  }
  const dtype_info *mi = dtype_info_of_abi(missing);
  char buf[256];
  snprintf(buf, sizeof buf,
           "needs %s, which plugin %s does not run (it runs %s)",
           mi ? mi->name : "an unknown dtype", dev->plugin->pub.name,
           n ? runs : "no tyto dtype");
  return rt_strdup(buf);
}

char *exec_abi_refusal(const tyto_device *dev, const exec_kernel *k) {
  unsigned need = 0;
  const char *what = "";
  const tyto_plugin_fused_program *prog = fused_program(k);
  /* The step input of random ops came with ABI 1.3: an older plugin would
   * ignore it and draw the same numbers at every run. */
  if (k->op >= TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      k->op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI && k->n_in == 1)
    need = 3, what = "a random op with a step input";
  /* CAST, the 16-bit dtypes and fused programs that convert came with ABI
   * 1.5: an older plugin that listed F16 or BF16 in its mask could not
   * know their semantics, and one given a converting program would read
   * every value in one dtype. */
  if (k->op == TYTO_PLUGIN_OP_CAST)
    need = 5, what = "CAST";
  for (uint32_t i = 0; prog && i < prog->n_instrs && need < 5; i++)
    if (prog->instrs[i].op == TYTO_PLUGIN_OP_CAST)
      need = 5, what = "a fused program that converts between dtypes";
  for (uint32_t i = 0; i < k->n_in + k->n_out && need < 5; i++) {
    uint32_t dt = i < k->n_in ? k->in_l[i].dtype : k->out_l[i - k->n_in].dtype;
    if (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16)
      need = 5, what = "f16 or bf16";
  }
  /* The integer dtypes' ops came with ABI 1.6. */
  for (uint32_t i = 0; i < k->n_in + k->n_out && need < 6; i++) {
    uint32_t dt = i < k->n_in ? k->in_l[i].dtype : k->out_l[i - k->n_in].dtype;
    if (dt == TYTO_PLUGIN_DTYPE_I32 || dt == TYTO_PLUGIN_DTYPE_I64)
      need = 6, what = "i32 or i64";
  }
  if (dev->plugin->pub.abi_minor >= need)
    return NULL;
  char buf[256];
  snprintf(buf, sizeof buf,
           "needs a plugin of ABI 1.%u or newer (for %s); plugin %s is ABI "
           "1.%u",
           need, what, dev->plugin->pub.name, dev->plugin->pub.abi_minor);
  return rt_strdup(buf);
}

/* Fills the descriptor of k, asks supports_op and prepares it on k->dev;
 * records the workspace it needs and allocates scratch for outputs of -1.
 * A copy between devices (k->xfer) prepares nothing. */
tyto_status exec_prepare(tyto_program *p, exec_kernel *k,
                         const tyto_tensor *t) {
  if (k->xfer)
    return TYTO_OK;
  const tyto_plugin_device_fns *f = exec_fns(p, k->dev);
  tyto_plugin_device *d = exec_handle(p, k->dev);
  const tyto_device *dev = p->devs[k->dev].dev;
  exec_describe(k);
  tyto_plugin_op_desc *desc = &k->desc;
  if (!f->prepare || !f->launch)
    return rt_fail(TYTO_ERR_UNSUPPORTED,
                   "compile: device %s runs no kernels (a memory-only "
                   "device); select another with TYTO_DEVICES",
                   dev->info.id);
  /* The plugin's ABI and dtypes mask are its promise: checked here, so
   * that every plugin's refusal reads the same whatever its supports_op
   * says. */
  char *why = exec_abi_refusal(dev, k);
  /* A dtype the mask leaves out: the plugin may know why (a device
   * lacking an extension), and says so when asked. */
  tyto_plugin_error *pe = NULL;
  if (!why && (why = exec_dtype_refusal(dev, k)) && f->supports_op)
    pe = f->supports_op(d, desc);
  if (why) {
    int64_t i = exec_user_index(p, t);
    char at[64] = "made by the graph passes";
    if (i >= 0)
      snprintf(at, sizeof at, "tensor #%lld", (long long)i);
    const char *pm = pe ? rt_error_message(pe) : NULL;
    tyto_status st = rt_fail(TYTO_ERR_UNSUPPORTED,
                             "compile on %s: %s (%s) %s%s%s%s; select a device "
                             "that runs it with TYTO_DEVICES",
                             exec_dev_id(p, k->dev), tyto_op_name(t->op), at,
                             why, pm && *pm ? " (" : "", pm && *pm ? pm : "",
                             pm && *pm ? ")" : "");
    rt_error_free(pe);
    free(why);
    return st;
  }
  tyto_plugin_error *e = NULL;
  if (f->supports_op && (e = f->supports_op(d, desc)))
    return plugin_fail(p, k->dev, e, "the device refuses a kernel", t);
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
    return plugin_fail(p, k->dev, e, "preparing a kernel failed", t);
  k->workspace_bytes = info.workspace_bytes;
  k->flags = info.flags;
  for (uint32_t i = 0; i < k->n_out; i++) {
    if (k->out[i] >= 0)
      continue;
    int64_t n = 1;
    for (uint32_t a = 0; a < k->out_l[i].rank; a++)
      n *= k->out_l[i].shape[a];
    /* In the output's own dtype: a fused node's outputs may differ. */
    const dtype_info *di = dtype_info_of_abi(k->out_l[i].dtype);
    uint64_t es = di ? di->size : tyto_dtype_size(t->dtype);
    if ((e = rt_buffer_alloc(p->devs[k->dev].dev, (uint64_t)n * es,
                             &k->scratch[i])))
      return plugin_fail(p, k->dev, e, "allocating a scratch buffer failed", t);
  }
  return TYTO_OK;
}

/* Whether device d runs fused elementwise kernels at all: asked with the
 * smallest fused program (y = -x, f32). A device that fuses some dtypes
 * or ops only is found out when it refuses a fused node (placement.c). */
static int device_fuses(const tyto_device *d) {
  return compile_fuses_op(d, TYTO_OP_NEG, TYTO_PLUGIN_DTYPE_F32,
                          TYTO_PLUGIN_DTYPE_F32, 0.0);
}

static tyto_status oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
}

int compile_add_nofuse(compile_opts *o, uint32_t pin, int op, int dtype) {
  for (size_t i = 0; i < o->n_nofuse; i++)
    if (o->nofuse[i].pin == pin && o->nofuse[i].op == op &&
        o->nofuse[i].dtype == dtype)
      return 0;
  if (o->n_nofuse == o->cap_nofuse) {
    size_t cap = 2 * o->cap_nofuse + 8;
    pass_nofuse *n = realloc(o->nofuse, cap * sizeof *n);
    if (!n)
      return -1;
    o->nofuse = n;
    o->cap_nofuse = cap;
  }
  o->nofuse[o->n_nofuse++] = (pass_nofuse){pin, op, dtype};
  return 1;
}

/* Runs the passes: p->graph is the optimised copy of what the outputs
 * need, p->user_slot is filled later from the map. A device that runs no
 * fused kernels keeps the nodes pinned to it (and, under the pinned
 * policy, the unpinned ones when it is the first device) unfused; one of
 * a plugin older than ABI 1.5 keeps CASTs out of its fused nodes alike
 * (its refusal keeps the converting fused nodes of the others off it). */
static tyto_status optimise(tyto_program *p, compile_opts *o, tyto_graph *g,
                            size_t n_outputs, tyto_tensor *const *outputs,
                            tyto_tensor **map, pass_graph *pg) {
  int any = 0;
  for (size_t i = 0; i < p->n_devs; i++) {
    const tyto_device *dev = p->devs[i].dev;
    uint32_t pin = (uint32_t)(p->devs[i].ctx_index + 1);
    int fuses = device_fuses(dev), first = i == 0 || p->n_devs == 1;
    int op = fuses ? TYTO_OP_CAST : -1; /* what it must not be sent fused */
    any |= fuses;
    if (fuses && dev->plugin->pub.abi_minor >= 5)
      continue;
    if (compile_add_nofuse(o, pin, op, -1) < 0 ||
        (first && compile_add_nofuse(o, 0, op, -1) < 0))
      return oom();
  }
  pass_graph in = {g, n_outputs, (tyto_tensor **)outputs};
  /* The sends (after the outputs, update values and updated parameters)
   * with their stages, so that fusion keeps each group in one phase. */
  uint32_t *out_stage = NULL;
  if (p->n_sends && !(out_stage = calloc(n_outputs, sizeof *out_stage)))
    return oom();
  for (size_t i = 0; i < p->n_sends; i++)
    out_stage[p->n_outputs + 2 * p->n_updates + i] =
        (uint32_t)p->send_stage[i] + 1;
  pass_options opt = {any, o->n_nofuse, o->nofuse, out_stage ? n_outputs : 0,
                      out_stage};
  char msg[512];
  size_t n_stats = 0;
  int rc = passes_run(&in, pg, map, o->passes_off, &opt, 8, &p->pass_stats,
                      &n_stats, msg, sizeof msg);
  free(out_stage);
  if (rc < 0)
    return rt_fail(TYTO_ERR_INTERNAL, "compile: %s", msg);
  p->stats.n_passes = n_stats;
  p->stats.passes = p->pass_stats;
  p->graph = pg->g;
  return TYTO_OK;
}

#define HAS(opts, field)                                                       \
  ((opts) && (opts)->struct_size >=                                            \
                 offsetof(tyto_program_options, field) + sizeof(opts)->field)

/* The program's devices, policy and strictness from the options and the
 * environment. */
static tyto_status resolve_devices(tyto_context *ctx, tyto_graph *g,
                                   const tyto_program_options *opts,
                                   compile_opts *co) {
  (void)g;
  size_t n_ctx = tyto_context_device_count(ctx);
  size_t di = HAS(opts, device) ? opts->device : 0;
  size_t n = HAS(opts, devices) ? opts->n_devices : 0;
  const size_t *list = n ? opts->devices : &di;
  if (n && !opts->devices)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "compile: n_devices is %zu but devices is NULL", n);
  if (!n)
    n = 1;
  if (!(co->devs = malloc(n * sizeof *co->devs)))
    return oom();
  co->n_devs = n;
  for (size_t i = 0; i < n; i++) {
    tyto_device *dev = tyto_context_device(ctx, list[i]);
    if (!dev || !dev->handle)
      return rt_fail(TYTO_ERR_NOT_FOUND,
                     "compile: no selected device %zu (the context has %zu); "
                     "select devices with TYTO_DEVICES",
                     list[i], n_ctx);
    for (size_t j = 0; j < i; j++)
      if (co->devs[j] == list[i])
        return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                       "compile: devices lists device %zu (%s) twice", list[i],
                       dev->info.id);
    co->devs[i] = list[i];
  }
  co->policy = HAS(opts, placement) ? opts->placement : TYTO_PLACE_DEFAULT;
  co->strict = HAS(opts, strict) ? opts->strict != 0 : 0;
  if (co->policy != TYTO_PLACE_DEFAULT && co->policy != TYTO_PLACE_PINNED &&
      co->policy != TYTO_PLACE_AUTO)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "compile: placement %d is not a tyto_place_policy "
                   "(TYTO_PLACE_DEFAULT, _PINNED or _AUTO)",
                   (int)co->policy);
  tyto_status st = rt_env_placement(&co->policy, &co->strict);
  if (st != TYTO_OK)
    return st;
  if (co->policy == TYTO_PLACE_DEFAULT)
    co->policy = TYTO_PLACE_PINNED;
  return TYTO_OK;
}

/* Every pin of the optimised graph names one of the program's devices. */
static tyto_status check_pins(const tyto_program *p) {
  for (size_t s = 0; s < p->n_slots; s++) {
    const tyto_tensor *t = p->slots[s].t;
    if (!t->pin)
      continue;
    size_t i = 0;
    while (i < p->n_devs && p->devs[i].ctx_index != t->pin - 1)
      i++;
    if (i < p->n_devs)
      continue;
    char list[256] = "";
    size_t u = 0;
    for (size_t j = 0; j < p->n_devs && u < sizeof list; j++)
      u += (size_t)snprintf(list + u, sizeof list - u, "%s%zu (%s)",
                            j ? ", " : "", p->devs[j].ctx_index,
                            exec_dev_id(p, (uint32_t)j));
    tyto_device *d = tyto_context_device(p->devs[0].dev->ctx, t->pin - 1);
    char desc[160];
    compile_describe(p, t, desc, sizeof desc);
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "compile: %s is pinned to device %u%s%s%s, which this "
                   "program may not use (its devices: %s); list it in "
                   "tyto_program_options.devices or unpin the tensor",
                   desc, t->pin - 1, d ? " (" : "", d ? d->info.id : "",
                   d ? ")" : " (no such device)", list);
  }
  return TYTO_OK;
}

static tyto_status compile(tyto_program *p, tyto_graph *g, size_t n_outputs,
                           tyto_tensor *const *outputs, compile_opts *o,
                           int *retry) {
  double t0 = exec_now();
  size_t n_u = o->n_updates, n_x = o->n_exchanges;
  size_t n_all = n_outputs + 2 * n_u + n_x;
  p->src = g;
  p->n_graph = g->n_nodes;
  p->outputs = malloc(n_outputs * sizeof *p->outputs);
  p->out_slot = malloc(n_outputs * sizeof *p->out_slot);
  p->user_slot = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *p->user_slot);
  p->upd_param = malloc((n_u ? n_u : 1) * sizeof *p->upd_param);
  p->upd_value = malloc((n_u ? n_u : 1) * sizeof *p->upd_value);
  p->send_slot = malloc((n_x ? n_x : 1) * sizeof *p->send_slot);
  p->recv_index = malloc((n_x ? n_x : 1) * sizeof *p->recv_index);
  p->send_stage = calloc(n_x ? n_x : 1, sizeof *p->send_stage);
  p->n_phases = n_x ? o->n_stages + 1 : 1;
  p->phase_at = calloc(p->n_phases + 1, sizeof *p->phase_at);
  p->graphs = calloc(p->n_phases + 1, sizeof *p->graphs);
  tyto_tensor **map = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *map);
  /* The passes keep the outputs, the update values and the updated
   * parameters (an update needs its parameter even when nothing reads
   * it). */
  tyto_tensor **all = malloc(n_all * sizeof *all);
  if (!p->outputs || !p->out_slot || !p->user_slot || !p->upd_param ||
      !p->upd_value || !p->send_slot || !p->recv_index || !p->send_stage ||
      !p->phase_at || !p->graphs || !map || !all) {
    free(map);
    free(all);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  memcpy(all, outputs, n_outputs * sizeof *all);
  if (n_u) {
    memcpy(all + n_outputs, o->update_values, n_u * sizeof *all);
    memcpy(all + n_outputs + n_u, o->update_params, n_u * sizeof *all);
  }
  /* The sends are kept as outputs are. */
  if (n_x)
    memcpy(all + n_outputs + 2 * n_u, o->exchange_sends, n_x * sizeof *all);
  p->n_sends = n_x;
  for (size_t i = 0; i < n_x; i++) {
    p->recv_index[i] = o->exchange_recvs[i]->index;
    p->send_stage[i] = o->exchange_stages ? o->exchange_stages[i] : 0;
  }
  unsigned char *need = graph_needed(g, n_all, all);
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
  /* The recvs marked with their stages for the passes (fusion keeps the
   * phases apart), for the passes' run only. */
  for (size_t i = 0; i < n_x; i++) {
    uint32_t *xs = &o->exchange_recvs[i]->xstage;
    if (p->send_stage[i] + 1 > *xs)
      *xs = (uint32_t)p->send_stage[i] + 1;
  }
  tyto_status st = optimise(p, o, g, n_all, all, map, &pg);
  for (size_t i = 0; i < n_x; i++)
    o->exchange_recvs[i]->xstage = 0;
  free(all);
  if (st != TYTO_OK) {
    free(map);
    return st;
  }
  tyto_graph *og = p->graph;
  p->stats.passes_seconds = exec_now() - t0;

  /* One slot per node the (optimised) outputs need. */
  need = graph_needed(og, pg.n_out, pg.outs);
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
      sl->src = -1;
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
  for (size_t i = 0; i < n_x; i++)
    p->send_slot[i] = p->slot_of[pg.outs[n_outputs + 2 * n_u + i]->index];
  free(map);
  free(pg.outs);
  if ((st = check_pins(p)) != TYTO_OK)
    return st;

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
    if ((st = exec_lower(p, (int)s)) != TYTO_OK)
      return st;
  }
  free(p->fused_first);
  free(p->fused_next);
  p->fused_first = p->fused_next = NULL;
  /* Every slot and kernel on a device, then the copies between them. */
  if (p->n_devs > 1) {
    if ((st = compile_place(p, o, retry)) != TYTO_OK || *retry)
      return st;
    if ((st = compile_copies(p)) != TYTO_OK)
      return st;
  } else if ((st = compile_split_refused(p, o, retry)) != TYTO_OK || *retry) {
    return st;
  }
  for (size_t i = 0; i < p->n_kernels; i++)
    if ((st = exec_prepare(p, &p->kernels[i],
                           p->slots[p->kernels[i].slot].t)) != TYTO_OK)
      return st;
  if ((st = compile_devices(p)) != TYTO_OK)
    return st;
  p->stats.prepare_seconds = exec_now() - t1;
  st = exec_plan_memory(p, o->plan);
  p->stats.naive_bytes = naive;
  p->stats.kernels = p->n_launch;
  int prof = st == TYTO_OK ? rt_env_switch("TYTO_PROFILE") : -1;
  if (prof == -2)
    return TYTO_ERR_INVALID_ARGUMENT;
  if (prof == 1) {
    p->prof_seconds = calloc(p->n_kernels ? p->n_kernels : 1, sizeof(double));
    if (!p->prof_seconds)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
    p->profile = 1;
  }
  if (st == TYTO_OK)
    compile_summary(p, o->ctx);
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
  compile_opts co;
  memset(&co, 0, sizeof co);
  co.passes_off = passes_off;
  co.plan = plan;
  co.ctx = ctx;
  co.no_graphs = HAS(opts, no_graphs) && opts->no_graphs;
  int graphs = rt_env_switch("TYTO_GRAPHS");
  if (graphs == -2)
    return TYTO_ERR_INVALID_ARGUMENT;
  if (graphs == 0)
    co.no_graphs = 1;
  if (opts &&
      opts->struct_size >= offsetof(tyto_program_options, update_values) +
                               sizeof opts->update_values) {
    co.n_updates = opts->n_updates;
    co.update_params = opts->update_params;
    co.update_values = opts->update_values;
    if ((st = compile_check_updates(g, &co)) != TYTO_OK)
      return st;
  }
  if (HAS(opts, exchange_recvs)) {
    co.n_exchanges = opts->n_exchanges;
    co.exchange_sends = opts->exchange_sends;
    co.exchange_recvs = opts->exchange_recvs;
    co.exchange_stages =
        HAS(opts, exchange_stages) ? opts->exchange_stages : NULL;
    if ((st = compile_check_exchanges(g, &co)) != TYTO_OK)
      return st;
  }
  if ((st = resolve_devices(ctx, g, opts, &co)) != TYTO_OK) {
    free(co.devs);
    return st;
  }
  tyto_program *p = NULL;
  for (int round = 0;; round++) {
    int retry = 0;
    if ((p = calloc(1, sizeof *p))) {
      p->ctx = ctx;
      rt_context_hold(ctx);
    }
    if (!p || !(p->devs = calloc(co.n_devs, sizeof *p->devs))) {
      tyto_program_free(p);
      st = oom();
      break;
    }
    p->n_devs = co.n_devs;
    p->no_graphs = co.no_graphs;
    for (size_t i = 0; i < co.n_devs; i++) {
      p->devs[i].dev = tyto_context_device(ctx, co.devs[i]);
      p->devs[i].ctx_index = co.devs[i];
    }
    st = compile(p, g, n_outputs, outputs, &co, &retry);
    if (st == TYTO_OK && !retry)
      break;
    tyto_program_free(p);
    p = NULL;
    if (st == TYTO_OK && round + 1 >= MAX_ROUNDS)
      st = rt_fail(TYTO_ERR_INTERNAL,
                   "compile: fused nodes were split %d times and a device "
                   "still refuses one",
                   MAX_ROUNDS);
    if (st != TYTO_OK)
      break;
  }
  free(co.devs);
  free(co.nofuse);
  if (st != TYTO_OK)
    return st;
  *out = p;
  return TYTO_OK;
}
