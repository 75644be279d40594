/* tyto_hessianv: H v without forming H (one reverse and one forward
 * sweep). For f(x) = sum(x^4) / 4, H = diag(3 x^2). */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double xv[3] = {1, -2, 0.5}, vv[3] = {1, 1, 2};
  tyto_tensor *x = tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, xv);
  tyto_tensor *v = tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, vv);
  tyto_tensor *f =
      tyto_div_scalar(tyto_sum(tyto_pow_scalar(x, 4), 0, NULL, 0), 4);
  double hv[3];
  ex_eval(tyto_hessianv(f, x, v), hv, 3);
  int bad = 0;
  for (int i = 0; i < 3; i++)
    bad |= ex_expect("(H v)_i", hv[i], 3 * xv[i] * xv[i] * vv[i], 1e-14);
  ex_close(g);
  return bad;
}
