/*
 * tyto-train: trains a network on an IDX image dataset (MNIST,
 * Fashion-MNIST) and reports its test accuracy.
 *
 * One static program per training step, as Owl's neural compiler does: the
 * forward pass, the loss, the gradients, clipping and the optimiser's
 * update compile into one program whose parameters and optimiser state stay
 * on the device; evaluation is a second program built from the same layers
 * in EVAL mode, to which the parameters are copied before each evaluation.
 *
 * Exit status: 0 trained; 1 a runtime failure (a kernel failed, a
 * checkpoint could not be written); 2 bad input (an unknown option, a bad
 * value, a missing or damaged dataset, a model file with an error, a
 * checkpoint from another model or run). docs/training.md is the guide.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <tyto/tyto.h>

#include "train/model_file.h"
#include "train/plot.h"

#define PROG "tyto-train"
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define CHECKPOINT_FORMAT "tyto-train 1"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, MAX_BATCH = 1 << 16 };

/* ---------------------------------------------------------------------- */
/* Options                                                                 */

typedef struct options {
  const char *model, *model_file, *data, *devices, *checkpoint, *plot;
  int64_t epochs, batch, limit, test_limit, validation, eval_every,
      checkpoint_every, max_steps;
  uint64_t seed;
  int resume, json, quiet, progress; /* progress: -1 auto, 0 off, 1 on */
  /* Optimiser: the kind, and the fields given on the command line (NaN /
   * -1 when not given: the kind's defaults stay). */
  tyto_optim_kind optim;
  double lr, momentum, weight_decay, beta1, beta2, alpha, eps, gamma, min_lr,
      clip_value, clip_norm;
  int nesterov;
  int schedule;
  int64_t step_size, total_steps, warmup, accumulate;
} options;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: " PROG " [options]\n"
      "\n"
      "Model and data\n"
      "  --model NAME          preset: cnn (default), mlp, mlp-big\n"
      "  --model-file FILE     a model file (docs/model-format.md)\n"
      "  --data DIR            IDX dataset directory (default " DEFAULT_DATA
      ")\n"
      "  --limit N             train on the first N training images\n"
      "  --test-limit N        evaluate on the first N test images\n"
      "  --validation N        hold out the last N training images for\n"
      "                        validation\n"
      "Training\n"
      "  --epochs N            passes over the training images (default 1)\n"
      "  --batch N             images per step (default 64)\n"
      "  --seed N              initial weights, dropout, shuffling (default "
      "42)\n"
      "  --max-steps N         stop after N steps in all (a checkpoint is "
      "written)\n"
      "  --devices SPEC        device selection (default: TYTO_DEVICES or "
      "the config)\n"
      "Optimiser\n"
      "  --optimizer NAME      sgd, adagrad, rmsprop, adam (default), adamw\n"
      "  --lr X  --momentum X  --nesterov  --weight-decay X\n"
      "  --beta1 X  --beta2 X  --alpha X  --eps X\n"
      "  --schedule NAME       constant (default), step, exponential, "
      "cosine\n"
      "  --step-size N  --gamma X  --total-steps N  --min-lr X  --warmup N\n"
      "  --clip-value X        clip each gradient element to [-X, X]\n"
      "  --clip-norm X         scale gradients to global L2 norm <= X\n"
      "  --accumulate N        steps per update (gradient accumulation)\n"
      "Checkpoints and evaluation\n"
      "  --checkpoint FILE     safetensors checkpoint, written at each epoch "
      "end\n"
      "  --checkpoint-every N  ... and every N steps\n"
      "  --resume              continue from --checkpoint\n"
      "  --eval-every N        evaluate every N steps (default: each epoch)\n"
      "Output\n"
      "  --json                a JSON summary on stdout\n"
      "  --plot FILE.svg       loss and accuracy curves\n"
      "  --progress / --no-progress   live progress bar (default: on a "
      "terminal)\n"
      "  --quiet               no progress lines\n"
      "  --help\n");
}

static int bad_value(const char *opt, const char *what, const char *got) {
  fprintf(stderr, PROG ": --%s: expected %s, got '%s'\n", opt, what, got);
  return -1;
}

static int parse_count(const char *opt, const char *s, int64_t lo, int64_t hi,
                       int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || errno || x < lo || x > hi) {
    char what[96];
    snprintf(what, sizeof what, "an integer in [%lld, %lld]", (long long)lo,
             (long long)hi);
    return bad_value(opt, what, s);
  }
  *v = x;
  return 0;
}

static int parse_real(const char *opt, const char *s, double lo, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(x) || x < lo) {
    char what[64];
    snprintf(what, sizeof what, "a finite number >= %g", lo);
    return bad_value(opt, what, s);
  }
  *v = x;
  return 0;
}

enum {
  O_MODEL = 256,
  O_MODEL_FILE,
  O_DATA,
  O_LIMIT,
  O_TEST_LIMIT,
  O_VALIDATION,
  O_EPOCHS,
  O_BATCH,
  O_SEED,
  O_MAX_STEPS,
  O_DEVICES,
  O_OPTIMIZER,
  O_LR,
  O_MOMENTUM,
  O_NESTEROV,
  O_WEIGHT_DECAY,
  O_BETA1,
  O_BETA2,
  O_ALPHA,
  O_EPS,
  O_SCHEDULE,
  O_STEP_SIZE,
  O_GAMMA,
  O_TOTAL_STEPS,
  O_MIN_LR,
  O_WARMUP,
  O_CLIP_VALUE,
  O_CLIP_NORM,
  O_ACCUMULATE,
  O_CHECKPOINT,
  O_CHECKPOINT_EVERY,
  O_RESUME,
  O_EVAL_EVERY,
  O_JSON,
  O_PLOT,
  O_PROGRESS,
  O_NO_PROGRESS,
  O_QUIET,
  O_HELP
};

static const struct option long_options[] = {
    {"model", required_argument, NULL, O_MODEL},
    {"model-file", required_argument, NULL, O_MODEL_FILE},
    {"data", required_argument, NULL, O_DATA},
    {"limit", required_argument, NULL, O_LIMIT},
    {"test-limit", required_argument, NULL, O_TEST_LIMIT},
    {"validation", required_argument, NULL, O_VALIDATION},
    {"epochs", required_argument, NULL, O_EPOCHS},
    {"batch", required_argument, NULL, O_BATCH},
    {"seed", required_argument, NULL, O_SEED},
    {"max-steps", required_argument, NULL, O_MAX_STEPS},
    {"devices", required_argument, NULL, O_DEVICES},
    {"optimizer", required_argument, NULL, O_OPTIMIZER},
    {"lr", required_argument, NULL, O_LR},
    {"momentum", required_argument, NULL, O_MOMENTUM},
    {"nesterov", no_argument, NULL, O_NESTEROV},
    {"weight-decay", required_argument, NULL, O_WEIGHT_DECAY},
    {"beta1", required_argument, NULL, O_BETA1},
    {"beta2", required_argument, NULL, O_BETA2},
    {"alpha", required_argument, NULL, O_ALPHA},
    {"eps", required_argument, NULL, O_EPS},
    {"schedule", required_argument, NULL, O_SCHEDULE},
    {"step-size", required_argument, NULL, O_STEP_SIZE},
    {"gamma", required_argument, NULL, O_GAMMA},
    {"total-steps", required_argument, NULL, O_TOTAL_STEPS},
    {"min-lr", required_argument, NULL, O_MIN_LR},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"clip-value", required_argument, NULL, O_CLIP_VALUE},
    {"clip-norm", required_argument, NULL, O_CLIP_NORM},
    {"accumulate", required_argument, NULL, O_ACCUMULATE},
    {"checkpoint", required_argument, NULL, O_CHECKPOINT},
    {"checkpoint-every", required_argument, NULL, O_CHECKPOINT_EVERY},
    {"resume", no_argument, NULL, O_RESUME},
    {"eval-every", required_argument, NULL, O_EVAL_EVERY},
    {"json", no_argument, NULL, O_JSON},
    {"plot", required_argument, NULL, O_PLOT},
    {"progress", no_argument, NULL, O_PROGRESS},
    {"no-progress", no_argument, NULL, O_NO_PROGRESS},
    {"quiet", no_argument, NULL, O_QUIET},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0}};

/* Returns 0, 1 for --help, -1 on a usage error (message printed). */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->data = DEFAULT_DATA;
  o->epochs = 1;
  o->batch = 64;
  o->seed = 42;
  o->progress = -1;
  o->optim = TYTO_OPTIM_ADAM;
  o->schedule = -1;
  double *reals[] = {&o->lr,     &o->momentum,   &o->weight_decay, &o->beta1,
                     &o->beta2,  &o->alpha,      &o->eps,          &o->gamma,
                     &o->min_lr, &o->clip_value, &o->clip_norm};
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
    *reals[i] = NAN;
  o->step_size = o->total_steps = o->warmup = o->accumulate = -1;
  opterr = 0;
  int c, idx;
  int64_t v;
  const int64_t big = INT64_C(1) << 40;
  while ((c = getopt_long(argc, argv, ":", long_options, &idx)) != -1) {
    const char *name =
        c >= O_MODEL && c <= O_HELP ? long_options[c - O_MODEL].name : "";
    int rc = 0;
    switch (c) {
    case O_MODEL:
      o->model = optarg;
      if (!mf_preset(optarg)) {
        fprintf(stderr,
                PROG ": --model: unknown model '%s' (expected %s, or "
                     "--model-file FILE)\n",
                optarg, mf_preset_list());
        return -1;
      }
      break;
    case O_MODEL_FILE: o->model_file = optarg; break;
    case O_DATA: o->data = optarg; break;
    case O_LIMIT: rc = parse_count(name, optarg, 1, big, &o->limit); break;
    case O_TEST_LIMIT:
      rc = parse_count(name, optarg, 1, big, &o->test_limit);
      break;
    case O_VALIDATION:
      rc = parse_count(name, optarg, 1, big, &o->validation);
      break;
    case O_EPOCHS:
      rc = parse_count(name, optarg, 1, 1000000, &o->epochs);
      break;
    case O_BATCH:
      rc = parse_count(name, optarg, 1, MAX_BATCH, &o->batch);
      break;
    case O_SEED:
      rc = parse_count(name, optarg, 0, INT64_MAX, &v);
      o->seed = (uint64_t)v;
      break;
    case O_MAX_STEPS:
      rc = parse_count(name, optarg, 1, big, &o->max_steps);
      break;
    case O_DEVICES: o->devices = optarg; break;
    case O_OPTIMIZER: {
      int k = tyto_optim_kind_from_name(optarg);
      if (k < 0) {
        fprintf(stderr,
                PROG ": --optimizer: unknown optimiser '%s' (expected "
                     "sgd, adagrad, rmsprop, adam or adamw)\n",
                optarg);
        return -1;
      }
      o->optim = (tyto_optim_kind)k;
      break;
    }
    case O_LR: rc = parse_real(name, optarg, 0, &o->lr); break;
    case O_MOMENTUM: rc = parse_real(name, optarg, 0, &o->momentum); break;
    case O_NESTEROV: o->nesterov = 1; break;
    case O_WEIGHT_DECAY:
      rc = parse_real(name, optarg, 0, &o->weight_decay);
      break;
    case O_BETA1: rc = parse_real(name, optarg, 0, &o->beta1); break;
    case O_BETA2: rc = parse_real(name, optarg, 0, &o->beta2); break;
    case O_ALPHA: rc = parse_real(name, optarg, 0, &o->alpha); break;
    case O_EPS: rc = parse_real(name, optarg, 0, &o->eps); break;
    case O_SCHEDULE:
      o->schedule = tyto_schedule_from_name(optarg);
      if (o->schedule < 0) {
        fprintf(stderr,
                PROG ": --schedule: unknown schedule '%s' (expected "
                     "constant, step, exponential or cosine)\n",
                optarg);
        return -1;
      }
      break;
    case O_STEP_SIZE:
      rc = parse_count(name, optarg, 1, big, &o->step_size);
      break;
    case O_GAMMA: rc = parse_real(name, optarg, 0, &o->gamma); break;
    case O_TOTAL_STEPS:
      rc = parse_count(name, optarg, 1, big, &o->total_steps);
      break;
    case O_MIN_LR: rc = parse_real(name, optarg, 0, &o->min_lr); break;
    case O_WARMUP: rc = parse_count(name, optarg, 0, big, &o->warmup); break;
    case O_CLIP_VALUE: rc = parse_real(name, optarg, 0, &o->clip_value); break;
    case O_CLIP_NORM: rc = parse_real(name, optarg, 0, &o->clip_norm); break;
    case O_ACCUMULATE:
      rc = parse_count(name, optarg, 1, 1 << 20, &o->accumulate);
      break;
    case O_CHECKPOINT: o->checkpoint = optarg; break;
    case O_CHECKPOINT_EVERY:
      rc = parse_count(name, optarg, 1, big, &o->checkpoint_every);
      break;
    case O_RESUME: o->resume = 1; break;
    case O_EVAL_EVERY:
      rc = parse_count(name, optarg, 1, big, &o->eval_every);
      break;
    case O_JSON: o->json = 1; break;
    case O_PLOT: o->plot = optarg; break;
    case O_PROGRESS: o->progress = 1; break;
    case O_NO_PROGRESS: o->progress = 0; break;
    case O_QUIET: o->quiet = 1; break;
    case O_HELP: usage(stdout); return 1;
    case ':':
      fprintf(stderr, PROG ": option '%s' needs a value\n", argv[optind - 1]);
      return -1;
    default:
      fprintf(stderr, PROG ": unknown option '%s' (see " PROG " --help)\n",
              argv[optind - 1]);
      return -1;
    }
    if (rc < 0)
      return -1;
  }
  if (optind < argc) {
    fprintf(stderr, PROG ": unexpected argument '%s' (see " PROG " --help)\n",
            argv[optind]);
    return -1;
  }
  if (o->model && o->model_file) {
    fprintf(stderr, PROG ": give --model or --model-file, not both\n");
    return -1;
  }
  if (!o->model && !o->model_file)
    o->model = "cnn";
  if ((o->resume || o->checkpoint_every) && !o->checkpoint) {
    fprintf(stderr, PROG ": --%s needs --checkpoint FILE\n",
            o->resume ? "resume" : "checkpoint-every");
    return -1;
  }
  return 0;
}

/* The optimiser options: the kind's defaults with the given fields. */
static void optim_options(const options *o, tyto_optim_options *oo) {
  tyto_optim_options_init(oo, o->optim);
#define SET(field, v)                                                          \
  if (!isnan(v))                                                               \
  oo->field = v
  SET(lr, o->lr);
  SET(momentum, o->momentum);
  SET(weight_decay, o->weight_decay);
  SET(beta1, o->beta1);
  SET(beta2, o->beta2);
  SET(alpha, o->alpha);
  SET(eps, o->eps);
  SET(gamma, o->gamma);
  SET(min_lr, o->min_lr);
  SET(clip_value, o->clip_value);
  SET(clip_norm, o->clip_norm);
#undef SET
  oo->nesterov = o->nesterov;
  if (o->schedule >= 0)
    oo->schedule = (tyto_schedule_kind)o->schedule;
  if (o->step_size > 0)
    oo->step_size = o->step_size;
  if (o->total_steps > 0)
    oo->total_steps = o->total_steps;
  if (o->warmup >= 0)
    oo->warmup_steps = o->warmup;
  if (o->accumulate > 0)
    oo->accumulate = o->accumulate;
}

/* ---------------------------------------------------------------------- */
/* The run                                                                 */

typedef struct curve {
  size_t n, cap;
  double *x, *y;
} curve;

static int curve_add(curve *c, double x, double y) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    double *nx = realloc(c->x, cap * sizeof *nx);
    if (!nx)
      return -1;
    c->x = nx;
    double *ny = realloc(c->y, cap * sizeof *ny);
    if (!ny)
      return -1;
    c->y = ny;
    c->cap = cap;
  }
  c->x[c->n] = x;
  c->y[c->n++] = y;
  return 0;
}

static void curve_free(curve *c) {
  free(c->x);
  free(c->y);
}

typedef struct run {
  options o;
  mf_model *model;
  const char *model_name;
  tyto_dataset *train, *test;
  tyto_batcher *train_b, *test_b, *valid_b;
  int64_t classes, item_size, n_train, n_valid, n_test;
  tyto_context *ctx;
  const char *device_id;
  tyto_graph *g;
  tyto_nn *nn;
  tyto_optim *optim;
  tyto_optim_options oo;
  tyto_tensor *x, *labels, *loss, *correct, *lr;
  tyto_tensor *xe, *labels_e, *loss_e, *correct_e;
  tyto_program *train_p, *eval_p;
  /* Everything a checkpoint holds: the train program's parameters. */
  size_t n_state;
  tyto_tensor **state;
  float *xbuf, *ybuf;
  size_t xbytes, ybytes;
  /* Progress. */
  int64_t steps, epoch, batch_in_epoch, batches_per_epoch;
  double epoch_loss, epoch_correct, epoch_images;
  double last_loss, last_lr;
  double compile_seconds, train_seconds;
  /* Of train_seconds: filling and binding batches, and running steps. */
  double data_seconds, run_seconds;
  double *epoch_seconds;
  int64_t epochs_done_here; /* epochs completed by this process */
  double test_accuracy, test_loss, valid_accuracy;
  int have_test;
  curve loss_curve, train_acc_curve, eval_acc_curve;
  int bar; /* a live progress bar on stderr */
  double bar_t0;
  double last_log;
} run;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail_status(const char *what) {
  fprintf(stderr, PROG ": %s: %s\n", what, tyto_errmsg());
  return -1;
}

/* Exit status for a library error: bad input for invalid arguments and
 * missing things, a runtime failure otherwise. */
static int status_exit(tyto_status s) {
  return s == TYTO_ERR_INVALID_ARGUMENT || s == TYTO_ERR_NOT_FOUND
             ? EXIT_USAGE
             : EXIT_RUNTIME;
}

static int load_data(run *r, int *code) {
  tyto_status s = tyto_dataset_load_dir(r->o.data, "train", 0, &r->train);
  if (s == TYTO_OK)
    s = tyto_dataset_load_dir(r->o.data, "t10k", 0, &r->test);
  if (s != TYTO_OK) {
    *code = status_exit(s) == EXIT_RUNTIME && s != TYTO_ERR_IO ? EXIT_RUNTIME
                                                               : EXIT_USAGE;
    fprintf(stderr, PROG ": data: %s\n", tyto_errmsg());
    return -1;
  }
  *code = EXIT_USAGE;
  r->classes = tyto_dataset_classes(r->train);
  if (tyto_dataset_classes(r->test) > r->classes)
    r->classes = tyto_dataset_classes(r->test);
  r->item_size = tyto_dataset_item_size(r->train);
  if (tyto_dataset_item_size(r->test) != r->item_size) {
    fprintf(stderr,
            PROG ": data: training images hold %lld values, test images %lld\n",
            (long long)r->item_size,
            (long long)tyto_dataset_item_size(r->test));
    return -1;
  }
  int64_t want = 1;
  for (int a = 0; a < mf_input_rank(r->model); a++)
    want *= mf_input_shape(r->model)[a];
  if (want != r->item_size) {
    fprintf(stderr,
            PROG ": the model's input holds %lld values, the data's images "
                 "%lld\n",
            (long long)want, (long long)r->item_size);
    return -1;
  }
  int64_t total = tyto_dataset_count(r->train);
  r->n_valid = r->o.validation;
  if (r->n_valid >= total) {
    fprintf(stderr,
            PROG ": --validation %lld leaves no training images (the data has "
                 "%lld)\n",
            (long long)r->n_valid, (long long)total);
    return -1;
  }
  r->n_train = total - r->n_valid;
  if (r->o.limit && r->o.limit < r->n_train)
    r->n_train = r->o.limit;
  r->n_test = tyto_dataset_count(r->test);
  if (r->o.test_limit && r->o.test_limit < r->n_test)
    r->n_test = r->o.test_limit;
  return 0;
}

static int make_batchers(run *r) {
  tyto_batcher_options bo;
  tyto_batcher_options_init(&bo);
  bo.batch_size = r->o.batch;
  bo.scale = 1.0 / 255;
  bo.one_hot = 1;
  bo.seed = r->o.seed;
  bo.first = 0;
  bo.count = r->n_train;
  /* Cross-entropy ignores the zero rows that pad a partial batch; other
   * losses would count them, so they drop it. */
  bo.drop_last = mf_loss_kind(r->model) != MF_LOSS_CROSS_ENTROPY;
  if (tyto_batcher_new(r->train, &bo, &r->train_b) != TYTO_OK)
    return fail_status("data");
  bo.shuffle = 0;
  bo.drop_last = 0;
  bo.count = r->n_test;
  if (tyto_batcher_new(r->test, &bo, &r->test_b) != TYTO_OK)
    return fail_status("data");
  if (r->n_valid) {
    bo.first = tyto_dataset_count(r->train) - r->n_valid;
    bo.count = r->n_valid;
    if (tyto_batcher_new(r->train, &bo, &r->valid_b) != TYTO_OK)
      return fail_status("data");
  }
  r->batches_per_epoch = tyto_batcher_batches(r->train_b);
  if (r->batches_per_epoch == 0) {
    fprintf(stderr, PROG ": %lld training images make no full batch of %lld\n",
            (long long)r->n_train, (long long)r->o.batch);
    return -1;
  }
  r->xbytes = (size_t)(r->o.batch * r->item_size) * sizeof(float);
  r->ybytes = (size_t)(r->o.batch * r->classes) * sizeof(float);
  r->xbuf = malloc(r->xbytes);
  r->ybuf = malloc(r->ybytes);
  if (!r->xbuf || !r->ybuf) {
    fprintf(stderr, PROG ": out of memory\n");
    return -1;
  }
  return 0;
}

static tyto_tensor *loss_of(const run *r, tyto_tensor *logits,
                            tyto_tensor *labels) {
  switch (mf_loss_kind(r->model)) {
  case MF_LOSS_MSE: return tyto_loss_mse(logits, labels);
  case MF_LOSS_L1: return tyto_loss_l1(logits, labels);
  case MF_LOSS_HINGE: return tyto_loss_hinge(logits, labels);
  case MF_LOSS_CROSS_ENTROPY: break;
  }
  return tyto_loss_softmax_cross_entropy(logits, labels);
}

/* Builds both programs' graphs. Returns 0, or -1 with a message printed
 * and *code set. */
static int build(run *r, int *code) {
  char err[1024];
  *code = EXIT_USAGE;
  r->g = tyto_graph_new();
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = r->o.seed;
  if (!r->g || tyto_nn_new(r->g, &no, &r->nn) != TYTO_OK)
    return fail_status("model");
  int rank = 1 + mf_input_rank(r->model);
  int64_t shape[TYTO_MAX_RANK];
  shape[0] = r->o.batch;
  memcpy(shape + 1, mf_input_shape(r->model),
         (size_t)(rank - 1) * sizeof *shape);
  int64_t lshape[2] = {r->o.batch, r->classes};

  r->x = tyto_nn_input(r->nn, rank, shape, "x");
  r->labels = tyto_nn_input(r->nn, 2, lshape, "labels");
  tyto_tensor *logits = mf_build(r->model, r->nn, r->x, err, sizeof err);
  if (!logits) {
    fprintf(stderr, PROG ": %s\n", err);
    return -1;
  }
  if (tyto_tensor_rank(logits) != 2 ||
      tyto_tensor_dim(logits, 1) != r->classes) {
    char s[128] = "";
    size_t k = 0;
    for (int a = 0; a < tyto_tensor_rank(logits) && k < sizeof s; a++)
      k += (size_t)snprintf(s + k, sizeof s - k, "%s%lld", a ? "," : "",
                            (long long)tyto_tensor_dim(logits, a));
    fprintf(stderr,
            PROG ": the model's output is [%s]; the data has %lld classes, "
                 "so it must be [%lld,%lld] (end with linear units=%lld)\n",
            s, (long long)r->classes, (long long)r->o.batch,
            (long long)r->classes, (long long)r->classes);
    return -1;
  }
  r->loss = loss_of(r, logits, r->labels);
  double l1, l2;
  mf_regularization(r->model, &l1, &l2);
  size_t nw = tyto_nn_weight_count(r->nn);
  if ((l1 > 0 || l2 > 0) && nw > 0) {
    tyto_tensor **ws = malloc(nw * sizeof *ws);
    if (!ws)
      return fail_status("model");
    for (size_t i = 0; i < nw; i++)
      ws[i] = tyto_nn_weight(r->nn, i);
    r->loss = tyto_add(r->loss, tyto_loss_regularization(nw, ws, l1, l2));
    free(ws);
  }
  r->correct = tyto_nn_count_correct(logits, r->labels);

  size_t np = tyto_nn_parameter_count(r->nn);
  tyto_tensor *const *params = tyto_nn_parameters(r->nn);
  tyto_tensor **grads = calloc(np ? np : 1, sizeof *grads);
  if (!grads)
    return fail_status("model");
  tyto_grads(r->loss, np, params, grads);
  if (tyto_graph_status(r->g) != TYTO_OK) {
    fprintf(stderr, PROG ": model: %s\n", tyto_graph_error_message(r->g));
    free(grads);
    return -1;
  }
  optim_options(&r->o, &r->oo);
  tyto_status s = tyto_optim_build(&r->oo, np, params, grads, &r->optim);
  free(grads);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": optimizer: %s\n", tyto_errmsg());
    return -1;
  }
  r->lr = tyto_optim_lr(r->optim);

  /* Evaluation: the same layers in EVAL mode, sharing the parameters. */
  tyto_nn_set_mode(r->nn, TYTO_NN_EVAL);
  r->xe = tyto_nn_input(r->nn, rank, shape, "x_eval");
  r->labels_e = tyto_nn_input(r->nn, 2, lshape, "labels_eval");
  tyto_tensor *le = mf_build(r->model, r->nn, r->xe, err, sizeof err);
  if (!le) {
    fprintf(stderr, PROG ": %s\n", err);
    return -1;
  }
  r->loss_e = loss_of(r, le, r->labels_e);
  r->correct_e = tyto_nn_count_correct(le, r->labels_e);
  if (tyto_graph_status(r->g) != TYTO_OK) {
    fprintf(stderr, PROG ": model: %s\n", tyto_graph_error_message(r->g));
    return -1;
  }
  return 0;
}

static int compile(run *r) {
  double t0 = now();
  /* The updates: the layers' state (dropout's step, batch norm's running
   * statistics), then the optimiser's parameters and state. */
  size_t nn_u = tyto_nn_update_count(r->nn),
         op_u = tyto_optim_update_count(r->optim);
  size_t nu = nn_u + op_u;
  tyto_tensor **up = malloc((nu ? nu : 1) * sizeof *up),
              **uv = malloc((nu ? nu : 1) * sizeof *uv);
  if (!up || !uv) {
    free(up);
    free(uv);
    return fail_status("compile");
  }
  /* Either list may be empty (and its array NULL). */
  for (size_t i = 0; i < nn_u; i++) {
    up[i] = tyto_nn_update_params(r->nn)[i];
    uv[i] = tyto_nn_update_values(r->nn)[i];
  }
  for (size_t i = 0; i < op_u; i++) {
    up[nn_u + i] = tyto_optim_update_params(r->optim)[i];
    uv[nn_u + i] = tyto_optim_update_values(r->optim)[i];
  }
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = nu;
  po.update_params = up;
  po.update_values = uv;
  tyto_tensor *outs[3] = {r->loss, r->correct, r->lr};
  tyto_status s = tyto_program_compile(r->ctx, r->g, 3, outs, &po, &r->train_p);
  free(up);
  free(uv);
  if (s != TYTO_OK)
    return fail_status("compiling the training step");
  tyto_tensor *eouts[2] = {r->loss_e, r->correct_e};
  if (tyto_program_compile(r->ctx, r->g, 2, eouts, NULL, &r->eval_p) != TYTO_OK)
    return fail_status("compiling the evaluation");
  r->compile_seconds = now() - t0;

  /* The checkpointed state: every parameter the training step uses, in
   * graph order (layers' parameters and state, then the optimiser's). */
  size_t n = tyto_graph_size(r->g);
  r->state = malloc(n * sizeof *r->state);
  if (!r->state)
    return fail_status("compile");
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *t = tyto_graph_tensor(r->g, i);
    if (tyto_tensor_kind(t) == TYTO_KIND_PARAMETER &&
        tyto_program_uses(r->train_p, t))
      r->state[r->n_state++] = t;
  }
  if (tyto_nn_initialize(r->nn, r->train_p) != TYTO_OK)
    return fail_status("initialising the parameters");
  return 0;
}

/* Copies the parameters the evaluation reads from the training program. */
static int sync_eval(run *r) {
  size_t cap = 0;
  void *buf = NULL;
  for (size_t i = 0; i < r->n_state; i++) {
    tyto_tensor *t = r->state[i];
    if (!tyto_program_uses(r->eval_p, t))
      continue;
    size_t bytes =
        (size_t)tyto_tensor_numel(t) * tyto_dtype_size(tyto_tensor_dtype(t));
    if (bytes > cap) {
      void *nb = realloc(buf, bytes);
      if (!nb) {
        free(buf);
        return fail_status("evaluation");
      }
      buf = nb;
      cap = bytes;
    }
    if (tyto_program_read_parameter(r->train_p, t, buf, bytes) != TYTO_OK ||
        tyto_program_write_parameter(r->eval_p, t, buf, bytes) != TYTO_OK) {
      free(buf);
      return fail_status("evaluation");
    }
  }
  free(buf);
  return 0;
}

/* Accuracy and mean loss of the evaluation program over batcher b. */
static int evaluate(run *r, tyto_batcher *b, double *acc, double *loss) {
  if (sync_eval(r) < 0 || tyto_batcher_seek(b, 0, 0) != TYTO_OK)
    return -1;
  double correct = 0, loss_sum = 0;
  int64_t seen = 0, filled;
  for (;;) {
    if (tyto_batcher_next(b, r->xbuf, r->xbytes, r->ybuf, r->ybytes, &filled) !=
        TYTO_OK)
      return fail_status("evaluation");
    if (filled == 0)
      break;
    float out[2];
    if (tyto_program_set_input(r->eval_p, r->xe, r->xbuf, r->xbytes) ||
        tyto_program_set_input(r->eval_p, r->labels_e, r->ybuf, r->ybytes) ||
        tyto_program_run(r->eval_p) ||
        tyto_program_read_output(r->eval_p, 0, &out[0], sizeof(float)) ||
        tyto_program_read_output(r->eval_p, 1, &out[1], sizeof(float)))
      return fail_status("evaluation");
    /* Cross-entropy is already the mean over the filled rows. */
    loss_sum += (double)out[0] * (double)filled;
    correct += out[1];
    seen += filled;
  }
  *acc = seen ? correct / (double)seen : 0;
  *loss = seen ? loss_sum / (double)seen : 0;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Checkpoints                                                             */

static int save_checkpoint(run *r) {
  tyto_checkpoint *ck = NULL;
  char v[64];
  tyto_status s = tyto_checkpoint_new(&ck);
  if (s == TYTO_OK)
    s = tyto_checkpoint_add_parameters(ck, r->train_p, r->n_state, r->state);
  struct {
    const char *k;
    int64_t v;
  } ints[] = {{"tyto.seed", (int64_t)r->o.seed},
              {"tyto.batch", r->o.batch},
              {"tyto.classes", r->classes},
              {"tyto.train_images", r->n_train},
              {"tyto.epoch", r->epoch},
              {"tyto.batch_in_epoch", r->batch_in_epoch},
              {"tyto.steps", r->steps}};
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.format", CHECKPOINT_FORMAT);
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.model", mf_canonical(r->model));
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.optimizer",
                                 tyto_optim_kind_name(r->oo.kind));
  for (size_t i = 0; s == TYTO_OK && i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(v, sizeof v, "%lld", (long long)ints[i].v);
    s = tyto_checkpoint_set_meta(ck, ints[i].k, v);
  }
  if (s == TYTO_OK)
    s = tyto_checkpoint_save(ck, r->o.checkpoint);
  tyto_checkpoint_free(ck);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": checkpoint %s: %s\n", r->o.checkpoint,
            tyto_errmsg());
    return -1;
  }
  return 0;
}

static int meta_int(const tyto_checkpoint *ck, const char *key, int64_t *v) {
  const char *s = tyto_checkpoint_get_meta(ck, key);
  char *end;
  if (!s)
    return -1;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || errno)
    return -1;
  *v = x;
  return 0;
}

/* Restores the run from --checkpoint; nothing is written to any file. */
static int resume(run *r) {
  const char *path = r->o.checkpoint;
  tyto_checkpoint *ck = NULL;
  if (tyto_checkpoint_load(path, &ck) != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    return -1;
  }
  int rc = -1;
  const char *fmt = tyto_checkpoint_get_meta(ck, "tyto.format");
  const char *model = tyto_checkpoint_get_meta(ck, "tyto.model");
  int64_t seed, batch, classes, train_images, epoch, bie, steps;
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0 || !model ||
      meta_int(ck, "tyto.seed", &seed) || meta_int(ck, "tyto.batch", &batch) ||
      meta_int(ck, "tyto.classes", &classes) ||
      meta_int(ck, "tyto.train_images", &train_images) ||
      meta_int(ck, "tyto.epoch", &epoch) ||
      meta_int(ck, "tyto.batch_in_epoch", &bie) ||
      meta_int(ck, "tyto.steps", &steps)) {
    fprintf(stderr,
            PROG ": --resume: %s is not a " PROG " checkpoint (its metadata "
                 "lacks tyto.format \"" CHECKPOINT_FORMAT "\" or the run's "
                 "position)\n",
            path);
    goto out;
  }
  /* The parameters first: their names and shapes tell the most. */
  tyto_checkpoint_spec *specs = calloc(r->n_state, sizeof *specs);
  if (!specs) {
    fprintf(stderr, PROG ": out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < r->n_state; i++) {
    specs[i].name = tyto_tensor_name(r->state[i]);
    specs[i].dtype = (tyto_checkpoint_dtype)tyto_tensor_dtype(r->state[i]);
    specs[i].rank = tyto_tensor_rank(r->state[i]);
    specs[i].shape = tyto_tensor_shape(r->state[i]);
  }
  tyto_status s = tyto_checkpoint_expect(ck, r->n_state, specs, 0);
  free(specs);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    if (strcmp(model, mf_canonical(r->model)) != 0)
      fprintf(stderr, PROG ": --resume: the checkpoint's model is:\n%s", model);
    goto out;
  }
  if (strcmp(model, mf_canonical(r->model)) != 0) {
    fprintf(stderr,
            PROG ": --resume: %s holds another model; it was trained with:\n"
                 "%sand this run builds:\n%s",
            path, model, mf_canonical(r->model));
    goto out;
  }
  struct {
    const char *what;
    int64_t file, here;
  } same[] = {
      {"--seed", seed, (int64_t)r->o.seed},
      {"--batch", batch, r->o.batch},
      {"classes", classes, r->classes},
      {"training images (--limit, --validation)", train_images, r->n_train}};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
    if (same[i].file != same[i].here) {
      fprintf(stderr,
              PROG ": --resume: %s was %lld in the checkpoint's run and is "
                   "%lld in this one; resume with the same value\n",
              same[i].what, (long long)same[i].file, (long long)same[i].here);
      goto out;
    }
  if (epoch < 0 || bie < 0 || bie > r->batches_per_epoch || steps < 0) {
    fprintf(stderr,
            PROG ": --resume: %s: position epoch %lld batch %lld is "
                 "not possible here\n",
            path, (long long)epoch, (long long)bie);
    goto out;
  }
  if (tyto_checkpoint_restore_parameters(ck, r->train_p, r->n_state,
                                         r->state) != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    goto out;
  }
  if (bie == r->batches_per_epoch) {
    epoch++;
    bie = 0;
  }
  r->epoch = epoch;
  r->batch_in_epoch = bie;
  r->steps = steps;
  rc = 0;
out:
  tyto_checkpoint_free(ck);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* Progress                                                                */

static void format_eta(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0)
    s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(run *r, int final) {
  if (r->o.quiet)
    return;
  double t = now(), el = t - r->bar_t0;
  double done = (double)r->batch_in_epoch;
  double ips = el > 0 ? r->epoch_images / el : 0;
  double left = (double)(r->batches_per_epoch - r->batch_in_epoch) *
                (double)r->o.batch / (ips > 0 ? ips : 1);
  double loss = r->epoch_images > 0 ? r->epoch_loss / r->epoch_images : 0;
  double acc = r->epoch_images > 0 ? r->epoch_correct / r->epoch_images : 0;
  char eta[32];
  format_eta(left, eta, sizeof eta);
  if (r->bar) {
    if (!final && t - r->last_log < 0.1)
      return;
    r->last_log = t;
    enum { W = 24 };
    int fill = (int)(W * done / (double)r->batches_per_epoch);
    char bar[W + 1];
    for (int i = 0; i < W; i++)
      bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = '\0';
    fprintf(stderr,
            "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  acc %5.1f%%  "
            "%.0f img/s  ETA %s",
            (long long)r->epoch + 1, (long long)r->o.epochs, bar,
            (long long)r->batch_in_epoch, (long long)r->batches_per_epoch, loss,
            100 * acc, ips, eta);
    if (final)
      fputc('\n', stderr);
    fflush(stderr);
    return;
  }
  /* Plain log lines: about every 10 s, and at the end of each epoch. */
  if (!final && t - r->last_log < 10)
    return;
  r->last_log = t;
  fprintf(stderr,
          PROG ": epoch %lld/%lld step %lld/%lld loss %.4f acc %.1f%% "
               "%.0f img/s ETA %s\n",
          (long long)r->epoch + 1, (long long)r->o.epochs,
          (long long)r->batch_in_epoch, (long long)r->batches_per_epoch, loss,
          100 * acc, ips, eta);
}

static void say(const run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const run *r, const char *fmt, ...) {
  if (r->o.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

static int eval_now(run *r) {
  double acc, loss;
  tyto_batcher *b = r->valid_b ? r->valid_b : r->test_b;
  if (evaluate(r, b, &acc, &loss) < 0)
    return -1;
  curve_add(&r->eval_acc_curve, (double)r->steps, acc);
  say(r, "step %lld: %s accuracy %.2f%%, loss %.4f\n", (long long)r->steps,
      r->valid_b ? "validation" : "test", 100 * acc, loss);
  if (r->valid_b)
    r->valid_accuracy = acc;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Prefetching                                                             */

/* One thread fills the next batch while the current step runs: two slots,
 * handed back and forth with semaphores, in the batcher's order (so a run
 * sees the batches it would see without it). It stops after the epoch's
 * last batch (a slot with filled 0) or when asked. */
typedef struct prefetch {
  tyto_batcher *b;
  size_t xbytes, ybytes;
  float *x[2], *y[2];
  int64_t filled[2];
  tyto_status st[2];
  char msg[2][512];
  sem_t empty[2], full[2];
  volatile int stop;
  pthread_t thread;
  int running;
} prefetch;

static void *prefetch_main(void *arg) {
  prefetch *pf = arg;
  for (int slot = 0;; slot ^= 1) {
    sem_wait(&pf->empty[slot]);
    if (pf->stop) {
      pf->filled[slot] = 0;
      pf->st[slot] = TYTO_OK;
      sem_post(&pf->full[slot]);
      return NULL;
    }
    pf->st[slot] =
        tyto_batcher_next(pf->b, pf->x[slot], pf->xbytes, pf->y[slot],
                          pf->ybytes, &pf->filled[slot]);
    if (pf->st[slot] != TYTO_OK)
      snprintf(pf->msg[slot], sizeof pf->msg[slot], "%s", tyto_errmsg());
    int last = pf->st[slot] != TYTO_OK || pf->filled[slot] == 0;
    sem_post(&pf->full[slot]);
    if (last)
      return NULL;
  }
}

static int prefetch_init(prefetch *pf, tyto_batcher *b, size_t xbytes,
                         size_t ybytes) {
  memset(pf, 0, sizeof *pf);
  pf->b = b;
  pf->xbytes = xbytes;
  pf->ybytes = ybytes;
  for (int i = 0; i < 2; i++) {
    pf->x[i] = malloc(xbytes);
    pf->y[i] = malloc(ybytes);
    if (!pf->x[i] || !pf->y[i])
      return -1;
  }
  return 0;
}

/* Starts filling from the batcher's current position. */
static int prefetch_start(prefetch *pf) {
  pf->stop = 0;
  for (int i = 0; i < 2; i++) {
    sem_init(&pf->empty[i], 0, 1);
    sem_init(&pf->full[i], 0, 0);
  }
  if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0)
    return -1;
  pf->running = 1;
  return 0;
}

/* Waits for slot's batch. */
static void prefetch_take(prefetch *pf, int slot) {
  sem_wait(&pf->full[slot]);
}

/* Gives slot back to be filled again. */
static void prefetch_give(prefetch *pf, int slot) {
  sem_post(&pf->empty[slot]);
}

static void prefetch_stop(prefetch *pf) {
  if (!pf->running)
    return;
  pf->stop = 1;
  for (int i = 0; i < 2; i++)
    sem_post(&pf->empty[i]);
  pthread_join(pf->thread, NULL);
  for (int i = 0; i < 2; i++) {
    sem_destroy(&pf->empty[i]);
    sem_destroy(&pf->full[i]);
  }
  pf->running = 0;
}

static void prefetch_free(prefetch *pf) {
  prefetch_stop(pf);
  for (int i = 0; i < 2; i++) {
    free(pf->x[i]);
    free(pf->y[i]);
  }
}

/* ---------------------------------------------------------------------- */
/* Training                                                                */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

static int train_epochs(run *r, prefetch *pf);

static int train(run *r) {
  r->epoch_seconds = calloc((size_t)r->o.epochs, sizeof *r->epoch_seconds);
  prefetch pf;
  if (!r->epoch_seconds ||
      prefetch_init(&pf, r->train_b, r->xbytes, r->ybytes) < 0) {
    prefetch_free(&pf);
    return fail_status("train");
  }
  int rc = train_epochs(r, &pf);
  prefetch_free(&pf);
  return rc;
}

static int train_epochs(run *r, prefetch *pf) {
  int stopped = 0;
  while (r->epoch < r->o.epochs && !stopped) {
    if (tyto_batcher_seek(r->train_b, (uint64_t)r->epoch, r->batch_in_epoch) !=
        TYTO_OK)
      return fail_status("data");
    if (prefetch_start(pf) < 0) {
      fprintf(stderr, PROG ": cannot start the data thread\n");
      return -1;
    }
    r->epoch_loss = r->epoch_correct = r->epoch_images = 0;
    r->bar_t0 = now();
    r->last_log = r->bar_t0;
    double t0 = r->bar_t0;
    for (int slot = 0;; slot ^= 1) {
      if (interrupted) {
        say(r, "interrupted\n");
        stopped = 1;
        break;
      }
      double ts = now();
      prefetch_take(pf, slot);
      int64_t filled = pf->filled[slot];
      if (pf->st[slot] != TYTO_OK) {
        fprintf(stderr, PROG ": data: %s\n", pf->msg[slot]);
        return -1;
      }
      if (filled == 0)
        break;
      float out[3];
      if (tyto_program_set_input(r->train_p, r->x, pf->x[slot], r->xbytes) ||
          tyto_program_set_input(r->train_p, r->labels, pf->y[slot], r->ybytes))
        return fail_status("training step");
      prefetch_give(pf, slot);
      double tr = now();
      r->data_seconds += tr - ts;
      if (tyto_program_run(r->train_p) ||
          tyto_program_read_output(r->train_p, 0, &out[0], sizeof(float)) ||
          tyto_program_read_output(r->train_p, 1, &out[1], sizeof(float)) ||
          tyto_program_read_output(r->train_p, 2, &out[2], sizeof(float)))
        return fail_status("training step");
      r->run_seconds += now() - tr;
      r->steps++;
      r->batch_in_epoch++;
      r->last_loss = out[0];
      r->last_lr = out[2];
      r->epoch_loss += (double)out[0] * (double)filled;
      r->epoch_correct += out[1];
      r->epoch_images += (double)filled;
      if (!isfinite(out[0])) {
        fprintf(stderr,
                PROG ": the loss is %g at step %lld (learning rate %g): "
                     "training diverged; lower --lr or clip gradients "
                     "(--clip-norm)\n",
                (double)out[0], (long long)r->steps, (double)out[2]);
        return -1;
      }
      if (r->steps % 10 == 0 || r->batch_in_epoch == r->batches_per_epoch)
        curve_add(&r->loss_curve, (double)r->steps, out[0]);
      progress(r, 0);
      if (r->o.checkpoint_every && r->steps % r->o.checkpoint_every == 0 &&
          save_checkpoint(r) < 0)
        return -1;
      if (r->o.eval_every && r->steps % r->o.eval_every == 0) {
        double te = now();
        if (eval_now(r) < 0)
          return -1;
        t0 += now() - te; /* evaluation is not training time */
        r->bar_t0 += now() - te;
      }
      if (r->o.max_steps && r->steps >= r->o.max_steps) {
        stopped = 1;
        break;
      }
    }
    prefetch_stop(pf);
    double dt = now() - t0;
    progress(r, 1);
    r->train_seconds += dt;
    if (!stopped) {
      r->epoch_seconds[r->epochs_done_here++] = dt;
      curve_add(&r->train_acc_curve, (double)r->steps,
                r->epoch_images > 0 ? r->epoch_correct / r->epoch_images : 0);
      r->epoch++;
      r->batch_in_epoch = 0;
      if (!r->o.eval_every && eval_now(r) < 0)
        return -1;
    }
    if (r->o.checkpoint && (!stopped || r->o.max_steps || interrupted) &&
        save_checkpoint(r) < 0)
      return -1;
  }
  return interrupted ? -1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Reports                                                                 */

static long peak_rss_bytes(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss * 1024L : -1;
}

static double images_per_second(const run *r, int64_t steps_here) {
  return r->train_seconds > 0
             ? (double)steps_here * (double)r->o.batch / r->train_seconds
             : 0;
}

static double mean_epoch(const run *r) {
  double s = 0;
  for (int64_t i = 0; i < r->epochs_done_here; i++)
    s += r->epoch_seconds[i];
  return r->epochs_done_here ? s / (double)r->epochs_done_here : 0;
}

static void report_json(const run *r, int64_t steps_here) {
  json_t *o = json_object(), *eps = json_array(), *devs = json_array();
  for (int64_t i = 0; i < r->epochs_done_here; i++)
    json_array_append_new(eps, json_real(r->epoch_seconds[i]));
  json_array_append_new(devs, json_string(r->device_id));
  json_object_set_new(o, "model", json_string(r->model_name));
  json_object_set_new(o, "optimizer",
                      json_string(tyto_optim_kind_name(r->oo.kind)));
  json_object_set_new(o, "lr", json_real(r->oo.lr));
  json_object_set_new(o, "epochs", json_integer(r->epoch));
  json_object_set_new(o, "steps", json_integer(r->steps));
  json_object_set_new(o, "batch", json_integer(r->o.batch));
  json_object_set_new(o, "seed", json_integer((json_int_t)r->o.seed));
  json_object_set_new(o, "train_images", json_integer(r->n_train));
  json_object_set_new(o, "test_images", json_integer(r->n_test));
  json_object_set_new(o, "train_loss",
                      json_real(r->epoch_images > 0
                                    ? r->epoch_loss / r->epoch_images
                                    : r->last_loss));
  json_object_set_new(
      o, "train_accuracy",
      json_real(r->epoch_images > 0 ? r->epoch_correct / r->epoch_images : 0));
  json_object_set_new(o, "test_accuracy",
                      r->have_test ? json_real(r->test_accuracy) : json_null());
  json_object_set_new(o, "test_loss",
                      r->have_test ? json_real(r->test_loss) : json_null());
  if (r->valid_b)
    json_object_set_new(o, "validation_accuracy", json_real(r->valid_accuracy));
  json_object_set_new(o, "images_per_second",
                      json_real(images_per_second(r, steps_here)));
  json_object_set_new(o, "seconds_per_epoch", json_real(mean_epoch(r)));
  json_object_set_new(o, "epoch_seconds", eps);
  json_object_set_new(o, "train_seconds", json_real(r->train_seconds));
  json_object_set_new(o, "data_seconds", json_real(r->data_seconds));
  json_object_set_new(o, "step_seconds", json_real(r->run_seconds));
  json_object_set_new(o, "compile_seconds", json_real(r->compile_seconds));
  json_object_set_new(o, "peak_rss_bytes", json_integer(peak_rss_bytes()));
  json_object_set_new(o, "devices", devs);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                              JSON_REAL_PRECISION(6));
  if (s)
    printf("%s\n", s);
  free(s);
  json_decref(o);
}

static void report_text(const run *r, int64_t steps_here) {
  printf("model %s on %s: %lld steps of %lld images, %lld epochs\n",
         r->model_name, r->device_id, (long long)r->steps,
         (long long)r->o.batch, (long long)r->epoch);
  if (r->have_test)
    printf("test accuracy %.2f%% (loss %.4f) on %lld images\n",
           100 * r->test_accuracy, r->test_loss, (long long)r->n_test);
  printf("%.0f images/s, %.1f s per epoch, compile %.2f s, peak RSS %.0f MB\n",
         images_per_second(r, steps_here), mean_epoch(r), r->compile_seconds,
         (double)peak_rss_bytes() / 1e6);
}

static int write_plot(const run *r) {
  char title[160], err[512];
  snprintf(title, sizeof title, "tyto-train: %s", r->model_name);
  for (char *c = title; *c; c++)
    if (*c == '<' || *c == '>' || *c == '&' || *c == '"')
      *c = '_';
  plot_series loss = {"training loss", "#1f77b4", r->loss_curve.n,
                      r->loss_curve.x, r->loss_curve.y};
  plot_series acc[2] = {
      {"training accuracy (epoch)", "#1f77b4", r->train_acc_curve.n,
       r->train_acc_curve.x, r->train_acc_curve.y},
      {r->valid_b ? "validation accuracy" : "test accuracy", "#d62728",
       r->eval_acc_curve.n, r->eval_acc_curve.x, r->eval_acc_curve.y}};
  if (plot_write_svg(r->o.plot, title, 1, &loss, 2, acc, err, sizeof err) < 0) {
    fprintf(stderr, PROG ": --plot: %s\n", err);
    return -1;
  }
  return 0;
}

static void run_free(run *r) {
  tyto_program_free(r->train_p);
  tyto_program_free(r->eval_p);
  tyto_optim_free(r->optim);
  tyto_nn_free(r->nn);
  tyto_graph_free(r->g);
  tyto_context_free(r->ctx);
  tyto_batcher_free(r->train_b);
  tyto_batcher_free(r->test_b);
  tyto_batcher_free(r->valid_b);
  tyto_dataset_free(r->train);
  tyto_dataset_free(r->test);
  mf_free(r->model);
  free(r->state);
  free(r->xbuf);
  free(r->ybuf);
  free(r->epoch_seconds);
  curve_free(&r->loss_curve);
  curve_free(&r->train_acc_curve);
  curve_free(&r->eval_acc_curve);
}

int main(int argc, char **argv) {
  run r;
  memset(&r, 0, sizeof r);
  int prc = parse_options(argc, argv, &r.o);
  if (prc != 0)
    return prc > 0 ? 0 : EXIT_USAGE;
  int code = EXIT_USAGE;
  char err[2048];

  if (r.o.model_file) {
    if (mf_load(r.o.model_file, &r.model, err, sizeof err) < 0) {
      fprintf(stderr, PROG ": %s\n", err);
      goto done;
    }
    r.model_name = r.o.model_file;
  } else {
    char name[64];
    snprintf(name, sizeof name, "(preset %s)", r.o.model);
    if (mf_parse(mf_preset(r.o.model), name, &r.model, err, sizeof err) < 0) {
      fprintf(stderr, PROG ": %s\n", err);
      code = EXIT_RUNTIME;
      goto done;
    }
    r.model_name = r.o.model;
  }
  if (load_data(&r, &code) < 0 || make_batchers(&r) < 0)
    goto done;

  tyto_context_options co;
  tyto_context_options_init(&co);
  if (r.o.devices)
    co.devices = r.o.devices;
  if (tyto_context_new(&co, &r.ctx) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  if (tyto_context_device_count(r.ctx) > 1)
    say(&r, "%zu devices selected; training runs on the first (%s)\n",
        tyto_context_device_count(r.ctx),
        tyto_device_get_info(tyto_context_device(r.ctx, 0))->id);
  r.device_id = tyto_device_get_info(tyto_context_device(r.ctx, 0))->id;

  if (build(&r, &code) < 0)
    goto done;
  code = EXIT_RUNTIME;
  if (compile(&r) < 0)
    goto done;
  if (r.o.resume) {
    code = EXIT_USAGE;
    if (resume(&r) < 0)
      goto done;
    say(&r, "resumed from %s at epoch %lld, step %lld\n", r.o.checkpoint,
        (long long)r.epoch + 1, (long long)r.steps);
  }
  code = EXIT_RUNTIME;
  r.bar = r.o.progress < 0 ? isatty(STDERR_FILENO) : r.o.progress;
  say(&r,
      "training %s on %s: %lld images, %lld batches of %lld per epoch, "
      "%s lr %g\n",
      r.model_name, r.device_id, (long long)r.n_train,
      (long long)r.batches_per_epoch, (long long)r.o.batch,
      tyto_optim_kind_name(r.oo.kind), r.oo.lr);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int64_t steps0 = r.steps;
  if (train(&r) < 0)
    goto done;
  if (evaluate(&r, r.test_b, &r.test_accuracy, &r.test_loss) < 0)
    goto done;
  r.have_test = 1;
  if (r.o.plot && write_plot(&r) < 0)
    goto done;
  if (r.o.json)
    report_json(&r, r.steps - steps0);
  else
    report_text(&r, r.steps - steps0);
  code = 0;
done:
  run_free(&r);
  return code;
}
