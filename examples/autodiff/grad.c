/* tyto_grad: the gradient of a scalar function, reverse mode.
 * f(x) = sum(x^2 exp(-x)), f'(x)_i = (2 x_i - x_i^2) exp(-x_i). */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[3] = {-1, 0.5, 2};
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, xv);
  tyto_tensor *f =
      tyto_sum(tyto_mul(tyto_square(x), tyto_exp(tyto_neg(x))), 0, NULL, 0);
  tyto_tensor *df = tyto_grad(f, x); /* shaped as x: [3] */
  double d[3];
  ex_eval(df, d, 3);
  int bad = 0;
  for (int i = 0; i < 3; i++)
    bad |= ex_expect("grad(f, x)_i", d[i],
                     (2 * xv[i] - xv[i] * xv[i]) * exp(-xv[i]), 1e-14);
  ex_close(g);
  return bad;
}
