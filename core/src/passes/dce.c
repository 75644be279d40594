/*
 * Dead-code elimination: keeps the tensors the outputs depend on, in
 * their order, and drops the rest (inputs and parameters included: a
 * program binds only what it reads).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "passes.h"

long pass_dce(const pass_graph *in, pass_graph *out, tyto_tensor **map,
              const pass_options *opt, char *msg, size_t msg_size) {
  (void)opt;
  const tyto_graph *g = in->g;
  unsigned char *need = calloc(g->n_nodes ? g->n_nodes : 1, 1);
  if (!need) {
    snprintf(msg, msg_size, "passes: out of memory");
    return -1;
  }
  for (size_t i = 0; i < in->n_out; i++)
    need[in->outs[i]->index] = 1;
  /* Creation order is topological: one backward sweep marks everything. */
  long dropped = 0;
  for (size_t i = g->n_nodes; i-- > 0;) {
    if (!need[i]) {
      dropped++;
      continue;
    }
    const tyto_tensor *t = g->nodes[i];
    for (size_t k = 0; k < t->n_inputs; k++)
      need[t->inputs[k]->index] = 1;
  }
  if (dropped == 0) {
    free(need);
    return 0;
  }
  if (pass_begin(in, out, msg, msg_size) < 0) {
    free(need);
    return -1;
  }
  size_t cap = 0;
  tyto_tensor **ins = NULL;
  for (size_t i = 0; i < g->n_nodes; i++) {
    map[i] = NULL;
    if (!need[i])
      continue;
    const tyto_tensor *t = g->nodes[i];
    if (t->n_inputs > cap) {
      cap = 2 * t->n_inputs;
      tyto_tensor **n = realloc(ins, cap * sizeof *n);
      if (!n) {
        graph_oom(out->g, "dce");
        break;
      }
      ins = n;
    }
    pass_inputs(t, map, ins);
    map[i] = pass_clone(out->g, t, ins);
  }
  free(ins);
  free(need);
  return pass_end(in, out, map, "dce", msg, msg_size) < 0 ? -1 : dropped;
}
