/* Dispatch of the derivative rules by op family. */
#include "config.h"

#include "rules.h"

static int in_range(tyto_op op, tyto_op lo, tyto_op hi) {
  return op >= lo && op <= hi;
}

static tyto_tensor *no_rule(tyto_tensor *n) {
  return graph_fail(n->graph, "ad: op %s (tensor #%lld) has no derivative",
                    tyto_op_name(n->op), (long long)n->index);
}

/* A random op's only input is its step: the numbers are piecewise
 * constant in it, so its derivative is zero (a symbolic NULL). */
static int is_random(tyto_op op) {
  return in_range(op, TYTO_OP_RANDOM_UNIFORM, TYTO_OP_RANDOM_BERNOULLI);
}

int ad_vjp(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
           tyto_tensor **adj) {
  tyto_op op = n->op;
  (void)g;
  /* Both have derivative zero (a symbolic NULL): nothing flows back. */
  if (is_random(op) || op == TYTO_OP_STOP_GRADIENT) {
    for (size_t i = 0; i < n->n_inputs; i++)
      if (need[i])
        adj[i] = NULL;
    return 0;
  }
  if (in_range(op, TYTO_OP_NEG, TYTO_OP_ROUND) ||
      in_range(op, TYTO_OP_ADD, TYTO_OP_GE) || op == TYTO_OP_WHERE ||
      op == TYTO_OP_FMA || op == TYTO_OP_CAST)
    return ad_vjp_eltwise(n, g, need, adj);
  if (in_range(op, TYTO_OP_SUM, TYTO_OP_NORM_L2) || op == TYTO_OP_MATMUL)
    return ad_vjp_reduce(n, g, need, adj);
  if (in_range(op, TYTO_OP_RESHAPE, TYTO_OP_SLICE_BACKWARD) ||
      in_range(op, TYTO_OP_GATHER, TYTO_OP_ONE_HOT))
    return ad_vjp_layout(n, g, need, adj);
  if (in_range(op, TYTO_OP_SOFTMAX, TYTO_OP_AVG_POOL2D_BACKWARD))
    return ad_vjp_nn(n, g, need, adj);
  if (in_range(op, TYTO_OP_INV, TYTO_OP_TRIANGULAR_SOLVE))
    return ad_vjp_linalg(n, g, need, adj);
  if (op == TYTO_OP_CUSTOM_DERIVATIVE)
    return ad_vjp_custom(n, g, need, adj);
  no_rule(n);
  return -1;
}

tyto_tensor *ad_jvp(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_op op = n->op;
  if (is_random(op) || op == TYTO_OP_STOP_GRADIENT)
    return NULL;
  if (in_range(op, TYTO_OP_NEG, TYTO_OP_ROUND) ||
      in_range(op, TYTO_OP_ADD, TYTO_OP_GE) || op == TYTO_OP_WHERE ||
      op == TYTO_OP_FMA || op == TYTO_OP_CAST)
    return ad_jvp_eltwise(n, tan);
  if (in_range(op, TYTO_OP_SUM, TYTO_OP_NORM_L2) || op == TYTO_OP_MATMUL)
    return ad_jvp_reduce(n, tan);
  if (in_range(op, TYTO_OP_RESHAPE, TYTO_OP_SLICE_BACKWARD) ||
      in_range(op, TYTO_OP_GATHER, TYTO_OP_ONE_HOT))
    return ad_jvp_layout(n, tan);
  if (in_range(op, TYTO_OP_SOFTMAX, TYTO_OP_AVG_POOL2D_BACKWARD))
    return ad_jvp_nn(n, tan);
  if (in_range(op, TYTO_OP_INV, TYTO_OP_TRIANGULAR_SOLVE))
    return ad_jvp_linalg(n, tan);
  if (op == TYTO_OP_CUSTOM_DERIVATIVE)
    return ad_jvp_custom(n, tan);
  return no_rule(n);
}
