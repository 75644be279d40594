/*
 * The pass driver (run to a fixed point, with statistics) and what the
 * passes share: cloning nodes into a new graph, use counts, uniform
 * constants and a scalar evaluator of the elementwise ops.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../graph/dtype.h"
#include "passes.h"

tyto_tensor *pass_clone(tyto_graph *g, const tyto_tensor *t,
                        tyto_tensor *const *inputs) {
  tyto_tensor *c =
      node_new(g, t->op, t->dtype, t->rank, t->shape, t->n_inputs, inputs,
               t->n_iattrs, t->iattrs, t->n_fattrs, t->fattrs);
  if (c->kind == TYTO_KIND_ERROR)
    return c;
  c->kind = t->kind;
  c->pin = t->pin;
  c->xstage = t->xstage;
  if (t->name) {
    tyto_tensor_set_name(c, t->name);
    if (!c->name)
      return &g->error;
  }
  if (t->data) {
    size_t bytes = (size_t)tyto_tensor_numel(t) * tyto_dtype_size(t->dtype);
    if (!(c->data = graph_alloc(g, bytes)))
      return graph_oom(g, "pass");
    memcpy(c->data, t->data, bytes);
  }
  return c;
}

int pass_may_fuse(const pass_options *o, const tyto_tensor *t) {
  for (size_t i = 0; i < o->n_nofuse; i++) {
    const pass_nofuse *x = &o->nofuse[i];
    if (x->pin == t->pin && (x->op < 0 || x->op == (int)t->op) &&
        (x->dtype < 0 || x->dtype == (int)t->dtype))
      return 0;
  }
  return 1;
}

int pass_begin(const pass_graph *in, pass_graph *out, char *msg,
               size_t msg_size) {
  out->g = tyto_graph_new();
  out->n_out = in->n_out;
  out->outs = malloc((in->n_out ? in->n_out : 1) * sizeof *out->outs);
  if (!out->g || !out->outs) {
    pass_graph_free(out);
    snprintf(msg, msg_size, "passes: out of memory");
    return -1;
  }
  return 0;
}

int pass_end(const pass_graph *in, pass_graph *out, tyto_tensor *const *map,
             const char *pass, char *msg, size_t msg_size) {
  for (size_t i = 0; i < in->n_out; i++) {
    out->outs[i] = map[in->outs[i]->index];
    if (!out->outs[i] && out->g->status == TYTO_OK)
      graph_fail(out->g, "output %zu was dropped", i);
  }
  if (out->g->status != TYTO_OK) {
    snprintf(msg, msg_size, "passes: %s failed: %s", pass, out->g->message);
    pass_graph_free(out);
    return -1;
  }
  return 0;
}

void pass_graph_free(pass_graph *out) {
  tyto_graph_free(out->g);
  free(out->outs);
  out->g = NULL;
  out->outs = NULL;
}

void pass_inputs(const tyto_tensor *t, tyto_tensor *const *map,
                 tyto_tensor **buf) {
  for (size_t k = 0; k < t->n_inputs; k++)
    buf[k] = map[t->inputs[k]->index];
}

long pass_rewrite(const pass_graph *in, pass_graph *out, tyto_tensor **map,
                  pass_rule *rule, void *ctx, const char *name, char *msg,
                  size_t msg_size) {
  if (pass_begin(in, out, msg, msg_size) < 0)
    return -1;
  const tyto_graph *g = in->g;
  long changed = 0;
  size_t cap = 0;
  tyto_tensor **ins = NULL;
  for (size_t i = 0; i < g->n_nodes && out->g->status == TYTO_OK; i++) {
    const tyto_tensor *t = g->nodes[i];
    if (t->n_inputs > cap) {
      cap = 2 * t->n_inputs;
      tyto_tensor **n = realloc(ins, cap * sizeof *n);
      if (!n) {
        graph_oom(out->g, name);
        break;
      }
      ins = n;
    }
    pass_inputs(t, map, ins);
    /* What a rule builds for t runs where t was pinned to run. */
    out->g->scope = t->pin;
    tyto_tensor *r = rule(ctx, t, ins, out->g, &changed);
    map[i] = r ? r : pass_clone(out->g, t, ins);
  }
  out->g->scope = 0;
  free(ins);
  if (pass_end(in, out, map, name, msg, msg_size) < 0)
    return -1;
  if (changed == 0)
    pass_graph_free(out);
  return changed;
}

size_t *pass_use_counts(const pass_graph *p) {
  const tyto_graph *g = p->g;
  size_t *uses = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *uses);
  if (!uses)
    return NULL;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i]->n_inputs; k++)
      uses[g->nodes[i]->inputs[k]->index]++;
  for (size_t i = 0; i < p->n_out; i++)
    uses[p->outs[i]->index]++;
  return uses;
}

size_t pass_edges(const tyto_graph *g) {
  size_t e = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    e += g->nodes[i]->n_inputs;
  return e;
}

int pass_is_elementwise(tyto_op op) {
  return (op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) ||
         (op >= TYTO_OP_ADD && op <= TYTO_OP_GE) || op == TYTO_OP_WHERE ||
         op == TYTO_OP_FMA;
}

int pass_uniform_value(const tyto_tensor *t, double *v) {
  if (t->op == TYTO_OP_FULL) {
    *v = t->fattrs[0];
    return 1;
  }
  if (t->op != TYTO_OP_CONSTANT)
    return 0;
  int64_t n = tyto_tensor_numel(t);
  if (n == 0)
    return 0;
  /* Compared as bits, so -0 and 0 (or two NaNs) are told apart. */
  size_t e = tyto_dtype_size(t->dtype);
  const unsigned char *d = t->data;
  for (int64_t i = 1; i < n; i++)
    if (memcmp(d, d + (size_t)i * e, e) != 0)
      return 0;
  *v = dtype_info_of(t->dtype)->load(t->data, 0);
  return 1;
}

double pass_eval_scalar(tyto_op op, double x, double y, double z, double pa) {
  switch (op) {
  case TYTO_OP_CAST: return x; /* the caller rounds to the dtype */
  case TYTO_OP_NEG: return -x;
  case TYTO_OP_ABS: return fabs(x);
  case TYTO_OP_SIGN: return x != x ? x : copysign(x == 0.0 ? 0.0 : 1.0, x);
  case TYTO_OP_EXP: return exp(x);
  case TYTO_OP_LOG: return log(x);
  case TYTO_OP_LOG1P: return log1p(x);
  case TYTO_OP_EXPM1: return expm1(x);
  case TYTO_OP_SQRT: return sqrt(x);
  case TYTO_OP_RSQRT: return 1.0 / sqrt(x);
  case TYTO_OP_SQUARE: return x * x;
  case TYTO_OP_RECIPROCAL: return 1.0 / x;
  case TYTO_OP_SIN: return sin(x);
  case TYTO_OP_COS: return cos(x);
  case TYTO_OP_TAN: return tan(x);
  case TYTO_OP_ASIN: return asin(x);
  case TYTO_OP_ACOS: return acos(x);
  case TYTO_OP_ATAN: return atan(x);
  case TYTO_OP_SINH: return sinh(x);
  case TYTO_OP_COSH: return cosh(x);
  case TYTO_OP_TANH: return tanh(x);
  case TYTO_OP_ASINH: return asinh(x);
  case TYTO_OP_ACOSH: return acosh(x);
  case TYTO_OP_ATANH: return atanh(x);
  case TYTO_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case TYTO_OP_RELU: return x < 0.0 ? 0.0 : x;
  case TYTO_OP_LEAKY_RELU: return x < 0.0 ? pa * x : x;
  case TYTO_OP_ELU: return x < 0.0 ? pa * expm1(x) : x;
  case TYTO_OP_SOFTPLUS: return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
  case TYTO_OP_ERF: return erf(x);
  case TYTO_OP_FLOOR: return floor(x);
  case TYTO_OP_CEIL: return ceil(x);
  case TYTO_OP_ROUND: return round(x);
  case TYTO_OP_ADD: return x + y;
  case TYTO_OP_SUB: return x - y;
  case TYTO_OP_MUL: return x * y;
  case TYTO_OP_DIV: return x / y;
  case TYTO_OP_POW: return pow(x, y);
  case TYTO_OP_MAX: return (x > y || x != x) ? x : y;
  case TYTO_OP_MIN: return (x < y || x != x) ? x : y;
  case TYTO_OP_ATAN2: return atan2(x, y);
  case TYTO_OP_EQ: return x == y ? 1.0 : 0.0;
  case TYTO_OP_NE: return x != y ? 1.0 : 0.0;
  case TYTO_OP_LT: return x < y ? 1.0 : 0.0;
  case TYTO_OP_LE: return x <= y ? 1.0 : 0.0;
  case TYTO_OP_GT: return x > y ? 1.0 : 0.0;
  case TYTO_OP_GE: return x >= y ? 1.0 : 0.0;
  case TYTO_OP_WHERE: return x != 0.0 ? y : z;
  case TYTO_OP_FMA: return fma(x, y, z);
  default: return NAN;
  }
}

/* ---------------------------------------------------------------------- */
/* The driver                                                              */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const struct {
  const char *name;
  unsigned bit;
  pass_fn *fn;
} all_passes[] = {
    {"dce", TYTO_PASS_DCE, pass_dce},
    {"cse", TYTO_PASS_CSE, pass_cse},
    {"fold", TYTO_PASS_FOLD, pass_fold},
    {"algebra", TYTO_PASS_ALGEBRA, pass_algebra},
    {"fuse", TYTO_PASS_FUSE, pass_fuse},
};
enum { N_PASSES = sizeof all_passes / sizeof all_passes[0] };

/* A plain copy of what in's outputs need. */
static int copy_needed(const pass_graph *in, pass_graph *out, tyto_tensor **map,
                       char *msg, size_t msg_size) {
  /* DCE with nothing to drop still copies; with something to drop it
   * copies less. Either way the result is what we want. */
  out->g = NULL;
  out->outs = NULL;
  long r = pass_dce(in, out, map, NULL, msg, msg_size);
  if (r < 0)
    return -1;
  if (out->g)
    return 0;
  if (pass_begin(in, out, msg, msg_size) < 0)
    return -1;
  tyto_tensor *buf[TYTO_PLUGIN_FUSED_MAX_IO + 8];
  for (size_t i = 0; i < in->g->n_nodes; i++) {
    const tyto_tensor *t = in->g->nodes[i];
    tyto_tensor **ins = buf, **heap = NULL;
    if (t->n_inputs > sizeof buf / sizeof buf[0]) {
      if (!(heap = malloc(t->n_inputs * sizeof *heap))) {
        pass_graph_free(out);
        snprintf(msg, msg_size, "passes: out of memory");
        return -1;
      }
      ins = heap;
    }
    pass_inputs(t, map, ins);
    map[i] = pass_clone(out->g, t, ins);
    free(heap);
  }
  return pass_end(in, out, map, "copy", msg, msg_size);
}

int passes_run(const pass_graph *in, pass_graph *out, tyto_tensor **map,
               unsigned off, const pass_options *opt, int max_rounds,
               tyto_pass_stats **stats, size_t *n_stats, char *msg,
               size_t msg_size) {
  pass_graph cur = *in; /* owned once cur.g != in->g */
  size_t cap = (size_t)(max_rounds > 0 ? max_rounds : 1) * N_PASSES;
  tyto_pass_stats *st = calloc(cap, sizeof *st);
  tyto_tensor **step = NULL;
  size_t ns = 0;
  int rc = -1;
  *stats = NULL;
  *n_stats = 0;
  out->g = NULL;
  out->outs = NULL;
  if (!st) {
    snprintf(msg, msg_size, "passes: out of memory");
    return -1;
  }
  for (size_t i = 0; i < in->g->n_nodes; i++)
    map[i] = in->g->nodes[i];
  for (int round = 1; round <= max_rounds; round++) {
    long changed = 0;
    for (size_t k = 0; k < N_PASSES; k++) {
      if (off & all_passes[k].bit)
        continue;
      tyto_pass_stats *s = &st[ns++];
      s->name = all_passes[k].name;
      s->round = round;
      s->nodes_before = cur.g->n_nodes;
      s->edges_before = pass_edges(cur.g);
      free(step);
      if (!(step =
                malloc((cur.g->n_nodes ? cur.g->n_nodes : 1) * sizeof *step))) {
        snprintf(msg, msg_size, "passes: out of memory");
        goto done;
      }
      pass_graph next = {NULL, 0, NULL};
      double t0 = now();
      long r = all_passes[k].fn(&cur, &next, step, opt, msg, msg_size);
      s->seconds = now() - t0;
      if (r < 0)
        goto done;
      s->changed = r;
      changed += r;
      if (next.g) {
        for (size_t i = 0; i < in->g->n_nodes; i++)
          if (map[i])
            map[i] = step[map[i]->index];
        if (cur.g != in->g)
          pass_graph_free(&cur);
        cur = next;
      }
      s->nodes_after = cur.g->n_nodes;
      s->edges_after = pass_edges(cur.g);
    }
    if (changed == 0)
      break;
  }
  if (cur.g == in->g) {
    pass_graph copy;
    if (copy_needed(in, &copy, map, msg, msg_size) < 0)
      goto done;
    cur = copy;
  }
  *out = cur;
  cur.g = NULL;
  rc = 0;
done:
  free(step);
  if (cur.g && cur.g != in->g)
    pass_graph_free(&cur);
  if (rc == 0) {
    *stats = st;
    *n_stats = ns;
  } else {
    free(st);
  }
  return rc;
}
