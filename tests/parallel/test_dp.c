/* Data-parallel training (<tyto/parallel.h>): a small MLP with dropout,
 * trained 30 steps over the CPU and one or two partial test devices
 * (tests/plugins/partplug.c: elementwise ops only, so each replica places
 * its matrix products on the CPU) with equal and unequal splits, against
 * the CPU alone on the same global batch: the losses of every step and the
 * final parameters agree. Bad options are errors that say what was
 * expected.
 *
 * Tolerances. The replicas compute the same arithmetic as the one-device
 * step on fewer rows, except the gradient's sum over the batch: split
 * into per-shard sums combined in double, it rounds differently in f32
 * (a few ulps of each gradient element). Adam divides by sqrt(v): where
 * a gradient element is tiny next to its rounding, its update can move by
 * up to lr either way, so weights are compared in units of lr x steps
 * and the loss relative to itself. Measured over these splits: the loss
 * within 2.6e-7, the weights within 4e-7 lr x steps; the bounds are 1e-5
 * and 1e-4. A wrong mask, shard or weighting moves the loss by percents
 * from the first step. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <string.h>

#include <tyto/nn.h>
#include <tyto/parallel.h>

#ifndef TEST_PART_PLUGIN_DIR
#error "TEST_PART_PLUGIN_DIR must name the directory of tyto_plugin_part.so"
#endif

enum { IN = 8, HID = 16, OUT = 2, BATCH = 24, STEPS = 30 };
#define LR 0.01

static const char *const names[4] = {"w1", "b1", "w2", "b2"};
static const int64_t sizes[4] = {IN * HID, HID, HID *OUT, OUT};

/* y = (dropout(tanh(x w1 + b1)) w2 + b2); loss = mean((y - t)^2). The
 * mask: Bernoulli(0.75) over [batch, HID], scaled by 1/0.75. */
static tyto_status mlp(void *user, tyto_graph *g, int64_t b, tyto_dp_model *m) {
  (void)user;
  static tyto_tensor *params[4];
  int64_t xs[2] = {b, IN}, ts[2] = {b, OUT}, w1s[2] = {IN, HID}, b1s[1] = {HID},
          w2s[2] = {HID, OUT}, b2s[1] = {OUT}, ms[2] = {b, HID};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, xs, "x");
  tyto_tensor *t = tyto_input(g, TYTO_F32, 2, ts, "t");
  params[0] = tyto_parameter(g, TYTO_F32, 2, w1s, "w1");
  params[1] = tyto_parameter(g, TYTO_F32, 1, b1s, "b1");
  params[2] = tyto_parameter(g, TYTO_F32, 2, w2s, "w2");
  params[3] = tyto_parameter(g, TYTO_F32, 1, b2s, "b2");
  tyto_tensor *h =
      tyto_tanh(tyto_add(tyto_matmul(x, params[0], 0, 0), params[1]));
  tyto_tensor *mask = tyto_random_bernoulli(g, TYTO_F32, 2, ms, 0.75, 7);
  h = tyto_mul(h, tyto_mul(mask, tyto_scalar(g, TYTO_F32, 1.0 / 0.75)));
  tyto_tensor *y = tyto_add(tyto_matmul(h, params[2], 0, 0), params[3]);
  m->loss = tyto_mean(tyto_square(tyto_sub(y, t)), 0, NULL, 0);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = t;
  m->n_params = 4;
  m->params = params;
  return TYTO_OK;
}

static tyto_context *context(const char *devices, int n_part) {
  char count[8];
  snprintf(count, sizeof count, "%d", n_part);
  setenv("TYTO_PART_DEVICES", count, 1);
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = devices;
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  unsetenv("TYTO_PART_DEVICES");
  return ctx;
}

/* 1: the optimiser on the first device alone, its parameters broadcast
 * (tyto_dp_options.single_optimiser). */
static int single_opt;
/* 1: the exchange after the whole backward pass (tyto_dp_options.
 * no_overlap). */
static int no_overlap;

static void fill(float *v, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = scale * ((float)((seed >> 9) % 2000) / 1000.0f - 1.0f);
  }
}

/* Every parameter's initial values (the same in every run). */
static void write_init(tyto_dp *dp) {
  for (int k = 0; k < 4; k++) {
    float init[IN * HID];
    fill(init, (size_t)sizes[k], 11u + (unsigned)k, 0.5f);
    ck_assert_int_eq(
        tyto_dp_write(dp, names[k], init, (size_t)sizes[k] * sizeof(float)),
        TYTO_OK);
  }
}

/* Step s's batch: inputs and their targets. */
static void batch_of(int s, float x[BATCH * IN], float t[BATCH * OUT]) {
  fill(x, BATCH * IN, 100u + (unsigned)s, 1.0f);
  for (int b = 0; b < BATCH; b++)
    for (int j = 0; j < OUT; j++)
      t[b * OUT + j] = 0.5f * x[b * IN + j] - 0.25f * x[b * IN + 3 + j];
}

/* Trains STEPS steps over devs with weights w (NULL: equal): the loss of
 * each step and the final parameters. */
static void train(tyto_context *ctx, size_t n, const size_t *devs,
                  const double *w, int64_t gran, double *loss,
                  float params[4][IN * HID]) {
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.n_devices = n;
  o.devices = devs;
  o.batch = BATCH;
  o.weights = w;
  o.granularity = gran;
  o.optim.lr = LR;
  o.single_optimiser = single_opt;
  o.no_overlap = no_overlap;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, mlp, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_uint_eq(tyto_dp_replica_count(dp), n);
  int64_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += tyto_dp_replica_shard(dp, i);
  ck_assert_int_eq(total, BATCH);
  write_init(dp);
  for (int s = 0; s < STEPS; s++) {
    float x[BATCH * IN], t[BATCH * OUT];
    batch_of(s, x, t);
    const void *in[2] = {x, t};
    ck_assert_msg(tyto_dp_step(dp, in, &loss[s]) == TYTO_OK, "%s",
                  tyto_errmsg());
    double xs = tyto_dp_exchange_seconds(dp),
           xe = tyto_dp_exchange_exposed_seconds(dp);
    ck_assert_msg(xs >= 0 && xs < 60 && xe >= 0 && xe < 60,
                  "exchange %g s, exposed %g s", xs, xe);
  }
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(
        tyto_dp_read(dp, names[k], params[k], (size_t)sizes[k] * sizeof(float)),
        TYTO_OK);
  /* Every replica holds the same: replica 0 is read; the optimiser's
   * step counter says every update ran. */
  float step = 0;
  ck_assert_int_eq(tyto_dp_read(dp, "optim.step", &step, sizeof step), TYTO_OK);
  ck_assert_float_eq(step, (float)STEPS);
  for (size_t i = 0; i < n; i++)
    ck_assert_double_ge(tyto_dp_replica_seconds(dp, i), 0);
  tyto_dp_free(dp);
}

static void compare(const double *l1, float p1[4][IN * HID], const double *l2,
                    float p2[4][IN * HID], const char *what) {
  double worst_l = 0, worst_w = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(l2[s] - l1[s]) / fabs(l1[s]);
    worst_l = d > worst_l ? d : worst_l;
    ck_assert_msg(d <= 1e-5, "%s: step %d loss %.9g, one device %.9g", what, s,
                  l2[s], l1[s]);
  }
  for (int k = 0; k < 4; k++)
    for (int64_t i = 0; i < sizes[k]; i++) {
      double d = fabs((double)p2[k][i] - (double)p1[k][i]) / (LR * STEPS);
      worst_w = d > worst_w ? d : worst_w;
      ck_assert_msg(d <= 1e-4, "%s: %s[%lld] %.9g, one device %.9g", what,
                    names[k], (long long)i, (double)p2[k][i], (double)p1[k][i]);
    }
  printf("%s: worst loss deviation %.2e (relative), weights %.2e lr x "
         "steps\n",
         what, worst_l, worst_w);
}

START_TEST(splits_follow_one_device) {
  tyto_context *ctx = context("cpu:0,part:0,part:1", 2);
  static double l1[STEPS], l2[STEPS];
  static float p1[4][IN * HID], p2[4][IN * HID];
  const size_t cpu[1] = {0}, two[2] = {0, 1}, three[3] = {0, 1, 2};
  train(ctx, 1, cpu, NULL, 1, l1, p1);
  ck_assert_double_lt(l1[STEPS - 1], l1[0]); /* it trains */
  /* Again: one device is deterministic. */
  train(ctx, 1, cpu, NULL, 1, l2, p2);
  for (int s = 0; s < STEPS; s++)
    ck_assert_double_eq(l1[s], l2[s]);
  train(ctx, 2, two, NULL, 1, l2, p2); /* 12 + 12 */
  compare(l1, p1, l2, p2, "cpu + part, equal");
  const double w[3] = {3, 1, 2};
  train(ctx, 3, three, w, 1, l2, p2); /* 12 + 4 + 8 */
  compare(l1, p1, l2, p2, "cpu + 2 part, 3:1:2");
  const double w2[2] = {1, 5};
  train(ctx, 2, two, w2, 4, l2, p2); /* 4 + 20 */
  compare(l1, p1, l2, p2, "cpu + part, 1:5 by 4");
  /* The exchange after the whole backward pass: the same bits as the
   * overlapped one (each gradient summed in replica order either way). */
  static double l3[STEPS];
  static float p3[4][IN * HID];
  train(ctx, 3, three, w, 1, l2, p2);
  no_overlap = 1;
  train(ctx, 3, three, w, 1, l3, p3);
  no_overlap = 0;
  for (int s = 0; s < STEPS; s++)
    ck_assert_double_eq(l2[s], l3[s]);
  ck_assert_mem_eq(p2, p3, sizeof p2);
  /* The optimiser on the CPU alone, the parameters broadcast. */
  single_opt = 1;
  train(ctx, 3, three, w, 1, l2, p2);
  single_opt = 0;
  compare(l1, p1, l2, p2, "cpu + 2 part, 3:1:2, one optimiser");
  tyto_context_free(ctx);
}
END_TEST

static tyto_status bad_model(void *user, tyto_graph *g, int64_t b,
                             tyto_dp_model *m) {
  tyto_status st = mlp(user, g, b, m);
  m->loss = m->inputs[0]; /* not one element */
  return st;
}

/* A mask of 3 elements per example: shards must start at multiples of 4
 * examples for Philox's counters to line up. */
static tyto_status odd_mask(void *user, tyto_graph *g, int64_t b,
                            tyto_dp_model *m) {
  tyto_status st = mlp(user, g, b, m);
  int64_t s[2] = {b, 3};
  tyto_tensor *r = tyto_random_uniform(g, TYTO_F32, 2, s, 0, 1, 3);
  m->loss = tyto_add(m->loss, tyto_mean(r, 0, NULL, 0));
  return st;
}

START_TEST(bad_options) {
  tyto_context *ctx = context("cpu:0,part:0", 1);
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  tyto_dp *dp = NULL;
  const size_t twice[2] = {1, 1}, missing[2] = {0, 5}, two[2] = {0, 1};
  o.batch = 8;
  o.n_devices = 2;
  o.devices = twice;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "listed twice"), "%s", tyto_errmsg());
  o.devices = missing;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp), TYTO_ERR_NOT_FOUND);
  o.devices = two;
  o.batch = 1; /* fewer examples than devices */
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "a batch of 1 cannot give 2 devices"),
                "%s", tyto_errmsg());
  o.batch = 0;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "batch 0: expected a positive batch"),
                "%s", tyto_errmsg());
  /* A batch past what a double counts exactly is split in whole
   * examples (not in 2^63 of them, looping to make up the sum); the
   * model for it then fails to build. */
  o.batch = INT64_MAX;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "more than 2^60 elements"), "%s",
                tyto_errmsg());
  o.batch = INT64_MAX - 1; /* n * granularity would overflow */
  o.granularity = INT64_MAX / 2 + 1;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "cannot give 2 devices"), "%s",
                tyto_errmsg());
  o.batch = 8;
  o.granularity = 16; /* larger than the batch */
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "granularity 16"), "%s", tyto_errmsg());
  o.granularity = 1;
  /* Counts and switches out of range are refused, not taken as "on". */
  o.rebalance_every = -1;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "rebalance_every -1: expected a number"),
                "%s", tyto_errmsg());
  o.rebalance_every = 0;
  o.calibrate_steps = -2;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "calibrate_steps -2: expected a number "
                                      "of steps, 0 for none or -1"),
                "%s", tyto_errmsg());
  o.calibrate_steps = -1;
  o.single_optimiser = 5;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "single_optimiser 5: expected 0 (off) "
                                      "or 1 (on)"),
                "%s", tyto_errmsg());
  o.single_optimiser = 0;
  o.exact_exchange = -1;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "exact_exchange -1"), "%s",
                tyto_errmsg());
  o.exact_exchange = 0;
  const double neg[2] = {1, -1}, tiny[2] = {1000, 1};
  o.weights = neg;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "positive finite share"), "%s",
                tyto_errmsg());
  o.weights = tiny; /* device 1's share rounds to nothing */
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "rounds to no examples"), "%s",
                tyto_errmsg());
  o.weights = NULL;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, bad_model, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "one-element loss") &&
                    strstr(tyto_errmsg(), "(the loss is ["),
                "%s", tyto_errmsg());
  o.batch = 6; /* shards 3 + 3: example 3 of a 3-wide mask is element 9 */
  ck_assert_int_eq(tyto_dp_new(ctx, &o, odd_mask, NULL, &dp),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "use a granularity of 4"), "%s",
                tyto_errmsg());
  ck_assert_ptr_null(dp);
  /* An unknown name. */
  o.batch = 8;
  ck_assert_int_eq(tyto_dp_new(ctx, &o, mlp, NULL, &dp), TYTO_OK);
  float v;
  ck_assert_int_eq(tyto_dp_read(dp, "nope", &v, sizeof v), TYTO_ERR_NOT_FOUND);
  /* A wrong size is named against the call and the tensor. */
  ck_assert_int_eq(tyto_dp_read(dp, "b1", &v, sizeof v),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "tyto_dp_read: 'b1' is f32["), "%s",
                tyto_errmsg());
  tyto_dp_free(dp);
  tyto_context_free(ctx);
}
END_TEST

/* The same through tyto_nn: a dense layer, dropout (fresh masks each
 * step: the layer state "nn.step" advances on every replica), softmax
 * cross-entropy over labelled rows only (the last rows of the batch are
 * padding, with all-zero labels, as a partial batch is padded), weighted
 * by the labelled rows each shard holds. */
enum { CLASSES = 4, PAD = 7 };

static tyto_status nn_model(void *user, tyto_graph *g, int64_t b,
                            tyto_dp_model *m) {
  tyto_nn **keep = user;
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = 5;
  tyto_nn *nn;
  tyto_status st = tyto_nn_new(g, &no, &nn);
  if (st != TYTO_OK)
    return st;
  tyto_init glorot = {TYTO_INIT_GLOROT_UNIFORM, 0, 0, 0};
  tyto_tensor *x = tyto_nn_input(nn, 2, (int64_t[]){b, IN}, "x");
  tyto_tensor *labels = tyto_nn_input(nn, 2, (int64_t[]){b, CLASSES}, "labels");
  tyto_tensor *h =
      tyto_nn_fully_connected(nn, "fc", x, HID, TYTO_ACT_RELU, glorot);
  h = tyto_nn_dropout(nn, h, 0.25);
  tyto_tensor *logits = tyto_nn_linear(nn, "out", h, CLASSES, 1, glorot);
  m->loss = tyto_loss_softmax_cross_entropy(logits, labels);
  m->weight = tyto_sum(labels, 0, NULL, 0);
  m->n_sums = 1;
  m->sums[0] = tyto_nn_count_correct(logits, labels);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = labels;
  tyto_dp_model_from_nn(m, nn, !keep);
  if (keep)
    *keep = nn; /* the caller's, for the initial values */
  return TYTO_OK;
}

/* Loss scaling for nn_train (tyto_dp_options.loss_scale; 0: none). */
static double nn_scale;

static void nn_train(tyto_context *ctx, size_t n, const size_t *devs,
                     const double *w, double *loss, float *fc,
                     double *correct) {
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.n_devices = n;
  o.devices = devs;
  o.batch = BATCH;
  o.weights = w;
  o.optim.lr = LR;
  o.loss_scale = nn_scale;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, nn_model, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  /* The initial values the network draws (by name and seed). */
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  tyto_dp_model m;
  memset(&m, 0, sizeof m);
  ck_assert_int_eq(nn_model(&nn, g, 1, &m), TYTO_OK);
  for (size_t k = 0; k < m.n_params; k++) {
    tyto_tensor *t = m.params[k];
    size_t bytes = (size_t)tyto_tensor_numel(t) * sizeof(float);
    float *v = malloc(bytes);
    ck_assert_int_eq(tyto_nn_initial_value(nn, t, v, bytes), TYTO_OK);
    ck_assert_int_eq(tyto_dp_write(dp, tyto_tensor_name(t), v, bytes), TYTO_OK);
    free(v);
  }
  tyto_nn_free(nn);
  tyto_graph_free(g);
  for (int s = 0; s < STEPS; s++) {
    float x[BATCH * IN], lab[BATCH * CLASSES];
    fill(x, BATCH * IN, 300u + (unsigned)s, 1.0f);
    memset(lab, 0, sizeof lab);
    for (int b = 0; b < BATCH - PAD; b++)
      lab[b * CLASSES + (x[b * IN] > 0) + 2 * (x[b * IN + 1] > 0)] = 1;
    const void *in[2] = {x, lab};
    ck_assert_msg(tyto_dp_step(dp, in, &loss[s]) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_dp_sums(dp, &correct[s], 1), TYTO_OK);
  }
  double two_sums[2];
  ck_assert_int_eq(tyto_dp_sums(dp, two_sums, 2), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "2 sums asked for; the model has 1"),
                "%s", tyto_errmsg());
  float step = 0;
  ck_assert_int_eq(tyto_dp_read(dp, "nn.step", &step, sizeof step), TYTO_OK);
  ck_assert_float_eq(step, (float)STEPS);
  ck_assert_int_eq(tyto_dp_read(dp, "fc.weight", fc, IN * HID * sizeof *fc),
                   TYTO_OK);
  ck_assert_int_eq(tyto_dp_skipped_steps(dp), 0);
  ck_assert_double_eq(tyto_dp_loss_scale(dp), nn_scale ? nn_scale : 1);
  tyto_dp_free(dp);
}

/* Checks a padded run (l2, w2, c2) against one device's (l1, w1, c1). */
static void padded_compare(const double *l1, const float *w1, const double *c1,
                           const double *l2, const float *w2, const double *c2,
                           const char *what) {
  /* The correct predictions, summed over the shards: the labelled rows'
   * count, as on one device (a prediction may flip only at a tie of two
   * logits within rounding, which these inputs do not come near). */
  double seen = 0;
  for (int s = 0; s < STEPS; s++) {
    ck_assert_msg(c1[s] >= 0 && c1[s] <= BATCH - PAD && c2[s] == c1[s],
                  "%s: step %d: %g correct, one device %g", what, s, c2[s],
                  c1[s]);
    seen += c1[s];
  }
  ck_assert_double_gt(seen, 0);
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(l2[s] - l1[s]) / fabs(l1[s]);
    worst = d > worst ? d : worst;
    ck_assert_msg(d <= 1e-5, "%s: step %d loss %.9g, one device %.9g", what, s,
                  l2[s], l1[s]);
  }
  for (int i = 0; i < IN * HID; i++)
    ck_assert_msg(fabs((double)w2[i] - (double)w1[i]) / (LR * STEPS) <= 1e-4,
                  "%s: fc.weight[%d] %.9g, one device %.9g", what, i,
                  (double)w2[i], (double)w1[i]);
  printf("tyto_nn, %s: worst loss deviation %.2e\n", what, worst);
}

START_TEST(padded_cross_entropy_with_dropout) {
  tyto_context *ctx = context("cpu:0,part:0", 1);
  static double l1[STEPS], l2[STEPS], c1[STEPS], c2[STEPS];
  static float w1[IN * HID], w2[IN * HID];
  const size_t cpu[1] = {0}, two[2] = {0, 1};
  nn_train(ctx, 1, cpu, NULL, l1, w1, c1);
  ck_assert_double_lt(l1[STEPS - 1], l1[0]);
  /* 8 + 16: the second shard holds all seven padded rows. */
  const double w[2] = {1, 2};
  nn_train(ctx, 2, two, w, l2, w2, c2);
  padded_compare(l1, w1, c1, l2, w2, c2, "padded");
  /* 17 + 7: the second shard holds nothing but padding, so its mean loss
   * is 0 / 0; with no examples it must count for nothing (the last,
   * partial batch of an epoch split this way made tyto-train's loss NaN). */
  const double w3[2] = {17, 7};
  nn_train(ctx, 2, two, w3, l2, w2, c2);
  padded_compare(l1, w1, c1, l2, w2, c2, "a shard of padding only");
  /* With loss scaling, that shard's NaN gradient is left out of the
   * non-finite count as it is out of the exchange: no step is skipped,
   * and a power-of-two scale changes no bit (nn_train checks the skips). */
  static double l3[STEPS], c3[STEPS];
  static float w4[IN * HID];
  nn_scale = 1024;
  nn_train(ctx, 2, two, w3, l3, w4, c3);
  nn_scale = 0;
  for (int s = 0; s < STEPS; s++)
    ck_assert_double_eq(l3[s], l2[s]);
  ck_assert_mem_eq(w4, w2, sizeof w2);
  tyto_context_free(ctx);
}
END_TEST

/* Re-splitting changes nothing but the speed: the shares set by hand in
 * the middle of training, rebalanced every 5 steps from a slow device's
 * measured rate, and a device lost mid-run (dropped, the run going on
 * without it), each against the CPU alone. */
typedef enum { BY_HAND, REBALANCE, FAILURE } resplit_kind;

static int last_applied; /* FAILURE: whether the failed step's update ran */

static void train_resplit(tyto_context *ctx, resplit_kind kind, double *loss,
                          float params[4][IN * HID], int64_t *first_shard) {
  const size_t two[2] = {0, 1};
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.n_devices = 2;
  o.devices = two;
  o.batch = BATCH;
  o.optim.lr = LR;
  o.rebalance_every = kind == REBALANCE ? 5 : 0;
  o.single_optimiser = single_opt;
  o.no_overlap = no_overlap;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, mlp, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  write_init(dp);
  int failures = 0;
  for (int s = 0; s < STEPS; s++) {
    if (kind == BY_HAND && s == 10) {
      const double w[2] = {5, 1};
      ck_assert_msg(tyto_dp_resplit(dp, w) == TYTO_OK, "%s", tyto_errmsg());
      ck_assert_int_eq(tyto_dp_replica_shard(dp, 0), 20);
    }
    float x[BATCH * IN], t[BATCH * OUT];
    batch_of(s, x, t);
    const void *in[2] = {x, t};
    tyto_status st = tyto_dp_step(dp, in, &loss[s]);
    if (st != TYTO_OK && kind == FAILURE && failures++ == 0) {
      /* The injected fault: named by device and step. */
      ck_assert_msg(strstr(tyto_errmsg(), "part:0") &&
                        strstr(tyto_errmsg(), "step"),
                    "%s", tyto_errmsg());
      ck_assert_int_eq(tyto_dp_failed_replica(dp), 1);
      if (single_opt) {
        /* The optimiser's only state is replica 0's: it cannot go. */
        ck_assert_int_eq(tyto_dp_drop(dp, 0, NULL), TYTO_ERR_UNAVAILABLE);
        ck_assert_msg(strstr(tyto_errmsg(), "only copy of the optimiser"), "%s",
                      tyto_errmsg());
      }
      int applied = -1;
      ck_assert_msg(tyto_dp_drop(dp, 1, &applied) == TYTO_OK, "%s",
                    tyto_errmsg());
      ck_assert_uint_eq(tyto_dp_replica_count(dp), 1);
      ck_assert_int_eq(tyto_dp_replica_shard(dp, 0), BATCH);
      last_applied = applied;
      if (!applied) {
        s--; /* run the step again, on the survivor */
        continue;
      }
      /* The update was applied: read back the step's loss. */
      ck_assert_int_eq(tyto_dp_steps(dp), s + 1);
      loss[s] = NAN;
      continue;
    }
    ck_assert_msg(st == TYTO_OK, "step %d: %s", s, tyto_errmsg());
    if (s == 0)
      *first_shard = tyto_dp_replica_shard(dp, 0);
  }
  if (kind == FAILURE)
    ck_assert_int_eq(failures, 1);
  ck_assert_int_eq(tyto_dp_steps(dp), STEPS);
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(
        tyto_dp_read(dp, names[k], params[k], (size_t)sizes[k] * sizeof(float)),
        TYTO_OK);
  /* The slow device gave up examples (under valgrind the CPU is slowed
   * down more than the test device's sleep: no telling which is faster). */
  if (kind == REBALANCE && !getenv("TYTO_TEST_UNDER_VALGRIND")) {
    ck_assert_int_gt(tyto_dp_replica_shard(dp, 0), *first_shard);
    /* 3 ms a command: even one example on the test device takes longer
     * than the CPU's whole batch, so a rebalance left it out: the first
     * one after the calibration, unless other work on the machine slowed the
     * CPU's steps as much while it measured them (seen under make check -j2),
     * then a later one. */
    ck_assert_uint_eq(tyto_dp_left_out_count(dp), 1);
    size_t dev = 9;
    int64_t at = -1;
    double unit = 0, others = 0;
    ck_assert_int_eq(tyto_dp_left_out(dp, 0, &dev, &at, &unit, &others),
                     TYTO_OK);
    ck_assert_uint_eq(dev, 1);
    /* Not at the calibration (step 3), which sets shares only: at a
     * rebalance, every 5 steps after it. */
    ck_assert_msg(at >= 8 && (at - 3) % 5 == 0 && at < STEPS,
                  "left out at step %lld, not at a rebalance", (long long)at);
    ck_assert_msg(unit >= others && others > 0, "%g s against %g s", unit,
                  others);
    ck_assert_uint_eq(tyto_dp_replica_count(dp), 1);
    ck_assert_int_eq(tyto_dp_left_out(dp, 1, NULL, NULL, NULL, NULL),
                     TYTO_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(tyto_errmsg(), "1 left out so far"), "%s",
                  tyto_errmsg());
  } else if (kind != REBALANCE) {
    ck_assert_uint_eq(tyto_dp_left_out_count(dp), 0);
  }
  tyto_dp_free(dp);
}

START_TEST(resplit_rebalance_and_failure) {
  static double l1[STEPS], l2[STEPS];
  static float p1[4][IN * HID], p2[4][IN * HID];
  const size_t cpu[1] = {0};
  int64_t first = 0;
  tyto_context *ctx = context("cpu:0,part:0", 1);
  train(ctx, 1, cpu, NULL, 1, l1, p1);
  train_resplit(ctx, BY_HAND, l2, p2, &first);
  compare(l1, p1, l2, p2, "re-split by hand at step 10");
  tyto_context_free(ctx);
  /* The test device slow, so slow that it is left out. */
  setenv("TYTO_PART_DELAY_US", "3000", 1);
  ctx = context("cpu:0,part:0", 1);
  unsetenv("TYTO_PART_DELAY_US");
  train_resplit(ctx, REBALANCE, l2, p2, &first);
  compare(l1, p1, l2, p2, "rebalanced every 5 steps");
  tyto_context_free(ctx);
  /* The test device fails at its 57th launch (in a forward pass: the
   * step runs again without it) and at its 62nd (in an update, which the
   * CPU's replica applied: the run goes on from there). */
  for (int i = 0; i < 3; i++) {
    /* The third: the optimiser on the CPU alone, the device lost in a
     * forward pass. */
    single_opt = i == 2;
    setenv("TYTO_PART_FAIL_LAUNCH", i == 1 ? "62" : "57", 1);
    ctx = context("cpu:0,part:0", 1);
    unsetenv("TYTO_PART_FAIL_LAUNCH");
    train_resplit(ctx, FAILURE, l2, p2, &first);
    ck_assert_int_eq(last_applied, i == 1);
    for (int s = 0; s < STEPS; s++)
      if (isnan(l2[s]))
        l2[s] = l1[s]; /* the failed step's loss was not returned */
    compare(l1, p1, l2, p2,
            i == 1   ? "a device lost in an update"
            : i == 2 ? "lost, with one optimiser"
                     : "a device lost in a forward pass");
    single_opt = 0;
    tyto_context_free(ctx);
  }
}
END_TEST

/* The calibration: with rebalancing on and no weights given, the shares
 * are set from the measured rates after 3 steps (the first not measured),
 * every device keeping one unit, however slow: the slowed test device
 * gives examples to the CPU, and the run follows the CPU alone. Off
 * (calibrate_steps 0) or with weights given, the shares stay; an explicit
 * count calibrates whatever the weights. */
static void calibrated_run(int64_t calibrate, const double *w, double *loss,
                           float params[4][IN * HID], int64_t *shard_at) {
  tyto_context *ctx = context("cpu:0,part:0", 1);
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.batch = BATCH;
  o.optim.lr = LR;
  o.weights = w;
  o.granularity = 2;
  o.rebalance_every = 100; /* no rebalance within the run */
  o.calibrate_steps = calibrate;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, mlp, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  write_init(dp);
  for (int s = 0; s < STEPS; s++) {
    float x[BATCH * IN], t[BATCH * OUT];
    batch_of(s, x, t);
    const void *in[2] = {x, t};
    ck_assert_msg(tyto_dp_step(dp, in, &loss[s]) == TYTO_OK, "step %d: %s", s,
                  tyto_errmsg());
    shard_at[s] = tyto_dp_replica_shard(dp, 0);
  }
  ck_assert_uint_eq(tyto_dp_replica_count(dp), 2);
  ck_assert_uint_eq(tyto_dp_left_out_count(dp), 0);
  ck_assert_int_ge(tyto_dp_replica_shard(dp, 1), 2);
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(
        tyto_dp_read(dp, names[k], params[k], (size_t)sizes[k] * sizeof(float)),
        TYTO_OK);
  tyto_dp_free(dp);
  tyto_context_free(ctx);
}

START_TEST(calibration) {
  static double l1[STEPS], l2[STEPS];
  static float p1[4][IN * HID], p2[4][IN * HID];
  int64_t at[STEPS];
  const size_t cpu[1] = {0};
  tyto_context *ctx = context("cpu:0,part:0", 1);
  train(ctx, 1, cpu, NULL, 1, l1, p1);
  tyto_context_free(ctx);
  /* Under valgrind the CPU slows down more than the test device's sleep:
   * no telling which is faster, only that the run follows. */
  int timed = !getenv("TYTO_TEST_UNDER_VALGRIND");
  setenv("TYTO_PART_DELAY_US", "400", 1);
  calibrated_run(-1, NULL, l2, p2, at);
  compare(l1, p1, l2, p2, "calibrated after 3 steps");
  ck_assert_int_eq(at[0], BATCH / 2);
  ck_assert_int_eq(at[1], BATCH / 2);
  if (timed)
    ck_assert_msg(at[2] > BATCH / 2, "after the calibration, cpu:0 %lld of %d",
                  (long long)at[2], BATCH);
  for (int s = 3; s < STEPS; s++)
    ck_assert_int_eq(at[s], at[2]); /* no rebalance after it */
  /* Off, and weights given: the shares stay. */
  calibrated_run(0, NULL, l2, p2, at);
  compare(l1, p1, l2, p2, "not calibrated");
  for (int s = 0; s < STEPS; s++)
    ck_assert_int_eq(at[s], BATCH / 2);
  const double w[2] = {1, 1};
  calibrated_run(-1, w, l2, p2, at);
  for (int s = 0; s < STEPS; s++)
    ck_assert_int_eq(at[s], BATCH / 2);
  /* Asked for, it calibrates whatever the weights: after step 1 alone. */
  calibrated_run(1, w, l2, p2, at);
  compare(l1, p1, l2, p2, "calibrated after 1 step");
  if (timed)
    ck_assert_msg(at[0] > BATCH / 2, "after the calibration, cpu:0 %lld of %d",
                  (long long)at[0], BATCH);
  unsetenv("TYTO_PART_DELAY_US");
}
END_TEST

/* The same network over the CPU and an OpenCL device (PoCL on CI). The
 * two compute matrix products with other code (OpenBLAS or oneDNN against
 * CLBlast or generated kernels), which agree to f32 rounding per product:
 * measured over 30 Adam steps, the loss within 1.0e-7 (relative) and the
 * weights within 2e-7 lr x steps; the bounds, 1e-5 and 1e-3, leave room
 * for another OpenCL driver's rounding. Without OpenCL this case says so
 * and checks nothing else. */
START_TEST(opencl_split_follows_one_device) {
  /* PoCL builds its kernels for valgrind's CPU for minutes on a machine
   * with empty caches: not under valgrind. */
  if (getenv("TYTO_TEST_UNDER_VALGRIND")) {
    printf("opencl_split_follows_one_device: not under valgrind\n");
    return;
  }
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu:0,opencl:0";
  tyto_context *ctx = NULL;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    printf("opencl_split_follows_one_device: no OpenCL device: %s\n",
           tyto_errmsg());
    return;
  }
  static double l1[STEPS], l2[STEPS], c1[STEPS], c2[STEPS];
  static float w1[IN * HID], w2[IN * HID];
  const size_t cpu[1] = {0}, two[2] = {0, 1};
  nn_train(ctx, 1, cpu, NULL, l1, w1, c1);
  const double w[2] = {2, 1};
  nn_train(ctx, 2, two, w, l2, w2, c2);
  double worst = 0, worst_w = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(l2[s] - l1[s]) / fabs(l1[s]);
    worst = d > worst ? d : worst;
    ck_assert_msg(d <= 1e-5, "step %d loss %.9g, cpu alone %.9g", s, l2[s],
                  l1[s]);
  }
  for (int i = 0; i < IN * HID; i++) {
    double d = fabs((double)w2[i] - (double)w1[i]) / (LR * STEPS);
    worst_w = d > worst_w ? d : worst_w;
    ck_assert_msg(d <= 1e-3, "fc.weight[%d] %.9g, cpu alone %.9g", i,
                  (double)w2[i], (double)w1[i]);
  }
  printf("cpu + opencl, 2:1: worst loss deviation %.2e, weights %.2e lr x "
         "steps\n",
         worst, worst_w);
  tyto_context_free(ctx);
}
END_TEST

/* A run whose context the caller frees right after tyto_dp_new: the run
 * holds it, steps on, re-splits (compiling replicas anew after freeing the
 * old ones, whose holds go with them) and gives every loss the run with
 * the context kept gave, to the bit; freeing the run closes the devices. */
static void held_run(int free_early, double *loss) {
  tyto_context *ctx = context("cpu,part:0", 1);
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.batch = BATCH;
  o.optim.lr = LR;
  tyto_dp *dp = NULL;
  ck_assert_msg(tyto_dp_new(ctx, &o, mlp, NULL, &dp) == TYTO_OK, "%s",
                tyto_errmsg());
  if (free_early)
    tyto_context_free(ctx);
  write_init(dp);
  for (int s = 0; s < 6; s++) {
    float x[BATCH * IN], t[BATCH * OUT];
    batch_of(s, x, t);
    const void *in[2] = {x, t};
    if (s == 3)
      ck_assert_msg(tyto_dp_resplit(dp, (const double[]){1, 2}) == TYTO_OK,
                    "%s", tyto_errmsg());
    ck_assert_msg(tyto_dp_step(dp, in, &loss[s]) == TYTO_OK, "%s",
                  tyto_errmsg());
  }
  tyto_dp_free(dp);
  if (!free_early)
    tyto_context_free(ctx);
}

START_TEST(context_freed_first) {
  double kept[6], freed[6];
  held_run(0, kept);
  held_run(1, freed);
  for (int s = 0; s < 6; s++)
    ck_assert_msg(memcmp(&kept[s], &freed[s], sizeof kept[s]) == 0,
                  "step %d: loss %.17g with the context kept, %.17g freed", s,
                  kept[s], freed[s]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dp");
  TCase *tc = tcase_create("dp");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, splits_follow_one_device);
  tcase_add_test(tc, bad_options);
  tcase_add_test(tc, padded_cross_entropy_with_dropout);
  tcase_add_test(tc, resplit_rebalance_and_failure);
  tcase_add_test(tc, calibration);
  tcase_add_test(tc, opencl_split_follows_one_device);
  tcase_add_test(tc, context_freed_first);
  suite_add_tcase(s, tc);
  return test_run(s);
}
