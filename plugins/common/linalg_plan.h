/*
 * Linear algebra on the last two axes (INV, DET, LOGDET, SOLVE, CHOLESKY,
 * QR, TRIANGULAR_SOLVE) as the GPU plugins check it: the operands,
 * attributes and shapes by the rules of plugins/cpu/linalg.c, in its order
 * and with one set of messages. Each plugin adds its own size limits.
 * Depends on the plugin ABI header and the C library only.
 */
#ifndef TYTO_PLUGINS_LINALG_PLAN_H
#define TYTO_PLUGINS_LINALG_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "geometry.h"

/* A checked problem: `batch` matrices over `lead` batch axes; A is m x n,
 * B (SOLVE, TRIANGULAR_SOLVE) n x k, and for QR k = min(m, n). */
typedef struct tpc_linalg {
  uint32_t lead;
  int64_t batch, m, n, k;
  int lower, transpose, unit; /* TRIANGULAR_SOLVE's iattrs */
  int checked;                /* INV, SOLVE, CHOLESKY: fail on info */
} tpc_linalg;

/* Whether op is one of the seven above. */
int tpc_linalg_op(uint32_t op);

/* Checks a linear algebra op's operand counts, attributes and shapes (the
 * shapes printed as in tpc_format_shape) and fills *g. Returns 0, or
 * TYTO_PLUGIN_ERR_INVALID_ARGUMENT with the reason in why (beginning with
 * the op's name; 512 bytes hold every message). */
int tpc_linalg_check(const tpc_operands *a, tpc_linalg *g, char *why,
                     size_t why_size);

#endif /* TYTO_PLUGINS_LINALG_PLAN_H */
