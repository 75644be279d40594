/* tyto_jacobian: the whole Jacobian [numel(y), numel(x)], in the mode
 * with fewer sweeps (forward here: 2 inputs, 3 outputs), and
 * tyto_jacobian_in_mode: the same in the mode you ask for. Polar to
 * Cartesian with a third output: (r cos t, r sin t, r). */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  double pv[2] = {2, 0.5};
  tyto_tensor *p = tyto_constant(g, TYTO_F64, 1, (int64_t[]){2}, pv);
  tyto_tensor *r = tyto_slice_axis(p, 0, 0, 1, 1);
  tyto_tensor *t = tyto_slice_axis(p, 0, 1, 2, 1);
  tyto_tensor *parts[3] = {tyto_mul(r, tyto_cos(t)), tyto_mul(r, tyto_sin(t)),
                           r};
  tyto_tensor *y = tyto_concat(3, parts, 0);
  printf("mode: %s\n",
         tyto_jacobian_mode(y, p) == TYTO_AD_FORWARD ? "forward" : "reverse");
  double j[6], jr[6];
  ex_eval(tyto_jacobian(y, p), j, 6);
  /* Three reverse sweeps instead of two forward ones: the same matrix. */
  ex_eval(tyto_jacobian_in_mode(y, p, TYTO_AD_REVERSE), jr, 6);
  double want[6] = {
      cos(pv[1]), -pv[0] * sin(pv[1]), sin(pv[1]), pv[0] * cos(pv[1]), 1, 0};
  int bad = tyto_jacobian_mode(y, p) != TYTO_AD_FORWARD;
  for (int i = 0; i < 6; i++) {
    bad |= ex_expect("J[i][j]", j[i], want[i], 1e-15);
    bad |= ex_expect("J[i][j], reverse mode", jr[i], want[i], 1e-15);
  }
  ex_close(g);
  return bad;
}
