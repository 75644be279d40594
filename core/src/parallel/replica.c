/*
 * Sums over the replicas of a data-parallel step (tyto_replica_sum): the
 * graph op. Compiled alone it is x itself (compile/lower.c); a
 * data-parallel replica turns each one into an exchange with the host
 * between two phases of its program (parallel/dp.c), where the step sums
 * every replica's x (parallel/step.c).
 */
#include "config.h"

#include <tyto/parallel.h>

#include "../graph/node.h"

tyto_tensor *tyto_replica_sum(tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("replica_sum", 1, &x, 1, &err);
  if (!g)
    return err;
  int64_t kind = TYTO_REPLICA_SUM_PLAIN;
  return node_new(g, TYTO_OP_REPLICA_SUM, x->dtype, x->rank, x->shape, 1, &x,
                  1, &kind, 0, NULL);
}
