/*
 * What every autodiff example shares: a context on the selected devices,
 * an eager-evaluation cache, and a helper that evaluates a tensor built
 * from constants into doubles. Derivatives of constant-only graphs are
 * constant-only too, so tyto_tensor_eval() can evaluate them directly;
 * graphs with inputs are compiled into programs (see newton.c).
 */
#ifndef TYTO_EXAMPLE_H
#define TYTO_EXAMPLE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tyto/tyto.h>

static tyto_context *ex_ctx;
static tyto_eval_cache *ex_cache;

static inline void ex_die(const char *what, const char *msg) {
  fprintf(stderr, "%s: %s\n", what, msg);
  exit(1);
}

static inline void ex_open(void) {
  if (tyto_context_new(NULL, &ex_ctx) != TYTO_OK ||
      tyto_eval_cache_new(ex_ctx, &ex_cache) != TYTO_OK)
    ex_die("setup", tyto_errmsg());
}

static inline void ex_close(tyto_graph *g) {
  tyto_graph_free(g);
  tyto_eval_cache_free(ex_cache);
  tyto_context_free(ex_ctx);
}

/* Evaluates an f64 tensor of n elements into out. */
static inline void ex_eval(tyto_tensor *t, double *out, size_t n) {
  tyto_graph *g = tyto_tensor_graph(t);
  if (tyto_graph_status(g) != TYTO_OK)
    ex_die("graph", tyto_graph_error_message(g));
  if ((size_t)tyto_tensor_numel(t) != n)
    ex_die("eval", "unexpected number of elements");
  if (tyto_tensor_eval(ex_cache, t, out, n * sizeof *out) != TYTO_OK)
    ex_die("eval", tyto_errmsg());
}

/* Exit status of an example: 1 when got is not want within tol. */
static inline int ex_expect(const char *what, double got, double want,
                            double tol) {
  int ok = fabs(got - want) <= tol * (1 + fabs(want));
  printf("%-28s %.15g%s\n", what, got, ok ? "" : "   <- WRONG");
  return !ok;
}

#endif
