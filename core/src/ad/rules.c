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

/* A REPLICA_SUM of x of the given kind (TYTO_REPLICA_SUM_*); NULL for
 * NULL. */
static tyto_tensor *replica_sum_of(tyto_tensor *x, int64_t kind) {
  if (!x || tyto_tensor_is_error(x))
    return x;
  return node_new(x->graph, TYTO_OP_REPLICA_SUM, x->dtype, x->rank, x->shape, 1,
                  &x, 1, &kind, 0, NULL);
}

/* REPLICA_SUM is linear. Its tangent is the same sum of the tangent. Its
 * transpose flips the kind: each replica r differentiates its own loss
 * l_r while the objective is sum_r w_r l_r, so in those local terms the
 * adjoint of y_r = b(r) sum_r' a(r') x_r' is xbar_r = a(r) / w_r sum_r'
 * b(r') w_r' ybar_r'. PLAIN (a = b = 1) becomes SHARES (a = w, b = 1 / w)
 * and SHARES becomes PLAIN. */
static int64_t replica_sum_flip(int64_t kind) {
  return kind == TYTO_REPLICA_SUM_PLAIN ? TYTO_REPLICA_SUM_SHARES
                                        : TYTO_REPLICA_SUM_PLAIN;
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
  if (op == TYTO_OP_REPLICA_SUM) {
    adj[0] = replica_sum_of(g, replica_sum_flip(n->iattrs[0]));
    return adj[0] && tyto_tensor_is_error(adj[0]) ? -1 : 0;
  }
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
  if (op == TYTO_OP_REPLICA_SUM)
    return replica_sum_of(tan[0], n->iattrs[0]);
  return no_rule(n);
}
