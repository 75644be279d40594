/*
 * Mixed precision (docs/precision.md): automatic casting of a graph's ops
 * to a 16-bit dtype where they are numerically safe in it. Training with
 * it, f32 master weights and loss scaling included, is an option of the
 * data-parallel step (tyto_dp_options.amp in <tyto/parallel.h>).
 */
#ifndef TYTO_PRECISION_H
#define TYTO_PRECISION_H

#include <stddef.h>

#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How automatic mixed precision treats an op: the rule list, in one place
 * (core/src/graph/amp.c) and documented in docs/precision.md. */
typedef enum tyto_amp_rule {
  /* Sources (inputs, parameters, constants, random numbers): kept as they
   * are; a consumer casts them to its own dtype. */
  TYTO_AMP_SOURCE = 0,
  /* Runs in the low dtype, accumulating in f32 (matrix products,
   * convolutions): where the low dtype pays. */
  TYTO_AMP_LOW = 1,
  /* Runs in the model's dtype (softmax, log-sum-exp, exp, log, pow, sums
   * and means, norms, products, losses built of them, index ops, linear
   * algebra): ops whose range or accumulated rounding the low dtype
   * would hurt, and ops whose values are indices. */
  TYTO_AMP_WIDE = 2,
  /* Runs in the widest dtype among its computed operands (elementwise
   * ops, layout, pooling, max/min): whatever its producers chose, so that
   * a low chain stays low and casts are few. Its sources follow it. */
  TYTO_AMP_FOLLOW = 3
} tyto_amp_rule;

/* The rule of a graph op. */
TYTO_API tyto_amp_rule tyto_amp_rule_of(tyto_op op);

/* Rewrites the computation behind the n tensors ys (of one graph) so that
 * every op runs in the dtype its rule gives, with `low` as the low dtype
 * (TYTO_BF16 or TYTO_F16 for an f32 model; TYTO_F32 for an f64 one) and
 * each op's own dtype as the wide one (an op already as narrow as `low`
 * is left alone),
 * casting between them where a value crosses (one cast per value and
 * dtype, shared by its consumers). ys[i] is replaced by its rewritten
 * counterpart, of the dtype it had; sources (inputs, parameters: the
 * master weights) are not changed, so that gradients with respect to
 * them stay in their dtype. Ops the caller added to the graph by hand as
 * tyto_cast are kept. The rewritten nodes are appended to the graph; the
 * originals stay, and compiling drops what no output needs.
 * Differentiate after rewriting: the derivative of each op then runs in
 * the op's dtype. Errors: NULL arguments, an unknown dtype, tensors of
 * different graphs, a graph in error. */
TYTO_API tyto_status tyto_autocast(tyto_dtype low, size_t n, tyto_tensor **ys);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_PRECISION_H */
