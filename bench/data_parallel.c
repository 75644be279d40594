/*
 * bench/data_parallel: data-parallel training throughput (<tyto/parallel.h>,
 * docs/data-parallel.md) of tyto-train's "mlp" and "cnn" presets (built by
 * mf_build from tools/train/model_file.c, as tyto-train builds them), with
 * softmax cross-entropy and Adam, on Fashion-MNIST-shaped batches (28x28
 * images, 10 classes: the first images of Fashion-MNIST's t10k split when
 * TYTO_FASHION_MNIST, default /usr/share/datasets/fashion-mnist, holds it,
 * else synthetic ones). Per model, over the selected devices (TYTO_DEVICES,
 * default cpu:0,opencl:0? -- the OpenCL device when there is one):
 *
 *   X alone            a tyto_dp of one device, for each device;
 *   together, by rate  all devices, shards proportional to the rates
 *                      measured alone (weights = images/s of each alone,
 *                      from a calibration run of N steps each before the
 *                      timed one);
 *   together, equal    all devices, equal shards.
 *   by rate, one optim.  as by rate, with the optimiser on the first
 *                      device alone and its parameters broadcast
 *                      (tyto_dp_options.single_optimiser).
 *   by rate, no overlap  as by rate, with the gradients combined after
 *                      the whole backward pass instead of as each is
 *                      computed (tyto_dp_options.no_overlap).
 *   X at its shard     a tyto_dp of one device, for each device, whose
 *                      batch is the shard X trains by rate.
 *
 * With one device selected the together configurations are skipped,
 * with a message. Every configuration starts from the same initial
 * parameters (the tyto_nn's, tyto_nn_initial_value) and trains on the same
 * cycle of batches; after the warm-up steps, the configurations take turns
 * in chunks of 5 steps until each has run N, so that a machine that gets
 * busier slows them alike. Per configuration it prints: images/s (the
 * batch over the mean step time, measured around tyto_dp_step), the
 * ratio to the sum of the devices' rates alone, each replica's shard, its
 * phase time (tyto_dp_replica_seconds: forward and backward, phase 0) and
 * its wait for the slowest (tyto_dp_replica_wait), means over the steps,
 * and the time outside phase 0: the step time minus the slowest replica's
 * phase 0, i.e. the host exchange of the gradients plus the update
 * (phase 1; tyto_dp_replica_update_seconds has the update alone), and
 * the exchange's time (tyto_dp_exchange_seconds) with the part of it the
 * backward pass did not hide (tyto_dp_exchange_exposed_seconds). Where
 * the replicas' phase
 * plus wait differ (they must all equal the slowest phase 0), the phase
 * times are not phase 0's and a warning says so. Then the step-1 losses
 * (the same parameters and batch everywhere: they agree to rounding), the
 * issue's goal, and one line starting with "BENCH ".
 *
 * Two sums of rates alone: at the whole batch ("vs sum", strong
 * scaling: a device alone does the work of both), and each device at the
 * shard it trains together ("vs shrd": what splitting a batch and
 * combining the gradients cost, the scaling efficiency PyTorch's DDP and
 * Horovod report, there with equal shards). A replica's update and the
 * parts of its step that do not grow with its shard are paid once per
 * step whatever the shard, so the first ratio stays under the second by
 * their share of the step, on any device and any exchange.
 *
 * The goal: together (by rate) at least 0.85 x the sum of the rates of
 * the devices alone, each at its shard, on the CNN, when each device has
 * a core of its own. On a 2-core machine
 * with cpu:0 and PoCL's opencl:0 that means one thread each: the CPU
 * plugin's `threads = 1` in a config file's [cpu] section (its pool,
 * OpenBLAS and oneDNN's OpenMP team all follow it), and PoCL's
 * POCL_MAX_PTHREAD_COUNT (POCL_CPU_MAX_CU_COUNT in later releases):
 *
 *   printf '[cpu]\nthreads = 1\n' > one-thread.conf
 *   TYTO_PLUGIN_PATH=build/plugins/cpu/.libs:build/plugins/opencl/.libs \
 *   TYTO_CONFIG=one-thread.conf POCL_MAX_PTHREAD_COUNT=1 \
 *     build/bench/data_parallel [--steps N] [--warmup N] [--batch N]
 *                               [--models mlp,cnn] [--quick]
 *
 * Without them each device uses every core and the two compete. The
 * program prints what it detected: each device's compute units (cpu:0's
 * threads, PoCL's) and PoCL's variables. N 20,
 * 3 warm-up steps, batch 64 by default; --quick: N 3, 1 warm-up step, for
 * a check that it runs. Not a test: nothing here fails on timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tyto/parallel.h>
#include <tyto/tyto.h>

#include "train/model_file.h"

enum { CLASSES = 10, SIDE = 28, PIXELS = SIDE * SIDE };
enum { MAX_DEV = 8, MAX_CONF = 2 * MAX_DEV + 4, MAX_MODELS = 4 };
/* Distinct batches cycled through; steps per turn in the timed run. */
enum { N_BATCHES = 8, CHUNK = 5 };
#define GOAL_TOGETHER 0.85
#define SEED 1

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* The BENCH line                                                          */

typedef struct text {
  char *s;
  size_t len, cap;
  int failed;
} text;

static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = t->failed ? 0
                      : vsnprintf(t->s ? t->s + t->len : NULL, t->cap - t->len,
                                  fmt, ap);
    va_end(ap);
    if (t->failed || n < 0)
      return;
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = 2 * (t->cap + (size_t)n) + 256;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->failed = 1;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
}

/* ---------------------------------------------------------------------- */
/* The data                                                                */

/* N_BATCHES batches (fewer when the dataset is small): images in [0, 1]
 * and one-hot labels, batch after batch. */
typedef struct data {
  int64_t batch, n_batches;
  float *x, *y;
  char source[256];
} data;

/* A bright rectangle per class on a dark background, with noise (as
 * bench/placement draws them). */
static void synthetic(data *d) {
  uint32_t seed = 12345;
  int64_t n = d->batch * d->n_batches;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = (i * 7) % CLASSES, r0 = 2 + 2 * c, c0 = 20 - 2 * c;
    d->y[i * CLASSES + c] = 1;
    for (int64_t r = 0; r < SIDE; r++)
      for (int64_t k = 0; k < SIDE; k++) {
        seed = seed * 1103515245u + 12345u;
        float noise = (float)((seed >> 9) % 1000) / 4000.0f;
        int in = r >= r0 && r < r0 + 8 && k >= c0 && k < c0 + 6;
        d->x[(i * SIDE + r) * SIDE + k] = in ? 0.75f + noise : noise / 4;
      }
  }
}

static int data_load(data *d, int64_t batch) {
  memset(d, 0, sizeof *d);
  d->batch = batch;
  d->n_batches = N_BATCHES;
  const char *dir = getenv("TYTO_FASHION_MNIST");
  if (!dir || !*dir)
    dir = "/usr/share/datasets/fashion-mnist";
  tyto_dataset *ds = NULL;
  char why[200] = "";
  if (tyto_dataset_load_dir(dir, "t10k", CLASSES, &ds) != TYTO_OK) {
    snprintf(why, sizeof why, "%s", tyto_errmsg());
  } else if (tyto_dataset_item_size(ds) != PIXELS) {
    snprintf(why, sizeof why, "%s holds items of %lld values, not %d", dir,
             (long long)tyto_dataset_item_size(ds), PIXELS);
  } else if (tyto_dataset_count(ds) < batch) {
    snprintf(why, sizeof why, "%s holds %lld images, fewer than a batch", dir,
             (long long)tyto_dataset_count(ds));
  } else if (tyto_dataset_count(ds) / batch < d->n_batches) {
    d->n_batches = tyto_dataset_count(ds) / batch;
  }
  size_t n = (size_t)(batch * d->n_batches);
  d->x = malloc(n * PIXELS * sizeof *d->x);
  d->y = calloc(n * CLASSES, sizeof *d->y);
  if (!d->x || !d->y) {
    tyto_dataset_free(ds);
    fprintf(stderr, "data_parallel: out of memory for the batches\n");
    return -1;
  }
  if (!why[0] &&
      tyto_dataset_read_images(ds, 0, (int64_t)n, TYTO_F32, 1.0 / 255, d->x,
                               n * PIXELS * sizeof *d->x) != TYTO_OK)
    snprintf(why, sizeof why, "%s", tyto_errmsg());
  if (!why[0]) {
    for (size_t i = 0; i < n; i++)
      d->y[i * CLASSES + (size_t)tyto_dataset_label(ds, (int64_t)i)] = 1;
    snprintf(d->source, sizeof d->source,
             "Fashion-MNIST t10k, images 0-%zu (%s)", n - 1, dir);
  } else {
    synthetic(d);
    snprintf(d->source, sizeof d->source, "synthetic (%.200s)", why);
  }
  tyto_dataset_free(ds);
  return 0;
}

static void data_free(data *d) {
  free(d->x);
  free(d->y);
}

/* ---------------------------------------------------------------------- */
/* The model                                                               */

typedef struct builder {
  const mf_model *model;
  int keep; /* hand the tyto_nn to the caller (in nn), not to the dp */
  tyto_nn *nn;
  char err[1024]; /* mf_build's message */
} builder;

/* tyto_dp_build_fn: the preset's layers on x [batch, input shape], as
 * tyto-train builds them; the loss is softmax cross-entropy, a mean over
 * the batch. */
static tyto_status build_model(void *user, tyto_graph *g, int64_t batch,
                               tyto_dp_model *m) {
  builder *b = user;
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = SEED;
  tyto_nn *nn = NULL;
  tyto_status st = tyto_nn_new(g, &no, &nn);
  if (st != TYTO_OK)
    return st;
  int rank = 1 + mf_input_rank(b->model);
  int64_t xs[TYTO_MAX_RANK], ls[2] = {batch, CLASSES};
  xs[0] = batch;
  memcpy(xs + 1, mf_input_shape(b->model), (size_t)(rank - 1) * sizeof *xs);
  tyto_tensor *x = tyto_nn_input(nn, rank, xs, "x");
  tyto_tensor *labels = tyto_nn_input(nn, 2, ls, "labels");
  tyto_tensor *logits = mf_build(b->model, nn, x, b->err, sizeof b->err);
  if (!logits) {
    tyto_nn_free(nn);
    return TYTO_ERR_INVALID_ARGUMENT;
  }
  m->loss = tyto_loss_softmax_cross_entropy(logits, labels);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = labels;
  tyto_dp_model_from_nn(m, nn, !b->keep);
  if (b->keep)
    b->nn = nn;
  return TYTO_OK;
}

/* The initial value of every parameter, by name: what every configuration
 * starts from. */
typedef struct init_values {
  size_t n;
  char **names;
  float **values;
  size_t *bytes;
} init_values;

static void init_free(init_values *iv) {
  for (size_t i = 0; i < iv->n; i++) {
    free(iv->names[i]);
    free(iv->values[i]);
  }
  free(iv->names);
  free(iv->values);
  free(iv->bytes);
  memset(iv, 0, sizeof *iv);
}

static int init_make(const mf_model *model, init_values *iv) {
  memset(iv, 0, sizeof *iv);
  builder b;
  memset(&b, 0, sizeof b);
  b.model = model;
  b.keep = 1;
  tyto_graph *g = tyto_graph_new();
  tyto_dp_model m;
  memset(&m, 0, sizeof m);
  int rc = g && build_model(&b, g, 1, &m) == TYTO_OK ? 0 : -1;
  if (rc == 0) {
    iv->n = m.n_params;
    iv->names = calloc(iv->n, sizeof *iv->names);
    iv->values = calloc(iv->n, sizeof *iv->values);
    iv->bytes = calloc(iv->n, sizeof *iv->bytes);
    rc = iv->names && iv->values && iv->bytes ? 0 : -1;
  }
  for (size_t k = 0; k < iv->n && rc == 0; k++) {
    const tyto_tensor *t = m.params[k];
    iv->bytes[k] = (size_t)tyto_tensor_numel(t) * sizeof(float);
    iv->names[k] = malloc(strlen(tyto_tensor_name(t)) + 1);
    iv->values[k] = malloc(iv->bytes[k] ? iv->bytes[k] : 1);
    if (!iv->names[k] || !iv->values[k] ||
        tyto_nn_initial_value(b.nn, t, iv->values[k], iv->bytes[k]) != TYTO_OK)
      rc = -1;
    else
      strcpy(iv->names[k], tyto_tensor_name(t));
  }
  if (rc != 0)
    fprintf(stderr, "data_parallel: initial values: %s\n",
            b.err[0] ? b.err : tyto_errmsg());
  tyto_nn_free(b.nn);
  tyto_graph_free(g);
  if (rc != 0)
    init_free(iv);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* Configurations                                                          */

typedef enum kind {
  ALONE,
  BY_RATE,
  EQUAL,
  BY_RATE_ONE,
  BY_RATE_SERIAL,
  ALONE_SHARD
} kind;
static const char *const kind_key[] = {"alone",
                                       "by_rate",
                                       "equal",
                                       "by_rate_one_optimiser",
                                       "by_rate_no_overlap",
                                       "alone_shard"};

typedef struct conf {
  kind what;
  char label[64];
  size_t n;
  size_t dev[MAX_DEV];
  int64_t batch;          /* the global batch; ALONE_SHARD: a shard's */
  double weight[MAX_DEV]; /* the BY_RATE kinds */
  tyto_dp *dp;
  int64_t shard[MAX_DEV];
  int next_batch;
  double first_loss;
  /* The timed steps: their count and sums. */
  int steps;
  double wall, host, phase[MAX_DEV], wait[MAX_DEV];
  double xch, exposed; /* the exchange, and its part after phase 0 */
  int inconsistent;    /* phase + wait differed between replicas */
} conf;

static const char *dev_id(tyto_context *ctx, size_t i) {
  return tyto_device_get_info(tyto_context_device(ctx, i))->id;
}

static int conf_new(conf *c, tyto_context *ctx, const mf_model *model,
                    const init_values *iv, int64_t batch) {
  c->batch = batch;
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  o.n_devices = c->n;
  o.devices = c->dev;
  o.batch = batch;
  o.weights =
      c->what == BY_RATE || c->what == BY_RATE_ONE || c->what == BY_RATE_SERIAL
          ? c->weight
          : NULL;
  o.no_overlap = c->what == BY_RATE_SERIAL;
  /* The optimiser on the first device alone, its parameters broadcast. */
  o.single_optimiser = c->what == BY_RATE_ONE;
  builder b;
  memset(&b, 0, sizeof b);
  b.model = model;
  if (tyto_dp_new(ctx, &o, build_model, &b, &c->dp) != TYTO_OK) {
    fprintf(stderr, "data_parallel: %s: %s\n", c->label,
            b.err[0] ? b.err : tyto_errmsg());
    return -1;
  }
  for (size_t i = 0; i < c->n; i++)
    c->shard[i] = tyto_dp_replica_shard(c->dp, i);
  for (size_t k = 0; k < iv->n; k++)
    if (tyto_dp_write(c->dp, iv->names[k], iv->values[k], iv->bytes[k]) !=
        TYTO_OK) {
      fprintf(stderr, "data_parallel: %s: initial '%s': %s\n", c->label,
              iv->names[k], tyto_errmsg());
      return -1;
    }
  c->first_loss = NAN;
  return 0;
}

/* Runs n steps of c on the next batches of the cycle; timed: adds them to
 * c's sums. */
static int run_steps(conf *c, const data *d, int n, int timed) {
  for (int s = 0; s < n; s++) {
    int64_t k = c->next_batch++ % d->n_batches;
    const void *in[2] = {d->x + k * d->batch * PIXELS,
                         d->y + k * d->batch * CLASSES};
    double loss, t0 = now();
    if (tyto_dp_step(c->dp, in, &loss) != TYTO_OK) {
      fprintf(stderr, "data_parallel: %s: step: %s\n", c->label, tyto_errmsg());
      return -1;
    }
    double dt = now() - t0;
    if (isnan(c->first_loss))
      c->first_loss = loss;
    if (!timed)
      continue;
    double slowest = 0;
    for (size_t i = 0; i < c->n; i++) {
      double p = tyto_dp_replica_seconds(c->dp, i);
      double w = tyto_dp_replica_wait(c->dp, i);
      c->phase[i] += p;
      c->wait[i] += w;
      slowest = p > slowest ? p : slowest;
      /* Each replica's phase 0 plus its wait is the slowest phase 0. */
      double p0 =
          tyto_dp_replica_seconds(c->dp, 0) + tyto_dp_replica_wait(c->dp, 0);
      if (fabs(p + w - p0) > 1e-6)
        c->inconsistent = 1;
    }
    c->wall += dt;
    c->host += dt - slowest;
    c->xch += tyto_dp_exchange_seconds(c->dp);
    c->exposed += tyto_dp_exchange_exposed_seconds(c->dp);
    c->steps++;
  }
  return 0;
}

/* Runs `steps` timed steps of each of the n configurations, taking turns
 * in chunks. */
static int run_interleaved(conf *cs, size_t n, const data *d, int steps) {
  for (int done = 0; done < steps; done += CHUNK) {
    int k = steps - done < CHUNK ? steps - done : CHUNK;
    for (size_t i = 0; i < n; i++)
      if (cs[i].dp && run_steps(&cs[i], d, k, 1) != 0)
        return -1;
  }
  return 0;
}

static double rate(const conf *c) {
  return c->steps > 0 && c->wall > 0 ? (double)c->batch * c->steps / c->wall
                                     : 0;
}

static void conf_clear_timing(conf *c) {
  c->steps = 0;
  c->wall = c->host = c->xch = c->exposed = 0;
  memset(c->phase, 0, sizeof c->phase);
  memset(c->wait, 0, sizeof c->wait);
  c->inconsistent = 0;
}

/* ---------------------------------------------------------------------- */
/* The threads each device runs                                            */

typedef struct threads {
  char line[1024];
  int one_each; /* every device one thread, and a core for each */
} threads;

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

static void detect_threads(tyto_context *ctx, threads *t) {
  size_t n = tyto_context_device_count(ctx), len = 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  t->one_each = (long)n <= cpus;
  for (size_t i = 0; i < n; i++) {
    const tyto_device_info *info =
        tyto_device_get_info(tyto_context_device(ctx, i));
    int one = info->compute_units == 1;
    char extra[512] = "";
    if (strcmp(info->plugin, "cpu") == 0)
      snprintf(extra, sizeof extra,
               " (its pool, OpenBLAS and oneDNN: [cpu] threads)");
    else if (strcmp(info->plugin, "opencl") == 0)
      snprintf(extra, sizeof extra,
               " (POCL_MAX_PTHREAD_COUNT=%s POCL_CPU_MAX_CU_COUNT=%s)",
               env_or("POCL_MAX_PTHREAD_COUNT", "-"),
               env_or("POCL_CPU_MAX_CU_COUNT", "-"));
    t->one_each = t->one_each && one;
    len += (size_t)snprintf(t->line + len, sizeof t->line - len,
                            "  %s: %u compute unit%s%s\n", info->id,
                            info->compute_units,
                            info->compute_units == 1 ? "" : "s", extra);
    if (len >= sizeof t->line)
      len = sizeof t->line - 1;
  }
  snprintf(t->line + len, sizeof t->line - len,
           "  %ld online CPUs; one thread per device, each on a core of "
           "its own: %s\n",
           cpus, t->one_each ? "yes" : "no");
}

/* ---------------------------------------------------------------------- */
/* One model                                                               */

typedef struct model_result {
  const char *name;
  size_t n_conf;
  conf c[MAX_CONF];
  double sum_alone;  /* images/s, each device at the whole batch */
  double sum_shards; /* images/s, each device at its by-rate shard */
  int goal_applies, goal_met;
} model_result;

static void print_table(tyto_context *ctx, model_result *mr) {
  printf("%-20s %9s %7s %7s %8s %8s %7s %7s | %-10s %6s %9s %8s\n",
         "configuration", "images/s", "vs sum", "vs shrd", "step ms", "host ms",
         "xch ms", "exp. ms", "device", "shard", "phase ms", "wait ms");
  int inconsistent = 0;
  double l0 = mr->c[0].first_loss, worst = 0;
  for (size_t k = 0; k < mr->n_conf; k++) {
    conf *c = &mr->c[k];
    if (!c->dp) {
      printf("%-20s (not run)\n", c->label);
      continue;
    }
    double r = rate(c), st = c->steps ? c->steps : 1;
    char vs[16] = "-", vw[16] = "-";
    if (c->n > 1 && mr->sum_alone > 0)
      snprintf(vs, sizeof vs, "%.3f", r / mr->sum_alone);
    if (c->n > 1 && mr->sum_shards > 0)
      snprintf(vw, sizeof vw, "%.3f", r / mr->sum_shards);
    for (size_t i = 0; i < c->n; i++) {
      if (i == 0)
        printf("%-20s %9.1f %7s %7s %8.2f %8.2f %7.2f %7.2f | ", c->label, r,
               vs, vw, 1e3 * c->wall / st, 1e3 * c->host / st,
               1e3 * c->xch / st, 1e3 * c->exposed / st);
      else
        printf("%-20s %9s %7s %7s %8s %8s %7s %7s | ", "", "", "", "", "", "",
               "", "");
      printf("%-10s %6lld %9.2f %8.2f\n", dev_id(ctx, c->dev[i]),
             (long long)c->shard[i], 1e3 * c->phase[i] / st,
             1e3 * c->wait[i] / st);
    }
    inconsistent |= c->inconsistent;
    double dl = fabs(c->first_loss - l0) / fabs(l0);
    worst = dl > worst ? dl : worst;
  }
  printf("host ms: the step time (around tyto_dp_step) minus the slowest "
         "replica's phase time: the host\nexchange plus the update (phase "
         "1). xch ms: the gradient\nexchange (to the host, the weighted "
         "sum, back); exp. ms: the part of it after the slowest\nreplica's "
         "backward pass ended, which the overlap did not hide. vs sum: "
         "images/s over\nthe sum of the devices' rates alone at the whole "
         "batch (%.1f images/s: strong scaling).\nvs shrd: over the sum "
         "of their rates alone, each at the shard it trains by rate\n(%.1f "
         "images/s: what combining costs, as DDP's scaling efficiency "
         "measures it).\n",
         mr->sum_alone, mr->sum_shards);
  if (inconsistent)
    printf("WARNING: a replica's phase time plus its wait is not the same "
           "for every replica: tyto_dp_replica_\nseconds does not return "
           "the forward and backward (phase 0) that its wait is measured "
           "against,\nso the phase and host columns are not what they "
           "say.\n");
  printf("step-1 loss (the same parameters and batch in every "
         "configuration): %.7g, largest relative\ndifference %.2g\n",
         l0, worst);
}

static void json_conf(text *j, tyto_context *ctx, const conf *c,
                      const model_result *mr) {
  double st = c->steps ? c->steps : 1;
  put(j, "{\"devices\":[");
  for (size_t i = 0; i < c->n; i++)
    put(j, "%s\"%s\"", i ? "," : "", dev_id(ctx, c->dev[i]));
  put(j,
      "],\"images_per_s\":%.6g,\"step_s\":%.6g,\"host_s\":%.6g,"
      "\"exchange_s\":%.6g,\"exchange_exposed_s\":%.6g",
      rate(c), c->wall / st, c->host / st, c->xch / st, c->exposed / st);
  put(j, ",\"batch\":%lld", (long long)c->batch);
  if (c->n > 1)
    put(j, ",\"vs_sum\":%.4g,\"vs_sum_shards\":%.4g",
        mr->sum_alone > 0 ? rate(c) / mr->sum_alone : 0,
        mr->sum_shards > 0 ? rate(c) / mr->sum_shards : 0);
  if (c->what == BY_RATE || c->what == BY_RATE_ONE ||
      c->what == BY_RATE_SERIAL) {
    put(j, ",\"weights\":[");
    for (size_t i = 0; i < c->n; i++)
      put(j, "%s%.6g", i ? "," : "", c->weight[i]);
    put(j, "]");
  }
  const char *names[3] = {"shards", "phase_s", "wait_s"};
  for (int f = 0; f < 3; f++) {
    put(j, ",\"%s\":[", names[f]);
    for (size_t i = 0; i < c->n; i++) {
      if (f == 0)
        put(j, "%s%lld", i ? "," : "", (long long)c->shard[i]);
      else
        put(j, "%s%.6g", i ? "," : "",
            (f == 1 ? c->phase[i] : c->wait[i]) / st);
    }
    put(j, "]");
  }
  put(j, ",\"seconds_consistent\":%s,\"first_loss\":%.9g}",
      c->inconsistent ? "false" : "true", c->first_loss);
}

static void model_free(model_result *mr) {
  for (size_t k = 0; k < mr->n_conf; k++) {
    tyto_dp_free(mr->c[k].dp);
    mr->c[k].dp = NULL;
  }
}

static int run_model(tyto_context *ctx, const char *name, const data *d,
                     int steps, int warm, const threads *th, model_result *mr) {
  memset(mr, 0, sizeof *mr);
  mr->name = name;
  char err[1024];
  mf_model *model = NULL;
  if (mf_parse(mf_preset(name), name, &model, err, sizeof err) != 0) {
    fprintf(stderr, "data_parallel: %s\n", err);
    return -1;
  }
  init_values iv;
  if (init_make(model, &iv) != 0) {
    mf_free(model);
    return -1;
  }
  size_t nd = tyto_context_device_count(ctx);
  if (nd > MAX_DEV)
    nd = MAX_DEV;
  for (size_t i = 0; i < nd; i++) {
    conf *c = &mr->c[mr->n_conf++];
    c->what = ALONE;
    c->n = 1;
    c->dev[0] = i;
    snprintf(c->label, sizeof c->label, "%s alone", dev_id(ctx, i));
  }
  int rc = 0;
  double t0 = now();
  for (size_t k = 0; k < mr->n_conf && rc == 0; k++)
    if ((rc = conf_new(&mr->c[k], ctx, model, &iv, d->batch)) == 0)
      rc = run_steps(&mr->c[k], d, warm, 0);
  fprintf(stderr,
          "data_parallel: %s: %zu single-device replicas built and "
          "warmed up in %.1f s\n",
          name, mr->n_conf, now() - t0);
  /* The calibration: the rates alone that weigh the shards. */
  if (rc == 0 && nd > 1)
    rc = run_interleaved(mr->c, nd, d, steps);
  if (rc == 0 && nd > 1) {
    conf *by = &mr->c[mr->n_conf++], *eq = &mr->c[mr->n_conf++],
         *one = &mr->c[mr->n_conf++], *ser = &mr->c[mr->n_conf++];
    by->what = BY_RATE;
    eq->what = EQUAL;
    one->what = BY_RATE_ONE;
    ser->what = BY_RATE_SERIAL;
    by->n = eq->n = one->n = ser->n = nd;
    for (size_t i = 0; i < nd; i++) {
      by->dev[i] = eq->dev[i] = one->dev[i] = ser->dev[i] = i;
      by->weight[i] = one->weight[i] = ser->weight[i] = rate(&mr->c[i]);
      conf_clear_timing(&mr->c[i]);
    }
    snprintf(by->label, sizeof by->label, "together, by rate");
    snprintf(eq->label, sizeof eq->label, "together, equal");
    snprintf(one->label, sizeof one->label, "by rate, one optim.");
    snprintf(ser->label, sizeof ser->label, "by rate, no overlap");
    t0 = now();
    /* A configuration tyto_dp_new refuses (a device whose share rounds to
     * no examples) is reported and left out. */
    for (conf *c = by; c <= ser && rc == 0; c++)
      if (conf_new(c, ctx, model, &iv, d->batch) != 0) {
        tyto_dp_free(c->dp);
        c->dp = NULL;
      } else {
        rc = run_steps(c, d, warm, 0);
      }
    /* Each device alone at the shard it trains by rate: the rates that
     * the together step would reach if combining cost nothing. */
    for (size_t i = 0; i < nd && rc == 0 && by->dp; i++) {
      conf *c = &mr->c[mr->n_conf++];
      c->what = ALONE_SHARD;
      c->n = 1;
      c->dev[0] = i;
      snprintf(c->label, sizeof c->label, "%s at its shard", dev_id(ctx, i));
      if (conf_new(c, ctx, model, &iv, by->shard[i]) != 0)
        rc = -1;
      else
        rc = run_steps(c, d, warm, 0);
    }
    fprintf(stderr,
            "data_parallel: %s: the together replicas built and "
            "warmed up in %.1f s\n",
            name, now() - t0);
  } else if (rc == 0) {
    printf("(%s: one device selected: the together configurations are "
           "skipped; select two, as\nTYTO_DEVICES=cpu:0,opencl:0)\n",
           name);
  }
  if (rc == 0)
    rc = run_interleaved(mr->c, mr->n_conf, d, steps);
  if (rc == 0) {
    for (size_t i = 0; i < nd; i++)
      mr->sum_alone += rate(&mr->c[i]);
    for (size_t k = nd; k < mr->n_conf; k++)
      if (mr->c[k].what == ALONE_SHARD)
        mr->sum_shards += rate(&mr->c[k]);
    if (nd > 1 && mr->c[nd].dp && strcmp(name, "cnn") == 0) {
      mr->goal_applies = th->one_each;
      mr->goal_met = rate(&mr->c[nd]) >= GOAL_TOGETHER * mr->sum_shards;
    }
  }
  init_free(&iv);
  mf_free(model);
  return rc;
}

/* ---------------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: data_parallel [--steps N] [--warmup N] [--batch N] "
                  "[--models mlp,cnn] [--quick]\n"
                  "  data-parallel training throughput of each selected device "
                  "alone and of all\n"
                  "  together, shards by rate and equal (defaults: 20 steps, 3 "
                  "warm-up, batch 64)\n");
  return 2;
}

int main(int argc, char **argv) {
  int steps = 20, warm = 3;
  int64_t batch = 64;
  const char *models_arg = "mlp,cnn";
  for (int i = 1; i < argc; i++) {
    int more = i + 1 < argc;
    if (strcmp(argv[i], "--quick") == 0) {
      steps = 3;
      warm = 1;
    } else if (strcmp(argv[i], "--steps") == 0 && more &&
               (steps = atoi(argv[i + 1])) > 0) {
      i++;
    } else if (strcmp(argv[i], "--warmup") == 0 && more &&
               (warm = atoi(argv[i + 1])) >= 0) {
      i++;
    } else if (strcmp(argv[i], "--batch") == 0 && more &&
               (batch = atoll(argv[i + 1])) > 0) {
      i++;
    } else if (strcmp(argv[i], "--models") == 0 && more) {
      models_arg = argv[++i];
    } else {
      return usage();
    }
  }
  const char *names[MAX_MODELS];
  size_t n_models = 0;
  char models_buf[256];
  snprintf(models_buf, sizeof models_buf, "%s", models_arg);
  for (char *save = NULL, *m = strtok_r(models_buf, ",", &save); m;
       m = strtok_r(NULL, ",", &save)) {
    if (strcmp(m, "mlp") != 0 && strcmp(m, "cnn") != 0) {
      fprintf(stderr, "data_parallel: --models: '%s' is not mlp or cnn\n", m);
      return 2;
    }
    if (n_models == MAX_MODELS)
      return usage();
    names[n_models++] = strcmp(m, "mlp") == 0 ? "mlp" : "cnn";
  }
  if (n_models == 0)
    return usage();

  /* The OpenCL device when there is one ("?": optional). */
  setenv("TYTO_DEVICES", "cpu:0,opencl:0?", 0);
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "data_parallel: %s\n", tyto_errmsg());
    return 1;
  }
  size_t nd = tyto_context_device_count(ctx);
  if (nd > MAX_DEV) {
    fprintf(stderr,
            "data_parallel: %zu devices selected; using the first "
            "%d\n",
            nd, MAX_DEV);
    nd = MAX_DEV;
  }
  data d;
  if (data_load(&d, batch) != 0) {
    tyto_context_free(ctx);
    return 1;
  }
  threads th;
  detect_threads(ctx, &th);
  printf("Data-parallel training (tyto_dp), softmax cross-entropy, Adam, "
         "batch %lld: %d steps per\nconfiguration after %d warm-up steps, "
         "the configurations taking turns in chunks of %d.\nData: %s.\n"
         "Devices (%s) and their threads:\n%s",
         (long long)batch, steps, warm, CHUNK, d.source,
         tyto_context_selection(ctx), th.line);
  fflush(stdout); /* before the progress lines on stderr */

  static model_result mr[MAX_MODELS];
  int rc = 0;
  size_t done = 0;
  for (size_t m = 0; m < n_models && rc == 0; m++) {
    rc = run_model(ctx, names[m], &d, steps, warm, &th, &mr[m]);
    if (rc != 0)
      break;
    done++;
    printf("\n%s (tyto-train --model %s):\n", names[m], names[m]);
    print_table(ctx, &mr[m]);
    if (strcmp(names[m], "cnn") == 0 && nd > 1 && mr[m].c[nd].dp)
      printf("goal: together (by rate) >= %.2f x the sum of the devices' "
             "rates alone, each at the\nshard it trains, on the CNN, one core "
             "per device: %.3f: %s (at the whole batch: %.3f)\n",
             GOAL_TOGETHER, rate(&mr[m].c[nd]) / mr[m].sum_shards,
             !mr[m].goal_applies ? "not judged (the devices share cores; "
                                   "see the header comment)"
             : mr[m].goal_met    ? "met"
                                 : "NOT met",
             rate(&mr[m].c[nd]) / mr[m].sum_alone);
    /* The replicas hold memory on every device: free them before the
     * next model's. */
    model_free(&mr[m]);
  }

  if (rc == 0) {
    text j = {0};
    put(&j,
        "BENCH {\"bench\":\"data_parallel\",\"batch\":%lld,\"steps\":%d,"
        "\"warmup\":%d,\"data\":\"%s\",\"devices\":[",
        (long long)batch, steps, warm,
        strncmp(d.source, "synthetic", 9) == 0 ? "synthetic" : "fashion-mnist");
    for (size_t i = 0; i < nd; i++) {
      const tyto_device_info *info =
          tyto_device_get_info(tyto_context_device(ctx, i));
      put(&j, "%s{\"id\":\"%s\",\"compute_units\":%u}", i ? "," : "", info->id,
          info->compute_units);
    }
    put(&j, "],\"one_thread_each\":%s", th.one_each ? "true" : "false");
    for (size_t m = 0; m < done; m++) {
      model_result *r = &mr[m];
      put(&j, ",\"%s\":{\"sum_alone\":%.6g,\"sum_shards\":%.6g", r->name,
          r->sum_alone, r->sum_shards);
      for (size_t k = 0; k < r->n_conf; k++) {
        const conf *c = &r->c[k];
        if (c->steps == 0)
          continue;
        if (c->what == ALONE || c->what == ALONE_SHARD)
          put(&j, ",\"%s_%s\":", kind_key[c->what], dev_id(ctx, c->dev[0]));
        else
          put(&j, ",\"%s\":", kind_key[c->what]);
        json_conf(&j, ctx, c, r);
      }
      if (strcmp(r->name, "cnn") == 0 && nd > 1)
        put(&j, ",\"goal_met\":%s",
            !r->goal_applies ? "null"
            : r->goal_met    ? "true"
                             : "false");
      put(&j, "}");
    }
    put(&j, "}");
    if (j.failed)
      fprintf(stderr, "data_parallel: out of memory for the BENCH line\n");
    else
      printf("\n%s\n", j.s);
    free(j.s);
  }
  for (size_t m = 0; m < n_models; m++)
    model_free(&mr[m]);
  data_free(&d);
  tyto_context_free(ctx);
  return rc == 0 ? 0 : 1;
}
