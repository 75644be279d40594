/* tyto_diff: the derivative of a scalar function of a scalar, forward
 * mode. Seed 001's example: y = sin(x0 * x1) at x0 = x1 = 2, where
 * dy/dx0 = x1 cos(x0 x1) = 2 cos 4. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x0 = tyto_scalar(g, TYTO_F64, 2.0);
  tyto_tensor *x1 = tyto_scalar(g, TYTO_F64, 2.0);
  tyto_tensor *y = tyto_sin(tyto_mul(x0, x1));
  tyto_tensor *dy = tyto_diff(y, x0); /* a tensor of the same graph */
  double d;
  ex_eval(dy, &d, 1);
  int bad = ex_expect("diff(sin(x0 x1), x0)", d, 2 * cos(4.0), 1e-15);
  ex_close(g);
  return bad;
}
