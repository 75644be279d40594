/* tyto_custom_derivative: a derivative rule of one's own. sqrt guarded by
 * where(x > 0, sqrt(x), 0) has a NaN gradient at x = -1 (where() sends 0
 * into sqrt's derivative, 0.5 / sqrt(-1), and 0 * NaN is NaN). A rule
 * that computes sqrt's derivative only where the guard is on makes it 0
 * there, and stays right where x > 0, at every order. */
#include "example.h"

/* 0.5 / sqrt(x) where x > 0, else 0, with no NaN in either branch. */
static tyto_tensor *dsqrt(tyto_tensor *x) {
  tyto_graph *g = tyto_tensor_graph(x);
  tyto_tensor *on = tyto_gt(x, tyto_scalar(g, TYTO_F64, 0));
  tyto_tensor *safe = tyto_where(on, x, tyto_scalar(g, TYTO_F64, 1));
  return tyto_where(on, tyto_mul_scalar(tyto_rsqrt(safe), 0.5),
                    tyto_scalar(g, TYTO_F64, 0));
}

static tyto_tensor *jvp(void *user, size_t n, tyto_tensor *const *xs,
                        tyto_tensor *y, tyto_tensor *const *tangents) {
  (void)user, (void)n, (void)y;
  return tyto_mul(tangents[0], dsqrt(xs[0]));
}

static tyto_tensor *vjp(void *user, size_t i, size_t n, tyto_tensor *const *xs,
                        tyto_tensor *y, tyto_tensor *adjoint) {
  (void)user, (void)i, (void)n, (void)y;
  return tyto_mul(adjoint, dsqrt(xs[0]));
}

static tyto_tensor *guarded_sqrt(tyto_tensor *x) {
  tyto_graph *g = tyto_tensor_graph(x);
  return tyto_where(tyto_gt(x, tyto_scalar(g, TYTO_F64, 0)), tyto_sqrt(x),
                    tyto_scalar(g, TYTO_F64, 0));
}

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  const tyto_custom_rule rule = {"safe_sqrt", jvp, vjp, NULL};
  int bad = 0;
  const double at[2] = {-1, 4};
  for (int k = 0; k < 2; k++) {
    tyto_tensor *x = tyto_scalar(g, TYTO_F64, at[k]);
    tyto_tensor *y = tyto_custom_derivative(guarded_sqrt(x), 1, &x, &rule);
    double plain, d1, d2;
    ex_eval(tyto_grad(guarded_sqrt(x), x), &plain, 1);
    ex_eval(tyto_grad(y, x), &d1, 1);
    ex_eval(tyto_diff(tyto_grad(y, x), x), &d2, 1);
    printf("x = %g: plain gradient %g, with the rule %g, second "
           "derivative %g\n",
           at[k], plain, d1, d2);
    bad |= ex_expect("gradient", d1, at[k] > 0 ? 0.25 : 0, 1e-15);
    bad |= ex_expect("second derivative", d2, at[k] > 0 ? -1.0 / 32 : 0, 1e-15);
  }
  ex_close(g);
  return bad;
}
