/* tyto_jacobianTv: J^T v in one reverse sweep. For y = A x (A 2x3),
 * J = A and J^T v = A^T v. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double av[6] = {1, 2, 3, 4, 5, 6}, xv[3] = {1, 0, -1}, vv[2] = {1, -1};
  tyto_tensor *a = tyto_constant(g, TYTO_F64, 2, (int64_t[]){2, 3}, av);
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 2, (int64_t[]){3, 1}, xv);
  tyto_tensor *v = tyto_constant(g, TYTO_F64, 2, (int64_t[]){2, 1}, vv);
  tyto_tensor *y = tyto_matmul(a, x, 0, 0);
  double jtv[3];
  ex_eval(tyto_jacobianTv(y, x, v), jtv, 3); /* shaped as x */
  int bad = 0;
  for (int j = 0; j < 3; j++)
    bad |= ex_expect("(J^T v)_j", jtv[j], av[j] * vv[0] + av[3 + j] * vv[1],
                     1e-15);
  ex_close(g);
  return bad;
}
