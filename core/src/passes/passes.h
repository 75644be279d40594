/*
 * Graph passes (DESIGN.md, "Graph passes"; seeds 002/004: rewriting
 * patterns). Each pass is a function graph -> graph: it reads a graph and
 * the outputs that define what it computes, and builds a new graph that
 * computes the same outputs, with a map from every tensor of the old graph
 * to its counterpart (NULL when the pass dropped it). Graphs are
 * append-only arenas, so a rewrite is a copy; the copy is cheap (one
 * node_new per kept tensor), and a pass that finds nothing to do makes no
 * copy at all.
 *
 * Inputs and parameters are kept with their names and kinds (they are how
 * a program is fed); a pass may drop one nothing needs (DCE).
 */
#ifndef TYTO_PASSES_H
#define TYTO_PASSES_H

#include <stddef.h>

#include <tyto/plugin.h>
#include <tyto/program.h>

#include "../graph/node.h"

/* A graph and the outputs that define what it computes. */
typedef struct pass_graph {
  tyto_graph *g;
  size_t n_out;
  tyto_tensor **outs; /* tensors of g */
} pass_graph;

/* Nodes fusion must leave alone: those pinned `pin` (a node's pin field,
 * 0 for unpinned ones) with op `op` and dtype `dtype` (-1: any). A device
 * that refused a fused node gets these for the ops and dtypes it cannot
 * fuse, and the graph is optimised again (compile/placement.c). Op
 * TYTO_OP_CAST (a CAST's dtype is the one it converts to) keeps
 * conversions out of the groups: a device whose plugin is older than ABI
 * 1.5 gets {its pin, CAST, -1}, for it may not be sent fused programs
 * that convert between dtypes (compile.c). */
typedef struct pass_nofuse {
  uint32_t pin;
  int op;
  int dtype;
} pass_nofuse;

/* What the passes may assume about the devices that will run the graph.
 * Fusion groups never mix pins: a fused node runs on one device. A CAST
 * joins a group (whose operands then differ in dtype) wherever nofuse
 * lets it. */
typedef struct pass_options {
  int fuse_ok; /* some device runs TYTO_PLUGIN_OP_FUSED kernels */
  size_t n_nofuse;
  const pass_nofuse *nofuse;
  /* Per output of the graph (n_out_stage of them, or none): 1 + the
   * stage of the exchange that sends it, 0 when none does. With the
   * inputs' xstage, fusion keeps each group within one phase. */
  size_t n_out_stage;
  const uint32_t *out_stage;
} pass_options;

/* 1 when o lets node t join a fusion group. */
int pass_may_fuse(const pass_options *o, const tyto_tensor *t);

/* One pass: builds out (a new graph and its outputs, out->outs malloc'd)
 * from in, and map[i] = the tensor of out->g standing for tensor i of
 * in->g (map has in->g->n_nodes entries; NULL when dropped). Returns the
 * number of rewrites made. When it is 0 the pass may leave out->g NULL:
 * the graph is unchanged and map is not written. On failure returns -1
 * with a message in msg (out->g then NULL). */
typedef long pass_fn(const pass_graph *in, pass_graph *out, tyto_tensor **map,
                     const pass_options *opt, char *msg, size_t msg_size);

pass_fn pass_dce;     /* dce.c: drop what no output needs */
pass_fn pass_cse;     /* cse.c: merge identical subexpressions */
pass_fn pass_fold;    /* fold.c: evaluate ops whose inputs are constants */
pass_fn pass_algebra; /* algebra.c: algebraic identities */
pass_fn pass_fuse;    /* fuse.c: elementwise groups -> FUSED nodes */

/* Runs the passes not switched off in `off` (TYTO_PASS_* bits) in turn
 * until a whole round changes nothing (at most max_rounds rounds). out->g
 * is always a new graph (a plain copy of what the outputs need when no
 * pass changed anything): the caller frees out->g and out->outs. map as
 * for one pass, from in's tensors to out's. *stats (malloc'd, *n_stats
 * entries) has one entry per pass run, in order; the names are static.
 * Returns 0, or -1 with msg. */
int passes_run(const pass_graph *in, pass_graph *out, tyto_tensor **map,
               unsigned off, const pass_options *opt, int max_rounds,
               tyto_pass_stats **stats, size_t *n_stats, char *msg,
               size_t msg_size);

/* ---------------------------------------------------------------------- */
/* For the passes                                                          */

/* A copy of node t in graph g with the given inputs (t's count of them):
 * same op, dtype, shape, kind, attributes, name and constant data. Returns
 * g's error tensor on failure. */
tyto_tensor *pass_clone(tyto_graph *g, const tyto_tensor *t,
                        tyto_tensor *const *inputs);

/* Starts out: a new graph, out->outs allocated for in->n_out entries.
 * Returns -1 with msg on out of memory. */
int pass_begin(const pass_graph *in, pass_graph *out, char *msg,
               size_t msg_size);
/* Finishes out: out->outs[i] = map[in->outs[i]]; checks the new graph's
 * status. Returns 0, or -1 with msg (out freed) on failure. */
int pass_end(const pass_graph *in, pass_graph *out, tyto_tensor *const *map,
             const char *pass, char *msg, size_t msg_size);
/* Frees out->g and out->outs (either may be NULL). */
void pass_graph_free(pass_graph *out);

/* A rewrite rule, called for each node t of the input graph in order with
 * its mapped inputs `ins` (tensors of g): returns the tensor of g that
 * stands for t, adding 1 to *changed when that is not a plain copy, or
 * NULL to have t cloned. */
typedef tyto_tensor *pass_rule(void *ctx, const tyto_tensor *t,
                               tyto_tensor **ins, tyto_graph *g, long *changed);

/* Builds out from in with `rule` (see pass_fn for the contract; name is
 * the pass's, for messages). When the rule changes nothing, out->g is
 * left NULL and 0 returned. */
long pass_rewrite(const pass_graph *in, pass_graph *out, tyto_tensor **map,
                  pass_rule *rule, void *ctx, const char *name, char *msg,
                  size_t msg_size);

/* The mapped inputs of t (in[k] = map[t->inputs[k]]), into buf (t's
 * n_inputs entries). */
void pass_inputs(const tyto_tensor *t, tyto_tensor *const *map,
                 tyto_tensor **buf);

/* Per-node counts of readers in g (each input edge counts once), with
 * every output of p counted as one more reader. malloc'd; NULL on out of
 * memory. */
size_t *pass_use_counts(const pass_graph *p);

/* Total input edges of g. */
size_t pass_edges(const tyto_graph *g);

/* 1 for the elementwise ops (unary, binary, WHERE, FMA), whose operands
 * share their dtype; not CAST, whose operand does not. */
int pass_is_elementwise(tyto_op op);

/* When t is a constant of one value (FULL, or a CONSTANT whose elements
 * are all equal), stores it in *v and returns 1. */
int pass_uniform_value(const tyto_tensor *t, double *v);

/* a op b for the elementwise ops on doubles, as the CPU kernels compute
 * them in f64 (attr: LEAKY_RELU's slope, ELU's alpha). */
double pass_eval_scalar(tyto_op op, double a, double b, double c, double attr);

#endif
