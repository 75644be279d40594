/*
 * Elementwise work planned over its operands (eltwise_plan.h).
 */
#include "eltwise_plan.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

int tpc_elt_check_shapes(const tpc_operands *a, char *why, size_t why_size) {
  const char *op = tpc_op_name(a->op);
  const tyto_plugin_layout *o = a->out[0];
  const char *ref = a->n_out > 1 ? "output 0" : "the output";
  for (uint32_t j = 0; j < a->n_in + a->n_out; j++) {
    const tyto_plugin_layout *l = tpc_operand(a, (int)j);
    int in = j < a->n_in;
    if (l->rank != o->rank ||
        memcmp(l->shape, o->shape, o->rank * sizeof o->shape[0]) != 0) {
      char s1[160], s2[160];
      tpc_format_shape(l, s1, sizeof s1);
      tpc_format_shape(o, s2, sizeof s2);
      snprintf(why, why_size, "%s: %s %u has shape %s but %s has shape %s (%s)",
               op, in ? "input" : "output", (unsigned)(in ? j : j - a->n_in),
               s1, ref, s2,
               in ? "inputs must arrive broadcast to the output's shape"
                  : "all outputs must have one shape");
      return TYTO_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  }
  return 0;
}

static uint64_t magnitude(int64_t v) {
  return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

void tpc_elt_plan_make(const tpc_operands *a, tpc_elt_plan *p) {
  const uint32_t nops = a->n_in + a->n_out;
  const tyto_plugin_layout *out = a->out[0];
  memset(p, 0, sizeof *p);
  /* Insertion sort, stable: at most 8 dimensions. */
  uint32_t order[TYTO_PLUGIN_MAX_RANK], n_dims = 0;
  for (uint32_t d = 0; d < out->rank; d++) {
    if (out->shape[d] == 1)
      continue;
    uint32_t at = n_dims++;
    for (; at > 0 &&
           magnitude(out->strides[order[at - 1]]) < magnitude(out->strides[d]);
         at--)
      order[at] = order[at - 1];
    order[at] = d;
  }
  uint32_t r = 0;
  for (uint32_t q = n_dims; q-- > 0;) {
    const uint32_t d = order[q];
    int64_t size = out->shape[d];
    int merge = r > 0;
    for (uint32_t j = 0; j < nops && merge; j++) {
      int64_t step;
      if (__builtin_mul_overflow(p->strides[j][r - 1], p->shape[r - 1],
                                 &step) ||
          step != tpc_operand(a, (int)j)->strides[d])
        merge = 0;
    }
    if (merge) {
      p->shape[r - 1] *= size; /* at most the element count */
      continue;
    }
    p->shape[r] = size;
    for (uint32_t j = 0; j < nops; j++)
      p->strides[j][r] = tpc_operand(a, (int)j)->strides[d];
    r++;
  }
  p->rank = r;
  p->dense = r <= 1;
  for (uint32_t j = 0; j < nops && r == 1; j++)
    p->dense &= p->strides[j][0] == 1;
}

int tpc_elt_plan_linear(const tpc_elt_plan *p, uint32_t n_in, uint32_t nops,
                        uint32_t *bcast) {
  *bcast = 0;
  if (p->rank == 0)
    return 1;
  if (p->rank > 1)
    return 0;
  for (uint32_t j = 0; j < nops; j++) {
    int64_t st = p->strides[j][0];
    if (st == 0 && j < n_in && j < 32) {
      *bcast |= 1u << j;
    } else if (st != 1) {
      *bcast = 0;
      return 0;
    }
  }
  return 1;
}

void tpc_elt_plan_table(const tpc_elt_plan *p, uint32_t nops, int64_t *v) {
  for (uint32_t d = 0; d < 8; d++) {
    v[d] = d < p->rank ? p->shape[d] : 1;
    for (uint32_t j = 0; j < nops; j++)
      v[8 + 8 * j + d] = d < p->rank ? p->strides[j][d] : 0;
  }
}
