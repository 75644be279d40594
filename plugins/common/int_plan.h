/*
 * The integer dtypes i32 and i64 (ABI 1.6, sdk/docs/ops.md "Integer
 * dtypes") in the plugins that run them in an op family of their own (the
 * OpenCL and CUDA plugins' int.c): which descriptors with an integer
 * operand ops.md defines, which of them that family runs, and its checks.
 */
#ifndef TYTO_PLUGINS_INT_PLAN_H
#define TYTO_PLUGINS_INT_PLAN_H

#include <stddef.h>

#include "geometry.h"

/* For operands a with at least one i32 or i64 operand: 0 when ops.md
 * defines the op on their dtypes, with *int_family set to 1 when the
 * integer family runs it (the elementwise ops and reductions on integers,
 * and CAST between two dtypes, one an integer) and 0 when the op's own
 * family does (a CAST from an integer dtype to itself, a COPY; COPY,
 * FILL, PAD, ARGMAX and ARGMIN into an integer, GATHER, SCATTER_ADD and
 * ONE_HOT with integer indices or data). Else TYTO_PLUGIN_ERR_UNSUPPORTED
 * with the reason in why, naming the op and the operands' dtypes (512
 * bytes hold every message). */
int tpc_int_route(const tpc_operands *a, int *int_family, char *why,
                  size_t why_size);

/* The integer family's checks of a routed descriptor: a reduction's
 * operands and axes (tpc_reduce_check); else the operand counts, one
 * shape for all, and an output without stride 0 on an extent above 1.
 * Returns 0 or the error code, with the reason in why. */
int tpc_int_check(const tpc_operands *a, char *why, size_t why_size);

#endif /* TYTO_PLUGINS_INT_PLAN_H */
