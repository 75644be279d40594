/* Source tensors: inputs, parameters, constants and random tensors. */
#include "dtype.h"
#include "node.h"
#include "shape.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Validates the dtype and shape of a source made by op `name`. */
static int source_check(tyto_graph *g, const char *name, tyto_dtype dtype,
                        int rank, const int64_t *shape) {
  if (!dtype_info_of(dtype)) {
    graph_fail(g,
               "%s: unknown dtype %d (expected TYTO_F32, TYTO_F64, "
               "TYTO_F16, TYTO_BF16, TYTO_I32 or TYTO_I64)",
               name, (int)dtype);
    return -1;
  }
  return shape_check(g, name, rank, shape);
}

static tyto_tensor *source_new(tyto_graph *g, tyto_op op, tyto_kind kind,
                               tyto_dtype dtype, int rank, const int64_t *shape,
                               const char *name) {
  if (!g)
    return NULL;
  if (source_check(g, tyto_op_name(op), dtype, rank, shape) < 0)
    return &g->error;
  tyto_tensor *t =
      node_new(g, op, dtype, rank, shape, 0, NULL, 0, NULL, 0, NULL);
  if (t->kind == TYTO_KIND_ERROR)
    return t;
  t->kind = kind;
  if (name) {
    tyto_tensor_set_name(t, name);
    if (!t->name)
      return &g->error;
  }
  return t;
}

tyto_tensor *tyto_input(tyto_graph *g, tyto_dtype dtype, int rank,
                        const int64_t *shape, const char *name) {
  return source_new(g, TYTO_OP_INPUT, TYTO_KIND_INPUT, dtype, rank, shape,
                    name);
}

tyto_tensor *tyto_parameter(tyto_graph *g, tyto_dtype dtype, int rank,
                            const int64_t *shape, const char *name) {
  return source_new(g, TYTO_OP_PARAMETER, TYTO_KIND_PARAMETER, dtype, rank,
                    shape, name);
}

/* "name: 2.5 is not an i32" when an integer dtype's value is not one. */
static int int_value_check(tyto_graph *g, const char *name,
                           const dtype_info *di, double v, int64_t at) {
  if (dtype_takes_value(di->dtype, v))
    return 0;
  char where[48] = "", val[48];
  if (at >= 0)
    snprintf(where, sizeof where, " (element %lld)", (long long)at);
  snprintf(val, sizeof val, v == trunc(v) && fabs(v) < 1e30 ? "%.0f" : "%.17g",
           v);
  graph_fail(g,
             "%s: %s%s is not an %s (a whole number in its range, at most "
             "2^53 in magnitude; tyto_constant_raw gives any i64)",
             name, val, where, di->name);
  return -1;
}

tyto_tensor *tyto_constant(tyto_graph *g, tyto_dtype dtype, int rank,
                           const int64_t *shape, const double *values) {
  if (!g)
    return NULL;
  if (source_check(g, "constant", dtype, rank, shape) < 0)
    return &g->error;
  int64_t n = shape_numel(rank, shape);
  if (n > 0 && !values)
    return graph_fail(g, "constant: values is NULL");
  const dtype_info *di = dtype_info_of(dtype);
  for (int64_t i = 0; di->integer && i < n; i++)
    if (int_value_check(g, "constant", di, values[i], i) < 0)
      return &g->error;
  tyto_tensor *t = source_new(g, TYTO_OP_CONSTANT, TYTO_KIND_CONSTANT, dtype,
                              rank, shape, NULL);
  if (t->kind == TYTO_KIND_ERROR || n == 0)
    return t;
  if ((uint64_t)n > SIZE_MAX / tyto_dtype_size(dtype) ||
      !(t->data = graph_alloc(g, (size_t)n * tyto_dtype_size(dtype))))
    return graph_oom(g, "constant");
  for (int64_t i = 0; i < n; i++)
    di->store(t->data, (size_t)i, values[i]);
  return t;
}

tyto_tensor *tyto_constant_raw(tyto_graph *g, tyto_dtype dtype, int rank,
                               const int64_t *shape, const void *data,
                               size_t bytes) {
  if (!g)
    return NULL;
  if (source_check(g, "constant_raw", dtype, rank, shape) < 0)
    return &g->error;
  int64_t n = shape_numel(rank, shape);
  size_t size = tyto_dtype_size(dtype);
  if ((uint64_t)n > SIZE_MAX / size)
    return graph_oom(g, "constant_raw");
  if (bytes != (size_t)n * size) {
    char s[SHAPE_STR];
    shape_str(s, rank, shape);
    return graph_fail(g, "constant_raw: %zu bytes for %s%s (expected %zu)",
                      bytes, tyto_dtype_name(dtype), s, (size_t)n * size);
  }
  if (n > 0 && !data)
    return graph_fail(g, "constant_raw: data is NULL");
  tyto_tensor *t = source_new(g, TYTO_OP_CONSTANT, TYTO_KIND_CONSTANT, dtype,
                              rank, shape, NULL);
  if (t->kind == TYTO_KIND_ERROR || n == 0)
    return t;
  if (!(t->data = graph_alloc(g, bytes)))
    return graph_oom(g, "constant_raw");
  memcpy(t->data, data, bytes);
  return t;
}

tyto_tensor *tyto_full(tyto_graph *g, tyto_dtype dtype, int rank,
                       const int64_t *shape, double value) {
  const dtype_info *di = dtype_info_of(dtype);
  if (g && di && int_value_check(g, "full", di, value, -1) < 0)
    return &g->error;
  tyto_tensor *t =
      source_new(g, TYTO_OP_FULL, TYTO_KIND_CONSTANT, dtype, rank, shape, NULL);
  if (t && t->kind != TYTO_KIND_ERROR) {
    t->fattrs = graph_alloc(g, sizeof *t->fattrs);
    if (!t->fattrs)
      return graph_oom(g, "full");
    t->n_fattrs = 1;
    t->fattrs[0] = value;
  }
  return t;
}

tyto_tensor *tyto_scalar(tyto_graph *g, tyto_dtype dtype, double value) {
  return tyto_full(g, dtype, 0, NULL, value);
}

tyto_tensor *tyto_scalar_like(tyto_tensor *x, double value) {
  if (!x)
    return NULL;
  if (x->kind == TYTO_KIND_ERROR)
    return x;
  return tyto_full(x->graph, x->dtype, 0, NULL, value);
}

static tyto_tensor *random_new(tyto_graph *g, tyto_op op, tyto_dtype dtype,
                               int rank, const int64_t *shape, double f0,
                               double f1, size_t n_f, uint64_t seed) {
  if (!g)
    return NULL;
  const char *name = tyto_op_name(op);
  if (source_check(g, name, dtype, rank, shape) < 0)
    return &g->error;
  int64_t n = shape_numel(rank, shape);
  /* Philox gives four numbers per counter: consume whole counters. */
  uint64_t counters = ((uint64_t)n + 3) / 4;
  int64_t iattrs[2] = {(int64_t)seed, (int64_t)g->random_offset};
  double fattrs[2] = {f0, f1};
  tyto_tensor *t =
      node_new(g, op, dtype, rank, shape, 0, NULL, 2, iattrs, n_f, fattrs);
  if (t->kind == TYTO_KIND_ERROR)
    return t;
  t->kind = TYTO_KIND_CONSTANT;
  g->random_offset += counters;
  return t;
}

const char *random_params_why(tyto_op op, double a, double b, char *buf,
                              size_t size) {
  if (op == TYTO_OP_RANDOM_UNIFORM && !(isfinite(a) && isfinite(b)))
    snprintf(buf, size, "expected finite bounds, got low %g and high %g", a, b);
  else if (op == TYTO_OP_RANDOM_UNIFORM && !(a < b))
    snprintf(buf, size, "low %g is not below high %g", a, b);
  else if (op == TYTO_OP_RANDOM_NORMAL && !isfinite(a))
    snprintf(buf, size, "expected a finite mean, got %g", a);
  else if (op == TYTO_OP_RANDOM_NORMAL && !(isfinite(b) && b >= 0))
    snprintf(buf, size, "expected a finite stddev >= 0, got %g", b);
  else if (op == TYTO_OP_RANDOM_BERNOULLI && !(a >= 0 && a <= 1))
    snprintf(buf, size, "p %g outside [0, 1]", a);
  else
    return NULL;
  return buf;
}

/* 1 (g in error) when a random op's parameters are out of range. */
static int random_params_bad(tyto_graph *g, tyto_op op, double a, double b) {
  char why[128];
  if (!random_params_why(op, a, b, why, sizeof why))
    return 0;
  graph_fail(g, "%s: %s", tyto_op_name(op), why);
  return 1;
}

tyto_tensor *tyto_random_stepped(tyto_op op, tyto_tensor *step, int rank,
                                 const int64_t *shape, double a, double b,
                                 uint64_t seed) {
  if (!step)
    return NULL;
  tyto_graph *g = step->graph;
  if (step->kind == TYTO_KIND_ERROR)
    return step;
  if (op != TYTO_OP_RANDOM_UNIFORM && op != TYTO_OP_RANDOM_NORMAL &&
      op != TYTO_OP_RANDOM_BERNOULLI)
    return graph_fail(g, "random: op %s is not a random op", tyto_op_name(op));
  if (step->rank != 0) {
    char ss[64];
    return graph_fail(g, "random: step must be a rank-0 tensor, got %s",
                      tensor_shape_str(ss, step));
  }
  if (random_params_bad(g, op, a, b))
    return &g->error;
  const char *name = tyto_op_name(op);
  if (source_check(g, name, step->dtype, rank, shape) < 0)
    return &g->error;
  int64_t n = shape_numel(rank, shape);
  uint64_t counters = ((uint64_t)n + 3) / 4;
  int64_t iattrs[2] = {(int64_t)seed, (int64_t)g->random_offset};
  double fattrs[2] = {a, b};
  size_t n_f = op == TYTO_OP_RANDOM_BERNOULLI ? 1 : 2;
  tyto_tensor *t = node_new(g, op, step->dtype, rank, shape, 1, &step, 2,
                            iattrs, n_f, fattrs);
  if (t->kind == TYTO_KIND_ERROR)
    return t;
  g->random_offset += counters;
  return t;
}

tyto_tensor *tyto_random_uniform(tyto_graph *g, tyto_dtype dtype, int rank,
                                 const int64_t *shape, double low, double high,
                                 uint64_t seed) {
  if (g && random_params_bad(g, TYTO_OP_RANDOM_UNIFORM, low, high))
    return &g->error;
  return random_new(g, TYTO_OP_RANDOM_UNIFORM, dtype, rank, shape, low, high, 2,
                    seed);
}

tyto_tensor *tyto_random_normal(tyto_graph *g, tyto_dtype dtype, int rank,
                                const int64_t *shape, double mean,
                                double stddev, uint64_t seed) {
  if (g && random_params_bad(g, TYTO_OP_RANDOM_NORMAL, mean, stddev))
    return &g->error;
  return random_new(g, TYTO_OP_RANDOM_NORMAL, dtype, rank, shape, mean, stddev,
                    2, seed);
}

tyto_tensor *tyto_random_bernoulli(tyto_graph *g, tyto_dtype dtype, int rank,
                                   const int64_t *shape, double p,
                                   uint64_t seed) {
  if (g && random_params_bad(g, TYTO_OP_RANDOM_BERNOULLI, p, 0))
    return &g->error;
  return random_new(g, TYTO_OP_RANDOM_BERNOULLI, dtype, rank, shape, p, 0, 1,
                    seed);
}
