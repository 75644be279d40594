/* Cutting and joining: slice (Python semantics) and its adjoint
 * slice_backward, split, concat, stack, pad. */
#include "dtype.h"
#include "node.h"
#include "shape.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Python's slice.indices(): clamps start/stop for extent n and step, and
 * returns the number of elements. TYTO_END stands for an omitted bound. */
static int64_t slice_indices(int64_t n, int64_t *start, int64_t stop,
                             int64_t step) {
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  int64_t s = *start, e = stop;
  if (s == TYTO_END)
    s = step > 0 ? lower : upper;
  else if (s < 0)
    s = s + n < lower ? lower : s + n;
  else if (s > upper)
    s = upper;
  if (e == TYTO_END)
    e = step > 0 ? upper : lower;
  else if (e < 0)
    e = e + n < lower ? lower : e + n;
  else if (e > upper)
    e = upper;
  *start = s;
  if (step > 0)
    return e > s ? (e - s - 1) / step + 1 : 0;
  return s > e ? (s - e - 1) / -step + 1 : 0;
}

tyto_tensor *tyto_slice(tyto_tensor *x, const int64_t *starts,
                        const int64_t *stops, const int64_t *steps) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("slice", 1, &x, 1, &err);
  if (!g)
    return err;
  int64_t shape[TYTO_MAX_RANK], iattrs[2 * TYTO_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    int64_t start = starts ? starts[i] : TYTO_END;
    int64_t stop = stops ? stops[i] : TYTO_END;
    int64_t step = steps ? steps[i] : 1;
    if (step == 0 || step == INT64_MIN) {
      char s[SHAPE_STR];
      return graph_fail(g, "slice: step %" PRId64 " on axis %d of %s", step, i,
                        tensor_shape_str(s, x));
    }
    shape[i] = slice_indices(x->shape[i], &start, stop, step);
    iattrs[2 * i] = start;
    iattrs[2 * i + 1] = step;
  }
  return node_new(g, TYTO_OP_SLICE, x->dtype, x->rank, shape, 1, &x,
                  2 * (size_t)x->rank, iattrs, 0, NULL);
}

tyto_tensor *tyto_slice_backward(tyto_tensor *g_, int rank,
                                 const int64_t *shape, const int64_t *starts,
                                 const int64_t *steps) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("slice_backward", 1, &g_, 1, &err);
  if (!g)
    return err;
  if (shape_check(g, "slice_backward", rank, shape) < 0)
    return &g->error;
  char sg[SHAPE_STR], ss[SHAPE_STR];
  tensor_shape_str(sg, g_);
  shape_str(ss, rank, shape);
  if (g_->rank != rank)
    return graph_fail(g, "slice_backward: rank of g %s differs from %s", sg,
                      ss);
  int64_t iattrs[2 * TYTO_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int64_t start = starts ? starts[i] : 0, step = steps ? steps[i] : 1;
    int64_t count = g_->shape[i], n = shape[i];
    if (step == 0 || step == INT64_MIN)
      return graph_fail(g, "slice_backward: step %" PRId64 " on axis %d of %s",
                        step, i, ss);
    /* The first and the last placed element must lie in [0, n); the test
     * on the last is written with a division so that it cannot overflow. */
    int inside = count == 0 || (start >= 0 && start < n &&
                                (step > 0 ? count - 1 <= (n - 1 - start) / step
                                          : count - 1 <= start / -step));
    if (!inside)
      return graph_fail(g,
                        "slice_backward: axis %d places %" PRId64
                        " elements from %" PRId64 " by step %" PRId64
                        " outside extent %" PRId64,
                        i, count, start, step, n);
    iattrs[2 * i] = start;
    iattrs[2 * i + 1] = step;
  }
  return node_new(g, TYTO_OP_SLICE_BACKWARD, g_->dtype, rank, shape, 1, &g_,
                  2 * (size_t)rank, iattrs, 0, NULL);
}

tyto_tensor *tyto_slice_axis(tyto_tensor *x, int axis, int64_t start,
                             int64_t stop, int64_t step) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("slice", 1, &x, 1, &err);
  if (!g)
    return err;
  int a;
  if (shape_axis(g, "slice", x, axis, &a) < 0)
    return &g->error;
  int64_t starts[TYTO_MAX_RANK], stops[TYTO_MAX_RANK], steps[TYTO_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    starts[i] = i == a ? start : TYTO_END;
    stops[i] = i == a ? stop : TYTO_END;
    steps[i] = i == a ? step : 1;
  }
  return tyto_slice(x, starts, stops, steps);
}

void tyto_split(tyto_tensor *x, int axis, int n, const int64_t *sizes,
                tyto_tensor **out) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("split", 1, &x, 1, &err);
  if (!out || n <= 0) {
    if (g)
      graph_fail(g, "split: %s",
                 !out ? "out is NULL" : "number of parts must be positive");
    return;
  }
  int a = 0;
  if (g && shape_axis(g, "split", x, axis, &a) < 0) {
    err = &g->error;
    g = NULL;
  }
  if (g) {
    char s[SHAPE_STR];
    int64_t extent = x->shape[a], total = 0;
    tensor_shape_str(s, x);
    if (!sizes && extent % n) {
      err = graph_fail(g, "split: %d equal parts do not divide axis %d of %s",
                       n, axis, s);
      g = NULL;
    }
    for (int i = 0; g && sizes && i < n; i++) {
      if (sizes[i] < 0 || sizes[i] > INT64_MAX - total) {
        err = sizes[i] < 0
                  ? graph_fail(g, "split: negative size %" PRId64, sizes[i])
                  : graph_fail(g, "split: sizes overflow");
        g = NULL;
        break;
      }
      total += sizes[i];
    }
    if (g && sizes && total != extent) {
      err = graph_fail(
          g, "split: sizes sum to %" PRId64 ", axis %d of %s has %" PRId64,
          total, axis, s, extent);
      g = NULL;
    }
  }
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (!g) {
      out[i] = err;
      continue;
    }
    int64_t size = sizes ? sizes[i] : x->shape[a] / n;
    out[i] = tyto_slice_axis(x, a, at, at + size, 1);
    at += size;
  }
}

tyto_tensor *tyto_concat(int n, tyto_tensor *const *xs, int axis) {
  tyto_tensor *err;
  if (n <= 0 || !xs)
    return NULL;
  tyto_graph *g = graph_check("concat", (size_t)n, xs, 1, &err);
  if (!g)
    return err;
  int a;
  if (shape_axis(g, "concat", xs[0], axis, &a) < 0)
    return &g->error;
  int64_t shape[TYTO_MAX_RANK];
  memcpy(shape, xs[0]->shape, (size_t)xs[0]->rank * sizeof *shape);
  for (int i = 1; i < n; i++) {
    char s0[SHAPE_STR], si[SHAPE_STR];
    tensor_shape_str(s0, xs[0]);
    tensor_shape_str(si, xs[i]);
    if (xs[i]->rank != xs[0]->rank)
      return graph_fail(g, "concat: ranks differ: %s and %s", s0, si);
    for (int d = 0; d < xs[0]->rank; d++)
      if (d != a && xs[i]->shape[d] != shape[d])
        return graph_fail(g,
                          "concat: shapes differ outside axis %d: %s and "
                          "%s",
                          a, s0, si);
    if (xs[i]->shape[a] > INT64_MAX - shape[a])
      return graph_fail(g, "concat: result is too large");
    shape[a] += xs[i]->shape[a];
  }
  int64_t iattr = a;
  return node_new(g, TYTO_OP_CONCAT, xs[0]->dtype, xs[0]->rank, shape,
                  (size_t)n, xs, 1, &iattr, 0, NULL);
}

tyto_tensor *tyto_stack(int n, tyto_tensor *const *xs, int axis) {
  tyto_tensor *err;
  if (n <= 0 || !xs)
    return NULL;
  tyto_graph *g = graph_check("stack", (size_t)n, xs, 1, &err);
  if (!g)
    return err;
  int r = xs[0]->rank;
  char s0[SHAPE_STR], si[SHAPE_STR];
  tensor_shape_str(s0, xs[0]);
  for (int i = 1; i < n; i++)
    if (xs[i]->rank != r ||
        memcmp(xs[i]->shape, xs[0]->shape, (size_t)r * sizeof(int64_t)))
      return graph_fail(g, "stack: shapes differ: %s and %s", s0,
                        tensor_shape_str(si, xs[i]));
  int a = axis < 0 ? axis + r + 1 : axis;
  if (a < 0 || a > r)
    return graph_fail(g, "stack: axis %d out of range for stacking %s", axis,
                      s0);
  if (r == TYTO_MAX_RANK)
    return graph_fail(g, "stack: needs rank below 8, got %s", s0);
  int64_t shape[TYTO_MAX_RANK];
  for (int i = 0, j = 0; i <= r; i++)
    shape[i] = i == a ? 1 : xs[0]->shape[j++];
  tyto_tensor **parts = malloc((size_t)n * sizeof *parts);
  if (!parts)
    return graph_oom(g, "stack");
  for (int i = 0; i < n; i++)
    parts[i] = tyto_reshape(xs[i], r + 1, shape);
  tyto_tensor *t = tyto_concat(n, parts, a);
  free(parts);
  return t;
}

tyto_tensor *tyto_pad(tyto_tensor *x, const int64_t *before,
                      const int64_t *after, tyto_pad_mode mode, double value) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("pad", 1, &x, 1, &err);
  if (!g)
    return err;
  if (mode != TYTO_PAD_CONSTANT && mode != TYTO_PAD_REFLECT)
    return graph_fail(g, "pad: unknown mode %d", (int)mode);
  if (mode == TYTO_PAD_CONSTANT && !dtype_takes_value(x->dtype, value))
    return graph_fail(g,
                      "pad: value %.17g is not an %s (a whole number in its "
                      "range, at most 2^53 in magnitude)",
                      value, tyto_dtype_name(x->dtype));
  char s[SHAPE_STR];
  tensor_shape_str(s, x);
  int64_t shape[TYTO_MAX_RANK], iattrs[1 + 2 * TYTO_MAX_RANK];
  iattrs[0] = mode;
  for (int i = 0; i < x->rank; i++) {
    int64_t b = before ? before[i] : 0, e = after ? after[i] : 0;
    int64_t p = b < e ? e : b;
    if (b < 0 || e < 0)
      return graph_fail(g, "pad: negative padding %" PRId64 " on axis %d of %s",
                        b < 0 ? b : e, i, s);
    if (mode == TYTO_PAD_REFLECT && p > 0 && p >= x->shape[i])
      return graph_fail(g,
                        "pad: reflect padding %" PRId64
                        " on axis %d needs an extent above %" PRId64 ", got %s",
                        p, i, p, s);
    if (b > INT64_MAX - x->shape[i] || e > INT64_MAX - x->shape[i] - b)
      return graph_fail(g, "pad: result of %s is too large", s);
    shape[i] = x->shape[i] + b + e;
    iattrs[1 + 2 * i] = b;
    iattrs[2 + 2 * i] = e;
  }
  if (shape_check(g, "pad", x->rank, shape) < 0)
    return &g->error;
  return node_new(g, TYTO_OP_PAD, x->dtype, x->rank, shape, 1, &x,
                  1 + 2 * (size_t)x->rank, iattrs, 1, &value);
}
