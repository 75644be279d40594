/* tyto_replica_sum on one device: x's value, and derivatives that are
 * those of the identity in every mode and at every order, against
 * central differences (tyto_gradcheck) and closed forms. AD keeps the
 * kind of the sum in forward mode and flips it (PLAIN <-> SHARES) in
 * reverse mode, which the graph shows. The passes neither fold a replica
 * sum (not even of a constant) nor fuse it, CSE merges equal ones, and
 * compiled it costs no kernel: it is lowered as a view of x. Float64. */
#include "ad/ad_test.h"

/* REPLICA_SUM nodes of g from index `from` on, of kind PLAIN (n[0]) and
 * SHARES (n[1]). */
static void count_kinds(tyto_graph *g, size_t from, int n[2]) {
  n[0] = n[1] = 0;
  for (size_t i = from; i < tyto_graph_size(g); i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    if (tyto_tensor_op(t) != TYTO_OP_REPLICA_SUM)
      continue;
    ck_assert_uint_eq(tyto_tensor_iattr_count(t), 1);
    int64_t kind = tyto_tensor_iattrs(t)[0];
    ck_assert(kind == TYTO_REPLICA_SUM_PLAIN ||
              kind == TYTO_REPLICA_SUM_SHARES);
    n[kind]++;
  }
}

/* The op and its value: x itself, of x's shape and dtype. */
START_TEST(identity_in_value) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  tyto_tensor *y = tyto_replica_sum(x);
  ck_assert_int_eq(tyto_tensor_op(y), TYTO_OP_REPLICA_SUM);
  ck_assert_str_eq(tyto_op_name(tyto_tensor_op(y)), "replica_sum");
  ck_assert_int_eq(tyto_tensor_iattrs(y)[0], TYTO_REPLICA_SUM_PLAIN);
  ck_assert_int_eq(tyto_tensor_rank(y), 2);
  ck_assert_int_eq(tyto_tensor_dim(y, 1), 3);
  double *xv = ad_vals(x, 1), out[6];
  const double *vals[1] = {xv};
  ad_eval(y, 1, &x, vals, out);
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(out[i], xv[i]);
  free(xv);
  /* f32 too, through the eager path. */
  const double c[3] = {1.5, -0.25, 3e-3};
  tyto_tensor *k = tyto_replica_sum(tyto_constant(g, TYTO_F32, 1, AD_S(3), c));
  tyto_eval_cache *cache = NULL;
  ck_assert_int_eq(tyto_eval_cache_new(ad_ctx, &cache), TYTO_OK);
  float kv[3];
  ck_assert_msg(tyto_tensor_eval(cache, k, kv, sizeof kv) == TYTO_OK, "%s",
                tyto_errmsg());
  for (int i = 0; i < 3; i++)
    ck_assert_float_eq(kv[i], (float)c[i]);
  tyto_eval_cache_free(cache);
  tyto_graph_free(g);
}
END_TEST

/* First and second derivatives through replica sums against central
 * differences, both modes: the gradcheck of a gradient checks the
 * Hessian forward over reverse and reverse over reverse. */
START_TEST(checked_against_differences) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(3, 4), "x");
  tyto_tensor *w = ad_in(g, 1, AD_S(4), "w");
  /* tanh(replica_sum(x) * w) summed over rows, then another sum of it. */
  int ax = 0;
  tyto_tensor *h = tyto_tanh(tyto_mul(tyto_replica_sum(x), w));
  tyto_tensor *y =
      tyto_mul(tyto_replica_sum(tyto_sum(h, 1, &ax, 0)), tyto_sin(w));
  double *xv = ad_vals(x, 7), *wv = ad_vals(w, 8);
  tyto_tensor *xs[2] = {x, w};
  const double *vals[2] = {xv, wv};
  ad_check(y, 2, xs, vals, 0, 0);
  tyto_tensor *l = ad_weighted_square(y, 9);
  ad_check(tyto_grad(l, x), 2, xs, vals, 0, 0);
  ad_check(tyto_grad(l, w), 2, xs, vals, 0, 0);
  free(xv);
  free(wv);
  tyto_graph_free(g);
}
END_TEST

/* f(x) = x^2 rs(x): f' = 3 x^2, f'' = 6 x, f''' = 6 (the identity's),
 * forward, reverse and alternating. */
START_TEST(orders_one_to_three) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 0, NULL, "x");
  tyto_tensor *f = tyto_mul(tyto_square(x), tyto_replica_sum(x));
  tyto_tensor *d[3][4];
  ad_orders(f, x, d);
  for (double v = -1.5; v <= 2.0; v += 0.875) {
    double want[4] = {v * v * v, 3 * v * v, 6 * v, 6};
    ad_expect_orders(d, x, v, want);
  }
  tyto_graph_free(g);
}
END_TEST

/* f(x) = sum(rs(x)^3): gradient 3 x^2, Hessian diag(6 x), Hessian-vector
 * product 6 x v, Laplacian 6 sum(x). */
START_TEST(hessian_closed_form) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(4), "x");
  tyto_tensor *v = ad_in(g, 1, AD_S(4), "v");
  tyto_tensor *r = tyto_replica_sum(x);
  tyto_tensor *f = tyto_sum(tyto_mul(tyto_square(r), r), 0, NULL, 0);
  const double xv[4] = {-1.25, 0.5, 1.0, 2.0}, vv[4] = {0.3, -2, 0.7, 1.1};
  tyto_tensor *both[2] = {x, v};
  const double *vals[2] = {xv, vv};
  double gv[4], hv[16], hvv[4], lap;
  ad_eval(tyto_grad(f, x), 1, &x, vals, gv);
  ad_eval(tyto_hessian(f, x), 1, &x, vals, hv);
  ad_eval(tyto_hessianv(f, x, v), 2, both, vals, hvv);
  ad_eval(tyto_laplacian(f, x), 1, &x, vals, &lap);
  double sum = 0;
  for (int i = 0; i < 4; i++) {
    sum += xv[i];
    ck_assert_double_eq_tol(gv[i], 3 * xv[i] * xv[i], 1e-12);
    ck_assert_double_eq_tol(hvv[i], 6 * xv[i] * vv[i], 1e-12);
    for (int j = 0; j < 4; j++)
      ck_assert_double_eq_tol(hv[i * 4 + j], i == j ? 6 * xv[i] : 0.0, 1e-12);
  }
  ck_assert_double_eq_tol(lap, 6 * sum, 1e-12);
  tyto_graph_free(g);
}
END_TEST

/* Reverse mode flips the kind, forward mode keeps it; reverse over
 * reverse flips it back. */
START_TEST(kinds_in_the_derivative_graph) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  tyto_tensor *v = ad_in(g, 1, AD_S(3), "v");
  tyto_tensor *y = tyto_replica_sum(x);
  tyto_tensor *f = tyto_sum(tyto_square(y), 0, NULL, 0);
  int n[2];
  size_t mark = tyto_graph_size(g);
  tyto_tensor *gr = tyto_grad(f, x);
  count_kinds(g, mark, n);
  ck_assert_int_eq(n[0], 0);
  ck_assert_int_eq(n[1], 1);
  mark = tyto_graph_size(g);
  tyto_tensor *jv = tyto_jacobianv(y, x, v);
  count_kinds(g, mark, n);
  ck_assert_int_eq(n[0], 1);
  ck_assert_int_eq(n[1], 0);
  /* The sweep over the gradient meets its SHARES sum (an adjoint: PLAIN)
   * and the forward PLAIN one (SHARES). */
  mark = tyto_graph_size(g);
  tyto_tensor *hv = tyto_grad(tyto_sum(tyto_mul(gr, v), 0, NULL, 0), x);
  count_kinds(g, mark, n);
  ck_assert_int_eq(n[0], 1);
  ck_assert_int_eq(n[1], 1);
  /* Forward over reverse keeps the gradient's SHARES. */
  mark = tyto_graph_size(g);
  tyto_tensor *fr = tyto_jacobianv(gr, x, v);
  count_kinds(g, mark, n);
  ck_assert_int_eq(n[0], 1);
  ck_assert_int_eq(n[1], 1);
  /* The text dump shows the kind: i=[0] PLAIN, i=[1] SHARES. */
  FILE *text = tmpfile();
  ck_assert_ptr_nonnull(text);
  ck_assert_int_eq(tyto_graph_write_text(g, text), TYTO_OK);
  rewind(text);
  char line[256];
  int shown[2] = {0, 0};
  while (fgets(line, sizeof line, text)) {
    if (!strstr(line, " replica_sum f64[3] <- #"))
      continue;
    if (strstr(line, " i=[0]\n"))
      shown[0]++;
    else if (strstr(line, " i=[1]\n"))
      shown[1]++;
  }
  fclose(text);
  ck_assert_int_eq(shown[0], 4); /* y; jv's, hv's and fr's */
  ck_assert_int_eq(shown[1], 3); /* gr's, hv's, fr's */
  /* On one device each is the identity's: 2 x, v, 2 v, 2 v. */
  const double xv[3] = {0.5, -1, 2}, vv[3] = {3, 0.25, -4};
  tyto_tensor *both[2] = {x, v};
  const double *vals[2] = {xv, vv};
  double a[3], b[3], c[3], d[3];
  ad_eval(gr, 2, both, vals, a);
  ad_eval(jv, 2, both, vals, b);
  ad_eval(hv, 2, both, vals, c);
  ad_eval(fr, 2, both, vals, d);
  for (int i = 0; i < 3; i++) {
    ck_assert_double_eq(a[i], 2 * xv[i]);
    ck_assert_double_eq(b[i], vv[i]);
    ck_assert_double_eq(c[i], 2 * vv[i]);
    ck_assert_double_eq(d[i], 2 * vv[i]);
  }
  tyto_graph_free(g);
}
END_TEST

/* What compiling did: nodes after the passes, launches per run, and the
 * rewrites of some passes. */
typedef struct built {
  size_t nodes, kernels;
  long fold, algebra, cse;
} built;

static long changed_by(const tyto_program_stats *st, const char *pass) {
  long n = 0;
  for (size_t i = 0; i < st->n_passes; i++)
    if (!strcmp(st->passes[i].name, pass))
      n += st->passes[i].changed;
  return n;
}

/* Compiles y with the passes `off` switched off, runs it with x bound to
 * xv (x NULL: no input) and checks that it reads as want (n doubles). */
static built compiled(tyto_graph *g, tyto_tensor *y, unsigned off,
                      tyto_tensor *x, const double *xv, const double *want,
                      size_t n) {
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.passes_off = off;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ad_ctx, g, 1, &y, &po, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  if (x)
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, n * sizeof *xv), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  double out[8];
  ck_assert_uint_le(n, 8);
  ck_assert_int_eq(tyto_program_read_output(p, 0, out, n * sizeof *out),
                   TYTO_OK);
  for (size_t i = 0; i < n; i++)
    ck_assert_double_eq_tol(out[i], want[i], 1e-15 * fmax(1, fabs(want[i])));
  tyto_program_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  built b = {st.nodes_after, st.kernels, changed_by(&st, "fold"),
             changed_by(&st, "algebra"), changed_by(&st, "cse")};
  tyto_program_free(p);
  return b;
}

/* A replica sum of a constant stays (fold and algebra leave it), where
 * stop_gradient of the same constant folds away. */
START_TEST(not_folded) {
  tyto_graph *g = tyto_graph_new();
  const double c[3] = {1, 2.5, -4};
  tyto_tensor *k = tyto_constant(g, TYTO_F64, 1, AD_S(3), c);
  tyto_tensor *full = tyto_full(g, TYTO_F64, 1, AD_S(3), 0.5);
  const double halves[3] = {0.5, 0.5, 0.5}, sums[3] = {1.5, 3, -3.5};
  tyto_tensor *y = tyto_replica_sum(k), *sg = tyto_stop_gradient(k);
  built st = compiled(g, y, 0, NULL, NULL, c, 3);
  ck_assert_uint_eq(st.nodes, 2); /* the constant and the sum */
  ck_assert_int_eq(st.fold, 0);
  ck_assert_int_eq(st.algebra, 0);
  st = compiled(g, sg, 0, NULL, NULL, c, 3);
  ck_assert_uint_eq(st.nodes, 1);
  /* Of a FULL, and under an elementwise op of constants. */
  tyto_tensor *f = tyto_replica_sum(full);
  st = compiled(g, f, 0, NULL, NULL, halves, 3);
  ck_assert_uint_eq(st.nodes, 2);
  tyto_tensor *z = tyto_add(tyto_replica_sum(full), k);
  st = compiled(g, z, 0, NULL, NULL, sums, 3);
  ck_assert_uint_eq(st.nodes, 4);
  /* x + rs(0): the sum of zeros is not x + 0 either. */
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  tyto_tensor *zero = tyto_full(g, TYTO_F64, 1, AD_S(3), 0);
  tyto_tensor *xz = tyto_add(x, tyto_replica_sum(zero));
  st = compiled(g, xz, 0, x, c, c, 3);
  ck_assert_uint_eq(st.nodes, 4);
  tyto_graph_free(g);
}
END_TEST

/* CSE merges equal sums, fusion never takes one into a group: exp(rs(exp
 * x)) keeps the sum between two kernels where exp(exp(x)) is one. */
START_TEST(cse_and_fusion) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 1, AD_S(3), "x");
  const double xv[3] = {0.5, -1, 0.25};
  double want[3];
  for (int i = 0; i < 3; i++)
    want[i] = exp(xv[i]) * exp(xv[i]);
  tyto_tensor *e = tyto_exp(x);
  tyto_tensor *twice = tyto_mul(tyto_replica_sum(e), tyto_replica_sum(e));
  built on = compiled(g, twice, TYTO_PASS_FUSE, x, xv, want, 3);
  built off =
      compiled(g, twice, TYTO_PASS_FUSE | TYTO_PASS_CSE, x, xv, want, 3);
  ck_assert_uint_eq(on.nodes, 4); /* x, exp, one sum, mul */
  ck_assert_uint_eq(off.nodes, 5);
  ck_assert_int_eq(on.cse, 1);
  for (int i = 0; i < 3; i++)
    want[i] = exp(exp(xv[i]));
  tyto_tensor *ee = tyto_exp(tyto_exp(x));
  tyto_tensor *ere = tyto_exp(tyto_replica_sum(tyto_exp(x)));
  built plain = compiled(g, ee, 0, x, xv, want, 3);
  built split = compiled(g, ere, 0, x, xv, want, 3);
  ck_assert_uint_eq(plain.kernels, 1);
  ck_assert_uint_eq(split.nodes, 4); /* x, exp, the sum, exp */
  ck_assert_uint_eq(split.kernels, 2);
  tyto_graph_free(g);
}
END_TEST

/* Lowered as a view of x: a program with a replica sum between two
 * kernels launches as many as the same program without, with the passes
 * on and off. */
START_TEST(no_kernel_of_its_own) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 2), "x");
  double wv[4] = {1, 2, -1, 0.5};
  tyto_tensor *w = tyto_constant(g, TYTO_F64, 2, AD_S(2, 2), wv);
  const double xv[4] = {0.25, -0.5, 1, 2};
  double want[4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      want[i * 2 + j] =
          tanh(xv[i * 2]) * wv[j] + tanh(xv[i * 2 + 1]) * wv[2 + j];
  tyto_tensor *with = tyto_matmul(tyto_replica_sum(tyto_tanh(x)), w, 0, 0);
  tyto_tensor *without = tyto_matmul(tyto_tanh(x), w, 0, 0);
  for (int off = 0; off < 2; off++) {
    unsigned po = off ? TYTO_PASS_ALL : 0;
    built a = compiled(g, with, po, x, xv, want, 4);
    built b = compiled(g, without, po, x, xv, want, 4);
    ck_assert_uint_eq(a.nodes, b.nodes + 1);
    ck_assert_uint_eq(a.kernels, b.kernels);
  }
  tyto_graph_free(g);
}
END_TEST

/* Elementwise and batched derivatives refuse it: element i of y is that
 * of every replica's x. */
START_TEST(not_elementwise) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = ad_in(g, 2, AD_S(2, 3), "x");
  tyto_tensor *y = tyto_exp(tyto_replica_sum(x));
  ck_assert(tyto_tensor_is_error(tyto_diff_elementwise(y, x)));
  ck_assert_msg(strstr(tyto_graph_error_message(g),
                       "replica_sum (tensor #1) on the way from x to y sums "
                       "over the replicas"),
                "%s", tyto_graph_error_message(g));
  tyto_graph_free(g);
  g = tyto_graph_new();
  x = ad_in(g, 2, AD_S(2, 3), "x");
  y = tyto_exp(tyto_replica_sum(x));
  ck_assert(tyto_tensor_is_error(tyto_jacobian_batched(y, x)));
  ck_assert_ptr_null(tyto_replica_sum(NULL));
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replica_sum");
  TCase *tc = tcase_create("replica_sum");
  ad_fixture(tc);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, identity_in_value);
  tcase_add_test(tc, checked_against_differences);
  tcase_add_test(tc, orders_one_to_three);
  tcase_add_test(tc, hessian_closed_form);
  tcase_add_test(tc, kinds_in_the_derivative_graph);
  tcase_add_test(tc, not_folded);
  tcase_add_test(tc, cse_and_fusion);
  tcase_add_test(tc, no_kernel_of_its_own);
  tcase_add_test(tc, not_elementwise);
  suite_add_tcase(s, tc);
  return test_run(s);
}
