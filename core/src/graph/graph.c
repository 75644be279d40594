/*
 * Graphs: the arena that owns tensors, the sticky status, and node
 * construction shared by every op.
 */
#include "dtype.h"
#include "node.h"
#include "shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

_Static_assert(TYTO_MAX_RANK <= TYTO_PLUGIN_MAX_RANK,
               "graph ranks fit the plugin ABI");

#define ARENA_BLOCK 16384

struct arena_block {
  arena_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void *graph_alloc(tyto_graph *g, size_t size) {
  size = (size + 15) & ~(size_t)15;
  arena_block *b = g->blocks;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
    b = malloc(sizeof *b + cap);
    if (!b)
      return NULL;
    b->next = g->blocks;
    b->used = 0;
    b->cap = cap;
    g->blocks = b;
  }
  void *p = b->data + b->used;
  b->used += size;
  memset(p, 0, size);
  return p;
}

tyto_graph *tyto_graph_new(void) {
  tyto_graph *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->status = TYTO_OK;
  g->error.graph = g;
  g->error.index = -1;
  g->error.op = TYTO_OP_ERROR;
  g->error.kind = TYTO_KIND_ERROR;
  g->error.dtype = TYTO_F32;
  return g;
}

void tyto_graph_free(tyto_graph *g) {
  if (!g)
    return;
  for (arena_block *b = g->blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(g->nodes);
  free(g->customs);
  free(g);
}

tyto_status tyto_graph_status(const tyto_graph *g) {
  /* tyto_graph_new() returns NULL when out of memory. */
  return g ? g->status : TYTO_ERR_INVALID_ARGUMENT;
}

const char *tyto_graph_error_message(const tyto_graph *g) {
  return g ? g->message : "graph is NULL (tyto_graph_new ran out of memory?)";
}

tyto_tensor *tyto_graph_error_tensor(tyto_graph *g) {
  return &g->error;
}

size_t tyto_graph_size(const tyto_graph *g) {
  return g->n_nodes;
}

tyto_tensor *tyto_graph_tensor(const tyto_graph *g, size_t i) {
  return i < g->n_nodes ? g->nodes[i] : NULL;
}

static tyto_tensor *graph_failv(tyto_graph *g, tyto_status st, const char *fmt,
                                va_list ap) {
  if (g->status == TYTO_OK) {
    g->status = st;
    int n = vsnprintf(g->message, sizeof g->message, fmt, ap);
    if (n >= (int)sizeof g->message)
      memcpy(g->message + sizeof g->message - 4, "...", 4);
  }
  return &g->error;
}

tyto_tensor *graph_fail(tyto_graph *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graph_failv(g, TYTO_ERR_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return &g->error;
}

static tyto_tensor *graph_fail_status(tyto_graph *g, tyto_status st,
                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graph_failv(g, st, fmt, ap);
  va_end(ap);
  return &g->error;
}

tyto_tensor *graph_oom(tyto_graph *g, const char *op) {
  return graph_fail_status(g, TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
}

tyto_graph *graph_check(const char *name, size_t n, tyto_tensor *const *in,
                        int same_dtype, tyto_tensor **err) {
  tyto_graph *g = NULL;
  *err = NULL;
  for (size_t i = 0; i < n && !g; i++)
    if (in[i])
      g = in[i]->graph;
  if (!g)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (!in[i]) {
      *err = graph_fail(g, "%s: input %zu is NULL", name, i + 1);
      return NULL;
    }
    if (in[i]->graph != g) {
      *err = graph_fail(g, "%s: tensors belong to different graphs", name);
      return NULL;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (in[i]->kind == TYTO_KIND_ERROR) {
      *err = &g->error;
      return NULL;
    }
  if (same_dtype)
    for (size_t i = 1; i < n; i++)
      if (in[i]->dtype != in[0]->dtype) {
        char a[SHAPE_STR], b[SHAPE_STR];
        *err = graph_fail(
            g, "%s: dtypes differ: %s%s and %s%s", name,
            tyto_dtype_name(in[0]->dtype), tensor_shape_str(a, in[0]),
            tyto_dtype_name(in[i]->dtype), tensor_shape_str(b, in[i]));
        return NULL;
      }
  return g;
}

unsigned char *graph_needed(const tyto_graph *g, size_t n,
                            tyto_tensor *const *roots) {
  size_t nn = g->n_nodes;
  unsigned char *need = calloc(nn ? nn : 1, 1);
  if (!need)
    return NULL;
  for (size_t k = 0; k < n; k++)
    if (roots[k] && roots[k]->graph == g && roots[k]->index >= 0 &&
        (size_t)roots[k]->index < nn)
      need[roots[k]->index] = 1;
  for (size_t i = nn; i-- > 0;)
    if (need[i])
      for (size_t j = 0; j < g->nodes[i]->n_inputs; j++)
        need[g->nodes[i]->inputs[j]->index] = 1;
  return need;
}

/* Whether op takes integer operands and results (the whole-number ops of
 * <tyto/graph.h>'s tyto_dtype). ARGMAX and ARGMIN give integers of a
 * floating input only. */
static int int_op(tyto_op op) {
  switch (op) {
  case TYTO_OP_INPUT:
  case TYTO_OP_PARAMETER:
  case TYTO_OP_CONSTANT:
  case TYTO_OP_FULL:
  case TYTO_OP_CAST:
  case TYTO_OP_NEG:
  case TYTO_OP_ABS:
  case TYTO_OP_SIGN:
  case TYTO_OP_ADD:
  case TYTO_OP_SUB:
  case TYTO_OP_MUL:
  case TYTO_OP_MAX:
  case TYTO_OP_MIN:
  case TYTO_OP_EQ:
  case TYTO_OP_NE:
  case TYTO_OP_LT:
  case TYTO_OP_LE:
  case TYTO_OP_GT:
  case TYTO_OP_GE:
  case TYTO_OP_WHERE:
  case TYTO_OP_SUM:
  case TYTO_OP_REDUCE_MAX:
  case TYTO_OP_REDUCE_MIN:
  case TYTO_OP_GATHER:
  case TYTO_OP_SCATTER_ADD:
  case TYTO_OP_ONE_HOT:
  case TYTO_OP_STOP_GRADIENT: return 1;
  default: return op >= TYTO_OP_RESHAPE && op <= TYTO_OP_SLICE_BACKWARD;
  }
}

/* Refuses integer operands or results of an op that computes in floating
 * point: "exp: input 1 is i64; exp takes floating-point tensors (tyto_cast
 * it to f32 first)". */
static int int_check(tyto_graph *g, tyto_op op, tyto_dtype dtype, size_t n_in,
                     tyto_tensor *const *in) {
  int arg = op == TYTO_OP_ARGMAX || op == TYTO_OP_ARGMIN;
  if (int_op(op))
    return 0;
  const char *name = tyto_op_name(op);
  for (size_t i = 0; i < n_in; i++)
    if (dtype_is_int(in[i]->dtype)) {
      graph_fail(g,
                 "%s: input %zu is %s; %s takes floating-point tensors "
                 "(tyto_cast it to f32 first)",
                 name, i + 1, tyto_dtype_name(in[i]->dtype), name);
      return -1;
    }
  if (dtype_is_int(dtype) && !arg) {
    graph_fail(g,
               "%s: %s is an integer dtype; %s makes floating-point tensors "
               "(tyto_cast the result instead)",
               name, tyto_dtype_name(dtype), name);
    return -1;
  }
  return 0;
}

tyto_tensor *node_new(tyto_graph *g, tyto_op op, tyto_dtype dtype, int rank,
                      const int64_t *shape, size_t n_in, tyto_tensor *const *in,
                      size_t n_i, const int64_t *iattrs, size_t n_f,
                      const double *fattrs) {
  const char *name = tyto_op_name(op);
  /* Shapes computed from other shapes (outer, matmul, conv, gather...) may
   * overflow even when every input was valid. */
  if (shape_check(g, name, rank, shape) < 0 ||
      int_check(g, op, dtype, n_in, in) < 0)
    return &g->error;
  if (g->n_nodes == g->cap_nodes) {
    size_t cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
    tyto_tensor **nodes = realloc(g->nodes, cap * sizeof *nodes);
    if (!nodes)
      return graph_oom(g, name);
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  tyto_tensor *t = graph_alloc(g, sizeof *t);
  if (!t)
    return graph_oom(g, name);
  if (n_in && !(t->inputs = graph_alloc(g, n_in * sizeof *t->inputs)))
    return graph_oom(g, name);
  if (n_i && !(t->iattrs = graph_alloc(g, n_i * sizeof *t->iattrs)))
    return graph_oom(g, name);
  if (n_f && !(t->fattrs = graph_alloc(g, n_f * sizeof *t->fattrs)))
    return graph_oom(g, name);
  t->graph = g;
  t->index = (int64_t)g->n_nodes;
  t->pin = g->scope;
  t->op = op;
  t->kind = TYTO_KIND_COMPUTED;
  t->dtype = dtype;
  t->rank = rank;
  if (rank)
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  t->n_inputs = n_in;
  if (n_in)
    memcpy(t->inputs, in, n_in * sizeof *in);
  t->n_iattrs = n_i;
  if (n_i)
    memcpy(t->iattrs, iattrs, n_i * sizeof *iattrs);
  t->n_fattrs = n_f;
  if (n_f)
    memcpy(t->fattrs, fattrs, n_f * sizeof *fattrs);
  g->nodes[g->n_nodes++] = t;
  return t;
}

tyto_tensor *node_rebuild(tyto_graph *g, const tyto_tensor *t, tyto_dtype dtype,
                          tyto_tensor *const *in) {
  uint32_t scope = g->scope;
  g->scope = t->pin;
  tyto_tensor *r = node_new(g, t->op, dtype, t->rank, t->shape, t->n_inputs, in,
                            t->n_iattrs, t->iattrs, t->n_fattrs, t->fattrs);
  g->scope = scope;
  if (r->kind != TYTO_KIND_ERROR)
    r->name = t->name;
  return r;
}
