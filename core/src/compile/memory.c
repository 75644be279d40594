/*
 * A program's memory: the planner (plan/plan.h) sees one step per node
 * (and per copy between devices) and one value per slot and kernel
 * workspace; everything but inputs, parameters, constants and outputs
 * then lives in one arena per device, reused as values die, and the
 * kernels run in the order the plan chose. Over several devices the order
 * is chosen once for the whole program, and each device's arena is then
 * laid out over that order from its own values (the others count as
 * pinned and empty there): each device reuses memory only after the last
 * reader on its own in-order stream, and a copy's read of its source is
 * queued on the source's stream (exec/program.c).
 * Elementwise ops (fused ones too) may write over an input they read last;
 * a reshape planned in place launches nothing.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../exec/program.h"
#include "../plan/plan.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

static tyto_status slot_fail(const tyto_program *p, tyto_plugin_error *e,
                             const char *what, const exec_slot *sl) {
  char d[EXEC_DESC];
  return rt_fail_plugin(e, "compile on %s: %s for %s", exec_dev_id(p, sl->dev),
                        what, exec_slot_name(p, sl, d));
}

/* Gives slot s a buffer of its own; constants and parameters get their
 * values. */
static tyto_status own_buffer(tyto_program *p, exec_slot *sl) {
  const tyto_plugin_device_fns *f = exec_fns(p, sl->dev);
  tyto_plugin_device *d = exec_handle(p, sl->dev);
  const tyto_tensor *t = sl->t;
  tyto_plugin_error *e =
      rt_buffer_alloc(p->devs[sl->dev].dev, sl->bytes, &sl->buf);
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
  /* The stride of an extent-1 axis is never used (broadcast layouts give
   * it 0, row-major ones the product of the extents after it). */
  for (uint32_t i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i] ||
        (a->shape[i] != 1 && a->strides[i] != b->strides[i]))
      return 0;
  return 1;
}

/* Bit j: kernel k may write its output 0 over input j (it reads and
 * writes element i at the same place). */
static uint32_t inplace_mask(const tyto_program *p, const exec_kernel *k) {
  const tyto_tensor *t = p->slots[k->slot].t;
  if (k->xfer)
    return 0;
  int eltwise = (k->op >= TYTO_PLUGIN_OP_NEG && k->op <= TYTO_PLUGIN_OP_FMA) ||
                k->op == TYTO_PLUGIN_OP_FUSED;
  if (t->op == TYTO_OP_RESHAPE || t->op == TYTO_OP_STOP_GRADIENT ||
      t->op == TYTO_OP_CUSTOM_DERIVATIVE || t->op == TYTO_OP_REPLICA_SUM)
    return 1;
  if (!eltwise)
    return 0;
  uint32_t m = 0;
  for (uint32_t j = 0; j < k->n_in && j < 32; j++)
    if (same_layout(&k->in_l[j], &k->out_l[0]))
      m |= UINT32_C(1) << j;
  return m;
}

/* A growable list of value ids. */
typedef struct idlist {
  uint32_t *v;
  size_t n, cap;
} idlist;

static int push(idlist *l, uint32_t x) {
  if (l->n == l->cap) {
    size_t cap = 2 * l->cap + 4;
    uint32_t *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = x;
  return 0;
}

typedef struct problem {
  plan_problem pr;
  plan_value *values;
  size_t n_values, cap_values;
  plan_step *steps;
  size_t n_steps;
  idlist *ins, *outs; /* per step, until flattened into ids */
  uint32_t *ids;
  size_t *k_first, *k_n; /* per step: its kernels */
  int *step_slot;        /* per step: its slot, or -1 (an update's copy) */
  size_t *first_k, *n_k; /* per slot: its kernels */
  int *ws_value;         /* per kernel: its workspace value, or -1 */
  int *alias; /* per slot: the parameter slot it is written into, or -1 */
  /* Per slot, with exchanges: whether a send needs it (NULL: none). */
  unsigned char *feeds;
  int *done;     /* per step: its "has run" token value, or -1 */
  int exchanged; /* the exchange's token value (every update reads it) */
  unsigned char *is_out; /* per slot: a program output */
  int *n_upd_value;      /* per slot: the updates whose value it is */
  size_t *rd_at;         /* per slot: its readers rd[rd_at[s] ..[s + 1]) */
  int *rd;               /* reading slots, ascending */
  uint32_t *seen;        /* per slot: walk marks (== walk) */
  uint32_t walk;
  int *stk;
} problem;

static void problem_free(problem *q) {
  for (size_t i = 0; i < q->n_steps; i++) {
    if (q->ins)
      free(q->ins[i].v);
    if (q->outs)
      free(q->outs[i].v);
  }
  free(q->ins);
  free(q->outs);
  free(q->values);
  free(q->steps);
  free(q->ids);
  free(q->k_first);
  free(q->k_n);
  free(q->step_slot);
  free(q->first_k);
  free(q->n_k);
  free(q->ws_value);
  free(q->alias);
  free(q->feeds);
  free(q->done);
  free(q->is_out);
  free(q->n_upd_value);
  free(q->rd_at);
  free(q->rd);
  free(q->seen);
  free(q->stk);
}

static int is_pinned(const tyto_program *p, const problem *q, size_t s) {
  tyto_op op = p->slots[s].t->op;
  if (p->slots[s].src >= 0) /* a copy from another device, made each run */
    return q->is_out[s];
  return op == TYTO_OP_INPUT || op == TYTO_OP_PARAMETER ||
         op == TYTO_OP_CONSTANT || q->is_out[s];
}

static int add_value(problem *q, uint64_t bytes, uint32_t align, int pinned) {
  if (q->n_values == q->cap_values) {
    size_t cap = 2 * q->cap_values + 16;
    plan_value *v = realloc(q->values, cap * sizeof *v);
    if (!v)
      return -1;
    q->values = v;
    q->cap_values = cap;
  }
  plan_value *v = &q->values[q->n_values];
  v->bytes = bytes;
  v->align = align;
  v->pinned = pinned;
  return (int)q->n_values++;
}

/* The slot whose kernels write slot s (a fused output's fused node). */
static int writer_slot(const tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t;
  return t->op == TYTO_OP_FUSED_OUTPUT && p->slots[s].src < 0
             ? p->slot_of[t->inputs[0]->index]
             : s;
}

/* What slot s reads: a copy its source, a node its inputs' slots (their
 * home slots: a kernel that reads a copy of one reads it through that
 * copy, which reads the home slot). slot_n_reads() of them; the j-th is
 * slot_read() (-1 for an input with no slot). */
static size_t slot_n_reads(const tyto_program *p, size_t s) {
  const exec_slot *sl = &p->slots[s];
  if (sl->src >= 0)
    return 1;
  return sl->t->op == TYTO_OP_CONSTANT ? 0 : sl->t->n_inputs;
}

static int slot_read(const tyto_program *p, size_t s, size_t j) {
  const exec_slot *sl = &p->slots[s];
  return sl->src >= 0 ? sl->src : p->slot_of[sl->t->inputs[j]->index];
}

/* Whether slot s reads slot x. */
static int reads_slot(const tyto_program *p, size_t s, int x) {
  for (size_t j = 0, n = slot_n_reads(p, s); j < n; j++)
    if (slot_read(p, s, j) == x)
      return 1;
  return 0;
}

/* Whether a slot that reads slot ps depends on slot ws (other than ws).
 * Slots are in topological order, so only readers after ws can, and the
 * walk forward from ws stops past the last of them: an update made after
 * every read of its parameter (an optimiser's) costs one scan of the
 * parameter's readers. */
static int reader_after(const tyto_program *p, problem *q, int ws, int ps) {
  int last = -1;
  for (size_t k = q->rd_at[ps]; k < q->rd_at[ps + 1]; k++)
    if (q->rd[k] != ws && q->rd[k] > last)
      last = q->rd[k];
  if (last < ws)
    return 0;
  size_t sp = 0;
  q->walk++;
  q->seen[ws] = q->walk;
  q->stk[sp++] = ws;
  while (sp) {
    int s = q->stk[--sp];
    for (size_t k = q->rd_at[s]; k < q->rd_at[s + 1]; k++) {
      int r = q->rd[k];
      if (r > last || q->seen[r] == q->walk)
        continue;
      if (reads_slot(p, (size_t)r, ps))
        return 1;
      q->seen[r] = q->walk;
      q->stk[sp++] = r;
    }
  }
  return 0;
}

/* Whether update i can be written by its value's own kernel straight into
 * the parameter: the kernel is elementwise (or fused) and reads the
 * parameter with the layout it writes, the value is no output and no other
 * update's, and nothing that reads the old parameter depends on the
 * kernel (it would have to run both before and after it). */
static int update_in_place(const tyto_program *p, problem *q, size_t i) {
  int vs = p->upd_value[i], ps = p->upd_param[i];
  if (vs == ps || is_pinned(p, q, (size_t)vs) || q->n_upd_value[vs] > 1)
    return 0;
  int ws = writer_slot(p, vs);
  if (ws < 0 || q->n_k[ws] != 1)
    return 0;
  const exec_kernel *k = &p->kernels[q->first_k[ws]];
  if (!((k->op >= TYTO_PLUGIN_OP_NEG && k->op <= TYTO_PLUGIN_OP_FMA) ||
        k->op == TYTO_PLUGIN_OP_FUSED))
    return 0;
  uint32_t w = 0;
  while (w < k->n_out && k->out[w] != vs)
    w++;
  if (w == k->n_out)
    return 0;
  /* With exchanges, a kernel writing the parameter runs after the last
   * one: no send may need its other outputs (a fused kernel's), or the
   * send would wait for the exchange it feeds. Such an update is copied
   * over the parameter instead. */
  for (uint32_t j = 0; j < k->n_out && q->feeds; j++)
    if (k->out[j] >= 0 && k->out[j] != vs && q->feeds[k->out[j]])
      return 0;
  int reads = 0;
  for (uint32_t j = 0; j < k->n_in; j++)
    if (k->in[j] == ps) {
      if (!same_layout(&k->in_l[j], &k->out_l[w]))
        return 0;
      reads = 1;
    }
  /* Nothing downstream of the kernel may read the old parameter. */
  return reads && !reader_after(p, q, ws, ps);
}

/* A step over kernels [k0, k0 + kn) writing slot s (-1: an update's copy,
 * which writes only its token). */
static int add_step(const tyto_program *p, problem *q, int s, size_t k0,
                    size_t kn) {
  size_t st = q->n_steps++;
  q->step_slot[st] = s;
  q->k_first[st] = k0;
  q->k_n[st] = kn;
  q->done[st] = -1;
  idlist *in = &q->ins[st], *out = &q->outs[st];
  if (s >= 0 && push(out, (uint32_t)s) < 0)
    return -1;
  for (size_t i = k0; i < k0 + kn; i++) {
    const exec_kernel *k = &p->kernels[i];
    for (uint32_t j = 0; j < k->n_in; j++)
      if (push(in, (uint32_t)k->in[j]) < 0)
        return -1;
    /* A fused kernel's other outputs, and every workspace. */
    for (uint32_t j = 1; s >= 0 && j < k->n_out; j++)
      if (k->out[j] >= 0 && k->out[j] != s &&
          push(out, (uint32_t)k->out[j]) < 0)
        return -1;
    if (q->ws_value[i] >= 0 && push(out, (uint32_t)q->ws_value[i]) < 0)
      return -1;
  }
  return 0;
}

static tyto_status oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
}

/* The exchanges with the host: per stage, a step without kernels
 * (step_slot -2) that reads every send of the stage and the previous
 * stage's token, and writes every recv of the stage and its own token, so
 * that the order puts each stage's sends before it, everything that needs
 * its recvs after it, and the stages in their order: phase k is the
 * launches between exchange k - 1 and exchange k (exec_plan_memory). */
static int add_exchange(tyto_program *p, problem *q) {
  int token = -1;
  for (size_t stage = 0; stage + 1 < p->n_phases; stage++) {
    size_t st = q->n_steps++;
    q->step_slot[st] = -2;
    q->k_first[st] = 0;
    q->k_n[st] = 0;
    q->done[st] = -1;
    if (token >= 0 && push(&q->ins[st], (uint32_t)token) < 0)
      return -1;
    for (size_t i = 0; i < p->n_sends; i++)
      if (p->send_stage[i] == stage &&
          push(&q->ins[st], (uint32_t)p->send_slot[i]) < 0)
        return -1;
    for (size_t i = 0; i < p->n_sends; i++) {
      int64_t r = p->recv_index[i];
      int s = r >= 0 && (size_t)r < p->n_graph ? p->user_slot[r] : -1;
      if (p->send_stage[i] != stage || s < 0 || p->slots[s].recv)
        continue; /* another stage's, unused, or received twice */
      p->slots[s].recv = 1 + (int)stage;
      if (push(&q->outs[st], (uint32_t)s) < 0)
        return -1;
    }
    if ((token = add_value(q, 0, 1, 0)) < 0 ||
        push(&q->outs[st], (uint32_t)token) < 0)
      return -1;
  }
  /* The last stage's token every parameter update reads: nothing
   * persistent changes before the last phase, so a run that fails earlier
   * (or a host that never runs the last phase) leaves the parameters as
   * they were. */
  q->exchanged = token;
  return 0;
}

/* Orders the overwrite of each updated parameter after every other step
 * that reads it: each such step writes a "has run" token (a zero-byte
 * value) that the overwriting step reads. The steps reading each slot and
 * the step overwriting each parameter are indexed first, so this is
 * linear in the steps' inputs. */
static int add_tokens(const tyto_program *p, problem *q) {
  size_t ns = p->n_slots, nu = p->n_updates, n_ids = 0;
  int rc = -1;
  /* Steps reading slot v: rs[at[v] .. end[v]), ascending, once each. */
  size_t *at = calloc(ns + 1, sizeof *at);
  size_t *end = malloc((ns ? ns : 1) * sizeof *end);
  size_t *step_of = malloc((ns ? ns : 1) * sizeof *step_of);
  size_t *copy_of = malloc((nu ? nu : 1) * sizeof *copy_of);
  size_t *rs = NULL;
  if (!at || !end || !step_of || !copy_of)
    goto out;
  for (size_t s = 0; s < ns; s++)
    step_of[s] = SIZE_MAX;
  for (size_t u = 0; u < nu; u++)
    copy_of[u] = SIZE_MAX;
  for (size_t st = 0; st < q->n_steps; st++) {
    int s = q->step_slot[st];
    if (s >= 0)
      step_of[s] = st;
    else if (s == -1)
      copy_of[p->kernels[q->k_first[st]].update - 1] = st;
    for (size_t j = 0; j < q->ins[st].n; j++)
      if (q->ins[st].v[j] < ns) {
        at[q->ins[st].v[j] + 1]++;
        n_ids++;
      }
  }
  for (size_t s = 0; s < ns; s++)
    at[s + 1] += at[s];
  memcpy(end, at, ns * sizeof *end);
  if (!(rs = malloc((n_ids ? n_ids : 1) * sizeof *rs)))
    goto out;
  for (size_t st = 0; st < q->n_steps; st++)
    for (size_t j = 0; j < q->ins[st].n; j++) {
      uint32_t v = q->ins[st].v[j];
      if (v < ns && (end[v] == at[v] || rs[end[v] - 1] != st))
        rs[end[v]++] = st;
    }
  for (size_t u = 0; u < nu; u++) {
    int ps = p->upd_param[u], vs = p->upd_value[u];
    /* The step that overwrites ps: the value's kernel when the update is
     * in place, else the update's copy. */
    size_t over = q->alias[vs] == ps ? step_of[writer_slot(p, vs)] : copy_of[u];
    if (over == SIZE_MAX)
      continue; /* the value is the parameter itself: nothing to do */
    if (q->exchanged >= 0 && push(&q->ins[over], (uint32_t)q->exchanged) < 0)
      goto out;
    for (size_t k = at[ps]; k < end[ps]; k++) {
      size_t st = rs[k];
      if (st == over)
        continue;
      if (q->done[st] < 0) {
        if ((q->done[st] = add_value(q, 0, 1, 0)) < 0 ||
            push(&q->outs[st], (uint32_t)q->done[st]) < 0)
          goto out;
      }
      if (push(&q->ins[over], (uint32_t)q->done[st]) < 0)
        goto out;
    }
    /* A copy writes its own token (a step must write something). */
    if (q->step_slot[over] < 0 && !q->outs[over].n) {
      int t = add_value(q, 0, 1, 0);
      if (t < 0 || push(&q->outs[over], (uint32_t)t) < 0)
        goto out;
    }
  }
  rc = 0;
out:
  free(at);
  free(end);
  free(step_of);
  free(copy_of);
  free(rs);
  return rc;
}

/* One step per computed slot, in slot order (topological), one per update
 * that is copied, and the tokens that order the updates. */
static tyto_status build_problem(tyto_program *p, problem *q) {
  size_t ns = p->n_slots, nk = p->n_kernels,
         nst = ns + p->n_updates + p->n_phases;
  memset(q, 0, sizeof *q);
  q->exchanged = -1;
#define ALLOC(f, n) (q->f = calloc((n) ? (n) : 1, sizeof *q->f))
  if (!ALLOC(first_k, ns) || !ALLOC(n_k, ns) || !ALLOC(step_slot, nst) ||
      !ALLOC(steps, nst) || !ALLOC(ins, nst) || !ALLOC(outs, nst) ||
      !ALLOC(k_first, nst) || !ALLOC(k_n, nst) || !ALLOC(alias, ns) ||
      !ALLOC(done, nst) || !ALLOC(is_out, ns) || !ALLOC(n_upd_value, ns) ||
      !ALLOC(rd_at, ns + 1) || !ALLOC(seen, ns) || !ALLOC(stk, ns))
    return oom();
  /* Each slot's readers (a counting sort over the nodes' inputs). */
  size_t n_rd = 0;
  for (size_t s = 0; s < ns; s++)
    for (size_t j = 0, n = slot_n_reads(p, s); j < n; j++) {
      int x = slot_read(p, s, j);
      if (x >= 0) {
        q->rd_at[x + 1]++;
        n_rd++;
      }
    }
  for (size_t s = 0; s < ns; s++)
    q->rd_at[s + 1] += q->rd_at[s];
  if (!ALLOC(rd, n_rd))
    return oom();
#undef ALLOC
  for (size_t s = 0; s < ns; s++)
    for (size_t j = 0, n = slot_n_reads(p, s); j < n; j++) {
      int x = slot_read(p, s, j);
      if (x >= 0)
        q->rd[q->rd_at[x]++] = (int)s;
    }
  for (size_t s = ns; s > 0; s--)
    q->rd_at[s] = q->rd_at[s - 1];
  q->rd_at[0] = 0;
  for (size_t i = 0; i < p->n_outputs; i++)
    q->is_out[p->out_slot[i]] = 1;
  /* Sends are read by the host after phase 0 and until the next run:
   * memory of their own, as outputs. */
  for (size_t i = 0; i < p->n_sends; i++)
    q->is_out[p->send_slot[i]] = 1;
  for (size_t i = 0; i < p->n_updates; i++)
    q->n_upd_value[p->upd_value[i]]++;
  for (size_t i = nk; i-- > 0;) {
    const exec_kernel *k = &p->kernels[i];
    if (k->update)
      continue;
    q->first_k[k->slot] = i;
    q->n_k[k->slot]++;
  }
  for (size_t s = 0; s < ns; s++) {
    q->alias[s] = -1;
    if (add_value(q, exec_round_up(p->slots[s].bytes), EXEC_ALIGN,
                  is_pinned(p, q, s)) < 0)
      return oom();
  }
  if (p->n_sends) {
    if (!(q->feeds = calloc(ns ? ns : 1, 1)))
      return oom();
    for (size_t i = 0; i < p->n_sends; i++)
      q->feeds[p->send_slot[i]] = 1;
    for (size_t s = ns; s-- > 0;)
      for (size_t j = 0, n = q->feeds[s] ? slot_n_reads(p, s) : 0; j < n; j++) {
        int x = slot_read(p, s, j);
        if (x >= 0)
          q->feeds[x] = 1;
      }
  }
  p->stats.updates_in_place = 0;
  for (size_t i = 0; i < p->n_updates; i++)
    if (update_in_place(p, q, i)) {
      int vs = p->upd_value[i];
      q->alias[vs] = p->upd_param[i];
      q->values[vs].pinned = 1; /* it lives in the parameter's memory */
      q->values[vs].bytes = 0;
      p->stats.updates_in_place++;
    }
  /* The others are copied once nothing reads the old value. */
  for (size_t i = 0; i < p->n_updates; i++) {
    int vs = p->upd_value[i];
    if (vs == p->upd_param[i] || q->alias[vs] == p->upd_param[i])
      continue;
    tyto_status st = exec_lower_update(p, i);
    if (st != TYTO_OK)
      return st;
  }
  nk = p->n_kernels;
  if (!(q->ws_value = calloc(nk ? nk : 1, sizeof *q->ws_value)))
    return oom();
  for (size_t i = 0; i < nk; i++) {
    q->ws_value[i] = -1;
    uint64_t b = p->kernels[i].workspace_bytes;
    if (b &&
        (q->ws_value[i] = add_value(q, exec_round_up(b), EXEC_ALIGN, 0)) < 0)
      return oom();
  }
  for (size_t s = 0; s < ns; s++) {
    tyto_op op = p->slots[s].t->op;
    if (p->slots[s].src < 0 &&
        (op == TYTO_OP_INPUT || op == TYTO_OP_PARAMETER ||
         op == TYTO_OP_CONSTANT || op == TYTO_OP_FUSED_OUTPUT))
      continue;
    if (add_step(p, q, (int)s, q->first_k[s], q->n_k[s]) < 0)
      return oom();
    if (q->n_k[s] == 1 && !q->values[s].pinned)
      q->steps[q->n_steps - 1].inplace_mask =
          inplace_mask(p, &p->kernels[q->first_k[s]]);
  }
  for (size_t i = 0; i < nk; i++)
    if (p->kernels[i].update && add_step(p, q, -1, i, 1) < 0)
      return oom();
  if (p->n_sends && add_exchange(p, q) < 0)
    return oom();
  if (add_tokens(p, q) < 0)
    return oom();
  size_t total = 0;
  for (size_t st = 0; st < q->n_steps; st++)
    total += q->ins[st].n + q->outs[st].n;
  if (!(q->ids = malloc((total ? total : 1) * sizeof *q->ids)))
    return oom();
  uint32_t *id = q->ids;
  for (size_t st = 0; st < q->n_steps; st++) {
    plan_step *x = &q->steps[st];
    x->n_in = q->ins[st].n;
    x->in = id;
    if (x->n_in)
      memcpy(id, q->ins[st].v, x->n_in * sizeof *id);
    id += x->n_in;
    x->n_out = q->outs[st].n;
    x->out = id;
    memcpy(id, q->outs[st].v, x->n_out * sizeof *id);
    id += x->n_out;
  }
  q->pr.n_values = q->n_values;
  q->pr.values = q->values;
  q->pr.n_steps = q->n_steps;
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

/* Lays out each device's arena over the global order r->order: device
 * d's problem is the whole one with every value of another device pinned
 * and empty, its steps in that order (PLAN_ORDER_GIVEN). Fills off and
 * inplace (per value) and each device's figures. */
static int plan_devices(tyto_program *p, const problem *q, const plan_result *r,
                        uint64_t *off, int *inplace, char *msg,
                        size_t msg_size) {
  size_t nv = q->n_values, nst = q->n_steps;
  uint32_t *vdev = malloc((nv ? nv : 1) * sizeof *vdev);
  plan_value *vals = malloc((nv ? nv : 1) * sizeof *vals);
  plan_step *steps = malloc((nst ? nst : 1) * sizeof *steps);
  int rc = -1;
  if (!vdev || !vals || !steps)
    goto out;
  for (size_t v = 0; v < nv; v++)
    vdev[v] = UINT32_MAX; /* "has run" tokens: empty, on every device */
  for (size_t s = 0; s < p->n_slots; s++)
    vdev[s] = p->slots[s].dev;
  for (size_t i = 0; i < p->n_kernels; i++)
    if (q->ws_value[i] >= 0)
      vdev[q->ws_value[i]] = p->kernels[i].dev;
  for (size_t j = 0; j < nst; j++)
    steps[j] = q->steps[r->order[j]];
  rc = 0;
  for (uint32_t d = 0; d < p->n_devs && rc == 0; d++) {
    for (size_t v = 0; v < nv; v++) {
      vals[v] = q->values[v];
      if (vdev[v] != d && vdev[v] != UINT32_MAX) {
        vals[v].pinned = 1;
        vals[v].bytes = 0;
      }
    }
    plan_problem pd = {nv, vals, nst, steps};
    plan_result rd;
    memset(&rd, 0, sizeof rd);
    rc = plan_build_order(&pd, PLAN_ORDER_GIVEN, &rd, msg, msg_size);
    if (rc == 0 && verify_plans() && plan_verify(&pd, &rd, msg, msg_size))
      rc = -2;
    if (rc == 0) {
      for (size_t v = 0; v < nv; v++)
        if (vdev[v] == d || (d == 0 && vdev[v] == UINT32_MAX)) {
          off[v] = rd.offset[v];
          inplace[v] = rd.inplace_of[v];
        }
      tyto_program_device_stats *ds = &p->devs[d].stats;
      ds->arena_bytes = rd.arena_bytes;
      ds->pinned_bytes = rd.pinned_bytes;
      ds->planned_bytes = rd.planned_bytes;
      ds->lower_bound_bytes = rd.lower_bound;
    }
    plan_result_free(&rd);
  }
out:
  free(vdev);
  free(vals);
  free(steps);
  return rc;
}

tyto_status exec_plan_memory(tyto_program *p, int plan) {
  problem q;
  plan_result r;
  memset(&r, 0, sizeof r);
  char msg[256];
  double t0 = exec_now();
  tyto_status st = build_problem(p, &q);
  if (st != TYTO_OK) {
    problem_free(&q);
    return st;
  }
  uint64_t *off = NULL;
  int *inplace = NULL;
  int rc = plan_build(&q.pr, &r, msg, sizeof msg);
  if (rc == 0 && verify_plans() && plan_verify(&q.pr, &r, msg, sizeof msg))
    rc = -2;
  if (rc == 0 && p->n_devs > 1) {
    off = malloc((q.n_values ? q.n_values : 1) * sizeof *off);
    inplace = malloc((q.n_values ? q.n_values : 1) * sizeof *inplace);
    rc = off && inplace ? plan_devices(p, &q, &r, off, inplace, msg, sizeof msg)
                        : -1;
  } else if (rc == 0) {
    tyto_program_device_stats *ds = &p->devs[0].stats;
    ds->arena_bytes = r.arena_bytes;
    ds->pinned_bytes = r.pinned_bytes;
    ds->planned_bytes = r.planned_bytes;
    ds->lower_bound_bytes = r.lower_bound;
    off = r.offset;
    inplace = r.inplace_of;
  }
  double t1 = exec_now();
  p->stats.plan_seconds = t1 - t0;
  if (rc != 0) {
    if (p->n_devs > 1) {
      free(off);
      free(inplace);
    }
    problem_free(&q);
    plan_result_free(&r);
    return rc == -1 ? rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory")
                    : rt_fail(TYTO_ERR_INTERNAL,
                              "compile: memory plan rejected: %s", msg);
  }
  p->stats.compiled_naive_bytes = r.naive_bytes;
  p->stats.order = (tyto_plan_order)r.order_kind;
  p->stats.order_name = order_name(r.order_kind);
  /* The program's figures: the sums over its devices. */
  p->stats.lower_bound_bytes = p->stats.pinned_bytes = 0;
  p->stats.planned_bytes = p->stats.arena_bytes = 0;
  for (size_t d = 0; d < p->n_devs; d++) {
    tyto_program_device_stats *ds = &p->devs[d].stats;
    if (!plan) {
      /* Every value its own buffer (no arena): the device's values. */
      ds->planned_bytes = ds->pinned_bytes = 0;
      ds->arena_bytes = 0;
    }
    p->stats.lower_bound_bytes += ds->lower_bound_bytes;
    p->stats.pinned_bytes += ds->pinned_bytes;
    p->stats.planned_bytes += ds->planned_bytes;
    p->stats.arena_bytes += ds->arena_bytes;
  }
  if (!plan) {
    /* Each device's values, each its own buffer. */
    for (size_t v = 0; v < p->n_slots; v++)
      p->devs[p->slots[v].dev].stats.planned_bytes += q.values[v].bytes;
    for (size_t i = 0; i < p->n_kernels; i++)
      if (q.ws_value[i] >= 0)
        p->devs[p->kernels[i].dev].stats.planned_bytes +=
            q.values[q.ws_value[i]].bytes;
    for (size_t d = 0; d < p->n_devs; d++)
      p->devs[d].stats.pinned_bytes = p->devs[d].stats.planned_bytes;
    /* The plan's order is still the one run (updates must come after the
     * old parameter's readers). */
    p->stats.planned_bytes = p->stats.pinned_bytes = r.naive_bytes;
    p->stats.arena_bytes = 0;
  }
  tyto_plugin_error *e = NULL;
  /* Even an empty arena is a buffer: zero-byte tensors bind to it. */
  for (uint32_t d = 0; d < p->n_devs && plan && st == TYTO_OK; d++)
    if ((e = rt_buffer_alloc(p->devs[d].dev, p->devs[d].stats.arena_bytes,
                             &p->devs[d].arena)))
      st = rt_fail_plugin(
          e, "compile: allocating the %llu-byte arena on %s failed",
          (unsigned long long)p->devs[d].stats.arena_bytes, exec_dev_id(p, d));
  for (size_t s = 0; s < p->n_slots && st == TYTO_OK; s++) {
    exec_slot *sl = &p->slots[s];
    if (q.alias[s] >= 0)
      continue; /* below, once its parameter has its buffer */
    if (!plan || q.values[s].pinned) {
      st = own_buffer(p, sl);
    } else {
      sl->buf = p->devs[sl->dev].arena;
      sl->offset = off[s];
    }
  }
  for (size_t s = 0; s < p->n_slots && st == TYTO_OK; s++)
    if (q.alias[s] >= 0) {
      p->slots[s].buf = p->slots[q.alias[s]].buf;
      p->slots[s].offset = 0;
    }
  for (size_t i = 0; i < p->n_kernels && st == TYTO_OK; i++) {
    exec_kernel *k = &p->kernels[i];
    if (q.ws_value[i] < 0)
      continue;
    if (plan) {
      k->workspace = p->devs[k->dev].arena;
      k->workspace_offset = off[q.ws_value[i]];
    } else if ((e = rt_buffer_alloc(p->devs[k->dev].dev, k->workspace_bytes,
                                    &k->workspace))) {
      st = slot_fail(p, e, "allocating a kernel's workspace failed",
                     &p->slots[k->slot]);
    } else {
      k->workspace_owned = 1;
    }
  }
  if (st == TYTO_OK && !(p->launch = malloc((p->n_kernels ? p->n_kernels : 1) *
                                            sizeof *p->launch)))
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  size_t phase = 0;
  p->phase_at[0] = 0;
  for (size_t j = 0; j < q.pr.n_steps && st == TYTO_OK; j++) {
    size_t step = r.order[j];
    int s = q.step_slot[step];
    if (s == -2) /* an exchange with the host: the next phase starts */
      p->phase_at[++phase] = p->n_launch;
    for (size_t i = q.k_first[step]; i < q.k_first[step] + q.k_n[step]; i++) {
      exec_kernel *k = &p->kernels[i];
      /* A reshape whose input it took: the bytes are already there. */
      k->skip = plan && s >= 0 && !k->xfer &&
                (p->slots[s].t->op == TYTO_OP_RESHAPE ||
                 p->slots[s].t->op == TYTO_OP_STOP_GRADIENT ||
                 p->slots[s].t->op == TYTO_OP_CUSTOM_DERIVATIVE ||
                 p->slots[s].t->op == TYTO_OP_REPLICA_SUM) &&
                inplace[s] >= 0;
      if (!k->skip)
        p->launch[p->n_launch++] = i;
      else if (p->slots[k->in[0]].xfer)
        /* A staged copy is finished when a launched kernel reads it: one
         * that reads it through this reshape does (exec/program.c). */
        p->slots[s].xfer = p->slots[k->in[0]].xfer;
    }
  }
  if (st == TYTO_OK && phase + 1 != p->n_phases)
    st = rt_fail(TYTO_ERR_INTERNAL,
                 "compile: %zu exchange steps were ordered, of %zu stages",
                 phase, p->n_phases - 1);
  p->phase_at[p->n_phases] = p->n_launch;
  p->stats.alloc_seconds = exec_now() - t1;
  if (p->n_devs > 1) {
    free(off);
    free(inplace);
  }
  problem_free(&q);
  plan_result_free(&r);
  return st;
}
