/* Batched derivatives: the second derivative of f(x) = x^3 - 2x at 1000
 * points in two sweeps (tyto_hessian_batched), the same by nesting
 * tyto_diff_elementwise, and every row's Jacobian of a row-by-row map in
 * one sweep per input of a row (tyto_jacobian_batched). */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[1000];
  for (int i = 0; i < 1000; i++)
    xv[i] = i / 500.0 - 1.0;
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){1000}, xv);
  tyto_tensor *f =
      tyto_sub(tyto_mul(tyto_square(x), x), tyto_mul_scalar(x, 2.0));
  static double h[1000], d2[1000];
  ex_eval(tyto_hessian_batched(f, x), h, 1000); /* [1000, 1, 1] */
  ex_eval(tyto_diff_elementwise(tyto_diff_elementwise(f, x), x), d2, 1000);
  int bad = ex_expect("f''(x_0) = 6 x_0", h[0], 6 * xv[0], 1e-13);
  bad |= ex_expect("f''(x_999) = 6 x_999", h[999], 6 * xv[999], 1e-13);
  bad |= ex_expect("nested diff_elementwise", d2[999], 6 * xv[999], 1e-13);
  /* Rows of a 3 x 2 batch, y = [x0 * x1, x0 + x1] row by row: each row's
   * Jacobian is [[x1, x0], [1, 1]]. */
  double pv[6] = {1, 2, 3, 4, 5, 6}, j[12];
  tyto_tensor *p = tyto_constant(g, TYTO_F64, 2, (int64_t[]){3, 2}, pv);
  int ax = 1;
  tyto_tensor *prod = tyto_prod(p, 1, &ax, 1), *sum = tyto_sum(p, 1, &ax, 1);
  tyto_tensor *two[2] = {prod, sum};
  tyto_tensor *y = tyto_concat(2, two, 1);
  ex_eval(tyto_jacobian_batched(y, p), j, 12); /* [3, 2, 2] */
  bad |= ex_expect("row 2: dy0/dx0 = x1", j[8], 6, 1e-15);
  bad |= ex_expect("row 2: dy0/dx1 = x0", j[9], 5, 1e-15);
  bad |= ex_expect("row 2: dy1/dx0 = 1", j[10], 1, 1e-15);
  ex_close(g);
  return bad;
}
