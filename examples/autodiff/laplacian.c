/* tyto_laplacian: the trace of the Hessian. For f(x) = sum(sin x) it is
 * -sum(sin x). */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[4] = {0.3, -1, 2, 0.7}, want = 0;
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){4}, xv);
  tyto_tensor *f = tyto_sum(tyto_sin(x), 0, NULL, 0);
  double lap;
  ex_eval(tyto_laplacian(f, x), &lap, 1);
  for (int i = 0; i < 4; i++)
    want -= sin(xv[i]);
  int bad = ex_expect("laplacian(sum(sin x))", lap, want, 1e-14);
  ex_close(g);
  return bad;
}
