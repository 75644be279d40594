/*
 * newton: Newton's method with derivatives from tyto's AD, after seed 001
 * (Owl's Algodiff chapter), on f(x) = sum(cos x) from a random start.
 *
 * One program computes the gradient g, the Newton step H^{-1} g (the
 * Hessian forward over reverse, then a linear solve) and |g|; the loop
 * runs it with the new x until |g| < 1e-6. Owl damps the step with
 * eta = 0.01; the full step (eta = 1) converges quadratically.
 *
 *   newton [seed [eta]]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tyto/tyto.h>

enum { N = 4 };

static int fail(const char *what) {
  fprintf(stderr, "newton: %s: %s\n", what, tyto_errmsg());
  return 1;
}

int main(int argc, char **argv) {
  unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 42;
  double eta = argc > 2 ? strtod(argv[2], NULL) : 1.0;
  tyto_context *ctx;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK)
    return fail("context");

  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, (int64_t[]){N}, "x");
  tyto_tensor *f = tyto_sum(tyto_cos(x), 0, NULL, 0);
  tyto_tensor *grad = tyto_grad(f, x);
  tyto_tensor *hess = tyto_hessian(f, x);
  tyto_tensor *step =
      tyto_solve(hess, tyto_reshape(grad, 2, (int64_t[]){N, 1}));
  tyto_tensor *outs[3] = {f, tyto_norm_l2(grad, 0, NULL, 0), step};
  if (tyto_graph_status(g) != TYTO_OK) {
    fprintf(stderr, "newton: %s\n", tyto_graph_error_message(g));
    return 1;
  }
  tyto_program *p;
  if (tyto_program_compile(ctx, g, 3, outs, NULL, &p) != TYTO_OK)
    return fail("compile");

  srand(seed);
  double xv[N], fv, norm = INFINITY, sv[N];
  for (int i = 0; i < N; i++)
    xv[i] = 6.0 * rand() / RAND_MAX - 3.0;
  int it;
  for (it = 0; it < 1000; it++) {
    if (tyto_program_set_input(p, x, xv, sizeof xv) != TYTO_OK ||
        tyto_program_run(p) != TYTO_OK ||
        tyto_program_read_output(p, 0, &fv, sizeof fv) != TYTO_OK ||
        tyto_program_read_output(p, 1, &norm, sizeof norm) != TYTO_OK ||
        tyto_program_read_output(p, 2, sv, sizeof sv) != TYTO_OK)
      return fail("run");
    printf("%3d  f = %- .12f  |g| = %.3e  x = [", it, fv, norm);
    for (int i = 0; i < N; i++)
      printf("%s%.9f", i ? ", " : "", xv[i]);
    printf("]\n");
    if (norm < 1e-6)
      break;
    for (int i = 0; i < N; i++)
      xv[i] -= eta * sv[i];
  }
  /* At a stationary point of sum(cos x) every x_i is a multiple of pi. */
  const double pi = acos(-1.0);
  int ok = norm < 1e-6;
  for (int i = 0; i < N; i++)
    ok &= fabs(xv[i] / pi - round(xv[i] / pi)) < 1e-6;
  printf("%s after %d Newton steps: |g| = %.3e\n", ok ? "converged" : "FAILED",
         it, norm);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
  return !ok;
}
