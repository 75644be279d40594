/*
 * A program's memory: the planner (plan/plan.h) sees one step per node
 * and one value per slot and kernel workspace; everything but inputs,
 * parameters, constants and outputs then lives in one arena per program,
 * reused as values die, and the kernels run in the order the plan chose.
 * Elementwise ops (fused ones too) may write over an input they read last;
 * a reshape planned in place launches nothing.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "../plan/plan.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

/* Offsets in the arena are multiples of this: a cache line, and enough
 * for any vector load. */
#define EXEC_ALIGN 64

static const tyto_plugin_device_fns *fns(const tyto_program *p) {
  return &p->dev->plugin->dfns;
}

static tyto_status slot_fail(const tyto_program *p, tyto_plugin_error *e,
                             const char *what, const exec_slot *sl) {
  char d[EXEC_DESC];
  return rt_fail_plugin(e, "compile: %s for %s", what,
                        exec_slot_desc(p, sl, d));
}

/* Gives slot s a buffer of its own; constants and parameters get their
 * values. */
static tyto_status own_buffer(tyto_program *p, exec_slot *sl) {
  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_device *d = p->dev->handle;
  const tyto_tensor *t = sl->t;
  tyto_plugin_error *e = f->buffer_alloc(d, sl->bytes, &sl->buf);
  if (e)
    return slot_fail(p, e, "allocating a buffer failed", sl);
  sl->owned = 1;
  sl->offset = 0;
  if (t->op == TYTO_OP_CONSTANT && sl->bytes) {
    if ((e = f->copy_h2d(d, NULL, sl->buf, 0, t->data, sl->bytes)))
      return slot_fail(p, e, "uploading a constant failed", sl);
  } else if (t->op == TYTO_OP_PARAMETER && sl->bytes) {
    void *zeros = calloc(1, sl->bytes);
    if (!zeros)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
    e = f->copy_h2d(d, NULL, sl->buf, 0, zeros, sl->bytes);
    free(zeros);
    if (e)
      return slot_fail(p, e, "zeroing a parameter failed", sl);
  }
  return TYTO_OK;
}

static int same_layout(const tyto_plugin_layout *a,
                       const tyto_plugin_layout *b) {
  if (a->rank != b->rank || a->offset != b->offset || a->dtype != b->dtype)
    return 0;
  for (uint32_t i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i])
      return 0;
  return 1;
}

/* Bit j: kernel k may write its output 0 over input j (it reads and
 * writes element i at the same place). */
static uint32_t inplace_mask(const tyto_program *p, const exec_kernel *k) {
  const tyto_tensor *t = p->slots[k->slot].t;
  int eltwise = (k->op >= TYTO_PLUGIN_OP_NEG && k->op <= TYTO_PLUGIN_OP_FMA) ||
                k->op == TYTO_PLUGIN_OP_FUSED;
  if (t->op == TYTO_OP_RESHAPE)
    return 1;
  if (!eltwise)
    return 0;
  uint32_t m = 0;
  for (uint32_t j = 0; j < k->n_in && j < 32; j++)
    if (same_layout(&k->in_l[j], &k->out_l[0]))
      m |= UINT32_C(1) << j;
  return m;
}

typedef struct problem {
  plan_problem pr;
  plan_value *values;
  plan_step *steps;
  uint32_t *ids;   /* the steps' in/out lists */
  int *step_slot;  /* step -> slot */
  size_t *first_k; /* slot -> its first kernel; n_k[slot] of them */
  size_t *n_k;
  int *ws_value; /* kernel -> its workspace value, or -1 */
} problem;

static void problem_free(problem *q) {
  free(q->values);
  free(q->steps);
  free(q->ids);
  free(q->step_slot);
  free(q->first_k);
  free(q->n_k);
  free(q->ws_value);
}

static uint64_t round_up(uint64_t bytes) {
  return (bytes + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
}

static int is_pinned(const tyto_program *p, size_t s) {
  tyto_op op = p->slots[s].t->op;
  if (op == TYTO_OP_INPUT || op == TYTO_OP_PARAMETER || op == TYTO_OP_CONSTANT)
    return 1;
  for (size_t i = 0; i < p->n_outputs; i++)
    if (p->out_slot[i] == (int)s)
      return 1;
  return 0;
}

static tyto_status build_problem(const tyto_program *p, problem *q) {
  size_t ns = p->n_slots, nk = p->n_kernels, n_ws = 0, n_ids = 0;
  memset(q, 0, sizeof *q);
  q->first_k = calloc(ns ? ns : 1, sizeof *q->first_k);
  q->n_k = calloc(ns ? ns : 1, sizeof *q->n_k);
  q->ws_value = malloc((nk ? nk : 1) * sizeof *q->ws_value);
  q->step_slot = malloc((ns ? ns : 1) * sizeof *q->step_slot);
  q->steps = calloc(ns ? ns : 1, sizeof *q->steps);
  if (!q->first_k || !q->n_k || !q->ws_value || !q->step_slot || !q->steps)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  for (size_t i = nk; i-- > 0;) {
    const exec_kernel *k = &p->kernels[i];
    q->first_k[k->slot] = i;
    q->n_k[k->slot]++;
    q->ws_value[i] = k->workspace_bytes ? (int)(ns + n_ws++) : -1;
    n_ids += k->n_in + k->n_out + 1;
  }
  size_t nv = ns + n_ws;
  q->values = calloc(nv ? nv : 1, sizeof *q->values);
  q->ids = malloc((n_ids + ns) * sizeof *q->ids);
  if (!q->values || !q->ids)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  /* Sizes count whole alignment units, as separate buffers would take
   * them too: naive, planned and lower bound are then in one currency. */
  for (size_t s = 0; s < ns; s++) {
    q->values[s].bytes = round_up(p->slots[s].bytes);
    q->values[s].align = EXEC_ALIGN;
    q->values[s].pinned = is_pinned(p, s);
  }
  for (size_t i = 0; i < nk; i++)
    if (q->ws_value[i] >= 0) {
      plan_value *v = &q->values[q->ws_value[i]];
      v->bytes = round_up(p->kernels[i].workspace_bytes);
      v->align = EXEC_ALIGN;
    }
  /* One step per computed slot, in slot order (topological); the
   * outputs of a fused kernel beyond the first are its step's too. */
  uint32_t *id = q->ids;
  size_t n_steps = 0;
  for (size_t s = 0; s < ns; s++) {
    const tyto_tensor *t = p->slots[s].t;
    if (t->op == TYTO_OP_INPUT || t->op == TYTO_OP_PARAMETER ||
        t->op == TYTO_OP_CONSTANT || t->op == TYTO_OP_FUSED_OUTPUT)
      continue;
    plan_step *st = &q->steps[n_steps];
    q->step_slot[n_steps++] = (int)s;
    st->in = id;
    for (size_t i = q->first_k[s]; i < q->first_k[s] + q->n_k[s]; i++)
      for (uint32_t j = 0; j < p->kernels[i].n_in; j++)
        id[st->n_in++] = (uint32_t)p->kernels[i].in[j];
    id += st->n_in;
    st->out = id;
    id[st->n_out++] = (uint32_t)s;
    for (size_t i = q->first_k[s]; i < q->first_k[s] + q->n_k[s]; i++) {
      const exec_kernel *k = &p->kernels[i];
      for (uint32_t j = 1; j < k->n_out; j++)
        if (k->out[j] >= 0 && k->out[j] != (int)s)
          id[st->n_out++] = (uint32_t)k->out[j];
      if (q->ws_value[i] >= 0)
        id[st->n_out++] = (uint32_t)q->ws_value[i];
    }
    id += st->n_out;
    if (q->n_k[s] == 1 && !q->values[s].pinned)
      st->inplace_mask = inplace_mask(p, &p->kernels[q->first_k[s]]);
  }
  q->pr.n_values = nv;
  q->pr.values = q->values;
  q->pr.n_steps = n_steps;
  q->pr.steps = q->steps;
  return TYTO_OK;
}

static const char *order_name(plan_order o) {
  switch (o) {
  case PLAN_ORDER_GREEDY: return "greedy";
  case PLAN_ORDER_DEPTH: return "depth";
  default: return "graph";
  }
}

/* Plans are checked by the independent verifier in every build without
 * NDEBUG, and wherever TYTO_VERIFY_PLAN=1. */
static int verify_plans(void) {
#ifndef NDEBUG
  return 1;
#else
  const char *v = getenv("TYTO_VERIFY_PLAN");
  return v && strcmp(v, "1") == 0;
#endif
}

tyto_status exec_plan_memory(tyto_program *p, int plan) {
  const tyto_plugin_device_fns *f = fns(p);
  tyto_plugin_device *d = p->dev->handle;
  problem q;
  plan_result r;
  memset(&r, 0, sizeof r);
  char msg[256];
  tyto_status st = build_problem(p, &q);
  if (st != TYTO_OK) {
    problem_free(&q);
    return st;
  }
  int rc = plan_build(&q.pr, &r, msg, sizeof msg);
  if (rc == 0 && verify_plans() && plan_verify(&q.pr, &r, msg, sizeof msg))
    rc = -2;
  if (rc != 0) {
    problem_free(&q);
    plan_result_free(&r);
    return rc == -1 ? rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory")
                    : rt_fail(TYTO_ERR_INTERNAL,
                              "compile: memory plan rejected: %s", msg);
  }
  p->stats.naive_bytes = r.naive_bytes;
  p->stats.lower_bound_bytes = r.lower_bound;
  p->stats.pinned_bytes = r.pinned_bytes;
  p->stats.order = (tyto_plan_order)r.order_kind;
  p->stats.order_name = order_name(r.order_kind);
  if (plan) {
    p->stats.planned_bytes = r.planned_bytes;
    p->stats.arena_bytes = r.arena_bytes;
  } else {
    p->stats.planned_bytes = r.naive_bytes;
    p->stats.order = TYTO_PLAN_ORDER_GRAPH;
    p->stats.order_name = order_name(PLAN_ORDER_GIVEN);
  }
  tyto_plugin_error *e = NULL;
  /* Even an empty arena is a buffer: zero-byte tensors bind to it. */
  if (plan && (e = f->buffer_alloc(d, r.arena_bytes, &p->arena)))
    st = rt_fail_plugin(e,
                        "compile: allocating the %llu-byte arena on %s failed",
                        (unsigned long long)r.arena_bytes, p->dev->info.id);
  for (size_t s = 0; s < p->n_slots && st == TYTO_OK; s++) {
    exec_slot *sl = &p->slots[s];
    if (!plan || q.values[s].pinned) {
      st = own_buffer(p, sl);
    } else {
      sl->buf = p->arena;
      sl->offset = r.offset[s];
    }
  }
  for (size_t i = 0; i < p->n_kernels && st == TYTO_OK; i++) {
    exec_kernel *k = &p->kernels[i];
    if (q.ws_value[i] < 0)
      continue;
    if (plan) {
      k->workspace = p->arena;
      k->workspace_offset = r.offset[q.ws_value[i]];
    } else if ((e = f->buffer_alloc(d, k->workspace_bytes, &k->workspace))) {
      st = slot_fail(p, e, "allocating a kernel's workspace failed",
                     &p->slots[k->slot]);
    } else {
      k->workspace_owned = 1;
    }
  }
  if (st == TYTO_OK && !(p->launch = malloc((p->n_kernels ? p->n_kernels : 1) *
                                            sizeof *p->launch)))
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  if (st == TYTO_OK) {
    for (size_t j = 0; j < q.pr.n_steps; j++) {
      size_t step = plan ? r.order[j] : j;
      int s = q.step_slot[step];
      for (size_t i = q.first_k[s]; i < q.first_k[s] + q.n_k[s]; i++) {
        exec_kernel *k = &p->kernels[i];
        /* A reshape whose input it took: the bytes are already there. */
        k->skip = plan && p->slots[s].t->op == TYTO_OP_RESHAPE &&
                  r.inplace_of[s] >= 0;
        if (!k->skip)
          p->launch[p->n_launch++] = i;
      }
    }
  }
  problem_free(&q);
  plan_result_free(&r);
  return st;
}
