/* Automatic mixed precision (<tyto/precision.h>, tyto_dp_options.amp):
 * the rewrite's structure, checked without a device, and training: an MLP
 * and a CNN for 50 steps in bf16 AMP on the CPU track their f32 loss
 * curves; an f16 run whose loss scale starts far too high skips the steps
 * that overflow, says so, and recovers; bad options are errors.
 *
 * Tolerances. bf16 keeps 8 significant bits (unit roundoff u = 2^-8):
 * every value stored between two ops carries a relative error up to u,
 * and through the few layers of these models (two products, a bias, an
 * activation, log-softmax in f32) the loss of one step moves by a few u,
 * about 1-2% of it. Steps compound this only through the parameters,
 * which stay f32 (the master weights): a step's update differs from
 * f32's by those few u of the gradient, so the curves drift apart slowly.
 * The bound, 6% of the f32 loss plus 0.02 at every step, is about six
 * times the largest gap measured (bf16: MLP 1.04%, CNN 0.51%; f16 from
 * its default scale 0.19%); an op run in
 * the wrong dtype, a cast of an index or a lost gradient moves the loss by
 * far more within a few steps. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>

#include <tyto/nn.h>
#include <tyto/parallel.h>
#include <tyto/precision.h>

enum { IN = 32, HID = 64, OUT = 10, BATCH = 32, STEPS = 50 };
enum { IMG = 12, CH = 4 };

/* ---------------------------------------------------------------------- */
/* The rewrite, without a device                                           */

static int count_op(tyto_graph *g, tyto_tensor *y, tyto_op op, tyto_dtype dt) {
  /* Nodes y depends on with op and dtype (each counted once). */
  size_t n = tyto_graph_size(g);
  unsigned char *need = calloc(n, 1);
  need[tyto_tensor_index(y)] = 1;
  int c = 0;
  for (size_t i = n; i-- > 0;) {
    if (!need[i])
      continue;
    tyto_tensor *t = tyto_graph_tensor(g, i);
    if (tyto_tensor_op(t) == op && tyto_tensor_dtype(t) == dt)
      c++;
    for (size_t k = 0; k < tyto_tensor_input_count(t); k++)
      need[tyto_tensor_index(tyto_tensor_input(t, k))] = 1;
  }
  free(need);
  return c;
}

/* loss = mean(-sum(t * log_softmax(relu(x w1 + b1) w2 + b2))), plus
 * argmax of the logits (an index: must stay f32). */
static tyto_tensor *mlp_graph(tyto_graph *g, int64_t b, tyto_tensor **argmax,
                              tyto_tensor **params) {
  int64_t xs[2] = {b, IN}, ts[2] = {b, OUT}, w1s[2] = {IN, HID}, b1s[1] = {HID},
          w2s[2] = {HID, OUT}, b2s[1] = {OUT};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, xs, "x");
  tyto_tensor *t = tyto_input(g, TYTO_F32, 2, ts, "t");
  params[0] = tyto_parameter(g, TYTO_F32, 2, w1s, "w1");
  params[1] = tyto_parameter(g, TYTO_F32, 1, b1s, "b1");
  params[2] = tyto_parameter(g, TYTO_F32, 2, w2s, "w2");
  params[3] = tyto_parameter(g, TYTO_F32, 1, b2s, "b2");
  tyto_tensor *h =
      tyto_relu(tyto_add(tyto_matmul(x, params[0], 0, 0), params[1]));
  tyto_tensor *y = tyto_add(tyto_matmul(h, params[2], 0, 0), params[3]);
  int ax = 1;
  if (argmax)
    *argmax = tyto_argmax(y, 1, 0);
  tyto_tensor *ls = tyto_log_softmax(y, 1);
  return tyto_mean(tyto_neg(tyto_sum(tyto_mul(t, ls), 1, &ax, 0)), 0, NULL, 0);
}

START_TEST(rules) {
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_MATMUL), TYTO_AMP_LOW);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_CONV2D), TYTO_AMP_LOW);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_SOFTMAX), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_LOG_SOFTMAX), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_LOG_SUM_EXP), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_EXP), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_SUM), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_ARGMAX), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_ONE_HOT), TYTO_AMP_WIDE);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_RELU), TYTO_AMP_FOLLOW);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_MAX_POOL2D), TYTO_AMP_FOLLOW);
  ck_assert_int_eq(tyto_amp_rule_of(TYTO_OP_PARAMETER), TYTO_AMP_SOURCE);
}
END_TEST

START_TEST(rewrite_structure) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *params[4], *am;
  tyto_tensor *loss = mlp_graph(g, 8, &am, params);
  tyto_tensor *ys[2] = {loss, am};
  ck_assert_msg(tyto_autocast(TYTO_BF16, 2, ys) == TYTO_OK, "%s",
                tyto_errmsg());
  /* The outputs keep their dtypes; the products run in bf16, the relu and
   * the bias adds follow them, log-softmax and the loss's sums stay f32,
   * argmax reads f32 logits. */
  ck_assert_int_eq(tyto_tensor_dtype(ys[0]), TYTO_F32);
  ck_assert_int_eq(tyto_tensor_dtype(ys[1]), TYTO_F32);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_MATMUL, TYTO_BF16), 2);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_MATMUL, TYTO_F32), 0);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_RELU, TYTO_BF16), 1);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_ADD, TYTO_BF16), 2);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_LOG_SOFTMAX, TYTO_F32), 1);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_SUM, TYTO_F32), 1);
  ck_assert_int_eq(count_op(g, ys[1], TYTO_OP_ARGMAX, TYTO_F32), 1);
  /* Casts: x, w1, b1, w2, b2 down, the logits up: six, and the logits'
   * cast is shared by log-softmax and argmax. */
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_CAST, TYTO_BF16), 5);
  ck_assert_int_eq(count_op(g, ys[0], TYTO_OP_CAST, TYTO_F32), 1);
  tyto_tensor *up0 = NULL, *up1 = NULL;
  for (size_t i = 0; i < tyto_graph_size(g); i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    if (tyto_tensor_op(t) == TYTO_OP_LOG_SOFTMAX &&
        tyto_tensor_dtype(t) == TYTO_F32 &&
        tyto_tensor_op(tyto_tensor_input(t, 0)) == TYTO_OP_CAST)
      up0 = tyto_tensor_input(t, 0);
    if (tyto_tensor_op(t) == TYTO_OP_ARGMAX &&
        tyto_tensor_op(tyto_tensor_input(t, 0)) == TYTO_OP_CAST)
      up1 = tyto_tensor_input(t, 0);
  }
  ck_assert_ptr_nonnull(up0);
  ck_assert_ptr_eq(up0, up1);
  /* The parameters are untouched: gradients are f32, through the casts. */
  tyto_tensor *gr[4];
  tyto_grads(ys[0], 4, params, gr);
  for (int k = 0; k < 4; k++) {
    ck_assert_ptr_nonnull(gr[k]);
    ck_assert_int_eq(tyto_tensor_dtype(gr[k]), TYTO_F32);
  }
  /* The backward products run in bf16 too. */
  ck_assert_int_ge(count_op(g, gr[0], TYTO_OP_MATMUL, TYTO_BF16), 2);
  ck_assert_int_eq(count_op(g, gr[0], TYTO_OP_MATMUL, TYTO_F32), 0);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(rewrite_errors) {
  tyto_graph *g = tyto_graph_new(), *g2 = tyto_graph_new();
  tyto_tensor *params[4];
  tyto_tensor *a = mlp_graph(g, 4, NULL, params);
  tyto_tensor *b = mlp_graph(g2, 4, NULL, params);
  tyto_tensor *ys[2] = {a, b};
  ck_assert_int_eq(tyto_autocast(TYTO_BF16, 2, ys), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "another graph"));
  ck_assert_int_eq(tyto_autocast((tyto_dtype)9, 1, ys),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "unknown low dtype 9"));
  ck_assert_int_eq(tyto_autocast(TYTO_F64, 1, ys), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "low dtype 1 (expected bf16"));
  ck_assert_int_eq(tyto_autocast(TYTO_BF16, 0, ys), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(tyto_autocast(TYTO_BF16, 1, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  /* An f16 model is as narrow as f16 already: nothing changes. */
  tyto_graph *g3 = tyto_graph_new();
  int64_t s[2] = {2, 2};
  tyto_tensor *x = tyto_input(g3, TYTO_F16, 2, s, "x");
  tyto_tensor *y = tyto_matmul(x, x, 0, 0);
  size_t before = tyto_graph_size(g3);
  ck_assert_int_eq(tyto_autocast(TYTO_F16, 1, &y), TYTO_OK);
  ck_assert_uint_eq(tyto_graph_size(g3), before);
  tyto_graph_free(g);
  tyto_graph_free(g2);
  tyto_graph_free(g3);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Training                                                                */

static int use_cnn;

static tyto_status build(void *user, tyto_graph *g, int64_t b,
                         tyto_dp_model *m) {
  (void)user;
  static tyto_tensor *params[4];
  if (!use_cnn) {
    m->loss = mlp_graph(g, b, NULL, params);
    m->n_inputs = 2;
    m->inputs[0] = tyto_graph_tensor(g, 0);
    m->inputs[1] = tyto_graph_tensor(g, 1);
    m->n_params = 4;
    m->params = params;
    return TYTO_OK;
  }
  /* conv 3x3 x CH same, relu, max pool 2, dense OUT, cross-entropy. */
  int64_t xs[4] = {b, 1, IMG, IMG}, ts[2] = {b, OUT}, ws[4] = {CH, 1, 3, 3},
          cb[1] = {CH}, w2s[2] = {CH * (IMG / 2) * (IMG / 2), OUT},
          b2s[1] = {OUT};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 4, xs, "x");
  tyto_tensor *t = tyto_input(g, TYTO_F32, 2, ts, "t");
  params[0] = tyto_parameter(g, TYTO_F32, 4, ws, "w1");
  params[1] = tyto_parameter(g, TYTO_F32, 1, cb, "b1");
  params[2] = tyto_parameter(g, TYTO_F32, 2, w2s, "w2");
  params[3] = tyto_parameter(g, TYTO_F32, 1, b2s, "b2");
  const tyto_conv2d_params cp = {{1, 1}, {1, 1}, {1, 1}, 1};
  tyto_tensor *c = tyto_conv2d(x, params[0], params[1], &cp);
  tyto_tensor *p = tyto_max_pool2d(tyto_relu(c), 2, 2, 2, 2, 0, 0);
  int64_t fs[2] = {b, CH * (IMG / 2) * (IMG / 2)};
  tyto_tensor *y =
      tyto_add(tyto_matmul(tyto_reshape(p, 2, fs), params[2], 0, 0), params[3]);
  int ax = 1;
  m->loss = tyto_mean(
      tyto_neg(tyto_sum(tyto_mul(t, tyto_log_softmax(y, 1)), 1, &ax, 0)), 0,
      NULL, 0);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = t;
  m->n_params = 4;
  m->params = params;
  return TYTO_OK;
}

static void fill(float *v, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = scale * ((float)((seed >> 9) % 2000) / 1000.0f - 1.0f);
  }
}

/* A learnable task: the class is the argmax of a fixed projection. */
static void batch(int s, float *x, float *t, size_t nx) {
  fill(x, nx, 1000u + (unsigned)s, 1.0f);
  size_t per = nx / BATCH;
  for (int b = 0; b < BATCH; b++) {
    int best = 0;
    double bv = -1e30;
    for (int c = 0; c < OUT; c++) {
      double v = 0;
      for (size_t j = 0; j < per; j++)
        v += x[(size_t)b * per + j] *
             (float)((int)((j * 7 + (size_t)c * 3) % 11) - 5);
      if (v > bv)
        bv = v, best = c;
    }
    for (int c = 0; c < OUT; c++)
      t[b * OUT + c] = c == best;
  }
}

static tyto_context *cpu(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu:0";
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

/* STEPS steps; loss[s] per step; returns the dp for queries (freed by
 * the caller). */
static tyto_dp *train(tyto_context *ctx, int amp, tyto_dtype low, double scale0,
                      double *loss) {
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.batch = BATCH;
  o.optim.lr = 0.01;
  o.amp = amp;
  o.amp_dtype = low;
  o.loss_scale = scale0;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, build, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  static const char *const names[4] = {"w1", "b1", "w2", "b2"};
  int64_t sizes[4] = {IN * HID, HID, HID * OUT, OUT};
  if (use_cnn) {
    sizes[0] = CH * 9;
    sizes[1] = CH;
    sizes[2] = CH * (IMG / 2) * (IMG / 2) * OUT;
  }
  static float init[CH * (IMG / 2) * (IMG / 2) * OUT + IN * HID];
  for (int k = 0; k < 4; k++) {
    fill(init, (size_t)sizes[k], 11u + (unsigned)k, k % 2 ? 0.0f : 0.3f);
    ck_assert_int_eq(
        tyto_dp_write(dp, names[k], init, (size_t)sizes[k] * sizeof(float)),
        TYTO_OK);
  }
  size_t nx = (size_t)BATCH * (use_cnn ? IMG * IMG : IN);
  float *x = malloc(nx * sizeof *x), t[BATCH * OUT];
  for (int s = 0; s < STEPS; s++) {
    batch(s % 5, x, t, nx); /* five batches, seen ten times */
    const void *in[2] = {x, t};
    ck_assert_msg(tyto_dp_step(dp, in, &loss[s]) == TYTO_OK, "step %d: %s", s,
                  tyto_errmsg());
    ck_assert_msg(isfinite(loss[s]), "step %d: loss %g", s, loss[s]);
  }
  free(x);
  return dp;
}

static void tracks(const char *what, const double *ref, const double *got) {
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(got[s] - ref[s]);
    double r = d / ref[s];
    worst = r > worst ? r : worst;
    ck_assert_msg(d <= 0.06 * ref[s] + 0.02, "%s: step %d loss %.6g, f32 %.6g",
                  what, s, got[s], ref[s]);
  }
  /* Both learn. */
  ck_assert_double_lt(ref[STEPS - 1], 0.7 * ref[0]);
  ck_assert_double_lt(got[STEPS - 1], 0.7 * got[0]);
  printf("%s: largest gap to f32 %.2f%% (first %.4f last %.4f, f32 %.4f "
         "%.4f)\n",
         what, 100 * worst, got[0], got[STEPS - 1], ref[0], ref[STEPS - 1]);
}

static void bf16_tracks(int cnn) {
  use_cnn = cnn;
  tyto_context *ctx = cpu();
  double ref[STEPS], got[STEPS];
  tyto_dp_free(train(ctx, 0, TYTO_F32, 0, ref));
  tyto_dp *dp = train(ctx, 1, TYTO_BF16, 0, got);
  /* bf16 needs no scaling: none applied, nothing skipped. */
  ck_assert_double_eq(tyto_dp_loss_scale(dp), 1);
  ck_assert_int_eq(tyto_dp_skipped_steps(dp), 0);
  tyto_dp_free(dp);
  tracks(cnn ? "cnn bf16" : "mlp bf16", ref, got);
  tyto_context_free(ctx);
}

START_TEST(mlp_bf16_tracks_f32) {
  bf16_tracks(0);
}
END_TEST

START_TEST(cnn_bf16_tracks_f32) {
  bf16_tracks(1);
}
END_TEST

START_TEST(f16_scale_too_high_recovers) {
  use_cnn = 0;
  tyto_context *ctx = cpu();
  double ref[STEPS], got[STEPS];
  tyto_dp_free(train(ctx, 0, TYTO_F32, 0, ref));
  /* 2^40: the logits' gradient (about scale / batch) overflows f16's
   * 65504 until the scale has halved some 25 times. */
  tyto_dp *dp = train(ctx, 1, TYTO_F16, 0x1p40, got);
  int64_t skipped = tyto_dp_skipped_steps(dp);
  double scale = tyto_dp_loss_scale(dp);
  printf("f16 from 2^40: %lld steps skipped, scale now 2^%g\n",
         (long long)skipped, log2(scale));
  ck_assert_int_ge(skipped, 15);
  ck_assert_int_le(skipped, 35);
  ck_assert_double_lt(scale, 0x1p25);
  ck_assert_double_eq(log2(scale), floor(log2(scale))); /* exact halvings */
  /* It still learns, and its later losses are f32's within the f16
   * bound (u = 2^-11, finer than bf16), once as many updates have run. */
  ck_assert_double_lt(got[STEPS - 1], 0.85 * got[0]);
  ck_assert_int_eq(tyto_dp_step_skipped(dp), 0);
  tyto_dp_free(dp);
  /* From the default scale (2^16) nothing overflows here, and f16 tracks
   * f32 as bf16 does. */
  dp = train(ctx, 1, TYTO_F16, 0, got);
  ck_assert_int_eq(tyto_dp_skipped_steps(dp), 0);
  ck_assert_double_eq(tyto_dp_loss_scale(dp), 65536);
  tyto_dp_free(dp);
  tracks("mlp f16", ref, got);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(bad_options) {
  tyto_context *ctx = cpu();
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.batch = BATCH;
  tyto_dp *dp = NULL;
  o.amp = 1;
  o.amp_dtype = TYTO_F64;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, build, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "amp_dtype f64"));
  o.amp_dtype = TYTO_F16;
  o.loss_scale = -1;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, build, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "loss_scale -1"));
  o.loss_scale = 0;
  o.scale_backoff = 2;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, build, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(tyto_errmsg(), "scale_backoff 2"));
  o.scale_backoff = 0;
  o.amp = 2;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, build, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(dp);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("amp");
  TCase *tc = tcase_create("rewrite");
  tcase_add_test(tc, rules);
  tcase_add_test(tc, rewrite_structure);
  tcase_add_test(tc, rewrite_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("train");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, mlp_bf16_tracks_f32);
  tcase_add_test(tc, cnn_bf16_tracks_f32);
  tcase_add_test(tc, f16_scale_too_high_recovers);
  tcase_add_test(tc, bad_options);
  suite_add_tcase(s, tc);
  return test_run(s);
}
