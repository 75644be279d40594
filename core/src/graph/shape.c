/* Shapes: formatting for messages, validation, NumPy broadcasting, axes. */
#include "shape.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

char *shape_str(char *buf, int rank, const int64_t *shape) {
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < rank; i++)
    n += (size_t)snprintf(buf + n, SHAPE_STR - n, "%s%" PRId64, i ? "," : "",
                          shape[i]);
  buf[n++] = ']';
  buf[n] = '\0';
  return buf;
}

char *tensor_shape_str(char *buf, const tyto_tensor *t) {
  return shape_str(buf, t->rank, t->shape);
}

int64_t shape_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= shape[i];
  return n;
}

int shape_check(tyto_graph *g, const char *name, int rank,
                const int64_t *shape) {
  char s[SHAPE_STR];
  if (rank < 0 || rank > TYTO_MAX_RANK) {
    graph_fail(g, "%s: rank %d %s", name, rank,
               rank < 0 ? "is negative" : "exceeds 8");
    return -1;
  }
  if (rank > 0 && !shape) {
    graph_fail(g, "%s: shape is NULL for rank %d", name, rank);
    return -1;
  }
  /* The product of the non-zero extents must leave room for the bytes of
   * the widest dtype (8) in 63 bits: a zero extent elsewhere must not hide
   * an overflow, since views and reshapes of the shape may drop it. */
  int64_t numel = 1;
  const int64_t limit = INT64_MAX / 8;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) {
      graph_fail(g, "%s: negative extent in %s", name,
                 shape_str(s, rank, shape));
      return -1;
    }
    if (shape[i] > 0 && numel > limit / shape[i]) {
      graph_fail(g, "%s: %s has more than 2^60 elements", name,
                 shape_str(s, rank, shape));
      return -1;
    }
    if (shape[i] > 0)
      numel *= shape[i];
  }
  return 0;
}

int shape_broadcast(int ra, const int64_t *a, int rb, const int64_t *b,
                    int *out_rank, int64_t *out) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    /* align at the right: axis i of the output is axis i - (r - ra) of a */
    int ia = i - (r - ra), ib = i - (r - rb);
    int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    if (ea == eb || eb == 1)
      out[i] = ea;
    else if (ea == 1)
      out[i] = eb;
    else
      return -1;
  }
  *out_rank = r;
  return 0;
}

int shape_axis(tyto_graph *g, const char *name, const tyto_tensor *x, int axis,
               int *out) {
  int a = axis < 0 ? axis + x->rank : axis;
  if (a < 0 || a >= x->rank) {
    char s[SHAPE_STR];
    graph_fail(g, "%s: axis %d out of range for %s", name, axis,
               tensor_shape_str(s, x));
    return -1;
  }
  *out = a;
  return 0;
}

int shape_axes(tyto_graph *g, const char *name, const tyto_tensor *x, int n,
               const int *axes, unsigned *mask) {
  *mask = 0;
  if (!axes) {
    *mask = (1u << x->rank) - 1;
    return 0;
  }
  if (n < 0) {
    graph_fail(g, "%s: negative number of axes %d", name, n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    int a;
    if (shape_axis(g, name, x, axes[i], &a) < 0)
      return -1;
    if (*mask & (1u << a)) {
      char s[SHAPE_STR];
      graph_fail(g, "%s: axis %d repeated for %s", name, axes[i],
                 tensor_shape_str(s, x));
      return -1;
    }
    *mask |= 1u << a;
  }
  return 0;
}
