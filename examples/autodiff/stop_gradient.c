/* tyto_stop_gradient: a value that AD treats as a constant, at every
 * order. A straight-through estimator: y = x + stop_gradient(round(x) - x)
 * has round(x)'s value and the identity's derivative, so a loss through a
 * rounding step still trains x. And x^2 * stop_gradient(x) has value x^3
 * but first derivative 2 x^2 (x^2 times the constant x) and second 2 x. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_scalar(g, TYTO_F64, 1.3);
  tyto_tensor *y = tyto_add(x, tyto_stop_gradient(tyto_sub(tyto_round(x), x)));
  double v, d;
  ex_eval(y, &v, 1);
  ex_eval(tyto_grad(y, x), &d, 1);
  int bad = ex_expect("round(1.3)", v, 1.0, 0);
  bad |= ex_expect("d/dx, straight through", d, 1.0, 0);
  tyto_tensor *f = tyto_mul(tyto_square(x), tyto_stop_gradient(x));
  double f1, f2;
  ex_eval(tyto_grad(f, x), &f1, 1);
  ex_eval(tyto_diff(tyto_grad(f, x), x), &f2, 1);
  bad |= ex_expect("f'(1.3) = 2 x^2", f1, 2 * 1.3 * 1.3, 1e-15);
  bad |= ex_expect("f''(1.3) = 2 x", f2, 2 * 1.3, 1e-15);
  ex_close(g);
  return bad;
}
