/*
 * The derivative rules of every op, for the AD transforms of ad.c. Each
 * rule is written with ordinary ops, so what it builds can be compiled,
 * optimised and differentiated again.
 *
 * Conventions shared by every rule:
 * - A NULL tangent or adjoint stands for zeros: rules never build zeros
 *   they can leave out, and return NULL for a contribution that is zero
 *   (comparisons, floor, argmax, the x input of max_pool2d_backward, ...).
 * - A contribution has exactly the shape and dtype of what it is for:
 *   the engine checks this and reports a mismatch as an internal error.
 * - Rules build in the graph of the node; on a failure (an op whose
 *   derivative is undefined here, out of memory) they make the graph's
 *   status an error with graph_fail() and return -1 (VJP) or the error
 *   tensor (JVP).
 */
#ifndef TYTO_AD_RULES_H
#define TYTO_AD_RULES_H

#include "../graph/node.h"

/* Reverse mode. n's adjoint g (shaped as n) is given; sets adj[i], for each
 * input i with need[i] != 0, to the contribution to input i's adjoint
 * (shaped as input i) or NULL when it is zero. adj[] arrives all NULL and
 * entries not needed stay NULL. Returns 0, or -1 after graph_fail(). */
typedef int ad_vjp_fn(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                      tyto_tensor **adj);

/* Forward mode. tan[i] is the tangent of input i (NULL: zero; at least one
 * is not NULL). Returns n's tangent (shaped as n), NULL when it is zero, or
 * the graph's error tensor after graph_fail(). */
typedef tyto_tensor *ad_jvp_fn(tyto_tensor *n, tyto_tensor *const *tan);

/* The dispatchers (rules.c), by op family. */
ad_vjp_fn ad_vjp;
ad_jvp_fn ad_jvp;

/* Families. Each handles the ops named; the dispatcher never passes any
 * other. */
ad_vjp_fn ad_vjp_eltwise; /* unary, binary, WHERE, FMA (rules_eltwise.c) */
ad_jvp_fn ad_jvp_eltwise;
ad_vjp_fn ad_vjp_reduce; /* SUM .. NORM_L2 and MATMUL (rules_reduce.c) */
ad_jvp_fn ad_jvp_reduce;
ad_vjp_fn ad_vjp_layout; /* RESHAPE .. SLICE_BACKWARD, GATHER .. ONE_HOT */
ad_jvp_fn ad_jvp_layout; /* (rules_layout.c) */
ad_vjp_fn ad_vjp_nn;     /* SOFTMAX .. AVG_POOL2D_BACKWARD (rules_nn.c) */
ad_jvp_fn ad_jvp_nn;
ad_vjp_fn ad_vjp_linalg; /* INV .. TRIANGULAR_SOLVE (rules_linalg.c) */
ad_jvp_fn ad_jvp_linalg;
ad_vjp_fn ad_vjp_custom; /* CUSTOM_DERIVATIVE: the user's rule (custom.c) */
ad_jvp_fn ad_jvp_custom;

/* ---------------------------------------------------------------------- */
/* Helpers for writing rules (util.c). All accept and return NULL for a    */
/* zero where it says so, and propagate the error tensor.                  */

/* a + b where either may be NULL (zero); NULL when both are. */
tyto_tensor *ad_add(tyto_tensor *a, tyto_tensor *b);
/* a - b where either may be NULL; NULL when both are. */
tyto_tensor *ad_sub(tyto_tensor *a, tyto_tensor *b);
/* -a, NULL for NULL. */
tyto_tensor *ad_neg(tyto_tensor *a);
/* t, or zeros shaped and typed as `like` when t is NULL. */
tyto_tensor *ad_or_zeros(tyto_tensor *t, const tyto_tensor *like);
/* Zeros (a FULL node) shaped and typed as x. */
tyto_tensor *ad_zeros_like(const tyto_tensor *x);
/* A rank-0 constant in x's graph and dtype. */
tyto_tensor *ad_scalar(const tyto_tensor *x, double v);
/* g (a broadcast result) summed down to like's shape: the axes NumPy
 * broadcasting added or stretched from 1 are summed, then reshaped. g
 * itself when the shapes already agree; NULL for NULL. */
tyto_tensor *ad_sum_to(tyto_tensor *g, const tyto_tensor *like);
/* g broadcast to like's shape (NumPy rules); g when they agree; NULL for
 * NULL. */
tyto_tensor *ad_broadcast_like(tyto_tensor *g, const tyto_tensor *like);
/* g reshaped to like's shape (same numel); g when they agree. */
tyto_tensor *ad_reshape_like(tyto_tensor *g, const tyto_tensor *like);
/* 1 when the two tensors have one shape. */
int ad_same_shape(const tyto_tensor *a, const tyto_tensor *b);

#endif
