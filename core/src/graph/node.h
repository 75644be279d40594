/*
 * The graph's internals, for the graph layer and the layers above it (AD,
 * passes, plan, exec): the tensor and graph structs, node construction and
 * the sticky-error helpers. Public code uses <tyto/graph.h> instead.
 */
#ifndef TYTO_GRAPH_NODE_H
#define TYTO_GRAPH_NODE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <tyto/graph.h>
#include <tyto/ops.h>
#include <tyto/status.h>

struct tyto_tensor {
  tyto_graph *graph;
  int64_t index; /* creation order; -1 for the error tensor */
  tyto_op op;
  tyto_kind kind;
  tyto_dtype dtype;
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  size_t n_inputs;
  tyto_tensor **inputs; /* arena memory */
  size_t n_iattrs;
  int64_t *iattrs; /* arena memory, NULL when none */
  size_t n_fattrs;
  double *fattrs; /* arena memory, NULL when none */
  char *name;     /* arena memory, NULL when none */
  void *data;     /* TYTO_OP_CONSTANT values in dtype, arena memory */
  /* The device the caller pinned it to: 1 + its index among the
   * context's selected devices; 0 when not pinned (placement decides). */
  uint32_t pin;
  /* An input receiving an exchange with the host: 1 + the exchange's
   * stage, set while a program is compiled (compile.c), kept by the
   * passes' copies, so that fusion never joins work of two phases. */
  uint32_t xstage;
};

typedef struct arena_block arena_block;

struct tyto_graph {
  arena_block *blocks; /* bump allocator; nothing is freed before the graph */
  tyto_tensor **nodes; /* creation order; the array grows, tensors stay put */
  size_t n_nodes, cap_nodes;
  tyto_status status;
  char message[512];
  uint64_t random_offset; /* next Philox counter for a random node */
  tyto_tensor error;      /* the shared error tensor */
  uint32_t scope;         /* the pin of every new node (0: none) */
  /* The custom derivative rules of its CUSTOM_DERIVATIVE nodes (iattrs[0]
   * indexes them; names in the arena), malloc'd. */
  struct tyto_custom_rule *customs;
  size_t n_customs, cap_customs;
};

/* Arena memory of g (zeroed, 16-byte aligned), or NULL when out of memory
 * (the caller then fails with graph_oom()). */
void *graph_alloc(tyto_graph *g, size_t size);

/* Records the first failure of g (later ones are dropped) and returns the
 * error tensor. */
tyto_tensor *graph_fail(tyto_graph *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
tyto_tensor *graph_oom(tyto_graph *g, const char *op);

/* What is wrong with the parameters a, b of random op `op` (uniform: low,
 * high; normal: mean, stddev; bernoulli: p), written into buf ("expected
 * a finite mean, got inf"), or NULL when nothing is: the check of the
 * random ops and of the layers' initialisers. */
const char *random_params_why(tyto_op op, double a, double b, char *buf,
                              size_t size);

/* Checks the n inputs of op `name`: returns their graph with *err NULL when
 * they are fine; otherwise sets *err to the tensor to return (the error
 * tensor, or NULL when no graph can be found) and returns NULL. Checks NULL
 * inputs, error inputs (no new message), one graph and, when same_dtype,
 * one dtype. */
tyto_graph *graph_check(const char *name, size_t n, tyto_tensor *const *in,
                        int same_dtype, tyto_tensor **err);

/* The nodes roots[0 .. n) need, themselves included: need[i] = 1 for node
 * i (calloc'ed, g's node count; the caller frees it). Creation order is
 * topological, so one backward sweep finds them. Roots that are NULL or
 * not nodes of g are skipped. NULL when out of memory. */
unsigned char *graph_needed(const tyto_graph *g, size_t n,
                            tyto_tensor *const *roots);

/* A new computed node (kind TYTO_KIND_COMPUTED; callers may change it).
 * Copies inputs and attributes. Returns the error tensor on out of memory. */
tyto_tensor *node_new(tyto_graph *g, tyto_op op, tyto_dtype dtype, int rank,
                      const int64_t *shape, size_t n_in, tyto_tensor *const *in,
                      size_t n_i, const int64_t *iattrs, size_t n_f,
                      const double *fattrs);

/* t (a computed node of g) built again in g on other inputs, in dtype: its
 * op, shape and attributes, its device pin and its name. Returns the error
 * tensor when the op refuses the inputs or out of memory. */
tyto_tensor *node_rebuild(tyto_graph *g, const tyto_tensor *t, tyto_dtype dtype,
                          tyto_tensor *const *in);

/* The program of a TYTO_OP_FUSED node (<tyto/graph.h>): iattrs[0] = the
 * number of outputs, then FUSED_FIELDS per instruction, fattrs = one attr
 * per instruction. The fields of instruction i are
 * iattrs[1 + FUSED_FIELDS * i + FUSED_*]. */
enum {
  FUSED_OP = 0, /* TYTO_PLUGIN_FUSED_INPUT/CONST/OUTPUT or an op code */
  FUSED_ARG0 = 1,
  FUSED_ARG1 = 2,
  FUSED_ARG2 = 3,
  FUSED_DTYPE = 4, /* the tyto_dtype of its value (an OUTPUT's: its output's) */
  FUSED_FIELDS = 5
};

/* The number of instructions of FUSED node t. */
static inline size_t fused_n_instrs(const tyto_tensor *t) {
  return t->n_fattrs;
}

/* Field f (FUSED_OP .. FUSED_DTYPE) of instruction i of FUSED node t. */
static inline int64_t fused_field(const tyto_tensor *t, size_t i, int f) {
  return t->iattrs[1 + FUSED_FIELDS * i + (size_t)f];
}

/* Writes a file atomically: `write` fills a temporary file beside path,
 * which is flushed to disk and renamed over path; on any failure path is
 * untouched and the temporary removed. `what` prefixes messages. */
tyto_status export_atomic(const char *path, const char *what,
                          tyto_status (*write)(FILE *, const void *),
                          const void *ctx);

#endif
