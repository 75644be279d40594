/*
 * Network mechanics: options and modes, parameters shared between TRAIN
 * and EVAL builds, the state and its updates, dropout's masks (rate,
 * scale, a fresh mask per run, reproducible from the seed), the
 * initialisers (bounds, moments within 4 sigma, determinism by seed and
 * name, independence from build order) and tyto_nn_initialize, and a
 * whole training step.
 */
#include "nn_test.h"

static tyto_init init_of(tyto_init_kind kind, double a, double b, double gain) {
  tyto_init i = {kind, a, b, gain};
  return i;
}

static tyto_init dflt(void) {
  return init_of(TYTO_INIT_DEFAULT, 0, 0, 0);
}

START_TEST(options_and_mode) {
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  ck_assert_uint_eq(o.struct_size, sizeof o);
  ck_assert_int_eq(o.dtype, TYTO_F32);
  ck_assert_int_eq(o.mode, TYTO_NN_TRAIN);
  ck_assert_uint_eq(o.seed, 0);
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(NULL, NULL, &nn), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(nn);
  o.struct_size = 2;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "struct_size");
  tyto_nn_options_init(&o);
  o.dtype = (tyto_dtype)7;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_ERR_INVALID_ARGUMENT);
  /* A caller compiled against a shorter struct: the rest defaults. */
  tyto_nn_options_init(&o);
  o.struct_size = offsetof(tyto_nn_options, seed);
  o.dtype = TYTO_F64;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_OK);
  ck_assert_int_eq(tyto_nn_dtype(nn), TYTO_F64);
  ck_assert_int_eq(tyto_nn_get_mode(nn), TYTO_NN_TRAIN);
  ck_assert_ptr_eq(tyto_nn_graph(nn), g);
  tyto_nn_set_mode(nn, TYTO_NN_EVAL);
  ck_assert_int_eq(tyto_nn_get_mode(nn), TYTO_NN_EVAL);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(2, 3), "x");
  ck_assert_int_eq(tyto_tensor_dtype(x), TYTO_F64);
  ck_assert_int_eq(tyto_tensor_kind(x), TYTO_KIND_INPUT);
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 0);
  ck_assert_ptr_null(tyto_nn_parameter(nn, 0));
  tyto_nn_free(nn);
  tyto_nn_free(NULL);
  tyto_graph_free(g);
}
END_TEST

/* conv -> batch norm -> relu -> dropout -> max pool -> dense. */
static tyto_tensor *build(tyto_nn *nn, tyto_tensor *x) {
  tyto_nn_conv c;
  memset(&c, 0, sizeof c);
  c.filters = 4;
  c.kernel[0] = c.kernel[1] = 3;
  c.padding = TYTO_NN_SAME;
  tyto_tensor *h = tyto_nn_conv2d(nn, "c1", x, &c);
  h = tyto_nn_batch_norm(nn, "bn1", h, 0, 0);
  h = tyto_nn_activate(h, TYTO_ACT_RELU, 0);
  h = tyto_nn_dropout(nn, h, 0.25);
  tyto_nn_pool p = {{2, 2}, {0, 0}, TYTO_NN_VALID, {0, 0}};
  h = tyto_nn_max_pool2d(nn, h, &p);
  return tyto_nn_fully_connected(nn, "fc", h, 3, TYTO_ACT_NONE, dflt());
}

START_TEST(train_and_eval_share_parameters) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 5);
  tyto_tensor *xtr = tyto_nn_input(nn, 4, S(8, 1, 6, 6), "x_train");
  tyto_tensor *ytr = build(nn, xtr);
  nn_expect_shape(ytr, 2, S(8, 3), "train logits");
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 6);
  ck_assert_uint_eq(tyto_nn_weight_count(nn), 2);
  ck_assert_uint_eq(tyto_nn_state_count(nn), 3);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 3);
  static const char *const names[6] = {"c1.weight", "c1.bias",   "bn1.gamma",
                                       "bn1.beta",  "fc.weight", "fc.bias"};
  tyto_tensor *params[6];
  for (int i = 0; i < 6; i++) {
    params[i] = tyto_nn_parameter(nn, (size_t)i);
    ck_assert_str_eq(tyto_tensor_name(params[i]), names[i]);
    ck_assert_int_eq(tyto_tensor_kind(params[i]), TYTO_KIND_PARAMETER);
    ck_assert_ptr_eq(tyto_nn_parameters(nn)[i], params[i]);
  }
  ck_assert_ptr_eq(tyto_nn_weight(nn, 0), params[0]);
  ck_assert_ptr_eq(tyto_nn_weight(nn, 1), params[4]);
  ck_assert_str_eq(tyto_tensor_name(tyto_nn_state(nn, 0)), "bn1.running_mean");
  ck_assert_str_eq(tyto_tensor_name(tyto_nn_state(nn, 1)), "bn1.running_var");
  ck_assert_str_eq(tyto_tensor_name(tyto_nn_state(nn, 2)), "nn.step");
  ck_assert_int_eq(tyto_tensor_rank(tyto_nn_state(nn, 2)), 0);
  /* The updates: each state tensor once. */
  for (int i = 0; i < 3; i++)
    ck_assert_ptr_eq(tyto_nn_update_params(nn)[i],
                     tyto_nn_state(nn, (size_t)i));
  /* EVAL on another batch size: the same tensors, no new updates. */
  tyto_nn_set_mode(nn, TYTO_NN_EVAL);
  tyto_tensor *xev = tyto_nn_input(nn, 4, S(3, 1, 6, 6), "x_eval");
  tyto_tensor *yev = build(nn, xev);
  nn_expect_shape(yev, 2, S(3, 3), "eval logits");
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 6);
  ck_assert_uint_eq(tyto_nn_state_count(nn), 3);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 3);
  for (int i = 0; i < 6; i++)
    ck_assert_ptr_eq(tyto_nn_parameter(nn, (size_t)i), params[i]);
  /* A second TRAIN build replaces the updates instead of doubling them. */
  tyto_nn_set_mode(nn, TYTO_NN_TRAIN);
  build(nn, xtr);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 3);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  /* Both outputs in one program; EVAL uses the running statistics that
   * the TRAIN half updates. */
  tyto_tensor *outs[2] = {ytr, yev};
  tyto_program *p = nn_compile(g, 2, outs, nn);
  ck_assert_int_eq(tyto_nn_initialize(nn, p), TYTO_OK);
  float xv[8 * 36], xe[3 * 36], y[3 * 3];
  for (int i = 0; i < 8 * 36; i++)
    xv[i] = (float)((i * 37) % 11) / 11.0f;
  nn_bind_raw(p, xtr, xv, sizeof xv);
  memcpy(xe, xv, sizeof xe);
  nn_bind_raw(p, xev, xe, sizeof xe);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 1, y, sizeof y), TYTO_OK);
  for (int i = 0; i < 9; i++)
    ck_assert(isfinite(y[i]));
  float step;
  ck_assert_int_eq(
      tyto_program_read_parameter(p, tyto_nn_state(nn, 2), &step, sizeof step),
      TYTO_OK);
  ck_assert_float_eq(step, 1.0f);
  tyto_program_free(p);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

START_TEST(reuse_with_another_shape_fails) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 0);
  tyto_tensor *a = tyto_nn_input(nn, 4, S(2, 3, 8, 8), "a");
  tyto_tensor *b = tyto_nn_input(nn, 4, S(2, 5, 8, 8), "b");
  tyto_nn_conv c;
  memset(&c, 0, sizeof c);
  c.filters = 4;
  c.kernel[0] = c.kernel[1] = 3;
  ck_assert(!tyto_tensor_is_error(tyto_nn_conv2d(nn, "conv1", a, &c)));
  /* Same name, same shapes: fine, even on another batch. */
  ck_assert(!tyto_tensor_is_error(tyto_nn_conv2d(
      nn, "conv1", tyto_nn_input(nn, 4, S(7, 3, 9, 9), "a2"), &c)));
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 2);
  ck_assert(tyto_tensor_is_error(tyto_nn_conv2d(nn, "conv1", b, &c)));
  nn_expect_error(g, "conv2d 'conv1': parameter 'conv1.weight' exists with "
                     "shape [4,3,3,3], this layer needs [4,5,3,3]; give the "
                     "layer another name");
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 2);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Dropout                                                                 */

#define DN 4096

typedef struct drop_run {
  float y[2][DN]; /* two consecutive runs */
  float step[2];  /* nn.step after each */
} drop_run;

/* Builds x -> dropout(rate) -> dropout(rate) (f32, seed), runs twice on
 * ones and keeps the first dropout's outputs (second: `second`). */
static void run_dropout(uint64_t seed, double rate, int second, drop_run *out) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, seed);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(64, 64), "x");
  tyto_tensor *d1 = tyto_nn_dropout(nn, x, rate);
  tyto_tensor *d2 = tyto_nn_dropout(nn, x, rate);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 1);
  ck_assert_uint_eq(tyto_nn_state_count(nn), 1);
  tyto_tensor *step = tyto_nn_state(nn, 0);
  ck_assert_str_eq(tyto_tensor_name(step), "nn.step");
  tyto_tensor *y = second ? d2 : d1;
  tyto_program *p = nn_compile(g, 1, &y, nn);
  ck_assert_int_eq(tyto_nn_initialize(nn, p), TYTO_OK);
  static float ones[DN];
  for (int i = 0; i < DN; i++)
    ones[i] = 1;
  nn_bind_raw(p, x, ones, sizeof ones);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    tyto_program_read_output(p, 0, out->y[r], sizeof out->y[r]);
    tyto_program_read_parameter(p, step, &out->step[r], sizeof(float));
  }
  tyto_program_free(p);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}

static int differ(const float *a, const float *b) {
  int n = 0;
  for (int i = 0; i < DN; i++)
    n += a[i] != b[i];
  return n;
}

START_TEST(dropout_keeps_and_scales) {
  static drop_run a, b, c, d;
  const double rate = 0.3, keep = 1 - rate;
  run_dropout(42, rate, 0, &a);
  for (int r = 0; r < 2; r++) {
    int kept = 0;
    for (int i = 0; i < DN; i++) {
      if (a.y[r][i] != 0) {
        kept++;
        ck_assert_float_eq_tol(a.y[r][i], (float)(1 / keep), 1e-6f);
      }
    }
    /* Binomial(4096, 0.7): within 4 standard deviations. */
    double sigma = sqrt(DN * keep * (1 - keep));
    printf("dropout run %d: kept %d of %d (expected %.0f +- %.0f)\n", r, kept,
           DN, DN * keep, 4 * sigma);
    ck_assert_msg(fabs(kept - DN * keep) <= 4 * sigma, "kept %d of %d", kept,
                  DN);
    ck_assert_float_eq(a.step[r], (float)(r + 1));
  }
  /* A fresh mask at every run: two independent masks differ in about
   * 2 p (1 - p) of the places (1720 of 4096). */
  int diff = differ(a.y[0], a.y[1]);
  ck_assert_msg(diff > DN / 3, "consecutive masks differ in %d places", diff);
  /* The same seed rebuilds the same masks; another seed, another layer
   * draw others. */
  run_dropout(42, rate, 0, &b);
  ck_assert_int_eq(differ(a.y[0], b.y[0]), 0);
  ck_assert_int_eq(differ(a.y[1], b.y[1]), 0);
  run_dropout(43, rate, 0, &c);
  ck_assert_int_gt(differ(a.y[0], c.y[0]), DN / 3);
  run_dropout(42, rate, 1, &d);
  ck_assert_int_gt(differ(a.y[0], d.y[0]), DN / 3);
}
END_TEST

START_TEST(dropout_eval_is_identity) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 0);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(4, 4), "x");
  ck_assert_ptr_eq(tyto_nn_dropout(nn, x, 0.0), x);
  tyto_nn_set_mode(nn, TYTO_NN_EVAL);
  ck_assert_ptr_eq(tyto_nn_dropout(nn, x, 0.5), x);
  /* Neither created the step counter. */
  ck_assert_uint_eq(tyto_nn_state_count(nn), 0);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 0);
  ck_assert(tyto_tensor_is_error(tyto_nn_dropout(nn, x, -0.1)));
  nn_expect_error(g, "dropout: rate -0.1 outside [0, 1)");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Initialisers                                                            */

START_TEST(init_names_round_trip) {
  for (int k = TYTO_INIT_DEFAULT; k <= TYTO_INIT_LECUN_NORMAL; k++)
    ck_assert_int_eq(tyto_init_from_name(tyto_init_name(k)), k);
  ck_assert_str_eq(tyto_init_name(TYTO_INIT_GLOROT_UNIFORM), "glorot_uniform");
  ck_assert_str_eq(tyto_init_name(TYTO_INIT_HE_NORMAL), "he_normal");
  ck_assert_int_eq(tyto_init_from_name("xavier"), -1);
  ck_assert_int_eq(tyto_init_from_name(NULL), -1);
  ck_assert_str_eq(tyto_init_name((tyto_init_kind)77), "?");
}
END_TEST

/* The initial value of a linear layer's [in, out] weight under init. */
static double *weight_values(uint64_t seed, int64_t in, int64_t out,
                             tyto_init init, const char *name) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, seed);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(1, in), "x");
  tyto_nn_linear(nn, name, x, out, 0, init);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_tensor *w = tyto_nn_parameter(nn, 0);
  size_t n = (size_t)(in * out);
  double *v = malloc(n * sizeof *v);
  ck_assert_ptr_nonnull(v);
  ck_assert_int_eq(tyto_nn_initial_value(nn, w, v, n * sizeof *v), TYTO_OK);
  tyto_nn_free(nn);
  tyto_graph_free(g);
  return v;
}

/* Sample mean and variance of v within 4 standard errors of mean and
 * var; kurtosis 1.8 for uniforms, 3 for normals. */
static void check_moments(const double *v, int64_t n, double mean, double var,
                          double kurtosis, const char *what) {
  double m = 0, s = 0;
  for (int64_t i = 0; i < n; i++)
    m += v[i];
  m /= (double)n;
  for (int64_t i = 0; i < n; i++)
    s += (v[i] - m) * (v[i] - m);
  s /= (double)(n - 1);
  double se_mean = sqrt(var / (double)n);
  double se_var = var * sqrt((kurtosis - 1) / (double)n);
  printf("%-16s mean %+.5f (want %+.5f +- %.5f), var %.6f (want %.6f +- "
         "%.6f)\n",
         what, m, mean, 4 * se_mean, s, var, 4 * se_var);
  ck_assert_msg(fabs(m - mean) <= 4 * se_mean, "%s: mean %g, expected %g", what,
                m, mean);
  ck_assert_msg(fabs(s - var) <= 4 * se_var, "%s: variance %g, expected %g",
                what, s, var);
}

START_TEST(initialisers_have_their_moments) {
  const int64_t in = 200, out = 300, n = in * out;
  const double gain = 1.5;
  static const struct {
    tyto_init_kind kind;
    int uniform;
    double scale2; /* variance (gain 1) times the fan term below */
    int fan;       /* 0: 1 / (in + out), 1: 1 / in */
  } cases[] = {
      {TYTO_INIT_GLOROT_UNIFORM, 1, 2, 0}, /* l^2/3 = 6/(in+out)/3 */
      {TYTO_INIT_GLOROT_NORMAL, 0, 2, 0},  {TYTO_INIT_HE_UNIFORM, 1, 2, 1},
      {TYTO_INIT_HE_NORMAL, 0, 2, 1},      {TYTO_INIT_LECUN_UNIFORM, 1, 1, 1},
      {TYTO_INIT_LECUN_NORMAL, 0, 1, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double var = cases[c].scale2 / (cases[c].fan ? in : in + out);
    for (int gi = 0; gi < 2; gi++) {
      double gn = gi ? gain : 0;
      double *v =
          weight_values(1, in, out, init_of(cases[c].kind, 0, 0, gn), "w");
      double g2 = gi ? gain * gain : 1;
      if (cases[c].uniform) {
        double l = sqrt(3 * var * g2);
        for (int64_t i = 0; i < n; i++)
          ck_assert_msg(fabs(v[i]) <= l, "%s: %g outside +-%g",
                        tyto_init_name(cases[c].kind), v[i], l);
      }
      char what[64];
      snprintf(what, sizeof what, "%s%s", tyto_init_name(cases[c].kind),
               gi ? " x1.5" : "");
      check_moments(v, n, 0, var * g2, cases[c].uniform ? 1.8 : 3, what);
      free(v);
    }
  }
  double *v =
      weight_values(2, in, out, init_of(TYTO_INIT_UNIFORM, -1, 3, 0), "u");
  for (int64_t i = 0; i < n; i++)
    ck_assert(v[i] >= -1 && v[i] < 3);
  check_moments(v, n, 1, 16.0 / 12, 1.8, "uniform(-1, 3)");
  free(v);
  v = weight_values(2, in, out, init_of(TYTO_INIT_NORMAL, 0.5, 2, 0), "n");
  check_moments(v, n, 0.5, 4, 3, "normal(0.5, 2)");
  free(v);
  static const struct {
    tyto_init_kind kind;
    double a, want;
  } consts[] = {{TYTO_INIT_ZEROS, 5, 0},
                {TYTO_INIT_ONES, 5, 1},
                {TYTO_INIT_CONSTANT, -0.25, -0.25}};
  for (int c = 0; c < 3; c++) {
    v = weight_values(3, 4, 5, init_of(consts[c].kind, consts[c].a, 0, 0), "k");
    for (int i = 0; i < 20; i++)
      ck_assert_double_eq(v[i], consts[c].want);
    free(v);
  }
}
END_TEST

/* The layers' defaults: biases and beta zeros, gamma and the running
 * variance ones, embeddings N(0, 1), the step zero. */
START_TEST(layer_defaults) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 9);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(4, 3), "x");
  tyto_nn_linear(nn, "fc", x, 5, 1, dflt());
  tyto_nn_batch_norm(nn, "bn", x, 0, 0);
  tyto_nn_dropout(nn, x, 0.5);
  tyto_tensor *ids = tyto_nn_input(nn, 1, S(2), "ids");
  tyto_nn_embedding(nn, "emb", ids, 1000, 50, dflt());
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  static const struct {
    const char *name;
    double v;
  } consts[] = {{"fc.bias", 0},         {"bn.gamma", 1},       {"bn.beta", 0},
                {"bn.running_mean", 0}, {"bn.running_var", 1}, {"nn.step", 0}};
  double v[5];
  for (int c = 0; c < 6; c++) {
    tyto_tensor *t = nn_named(nn, consts[c].name);
    size_t n = (size_t)tyto_tensor_numel(t);
    ck_assert_int_eq(tyto_nn_initial_value(nn, t, v, n * sizeof *v), TYTO_OK);
    for (size_t i = 0; i < n; i++)
      ck_assert_double_eq(v[i], consts[c].v);
  }
  double *e = malloc(50000 * sizeof *e);
  ck_assert_int_eq(tyto_nn_initial_value(nn, nn_named(nn, "emb.weight"), e,
                                         50000 * sizeof *e),
                   TYTO_OK);
  check_moments(e, 50000, 0, 1, 3, "embedding N(0,1)");
  free(e);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* Values depend on the seed and the tensor's name only. */
START_TEST(initial_values_are_deterministic) {
  tyto_init glorot = dflt();
  double *a = weight_values(7, 6, 5, glorot, "dense");
  double *b = weight_values(7, 6, 5, glorot, "dense");
  double *c = weight_values(8, 6, 5, glorot, "dense");
  double *d = weight_values(7, 6, 5, glorot, "dense2");
  ck_assert_int_eq(memcmp(a, b, 30 * sizeof *a), 0);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 30; i++) {
    same_c += a[i] == c[i];
    same_d += a[i] == d[i];
  }
  ck_assert_int_eq(same_c, 0);
  ck_assert_int_eq(same_d, 0);
  free(a);
  free(b);
  free(c);
  free(d);
  /* Build order: A then B in one network, B then A in another, with an
   * extra layer between: every tensor starts from the same values; and an
   * f32 network's values are the f64 ones rounded. */
  tyto_graph *g1 = tyto_graph_new(), *g2 = tyto_graph_new();
  tyto_nn *n1 = nn_make(g1, TYTO_F64, 3), *n2 = nn_make(g2, TYTO_F32, 3);
  tyto_tensor *x1 = tyto_nn_input(n1, 2, S(2, 4), "x");
  tyto_tensor *x2 = tyto_nn_input(n2, 2, S(2, 4), "x");
  tyto_nn_linear(n1, "A", x1, 3, 1, dflt());
  tyto_nn_gru(n1, "B", tyto_nn_reshape(x1, 2, S(2, 2)), 3, 0);
  tyto_nn_linear(n2, "other", x2, 7, 1, dflt());
  tyto_nn_gru(n2, "B", tyto_nn_reshape(x2, 2, S(2, 2)), 3, 0);
  tyto_nn_linear(n2, "A", x2, 3, 1, dflt());
  ck_assert_int_eq(tyto_graph_status(g1), TYTO_OK);
  ck_assert_int_eq(tyto_graph_status(g2), TYTO_OK);
  static const char *const names[] = {"A.weight", "B.wx", "B.wh"};
  for (int k = 0; k < 3; k++) {
    tyto_tensor *t1 = nn_named(n1, names[k]), *t2 = nn_named(n2, names[k]);
    size_t n = (size_t)tyto_tensor_numel(t1);
    double v1[64];
    float v2[64];
    ck_assert_uint_le(n, 64);
    ck_assert_int_eq(tyto_nn_initial_value(n1, t1, v1, n * 8), TYTO_OK);
    ck_assert_int_eq(tyto_nn_initial_value(n2, t2, v2, n * 4), TYTO_OK);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(v2[i] == (float)v1[i], "%s[%zu]: %.9g vs %.9g", names[k], i,
                    v2[i], v1[i]);
  }
  /* Errors: another network's tensor, a wrong size. */
  double v[12];
  ck_assert_int_eq(
      tyto_nn_initial_value(n1, nn_named(n2, "A.weight"), v, sizeof v),
      TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "is not a parameter or state of this "
                                        "network");
  ck_assert_int_eq(tyto_nn_initial_value(n1, nn_named(n1, "A.weight"), v, 8),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "(96 bytes), got 8 bytes");
  tyto_nn_free(n1);
  tyto_nn_free(n2);
  tyto_graph_free(g1);
  tyto_graph_free(g2);
}
END_TEST

/* tyto_nn_initialize writes what tyto_nn_initial_value gives, for the
 * tensors the program uses, and skips the others. */
START_TEST(initialize_writes_initial_values) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 21);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(2, 4), "x");
  tyto_tensor *y = tyto_nn_linear(nn, "used", x, 3, 1, dflt());
  tyto_nn_linear(nn, "unused", x, 3, 1, dflt());
  tyto_program *p = nn_compile(g, 1, &y, NULL);
  ck_assert_int_eq(tyto_nn_initialize(nn, p), TYTO_OK);
  float got[12], want[12];
  tyto_tensor *w = nn_named(nn, "used.weight");
  ck_assert_int_eq(tyto_program_read_parameter(p, w, got, sizeof got), TYTO_OK);
  ck_assert_int_eq(tyto_nn_initial_value(nn, w, want, sizeof want), TYTO_OK);
  ck_assert_int_eq(memcmp(got, want, sizeof got), 0);
  int nonzero = 0;
  for (int i = 0; i < 12; i++)
    nonzero += got[i] != 0;
  ck_assert_int_eq(nonzero, 12);
  tyto_program_free(p);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* A whole step in one program: forward, loss, gradients, SGD on the
 * parameters, and the network's own updates; the loss falls. */
START_TEST(training_step_lowers_the_loss) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 1);
  tyto_tensor *x = tyto_nn_input(nn, 4, S(8, 1, 6, 6), "x");
  tyto_tensor *labels = tyto_nn_input(nn, 2, S(8, 3), "labels");
  tyto_tensor *logits = build(nn, x);
  tyto_tensor *loss = tyto_loss_softmax_cross_entropy(logits, labels);
  size_t np = tyto_nn_parameter_count(nn), nu = tyto_nn_update_count(nn);
  tyto_tensor *grads[8], *up[16], *uv[16];
  ck_assert_uint_le(np + nu, 16);
  tyto_grads(loss, np, tyto_nn_parameters(nn), grads);
  for (size_t i = 0; i < np; i++) {
    up[i] = tyto_nn_parameter(nn, i);
    uv[i] = tyto_sub(up[i], tyto_mul_scalar(grads[i], 0.1));
  }
  for (size_t i = 0; i < nu; i++) {
    up[np + i] = tyto_nn_update_params(nn)[i];
    uv[np + i] = tyto_nn_update_values(nn)[i];
  }
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.n_updates = np + nu;
  o.update_params = up;
  o.update_values = uv;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(nn_ctx, g, 1, &loss, &o, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_nn_initialize(nn, p), TYTO_OK);
  float xv[8 * 36], lv[24] = {0};
  for (int n = 0; n < 8; n++) {
    int cls = n % 3;
    lv[n * 3 + cls] = 1;
    for (int i = 0; i < 36; i++)
      xv[n * 36 + i] = (float)(cls == 0   ? i % 6 < 3
                               : cls == 1 ? i / 6 < 3
                                          : (i + n) % 2);
  }
  nn_bind_raw(p, x, xv, sizeof xv);
  nn_bind_raw(p, labels, lv, sizeof lv);
  float first = 0, last = 0;
  for (int step = 0; step < 30; step++) {
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    tyto_program_read_output(p, 0, &last, sizeof last);
    ck_assert(isfinite(last));
    if (step == 0)
      first = last;
  }
  printf("training: loss %.4f -> %.4f in 30 steps\n", first, last);
  ck_assert_msg(last < 0.5f * first, "loss %g -> %g", first, last);
  float step;
  tyto_program_read_parameter(p, nn_named(nn, "nn.step"), &step, sizeof step);
  ck_assert_float_eq(step, 30.0f);
  tyto_program_free(p);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_network");
  TCase *tc = tcase_create("network");
  tcase_set_timeout(tc, 120);
  nn_fixture(tc);
  tcase_add_test(tc, options_and_mode);
  tcase_add_test(tc, train_and_eval_share_parameters);
  tcase_add_test(tc, reuse_with_another_shape_fails);
  tcase_add_test(tc, dropout_keeps_and_scales);
  tcase_add_test(tc, dropout_eval_is_identity);
  tcase_add_test(tc, init_names_round_trip);
  tcase_add_test(tc, initialisers_have_their_moments);
  tcase_add_test(tc, layer_defaults);
  tcase_add_test(tc, initial_values_are_deterministic);
  tcase_add_test(tc, initialize_writes_initial_values);
  tcase_add_test(tc, training_step_lowers_the_loss);
  suite_add_tcase(s, tc);
  return test_run(s);
}
