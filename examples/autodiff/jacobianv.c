/* tyto_jacobianv: J v in one forward sweep, without forming J. For
 * y = x * sin(x) elementwise, J is diagonal with x cos x + sin x. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[3] = {0.1, 1, 2}, vv[3] = {1, -2, 0.5};
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, xv);
  tyto_tensor *v = tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, vv);
  tyto_tensor *y = tyto_mul(x, tyto_sin(x));
  double jv[3];
  ex_eval(tyto_jacobianv(y, x, v), jv, 3); /* shaped as y */
  int bad = 0;
  for (int i = 0; i < 3; i++)
    bad |= ex_expect("(J v)_i", jv[i],
                     (xv[i] * cos(xv[i]) + sin(xv[i])) * vv[i], 1e-15);
  ex_close(g);
  return bad;
}
