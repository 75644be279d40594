/* The integer dtypes' routing and checks (int_plan.h). */
#include "int_plan.h"

#include <stdio.h>

#include "common.h"
#include "eltwise_plan.h"
#include "reduce_plan.h"
#include "text.h"

/* "i32, f32 -> i64": the operands' dtypes, for messages. */
static void dtypes_text(const tpc_operands *a, char *buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < a->n_in + a->n_out && at < size; i++) {
    int n = snprintf(buf + at, size - at, "%s%s",
                     i == 0         ? ""
                     : i == a->n_in ? " -> "
                                    : ", ",
                     tpc_dtype_name(tpc_operand(a, (int)i)->dtype));
    if (n < 0)
      break;
    at += (size_t)n;
  }
}

/* Whether every operand of a but those of the mask `skip` (bit i: operand
 * i, inputs first) has dtype dt. */
static int all_of(const tpc_operands *a, uint32_t dt, unsigned skip) {
  for (uint32_t i = 0; i < a->n_in + a->n_out; i++)
    if (!(skip & (1u << i)) && tpc_operand(a, (int)i)->dtype != dt)
      return 0;
  return 1;
}

int tpc_int_route(const tpc_operands *a, int *int_family, char *why,
                  size_t why_size) {
  const char *op = tpc_op_name(a->op);
  char dts[160];
  dtypes_text(a, dts, sizeof dts);
  uint32_t out = a->out[0]->dtype;
  uint32_t in0 = a->n_in > 0 ? a->in[0]->dtype : out;
  int ok = 0;
  *int_family = 0;
  switch (a->op) {
  case TYTO_PLUGIN_OP_COPY:
  case TYTO_PLUGIN_OP_FILL:
  case TYTO_PLUGIN_OP_PAD: ok = all_of(a, out, 0); break;
  case TYTO_PLUGIN_OP_CAST:
    ok = 1; /* any two of the six dtypes, each checked by the plugin */
    *int_family = in0 != out; /* else a COPY */
    break;
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_ARGMIN:
    /* the input is never an integer */
    ok = a->n_in == 1 && !tpc_dtype_int(in0) && tpc_dtype_int(out);
    break;
  case TYTO_PLUGIN_OP_GATHER:
  case TYTO_PLUGIN_OP_SCATTER_ADD:
    /* data (input 0, SCATTER_ADD's updates, the output) of one dtype;
     * indices (input 1) i32, i64 or the data's dtype */
    ok = a->n_in >= 2 && all_of(a, out, 2u) &&
         (tpc_dtype_int(a->in[1]->dtype) || a->in[1]->dtype == out);
    break;
  case TYTO_PLUGIN_OP_ONE_HOT:
    /* integer indices give any output dtype; others their own */
    ok = a->n_in == 1 && tpc_dtype_int(in0);
    break;
  case TYTO_PLUGIN_OP_FUSED:
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                    "fused: integer operands (%s) never appear in a fused "
                    "program (sdk/docs/ops.md, \"Integer dtypes\")",
                    dts);
  default:
    if (tpc_int_eltwise(a->op) || tpc_int_reduce(a->op)) {
      ok = tpc_dtype_int(out) && all_of(a, out, 0);
      *int_family = ok;
      break;
    }
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                    "%s is not defined on the integer dtypes (operands %s; "
                    "sdk/docs/ops.md, \"Integer dtypes\", lists the ops "
                    "that are): cast to a floating dtype first",
                    op, dts);
  }
  if (ok)
    return 0;
  return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                  "%s: operand dtypes %s are not a combination "
                  "sdk/docs/ops.md (\"Integer dtypes\") defines for it",
                  op, dts);
}

int tpc_int_check(const tpc_operands *a, char *why, size_t why_size) {
  const char *op = tpc_op_name(a->op);
  if (tpc_int_reduce(a->op))
    return tpc_reduce_check(a, why, why_size);
  int arity = a->op == TYTO_PLUGIN_OP_CAST ? 1 : tpc_fused_arity(a->op);
  if (a->n_in != (uint32_t)arity || a->n_out != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected %d input%s and 1 output, got %u and %u", op,
                    arity, arity > 1 ? "s" : "", (unsigned)a->n_in,
                    (unsigned)a->n_out);
  int code = tpc_elt_check_shapes(a, why, why_size);
  if (code != 0)
    return code;
  /* An empty output writes nothing: any strides do. */
  const tyto_plugin_layout *l = a->out[0];
  int empty = 0;
  for (uint32_t k = 0; k < l->rank; k++)
    empty |= l->shape[k] == 0;
  for (uint32_t k = 0; k < l->rank && !empty; k++)
    if (l->strides[k] == 0 && l->shape[k] > 1)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: the output has stride 0 on axis %u of extent "
                      "%lld; each output element must have its own place",
                      op, (unsigned)k, (long long)l->shape[k]);
  return 0;
}
