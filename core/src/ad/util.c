/* Helpers shared by the derivative rules: symbolic zeros, broadcasting
 * and its adjoint. */
#include "config.h"

#include <string.h>

#include "rules.h"

int ad_same_shape(const tyto_tensor *a, const tyto_tensor *b) {
  return a->rank == b->rank &&
         !memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]);
}

tyto_tensor *ad_add(tyto_tensor *a, tyto_tensor *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return tyto_add(a, b);
}

tyto_tensor *ad_sub(tyto_tensor *a, tyto_tensor *b) {
  if (!b)
    return a;
  if (!a)
    return tyto_neg(b);
  return tyto_sub(a, b);
}

tyto_tensor *ad_neg(tyto_tensor *a) {
  return a ? tyto_neg(a) : NULL;
}

tyto_tensor *ad_zeros_like(const tyto_tensor *x) {
  return tyto_full(x->graph, x->dtype, x->rank, x->shape, 0.0);
}

tyto_tensor *ad_or_zeros(tyto_tensor *t, const tyto_tensor *like) {
  return t ? t : ad_zeros_like(like);
}

tyto_tensor *ad_scalar(const tyto_tensor *x, double v) {
  return tyto_scalar(x->graph, x->dtype, v);
}

tyto_tensor *ad_sum_to(tyto_tensor *g, const tyto_tensor *like) {
  if (!g || tyto_tensor_is_error(g) || ad_same_shape(g, like))
    return g;
  /* g's rank is at least like's; leading axes are summed away, and so are
   * aligned axes where like has extent 1 and g does not. */
  int lead = g->rank - like->rank, axes[TYTO_MAX_RANK], n = 0;
  if (lead < 0)
    return graph_fail(g->graph, "ad: internal: cannot sum rank %d to rank %d",
                      g->rank, like->rank);
  for (int i = 0; i < g->rank; i++)
    if (i < lead || (like->shape[i - lead] == 1 && g->shape[i] != 1))
      axes[n++] = i;
  tyto_tensor *s = n ? tyto_sum(g, n, axes, 0) : g;
  return ad_reshape_like(s, like);
}

tyto_tensor *ad_broadcast_like(tyto_tensor *g, const tyto_tensor *like) {
  if (!g || tyto_tensor_is_error(g) || ad_same_shape(g, like))
    return g;
  return tyto_broadcast_to(g, like->rank, like->shape);
}

tyto_tensor *ad_reshape_like(tyto_tensor *g, const tyto_tensor *like) {
  if (!g || tyto_tensor_is_error(g) || ad_same_shape(g, like))
    return g;
  return tyto_reshape(g, like->rank, like->shape);
}
