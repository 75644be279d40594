/*
 * Placement in the compile driver: asks each device which lowered
 * kernels it runs (supports_op, cheap by contract), prices them from the
 * measured device and link profiles, lets place/ choose a device per
 * node, and then turns every edge between devices into a copy slot and a
 * copy kernel (exec_xfer); finally the streams, events and staging memory
 * those need, and the per-device figures.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/placement.h>

#include "compile.h"
#include "../place/place.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

#define NONE UINT32_MAX

static tyto_status oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
}

static int is_source(tyto_op op) {
  return op == TYTO_OP_INPUT || op == TYTO_OP_PARAMETER ||
         op == TYTO_OP_CONSTANT;
}

/* The program device of a pin (0: NONE). check_pins made sure there is
 * one. */
static uint32_t pin_dev(const tyto_program *p, uint32_t pin) {
  if (!pin)
    return NONE;
  for (uint32_t i = 0; i < p->n_devs; i++)
    if (p->devs[i].ctx_index == pin - 1)
      return i;
  return NONE;
}

/* NULL when device d runs kernel k, else its reason (malloc'd). */
static char *refusal(const tyto_program *p, uint32_t d, exec_kernel *k) {
  const tyto_device *dev = p->devs[d].dev;
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  if (!f->prepare || !f->launch)
    return rt_strdup("a memory-only device (it runs no kernels)");
  char *why = exec_abi_refusal(dev, k);
  if (!why)
    why = exec_dtype_refusal(dev, k);
  if (why)
    return why;
  if (!f->supports_op)
    return NULL; /* prepare will tell */
  exec_describe(k);
  tyto_plugin_error *e = f->supports_op(dev->handle, &k->desc);
  if (!e)
    return NULL;
  const char *m = rt_error_message(e);
  char *r = rt_strdup(m && *m ? m : "refused without a reason");
  rt_error_free(e);
  return r ? r : rt_strdup("refused");
}

/* Per slot: its kernels [first, first + count) (kernels are appended in
 * slot order while lowering). */
typedef struct slot_kernels {
  size_t *first, *count;
} slot_kernels;

/* The refusal of slot s's kernels by device d (NULL: runs them all). */
static char *slot_refusal(const tyto_program *p, const slot_kernels *sk,
                          size_t s, uint32_t d) {
  for (size_t i = sk->first[s]; i < sk->first[s] + sk->count[s]; i++) {
    char *r = refusal(p, d, &p->kernels[i]);
    if (r)
      return r;
  }
  return NULL;
}

/* ---------------------------------------------------------------------- */
/* Splitting a refused fused node                                          */

static int arity(int op) {
  if ((op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) || op == TYTO_OP_CAST)
    return 1;
  if (op >= TYTO_OP_ADD && op <= TYTO_OP_GE)
    return 2;
  return op == TYTO_OP_WHERE || op == TYTO_OP_FMA ? 3 : 0;
}

int compile_fuses_op(const tyto_device *dev, int op, tyto_plugin_dtype dt,
                     tyto_plugin_dtype in_dt, double attr) {
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  int a = arity(op);
  if (!f->supports_op || !f->prepare)
    return 0;
  if (a == 0)
    return 1;
  /* Only ABI 1.5 knows programs that convert (an older plugin would read
   * every value in one dtype). */
  if (op == TYTO_OP_CAST && dev->plugin->pub.abi_minor < 5)
    return 0;
  if (op != TYTO_OP_CAST)
    in_dt = dt;
  /* The plugin's dtypes mask is its promise, whatever supports_op says. */
  if (dt >= 32 || in_dt >= 32 ||
      !(dev->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(dt)) ||
      !(dev->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(in_dt)))
    return 0;
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = in_dt;
  l.rank = 1;
  l.shape[0] = 1;
  l.strides[0] = 1;
  tyto_plugin_layout ls[4] = {l, l, l, l};
  ls[3].dtype = dt;
  tyto_plugin_fused_instr ins[5];
  memset(ins, 0, sizeof ins);
  for (int i = 0; i < 5; i++) {
    ins[i].struct_size = sizeof ins[i];
    ins[i].dtype = (uint32_t)(i < a ? in_dt : dt);
  }
  for (int i = 0; i < a; i++) {
    ins[i].op = TYTO_PLUGIN_FUSED_INPUT;
    ins[i].arg[0] = (uint32_t)i;
  }
  ins[a].op = (uint32_t)op;
  for (int i = 0; i < a; i++)
    ins[a].arg[i] = (uint32_t)i;
  ins[a].attr = attr;
  ins[a + 1].op = TYTO_PLUGIN_FUSED_OUTPUT;
  ins[a + 1].arg[0] = (uint32_t)a;
  tyto_plugin_fused_program prog = {sizeof prog, (uint32_t)a + 2, ins};
  tyto_plugin_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = TYTO_PLUGIN_OP_FUSED;
  desc.n_inputs = (uint32_t)a;
  desc.n_outputs = 1;
  desc.inputs = ls;
  desc.outputs = &ls[3];
  desc.blob_size = sizeof prog;
  desc.blob = &prog;
  tyto_plugin_error *e = f->supports_op(dev->handle, &desc);
  if (e)
    rt_error_free(e);
  return e == NULL;
}

/* Device d refuses fused node t: records which of its ops d cannot fuse
 * (each probed alone, in the dtypes the program gives it: a CAST from its
 * operand's dtype to its own), or, when no single op is to blame, that it
 * cannot fuse conversions (a program with a CAST) or else the program's
 * dtypes. Returns the number of new exclusions, -1 on out of memory. */
static int split_fused(const tyto_program *p, compile_opts *o, uint32_t d,
                       const tyto_tensor *t) {
  int added = 0, r, converts = 0;
  size_t n = fused_n_instrs(t);
  for (size_t i = 0; i < n; i++) {
    int op = (int)fused_field(t, i, FUSED_OP);
    int dt = (int)fused_field(t, i, FUSED_DTYPE), in_dt = dt;
    if (arity(op) == 0)
      continue;
    if (op == TYTO_OP_CAST) {
      converts = 1;
      in_dt = (int)fused_field(t, (size_t)fused_field(t, i, FUSED_ARG0),
                               FUSED_DTYPE);
    }
    if (compile_fuses_op(p->devs[d].dev, op, (tyto_plugin_dtype)dt,
                         (tyto_plugin_dtype)in_dt, t->fattrs[i]))
      continue;
    /* The passes make FMA out of MUL and ADD. */
    if (op == TYTO_OP_FMA) {
      if ((r = compile_add_nofuse(o, t->pin, TYTO_OP_MUL, dt)) < 0)
        return -1;
      added += r;
      op = TYTO_OP_ADD;
    }
    if ((r = compile_add_nofuse(o, t->pin, op, dt)) < 0)
      return -1;
    added += r;
  }
  if (!added && converts) {
    if ((r = compile_add_nofuse(o, t->pin, TYTO_OP_CAST, -1)) < 0)
      return -1;
    added += r;
  }
  for (size_t i = 0; i < n && !added; i++) {
    int dt = (int)fused_field(t, i, FUSED_DTYPE);
    if ((r = compile_add_nofuse(o, t->pin, -1, dt)) < 0)
      return -1;
    added += r;
  }
  return added;
}

tyto_status compile_split_refused(tyto_program *p, compile_opts *o,
                                  int *retry) {
  *retry = 0;
  for (size_t i = 0; i < p->n_kernels; i++) {
    exec_kernel *k = &p->kernels[i];
    if (k->op != TYTO_PLUGIN_OP_FUSED)
      continue;
    char *why = refusal(p, k->dev, k);
    if (!why)
      continue;
    free(why);
    int r = split_fused(p, o, k->dev, p->slots[k->slot].t);
    if (r < 0)
      return oom();
    if (r > 0) {
      *retry = 1;
      return TYTO_OK;
    }
  }
  return TYTO_OK;
}

/* ---------------------------------------------------------------------- */
/* The cost model                                                          */

static double numel(const tyto_tensor *t) {
  return (double)tyto_tensor_numel(t);
}

/* Floating-point operations of the matrix-product-like ops (0: others). */
static double flops(const tyto_tensor *t) {
  switch (t->op) {
  case TYTO_OP_MATMUL: {
    const tyto_tensor *a = t->inputs[0];
    double n = t->rank ? (double)t->shape[t->rank - 1] : 1.0;
    double rows = n > 0 ? numel(t) / n : 0.0;
    return rows > 0 ? 2.0 * numel(t) * (numel(a) / rows) : 0.0;
  }
  case TYTO_OP_CONV2D:
  case TYTO_OP_CONV2D_BACKWARD_DATA: {
    const tyto_tensor *w = t->inputs[1],
                      *y = t->op == TYTO_OP_CONV2D ? t : t->inputs[0];
    return w->shape[0] ? 2.0 * numel(y) * numel(w) / (double)w->shape[0] : 0;
  }
  case TYTO_OP_CONV2D_BACKWARD_FILTER:
    return t->shape[0]
               ? 2.0 * numel(t->inputs[1]) * numel(t) / (double)t->shape[0]
               : 0;
  default: return 0.0;
  }
}

/* Seconds to compute slot s on a device of profile pr: a launch per
 * kernel, then its arithmetic at the GEMM rate or its memory traffic at
 * the elementwise rate. */
static double node_seconds(const tyto_program *p, size_t s, size_t n_kernels,
                           const tyto_device_profile *pr) {
  const tyto_tensor *t = p->slots[s].t;
  double c = (double)n_kernels * pr->launch_seconds;
  double f = flops(t);
  if (f > 0 && pr->gemm_flops > 0)
    return c + f / pr->gemm_flops;
  double bytes = (double)p->slots[s].bytes;
  for (size_t j = 0; j < t->n_inputs; j++)
    bytes += numel(t->inputs[j]) * (double)tyto_dtype_size(t->inputs[j]->dtype);
  return c + (pr->eltwise_bytes > 0 ? bytes / pr->eltwise_bytes : 0.0);
}

/* The per-byte cost and latency of copies a -> b from the measured link
 * (through host memory where no direct link was measured). */
static tyto_status link_costs(tyto_program *p, tyto_context *ctx,
                              const tyto_device_profile *pr, double *per_byte,
                              double *latency) {
  size_t nd = p->n_devs;
  for (size_t a = 0; a < nd; a++)
    for (size_t b = 0; b < nd; b++) {
      if (a == b)
        continue;
      double bps = 0;
      tyto_status st = tyto_link_profile_get(ctx, p->devs[a].ctx_index,
                                             p->devs[b].ctx_index, 0, &bps);
      if (st != TYTO_OK)
        return st;
      per_byte[a * nd + b] = bps > 0 ? 1.0 / bps : 1e-9;
      latency[a * nd + b] = pr[a].launch_seconds + pr[b].launch_seconds;
    }
  return TYTO_OK;
}

/* ---------------------------------------------------------------------- */
/* Placing                                                                 */

void compile_describe(const tyto_program *p, const tyto_tensor *t, char *buf,
                      size_t n) {
  int64_t i = exec_user_index(p, t);
  if (i >= 0)
    snprintf(buf, n, "%s (tensor #%lld%s%.64s%s)", tyto_op_name(t->op),
             (long long)i, t->name ? " '" : "", t->name ? t->name : "",
             t->name ? "'" : "");
  else
    snprintf(buf, n, "%s (made by the graph passes)", tyto_op_name(t->op));
}

typedef struct place_state {
  slot_kernels sk;
  place_node *nodes;
  uint32_t *in;
  double *cost, *per_byte, *latency;
  uint32_t *resource;
  tyto_device_profile *prof;
  char **why; /* per slot: its wanted device's refusal, or NULL */
  place_result r;
} place_state;

static void state_free(place_state *s, size_t n_slots) {
  free(s->sk.first);
  free(s->sk.count);
  free(s->nodes);
  free(s->in);
  free(s->cost);
  free(s->per_byte);
  free(s->latency);
  free(s->resource);
  free(s->prof);
  if (s->why)
    for (size_t i = 0; i < n_slots; i++)
      free(s->why[i]);
  free(s->why);
  place_result_free(&s->r);
}

static tyto_status place_slots(tyto_program *p, compile_opts *o, place_state *S,
                               int *retry) {
  size_t ns = p->n_slots, nd = p->n_devs, n_edges = 0;
  int autop = o->policy == TYTO_PLACE_AUTO;
  S->sk.first = calloc(ns ? ns : 1, sizeof *S->sk.first);
  S->sk.count = calloc(ns ? ns : 1, sizeof *S->sk.count);
  S->nodes = calloc(ns ? ns : 1, sizeof *S->nodes);
  S->cost = calloc((ns ? ns : 1) * nd, sizeof *S->cost);
  S->per_byte = calloc(nd * nd, sizeof *S->per_byte);
  S->latency = calloc(nd * nd, sizeof *S->latency);
  S->prof = calloc(nd, sizeof *S->prof);
  S->why = calloc(ns ? ns : 1, sizeof *S->why);
  S->resource = calloc(nd, sizeof *S->resource);
  if (!S->sk.first || !S->sk.count || !S->nodes || !S->cost || !S->per_byte ||
      !S->latency || !S->prof || !S->why || !S->resource)
    return oom();
  /* A device that is not on PCI computes on the host's cores (the CPU
   * plugin, an OpenCL or test driver on the CPU): those share one
   * timeline. */
  for (size_t d = 0; d < nd; d++) {
    const char *bus = p->devs[d].dev->info.pci_bus_id;
    S->resource[d] = (uint32_t)d;
    for (size_t e = 0; e < d && S->resource[d] == d; e++) {
      const char *be = p->devs[e].dev->info.pci_bus_id;
      if ((!bus || !*bus) && (!be || !*be))
        S->resource[d] = S->resource[e];
    }
  }
  for (size_t i = p->n_kernels; i-- > 0;) {
    S->sk.first[p->kernels[i].slot] = i;
    S->sk.count[p->kernels[i].slot]++;
  }
  for (size_t s = 0; s < ns; s++)
    n_edges += p->slots[s].t->n_inputs;
  if (!(S->in = malloc((n_edges ? n_edges : 1) * sizeof *S->in)))
    return oom();
  if (autop) {
    for (size_t d = 0; d < nd; d++) {
      S->prof[d].struct_size = sizeof S->prof[d];
      tyto_status st =
          tyto_device_profile_get(o->ctx, p->devs[d].ctx_index, 0, &S->prof[d]);
      if (st != TYTO_OK)
        return st;
    }
    tyto_status st = link_costs(p, o->ctx, S->prof, S->per_byte, S->latency);
    if (st != TYTO_OK)
      return st;
  }
  /* The nodes, their costs, and each refusal of a node's wanted device
   * (its pin, or under the pinned policy the first device). */
  uint32_t *in = S->in;
  for (size_t s = 0; s < ns; s++) {
    const tyto_tensor *t = p->slots[s].t;
    place_node *x = &S->nodes[s];
    uint32_t pd = pin_dev(p, t->pin);
    x->pin = pd == NONE ? 0 : pd + 1;
    x->source = is_source(t->op);
    x->bytes = p->slots[s].bytes;
    x->in = in;
    for (size_t j = 0; j < t->n_inputs; j++) {
      int is = p->slot_of[t->inputs[j]->index];
      if (is >= 0)
        in[x->n_in++] = (uint32_t)is;
    }
    in += x->n_in;
    double *c = &S->cost[s * nd];
    if (x->source || t->op == TYTO_OP_FUSED_OUTPUT)
      continue; /* free everywhere (a fused output follows its node) */
    uint32_t want = pd != NONE ? pd : autop ? NONE : 0;
    if (!autop) {
      /* Only the wanted device is asked, unless it refuses. */
      for (uint32_t d = 0; d < nd; d++)
        c[d] = 1.0;
      if ((S->why[s] = slot_refusal(p, &S->sk, s, want)))
        for (uint32_t d = 0; d < nd; d++) {
          char *why = d == want ? NULL : slot_refusal(p, &S->sk, s, d);
          c[d] = d == want || why ? INFINITY : 1.0;
          free(why);
        }
    } else {
      for (uint32_t d = 0; d < nd; d++) {
        char *why = slot_refusal(p, &S->sk, s, d);
        if (!why) {
          c[d] = node_seconds(p, s, S->sk.count[s], &S->prof[d]);
          continue;
        }
        c[d] = INFINITY;
        /* Kept: the wanted device's reason (the first device's when the
         * node is unpinned), for the messages. */
        if (!S->why[s] && (d == want || (want == NONE && d == 0)))
          S->why[s] = why;
        else
          free(why);
      }
    }
    /* A fused node its device refuses is split, never moved whole: the
     * passes run again with its refused ops left unfused. */
    if (t->op == TYTO_OP_FUSED && S->why[s]) {
      uint32_t d = want != NONE ? want : 0;
      int all_refuse = 1;
      for (uint32_t e = 0; e < nd; e++)
        all_refuse &= isinf(c[e]) != 0;
      if (want != NONE || all_refuse) {
        int r = split_fused(p, o, d, t);
        if (r < 0)
          return oom();
        if (r > 0) {
          *retry = 1;
          return TYTO_OK;
        }
      }
    }
  }
  place_problem pp = {
      ns,          nd,         S->nodes,    S->cost,
      S->per_byte, S->latency, S->resource, autop ? PLACE_AUTO : PLACE_PINNED};
  char msg[128];
  int rc = place_run(&pp, &S->r, msg, sizeof msg);
  if (rc == -1)
    return oom();
  if (rc == -2) {
    /* Some node runs nowhere: name it, with its first device's reason. */
    for (size_t s = 0; s < ns; s++) {
      int any = 0;
      for (uint32_t d = 0; d < nd; d++)
        any |= !isinf(S->cost[s * nd + d]);
      if (any)
        continue;
      char b[160];
      compile_describe(p, p->slots[s].t, b, sizeof b);
      return rt_fail(TYTO_ERR_UNSUPPORTED,
                     "compile: no device of the program runs %s; %s says: %s",
                     b, exec_dev_id(p, 0), S->why[s] ? S->why[s] : "refused");
    }
    return rt_fail(TYTO_ERR_INTERNAL, "compile: placement: %s", msg);
  }
  return TYTO_OK;
}

tyto_status compile_place(tyto_program *p, compile_opts *o, int *retry) {
  place_state S;
  memset(&S, 0, sizeof S);
  *retry = 0;
  tyto_status st = place_slots(p, o, &S, retry);
  if (st != TYTO_OK || *retry) {
    state_free(&S, p->n_slots);
    return st;
  }
  for (size_t s = 0; s < p->n_slots; s++) {
    exec_slot *sl = &p->slots[s];
    sl->dev = S.r.dev[s];
    if (sl->t->op == TYTO_OP_FUSED_OUTPUT)
      sl->dev = p->slots[p->slot_of[sl->t->inputs[0]->index]].dev;
  }
  for (size_t i = 0; i < p->n_kernels; i++)
    p->kernels[i].dev = p->slots[p->kernels[i].slot].dev;
  /* Every fallback is an error (strict) or a warning: one per op, the
   * device that refused it and the one that took it, naming the first
   * few tensors (a big graph must not flood the log). */
  for (size_t s = 0; s < p->n_slots && st == TYTO_OK; s++) {
    if (!S.r.fallback[s])
      continue;
    const tyto_tensor *t = p->slots[s].t;
    uint32_t w = S.r.wanted[s], d = S.r.dev[s];
    p->devs[d].stats.fallbacks++;
    char b[160];
    compile_describe(p, t, b, sizeof b);
    const char *why = S.why[s] ? S.why[s] : "refused";
    if (o->strict) {
      st = rt_fail(TYTO_ERR_UNSUPPORTED,
                   "compile: strict placement: %s cannot run on %s, which "
                   "%s: %s",
                   b, exec_dev_id(p, w),
                   t->pin ? "it is pinned to" : "is the program's first device",
                   why);
      break;
    }
    /* The others of this kind, counted and marked done. */
    size_t n = 1;
    char more[160] = "";
    size_t u = 0;
    for (size_t x = s + 1; x < p->n_slots; x++) {
      if (!S.r.fallback[x] || p->slots[x].t->op != t->op ||
          S.r.wanted[x] != w || S.r.dev[x] != d)
        continue;
      S.r.fallback[x] = 0;
      p->devs[d].stats.fallbacks++;
      if (n++ < 4 && u < sizeof more) {
        int64_t i = exec_user_index(p, p->slots[x].t);
        u += (size_t)snprintf(more + u, sizeof more - u,
                              i >= 0 ? ", #%lld" : ", one made by the passes",
                              (long long)i);
      }
    }
    if (n == 1)
      rt_log(&o->ctx->log, TYTO_LOG_WARN, "tyto",
             "placement: %s runs on %s: %s refuses it: %s", b,
             exec_dev_id(p, d), exec_dev_id(p, w), why);
    else
      rt_log(&o->ctx->log, TYTO_LOG_WARN, "tyto",
             "placement: %zu %s nodes (%s%s%s) run on %s: %s refuses them: "
             "%s",
             n, tyto_op_name(t->op), b, more, n > 4 ? ", ..." : "",
             exec_dev_id(p, d), exec_dev_id(p, w), why);
  }
  if (st == TYTO_OK && o->policy == TYTO_PLACE_AUTO)
    rt_log(&o->ctx->log, TYTO_LOG_DEBUG, "tyto",
           "placement: estimated %.3g ms per run (best single device %s: "
           "%.3g ms)",
           1e3 * S.r.estimate, exec_dev_id(p, S.r.single_dev),
           1e3 * S.r.single_estimate);
  state_free(&S, p->n_slots);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Copies between devices                                                  */

tyto_status compile_copies(tyto_program *p) {
  size_t ns = p->n_slots, nd = p->n_devs, nk = p->n_kernels;
  /* need[s * nd + d]: device d reads slot s, which lives elsewhere. */
  unsigned char *need = calloc((ns ? ns : 1) * nd, 1);
  int *renum = malloc((ns ? ns : 1) * sizeof *renum);
  int *shadow = malloc((ns ? ns : 1) * nd * sizeof *shadow);
  exec_slot *slots = NULL;
  tyto_status st = TYTO_OK;
  if (!need || !renum || !shadow) {
    st = oom();
    goto out;
  }
  for (size_t i = 0; i < nk; i++) {
    const exec_kernel *k = &p->kernels[i];
    for (uint32_t j = 0; j < k->n_in; j++)
      if (p->slots[k->in[j]].dev != k->dev)
        need[(size_t)k->in[j] * nd + k->dev] = 1;
  }
  for (size_t u = 0; u < p->n_updates; u++) {
    int v = p->upd_value[u], pm = p->upd_param[u];
    if (p->slots[v].dev != p->slots[pm].dev)
      need[(size_t)v * nd + p->slots[pm].dev] = 1;
  }
  size_t n_new = ns, n_x = 0;
  for (size_t i = 0; i < ns * nd; i++)
    n_new += need[i];
  if (!(slots = calloc(n_new ? n_new : 1, sizeof *slots))) {
    st = oom();
    goto out;
  }
  /* Each copy right after its source: slot order stays topological. */
  size_t at = 0;
  for (size_t s = 0; s < ns; s++) {
    renum[s] = (int)at;
    slots[at++] = p->slots[s];
    for (size_t d = 0; d < nd; d++) {
      shadow[s * nd + d] = -1;
      if (!need[s * nd + d])
        continue;
      exec_slot *c = &slots[at];
      *c = p->slots[s];
      c->dev = (uint32_t)d;
      c->set = 0;
      c->owned = 0;
      c->buf = NULL;
      c->offset = 0;
      /* A constant is uploaded to each device that reads it, once. */
      c->src = c->t->op == TYTO_OP_CONSTANT ? -1 : renum[s];
      n_x += c->src >= 0;
      shadow[s * nd + d] = (int)at++;
    }
  }
  free(p->slots);
  p->slots = slots;
  p->n_slots = n_new;
  slots = NULL;
  for (size_t i = 0; i < p->graph->n_nodes; i++)
    if (p->slot_of[i] >= 0)
      p->slot_of[i] = renum[p->slot_of[i]];
  for (size_t i = 0; i < p->n_graph; i++)
    if (p->user_slot[i] >= 0)
      p->user_slot[i] = renum[p->user_slot[i]];
  for (size_t i = 0; i < p->n_outputs; i++)
    p->out_slot[i] = renum[p->out_slot[i]];
  for (size_t i = 0; i < p->n_sends; i++)
    p->send_slot[i] = renum[p->send_slot[i]];
  for (size_t u = 0; u < p->n_updates; u++) {
    int v = p->upd_value[u], pm = p->upd_param[u];
    uint32_t d = p->slots[renum[pm]].dev;
    p->upd_param[u] = renum[pm];
    p->upd_value[u] =
        p->slots[renum[v]].dev == d ? renum[v] : shadow[(size_t)v * nd + d];
  }
  for (size_t i = 0; i < nk; i++) {
    exec_kernel *k = &p->kernels[i];
    for (uint32_t j = 0; j < k->n_in; j++) {
      int x = k->in[j];
      k->in[j] = p->slots[renum[x]].dev == k->dev
                     ? renum[x]
                     : shadow[(size_t)x * nd + k->dev];
    }
    for (uint32_t j = 0; j < k->n_out; j++)
      if (k->out[j] >= 0)
        k->out[j] = renum[k->out[j]];
    k->slot = renum[k->slot];
  }
  /* The copy kernels and their descriptions. */
  if (!(p->xfers = calloc(n_x ? n_x : 1, sizeof *p->xfers))) {
    st = oom();
    goto out;
  }
  for (size_t s = 0; s < p->n_slots; s++) {
    exec_slot *c = &p->slots[s];
    if (c->src < 0)
      continue;
    exec_kernel *k = exec_add_kernel(p, (int)s, TYTO_PLUGIN_OP_COPY, 1, 1);
    if (!k) {
      st = oom();
      goto out;
    }
    c = &p->slots[s];
    k->n_in = k->n_out = 1;
    k->in[0] = c->src;
    k->out[0] = (int)s;
    exec_layout(&k->in_l[0], c->t);
    exec_layout(&k->out_l[0], c->t);
    k->dev = c->dev;
    exec_xfer *x = &p->xfers[p->n_xfers];
    x->src = c->src;
    x->dst = (int)s;
    const tyto_device *a = p->devs[p->slots[c->src].dev].dev,
                      *b = p->devs[c->dev].dev;
    x->route = a->plugin == b->plugin && b->plugin->dfns.copy_peer &&
                       (b->info.flags & TYTO_DEVICE_PEER_COPY)
                   ? EXEC_ROUTE_PEER
                   : EXEC_ROUTE_STAGED;
    k->xfer = (int)++p->n_xfers;
    c->xfer = k->xfer;
  }
out:
  free(need);
  free(renum);
  free(shadow);
  free(slots);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Streams, events, staging; the figures                                   */

static tyto_status dev_fail(const tyto_program *p, uint32_t d,
                            tyto_plugin_error *e, const char *what) {
  return rt_fail_plugin(e, "compile on %s: %s failed", exec_dev_id(p, d), what);
}

tyto_status compile_devices(tyto_program *p) {
  for (uint32_t d = 0; d < p->n_devs; d++) {
    tyto_plugin_error *e =
        exec_fns(p, d)->stream_create(exec_handle(p, d), &p->devs[d].stream);
    if (e)
      return dev_fail(p, d, e, "creating a stream");
    p->devs[d].stats.struct_size = sizeof p->devs[d].stats;
    p->devs[d].stats.device = p->devs[d].ctx_index;
    p->devs[d].stats.id = exec_dev_id(p, d);
  }
  if (p->n_xfers && !(p->copies = calloc(p->n_xfers, sizeof *p->copies)))
    return oom();
  for (size_t i = 0; i < p->n_xfers; i++) {
    exec_xfer *x = &p->xfers[i];
    const exec_slot *src = &p->slots[x->src];
    uint32_t a = src->dev, b = p->slots[x->dst].dev;
    const tyto_plugin_device_fns *fa = exec_fns(p, a), *fb = exec_fns(p, b);
    tyto_plugin_device *da = exec_handle(p, a), *db = exec_handle(p, b);
    tyto_plugin_error *e = NULL;
    uint64_t bytes = src->bytes;
    if (x->route == EXEC_ROUTE_PEER) {
      x->n_chunks = 1;
      if ((e = fa->event_create(da, &x->done_src[0])))
        return dev_fail(p, a, e, "creating an event");
      if ((e = fb->event_create(db, &x->done_dst)))
        return dev_fail(p, b, e, "creating an event");
    } else {
      uint64_t n = (bytes + EXEC_CHUNK_BYTES - 1) / EXEC_CHUNK_BYTES;
      x->n_chunks = n < 1                 ? 1
                    : n > EXEC_MAX_CHUNKS ? EXEC_MAX_CHUNKS
                                          : (uint32_t)n;
      for (uint32_t c = 0; c < x->n_chunks; c++)
        if ((e = fa->event_create(da, &x->done_src[c])))
          return dev_fail(p, a, e, "creating an event");
      size_t size = bytes ? (size_t)bytes : 1;
      if (fa->host_alloc_pinned && fa->host_free_pinned &&
          (p->devs[a].dev->info.flags & TYTO_DEVICE_PINNED_HOST) &&
          !fa->host_alloc_pinned(da, size, &x->staging) && x->staging) {
        x->pinned_host = 1;
      } else {
        x->staging = NULL;
        if (posix_memalign(&x->staging, 64, size) != 0) {
          x->staging = NULL;
          return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                         "compile: out of host memory for %llu bytes of "
                         "staging between %s and %s",
                         (unsigned long long)bytes, exec_dev_id(p, a),
                         exec_dev_id(p, b));
        }
      }
    }
    tyto_program_copy *c = &p->copies[i];
    c->struct_size = sizeof *c;
    c->tensor = exec_user_index(p, src->t);
    c->name = src->t->name;
    c->op = tyto_op_name(src->t->op);
    c->from = p->devs[a].ctx_index;
    c->to = p->devs[b].ctx_index;
    c->bytes = bytes;
    c->route = x->route == EXEC_ROUTE_PEER ? "peer"
               : x->pinned_host            ? "staged through pinned host memory"
                                           : "staged through host memory";
  }
  return TYTO_OK;
}

void compile_summary(tyto_program *p, tyto_context *ctx) {
  for (size_t d = 0; d < p->n_devs; d++)
    p->devs[d].stats.nodes = p->devs[d].stats.kernels = 0;
  for (size_t s = 0; s < p->n_slots; s++) {
    const exec_slot *sl = &p->slots[s];
    tyto_op op = sl->t->op;
    if (sl->src < 0 && !is_source(op) && op != TYTO_OP_FUSED_OUTPUT)
      p->devs[sl->dev].stats.nodes++;
  }
  for (size_t i = 0; i < p->n_launch; i++)
    p->devs[p->kernels[p->launch[i]].dev].stats.kernels++;
  if (p->n_devs < 2)
    return;
  char line[512];
  size_t u = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < p->n_xfers; i++)
    bytes += p->slots[p->xfers[i].src].bytes;
  for (size_t d = 0; d < p->n_devs && u < sizeof line; d++)
    u += (size_t)snprintf(line + u, sizeof line - u, "%s%s %zu node%s",
                          d ? ", " : "", exec_dev_id(p, (uint32_t)d),
                          p->devs[d].stats.nodes,
                          p->devs[d].stats.nodes == 1 ? "" : "s");
  rt_log(&ctx->log, TYTO_LOG_INFO, "tyto",
         "program placed: %s; %zu cop%s between devices, %llu bytes per run",
         line, p->n_xfers, p->n_xfers == 1 ? "y" : "ies",
         (unsigned long long)bytes);
}
