/* tyto_einsum: a batched bilinear form, an attention score and a trace, in
 * NumPy's spec and OCANNL's, with the gradient of one of them. Prints the
 * results; exits 1 if any differs from the closed form. */
#include <math.h>
#include <stdio.h>

#include <tyto/tyto.h>

static int eval(tyto_context *ctx, tyto_tensor *t, double *out, size_t n) {
  tyto_graph *g = tyto_tensor_graph(t);
  tyto_program *p = NULL;
  if (tyto_graph_status(g) != TYTO_OK) {
    fprintf(stderr, "einsum: %s\n", tyto_graph_error_message(g));
    return -1;
  }
  if (tyto_program_compile(ctx, g, 1, &t, NULL, &p) != TYTO_OK ||
      tyto_program_run(p) != TYTO_OK ||
      tyto_program_read_output(p, 0, out, n * sizeof *out) != TYTO_OK) {
    fprintf(stderr, "einsum: %s\n", tyto_errmsg());
    tyto_program_free(p);
    return -1;
  }
  tyto_program_free(p);
  return 0;
}

int main(void) {
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "einsum: %s\n", tyto_errmsg());
    return 1;
  }
  tyto_graph *g = tyto_graph_new();
  /* Queries and keys of 2 heads, 3 positions, 4 features: the scores
   * q . k for every pair of positions. */
  double qv[24], kv[24];
  for (int i = 0; i < 24; i++) {
    qv[i] = 0.1 * (i % 7) - 0.3;
    kv[i] = 0.05 * (i % 5) + 0.1;
  }
  tyto_tensor *q = tyto_constant(g, TYTO_F64, 3, (int64_t[]){2, 3, 4}, qv);
  tyto_tensor *k = tyto_constant(g, TYTO_F64, 3, (int64_t[]){2, 3, 4}, kv);
  tyto_tensor *qk[2] = {q, k};
  tyto_tensor *scores = tyto_einsum("hqd,hkd->hqk", 2, qk);
  /* The trace of a 3x3 matrix, and OCANNL's sum over every axis. */
  double mv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  tyto_tensor *m = tyto_constant(g, TYTO_F64, 2, (int64_t[]){3, 3}, mv);
  tyto_tensor *trace = tyto_einsum("ii->", 1, &m);
  tyto_tensor *total = tyto_einsum("...|...=>0", 1, &m);
  /* d trace(M) / dM is the identity. */
  tyto_tensor *dtrace = tyto_grad(trace, m);
  double s[18], tr, tot, dt[9];
  int bad = eval(ctx, scores, s, 18) || eval(ctx, trace, &tr, 1) ||
            eval(ctx, total, &tot, 1) || eval(ctx, dtrace, dt, 9);
  if (!bad) {
    double s011 = 0;
    for (int d = 0; d < 4; d++)
      s011 += qv[0 * 12 + 1 * 4 + d] * kv[0 * 12 + 1 * 4 + d];
    printf("scores[0][1][1] = %.6f (by hand %.6f)\n", s[4], s011);
    printf("trace = %g, sum = %g, d trace / dM = [%g %g %g; %g %g %g; ...]\n",
           tr, tot, dt[0], dt[1], dt[2], dt[3], dt[4], dt[5]);
    bad = fabs(s[4] - s011) > 1e-15 || tr != 15 || tot != 45 || dt[0] != 1 ||
          dt[1] != 0 || dt[4] != 1;
  }
  tyto_graph_free(g);
  tyto_context_free(ctx);
  return bad;
}
