/* tyto_grads: gradients with respect to several tensors in one reverse
 * sweep; here the weights and bias of a linear model's squared error. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[2] = {1, 2}, wv[2] = {0.5, -1}, bv = 0.25, target = 1;
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){2}, xv);
  tyto_tensor *w = tyto_constant(g, TYTO_F64, 1, (int64_t[]){2}, wv);
  tyto_tensor *b = tyto_scalar(g, TYTO_F64, bv);
  tyto_tensor *pred = tyto_add(tyto_dot(w, x), b);
  tyto_tensor *loss = tyto_square(tyto_sub_scalar(pred, target));
  tyto_tensor *params[2] = {w, b}, *dparams[2];
  tyto_grads(loss, 2, params, dparams);
  double dw[2], db, r = wv[0] * xv[0] + wv[1] * xv[1] + bv - target;
  ex_eval(dparams[0], dw, 2);
  ex_eval(dparams[1], &db, 1);
  int bad = ex_expect("dloss/dw0", dw[0], 2 * r * xv[0], 1e-15);
  bad |= ex_expect("dloss/dw1", dw[1], 2 * r * xv[1], 1e-15);
  bad |= ex_expect("dloss/db", db, 2 * r, 1e-15);
  ex_close(g);
  return bad;
}
