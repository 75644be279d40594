/*
 * Elementwise fusion: chains and DAGs of elementwise ops of one shape
 * become one FUSED node carrying a small expression program (the
 * instruction set of TYTO_PLUGIN_OP_FUSED), so the device makes one pass
 * over memory instead of one per op. FULL operands are inlined as
 * constants; an ADD of a MUL that nothing else reads becomes an FMA. A
 * group has several outputs when several of its values are read outside
 * it (Adam's m, v and parameter update are one node with three outputs);
 * outputs after the first are FUSED_OUTPUT nodes.
 *
 * CASTs join groups too where the passes' options let them (every device
 * that may run the group takes fused programs that convert between
 * dtypes: plugin ABI 1.5), so that a conversion costs no pass over memory
 * of its own: bf16 matmul -> cast f32 -> add f32 bias -> relu -> cast
 * bf16 is one FUSED node with a bf16 input, an f32 input and a bf16
 * output. Every instruction of the program carries its value's dtype;
 * the node's dtype is its output 0's, each FUSED_OUTPUT's its output's.
 *
 * Groups grow greedily in creation order: an elementwise node joins the
 * groups of its elementwise operands of the same shape when the union
 * stays convex (no path leaves the group and comes back, or the fused
 * node would depend on itself) and within the kernel's limits.
 *
 * Convexity is checked on the contracted graph, where every group is
 * already the one node it will become: merging groups adds paths that
 * the original graph does not have (a node that reads an early member of
 * a group depends on everything the group's later members read), so a
 * node's creation index says nothing about what it can reach. The check
 * walks forward from the groups being merged instead, over the nodes
 * created before the joining node n (only those can be grouped yet; a
 * later node cannot lead back into a group). A merge is refused when the
 * walk reaches what the union reads from outside.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../graph/dtype.h"
#include "passes.h"

enum {
  MAX_IO = TYTO_PLUGIN_FUSED_MAX_IO,
  MAX_MEMBERS = 64,
  /* Units (groups, lone nodes) a convexity check may visit before it
   * gives up (and refuses the merge): keeps the pass linear on huge
   * graphs. */
  MAX_VISIT = 4096,
  /* The most creation-order positions one group may span: a group that
   * reaches far back (a gradient summed over every step of an unrolled
   * loop) is split, which keeps the convexity checks local. */
  MAX_SPAN = 256,
  /* An elementwise node has at most 3 operands, so a merge unites at most
   * 3 groups and the node itself. */
  MAX_MERGE_EXT = 3 * MAX_IO + 3
};

typedef struct fgroup {
  int64_t min_index; /* lowest member index (for MAX_SPAN) */
  int64_t first;     /* members, as a list through fuser.next */
  int64_t last;
  int members;
  int n_ext;
  int64_t ext[MAX_IO]; /* external (non-FULL) inputs, node indices */
  uint32_t lo, hi;     /* the phases its members may all run in */
} fgroup;

typedef struct fuser {
  const tyto_graph *g;
  int64_t *parent;   /* union-find over nodes; -1: not in a group */
  fgroup *grp;       /* indexed by the root node */
  int64_t *next;     /* next member of the same group; -1: the last */
  size_t *reader_at; /* readers of node i: reader[reader_at[i] .. [i+1]) */
  int64_t *reader;
  uint32_t *stamp; /* walk marks, per node standing for its group */
  uint32_t cur;
  int64_t *stack;
  /* Programs with exchanges in stages: per node, the first phase it may
   * run in (the latest stage whose recv it needs, plus one; 0: none) and
   * the last (the earliest stage that sends what it feeds; UINT32_MAX:
   * none). A group's members must share a phase: a node fed by a recv
   * joined to one that the send of that stage needs would wait for
   * itself. */
  uint32_t *phase, *need;
} fuser;

static int64_t root(fuser *f, int64_t i) {
  while (f->parent[i] != i) {
    f->parent[i] = f->parent[f->parent[i]];
    i = f->parent[i];
  }
  return i;
}

static int64_t group_of(fuser *f, int64_t i) {
  return f->parent[i] < 0 ? -1 : root(f, i);
}

/* Ops a group may hold: the elementwise ones, and CAST (which the pass
 * options may keep out, as any op: pass_may_fuse). Never a graph-only op
 * (REPLICA_SUM stays a node of its own for the data-parallel exchange). */
static int fusable_op(tyto_op op) {
  return pass_is_elementwise(op) || op == TYTO_OP_CAST;
}

/* Whether t may join the group of its operand x: same shape and device
 * pin (a group runs on one device), and the same dtype unless t converts
 * (only a CAST's operand differs from it in dtype). */
static int joinable(const tyto_tensor *x, const tyto_tensor *t) {
  return x->rank == t->rank && x->pin == t->pin &&
         (x->dtype == t->dtype || t->op == TYTO_OP_CAST) &&
         memcmp(x->shape, t->shape, (size_t)x->rank * sizeof *x->shape) == 0;
}

/* Integer ops stay kernels of their own: fused programs compute in
 * floating point (a cast from an integer included). */
static int touches_int(const tyto_tensor *t) {
  int any = dtype_is_int(t->dtype);
  for (size_t k = 0; k < t->n_inputs; k++)
    any |= dtype_is_int(t->inputs[k]->dtype);
  return any;
}

static int in_set(int64_t r, const int64_t *set, int n) {
  for (int k = 0; k < n; k++)
    if (set[k] == r)
      return 1;
  return 0;
}

/* The node standing for i's unit of the contracted graph: its group's
 * root, or i itself. */
static int64_t unit_of(fuser *f, int64_t i) {
  int64_t r = group_of(f, i);
  return r >= 0 ? r : i;
}

/* Pushes the units that read node i and are not yet marked, leaving out
 * nodes from n on (not grouped yet) and the groups of set. */
static void push_readers(fuser *f, int64_t i, int64_t n, const int64_t *set,
                         int n_set, int64_t *sp) {
  for (size_t k = f->reader_at[i]; k < f->reader_at[i + 1]; k++) {
    int64_t j = f->reader[k];
    if (j >= n)
      continue;
    int64_t u = unit_of(f, j);
    if (f->stamp[u] == f->cur || in_set(u, set, n_set))
      continue;
    f->stamp[u] = f->cur;
    f->stack[(*sp)++] = u;
  }
}

/* Pushes the readers of unit u: of every member when u is a group. */
static void push_unit_readers(fuser *f, int64_t u, int64_t n,
                              const int64_t *set, int n_set, int64_t *sp) {
  if (f->parent[u] < 0) {
    push_readers(f, u, n, set, n_set, sp);
    return;
  }
  for (int64_t m = f->grp[u].first; m >= 0; m = f->next[m])
    push_readers(f, m, n, set, n_set, sp);
}

/* Whether a path leaves the groups of set (roots) and comes back to the
 * union of them and node n, on the contracted graph: whether a walk
 * forward from the groups, over the units made of nodes before n,
 * reaches a unit holding one of the union's external inputs ext. (Each
 * group alone being convex is not enough: two groups can each read the
 * other through outside nodes.) Gives up (1) past MAX_VISIT units. */
static int leaves_and_returns(fuser *f, int64_t n, const int64_t *set,
                              int n_set, const int64_t *ext, int n_ext) {
  int64_t target[MAX_MERGE_EXT];
  for (int k = 0; k < n_ext; k++)
    target[k] = unit_of(f, ext[k]);
  int64_t sp = 0, visited = 0;
  f->cur++;
  for (int s = 0; s < n_set; s++)
    push_unit_readers(f, set[s], n, set, n_set, &sp);
  while (sp) {
    int64_t u = f->stack[--sp];
    if (in_set(u, target, n_ext) || ++visited > MAX_VISIT)
      return 1;
    push_unit_readers(f, u, n, set, n_set, &sp);
  }
  return 0;
}

/* Tries to make node n one group with the groups set[0..n_set) (roots).
 * Returns 1 when done. */
static int try_merge(fuser *f, int64_t n, const int64_t *set, int n_set) {
  const tyto_tensor *t = f->g->nodes[n];
  int64_t ext[MAX_MERGE_EXT];
  int n_ext = 0, members = 1;
  int64_t min = n;
  uint32_t lo = f->phase[n], hi = f->need[n];
  /* The union's external inputs: the groups' and n's, less what the
   * union now holds (one group may read another directly). */
  for (int s = 0; s < n_set; s++) {
    const fgroup *gr = &f->grp[set[s]];
    members += gr->members;
    if (gr->min_index < min)
      min = gr->min_index;
    lo = gr->lo > lo ? gr->lo : lo;
    hi = gr->hi < hi ? gr->hi : hi;
    for (int k = 0; k < gr->n_ext; k++) {
      int64_t x = gr->ext[k], r = group_of(f, x);
      if (!(r >= 0 && in_set(r, set, n_set)) && !in_set(x, ext, n_ext))
        ext[n_ext++] = x;
    }
  }
  for (size_t k = 0; k < t->n_inputs; k++) {
    const tyto_tensor *x = t->inputs[k];
    int64_t r = group_of(f, x->index);
    if (x->op == TYTO_OP_FULL || (r >= 0 && in_set(r, set, n_set)))
      continue;
    if (!in_set(x->index, ext, n_ext))
      ext[n_ext++] = x->index;
  }
  if (members > MAX_MEMBERS || n_ext > MAX_IO || n - min > MAX_SPAN || lo > hi)
    return 0;
  /* Convex: no path from the groups through outside nodes back in. */
  if (n_set && leaves_and_returns(f, n, set, n_set, ext, n_ext))
    return 0;
  int64_t r = n_set ? set[0] : n;
  fgroup *gr = &f->grp[r];
  if (!n_set)
    gr->first = gr->last = n;
  for (int s = 1; s < n_set; s++) {
    f->parent[set[s]] = r;
    f->next[gr->last] = f->grp[set[s]].first;
    gr->last = f->grp[set[s]].last;
  }
  f->parent[n] = r;
  f->next[n] = -1;
  if (n_set)
    f->next[gr->last] = n;
  gr->last = n;
  gr->min_index = min;
  gr->lo = lo;
  gr->hi = hi;
  gr->members = members;
  gr->n_ext = n_ext;
  memcpy(gr->ext, ext, (size_t)n_ext * sizeof *ext);
  return 1;
}

static void form_groups(fuser *f, const pass_options *opt) {
  const tyto_graph *g = f->g;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    if (!fusable_op(t->op) || tyto_tensor_numel(t) == 0 ||
        !pass_may_fuse(opt, t) || touches_int(t))
      continue;
    int64_t cand[3];
    int n_cand = 0;
    for (size_t k = 0; k < t->n_inputs; k++) {
      int64_t r = group_of(f, t->inputs[k]->index);
      if (r >= 0 && joinable(t->inputs[k], t) && !in_set(r, cand, n_cand))
        cand[n_cand++] = r;
    }
    if (try_merge(f, (int64_t)i, cand, n_cand))
      continue;
    /* All together failed: each alone, then none. */
    int done = 0;
    for (int c = 0; c < n_cand && !done && n_cand > 1; c++)
      done = try_merge(f, (int64_t)i, &cand[c], 1);
    if (!done)
      try_merge(f, (int64_t)i, NULL, 0);
  }
}

/* ---------------------------------------------------------------------- */
/* Emission                                                                */

typedef struct emitter {
  fuser *f;
  const pass_graph *in;
  tyto_graph *out;
  tyto_tensor **map;
  const size_t *uses;
  unsigned char *is_out;  /* member read outside its group */
  unsigned char *fused;   /* member of a group that becomes a FUSED node */
  unsigned char *emitted; /* per node (members: when their group is) */
  int64_t **members;      /* per fused root: its members, ascending */
  int *n_members;
  long changed;
} emitter;

/* The FUSED node (and FUSED_OUTPUT nodes) of the group rooted at r. */
static void emit_group(emitter *e, int64_t r) {
  const tyto_graph *g = e->f->g;
  const fgroup *gr = &e->f->grp[r];
  const int64_t *mem = e->members[r];
  int nm = e->n_members[r];
  size_t cap = (size_t)(gr->n_ext + 3 * nm + MAX_IO + 1);
  int64_t *ia = malloc((1 + FUSED_FIELDS * cap) * sizeof *ia);
  double *fa = malloc(cap * sizeof *fa);
  int64_t *value = malloc((size_t)nm * sizeof *value); /* member -> value */
  unsigned char *absorbed = calloc((size_t)nm, 1);
  tyto_tensor *ins[MAX_IO];
  if (!ia || !fa || !value || !absorbed) {
    graph_oom(e->out, "fuse");
    goto done;
  }
  const tyto_tensor *first = g->nodes[mem[0]];
  size_t n = 0;
#define INSTR(op_, a0, a1, a2, dt_, attr_)                                     \
  do {                                                                         \
    int64_t *f_ = &ia[1 + FUSED_FIELDS * n];                                   \
    f_[FUSED_OP] = (op_);                                                      \
    f_[FUSED_ARG0] = (a0);                                                     \
    f_[FUSED_ARG1] = (a1);                                                     \
    f_[FUSED_ARG2] = (a2);                                                     \
    f_[FUSED_DTYPE] = (dt_);                                                   \
    fa[n++] = (attr_);                                                         \
  } while (0)
  for (int k = 0; k < gr->n_ext; k++) {
    ins[k] = e->map[gr->ext[k]];
    INSTR(TYTO_PLUGIN_FUSED_INPUT, k, 0, 0, g->nodes[gr->ext[k]]->dtype, 0.0);
  }
  /* An ADD reading a MUL member that only it reads becomes one FMA. */
  for (int m = 0; m < nm; m++) {
    const tyto_tensor *t = g->nodes[mem[m]];
    if (t->op != TYTO_OP_ADD)
      continue;
    for (int k = 0; k < 2; k++) {
      const tyto_tensor *x = t->inputs[k];
      if (x->op != TYTO_OP_MUL || e->uses[x->index] != 1 ||
          e->is_out[x->index] || group_of(e->f, x->index) != r)
        continue;
      for (int j = 0; j < m; j++)
        if (mem[j] == x->index)
          absorbed[j] = 1;
      break;
    }
  }
  for (int m = 0; m < nm; m++) {
    if (absorbed[m])
      continue;
    const tyto_tensor *t = g->nodes[mem[m]];
    int64_t arg[3] = {0, 0, 0};
    tyto_op op = t->op;
    size_t na = t->n_inputs;
    const tyto_tensor *src[3] = {NULL, NULL, NULL};
    for (size_t k = 0; k < na; k++)
      src[k] = t->inputs[k];
    if (op == TYTO_OP_ADD) {
      for (int k = 0; k < 2; k++) {
        const tyto_tensor *x = t->inputs[k];
        int64_t j;
        for (j = 0; j < m && mem[j] != x->index; j++)
          ;
        if (j < m && absorbed[j]) {
          op = TYTO_OP_FMA;
          src[0] = x->inputs[0];
          src[1] = x->inputs[1];
          src[2] = t->inputs[1 - k];
          na = 3;
          break;
        }
      }
    }
    for (size_t k = 0; k < na; k++) {
      const tyto_tensor *x = src[k];
      int64_t j;
      if (group_of(e->f, x->index) == r) {
        for (j = 0; mem[j] != x->index; j++)
          ;
        arg[k] = value[j];
      } else if (x->op == TYTO_OP_FULL) {
        arg[k] = (int64_t)n;
        INSTR(TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, x->dtype, x->fattrs[0]);
      } else {
        for (j = 0; gr->ext[j] != x->index; j++)
          ;
        arg[k] = j; /* INPUT j is instruction j */
      }
    }
    value[m] = (int64_t)n;
    INSTR(op, arg[0], arg[1], arg[2], t->dtype,
          t->n_fattrs ? t->fattrs[0] : 0.0);
  }
  int n_out = 0;
  int64_t out_member[MAX_IO];
  for (int m = 0; m < nm; m++)
    if (e->is_out[mem[m]]) {
      INSTR(TYTO_PLUGIN_FUSED_OUTPUT, value[m], n_out, 0,
            g->nodes[mem[m]]->dtype, 0.0);
      out_member[n_out++] = mem[m];
    }
#undef INSTR
  ia[0] = n_out;
  e->out->scope = first->pin; /* the group's device, for its nodes */
  /* Each output keeps its member's dtype (the group may convert). */
  tyto_tensor *fn = node_new(
      e->out, TYTO_OP_FUSED,
      n_out ? g->nodes[out_member[0]]->dtype : first->dtype, first->rank,
      first->shape, (size_t)gr->n_ext, ins, 1 + FUSED_FIELDS * n, ia, n, fa);
  if (fn->kind == TYTO_KIND_ERROR)
    goto done;
  for (int k = 0; k < n_out; k++) {
    int64_t idx = k;
    e->map[out_member[k]] =
        k == 0 ? fn
               : node_new(e->out, TYTO_OP_FUSED_OUTPUT,
                          g->nodes[out_member[k]]->dtype, first->rank,
                          first->shape, 1, &fn, 1, &idx, 0, NULL);
  }
  e->changed += nm;
done:
  e->out->scope = 0;
  free(ia);
  free(fa);
  free(value);
  free(absorbed);
}

/* The units a node waits for: its inputs, or its group's external
 * inputs. Returns the first not yet emitted, or -1. */
static int64_t pending(emitter *e, int64_t i) {
  if (e->fused[i]) {
    const fgroup *gr = &e->f->grp[root(e->f, i)];
    for (int k = 0; k < gr->n_ext; k++)
      if (!e->emitted[gr->ext[k]])
        return gr->ext[k];
    return -1;
  }
  const tyto_tensor *t = e->f->g->nodes[i];
  for (size_t k = 0; k < t->n_inputs; k++)
    if (!e->emitted[t->inputs[k]->index])
      return t->inputs[k]->index;
  return -1;
}

static void emit_unit(emitter *e, int64_t i) {
  if (e->fused[i]) {
    int64_t r = root(e->f, i);
    emit_group(e, r);
    for (int m = 0; m < e->n_members[r]; m++)
      e->emitted[e->members[r][m]] = 1;
    return;
  }
  const tyto_tensor *t = e->f->g->nodes[i];
  tyto_tensor *ins[64], **buf = ins;
  if (t->n_inputs > 64 && !(buf = malloc(t->n_inputs * sizeof *buf))) {
    graph_oom(e->out, "fuse");
    e->emitted[i] = 1;
    return;
  }
  pass_inputs(t, e->map, buf);
  e->map[i] = pass_clone(e->out, t, buf);
  if (buf != ins)
    free(buf);
  e->emitted[i] = 1;
}

/* Emits every node in an order where each unit follows what it reads. */
static void emit_all(emitter *e) {
  const tyto_graph *g = e->f->g;
  int64_t *stack = e->f->stack;
  for (size_t s = 0; s < g->n_nodes && e->out->status == TYTO_OK; s++) {
    if (e->emitted[s])
      continue;
    int64_t sp = 0;
    stack[sp++] = (int64_t)s;
    while (sp && e->out->status == TYTO_OK) {
      int64_t i = stack[sp - 1];
      if (e->emitted[i]) {
        sp--;
        continue;
      }
      int64_t p = pending(e, i);
      if (p >= 0) {
        if (sp == (int64_t)g->n_nodes) { /* a cycle: never, but no crash */
          graph_fail(e->out, "fused groups depend on each other");
          return;
        }
        stack[sp++] = p;
        continue;
      }
      emit_unit(e, i);
      sp--;
    }
  }
}

long pass_fuse(const pass_graph *in, pass_graph *out, tyto_tensor **map,
               const pass_options *opt, char *msg, size_t msg_size) {
  if (!opt || !opt->fuse_ok)
    return 0;
  const tyto_graph *g = in->g;
  size_t n = g->n_nodes ? g->n_nodes : 1, n_edges = pass_edges(g);
  fuser f = {g,
             malloc(n * sizeof(int64_t)),
             malloc(n * sizeof(fgroup)),
             malloc(n * sizeof(int64_t)),
             calloc(n + 1, sizeof(size_t)),
             malloc((n_edges ? n_edges : 1) * sizeof(int64_t)),
             calloc(n, sizeof(uint32_t)),
             0,
             malloc(n * sizeof(int64_t)),
             calloc(n, sizeof(uint32_t)),
             malloc(n * sizeof(uint32_t))};
  emitter e = {&f,
               in,
               NULL,
               map,
               NULL,
               calloc(n, 1),
               calloc(n, 1),
               calloc(n, 1),
               calloc(n, sizeof(int64_t *)),
               calloc(n, sizeof(int)),
               0};
  long rc = -1;
  size_t *uses = pass_use_counts(in);
  e.uses = uses;
  if (!f.parent || !f.grp || !f.next || !f.reader_at || !f.reader || !f.stamp ||
      !f.stack || !f.phase || !f.need || !uses || !e.is_out || !e.fused ||
      !e.emitted || !e.members || !e.n_members) {
    snprintf(msg, msg_size, "passes: out of memory");
    goto done;
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    f.parent[i] = -1;
    f.need[i] = UINT32_MAX;
    f.phase[i] = t->xstage;
    for (size_t k = 0; k < t->n_inputs; k++)
      if (f.phase[t->inputs[k]->index] > f.phase[i])
        f.phase[i] = f.phase[t->inputs[k]->index];
  }
  for (size_t k = 0; k < opt->n_out_stage && k < in->n_out; k++)
    if (opt->out_stage[k]) {
      uint32_t *nd = &f.need[in->outs[k]->index];
      *nd = opt->out_stage[k] - 1 < *nd ? opt->out_stage[k] - 1 : *nd;
    }
  for (size_t i = g->n_nodes; i-- > 0;)
    for (size_t k = 0; k < g->nodes[i]->n_inputs; k++) {
      uint32_t *nd = &f.need[g->nodes[i]->inputs[k]->index];
      *nd = f.need[i] < *nd ? f.need[i] : *nd;
    }
  /* Readers of each node (a counting sort of the edges): reader_at holds
   * each list's end while filling, then is shifted to hold its start. */
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i]->n_inputs; k++)
      f.reader_at[g->nodes[i]->inputs[k]->index + 1]++;
  for (size_t i = 0; i < g->n_nodes; i++)
    f.reader_at[i + 1] += f.reader_at[i];
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i]->n_inputs; k++)
      f.reader[f.reader_at[g->nodes[i]->inputs[k]->index]++] = (int64_t)i;
  for (size_t i = g->n_nodes; i > 0; i--)
    f.reader_at[i] = f.reader_at[i - 1];
  f.reader_at[0] = 0;
  form_groups(&f, opt);

  /* Group outputs: members read by another unit, or program outputs. */
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    int64_t gi = group_of(&f, (int64_t)i);
    for (size_t k = 0; k < t->n_inputs; k++) {
      int64_t x = t->inputs[k]->index, gx = group_of(&f, x);
      if (gx >= 0 && gx != gi)
        e.is_out[x] = 1;
    }
  }
  for (size_t i = 0; i < in->n_out; i++)
    e.is_out[in->outs[i]->index] = 1;
  /* Which groups become FUSED nodes: within the output limit, and either
   * several members or an inlined constant (a lone op gains nothing). */
  int *n_outs = calloc(n, sizeof(int));
  unsigned char *has_const = calloc(n, 1);
  if (!n_outs || !has_const) {
    free(n_outs);
    free(has_const);
    snprintf(msg, msg_size, "passes: out of memory");
    goto done;
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    int64_t r = group_of(&f, (int64_t)i);
    if (r < 0)
      continue;
    n_outs[r] += e.is_out[i];
    for (size_t k = 0; k < g->nodes[i]->n_inputs; k++)
      has_const[r] |= g->nodes[i]->inputs[k]->op == TYTO_OP_FULL;
  }
  long groups = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    int64_t r = group_of(&f, (int64_t)i);
    /* A group of constants only is the fold pass's (next round). */
    if (r < 0 || n_outs[r] > MAX_IO || f.grp[r].n_ext == 0 ||
        (f.grp[r].members < 2 && !has_const[r]))
      continue;
    if (!e.members[r]) {
      if (!(e.members[r] =
                malloc((size_t)f.grp[r].members * sizeof(int64_t)))) {
        free(n_outs);
        free(has_const);
        snprintf(msg, msg_size, "passes: out of memory");
        goto done;
      }
      groups++;
    }
    e.members[r][e.n_members[r]++] = (int64_t)i;
    e.fused[i] = 1;
  }
  free(n_outs);
  free(has_const);
  if (groups == 0) {
    rc = 0;
    goto done;
  }
  if (pass_begin(in, out, msg, msg_size) < 0)
    goto done;
  for (size_t i = 0; i < g->n_nodes; i++)
    map[i] = NULL;
  e.out = out->g;
  emit_all(&e);
  if (pass_end(in, out, map, "fuse", msg, msg_size) == 0)
    rc = e.changed;
done:
  if (e.members)
    for (size_t i = 0; i < g->n_nodes; i++)
      free(e.members[i]);
  free(e.members);
  free(e.n_members);
  free(e.is_out);
  free(e.fused);
  free(e.emitted);
  free(uses);
  free(f.parent);
  free(f.grp);
  free(f.next);
  free(f.reader_at);
  free(f.reader);
  free(f.stamp);
  free(f.stack);
  free(f.phase);
  free(f.need);
  return rc;
}
