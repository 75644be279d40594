/* Elementwise ops: unary, binary with NumPy broadcasting, where and fma. */
#include "dtype.h"
#include "node.h"
#include "shape.h"

static int is_unary(tyto_op op) {
  return op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND;
}

static tyto_tensor *unary_new(tyto_op op, tyto_tensor *x, size_t n_f,
                              double f) {
  tyto_tensor *err;
  tyto_graph *g = graph_check(tyto_op_name(op), 1, &x, 1, &err);
  if (!g)
    return err;
  return node_new(g, op, x->dtype, x->rank, x->shape, 1, &x, 0, NULL, n_f, &f);
}

tyto_tensor *tyto_unary(tyto_op op, tyto_tensor *x) {
  if (!is_unary(op) || op == TYTO_OP_LEAKY_RELU || op == TYTO_OP_ELU) {
    if (!x)
      return NULL;
    if (x->kind == TYTO_KIND_ERROR)
      return x;
    return graph_fail(x->graph, "unary: TYTO_OP %d is not a unary op%s",
                      (int)op, is_unary(op) ? " without attributes" : "");
  }
  return unary_new(op, x, 0, 0);
}

tyto_tensor *tyto_cast(tyto_tensor *x, tyto_dtype dtype) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("cast", 1, &x, 1, &err);
  if (!g)
    return err;
  if (!dtype_info_of(dtype))
    return graph_fail(g,
                      "cast: unknown dtype %d (expected one of f32, f64, "
                      "f16, bf16, i32, i64)",
                      (int)dtype);
  if (x->dtype == dtype)
    return x;
  return node_new(g, TYTO_OP_CAST, dtype, x->rank, x->shape, 1, &x, 0, NULL, 0,
                  NULL);
}

tyto_tensor *tyto_leaky_relu(tyto_tensor *x, double slope) {
  return unary_new(TYTO_OP_LEAKY_RELU, x, 1, slope);
}

tyto_tensor *tyto_elu(tyto_tensor *x, double alpha) {
  return unary_new(TYTO_OP_ELU, x, 1, alpha);
}

#define UNARY(fn, OP)                                                          \
  tyto_tensor *tyto_##fn(tyto_tensor *x) {                                     \
    return unary_new(TYTO_OP_##OP, x, 0, 0);                                   \
  }
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY(sign, SIGN)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(log1p, LOG1P)
UNARY(expm1, EXPM1)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(square, SQUARE)
UNARY(reciprocal, RECIPROCAL)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(tan, TAN)
UNARY(asin, ASIN)
UNARY(acos, ACOS)
UNARY(atan, ATAN)
UNARY(sinh, SINH)
UNARY(cosh, COSH)
UNARY(tanh, TANH)
UNARY(asinh, ASINH)
UNARY(acosh, ACOSH)
UNARY(atanh, ATANH)
UNARY(sigmoid, SIGMOID)
UNARY(relu, RELU)
UNARY(softplus, SOFTPLUS)
UNARY(erf, ERF)
UNARY(floor, FLOOR)
UNARY(ceil, CEIL)
UNARY(round, ROUND)

tyto_tensor *tyto_binary(tyto_op op, tyto_tensor *a, tyto_tensor *b) {
  tyto_tensor *in[2] = {a, b}, *err;
  if (op < TYTO_OP_ADD || op > TYTO_OP_GE) {
    tyto_graph *g = graph_check("binary", 2, in, 0, &err);
    return g ? graph_fail(g, "binary: TYTO_OP %d is not a binary op", (int)op)
             : err;
  }
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 2, in, 1, &err);
  if (!g)
    return err;
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  if (shape_broadcast(a->rank, a->shape, b->rank, b->shape, &rank, shape)) {
    char sa[SHAPE_STR], sb[SHAPE_STR];
    return graph_fail(g, "%s: shapes cannot be broadcast: %s and %s", name,
                      tensor_shape_str(sa, a), tensor_shape_str(sb, b));
  }
  return node_new(g, op, a->dtype, rank, shape, 2, in, 0, NULL, 0, NULL);
}

#define BINARY(fn, OP)                                                         \
  tyto_tensor *tyto_##fn(tyto_tensor *a, tyto_tensor *b) {                     \
    return tyto_binary(TYTO_OP_##OP, a, b);                                    \
  }
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(pow, POW)
BINARY(max, MAX)
BINARY(min, MIN)
BINARY(atan2, ATAN2)
BINARY(eq, EQ)
BINARY(ne, NE)
BINARY(lt, LT)
BINARY(le, LE)
BINARY(gt, GT)
BINARY(ge, GE)

tyto_tensor *tyto_binary_scalar(tyto_op op, tyto_tensor *x, double s) {
  return tyto_binary(op, x, tyto_scalar_like(x, s));
}

#define BINARY_SCALAR(fn, OP)                                                  \
  tyto_tensor *tyto_##fn##_scalar(tyto_tensor *x, double s) {                  \
    return tyto_binary_scalar(TYTO_OP_##OP, x, s);                             \
  }
BINARY_SCALAR(add, ADD)
BINARY_SCALAR(sub, SUB)
BINARY_SCALAR(mul, MUL)
BINARY_SCALAR(div, DIV)
BINARY_SCALAR(pow, POW)

static tyto_tensor *ternary(tyto_op op, tyto_tensor *a, tyto_tensor *b,
                            tyto_tensor *c) {
  tyto_tensor *in[3] = {a, b, c}, *err;
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 3, in, 1, &err);
  if (!g)
    return err;
  int r1, r2;
  int64_t s1[TYTO_MAX_RANK], s2[TYTO_MAX_RANK];
  if (shape_broadcast(a->rank, a->shape, b->rank, b->shape, &r1, s1) ||
      shape_broadcast(r1, s1, c->rank, c->shape, &r2, s2)) {
    char sa[SHAPE_STR], sb[SHAPE_STR], sc[SHAPE_STR];
    return graph_fail(g, "%s: shapes cannot be broadcast: %s, %s and %s", name,
                      tensor_shape_str(sa, a), tensor_shape_str(sb, b),
                      tensor_shape_str(sc, c));
  }
  return node_new(g, op, a->dtype, r2, s2, 3, in, 0, NULL, 0, NULL);
}

tyto_tensor *tyto_where(tyto_tensor *cond, tyto_tensor *a, tyto_tensor *b) {
  return ternary(TYTO_OP_WHERE, cond, a, b);
}

tyto_tensor *tyto_fma(tyto_tensor *a, tyto_tensor *b, tyto_tensor *c) {
  return ternary(TYTO_OP_FMA, a, b, c);
}
