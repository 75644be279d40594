/*
 * The seed CNN's training step split by layers over two devices: the
 * convolution, its pooling and dropout on opencl:0 (built in its
 * tyto_graph_set_device_scope, so their parameters, derivatives and Adam
 * updates go there too), the dense layers and the loss on cpu:0; compiled
 * over both devices with the pinned policy, strict (nothing may fall
 * back). Against the network tyto-train builds (mf_build of the "cnn"
 * preset) compiled on cpu:0 alone, from the same initial parameters (the
 * two networks' parameters match by name and shape: the state is copied
 * by name, each one checked) on the same batch: the loss of each of 20
 * Adam steps, and every parameter (weights, biases, Adam's moments, the
 * step counters) after them. Also: the one-device run twice gives
 * bit-identical results; each layer ran where it was pinned; the copies
 * between the devices are there and reported.
 *
 * Dropout stays in. Its masks are the same in both runs, although the
 * split draws them on opencl:0 and the reference on cpu:0: the random ops
 * are counter-based (Philox keyed by the layer's seed and the step
 * counter), so both devices draw the same bits. A mask that differed
 * would move the first step's loss by far more than rounding.
 *
 * The images: the first of Fashion-MNIST's test split when the data is
 * there (TYTO_FASHION_MNIST, default /usr/share/datasets/fashion-mnist),
 * else deterministic synthetic ones.
 *
 * Tolerances. The devices run different kernels (PoCL's OpenCL C there,
 * oneDNN and OpenBLAS here) that sum in different orders, so each gradient
 * agrees only to f32 rounding: a few units of u = 2^-24 (6e-8) of the
 * terms it sums, and the loss and Adam's moments, which follow the
 * gradients smoothly, stay as close. The weights do not: Adam divides each
 * gradient's running mean by the root of its running square, so where a
 * gradient is small against the rounding of its sum the update may move by
 * up to lr either way, and every later step computes from those weights.
 * So the loss is compared relative to its value, the moments relative to
 * each tensor's largest magnitude, the weights and biases in units of lr x
 * steps (an update that rounding turns moves a weight by about lr at
 * most), the step counters exactly. Measured on PoCL 3.1 against the CPU
 * plugin, Fashion-MNIST and synthetic images, 20 steps on 16 images and 3
 * steps on 4, natively and under valgrind (whose CPU makes both sides pick
 * other kernels), each repeated: the loss within 9.3e-7, the moments
 * within 1.1e-6, the weights within 2.7e-3 lr x steps (fc.weight, under
 * valgrind; natively 1.9e-4). The bounds: LOSS_TOL 1e-5, MOMENT_TOL 1e-5
 * (ten and nine times those) and WEIGHT_TOL 0.02 (seven times). A wrong
 * copy, mask or placement is another order altogether: a copy read one run
 * late moved the loss by 2.6% at step 1 and by 10% to 130% after it, the
 * weights by 0.18 to 1.2 lr x steps, the moments by 15% to 88%.
 *
 * Exits 77 when the machine has no OpenCL device (PoCL on CI machines).
 * Under valgrind (TYTO_TEST_UNDER_VALGRIND) it is skipped unless
 * TYTO_TEST_SPLIT_VALGRIND=1; then 3 steps on a batch of 4, a minute once
 * PoCL has built its kernels for valgrind's CPU (the first run builds
 * them: about nine minutes on two cores).
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <unistd.h>

#include <tyto/optim.h>

#include "../../tools/train/model_file.h"

enum { CPU = 0, OCL = 1, CLASSES = 10, SIDE = 28, FILTERS = 32 };
/* Steps and images; under valgrind fewer of both. */
enum { STEPS = 20, BATCH = 16, VG_STEPS = 3, VG_BATCH = 4 };

/* The loss: relative to the one-device loss. Weights and biases: in
 * units of Adam's lr times the steps taken. Adam's moments: relative to
 * the tensor's largest magnitude. The header says why. */
#define LOSS_TOL 1e-5
#define WEIGHT_TOL 0.02
#define MOMENT_TOL 1e-5

static const size_t both[2] = {CPU, OCL};

static int valgrind(void) {
  return getenv("TYTO_TEST_UNDER_VALGRIND") != NULL;
}

/* cpu:0 is device 0 (CPU), opencl:0 device 1 (OCL); NULL with the reason
 * in why when the context cannot be made. */
static tyto_context *two_devices(char *why, size_t n) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu:0,opencl:0";
  tyto_context *ctx = NULL;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    snprintf(why, n, "%s", tyto_errmsg());
    return NULL;
  }
  return ctx;
}

/* One training step, compiled. */
typedef struct trainer {
  tyto_graph *g;
  tyto_nn *nn;
  tyto_optim *opt;
  mf_model *model;
  tyto_program *p;
  tyto_tensor *x, *labels, *loss;
  /* The split's layer outputs and parameters, to see where they ran. */
  tyto_tensor *conv, *pool, *drop, *fc, *logits;
  tyto_tensor *conv_w, *fc_w, *out_w;
  double lr; /* Adam's */
} trainer;

/* The updates of a step as tyto-train passes them: the layers' state
 * (dropout's step counter), then Adam's. */
static void compile(trainer *t, tyto_context *ctx, int split) {
  size_t np = tyto_nn_parameter_count(t->nn);
  tyto_tensor **grads = calloc(np, sizeof *grads);
  ck_assert_ptr_nonnull(grads);
  tyto_grads(t->loss, np, tyto_nn_parameters(t->nn), grads);
  ck_assert_msg(tyto_graph_status(t->g) == TYTO_OK, "%s",
                tyto_graph_error_message(t->g));
  tyto_optim_options oo;
  tyto_optim_options_init(&oo, TYTO_OPTIM_ADAM);
  t->lr = oo.lr;
  ck_assert_msg(tyto_optim_build(&oo, np, tyto_nn_parameters(t->nn), grads,
                                 &t->opt) == TYTO_OK,
                "%s", tyto_errmsg());
  free(grads);
  size_t nn_u = tyto_nn_update_count(t->nn);
  size_t op_u = tyto_optim_update_count(t->opt);
  tyto_tensor **up = malloc((nn_u + op_u) * sizeof *up);
  tyto_tensor **uv = malloc((nn_u + op_u) * sizeof *uv);
  ck_assert(up && uv);
  for (size_t i = 0; i < nn_u; i++) {
    up[i] = tyto_nn_update_params(t->nn)[i];
    uv[i] = tyto_nn_update_values(t->nn)[i];
  }
  for (size_t i = 0; i < op_u; i++) {
    up[nn_u + i] = tyto_optim_update_params(t->opt)[i];
    uv[nn_u + i] = tyto_optim_update_values(t->opt)[i];
  }
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = nn_u + op_u;
  po.update_params = up;
  po.update_values = uv;
  if (split) {
    po.n_devices = 2;
    po.devices = both;
    po.placement = TYTO_PLACE_PINNED;
    po.strict = 1;
  } else {
    po.device = CPU;
  }
  ck_assert_msg(tyto_program_compile(ctx, t->g, 1, &t->loss, &po, &t->p) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  free(up);
  free(uv);
  ck_assert_msg(tyto_nn_initialize(t->nn, t->p) == TYTO_OK, "%s",
                tyto_errmsg());
}

static void new_nn(trainer *t) {
  memset(t, 0, sizeof *t);
  t->g = tyto_graph_new();
  ck_assert_ptr_nonnull(t->g);
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = 5;
  ck_assert_int_eq(tyto_nn_new(t->g, &no, &t->nn), TYTO_OK);
}

/* The reference: tyto-train's network (the "cnn" preset through
 * mf_build), inputs and loss as tyto-train builds them, on cpu:0 alone. */
static void build_reference(trainer *t, tyto_context *ctx, int64_t batch) {
  new_nn(t);
  char err[1024];
  ck_assert_msg(mf_parse(mf_preset("cnn"), "cnn", &t->model, err, sizeof err) ==
                    0,
                "%s", err);
  int64_t xs[4] = {batch, 1, SIDE, SIDE}, ls[2] = {batch, CLASSES};
  t->x = tyto_nn_input(t->nn, 4, xs, "x");
  t->labels = tyto_nn_input(t->nn, 2, ls, "labels");
  tyto_tensor *logits = mf_build(t->model, t->nn, t->x, err, sizeof err);
  ck_assert_msg(logits != NULL, "%s", err);
  t->loss = tyto_loss_softmax_cross_entropy(logits, t->labels);
  compile(t, ctx, 0);
}

/* The same layers, one by one (the preset's lines above each), split:
 * the convolutional part in opencl:0's scope, the dense part in cpu:0's. */
static void build_split(trainer *t, tyto_context *ctx, int64_t batch) {
  new_nn(t);
  int64_t xs[4] = {batch, 1, SIDE, SIDE}, ls[2] = {batch, CLASSES};
  int outer = tyto_graph_set_device_scope(t->g, OCL);
  ck_assert_int_eq(outer, -1);
  t->x = tyto_nn_input(t->nn, 4, xs, "x");
  tyto_graph_set_device_scope(t->g, CPU);
  t->labels = tyto_nn_input(t->nn, 2, ls, "labels");
  tyto_graph_set_device_scope(t->g, OCL);
  /* conv2d name=conv filters=32 kernel=5 stride=1 padding=same
   * activation=relu */
  tyto_nn_conv c;
  memset(&c, 0, sizeof c);
  c.filters = FILTERS;
  c.kernel[0] = c.kernel[1] = 5;
  c.padding = TYTO_NN_SAME;
  t->conv = tyto_nn_activate(tyto_nn_conv2d(t->nn, "conv", t->x, &c),
                             TYTO_ACT_RELU, 0);
  /* max_pool2d kernel=2 */
  tyto_nn_pool pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel[0] = pl.kernel[1] = 2;
  t->pool = tyto_nn_max_pool2d(t->nn, t->conv, &pl);
  /* dropout rate=0.1 */
  t->drop = tyto_nn_dropout(t->nn, t->pool, 0.1);
  ck_assert_int_eq(tyto_graph_set_device_scope(t->g, CPU), OCL);
  /* fully_connected name=fc units=1024 activation=relu */
  tyto_init init = {TYTO_INIT_DEFAULT, 0, 0, 0};
  t->fc =
      tyto_nn_fully_connected(t->nn, "fc", t->drop, 1024, TYTO_ACT_RELU, init);
  /* linear name=out units=10 (the final softmax is the loss's) */
  t->logits = tyto_nn_linear(t->nn, "out", t->fc, CLASSES, 1, init);
  t->loss = tyto_loss_softmax_cross_entropy(t->logits, t->labels);
  tyto_graph_set_device_scope(t->g, outer);
  ck_assert_msg(tyto_graph_status(t->g) == TYTO_OK, "%s",
                tyto_graph_error_message(t->g));
  for (size_t i = 0; i < tyto_nn_parameter_count(t->nn); i++) {
    tyto_tensor *p = tyto_nn_parameter(t->nn, i);
    const char *name = tyto_tensor_name(p);
    if (strcmp(name, "conv.weight") == 0)
      t->conv_w = p;
    else if (strcmp(name, "fc.weight") == 0)
      t->fc_w = p;
    else if (strcmp(name, "out.weight") == 0)
      t->out_w = p;
  }
  ck_assert(t->conv_w && t->fc_w && t->out_w);
  ck_assert_int_eq(tyto_tensor_device(t->conv_w), OCL);
  ck_assert_int_eq(tyto_tensor_device(t->fc_w), CPU);
  compile(t, ctx, 1);
}

static void trainer_free(trainer *t) {
  tyto_program_free(t->p);
  tyto_optim_free(t->opt);
  tyto_nn_free(t->nn);
  tyto_graph_free(t->g);
  mf_free(t->model);
}

static size_t bytes_of(const tyto_tensor *t) {
  return (size_t)tyto_tensor_numel(t) * sizeof(float);
}

/* The parameters p uses (layers', dropout's step, Adam's), in graph
 * order, into ps (at most n); returns how many. */
static size_t used_parameters(const trainer *t, tyto_tensor **ps, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < tyto_graph_size(t->g); i++) {
    tyto_tensor *x = tyto_graph_tensor(t->g, i);
    if (tyto_tensor_kind(x) == TYTO_KIND_PARAMETER &&
        tyto_program_uses(t->p, x)) {
      ck_assert_uint_lt(k, n);
      ps[k++] = x;
    }
  }
  return k;
}

/* The parameter of `of` named like q, of q's shape. */
static tyto_tensor *same_parameter(const trainer *of, const tyto_tensor *q) {
  tyto_tensor *found = NULL;
  for (size_t i = 0; i < tyto_graph_size(of->g); i++) {
    tyto_tensor *x = tyto_graph_tensor(of->g, i);
    if (tyto_tensor_kind(x) != TYTO_KIND_PARAMETER ||
        !tyto_program_uses(of->p, x) ||
        strcmp(tyto_tensor_name(x), tyto_tensor_name(q)) != 0)
      continue;
    ck_assert_msg(found == NULL, "two parameters named '%s'",
                  tyto_tensor_name(q));
    found = x;
  }
  ck_assert_msg(found != NULL, "no parameter '%s' in the other program",
                tyto_tensor_name(q));
  ck_assert_int_eq(tyto_tensor_rank(found), tyto_tensor_rank(q));
  for (int a = 0; a < tyto_tensor_rank(q); a++)
    ck_assert_int_eq(tyto_tensor_dim(found, a), tyto_tensor_dim(q, a));
  return found;
}

/* Whether p is one of the layers' trained parameters (not Adam's state
 * or a step counter). */
static int is_layer_parameter(const trainer *t, const tyto_tensor *p) {
  for (size_t i = 0; i < tyto_nn_parameter_count(t->nn); i++)
    if (tyto_nn_parameter(t->nn, i) == p)
      return 1;
  return 0;
}

enum { MAX_PARAMS = 64 };

/* Writes every parameter of `from` into the same parameter of `to`: the
 * two programs start from the same state. */
static void copy_parameters(const trainer *from, trainer *to) {
  tyto_tensor *ps[MAX_PARAMS];
  size_t n = used_parameters(to, ps, MAX_PARAMS);
  tyto_tensor *qs[MAX_PARAMS];
  ck_assert_uint_eq(used_parameters(from, qs, MAX_PARAMS), n);
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *q = same_parameter(from, ps[i]);
    size_t b = bytes_of(q);
    float *v = malloc(b);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(tyto_program_read_parameter(from->p, q, v, b), TYTO_OK);
    ck_assert_int_eq(tyto_program_write_parameter(to->p, ps[i], v, b), TYTO_OK);
    free(v);
  }
}

/* `steps` steps on one batch; the loss of each into loss. */
static void train(trainer *t, const float *x, const float *y, int64_t batch,
                  int steps, float *loss) {
  ck_assert_int_eq(
      tyto_program_set_input(t->p, t->x, x,
                             (size_t)(batch * SIDE * SIDE) * sizeof *x),
      TYTO_OK);
  ck_assert_int_eq(
      tyto_program_set_input(t->p, t->labels, y,
                             (size_t)(batch * CLASSES) * sizeof *y),
      TYTO_OK);
  for (int s = 0; s < steps; s++) {
    ck_assert_msg(tyto_program_run(t->p) == TYTO_OK, "step %d: %s", s + 1,
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(t->p, 0, &loss[s], sizeof *loss),
                     TYTO_OK);
    ck_assert_msg(isfinite(loss[s]), "step %d: loss %g", s + 1,
                  (double)loss[s]);
  }
}

/* The batch: Fashion-MNIST's first test images, scaled to [0, 1], and
 * their one-hot labels; deterministic synthetic ones without the data. */
static void make_batch(int64_t batch, float *x, float *y) {
  const char *dir = getenv("TYTO_FASHION_MNIST");
  if (!dir)
    dir = "/usr/share/datasets/fashion-mnist";
  memset(y, 0, (size_t)(batch * CLASSES) * sizeof *y);
  tyto_dataset *d = NULL;
  if (access(dir, R_OK) == 0 &&
      tyto_dataset_load_dir(dir, "t10k", CLASSES, &d) == TYTO_OK) {
    ck_assert_int_ge(tyto_dataset_count(d), batch);
    ck_assert_int_eq(tyto_dataset_item_size(d), SIDE * SIDE);
    ck_assert_msg(tyto_dataset_read_images(d, 0, batch, TYTO_F32, 1.0 / 255, x,
                                           (size_t)(batch * SIDE * SIDE) *
                                               sizeof *x) == TYTO_OK,
                  "%s", tyto_errmsg());
    for (int64_t i = 0; i < batch; i++)
      y[i * CLASSES + tyto_dataset_label(d, i)] = 1;
    tyto_dataset_free(d);
    return;
  }
  fprintf(stderr, "test_split: no Fashion-MNIST in %s: synthetic images\n",
          dir);
  /* A bright square per class on a dark background, with noise: mostly
   * zeros, as the real images are. */
  uint32_t seed = 12345;
  for (int64_t i = 0; i < batch; i++) {
    int64_t c = i % CLASSES, r0 = 2 + 2 * c, c0 = 20 - 2 * c;
    y[i * CLASSES + c] = 1;
    for (int64_t r = 0; r < SIDE; r++)
      for (int64_t k = 0; k < SIDE; k++) {
        seed = seed * 1103515245u + 12345u;
        float noise = (float)((seed >> 9) % 1000) / 4000.0f;
        int in = r >= r0 && r < r0 + 8 && k >= c0 && k < c0 + 6;
        x[(i * SIDE + r) * SIDE + k] = in ? 0.75f + noise : 0.0f;
      }
  }
}

/* ---------------------------------------------------------------------- */
/* Where the split ran                                                      */

static void check_placement(const trainer *t, int64_t batch) {
  const tyto_program *p = t->p;
  ck_assert_uint_eq(tyto_program_device_count(p), 2);
  /* Sources, the layers' outputs the passes kept, the loss. */
  ck_assert_int_eq(tyto_program_tensor_device(p, t->x), OCL);
  ck_assert_int_eq(tyto_program_tensor_device(p, t->conv_w), OCL);
  ck_assert_int_eq(tyto_program_tensor_device(p, t->labels), CPU);
  ck_assert_int_eq(tyto_program_tensor_device(p, t->fc_w), CPU);
  ck_assert_int_eq(tyto_program_tensor_device(p, t->out_w), CPU);
  ck_assert_int_eq(tyto_program_tensor_device(p, t->loss), CPU);
  const tyto_tensor *ocl_side[3] = {t->conv, t->pool, t->drop};
  const tyto_tensor *cpu_side[2] = {t->fc, t->logits};
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    int d = tyto_program_tensor_device(p, ocl_side[i]);
    ck_assert_msg(d == OCL || d == -1, "conv layer output %d on %d", i, d);
    seen += d == OCL;
  }
  for (int i = 0; i < 2; i++) {
    int d = tyto_program_tensor_device(p, cpu_side[i]);
    ck_assert_msg(d == CPU || d == -1, "dense layer output %d on %d", i, d);
    seen += d == CPU;
  }
  ck_assert_int_gt(seen, 0);
  /* Each parameter's Adam update on its parameter's device. */
  size_t nu = tyto_optim_update_count(t->opt);
  for (size_t i = 0; i < nu; i++) {
    tyto_tensor *param = tyto_optim_update_params(t->opt)[i];
    tyto_tensor *value = tyto_optim_update_values(t->opt)[i];
    int want = tyto_program_tensor_device(p, param);
    int got = tyto_program_tensor_device(p, value);
    ck_assert_msg(got == want || got == -1, "update of '%s' on %d, it on %d",
                  tyto_tensor_name(param), got, want);
  }

  /* Both devices compute, nothing fell back. */
  for (size_t i = 0; i < 2; i++) {
    tyto_program_device_stats s = {.struct_size = sizeof s};
    ck_assert_int_eq(tyto_program_device_stats_get(p, i, &s), TYTO_OK);
    ck_assert_uint_eq(s.device, i == 0 ? CPU : OCL);
    ck_assert_str_eq(s.id, i == 0 ? "cpu:0" : "opencl:0");
    ck_assert_uint_gt(s.nodes, 0);
    ck_assert_uint_gt(s.kernels, 0);
    ck_assert_uint_eq(s.fallbacks, 0);
  }

  /* The copies: the dropped-out activations to the CPU and their
   * gradient back; anything else is a scalar (Adam's bias corrections),
   * never a parameter or a weight's gradient. */
  size_t nc = tyto_program_copy_count(p);
  ck_assert_uint_gt(nc, 0);
  uint64_t act = (uint64_t)batch * FILTERS * (SIDE / 2) * (SIDE / 2) * 4;
  int fwd = 0, bwd = 0;
  uint64_t total = 0;
  tyto_program_copy cs[16];
  ck_assert_uint_le(nc, 16);
  for (size_t i = 0; i < nc; i++) {
    tyto_program_copy *c = &cs[i];
    c->struct_size = sizeof *c;
    ck_assert_int_eq(tyto_program_copy_get(p, i, c), TYTO_OK);
    ck_assert_uint_ne(c->from, c->to);
    ck_assert_uint_gt(c->bytes, 0);
    ck_assert_ptr_nonnull(c->op);
    ck_assert_ptr_nonnull(c->route);
    if (c->bytes == act) {
      fwd += c->from == OCL && c->to == CPU;
      bwd += c->from == CPU && c->to == OCL;
    } else {
      ck_assert_msg(c->bytes <= 64, "copy %zu (%s): %llu bytes", i, c->op,
                    (unsigned long long)c->bytes);
    }
    total += c->bytes;
  }
  ck_assert_int_eq(fwd, 1);
  ck_assert_int_eq(bwd, 1);

  /* The report: both devices, every copy with its bytes, their sum. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(tyto_program_report_placement(p, f), TYTO_OK);
  fclose(f);
  char want[256];
  snprintf(want, sizeof want,
           "placement: 2 devices, %zu cop%s between them (%.3f MiB per run)",
           nc, nc == 1 ? "y" : "ies", (double)total / (1024.0 * 1024.0));
  ck_assert_msg_contains(text, want);
  ck_assert_msg_contains(text, "\n  cpu:0 ");
  ck_assert_msg_contains(text, "\n  opencl:0 ");
  for (size_t i = 0; i < nc; i++) {
    snprintf(want, sizeof want, "  copy #%lld", (long long)cs[i].tensor);
    ck_assert_msg_contains(text, want);
    snprintf(want, sizeof want, "(%s) %s -> %s, %llu bytes, %s\n", cs[i].op,
             cs[i].from == CPU ? "cpu:0" : "opencl:0",
             cs[i].to == CPU ? "cpu:0" : "opencl:0",
             (unsigned long long)cs[i].bytes, cs[i].route);
    ck_assert_msg_contains(text, want);
  }
  size_t lines = 0;
  for (const char *s = text; (s = strstr(s, "\n  copy ")) != NULL; s++)
    lines++;
  ck_assert_uint_eq(lines, nc);
  free(text);
}

/* ---------------------------------------------------------------------- */
/* The comparison                                                          */

START_TEST(split_cnn_step_follows_one_device) {
  int64_t batch = valgrind() ? VG_BATCH : BATCH;
  int steps = valgrind() ? VG_STEPS : STEPS;
  char why[1024];
  tyto_context *ctx = two_devices(why, sizeof why);
  ck_assert_msg(ctx != NULL, "%s", why);
  float *x = malloc((size_t)(batch * SIDE * SIDE) * sizeof *x);
  float *y = malloc((size_t)(batch * CLASSES) * sizeof *y);
  ck_assert(x && y);
  make_batch(batch, x, y);

  /* The initial state (r0, never run) copied into every run: the
   * reference twice, each built and compiled afresh, and the split. */
  trainer r0, r1, r2, sp;
  float l1[STEPS], l2[STEPS], ls[STEPS];
  build_reference(&r0, ctx, batch);
  build_reference(&r1, ctx, batch);
  copy_parameters(&r0, &r1);
  train(&r1, x, y, batch, steps, l1);
  build_reference(&r2, ctx, batch);
  copy_parameters(&r0, &r2);
  train(&r2, x, y, batch, steps, l2);
  build_split(&sp, ctx, batch);
  check_placement(&sp, batch);
  copy_parameters(&r0, &sp);
  trainer_free(&r0);
  train(&sp, x, y, batch, steps, ls);

  /* It learns. */
  ck_assert_msg(l1[steps - 1] < l1[0], "loss %g -> %g", (double)l1[0],
                (double)l1[steps - 1]);

  double loss_dev = 0;
  for (int s = 0; s < steps; s++) {
    ck_assert_msg(memcmp(&l1[s], &l2[s], sizeof l1[s]) == 0,
                  "one device, step %d: loss %.9g then %.9g", s + 1,
                  (double)l1[s], (double)l2[s]);
    double d = fabs((double)ls[s] - l1[s]) / fabs((double)l1[s]);
    ck_assert_msg(d <= LOSS_TOL,
                  "step %d: loss %.9g split, %.9g on one device (%.3g "
                  "relative, more than %g)",
                  s + 1, (double)ls[s], (double)l1[s], d, LOSS_TOL);
    if (d > loss_dev)
      loss_dev = d;
  }

  /* Every parameter: the one-device runs bit for bit; the split within
   * the tolerances of its kind. */
  tyto_tensor *ps[MAX_PARAMS];
  size_t n = used_parameters(&sp, ps, MAX_PARAMS);
  double lr_steps = sp.lr * steps, worst_w = 0, worst_m = 0;
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *q1 = same_parameter(&r1, ps[i]);
    tyto_tensor *q2 = same_parameter(&r2, ps[i]);
    const char *name = tyto_tensor_name(q1);
    size_t b = bytes_of(q1), m = b / sizeof(float);
    float *a = malloc(b), *c = malloc(b), *s = malloc(b);
    ck_assert(a && c && s);
    ck_assert_int_eq(tyto_program_read_parameter(r1.p, q1, a, b), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_parameter(r2.p, q2, c, b), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_parameter(sp.p, ps[i], s, b), TYTO_OK);
    ck_assert_msg(memcmp(a, c, b) == 0, "one device: '%s' differs run to run",
                  name);
    double big = 0, dev = 0;
    for (size_t k = 0; k < m; k++) {
      if (fabs((double)a[k]) > big)
        big = fabs((double)a[k]);
      if (fabs((double)s[k] - a[k]) > dev)
        dev = fabs((double)s[k] - a[k]);
    }
    if (tyto_tensor_rank(q1) == 0) {
      /* The step counters. */
      ck_assert_msg(dev == 0, "'%s': split %g, one device %g", name,
                    (double)s[0], (double)a[0]);
    } else if (is_layer_parameter(&sp, ps[i])) {
      double d = dev / lr_steps;
      ck_assert_msg(d <= WEIGHT_TOL,
                    "'%s' after %d steps: split and one device differ by "
                    "%.3g, %.3g lr x steps (more than %g)",
                    name, steps, dev, d, WEIGHT_TOL);
      worst_w = d > worst_w ? d : worst_w;
    } else {
      double d = big > 0 ? dev / big : dev;
      ck_assert_msg(d <= MOMENT_TOL,
                    "'%s' after %d steps: split and one device differ by "
                    "%.3g, %.3g of its largest magnitude %.3g (more than %g)",
                    name, steps, dev, d, big, MOMENT_TOL);
      worst_m = d > worst_m ? d : worst_m;
    }
    free(a);
    free(c);
    free(s);
  }
  fprintf(stderr,
          "test_split: %d steps, batch %lld: the loss within %.3g, the "
          "weights within %.3g lr x steps, Adam's moments within %.3g of "
          "their largest magnitude\n",
          steps, (long long)batch, loss_dev, worst_w, worst_m);

  trainer_free(&sp);
  trainer_free(&r2);
  trainer_free(&r1);
  free(x);
  free(y);
  tyto_context_free(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("split");
  TCase *tc = tcase_create("cnn");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, split_cnn_step_follows_one_device);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* On a machine with empty caches PoCL builds its kernels for valgrind's
   * CPU for about nine minutes; CI's valgrind pass skips this test (the
   * copies between devices are checked under valgrind by
   * compile/test_placement). TYTO_TEST_SPLIT_VALGRIND=1 runs it anyway. */
  if (valgrind() && !getenv("TYTO_TEST_SPLIT_VALGRIND")) {
    printf("test_split: skipped under valgrind (set "
           "TYTO_TEST_SPLIT_VALGRIND=1 to run it)\n");
    return 77;
  }
  /* Asked in child processes (test_probe_devices): the CPU alone must
   * open; without an OpenCL device beside it the test is skipped. */
  char why[1024];
  int rc = test_probe_devices("cpu:0", why, sizeof why);
  if (rc != 0) {
    printf("test_split: cpu:0 alone does not open: %s\n",
           why[0] ? why : "the probe failed");
    return 1;
  }
  rc = test_probe_devices("cpu:0,opencl:0", why, sizeof why);
  if (rc == 77)
    printf("test_split: skipped: no OpenCL device: %s\n", why);
  else if (rc != 0)
    printf("test_split: %s\n", why[0] ? why : "the probe failed");
  return rc != 0 ? rc : test_run(suite());
}
