/*
 * The linear algebra ops' checks for the GPU plugins (linalg_plan.h).
 */
#include "linalg_plan.h"

#include <string.h>

#include "common.h"
#include "text.h"

int tpc_linalg_op(uint32_t op) {
  return op >= TYTO_PLUGIN_OP_INV && op <= TYTO_PLUGIN_OP_TRIANGULAR_SOLVE;
}

/* Checks that layout l has shape batch + [rows, cols] (rank lead + 2, or
 * lead when rows < 0: one value per matrix). */
static int want_shape(const char *name, const char *which,
                      const tyto_plugin_layout *l, const int64_t *batch,
                      uint32_t lead, int64_t rows, int64_t cols, char *why,
                      size_t why_size) {
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  uint32_t r = lead;
  memcpy(want, batch, lead * sizeof(int64_t));
  if (rows >= 0) {
    want[r++] = rows;
    want[r++] = cols;
  }
  if (l->rank == r && memcmp(want, l->shape, r * sizeof(int64_t)) == 0)
    return 0;
  char s1[160], s2[160];
  return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                  "%s: expected %s of shape %s, found %s", name, which,
                  tpc_format_extents(want, r, s1, sizeof s1),
                  tpc_format_extents(l->shape, l->rank, s2, sizeof s2));
}

int tpc_linalg_check(const tpc_operands *a, tpc_linalg *g, char *why,
                     size_t why_size) {
  const char *name = tpc_op_name(a->op);
  int two =
      a->op == TYTO_PLUGIN_OP_SOLVE || a->op == TYTO_PLUGIN_OP_TRIANGULAR_SOLVE;
  uint32_t n_in = two ? 2 : 1, n_out = a->op == TYTO_PLUGIN_OP_QR ? 2 : 1;
  if (a->n_in != n_in || a->n_out != n_out)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected %u input%s and %u output%s, got %u and %u",
                    name, (unsigned)n_in, n_in > 1 ? "s" : "", (unsigned)n_out,
                    n_out > 1 ? "s" : "", (unsigned)a->n_in,
                    (unsigned)a->n_out);
  const tyto_plugin_layout *A = a->in[0], *out = a->out[0];
  if (A->rank < 2)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected a matrix or a batch of them (rank >= 2), "
                    "found rank %u",
                    name, (unsigned)A->rank);
  uint32_t lead = A->rank - 2;
  int64_t m = A->shape[lead], n = A->shape[lead + 1], k = 0;
  if (a->op != TYTO_PLUGIN_OP_QR && m != n)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected square matrices, found %lld x %lld", name,
                    (long long)m, (long long)n);
  const int64_t *bs = A->shape;
  int code = 0;
  switch (a->op) {
  case TYTO_PLUGIN_OP_INV:
  case TYTO_PLUGIN_OP_CHOLESKY:
    code = want_shape(name, "output", out, bs, lead, n, n, why, why_size);
    break;
  case TYTO_PLUGIN_OP_DET:
  case TYTO_PLUGIN_OP_LOGDET:
    code = want_shape(name, "output", out, bs, lead, -1, -1, why, why_size);
    break;
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE:
    if (a->n_iattrs != 3)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: expected 3 integer attributes (lower, transpose, "
                      "unit_diagonal), got %u",
                      name, (unsigned)a->n_iattrs);
    g->lower = a->iattrs[0] != 0;
    g->transpose = a->iattrs[1] != 0;
    g->unit = a->iattrs[2] != 0;
    /* B and the output are checked as SOLVE's. */
    /* fall through */
  case TYTO_PLUGIN_OP_SOLVE: {
    const tyto_plugin_layout *b = a->in[1];
    k = b->rank >= 2 ? b->shape[b->rank - 1] : 0;
    code = want_shape(name, "B (input 1)", b, bs, lead, n, k, why, why_size);
    if (code == 0)
      code = want_shape(name, "output", out, bs, lead, n, k, why, why_size);
    break;
  }
  default: /* QR */
    k = m < n ? m : n;
    code = want_shape(name, "Q (output 0)", out, bs, lead, m, k, why, why_size);
    if (code == 0)
      code = want_shape(name, "R (output 1)", a->out[1], bs, lead, k, n, why,
                        why_size);
    break;
  }
  if (code != 0)
    return code;
  g->lead = lead;
  g->m = m;
  g->n = n;
  g->k = k;
  g->batch = 1;
  for (uint32_t i = 0; i < lead; i++)
    g->batch *= A->shape[i];
  g->checked = a->op == TYTO_PLUGIN_OP_INV || a->op == TYTO_PLUGIN_OP_SOLVE ||
               a->op == TYTO_PLUGIN_OP_CHOLESKY;
  return 0;
}
