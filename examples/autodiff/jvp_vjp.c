/* tyto_jvp and tyto_vjp: several tangents pushed to several outputs in
 * one forward sweep, and several adjoints pulled back in one reverse
 * sweep. Outputs u = a b and w = a + sin b of scalars a, b. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_scalar(g, TYTO_F64, 3),
              *b = tyto_scalar(g, TYTO_F64, 1);
  tyto_tensor *xs[2] = {a, b};
  tyto_tensor *ys[2] = {tyto_mul(a, b), tyto_add(a, tyto_sin(b))};
  /* Tangent (da, db) = (1, 2): du = b + 2a, dw = 1 + 2 cos b. */
  tyto_tensor *tangents[2] = {tyto_scalar(g, TYTO_F64, 1),
                              tyto_scalar(g, TYTO_F64, 2)};
  tyto_tensor *dys[2];
  tyto_jvp(2, xs, tangents, 2, ys, dys);
  /* Adjoint (u_bar, w_bar) = (1, -1): a_bar = b - 1, b_bar = a - cos b. */
  tyto_tensor *adjoints[2] = {tyto_scalar(g, TYTO_F64, 1),
                              tyto_scalar(g, TYTO_F64, -1)};
  tyto_tensor *dxs[2];
  tyto_vjp(2, ys, adjoints, 2, xs, dxs);
  double du, dw, da, db;
  ex_eval(dys[0], &du, 1);
  ex_eval(dys[1], &dw, 1);
  ex_eval(dxs[0], &da, 1);
  ex_eval(dxs[1], &db, 1);
  int bad = ex_expect("du", du, 1 + 2 * 3, 1e-15);
  bad |= ex_expect("dw", dw, 1 + 2 * cos(1.0), 1e-15);
  bad |= ex_expect("a_bar", da, 1 - 1, 1e-15);
  bad |= ex_expect("b_bar", db, 3 - cos(1.0), 1e-15);
  ex_close(g);
  return bad;
}
