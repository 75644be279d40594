/*
 * tyto-train's command line (options.h): getopt_long, every value checked
 * with a message that says what was expected and what was given.
 */
#define _POSIX_C_SOURCE 200809L

#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file.h"

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
      "  --data-parallel auto|on|off  train on every selected device at "
      "once (auto: when\n"
      "                        --devices, TYTO_DEVICES or the config chose "
      "them)\n"
      "  --on-device-failure stop|continue  when a device fails mid-run "
      "(default stop)\n"
      "  --calibrate-steps N   set the devices' shares of the batch from "
      "their speed\n"
      "                        after N steps (default 3; 0: equal shares "
      "until the\n"
      "                        first rebalance)\n"
      "  --rebalance-every N   ... and again every N steps after that "
      "(default 50; 0:\n"
      "                        never)\n"
      "  --shard-granularity N  shares in multiples of N images (default 4 "
      "where the\n"
      "                        batch allows, else 1)\n"
      "  --dist-timeout S      under mpirun or srun: give up on a rank that "
      "does not\n"
      "                        reach a step's exchange within S seconds "
      "(default 60)\n"
      "  --exact-exchange      under mpirun or srun: add the ranks' "
      "gradients in double\n"
      "                        (twice the bytes; docs/distributed.md)\n"
      "  --sync-batch-norm     batch norm layers normalise with the whole "
      "global batch's\n"
      "                        statistics, summed over the devices and ranks "
      "(default:\n"
      "                        each device's shard; docs/data-parallel.md)\n"
      "Precision\n"
      "  --precision P         f32 (default), bf16 or f16: automatic mixed "
      "precision,\n"
      "                        f32 master weights (docs/precision.md)\n"
      "  --loss-scale X        the first loss scale (default: 65536 with f16, "
      "1 with\n"
      "                        bf16); f16 adjusts it, skipping steps that "
      "overflow\n"
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
      "  --version             print the version and exit\n"
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

/* A finite number > 0: rates, epsilons, timeouts. */
static int parse_positive(const char *opt, const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(x) || !(x > 0))
    return bad_value(opt, "a finite number > 0", s);
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
  O_DATA_PARALLEL,
  O_ON_DEVICE_FAILURE,
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
  O_DIST_TIMEOUT,
  O_EXACT_EXCHANGE,
  O_SYNC_BATCH_NORM,
  O_PRECISION,
  O_LOSS_SCALE,
  O_REBALANCE_EVERY,
  O_CALIBRATE_STEPS,
  O_SHARD_GRANULARITY,
  O_HELP,
  O_VERSION
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
    {"data-parallel", required_argument, NULL, O_DATA_PARALLEL},
    {"on-device-failure", required_argument, NULL, O_ON_DEVICE_FAILURE},
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
    {"dist-timeout", required_argument, NULL, O_DIST_TIMEOUT},
    {"exact-exchange", no_argument, NULL, O_EXACT_EXCHANGE},
    {"sync-batch-norm", no_argument, NULL, O_SYNC_BATCH_NORM},
    {"precision", required_argument, NULL, O_PRECISION},
    {"loss-scale", required_argument, NULL, O_LOSS_SCALE},
    {"rebalance-every", required_argument, NULL, O_REBALANCE_EVERY},
    {"calibrate-steps", required_argument, NULL, O_CALIBRATE_STEPS},
    {"shard-granularity", required_argument, NULL, O_SHARD_GRANULARITY},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0}};

/* An option that the chosen optimiser or schedule does not read is an
 * error, not silently dropped. */
static int check_applicable(const options *o) {
  const char *opt = tyto_optim_kind_name(o->optim);
  int adam = o->optim == TYTO_OPTIM_ADAM || o->optim == TYTO_OPTIM_ADAMW;
  int sched = o->schedule < 0 ? TYTO_SCHEDULE_CONSTANT : o->schedule;
  const char *sname = tyto_schedule_name((tyto_schedule_kind)sched);
  static const char for_adam[] = "--optimizer adam and adamw";
  static const char for_rms[] = "--optimizer rmsprop";
  static const char for_sgd[] = "--optimizer sgd";
  static const char not_sgd[] = "--optimizer adagrad, rmsprop, adam and adamw";
  static const char for_gamma[] = "--schedule step and exponential";
  static const char for_step[] = "--schedule step";
  static const char for_cos[] = "--schedule cosine";
  const struct {
    int given, applies;
    const char *flag, *to, *chosen;
  } rules[] = {
      {!isnan(o->momentum), o->optim == TYTO_OPTIM_SGD, "momentum", for_sgd,
       opt},
      {o->nesterov, o->optim == TYTO_OPTIM_SGD, "nesterov", for_sgd, opt},
      {!isnan(o->beta1), adam, "beta1", for_adam, opt},
      {!isnan(o->beta2), adam, "beta2", for_adam, opt},
      {!isnan(o->alpha), o->optim == TYTO_OPTIM_RMSPROP, "alpha", for_rms, opt},
      {!isnan(o->eps), o->optim != TYTO_OPTIM_SGD, "eps", not_sgd, opt},
      {!isnan(o->gamma),
       sched == TYTO_SCHEDULE_STEP || sched == TYTO_SCHEDULE_EXPONENTIAL,
       "gamma", for_gamma, sname},
      {o->step_size > 0, sched == TYTO_SCHEDULE_STEP, "step-size", for_step,
       sname},
      {o->total_steps > 0, sched == TYTO_SCHEDULE_COSINE, "total-steps",
       for_cos, sname},
      {!isnan(o->min_lr), sched == TYTO_SCHEDULE_COSINE, "min-lr", for_cos,
       sname},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (rules[i].given && !rules[i].applies) {
      fprintf(stderr, PROG ": --%s applies to %s only; this run uses %s %s\n",
              rules[i].flag, rules[i].to,
              rules[i].to == for_gamma || rules[i].to == for_step ||
                      rules[i].to == for_cos
                  ? "--schedule"
                  : "--optimizer",
              rules[i].chosen);
      return -1;
    }
  return 0;
}

int options_parse(int argc, char **argv, options *o) {
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
  o->data_parallel = -1;
  o->dist_timeout = NAN;
  o->rebalance_every = o->calibrate_steps = -1;
  opterr = 0;
  int c, idx;
  int64_t v;
  const int64_t big = INT64_C(1) << 40;
  while ((c = getopt_long(argc, argv, ":", long_options, &idx)) != -1) {
    const char *name =
        c >= O_MODEL && c <= O_VERSION ? long_options[c - O_MODEL].name : "";
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
      rc = parse_count(name, optarg, 0, big, &o->validation);
      break;
    case O_EPOCHS:
      rc = parse_count(name, optarg, 1, MAX_EPOCHS, &o->epochs);
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
    case O_LR: rc = parse_positive(name, optarg, &o->lr); break;
    case O_MOMENTUM: rc = parse_real(name, optarg, 0, &o->momentum); break;
    case O_NESTEROV: o->nesterov = 1; break;
    case O_WEIGHT_DECAY:
      rc = parse_real(name, optarg, 0, &o->weight_decay);
      break;
    case O_BETA1: rc = parse_real(name, optarg, 0, &o->beta1); break;
    case O_BETA2: rc = parse_real(name, optarg, 0, &o->beta2); break;
    case O_ALPHA: rc = parse_real(name, optarg, 0, &o->alpha); break;
    case O_EPS: rc = parse_positive(name, optarg, &o->eps); break;
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
    case O_DATA_PARALLEL:
      if (strcmp(optarg, "on") && strcmp(optarg, "off") &&
          strcmp(optarg, "auto")) {
        fprintf(stderr,
                PROG ": --data-parallel: expected auto, on or off, got '%s'\n",
                optarg);
        return -1;
      }
      o->data_parallel = strcmp(optarg, "auto") == 0 ? -1
                         : strcmp(optarg, "on") == 0 ? 1
                                                     : 0;
      break;
    case O_ON_DEVICE_FAILURE:
      if (strcmp(optarg, "stop") && strcmp(optarg, "continue")) {
        fprintf(stderr,
                PROG ": --on-device-failure: expected stop or continue, got "
                     "'%s'\n",
                optarg);
        return -1;
      }
      o->continue_on_failure = strcmp(optarg, "continue") == 0;
      break;
    case O_JSON: o->json = 1; break;
    case O_PLOT: o->plot = optarg; break;
    case O_PROGRESS: o->progress = 1; break;
    case O_NO_PROGRESS: o->progress = 0; break;
    case O_QUIET: o->quiet = 1; break;
    case O_EXACT_EXCHANGE: o->exact_exchange = 1; break;
    case O_SYNC_BATCH_NORM: o->sync_batch_norm = 1; break;
    case O_PRECISION:
      if (strcmp(optarg, "f32") == 0)
        o->precision = TYTO_F32;
      else if (strcmp(optarg, "bf16") == 0)
        o->precision = TYTO_BF16;
      else if (strcmp(optarg, "f16") == 0)
        o->precision = TYTO_F16;
      else
        rc = bad_value(name, "f32, bf16 or f16", optarg);
      break;
    case O_LOSS_SCALE:
      rc = parse_positive(name, optarg, &o->loss_scale);
      if (rc == 0 && !(o->loss_scale < 1e30))
        rc = bad_value(name, "a number > 0 and below 1e30", optarg);
      break;
    case O_DIST_TIMEOUT:
      rc = parse_positive(name, optarg, &o->dist_timeout);
      break;
    case O_REBALANCE_EVERY:
      rc = parse_count(name, optarg, 0, big, &o->rebalance_every);
      break;
    case O_CALIBRATE_STEPS:
      rc = parse_count(name, optarg, 0, big, &o->calibrate_steps);
      break;
    case O_SHARD_GRANULARITY:
      rc = parse_count(name, optarg, 1, MAX_BATCH, &o->shard_granularity);
      break;
    case O_HELP: usage(stdout); return 1;
    case O_VERSION: printf(PROG " %s\n", tyto_version()); return 1;
    case ':':
      fprintf(stderr, PROG ": option '%s' needs a value\n", argv[optind - 1]);
      return -1;
    default: {
      /* --flag=value for an option that takes none: say so, not that
       * the option is unknown. */
      const char *a = argv[optind - 1], *eq = strchr(a, '=');
      for (size_t k = 0; eq && !strncmp(a, "--", 2) && long_options[k].name;
           k++)
        if (long_options[k].has_arg == no_argument &&
            strlen(long_options[k].name) == (size_t)(eq - a - 2) &&
            !strncmp(a + 2, long_options[k].name, (size_t)(eq - a - 2))) {
          fprintf(stderr, PROG ": option '--%s' takes no value, got '%s'\n",
                  long_options[k].name, a);
          return -1;
        }
      fprintf(stderr, PROG ": unknown option '%s' (see " PROG " --help)\n", a);
      return -1;
    }
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
  if (check_applicable(o) < 0)
    return -1;
  if (o->schedule == TYTO_SCHEDULE_STEP && o->step_size <= 0) {
    fprintf(stderr, PROG ": --schedule step needs --step-size N (steps "
                         "between decays)\n");
    return -1;
  }
  if (o->schedule == TYTO_SCHEDULE_COSINE && o->total_steps <= 0) {
    fprintf(stderr, PROG ": --schedule cosine needs --total-steps N (the "
                         "steps it decays over)\n");
    return -1;
  }
  if (o->loss_scale != 0 && o->precision == TYTO_F32) {
    fprintf(stderr, PROG ": --loss-scale needs --precision bf16 or f16 (f32 "
                         "training scales nothing)\n");
    return -1;
  }
  if (o->shard_granularity > o->batch) {
    fprintf(stderr,
            PROG ": --shard-granularity %lld is larger than the batch "
                 "(--batch %lld): every device's share is a multiple of it\n",
            (long long)o->shard_granularity, (long long)o->batch);
    return -1;
  }
  if (o->shard_granularity > 0 && o->batch % o->shard_granularity) {
    fprintf(stderr,
            PROG ": --batch %lld is not a multiple of --shard-granularity "
                 "%lld (every device's share is a multiple of it)\n",
            (long long)o->batch, (long long)o->shard_granularity);
    return -1;
  }
  if ((o->resume || o->checkpoint_every) && !o->checkpoint) {
    fprintf(stderr, PROG ": --%s needs --checkpoint FILE\n",
            o->resume ? "resume" : "checkpoint-every");
    return -1;
  }
  return 0;
}

void options_optim(const options *o, tyto_optim_options *oo) {
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
