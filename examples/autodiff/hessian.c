/* tyto_hessian: the Hessian of a scalar function, forward over reverse.
 * Rosenbrock's function of two variables at (1, 1), its minimum, where
 * H = [[802, -400], [-400, 200]]. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[2] = {1, 1};
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){2}, xv);
  tyto_tensor *a = tyto_slice_axis(x, 0, 0, 1, 1);
  tyto_tensor *b = tyto_slice_axis(x, 0, 1, 2, 1);
  tyto_tensor *f = tyto_sum(
      tyto_add(tyto_square(tyto_sub(tyto_scalar(g, TYTO_F64, 1), a)),
               tyto_mul_scalar(tyto_square(tyto_sub(b, tyto_square(a))), 100)),
      0, NULL, 0);
  double h[4], want[4] = {802, -400, -400, 200};
  ex_eval(tyto_hessian(f, x), h, 4);
  int bad = 0;
  for (int i = 0; i < 4; i++)
    bad |= ex_expect("H[i][j]", h[i], want[i], 1e-13);
  ex_close(g);
  return bad;
}
