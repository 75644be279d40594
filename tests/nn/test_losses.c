/*
 * Losses and metrics: softmax cross-entropy against its log-sum-exp closed
 * form (huge logits and padding rows included) and its gradient softmax -
 * labels; MSE and L1 against loops; the multi-class hinge against
 * PyTorch's MultiMarginLoss (bench/nn_reference.py); the elastic-net
 * penalty; count_correct.
 */
#include "nn_test.h"

/* BEGIN bench/nn_reference.py output (do not edit) */
/* hinge [1] */
static const double REF_hinge[] = {1.210654112983};
/* hinge_small [1] */
static const double REF_hinge_small[] = {0.7462421539478};
/* END bench/nn_reference.py output */

/* Evaluates rank-0 f64 y with the bindings. */
static double eval0(tyto_tensor *y, size_t n, const nn_bind *b) {
  tyto_program *p = nn_compile(tyto_tensor_graph(y), 1, &y, NULL);
  nn_bind_all(p, n, b);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "run: %s", tyto_errmsg());
  double v;
  ck_assert_int_eq(tyto_program_read_output(p, 0, &v, sizeof v), TYTO_OK);
  tyto_program_free(p);
  return v;
}

/* -sum(labels log_softmax(logits)) / sum(labels), row by row with the
 * row's max subtracted first (the closed form the loss must equal). */
static double ce_closed(const double *x, const double *l, int rows, int cols) {
  double num = 0, den = 0;
  for (int r = 0; r < rows; r++) {
    const double *xr = x + r * cols, *lr = l + r * cols;
    double m = xr[0], s = 0;
    for (int j = 1; j < cols; j++)
      m = fmax(m, xr[j]);
    for (int j = 0; j < cols; j++)
      s += exp(xr[j] - m);
    double lse = m + log(s);
    for (int j = 0; j < cols; j++) {
      num -= lr[j] * (xr[j] - lse);
      den += lr[j];
    }
  }
  return num / den;
}

/* Label rows: one-hot, a probability row, a padding row of zeros. */
static const double ce_labels[5 * 4] = {0,    1,   0,    0, /* one-hot */
                                        1,    0,   0,    0, /* */
                                        0,    0,   0,    0, /* padding */
                                        0.25, 0.5, 0.25, 0, /* probabilities */
                                        0,    1,   0,    0};

START_TEST(softmax_cross_entropy_closed_form) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(6, 4), "x");
  tyto_tensor *l = tyto_input(g, TYTO_F64, 2, S(6, 4), "l");
  tyto_tensor *loss = tyto_loss_softmax_cross_entropy(x, l);
  nn_expect_shape(loss, 0, NULL, "softmax_cross_entropy");
  double labels[24] = {0}, xv[24];
  memcpy(labels, ce_labels, sizeof ce_labels); /* row 5: padding too */
  for (double scale = 1; scale <= 1e4; scale *= 100) {
    nn_fill(xv, 24, 1, scale, 0);
    nn_bind b[2] = {{x, 0, 1, 0, xv}, {l, 0, 1, 0, labels}};
    double got = eval0(loss, 2, b), want = ce_closed(xv, labels, 6, 4);
    ck_assert_msg(isfinite(got), "scale %g: loss %g", scale, got);
    char what[64];
    snprintf(what, sizeof what, "cross-entropy logits x%g", scale);
    nn_expect(&got, &want, 1, 1e-12, what);
  }
  /* The padding rows (2 and 5) count for nothing: the same loss as the
   * first five rows alone. */
  tyto_tensor *x5 = tyto_input(g, TYTO_F64, 2, S(5, 4), "x5");
  tyto_tensor *l5 = tyto_input(g, TYTO_F64, 2, S(5, 4), "l5");
  nn_fill(xv, 24, 2, 3.0, 0);
  nn_bind b6[2] = {{x, 0, 1, 0, xv}, {l, 0, 1, 0, labels}};
  nn_bind b5[2] = {{x5, 0, 1, 0, xv}, {l5, 0, 1, 0, labels}};
  double with_padding = eval0(loss, 2, b6);
  double without = eval0(tyto_loss_softmax_cross_entropy(x5, l5), 2, b5);
  ck_assert_double_eq_tol(with_padding, without, 1e-15);
  tyto_graph_free(g);
}
END_TEST

/* d loss / d logits = (rowsum(labels) softmax - labels) / sum(labels), and
 * the finite-difference check. */
START_TEST(softmax_cross_entropy_gradient) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(5, 4), "x");
  tyto_tensor *l = tyto_input(g, TYTO_F64, 2, S(5, 4), "l");
  tyto_tensor *loss = tyto_loss_softmax_cross_entropy(x, l);
  tyto_tensor *gx = tyto_grad(loss, x);
  double xv[20], want[20], got[20], den = 0;
  nn_fill(xv, 20, 3, 2.0, 0);
  for (int i = 0; i < 20; i++)
    den += ce_labels[i];
  for (int r = 0; r < 5; r++) {
    double s = 0, rs = 0;
    for (int j = 0; j < 4; j++) {
      s += exp(xv[r * 4 + j]);
      rs += ce_labels[r * 4 + j];
    }
    for (int j = 0; j < 4; j++)
      want[r * 4 + j] =
          (rs * exp(xv[r * 4 + j]) / s - ce_labels[r * 4 + j]) / den;
  }
  tyto_program *p = nn_compile(g, 1, &gx, NULL);
  nn_bind b[2] = {{x, 0, 1, 0, xv}, {l, 0, 1, 0, ce_labels}};
  nn_bind_all(p, 2, b);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  tyto_program_read_output(p, 0, got, sizeof got);
  nn_expect(got, want, 20, 1e-14, "cross-entropy gradient");
  tyto_program_free(p);
  tyto_tensor *fixed[1] = {l};
  const void *fixed_v[1] = {ce_labels};
  nn_gradcheck_fixed(loss, 1, b, 1, fixed, fixed_v, "cross-entropy grad");
  tyto_graph_free(g);
}
END_TEST

/* In float32 too, logits of 1e4 give a finite loss near the closed form. */
START_TEST(softmax_cross_entropy_f32_large_logits) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, S(5, 4), "x");
  tyto_tensor *l = tyto_input(g, TYTO_F32, 2, S(5, 4), "l");
  tyto_tensor *loss = tyto_loss_softmax_cross_entropy(x, l);
  tyto_tensor *gx = tyto_grad(loss, x);
  tyto_tensor *outs[2] = {loss, gx};
  tyto_program *p = nn_compile(g, 2, outs, NULL);
  double xd[20];
  float xf[20], lf[20], got, grad[20];
  nn_fill(xd, 20, 4, 1e4, 0);
  for (int i = 0; i < 20; i++) {
    xf[i] = (float)xd[i];
    xd[i] = xf[i];
    lf[i] = (float)ce_labels[i];
  }
  nn_bind_raw(p, x, xf, sizeof xf);
  nn_bind_raw(p, l, lf, sizeof lf);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  tyto_program_read_output(p, 0, &got, sizeof got);
  tyto_program_read_output(p, 1, grad, sizeof grad);
  double want = ce_closed(xd, ce_labels, 5, 4);
  ck_assert_msg(isfinite(got), "loss %g", got);
  ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want), "loss %.9g vs %.9g", got,
                want);
  for (int i = 0; i < 20; i++)
    ck_assert_msg(isfinite(grad[i]), "gradient %d is %g", i, grad[i]);
  printf("cross-entropy f32 x1e4: %.9g vs %.9g\n", got, want);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

START_TEST(mse_and_l1_closed_form) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 3, S(2, 3, 4), "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 3, S(2, 3, 4), "b");
  double av[24], bv[24], mse = 0, l1 = 0;
  nn_fill(av, 24, 1, 1, 0);
  nn_fill(bv, 24, 2, 2, 0);
  for (int i = 0; i < 24; i++) {
    mse += (av[i] - bv[i]) * (av[i] - bv[i]) / 24;
    l1 += fabs(av[i] - bv[i]) / 24;
  }
  nn_bind bs[2] = {{a, 1, 1, 0, NULL}, {b, 2, 2, 0, NULL}};
  double got = eval0(tyto_loss_mse(a, b), 2, bs);
  nn_expect(&got, &mse, 1, 1e-14, "mse");
  got = eval0(tyto_loss_l1(a, b), 2, bs);
  nn_expect(&got, &l1, 1, 1e-14, "l1");
  nn_gradcheck(tyto_loss_mse(a, b), 2, bs, "mse grad");
  nn_gradcheck(tyto_loss_l1(a, b), 2, bs, "l1 grad");
  tyto_loss_mse(a, tyto_input(g, TYTO_F64, 2, S(2, 3), "c"));
  nn_expect_error(g, "mse: pred [2,3,4] and target [2,3] differ in shape");
  tyto_graph_free(g);
}
END_TEST

static void one_hot(double *l, const int *y, int rows, int cols) {
  memset(l, 0, (size_t)(rows * cols) * sizeof *l);
  for (int r = 0; r < rows; r++)
    l[r * cols + y[r]] = 1;
}

START_TEST(hinge_matches_pytorch) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(4, 5), "x");
  tyto_tensor *l = tyto_input(g, TYTO_F64, 2, S(4, 5), "l");
  double lv[20];
  one_hot(lv, (const int[]){1, 0, 4, 2}, 4, 5);
  tyto_tensor *h = tyto_loss_hinge(x, l);
  nn_bind b[2] = {{x, 50, 2.0, 0, NULL}, {l, 0, 1, 0, lv}};
  nn_check_ref(h, 2, b, NN_REF(hinge), 1e-10, "hinge");
  tyto_tensor *fixed[1] = {l};
  const void *fixed_v[1] = {lv};
  nn_gradcheck_fixed(h, 1, b, 1, fixed, fixed_v, "hinge grad");
  tyto_tensor *x3 = tyto_input(g, TYTO_F64, 2, S(3, 4), "x3");
  tyto_tensor *l3 = tyto_input(g, TYTO_F64, 2, S(3, 4), "l3");
  double l3v[12];
  one_hot(l3v, (const int[]){3, 3, 0}, 3, 4);
  nn_bind b3[2] = {{x3, 51, 0.25, 0, NULL}, {l3, 0, 1, 0, l3v}};
  nn_check_ref(tyto_loss_hinge(x3, l3), 2, b3, NN_REF(hinge_small), 1e-10,
               "hinge small margins");
  tyto_graph_free(g);
}
END_TEST

START_TEST(regularization_closed_form) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *w1 = tyto_input(g, TYTO_F64, 2, S(3, 4), "w1");
  tyto_tensor *w2 = tyto_input(g, TYTO_F64, 1, S(5), "w2");
  tyto_tensor *ws[2] = {w1, w2};
  double v1[12], v2[5], s1 = 0, s2 = 0;
  nn_fill(v1, 12, 1, 1, 0);
  nn_fill(v2, 5, 2, 3, 0);
  for (int i = 0; i < 12; i++) {
    s1 += fabs(v1[i]);
    s2 += v1[i] * v1[i];
  }
  for (int i = 0; i < 5; i++) {
    s1 += fabs(v2[i]);
    s2 += v2[i] * v2[i];
  }
  nn_bind b[2] = {{w1, 1, 1, 0, NULL}, {w2, 2, 3, 0, NULL}};
  static const double coef[4][2] = {{0.1, 0}, {0, 0.01}, {0.3, 0.02}, {0, 0}};
  for (int i = 0; i < 4; i++) {
    tyto_tensor *r = tyto_loss_regularization(2, ws, coef[i][0], coef[i][1]);
    nn_expect_shape(r, 0, NULL, "regularization");
    double want = coef[i][0] * s1 + coef[i][1] * s2;
    if (coef[i][0] == 0 && coef[i][1] == 0) {
      /* A constant: nothing to bind. */
      double got;
      tyto_program *p = nn_compile(g, 1, &r, NULL);
      ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
      tyto_program_read_output(p, 0, &got, sizeof got);
      ck_assert_double_eq(got, 0.0);
      tyto_program_free(p);
      continue;
    }
    double got = eval0(r, 2, b);
    nn_expect(&got, &want, 1, 1e-14, "regularization");
    nn_gradcheck(r, 2, b, "regularization grad");
  }
  ck_assert_ptr_null(tyto_loss_regularization(0, ws, 1, 1));
  tyto_graph_free(g);
}
END_TEST

START_TEST(count_correct_counts_rows) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(5, 3), "x");
  tyto_tensor *l = tyto_input(g, TYTO_F64, 2, S(5, 3), "l");
  /* argmax per row: 2, 0, 1, 1, 0; labels 2, 1, 1, (padding), 0 */
  static const double xv[15] = {0.1, 0.2, 0.9, 5,   -1,  2,   0, 3,
                                -2,  1,   7,   0.5, 9.5, 9.4, -3};
  static const double lv[15] = {0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0};
  nn_bind b[2] = {{x, 0, 1, 0, xv}, {l, 0, 1, 0, lv}};
  double got = eval0(tyto_nn_count_correct(x, l), 2, b);
  ck_assert_double_eq(got, 3.0);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_losses");
  TCase *tc = tcase_create("losses");
  tcase_set_timeout(tc, 120);
  nn_fixture(tc);
  tcase_add_test(tc, softmax_cross_entropy_closed_form);
  tcase_add_test(tc, softmax_cross_entropy_gradient);
  tcase_add_test(tc, softmax_cross_entropy_f32_large_logits);
  tcase_add_test(tc, mse_and_l1_closed_form);
  tcase_add_test(tc, hinge_matches_pytorch);
  tcase_add_test(tc, regularization_closed_form);
  tcase_add_test(tc, count_correct_counts_rows);
  suite_add_tcase(s, tc);
  return test_run(s);
}
