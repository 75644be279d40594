/*
 * tyto against PyTorch, step by step: the CNN and the MLP of tyto-train
 * trained by both on the same Fashion-MNIST images, from the same initial
 * weights, in the same batch order, with the same dropout masks, must
 * agree to rounding at every step.
 *
 * tests/torch/torch_trajectory.py (run with Debian's /usr/bin/python3 and
 * its python3-torch) trains the network with PyTorch and writes, as
 * safetensors, the initial parameters (PyTorch's default initialisation),
 * the batch order, the dropout masks, and per step the loss, each
 * gradient's sum of squares and each parameter's sum and sum of squares
 * after the update, then the final parameters. This test builds the same
 * network with <tyto/nn.h> (the layers and names of tyto-train's presets;
 * dropout as tyto_nn_dropout computes it, x * keep * (1 / (1 - rate)), with
 * the keep-mask fed as an input), restores the initial parameters with
 * tyto_checkpoint_restore_parameters(), trains with <tyto/optim.h> and
 * compares every recorded value at every step, then every final parameter.
 *
 * Covered: conv2d (5x5, SAME), ReLU, max_pool2d, dropout, fully_connected,
 * linear, softmax cross-entropy; Adam as tyto-train runs it by default (lr
 * 1e-3, constant schedule, no weight decay), SGD (plain, and Nesterov with
 * L2 weight decay) and AdamW (decoupled decay). Three more cases need no
 * PyTorch: tyto_nn_dropout inside a whole training step is the mask-input
 * network fed the masks the layer drew (same forward and backward mask,
 * a fresh one each step); a batch padded with zero rows, as tyto-train's
 * last one is, trains as the real rows alone; and Adam's float32 bias
 * corrections are exact to float32 rounding.
 *
 * Tolerances (PyTorch runs in the dtype tyto runs in):
 *   float64   loss, gradients' and parameters' sums of squares: relative
 *             1e-10 at every step; parameter sums: 1e-10 of
 *             1 + sqrt(n * sum of squares); final parameters:
 *             max |tyto - torch| <= 1e-10 (1 + max |torch|). The only
 *             differences are summation orders (about 1e-16 per operation;
 *             300 steps of the CNN stay below 3e-13).
 *   float32   12 steps: loss 1e-6, gradients' sums of squares 1e-5,
 *             parameter sums 3e-7, parameters' sums of squares 3e-7, final
 *             parameters 1e-4 (Adam's first updates of parameters whose
 *             gradient is near eps move by lr g / (|g| + eps), which float32
 *             rounding of g changes by that much; PyTorch's float32 run
 *             differs from its float64 run by as much).
 * A real difference (a wrong rule, a layer that differs from PyTorch's)
 * shows at the first step by orders of magnitude more.
 *
 * Skips (exit 77) under valgrind (TYTO_TEST_UNDER_VALGRIND: minutes of
 * training), and, after running the cases that need no PyTorch, when
 * /usr/bin/python3 cannot import torch or the dataset is missing
 * (TYTO_FASHION_MNIST, default /usr/share/datasets/fashion-mnist).
 *
 * Run by hand with arguments to compare one configuration and print every
 * step (the first step and value where they part is where to look):
 *   tests/torch/test_vs_torch --model cnn --optimizer adam --steps 300 \
 *       --batch 64 --limit 6400 [--dropout 0.1] [--lr X] [--momentum X] \
 *       [--nesterov] [--weight-decay X] [--seed N] [--dtype f32] \
 *       [--torch-dtype f64] [--tol X] [--detail] [--dump FILE]
 * (--torch-dtype f64 with --dtype f32: tyto in float32 against PyTorch in
 * float64; --detail: every parameter at every step; --dump: tyto's final
 * parameters as safetensors.)
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#include <tyto/ad.h>

#ifndef TORCH_SCRIPT
#error "TORCH_SCRIPT must name tests/torch/torch_trajectory.py"
#endif

#define TORCH_PYTHON "/usr/bin/python3"
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

enum { MAX_PARAMS = 8, CLASSES = 10 };

typedef struct tolerances {
  double loss, grad, sum, ss, final;
} tolerances;

static const tolerances tol_f64 = {1e-10, 1e-10, 1e-10, 1e-10, 1e-10};
static const tolerances tol_f32 = {1e-6, 1e-5, 3e-7, 3e-7, 1e-4};

/* One run to compare. */
typedef struct vt_config {
  const char *model;     /* "cnn", "mlp" */
  const char *optimizer; /* "adam", "adamw", "sgd" */
  double lr;             /* 0: the optimiser's default */
  double momentum, weight_decay;
  int nesterov;
  int batch, steps, limit;
  double dropout; /* CNN only */
  int seed;
  int f32;          /* tyto (and PyTorch) in float32 */
  int ref_f64;      /* with f32: PyTorch in float64 all the same */
  int verbose;      /* 1: every step; 2: every parameter too */
  const char *dump; /* save tyto's final parameters there */
  tolerances tol;
} vt_config;

static const char *data_dir(void) {
  const char *d = getenv("TYTO_FASHION_MNIST");
  return d && *d ? d : DEFAULT_DATA;
}

/* Why the PyTorch comparisons cannot run; NULL when they can. */
static const char *torch_missing(void) {
  static char why[512];
  if (access(TORCH_PYTHON, X_OK) != 0)
    return TORCH_PYTHON " not found (install python3-torch)";
  int rc = system(TORCH_PYTHON " -c 'import torch' >/dev/null 2>&1");
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
    return TORCH_PYTHON " cannot import torch (install python3-torch)";
  char gz[1024], plain[1024];
  snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", data_dir());
  snprintf(plain, sizeof plain, "%s/train-images-idx3-ubyte", data_dir());
  if (access(gz, R_OK) != 0 && access(plain, R_OK) != 0) {
    snprintf(why, sizeof why,
             "no Fashion-MNIST in %s (install dataset-fashion-mnist or set "
             "TYTO_FASHION_MNIST=DIR)",
             data_dir());
    return why;
  }
  return NULL;
}

/* ---------------------------------------------------------------------- */
/* The reference run                                                       */

typedef struct reference {
  char dir[64];
  tyto_checkpoint *init, *final, *run;
  size_t n_params;
  char names[MAX_PARAMS][64];
  const int64_t *order;    /* [steps, batch] */
  const uint64_t *mask;    /* [steps, words] or NULL */
  int64_t mask_words;      /* per step */
  const double *loss;      /* [steps] */
  const double *grad_ss;   /* [steps, n_params] */
  const double *param_sum; /* [steps, n_params] */
  const double *param_ss;  /* [steps, n_params] */
} reference;

static const void *ref_find(const tyto_checkpoint *ck, const char *name,
                            tyto_checkpoint_dtype dtype, int64_t want_numel,
                            int64_t *last_dim) {
  tyto_checkpoint_dtype dt;
  int rank;
  const int64_t *shape;
  const void *data;
  ck_assert_msg(tyto_checkpoint_find(ck, name, &dt, &rank, &shape, &data,
                                     NULL) == TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_int_eq(dt, dtype);
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= shape[i];
  if (want_numel >= 0)
    ck_assert_int_eq(n, want_numel);
  if (last_dim)
    *last_dim = rank > 0 ? shape[rank - 1] : 1;
  return data;
}

/* Runs torch_trajectory.py for c into a fresh directory and loads what it
 * wrote. */
static void reference_make(const vt_config *c, reference *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/tmp/tyto-vs-torch-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(r->dir));
  char cmd[2048];
  /* One thread, no OpenMP spinning, and no returning PyTorch's big
   * temporaries to the system at every step (which costs more system time
   * than the arithmetic): the machine is shared with the other tests. */
  int n = snprintf(
      cmd, sizeof cmd,
      "OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=1073741824 "
      "MALLOC_TRIM_THRESHOLD_=1073741824 " TORCH_PYTHON
      " '%s' --out '%s' --data '%s' --model %s --optimizer %s --batch %d "
      "--steps %d --limit %d --dropout %.17g --seed %d --momentum %.17g "
      "--dtype %s --threads 1%s",
      TORCH_SCRIPT, r->dir, data_dir(), c->model, c->optimizer, c->batch,
      c->steps, c->limit, c->dropout, c->seed, c->momentum,
      c->f32 && !c->ref_f64 ? "f32" : "f64", c->nesterov ? " --nesterov" : "");
  if (c->lr > 0)
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --lr %.17g", c->lr);
  if (c->weight_decay > 0)
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --weight-decay %.17g",
                  c->weight_decay);
  snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1");
  char *out = NULL;
  int rc = test_popen(cmd, &out);
  ck_assert_msg(rc == 0, "%s\nexit status %d:\n%s", cmd, rc, out);
  free(out);

  char path[128];
  tyto_checkpoint **cks[3] = {&r->init, &r->final, &r->run};
  const char *files[3] = {"init", "final", "run"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s.safetensors", r->dir, files[i]);
    ck_assert_msg(tyto_checkpoint_load(path, cks[i]) == TYTO_OK, "%s",
                  tyto_errmsg());
  }
  const char *names = tyto_checkpoint_get_meta(r->run, "params");
  ck_assert_ptr_nonnull(names);
  for (const char *p = names; *p;) {
    size_t len = strcspn(p, ",");
    ck_assert_uint_lt(r->n_params, MAX_PARAMS);
    ck_assert_uint_lt(len, sizeof r->names[0]);
    memcpy(r->names[r->n_params], p, len);
    r->names[r->n_params++][len] = '\0';
    p += len + (p[len] == ',');
  }
  int64_t s = c->steps, np = (int64_t)r->n_params;
  r->order = ref_find(r->run, "order", TYTO_CHECKPOINT_I64, s * c->batch, NULL);
  r->loss = ref_find(r->run, "loss", TYTO_CHECKPOINT_F64, s, NULL);
  r->grad_ss = ref_find(r->run, "grad_ss", TYTO_CHECKPOINT_F64, s * np, NULL);
  r->param_sum =
      ref_find(r->run, "param_sum", TYTO_CHECKPOINT_F64, s * np, NULL);
  r->param_ss = ref_find(r->run, "param_ss", TYTO_CHECKPOINT_F64, s * np, NULL);
  if (!strcmp(c->model, "cnn") && c->dropout > 0)
    r->mask = ref_find(r->run, "mask", TYTO_CHECKPOINT_U64, -1, &r->mask_words);
}

static void reference_free(reference *r) {
  tyto_checkpoint_free(r->init);
  tyto_checkpoint_free(r->final);
  tyto_checkpoint_free(r->run);
  const char *files[3] = {"init", "final", "run"};
  char path[128];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s.safetensors", r->dir, files[i]);
    unlink(path);
  }
  rmdir(r->dir);
}

/* ---------------------------------------------------------------------- */
/* tyto's run                                                              */

typedef struct trainer {
  tyto_context *ctx;
  tyto_graph *g;
  tyto_nn *nn;
  tyto_optim *opt;
  tyto_program *p;
  tyto_tensor *x, *labels, *mask, *loss;
  tyto_tensor *pooled, *dropped;   /* tyto_nn_dropout's input and output */
  tyto_tensor *params[MAX_PARAMS]; /* in the reference's order */
  size_t n_params;
  tyto_dtype dtype;
} trainer;

/* tools/train/model_file.c's presets with tyto_nn layers: "cnn" is conv 5x5
 * 32 same + ReLU, max_pool 2x2, dropout (rate > 0), fully_connected 1024
 * ReLU, linear 10; "mlp" is linear 128 + ReLU, linear 10. The dropout is
 * tyto_nn_dropout when `layer`, else its arithmetic on a mask input. */
static tyto_tensor *build_net(trainer *t, const vt_config *c, int layer) {
  int64_t b = c->batch;
  tyto_init dflt = {TYTO_INIT_DEFAULT, 0, 0, 0};
  if (!strcmp(c->model, "mlp")) {
    t->x = tyto_nn_input(t->nn, 2, (const int64_t[]){b, 784}, "x");
    tyto_tensor *h = tyto_nn_activate(
        tyto_nn_linear(t->nn, "fc1", t->x, 128, 1, dflt), TYTO_ACT_RELU, 0);
    return tyto_nn_linear(t->nn, "fc2", h, CLASSES, 1, dflt);
  }
  t->x = tyto_nn_input(t->nn, 4, (const int64_t[]){b, 1, 28, 28}, "x");
  tyto_nn_conv conv = {0};
  conv.filters = 32;
  conv.kernel[0] = conv.kernel[1] = 5;
  conv.stride[0] = conv.stride[1] = 1;
  conv.padding = TYTO_NN_SAME;
  tyto_tensor *h = tyto_nn_activate(tyto_nn_conv2d(t->nn, "conv", t->x, &conv),
                                    TYTO_ACT_RELU, 0);
  tyto_nn_pool pool = {{2, 2}, {0, 0}, TYTO_NN_VALID, {0, 0}};
  h = tyto_nn_max_pool2d(t->nn, h, &pool);
  if (c->dropout > 0 && layer) {
    t->pooled = h;
    h = t->dropped = tyto_nn_dropout(t->nn, h, c->dropout);
  } else if (c->dropout > 0) {
    t->mask = tyto_nn_input(t->nn, 4, tyto_tensor_shape(h), "mask");
    h = tyto_mul_scalar(tyto_mul(h, t->mask), 1.0 / (1.0 - c->dropout));
  }
  h = tyto_nn_fully_connected(t->nn, "fc", h, 1024, TYTO_ACT_RELU, dflt);
  return tyto_nn_linear(t->nn, "out", h, CLASSES, 1, dflt);
}

/* Builds and compiles c's training step. Outputs: the loss, each gradient's
 * sum of squares, and with `layer` the dropout's input and output. The
 * parameters start at the reference's initial values, or without one at
 * tyto's (tyto_nn_initialize). */
static void trainer_make(trainer *t, const vt_config *c, const reference *r,
                         int layer) {
  memset(t, 0, sizeof *t);
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &t->ctx), TYTO_OK);
  t->dtype = c->f32 ? TYTO_F32 : TYTO_F64;
  t->g = tyto_graph_new();
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.dtype = t->dtype;
  no.seed = (uint64_t)c->seed;
  ck_assert_int_eq(tyto_nn_new(t->g, &no, &t->nn), TYTO_OK);
  tyto_tensor *logits = build_net(t, c, layer);
  t->labels =
      tyto_nn_input(t->nn, 2, (const int64_t[]){c->batch, CLASSES}, "labels");
  t->loss = tyto_loss_softmax_cross_entropy(logits, t->labels);
  ck_assert_msg(tyto_graph_status(t->g) == TYTO_OK, "%s",
                tyto_graph_error_message(t->g));

  /* The reference's parameters are the network's, in its order. */
  t->n_params = tyto_nn_parameter_count(t->nn);
  ck_assert_uint_le(t->n_params, MAX_PARAMS);
  for (size_t i = 0; i < t->n_params; i++) {
    if (!r) {
      t->params[i] = tyto_nn_parameter(t->nn, i);
      continue;
    }
    ck_assert_uint_eq(t->n_params, r->n_params);
    for (size_t j = 0; j < t->n_params; j++)
      if (!strcmp(tyto_tensor_name(tyto_nn_parameter(t->nn, j)), r->names[i]))
        t->params[i] = tyto_nn_parameter(t->nn, j);
    ck_assert_msg(t->params[i] != NULL, "no parameter '%s' in tyto's net",
                  r->names[i]);
  }
  tyto_tensor *grads[MAX_PARAMS];
  tyto_grads(t->loss, t->n_params, t->params, grads);

  tyto_optim_options oo;
  int kind = tyto_optim_kind_from_name(c->optimizer);
  ck_assert_int_ge(kind, 0);
  tyto_optim_options_init(&oo, (tyto_optim_kind)kind);
  if (c->lr > 0)
    oo.lr = c->lr;
  oo.momentum = c->momentum;
  oo.nesterov = c->nesterov;
  if (c->weight_decay > 0)
    oo.weight_decay = c->weight_decay;
  ck_assert_msg(tyto_optim_build(&oo, t->n_params, t->params, grads, &t->opt) ==
                    TYTO_OK,
                "%s", tyto_errmsg());

  tyto_tensor *outs[3 + MAX_PARAMS];
  size_t n_out = 0;
  outs[n_out++] = t->loss;
  for (size_t i = 0; i < t->n_params; i++)
    outs[n_out++] = tyto_sum(tyto_square(grads[i]), 0, NULL, 0);
  if (t->pooled) {
    outs[n_out++] = t->pooled;
    outs[n_out++] = t->dropped;
  }
  ck_assert_msg(tyto_graph_status(t->g) == TYTO_OK, "%s",
                tyto_graph_error_message(t->g));
  /* The optimiser's updates, and the network's (dropout's step). */
  size_t n_opt = tyto_optim_update_count(t->opt);
  size_t n_nn = tyto_nn_update_count(t->nn);
  tyto_tensor **up = malloc((n_opt + n_nn + 1) * sizeof *up);
  tyto_tensor **uv = malloc((n_opt + n_nn + 1) * sizeof *uv);
  ck_assert(up && uv);
  for (size_t i = 0; i < n_opt; i++) {
    up[i] = tyto_optim_update_params(t->opt)[i];
    uv[i] = tyto_optim_update_values(t->opt)[i];
  }
  for (size_t i = 0; i < n_nn; i++) {
    up[n_opt + i] = tyto_nn_update_params(t->nn)[i];
    uv[n_opt + i] = tyto_nn_update_values(t->nn)[i];
  }
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = n_opt + n_nn;
  po.update_params = up;
  po.update_values = uv;
  ck_assert_msg(tyto_program_compile(t->ctx, t->g, n_out, outs, &po, &t->p) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  free(up);
  free(uv);
  /* The optimiser's state starts at zero. */
  if (!r) {
    ck_assert_msg(tyto_nn_initialize(t->nn, t->p) == TYTO_OK, "%s",
                  tyto_errmsg());
  } else if (!c->ref_f64) {
    ck_assert_msg(tyto_checkpoint_restore_parameters(r->init, t->p, t->n_params,
                                                     t->params) == TYTO_OK,
                  "%s", tyto_errmsg());
  } else {
    for (size_t i = 0; i < t->n_params; i++) {
      int64_t n = tyto_tensor_numel(t->params[i]);
      const double *v =
          ref_find(r->init, r->names[i], TYTO_CHECKPOINT_F64, n, NULL);
      float *f = malloc((size_t)n * sizeof *f);
      ck_assert_ptr_nonnull(f);
      for (int64_t k = 0; k < n; k++)
        f[k] = (float)v[k];
      ck_assert_int_eq(tyto_program_write_parameter(t->p, t->params[i], f,
                                                    (size_t)n * sizeof *f),
                       TYTO_OK);
      free(f);
    }
  }
}

static void trainer_free(trainer *t) {
  tyto_program_free(t->p);
  tyto_optim_free(t->opt);
  tyto_nn_free(t->nn);
  tyto_graph_free(t->g);
  tyto_context_free(t->ctx);
}

/* Reads n values of output i, or of parameter p when p is not NULL, as
 * doubles. */
static void read_values(trainer *t, size_t i, tyto_tensor *p, double *v,
                        int64_t n) {
  size_t es = tyto_dtype_size(t->dtype), bytes = (size_t)n * es;
  void *buf = t->dtype == TYTO_F64 ? (void *)v : malloc(bytes);
  ck_assert_ptr_nonnull(buf);
  tyto_status s = p ? tyto_program_read_parameter(t->p, p, buf, bytes)
                    : tyto_program_read_output(t->p, i, buf, bytes);
  ck_assert_msg(s == TYTO_OK, "%s", tyto_errmsg());
  if (buf != v) {
    for (int64_t k = 0; k < n; k++)
      v[k] = ((const float *)buf)[k];
    free(buf);
  }
}

/* Binds v (n doubles, converted in place to the trainer's dtype). */
static void bind(trainer *t, tyto_tensor *in, double *v, int64_t n) {
  size_t bytes = (size_t)n * sizeof(double);
  if (t->dtype == TYTO_F32) {
    float *f = (float *)v;
    for (int64_t i = 0; i < n; i++)
      f[i] = (float)v[i];
    bytes = (size_t)n * sizeof(float);
  }
  ck_assert_int_eq(tyto_program_set_input(t->p, in, v, bytes), TYTO_OK);
}

/* ---------------------------------------------------------------------- */
/* The comparison                                                          */

static double rel_err(double a, double b) {
  double d = fabs(a - b), s = fabs(b) > fabs(a) ? fabs(b) : fabs(a);
  return s > 0 ? d / s : d;
}

/* The worst error of each kind over the run, and where one first exceeded
 * its tolerance. */
typedef struct verdict {
  double loss, grad, psum, pss, final;
  int64_t bad_step;
  char bad[512];
} verdict;

static void note(verdict *v, int64_t step, double err, double tol,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void note(verdict *v, int64_t step, double err, double tol,
                 const char *fmt, ...) {
  if (!(err <= tol) && v->bad_step < 0) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v->bad, sizeof v->bad, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof v->bad)
      snprintf(v->bad + n, sizeof v->bad - (size_t)n,
               ": error %.3g > tolerance %.3g", err, tol);
    v->bad_step = step;
  }
}

static double max_d(double a, double b) {
  return a > b ? a : b;
}

/* Runs c through PyTorch and tyto and compares them into *v. */
static void compare(const vt_config *c, verdict *v) {
  const tolerances *tol = &c->tol;
  reference r;
  reference_make(c, &r);
  trainer t;
  trainer_make(&t, c, &r, 0);
  memset(v, 0, sizeof *v);
  v->bad_step = -1;

  tyto_dataset *d = NULL;
  ck_assert_msg(tyto_dataset_load_dir(data_dir(), "train", CLASSES, &d) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_int_ge(tyto_dataset_count(d), c->limit);
  int64_t item = tyto_dataset_item_size(d), b = c->batch;
  double *x = malloc((size_t)(b * item) * sizeof *x);
  double *y = malloc((size_t)(b * CLASSES) * sizeof *y);
  int64_t mask_n = t.mask ? tyto_tensor_numel(t.mask) : 0;
  double *mask = malloc((size_t)(mask_n ? mask_n : 1) * sizeof *mask);
  int64_t most = 0;
  for (size_t i = 0; i < t.n_params; i++)
    if (tyto_tensor_numel(t.params[i]) > most)
      most = tyto_tensor_numel(t.params[i]);
  double *pv = malloc((size_t)most * sizeof *pv);
  ck_assert(x && y && mask && pv);
  if (t.mask)
    ck_assert_int_ge(r.mask_words * 64, mask_n);

  if (c->verbose)
    printf("%5s %12s %10s %10s %10s %10s\n", "step", "loss", "loss err",
           "|g|^2 err", "sum err", "ss err");
  for (int64_t s = 0; s < c->steps; s++) {
    const int64_t *idx = r.order + s * b;
    memset(y, 0, (size_t)(b * CLASSES) * sizeof *y);
    int64_t bad = 0;
    for (int64_t i = 0; i < b; i++) {
      if (idx[i] < 0 || idx[i] >= c->limit ||
          tyto_dataset_read_images(d, idx[i], 1, TYTO_F64, 1.0 / 255,
                                   x + i * item,
                                   (size_t)item * sizeof *x) != TYTO_OK) {
        bad++;
        continue;
      }
      y[i * CLASSES + tyto_dataset_label(d, idx[i])] = 1;
    }
    ck_assert_msg(bad == 0, "step %lld: %lld images not read: %s",
                  (long long)s + 1, (long long)bad, tyto_errmsg());
    bind(&t, t.x, x, b * item);
    bind(&t, t.labels, y, b * CLASSES);
    if (t.mask) {
      const uint64_t *w = r.mask + s * r.mask_words;
      for (int64_t i = 0; i < mask_n; i++)
        mask[i] = (double)((w[i / 64] >> (i % 64)) & 1u);
      bind(&t, t.mask, mask, mask_n);
    }
    ck_assert_msg(tyto_program_run(t.p) == TYTO_OK, "%s", tyto_errmsg());

    double out[1 + MAX_PARAMS];
    for (size_t i = 0; i <= t.n_params; i++)
      read_values(&t, i, NULL, &out[i], 1);
    double e = rel_err(out[0], r.loss[s]), eg = 0, es = 0, ess = 0;
    v->loss = max_d(v->loss, e);
    note(v, s, e, tol->loss, "step %lld: loss %.17g, PyTorch's %.17g",
         (long long)s + 1, out[0], r.loss[s]);
    for (size_t k = 0; k < t.n_params; k++) {
      size_t at = (size_t)s * t.n_params + k;
      double ge = rel_err(out[1 + k], r.grad_ss[at]);
      eg = max_d(eg, ge);
      note(v, s, ge, tol->grad,
           "step %lld: sum of squares of the gradient of '%s' %.17g, "
           "PyTorch's %.17g",
           (long long)s + 1, r.names[k], out[1 + k], r.grad_ss[at]);
      int64_t n = tyto_tensor_numel(t.params[k]);
      read_values(&t, 0, t.params[k], pv, n);
      double sum = 0, ss = 0;
      for (int64_t i = 0; i < n; i++) {
        sum += pv[i];
        ss += pv[i] * pv[i];
      }
      /* A sum can cancel to near zero: measure it against its scale. */
      double scale = 1 + sqrt((double)n * r.param_ss[at]);
      double se = fabs(sum - r.param_sum[at]) / scale;
      double sse = rel_err(ss, r.param_ss[at]);
      es = max_d(es, se);
      ess = max_d(ess, sse);
      note(v, s, se, tol->sum,
           "step %lld: sum of '%s' after the update %.17g, PyTorch's %.17g",
           (long long)s + 1, r.names[k], sum, r.param_sum[at]);
      note(v, s, sse, tol->ss,
           "step %lld: sum of squares of '%s' after the update %.17g, "
           "PyTorch's %.17g",
           (long long)s + 1, r.names[k], ss, r.param_ss[at]);
      if (c->verbose > 1)
        printf("      %-12s |g|^2 %.10g (err %.3g)  sum %.10g (err %.3g)  "
               "|p|^2 %.10g (err %.3g)\n",
               r.names[k], out[1 + k], ge, sum, se, ss, sse);
    }
    v->grad = max_d(v->grad, eg);
    v->psum = max_d(v->psum, es);
    v->pss = max_d(v->pss, ess);
    if (c->verbose)
      printf("%5lld %12.8f %10.3g %10.3g %10.3g %10.3g\n", (long long)s + 1,
             out[0], e, eg, es, ess);
  }

  if (c->dump) {
    tyto_checkpoint *ck;
    ck_assert_int_eq(tyto_checkpoint_new(&ck), TYTO_OK);
    ck_assert_int_eq(
        tyto_checkpoint_add_parameters(ck, t.p, t.n_params, t.params), TYTO_OK);
    ck_assert_msg(tyto_checkpoint_save(ck, c->dump) == TYTO_OK, "%s",
                  tyto_errmsg());
    tyto_checkpoint_free(ck);
  }

  /* Every final parameter. */
  for (size_t k = 0; k < t.n_params; k++) {
    int64_t n = tyto_tensor_numel(t.params[k]);
    tyto_checkpoint_dtype dt;
    const void *data;
    ck_assert_int_eq(
        tyto_checkpoint_find(r.final, r.names[k], &dt, NULL, NULL, &data, NULL),
        TYTO_OK);
    read_values(&t, 0, t.params[k], pv, n);
    double big = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
      double rv = dt == TYTO_CHECKPOINT_F64 ? ((const double *)data)[i]
                                            : ((const float *)data)[i];
      big = max_d(big, fabs(rv));
      if (fabs(pv[i] - rv) > worst) {
        worst = fabs(pv[i] - rv);
        at = i;
      }
    }
    double err = worst / (1 + big);
    v->final = max_d(v->final, err);
    if (c->verbose > 1)
      printf("final %-12s max |tyto - torch| %.3g at [%lld] (tyto %.10g), "
             "largest |value| %.3g\n",
             r.names[k], worst, (long long)at, pv[at], big);
    note(v, c->steps, err, tol->final,
         "final '%s'[%lld]: differs by %.3g (largest |value| %.3g)", r.names[k],
         (long long)at, worst, big);
  }
  printf("%s %s %s batch %d, %d steps: worst errors: loss %.3g, gradients' "
         "sums of squares %.3g, parameter sums %.3g, parameters' sums of "
         "squares %.3g, final parameters %.3g%s%s\n",
         c->model, c->optimizer, c->f32 ? "f32" : "f64", c->batch, c->steps,
         v->loss, v->grad, v->psum, v->pss, v->final,
         v->bad_step >= 0 ? "\nfirst over: " : "",
         v->bad_step >= 0 ? v->bad : "");
  free(x);
  free(y);
  free(mask);
  free(pv);
  tyto_dataset_free(d);
  trainer_free(&t);
  reference_free(&r);
}

/* ---------------------------------------------------------------------- */
/* The cases against PyTorch                                               */

static void check_case(vt_config c) {
  c.tol = c.f32 ? tol_f32 : tol_f64;
  verdict v;
  compare(&c, &v);
  ck_assert_msg(v.bad_step < 0, "%s %s: %s", c.model, c.optimizer, v.bad);
}

/* The CNN of tyto-train with its default optimiser (Adam, lr 1e-3,
 * constant schedule, no weight decay) and dropout 0.1 through the masks:
 * 40 steps of 16, one pass over 512 images and a quarter of the next. */
START_TEST(cnn_adam) {
  vt_config c = {.model = "cnn",
                 .optimizer = "adam",
                 .batch = 16,
                 .steps = 40,
                 .limit = 512,
                 .dropout = 0.1,
                 .seed = 1};
  check_case(c);
}
END_TEST

/* The same in float32, as tyto-train runs it: the CPU plugin's float32
 * kernels (oneDNN's, OpenBLAS's sgemm) are not its float64 ones. */
START_TEST(cnn_adam_f32) {
  vt_config c = {.model = "cnn",
                 .optimizer = "adam",
                 .batch = 16,
                 .steps = 12,
                 .limit = 512,
                 .dropout = 0.1,
                 .seed = 2,
                 .f32 = 1};
  check_case(c);
}
END_TEST

/* The MLP as bench/train_vs_torch.py trains it: SGD, lr 0.1. */
START_TEST(mlp_sgd) {
  vt_config c = {.model = "mlp",
                 .optimizer = "sgd",
                 .lr = 0.1,
                 .batch = 64,
                 .steps = 200,
                 .limit = 2048,
                 .seed = 2};
  check_case(c);
}
END_TEST

/* The MLP with Adam, and with the weight decays: L2 through the gradient
 * (SGD with Nesterov momentum) and decoupled (AdamW). */
START_TEST(mlp_adam) {
  vt_config c = {.model = "mlp",
                 .optimizer = "adam",
                 .batch = 64,
                 .steps = 200,
                 .limit = 2048,
                 .seed = 3};
  check_case(c);
}
END_TEST

START_TEST(mlp_sgd_nesterov_decay) {
  vt_config c = {.model = "mlp",
                 .optimizer = "sgd",
                 .lr = 0.05,
                 .momentum = 0.9,
                 .nesterov = 1,
                 .weight_decay = 5e-4,
                 .batch = 64,
                 .steps = 200,
                 .limit = 2048,
                 .seed = 4};
  check_case(c);
}
END_TEST

START_TEST(mlp_adamw) {
  vt_config c = {.model = "mlp",
                 .optimizer = "adamw",
                 .lr = 2e-3,
                 .weight_decay = 0.05,
                 .batch = 64,
                 .steps = 200,
                 .limit = 2048,
                 .seed = 5};
  check_case(c);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The cases that need no PyTorch                                          */

/* tyto_nn_dropout inside a whole training step (forward, gradients, Adam,
 * compiled together with the graph passes) is the mask-input network of
 * the PyTorch cases fed the mask the layer drew: the same mask in the
 * forward pass and in the gradient, and a fresh one at every step. The
 * layer's mask is read back from its input and output (where the input is
 * 0 the mask does not matter: ReLU's gradient there is 0 too). Synthetic
 * images; tyto's own initialisation for both networks. */
static void dropout_layer_case(int f32) {
  vt_config c = {.model = "cnn",
                 .optimizer = "adam",
                 .batch = 16,
                 .steps = 8,
                 .dropout = 0.1,
                 .seed = 7,
                 .f32 = f32};
  /* The two programs differ only in where the mask comes from. */
  const double tol = f32 ? 1e-6 : 1e-13;
  trainer a, b;
  trainer_make(&a, &c, NULL, 1);
  trainer_make(&b, &c, NULL, 0);
  ck_assert_uint_eq(a.n_params, b.n_params);
  int64_t bs = c.batch, item = 28 * 28, n = tyto_tensor_numel(a.pooled);
  double *x = malloc((size_t)(bs * item) * sizeof *x);
  double *y = malloc((size_t)(bs * CLASSES) * sizeof *y);
  double *pooled = malloc((size_t)n * sizeof *pooled);
  double *dropped = malloc((size_t)n * sizeof *dropped);
  double *mask = malloc((size_t)n * sizeof *mask);
  unsigned char *prev = calloc((size_t)n, 1);
  ck_assert(x && y && pooled && dropped && mask && prev);
  for (int64_t s = 0; s < c.steps; s++) {
    trainer *both[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
      for (int64_t i = 0; i < bs * item; i++)
        x[i] = (double)(((i + 1) * 7919 + s * 104729) % 1009) / 1008.0;
      memset(y, 0, (size_t)(bs * CLASSES) * sizeof *y);
      for (int64_t i = 0; i < bs; i++)
        y[i * CLASSES + (i * 3 + s) % CLASSES] = 1;
      bind(both[k], both[k]->x, x, bs * item);
      bind(both[k], both[k]->labels, y, bs * CLASSES);
      if (k == 1)
        bind(&b, b.mask, mask, n);
      ck_assert_msg(tyto_program_run(both[k]->p) == TYTO_OK, "%s",
                    tyto_errmsg());
      if (k == 1)
        break;
      read_values(&a, 1 + a.n_params, NULL, pooled, n);
      read_values(&a, 2 + a.n_params, NULL, dropped, n);
      /* (No ck_assert in loops over elements: each one reports to Check.) */
      int64_t live = 0, kept = 0, changed = 0, both_live = 0, unscaled = 0;
      for (int64_t i = 0; i < n; i++) {
        int on = pooled[i] != 0, keep = dropped[i] != 0;
        mask[i] = on ? keep : 1;
        if (on) {
          live++;
          kept += keep;
          unscaled += keep && fabs(dropped[i] - pooled[i] / 0.9) >
                                  1e-6 * fabs(dropped[i]);
          if (prev[i] & 2) {
            both_live++;
            changed += (prev[i] & 1) != keep;
          }
        }
        prev[i] = (unsigned char)(on << 1 | keep);
      }
      ck_assert_msg(unscaled == 0, "step %lld: %lld kept values not x / 0.9",
                    (long long)s + 1, (long long)unscaled);
      /* Binomial(live, 0.9): within 5 standard deviations. */
      double sd = sqrt((double)live * 0.9 * 0.1);
      ck_assert_msg(live > n / 4 &&
                        fabs((double)kept - 0.9 * (double)live) <= 5 * sd,
                    "step %lld: kept %lld of %lld", (long long)s + 1,
                    (long long)kept, (long long)live);
      /* Independent masks differ in 2 p (1 - p) = 18% of the places. */
      ck_assert_msg(s == 0 || changed > both_live / 10,
                    "step %lld: the mask changed in %lld of %lld places",
                    (long long)s + 1, (long long)changed, (long long)both_live);
    }
    for (size_t i = 0; i <= a.n_params; i++) {
      double va, vb;
      read_values(&a, i, NULL, &va, 1);
      read_values(&b, i, NULL, &vb, 1);
      ck_assert_msg(rel_err(va, vb) <= tol,
                    "step %lld: output %zu (%s) is %.17g with the dropout "
                    "layer, %.17g with its mask as an input",
                    (long long)s + 1, i,
                    i ? tyto_tensor_name(a.params[i - 1]) : "loss", va, vb);
    }
  }
  for (size_t k = 0; k < a.n_params; k++) {
    int64_t m = tyto_tensor_numel(a.params[k]);
    double *pa = malloc((size_t)m * sizeof *pa);
    double *pb = malloc((size_t)m * sizeof *pb);
    ck_assert(pa && pb);
    read_values(&a, 0, a.params[k], pa, m);
    read_values(&b, 0, b.params[k], pb, m);
    int64_t i = 0;
    while (i < m && fabs(pa[i] - pb[i]) <= tol * (1 + fabs(pb[i])))
      i++;
    ck_assert_msg(i == m,
                  "'%s'[%lld]: %.17g with the dropout layer, %.17g with its "
                  "mask as an input",
                  tyto_tensor_name(a.params[k]), (long long)i,
                  i < m ? pa[i] : 0.0, i < m ? pb[i] : 0.0);
    free(pa);
    free(pb);
  }
  free(x);
  free(y);
  free(pooled);
  free(dropped);
  free(mask);
  free(prev);
  trainer_free(&a);
  trainer_free(&b);
}

/* A partial batch, as tyto-train's last batch of an epoch is (60,000 =
 * 937 x 64 + 32): rows of zeros with all-zero labels after the real ones.
 * Cross-entropy takes the mean over the labelled rows, so the padding must
 * change nothing: steps on n real rows padded to 2n are steps on the n rows
 * alone (same loss, gradients and parameters after each update). With
 * tyto_nn_dropout the real rows draw the same masks in both (the stream
 * follows the element's index). */
static void partial_batch_case(int f32, const char *model) {
  vt_config c = {.model = model,
                 .optimizer = "adam",
                 .batch = 16,
                 .steps = 3,
                 .dropout = strcmp(model, "cnn") ? 0 : 0.1,
                 .seed = 11,
                 .f32 = f32};
  vt_config half = c;
  half.batch = c.batch / 2;
  const double tol = f32 ? 1e-5 : 1e-12;
  trainer a, b;
  trainer_make(&a, &c, NULL, 1);
  trainer_make(&b, &half, NULL, 1);
  int64_t n = half.batch, item = 28 * 28;
  double *x = malloc((size_t)(c.batch * item) * sizeof *x);
  double *y = malloc((size_t)(c.batch * CLASSES) * sizeof *y);
  ck_assert(x && y);
  for (int64_t s = 0; s < c.steps; s++) {
    trainer *both[2] = {&a, &b};
    double out[2][1 + MAX_PARAMS];
    for (int k = 0; k < 2; k++) {
      trainer *t = both[k];
      int64_t rows = k == 0 ? c.batch : n;
      memset(x, 0, (size_t)(rows * item) * sizeof *x);
      memset(y, 0, (size_t)(rows * CLASSES) * sizeof *y);
      for (int64_t i = 0; i < n * item; i++)
        x[i] = (double)(((i + 1) * 7919 + s * 104729) % 1009) / 1008.0;
      for (int64_t i = 0; i < n; i++)
        y[i * CLASSES + (i * 3 + s) % CLASSES] = 1;
      bind(t, t->x, x, rows * item);
      bind(t, t->labels, y, rows * CLASSES);
      ck_assert_msg(tyto_program_run(t->p) == TYTO_OK, "%s", tyto_errmsg());
      for (size_t i = 0; i <= t->n_params; i++)
        read_values(t, i, NULL, &out[k][i], 1);
    }
    for (size_t i = 0; i <= a.n_params; i++)
      ck_assert_msg(rel_err(out[0][i], out[1][i]) <= tol,
                    "%s step %lld: output %zu (%s) is %.17g with %lld rows of "
                    "padding, %.17g without",
                    model, (long long)s + 1, i,
                    i ? tyto_tensor_name(a.params[i - 1]) : "loss", out[0][i],
                    (long long)n, out[1][i]);
  }
  free(x);
  free(y);
  trainer_free(&a);
  trainer_free(&b);
}

START_TEST(partial_batch) {
  partial_batch_case(0, "cnn");
  partial_batch_case(1, "cnn");
  partial_batch_case(0, "mlp");
}
END_TEST

START_TEST(dropout_layer_f64) {
  dropout_layer_case(0);
}
END_TEST

START_TEST(dropout_layer_f32) {
  dropout_layer_case(1);
}
END_TEST

/* Adam's bias corrections in float32. With a constant gradient g the
 * corrected moments are g and g^2 at every update, so update k moves p by
 * exactly lr g / (|g| + eps) (Kingma and Ba 2015, Algorithm 1); from p = 0
 * the parameter after k updates is -k lr g / (|g| + eps), which float32
 * holds to a few units in its last place. PyTorch computes 1 - beta^k in
 * double; 1 - 0.999f^k in float32 is 1.3e-5 off (0.999f is 0.99900001287)
 * and scaled every update by 1 + 6.4e-6. */
START_TEST(adam_f32_bias_correction) {
  tyto_context *ctx;
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  tyto_graph *g = tyto_graph_new();
  enum { N = 4, RUNS = 40 };
  const double gv[N] = {1.0, -2.0, 0.5, -1e-3};
  tyto_tensor *p = tyto_parameter(g, TYTO_F32, 1, (const int64_t[]){N}, "p");
  tyto_tensor *cg = tyto_constant(g, TYTO_F32, 1, (const int64_t[]){N}, gv);
  tyto_tensor *loss = tyto_sum(tyto_mul(p, cg), 0, NULL, 0), *grad;
  tyto_grads(loss, 1, &p, &grad);
  tyto_optim_options oo;
  tyto_optim_options_init(&oo, TYTO_OPTIM_ADAM);
  tyto_optim *opt;
  ck_assert_int_eq(tyto_optim_build(&oo, 1, &p, &grad, &opt), TYTO_OK);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = tyto_optim_update_count(opt);
  po.update_params = tyto_optim_update_params(opt);
  po.update_values = tyto_optim_update_values(opt);
  tyto_program *prog;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &loss, &po, &prog) == TYTO_OK,
                "%s", tyto_errmsg());
  for (int k = 1; k <= RUNS; k++) {
    ck_assert_int_eq(tyto_program_run(prog), TYTO_OK);
    float pv[N];
    ck_assert_int_eq(tyto_program_read_parameter(prog, p, pv, sizeof pv),
                     TYTO_OK);
    for (int i = 0; i < N; i++) {
      double want = -k * oo.lr * gv[i] / (fabs(gv[i]) + oo.eps);
      ck_assert_msg(rel_err(pv[i], want) <= 1e-6,
                    "update %d: p[%d] is %.9g, expected %.9g (relative error "
                    "%.3g)",
                    k, i, (double)pv[i], want, rel_err(pv[i], want));
    }
  }
  tyto_program_free(prog);
  tyto_optim_free(opt);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The suite                                                               */

static Suite *suite(int with_torch) {
  Suite *s = suite_create("vs_torch");
  TCase *tc = tcase_create("own");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, adam_f32_bias_correction);
  tcase_add_test(tc, partial_batch);
  tcase_add_test(tc, dropout_layer_f64);
  tcase_add_test(tc, dropout_layer_f32);
  suite_add_tcase(s, tc);
  if (with_torch) {
    tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, cnn_adam);
    tcase_add_test(tc, cnn_adam_f32);
    tcase_add_test(tc, mlp_sgd);
    tcase_add_test(tc, mlp_adam);
    tcase_add_test(tc, mlp_sgd_nesterov_decay);
    tcase_add_test(tc, mlp_adamw);
    suite_add_tcase(s, tc);
  }
  return s;
}

/* By hand: one configuration from the command line, every step printed. */
static vt_config hand;

START_TEST(by_hand_case) {
  verdict v;
  compare(&hand, &v);
  ck_assert_msg(v.bad_step < 0, "%s", v.bad);
}
END_TEST

static int by_hand(int argc, char **argv) {
  vt_config c = {.model = "cnn",
                 .optimizer = "adam",
                 .batch = 64,
                 .steps = 100,
                 .limit = 6400,
                 .dropout = 0.1,
                 .seed = 1,
                 .verbose = 1};
  double tol = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--nesterov")) {
      c.nesterov = 1;
      continue;
    }
    if (!strcmp(a, "--detail")) {
      c.verbose = 2;
      continue;
    }
    if (!v) {
      fprintf(stderr, "test_vs_torch: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--model"))
      c.model = v;
    else if (!strcmp(a, "--optimizer"))
      c.optimizer = v;
    else if (!strcmp(a, "--lr"))
      c.lr = atof(v);
    else if (!strcmp(a, "--momentum"))
      c.momentum = atof(v);
    else if (!strcmp(a, "--weight-decay"))
      c.weight_decay = atof(v);
    else if (!strcmp(a, "--batch"))
      c.batch = atoi(v);
    else if (!strcmp(a, "--steps"))
      c.steps = atoi(v);
    else if (!strcmp(a, "--limit"))
      c.limit = atoi(v);
    else if (!strcmp(a, "--dropout"))
      c.dropout = atof(v);
    else if (!strcmp(a, "--seed"))
      c.seed = atoi(v);
    else if (!strcmp(a, "--dtype"))
      c.f32 = !strcmp(v, "f32");
    else if (!strcmp(a, "--torch-dtype"))
      c.ref_f64 = !strcmp(v, "f64");
    else if (!strcmp(a, "--tol"))
      tol = atof(v);
    else if (!strcmp(a, "--dump"))
      c.dump = v;
    else {
      fprintf(stderr, "test_vs_torch: unknown option %s\n", a);
      return 2;
    }
  }
  c.tol = c.f32 ? tol_f32 : tol_f64;
  if (tol > 0)
    c.tol = (tolerances){tol, tol, tol, tol, tol};
  hand = c;
  Suite *s = suite_create("vs_torch");
  TCase *tc = tcase_create("by_hand");
  tcase_set_timeout(tc, 3600);
  tcase_add_test(tc, by_hand_case);
  suite_add_tcase(s, tc);
  return test_run(s);
}

int main(int argc, char **argv) {
  if (getenv("TYTO_TEST_UNDER_VALGRIND")) {
    printf("test_vs_torch: skipped under valgrind (minutes of training)\n");
    return 77;
  }
  const char *why = torch_missing();
  if (argc > 1) {
    if (why) {
      printf("test_vs_torch: %s\n", why);
      return 77;
    }
    return by_hand(argc, argv);
  }
  int rc = test_run(suite(why == NULL));
  if (rc == EXIT_SUCCESS && why) {
    printf("test_vs_torch: the comparisons with PyTorch skipped: %s\n", why);
    return 77;
  }
  return rc;
}
