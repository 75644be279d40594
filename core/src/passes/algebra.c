/*
 * Algebraic identities (seeds 002/004: Owl's rewriting patterns):
 *
 *   x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1  ->  x
 *   0 - x -> -x        x * 0, 0 * x -> zeros of the broadcast shape
 *   -(-x) -> x         x + (-y) -> x - y        x - (-y) -> x + y
 *   permute(permute(x)) -> one permute, or x when it is the identity
 *   reshape(reshape(x)) -> one reshape; a reshape or broadcast_to to x's
 *   own shape -> x;    broadcast_to(broadcast_to(x)) -> one broadcast_to
 *   matmul(transpose of the last two axes of a, b) -> matmul(a, b) with
 *   the transpose flag flipped (the same for b)
 *   an elementwise op reading broadcast_to(x) -> reading x, when its own
 *   broadcasting gives the same shape; a tile that only repeats extent-1
 *   axes -> broadcast_to (and then the rule before applies)
 *   cast(cast(x, w), d) -> cast(x, d) when w holds every value of x's
 *   dtype exactly (f16 or bf16 in f32 or f64, f32 in f64), and so
 *   cast(cast(x, w), x's dtype) -> x; never when the inner cast rounds
 *   (f64 -> f32 -> bf16 rounds twice, which f64 -> bf16 does not)
 *   stop_gradient(x), custom_derivative(x, ...) -> x (AD is done); not
 *   replica_sum(x), which is x only outside data-parallel training
 *
 * "0" and "1" are FULLs or CONSTANTs of that one value. Where the result
 * would be smaller than the op's (x + 0 with a 0 of a larger shape), x is
 * broadcast to the op's shape. x * 0 -> 0 does not keep NaN * 0 = NaN:
 * the pass follows algebra, as the seeds' patterns do, not IEEE.
 */
#include "config.h"

#include <string.h>

#include "passes.h"
#include "../graph/dtype.h"

static int is_value(const tyto_tensor *x, double v) {
  double u;
  return pass_uniform_value(x, &u) && u == v;
}

static int same_shape(const tyto_tensor *a, const tyto_tensor *b) {
  return a->rank == b->rank &&
         memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) == 0;
}

/* x seen with t's shape (x broadcasts to it: it is one of t's operands). */
static tyto_tensor *as_shape_of(tyto_tensor *x, const tyto_tensor *t) {
  return same_shape(x, t) ? x : tyto_broadcast_to(x, t->rank, t->shape);
}

/* Whether NumPy broadcasting of the n shapes gives exactly t's shape. */
static int broadcasts_to(size_t n, tyto_tensor *const *xs,
                         const tyto_tensor *t) {
  for (int d = 1; d <= t->rank; d++) {
    int64_t e = 1;
    for (size_t k = 0; k < n; k++) {
      if (xs[k]->rank < d)
        continue;
      int64_t x = xs[k]->shape[xs[k]->rank - d];
      if (x != 1) {
        if (e != 1 && e != x)
          return 0;
        e = x;
      }
    }
    if (e != t->shape[t->rank - d])
      return 0;
  }
  for (size_t k = 0; k < n; k++)
    if (xs[k]->rank > t->rank)
      return 0;
  return 1;
}

/* A PERMUTE that swaps the last two axes and keeps the others. */
static int is_matrix_transpose(const tyto_tensor *p) {
  if (p->op != TYTO_OP_PERMUTE || p->rank < 2)
    return 0;
  for (int i = 0; i < p->rank - 2; i++)
    if (p->iattrs[i] != i)
      return 0;
  return p->iattrs[p->rank - 2] == p->rank - 1 &&
         p->iattrs[p->rank - 1] == p->rank - 2;
}

static tyto_tensor *permute_rule(const tyto_tensor *t, tyto_tensor *x) {
  int perm[TYTO_MAX_RANK], identity = 1;
  tyto_tensor *src = x;
  for (int i = 0; i < t->rank; i++)
    perm[i] = (int)t->iattrs[i];
  if (x->op == TYTO_OP_PERMUTE) {
    /* Output axis i of t is x's axis perm[i], which is src's axis
     * x->iattrs[perm[i]]. */
    src = x->inputs[0];
    for (int i = 0; i < t->rank; i++)
      perm[i] = (int)x->iattrs[perm[i]];
  }
  for (int i = 0; i < t->rank; i++)
    identity &= perm[i] == i;
  if (identity)
    return src;
  return src == x ? NULL : tyto_permute(src, t->rank, perm);
}

static tyto_tensor *algebra_rule(void *ctx, const tyto_tensor *t,
                                 tyto_tensor **in, tyto_graph *g,
                                 long *changed) {
  (void)ctx;
  (void)g;
  tyto_tensor *r = NULL;
  switch (t->op) {
  case TYTO_OP_ADD:
    if (is_value(in[1], 0))
      r = as_shape_of(in[0], t);
    else if (is_value(in[0], 0))
      r = as_shape_of(in[1], t);
    else if (in[1]->op == TYTO_OP_NEG)
      r = tyto_sub(in[0], in[1]->inputs[0]);
    else if (in[0]->op == TYTO_OP_NEG)
      r = tyto_sub(in[1], in[0]->inputs[0]);
    break;
  case TYTO_OP_SUB:
    if (is_value(in[1], 0))
      r = as_shape_of(in[0], t);
    else if (is_value(in[0], 0))
      r = tyto_neg(as_shape_of(in[1], t));
    else if (in[1]->op == TYTO_OP_NEG)
      r = tyto_add(in[0], in[1]->inputs[0]);
    break;
  case TYTO_OP_MUL:
    if (is_value(in[0], 0) || is_value(in[1], 0))
      r = tyto_full(g, t->dtype, t->rank, t->shape, 0.0);
    else if (is_value(in[1], 1))
      r = as_shape_of(in[0], t);
    else if (is_value(in[0], 1))
      r = as_shape_of(in[1], t);
    break;
  case TYTO_OP_DIV:
    if (is_value(in[1], 1))
      r = as_shape_of(in[0], t);
    break;
  case TYTO_OP_NEG:
    if (in[0]->op == TYTO_OP_NEG)
      r = in[0]->inputs[0];
    break;
  case TYTO_OP_CAST:
    /* The inner cast changes no value: one rounding, x's to t's dtype,
     * is all the pair does (none when that is x's own dtype). */
    if (in[0]->op == TYTO_OP_CAST &&
        dtype_holds(in[0]->dtype, in[0]->inputs[0]->dtype))
      r = tyto_cast(in[0]->inputs[0], t->dtype);
    break;
  case TYTO_OP_PERMUTE: r = permute_rule(t, in[0]); break;
  case TYTO_OP_STOP_GRADIENT: /* AD is done by now: the value alone */
  case TYTO_OP_CUSTOM_DERIVATIVE: r = in[0]; break;
  /* Not x, unlike the two above: it stays until lowering, where a
   * data-parallel replica exchanges it (one device: a view of x). */
  case TYTO_OP_REPLICA_SUM: break;
  case TYTO_OP_RESHAPE:
    if (same_shape(in[0], t))
      r = in[0];
    else if (in[0]->op == TYTO_OP_RESHAPE)
      r = same_shape(in[0]->inputs[0], t)
              ? in[0]->inputs[0]
              : tyto_reshape(in[0]->inputs[0], t->rank, t->shape);
    break;
  case TYTO_OP_BROADCAST_TO:
    if (same_shape(in[0], t))
      r = in[0];
    else if (in[0]->op == TYTO_OP_BROADCAST_TO)
      r = tyto_broadcast_to(in[0]->inputs[0], t->rank, t->shape);
    break;
  case TYTO_OP_TILE: {
    /* The input, given leading 1-extents, repeats only extent-1 axes. */
    int lead = t->rank - in[0]->rank, bcast = 1;
    for (int i = 0; i < t->rank && bcast; i++)
      bcast = t->iattrs[i] == 1 || i < lead || in[0]->shape[i - lead] == 1;
    if (bcast)
      r = tyto_broadcast_to(in[0], t->rank, t->shape);
    break;
  }
  case TYTO_OP_MATMUL:
    if (is_matrix_transpose(in[0]))
      r = tyto_matmul(in[0]->inputs[0], in[1], !t->iattrs[0],
                      (int)t->iattrs[1]);
    else if (is_matrix_transpose(in[1]))
      r = tyto_matmul(in[0], in[1]->inputs[0], (int)t->iattrs[0],
                      !t->iattrs[1]);
    break;
  default: break;
  }
  if (!r && pass_is_elementwise(t->op) && t->n_inputs >= 2) {
    /* Drop broadcast_to operands the op's own broadcasting makes
     * redundant, one at a time (each must keep the result's shape). */
    tyto_tensor *ops[3] = {in[0], in[1], t->n_inputs > 2 ? in[2] : NULL};
    int dropped = 0;
    for (size_t k = 0; k < t->n_inputs; k++) {
      if (ops[k]->op != TYTO_OP_BROADCAST_TO)
        continue;
      tyto_tensor *keep = ops[k];
      ops[k] = keep->inputs[0];
      if (broadcasts_to(t->n_inputs, ops, t))
        dropped = 1;
      else
        ops[k] = keep;
    }
    if (dropped) {
      if (t->n_inputs == 3)
        r = t->op == TYTO_OP_WHERE ? tyto_where(ops[0], ops[1], ops[2])
                                   : tyto_fma(ops[0], ops[1], ops[2]);
      else
        r = tyto_binary(t->op, ops[0], ops[1]);
    }
  }
  if (r)
    (*changed)++;
  return r;
}

long pass_algebra(const pass_graph *in, pass_graph *out, tyto_tensor **map,
                  const pass_options *opt, char *msg, size_t msg_size) {
  (void)opt;
  return pass_rewrite(in, out, map, algebra_rule, NULL, "algebra", msg,
                      msg_size);
}
