/* tyto_gradcheck: the derivatives of your own graph against central
 * differences. A small softmax classifier's loss, checked with respect to
 * its weights while the data is held fixed. */
#include "example.h"

int main(void) {
  ex_open();
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *w = tyto_input(g, TYTO_F64, 2, (int64_t[]){3, 4}, "w");
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 3}, "x");
  tyto_tensor *labels = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 4}, "y");
  tyto_tensor *logp = tyto_log_softmax(tyto_matmul(x, w, 0, 0), -1);
  tyto_tensor *loss = tyto_neg(tyto_mean(tyto_mul(logp, labels), 0, NULL, 0));

  double wv[12], xv[6], yv[8] = {0, 1, 0, 0, 0, 0, 0, 1};
  for (int i = 0; i < 12; i++)
    wv[i] = sin(i + 1.0);
  for (int i = 0; i < 6; i++)
    xv[i] = cos(2 * i + 1.0);
  const void *values[1] = {wv};
  tyto_tensor *fixed[2] = {x, labels};
  const void *fixed_values[2] = {xv, yv};
  tyto_gradcheck_options o;
  tyto_gradcheck_options_init(&o); /* f64: rtol 1e-6, atol 1e-8 */
  o.n_fixed = 2;
  o.fixed = fixed;
  o.fixed_values = fixed_values;
  tyto_gradcheck_report r;
  if (tyto_gradcheck(ex_ctx, loss, 1, &w, values, &o, &r) != TYTO_OK)
    ex_die("gradcheck", tyto_errmsg());
  printf("%s\n", r.message);
  ex_close(g);
  return !r.passed;
}
