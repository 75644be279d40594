/* Losses (softmax cross-entropy, MSE, L1, multi-class hinge), the
 * elastic-net penalty, and the count of correct predictions. */
#include "config.h"

#include <math.h>

#include "../graph/dtype.h"
#include "nn_internal.h"

/* Checks a (prediction, target) pair of op `name`: one graph and dtype,
 * one shape, rank >= min_rank. Their graph, or NULL with *err set. */
static tyto_graph *pair_check(const char *name, tyto_tensor *a, tyto_tensor *b,
                              const char *an, const char *bn, int min_rank,
                              tyto_tensor **err) {
  tyto_tensor *in[2] = {a, b};
  tyto_graph *g = graph_check(name, 2, in, 1, err);
  if (!g)
    return NULL;
  char sa[SHAPE_STR], sb[SHAPE_STR];
  int same = a->rank == b->rank;
  for (int i = 0; same && i < a->rank; i++)
    same = a->shape[i] == b->shape[i];
  if (!same) {
    *err = graph_fail(g, "%s: %s %s and %s %s differ in shape", name, an,
                      tensor_shape_str(sa, a), bn, tensor_shape_str(sb, b));
    return NULL;
  }
  if (a->rank < min_rank) {
    *err = graph_fail(g, "%s: %s must have rank >= %d, got %s", name, an,
                      min_rank, tensor_shape_str(sa, a));
    return NULL;
  }
  return g;
}

tyto_tensor *tyto_loss_softmax_cross_entropy(tyto_tensor *logits,
                                             tyto_tensor *labels) {
  tyto_tensor *err;
  if (!pair_check("softmax_cross_entropy", logits, labels, "logits", "labels",
                  1, &err))
    return err;
  /* -sum(labels log_softmax(logits)) / sum(labels): the mean over the
   * labelled rows; 0 / 1 when none is (the count plus whether it is 0), so
   * that a data-parallel shard of padding alone has a finite loss and a
   * zero gradient (its rows still count in synchronised statistics). */
  tyto_tensor *ll = tyto_mul(labels, tyto_log_softmax(logits, -1));
  tyto_tensor *n = tyto_sum(labels, 0, NULL, 0);
  return tyto_div(tyto_neg(tyto_sum(ll, 0, NULL, 0)),
                  tyto_add(n, tyto_eq(n, tyto_scalar_like(n, 0))));
}

tyto_tensor *tyto_loss_mse(tyto_tensor *pred, tyto_tensor *target) {
  tyto_tensor *err;
  if (!pair_check("mse", pred, target, "pred", "target", 0, &err))
    return err;
  return tyto_mean(tyto_square(tyto_sub(pred, target)), 0, NULL, 0);
}

tyto_tensor *tyto_loss_l1(tyto_tensor *pred, tyto_tensor *target) {
  tyto_tensor *err;
  if (!pair_check("l1", pred, target, "pred", "target", 0, &err))
    return err;
  return tyto_mean(tyto_abs(tyto_sub(pred, target)), 0, NULL, 0);
}

tyto_tensor *tyto_loss_hinge(tyto_tensor *logits, tyto_tensor *labels) {
  tyto_tensor *err;
  if (!pair_check("hinge", logits, labels, "logits", "labels", 1, &err))
    return err;
  /* max(0, 1 - x_y + x_j) over j != y, summed, / C, then the mean over the
   * rows: the mean over every element of the masked margins. */
  tyto_tensor *xy = tyto_sum(tyto_mul(labels, logits), 1, (const int[]){-1}, 1);
  tyto_tensor *margin = tyto_relu(tyto_add_scalar(tyto_sub(logits, xy), 1.0));
  tyto_tensor *others = tyto_sub(tyto_scalar_like(labels, 1.0), labels);
  return tyto_mean(tyto_mul(margin, others), 0, NULL, 0);
}

tyto_tensor *tyto_loss_regularization(size_t n, tyto_tensor *const *ws,
                                      double l1, double l2) {
  tyto_tensor *err;
  if (!n || !ws)
    return NULL;
  tyto_graph *g = graph_check("regularization", n, ws, 1, &err);
  if (!g)
    return err;
  if (!isfinite(l1) || !isfinite(l2))
    return graph_fail(g,
                      "regularization: coefficients l1 %g and l2 %g must "
                      "be finite",
                      l1, l2);
  tyto_tensor *y = NULL;
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *t = NULL;
    if (l1 != 0)
      t = tyto_mul_scalar(tyto_norm_l1(ws[i], 0, NULL, 0), l1);
    if (l2 != 0) {
      tyto_tensor *sq =
          tyto_mul_scalar(tyto_sum(tyto_square(ws[i]), 0, NULL, 0), l2);
      t = t ? tyto_add(t, sq) : sq;
    }
    if (t)
      y = y ? tyto_add(y, t) : t;
  }
  return y ? y : tyto_scalar_like(ws[0], 0.0);
}

tyto_tensor *tyto_nn_count_correct(tyto_tensor *logits, tyto_tensor *labels) {
  tyto_tensor *err;
  if (!pair_check("count_correct", logits, labels, "logits", "labels", 1, &err))
    return err;
  int64_t classes = logits->shape[logits->rank - 1];
  if (classes < 1) {
    char s[SHAPE_STR];
    return graph_fail(tyto_tensor_graph(logits),
                      "count_correct: logits %s have no classes",
                      tensor_shape_str(s, logits));
  }
  /* The index in the logits' dtype where it counts the classes exactly
   * (every device runs it), else in i64. */
  tyto_tensor *pick = tyto_one_hot_as(
      tyto_argmax_as(logits, -1, 0, dtype_index_for(logits->dtype, classes)),
      classes, logits->dtype);
  return tyto_sum(tyto_mul(pick, labels), 0, NULL, 0);
}
