/* Helpers shared by the pass suites: run one pass (or all of them) on a
 * graph and look at what came out. */
#ifndef TYTO_TESTS_PASSES_TEST_H
#define TYTO_TESTS_PASSES_TEST_H

#include "common.h"

#include <stdlib.h>

#include "graph/shape.h"
#include "passes/passes.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define IN(g, r, ...) tyto_input((g), TYTO_F32, (r), S(__VA_ARGS__), NULL)

/* The result of one pass over a graph with the given outputs. */
typedef struct pass_run {
  long changed;
  pass_graph out; /* out.g NULL: unchanged */
  tyto_tensor **map;
} pass_run;

static inline pass_run run_pass(pass_fn *fn, tyto_graph *g, size_t n,
                                tyto_tensor **outs, int fuse_ok) {
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  pass_graph in = {g, n, outs};
  pass_run r = {0, {NULL, 0, NULL}, malloc(g->n_nodes * sizeof(tyto_tensor *))};
  pass_options opt = {fuse_ok, 0, NULL, 0, NULL};
  char msg[256] = "";
  r.changed = fn(&in, &r.out, r.map, &opt, msg, sizeof msg);
  ck_assert_msg(r.changed >= 0, "pass failed: %s", msg);
  return r;
}

static inline void run_free(pass_run *r) {
  pass_graph_free(&r->out);
  free(r->map);
}

/* The i-th output after the pass (the input graph's when unchanged). */
static inline tyto_tensor *out_of(const pass_run *r, tyto_tensor *const *outs,
                                  size_t i) {
  return r->out.g ? r->out.outs[i] : outs[i];
}

static inline size_t count_op(const tyto_graph *g, tyto_op op) {
  size_t n = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    n += g->nodes[i]->op == op;
  return n;
}

#endif
