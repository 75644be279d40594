/*
 * Layout planning for the copy and fill kernels (see layout.h).
 */
#include "layout.h"

#include "../common/common.h"

#include <stdio.h>

/* The arithmetic lives in plugins/common, shared with the other plugins. */
int ocl_add_ok(int64_t a, int64_t b, int64_t *r) {
  return tpc_add_ok(a, b, r);
}

void ocl_format_shape(const tyto_plugin_layout *l, char *buf, size_t size) {
  tpc_format_shape(l, buf, size);
}

int ocl_layout_extent(const tyto_plugin_layout *l, const char *which,
                      int64_t *n, int64_t *lo, int64_t *hi, char *why,
                      size_t why_size) {
  return tpc_layout_extent(l, which, n, lo, hi, why, why_size);
}

int ocl_plan_make(const tyto_plugin_layout *in, const tyto_plugin_layout *out,
                  ocl_plan *plan, char *why, size_t why_size) {
  int64_t n_in = 0;
  *plan = (ocl_plan){0};
  if (!ocl_layout_extent(out, "output", &plan->n, &plan->out_lo, &plan->out_hi,
                         why, why_size))
    return 0;
  if (in != NULL && !ocl_layout_extent(in, "input", &n_in, &plan->in_lo,
                                       &plan->in_hi, why, why_size))
    return 0;
  plan->in_offset = in != NULL ? in->offset : 0;
  plan->out_offset = out->offset;

  /* Two writes to one output element would race, and a copy could then
   * leave either value; a fill writes one value, so there it is harmless. */
  for (uint32_t k = 0; in != NULL && k < out->rank; k++)
    if (out->shape[k] > 1 && out->strides[k] == 0) {
      snprintf(why, why_size,
               "output dimension %u (size %lld) has stride 0, so several "
               "input elements would be written to one output element",
               (unsigned)k, (long long)out->shape[k]);
      return 0;
    }
  if (plan->n == 0)
    return 1;

  /* Walk from the innermost dimension out, dropping size-1 dimensions and
   * merging a dimension into the previous one when its strides continue it
   * (stride == inner stride * inner size) in both layouts. */
  uint32_t r = 0;
  for (uint32_t k = out->rank; k-- > 0;) {
    int64_t size = out->shape[k];
    int64_t os = out->strides[k];
    int64_t is = in != NULL ? in->strides[k] : 0;
    if (size == 1)
      continue;
    if (r > 0) {
      int64_t prev = plan->shape[r - 1], o_next, i_next;
      /* The products are bounded by the extents checked above. */
      if (tpc_mul_ok(plan->out_strides[r - 1], prev, &o_next) && o_next == os &&
          tpc_mul_ok(plan->in_strides[r - 1], prev, &i_next) && i_next == is) {
        plan->shape[r - 1] = prev * size;
        continue;
      }
    }
    plan->shape[r] = size;
    plan->out_strides[r] = os;
    plan->in_strides[r] = is;
    r++;
  }
  plan->rank = r;
  plan->out_dense = r == 0 || (r == 1 && plan->out_strides[0] == 1);
  plan->in_dense =
      in != NULL && (r == 0 || (r == 1 && plan->in_strides[0] == 1));
  return 1;
}
