/* Matrix products and linear algebra on the last two axes. */
#include "node.h"
#include "shape.h"

#include <string.h>

/* "[784,64]^T" for a transposed operand. */
static char *operand_str(char *buf, const tyto_tensor *t, int transposed) {
  tensor_shape_str(buf, t);
  if (transposed)
    strcat(buf, "^T");
  return buf;
}

tyto_tensor *tyto_matmul(tyto_tensor *a, tyto_tensor *b, int transpose_a,
                         int transpose_b) {
  tyto_tensor *in[2] = {a, b}, *err;
  tyto_graph *g = graph_check("matmul", 2, in, 1, &err);
  if (!g)
    return err;
  char sa[SHAPE_STR], sb[SHAPE_STR];
  operand_str(sa, a, transpose_a);
  operand_str(sb, b, transpose_b);
  if (a->rank < 2 || b->rank < 2)
    return graph_fail(g, "matmul: operands need rank >= 2: %s x %s", sa, sb);
  int64_t m = a->shape[a->rank - (transpose_a ? 1 : 2)];
  int64_t ka = a->shape[a->rank - (transpose_a ? 2 : 1)];
  int64_t kb = b->shape[b->rank - (transpose_b ? 1 : 2)];
  int64_t n = b->shape[b->rank - (transpose_b ? 2 : 1)];
  if (ka != kb)
    return graph_fail(g, "matmul: inner dimensions differ: %s x %s", sa, sb);
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  if (shape_broadcast(a->rank - 2, a->shape, b->rank - 2, b->shape, &rank,
                      shape))
    return graph_fail(
        g, "matmul: batch dimensions cannot be broadcast: %s x %s", sa, sb);
  shape[rank++] = m;
  shape[rank++] = n;
  int64_t iattrs[2] = {transpose_a ? 1 : 0, transpose_b ? 1 : 0};
  return node_new(g, TYTO_OP_MATMUL, a->dtype, rank, shape, 2, in, 2, iattrs, 0,
                  NULL);
}

tyto_tensor *tyto_dot(tyto_tensor *a, tyto_tensor *b) {
  tyto_tensor *in[2] = {a, b}, *err;
  tyto_graph *g = graph_check("dot", 2, in, 1, &err);
  if (!g)
    return err;
  if (a->rank != 1 || b->rank != 1 || a->shape[0] != b->shape[0]) {
    char sa[SHAPE_STR], sb[SHAPE_STR];
    return graph_fail(g, "dot: needs two vectors of one length: %s . %s",
                      tensor_shape_str(sa, a), tensor_shape_str(sb, b));
  }
  int64_t row[2] = {1, a->shape[0]};
  tyto_tensor *p =
      tyto_matmul(tyto_reshape(a, 2, row), tyto_reshape(b, 2, row), 0, 1);
  return tyto_reshape(p, 0, NULL);
}

tyto_tensor *tyto_outer(tyto_tensor *a, tyto_tensor *b) {
  tyto_tensor *in[2] = {a, b}, *err;
  tyto_graph *g = graph_check("outer", 2, in, 1, &err);
  if (!g)
    return err;
  if (a->rank != 1 || b->rank != 1) {
    char sa[SHAPE_STR], sb[SHAPE_STR];
    return graph_fail(g, "outer: needs two vectors: %s and %s",
                      tensor_shape_str(sa, a), tensor_shape_str(sb, b));
  }
  int64_t col[2] = {a->shape[0], 1}, row[2] = {1, b->shape[0]};
  return tyto_mul(tyto_reshape(a, 2, col), tyto_reshape(b, 2, row));
}

/* Checks a batch of square matrices for op `name`. */
static tyto_graph *square_check(const char *name, tyto_tensor *a,
                                tyto_tensor **err) {
  tyto_graph *g = graph_check(name, 1, &a, 1, err);
  if (g && (a->rank < 2 || a->shape[a->rank - 1] != a->shape[a->rank - 2])) {
    char s[SHAPE_STR];
    *err = graph_fail(g, "%s: needs square matrices [..., n, n], got %s", name,
                      tensor_shape_str(s, a));
    return NULL;
  }
  return g;
}

static tyto_tensor *square_op(tyto_op op, tyto_tensor *a, int drop) {
  tyto_tensor *err;
  tyto_graph *g = square_check(tyto_op_name(op), a, &err);
  if (!g)
    return err;
  return node_new(g, op, a->dtype, a->rank - (drop ? 2 : 0), a->shape, 1, &a, 0,
                  NULL, 0, NULL);
}

tyto_tensor *tyto_inv(tyto_tensor *a) {
  return square_op(TYTO_OP_INV, a, 0);
}

tyto_tensor *tyto_det(tyto_tensor *a) {
  return square_op(TYTO_OP_DET, a, 1);
}

tyto_tensor *tyto_logdet(tyto_tensor *a) {
  return square_op(TYTO_OP_LOGDET, a, 1);
}

tyto_tensor *tyto_cholesky(tyto_tensor *a) {
  return square_op(TYTO_OP_CHOLESKY, a, 0);
}

tyto_tensor *tyto_solve(tyto_tensor *a, tyto_tensor *b) {
  tyto_tensor *in[2] = {a, b}, *err;
  tyto_graph *g = graph_check("solve", 2, in, 1, &err);
  if (!g)
    return err;
  if (!square_check("solve", a, &err))
    return err;
  char sa[SHAPE_STR], sb[SHAPE_STR];
  tensor_shape_str(sa, a);
  tensor_shape_str(sb, b);
  if (b->rank < 2)
    return graph_fail(g, "solve: B needs rank >= 2 [..., n, k], got %s", sb);
  if (b->shape[b->rank - 2] != a->shape[a->rank - 1])
    return graph_fail(g, "solve: rows differ: %s and %s", sa, sb);
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  if (shape_broadcast(a->rank - 2, a->shape, b->rank - 2, b->shape, &rank,
                      shape))
    return graph_fail(g,
                      "solve: batch dimensions cannot be broadcast: %s "
                      "and %s",
                      sa, sb);
  shape[rank++] = b->shape[b->rank - 2];
  shape[rank++] = b->shape[b->rank - 1];
  return node_new(g, TYTO_OP_SOLVE, a->dtype, rank, shape, 2, in, 0, NULL, 0,
                  NULL);
}

tyto_tensor *tyto_triangular_solve(tyto_tensor *a, tyto_tensor *b, int lower,
                                   int transpose, int unit_diagonal) {
  static const char name[] = "triangular_solve";
  tyto_tensor *in[2] = {a, b}, *err;
  tyto_graph *g = graph_check(name, 2, in, 1, &err);
  if (!g)
    return err;
  if (!square_check(name, a, &err))
    return err;
  char sa[SHAPE_STR], sb[SHAPE_STR];
  tensor_shape_str(sa, a);
  tensor_shape_str(sb, b);
  if (b->rank < 2)
    return graph_fail(g, "%s: B needs rank >= 2 [..., n, k], got %s", name, sb);
  if (b->shape[b->rank - 2] != a->shape[a->rank - 1])
    return graph_fail(g, "%s: rows differ: %s and %s", name, sa, sb);
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  if (shape_broadcast(a->rank - 2, a->shape, b->rank - 2, b->shape, &rank,
                      shape))
    return graph_fail(g, "%s: batch dimensions cannot be broadcast: %s and %s",
                      name, sa, sb);
  shape[rank++] = b->shape[b->rank - 2];
  shape[rank++] = b->shape[b->rank - 1];
  int64_t iattrs[3] = {lower ? 1 : 0, transpose ? 1 : 0, unit_diagonal ? 1 : 0};
  return node_new(g, TYTO_OP_TRIANGULAR_SOLVE, a->dtype, rank, shape, 2, in, 3,
                  iattrs, 0, NULL);
}

void tyto_qr(tyto_tensor *a, tyto_tensor **q, tyto_tensor **r) {
  tyto_tensor *err, *tq, *tr;
  tyto_graph *g = graph_check("qr", 1, &a, 1, &err);
  if (g && a->rank < 2) {
    char s[SHAPE_STR];
    err = graph_fail(g, "qr: needs matrices [..., m, n], got %s",
                     tensor_shape_str(s, a));
    g = NULL;
  }
  if (!g) {
    tq = tr = err;
  } else {
    int64_t m = a->shape[a->rank - 2], n = a->shape[a->rank - 1];
    int64_t k = m < n ? m : n, shape[TYTO_MAX_RANK];
    int64_t which[2] = {0, 1};
    memcpy(shape, a->shape, (size_t)a->rank * sizeof *shape);
    shape[a->rank - 1] = k;
    tq = node_new(g, TYTO_OP_QR, a->dtype, a->rank, shape, 1, &a, 1, &which[0],
                  0, NULL);
    shape[a->rank - 2] = k;
    shape[a->rank - 1] = n;
    tr = node_new(g, TYTO_OP_QR, a->dtype, a->rank, shape, 1, &a, 1, &which[1],
                  0, NULL);
    if (tq->kind == TYTO_KIND_ERROR || tr->kind == TYTO_KIND_ERROR)
      tq = tr = &g->error;
  }
  if (q)
    *q = tq;
  if (r)
    *r = tr;
}
