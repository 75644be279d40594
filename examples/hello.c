/*
 * hello: the computation graph of Owl's computation-graph chapter, built,
 * compiled once for the selected device and run with new inputs.
 *
 *   f(x, y) = sum((x * sin(x + x) + sqrt(x) / 7) * relu(y))
 *
 * With x = ones[2,2] it prints 4*(sin 2 + 1/7)*relu(y) for y = 1, 2, 3
 * (4.2086..., twice that, three times that) with df/dy, built by reverse-mode
 * AD into the same graph and computed by the same program (4.2086... for
 * every y > 0), then the graph in Graphviz dot.
 */
#include <math.h>
#include <stdio.h>

#include <tyto/tyto.h>

int main(void) {
  tyto_context *ctx;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "hello: %s\n", tyto_errmsg());
    return 1;
  }
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 2}, "x");
  tyto_tensor *y = tyto_input(g, TYTO_F64, 0, NULL, "y");
  tyto_tensor *f =
      tyto_sum(tyto_mul(tyto_add(tyto_mul(x, tyto_sin(tyto_add(x, x))),
                                 tyto_div_scalar(tyto_sqrt(x), 7)),
                        tyto_relu(y)),
               0, NULL, 0);
  /* Sticky errors: one check after building the whole expression. */
  if (tyto_graph_status(g) != TYTO_OK) {
    fprintf(stderr, "hello: %s\n", tyto_graph_error_message(g));
    return 1;
  }

  /* df/dy: more tensors of the same graph, compiled with f. */
  tyto_tensor *outs[2] = {f, tyto_grad(f, y)};
  tyto_program *p;
  if (tyto_program_compile(ctx, g, 2, outs, NULL, &p) != TYTO_OK) {
    fprintf(stderr, "hello: %s\n", tyto_errmsg());
    return 1;
  }
  double ones[4] = {1, 1, 1, 1}, value, dfdy;
  tyto_program_set_input(p, x, ones, sizeof ones);
  int bad = 0;
  for (double yv = 1; yv <= 3; yv++) {
    tyto_program_set_input(p, y, &yv, sizeof yv);
    if (tyto_program_run(p) != TYTO_OK ||
        tyto_program_read_output(p, 0, &value, sizeof value) != TYTO_OK ||
        tyto_program_read_output(p, 1, &dfdy, sizeof dfdy) != TYTO_OK) {
      fprintf(stderr, "hello: %s\n", tyto_errmsg());
      return 1;
    }
    double expect = 4 * (sin(2.0) + 1.0 / 7) * yv;
    printf("f(ones[2,2], %g) = %.17g   df/dy = %.17g\n", yv, value, dfdy);
    bad |= fabs(value - expect) > 1e-12 * expect;
    bad |= fabs(dfdy - expect / yv) > 1e-12 * expect;
  }
  tyto_graph_write_dot(g, stdout, 2, outs);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
  return bad;
}
