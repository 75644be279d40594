/*
 * bench/placement: the seed CNN's training step (tyto-train --model cnn:
 * conv 5x5x32 same + ReLU, max pool 2x2, dropout 0.1, fully connected
 * 1024 + ReLU, linear 10, softmax cross-entropy; Adam) placed four ways
 * over the first two selected devices (TYTO_DEVICES, default
 * cpu:0,opencl:0; call them A and B):
 *
 *   A alone, B alone        one-device programs;
 *   split                   pinned by layers: the convolution, pooling and
 *                           dropout on B (tyto_graph_set_device_scope), the
 *                           dense layers and the loss on A;
 *   auto                    no pins, TYTO_PLACE_AUTO over both (it may
 *                           choose one device).
 *
 * All four start from the same parameters and run the same batch
 * (synthetic images). Each is warmed up, then run in R repetitions of N
 * steps, the configurations taking turns so that a busy machine slows
 * them alike; a configuration's step time is the median over the
 * repetitions of their mean step. Per configuration it prints the step
 * time, the copies between devices per step and their bytes (the sum of
 * tyto_program_copy_get), the time those copies take, estimated from
 * their bytes at the measured link bandwidth (tyto_link_profile_get, per
 * direction) and measured in a separate program instance compiled with
 * TYTO_PROFILE=1 (its report's "(copy between devices)" rows, each copy
 * synchronised on its own), and the overhead against the best single
 * device. Step 1's loss is shown against A's: a placement that computes
 * something else shows there.
 *
 * The split's two halves are also timed alone, each a one-device program
 * on each device: the convolutional half (conv, pool, dropout, their
 * gradients from a gradient fed as an input, their Adam updates) and the
 * dense half (fc, linear, loss, their gradients and the gradient of their
 * input as an output, their Adam updates). The convolutional half on B
 * plus the dense half on A is what the split computes, without copies.
 *
 * The goals, each printed as met or not:
 *   - auto is never more than 5% slower than the best single device;
 *   - a forced layer split costs no more than its copies at the measured
 *     link bandwidth plus 10%: split <= 1.10 x (its halves alone on their
 *     devices + the copies' bytes at the link bandwidth). What the split
 *     loses against the best single device because a half runs on a
 *     slower device is the placement's choice, not a cost of splitting;
 *     it is printed apart.
 * Then the placement reports of the split and auto programs, and one line
 * starting with "BENCH ".
 *
 *   TYTO_PLUGIN_PATH=build/plugins/cpu/.libs:build/plugins/opencl/.libs \
 *     TYTO_DEVICES=cpu:0,opencl:0 build/bench/placement \
 *     [--steps N] [--batch N] [--reps R] [--quick]
 *
 * N 20, batch 64, R 5 by default; --quick: N 5, R 3, fewer warm-up steps.
 * Not a test: nothing here fails on timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tyto/tyto.h>

enum { CLASSES = 10, SIDE = 28, FILTERS = 32, HALF = SIDE / 2 };
enum { MAX_REPS = 64 };
#define GOAL_AUTO 1.05
#define GOAL_SPLIT 1.10

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "placement: %s: %s\n", what, tyto_errmsg());
  return -1;
}

/* What a program computes: the whole step or one half of it. */
typedef enum part { WHOLE, CONV_HALF, DENSE_HALF } part;

/* The programs timed: the four configurations, then each half on each
 * device. */
enum {
  C_A,
  C_B,
  C_SPLIT,
  C_AUTO,
  N_WHOLE,
  H_CONV_A = N_WHOLE,
  H_CONV_B,
  H_DENSE_A,
  H_DENSE_B,
  N_CONF
};

typedef struct conf {
  const char *key;
  part what;
  int dev;      /* a one-device program's device (A 0, B 1); -1: both */
  int conv_dev; /* pins (-1: none) */
  int dense_dev;
  tyto_place_policy policy;
} conf;

static const conf confs[N_CONF] = {
    {"a", WHOLE, 0, -1, -1, TYTO_PLACE_DEFAULT},
    {"b", WHOLE, 1, -1, -1, TYTO_PLACE_DEFAULT},
    {"split", WHOLE, -1, 1, 0, TYTO_PLACE_PINNED},
    {"auto", WHOLE, -1, -1, -1, TYTO_PLACE_AUTO},
    {"conv_a", CONV_HALF, 0, -1, -1, TYTO_PLACE_DEFAULT},
    {"conv_b", CONV_HALF, 1, -1, -1, TYTO_PLACE_DEFAULT},
    {"dense_a", DENSE_HALF, 0, -1, -1, TYTO_PLACE_DEFAULT},
    {"dense_b", DENSE_HALF, 1, -1, -1, TYTO_PLACE_DEFAULT}};

typedef struct step {
  tyto_graph *g;
  tyto_nn *nn;
  tyto_optim *opt;
  tyto_program *p;
  /* Fed: the images or the activations, the labels or the gradient. */
  tyto_tensor *in0, *in1;
  size_t n_out;
  tyto_tensor *out[2]; /* the loss first */
} step;

typedef struct result {
  char label[64];
  double step_seconds; /* median over the repetitions */
  double rep[MAX_REPS];
  float first_loss;
  size_t n_copies;
  uint64_t copy_bytes;
  double copy_bw_seconds;   /* bytes at the link bandwidth */
  double copy_prof_seconds; /* TYTO_PROFILE rows; < 0: not measured */
  size_t copy_prof_rows;    /* copies the profile listed */
  char used[128];           /* the devices that compute something */
} result;

/* conv 5x5x32 same + ReLU, max pool 2x2, dropout 0.1 (the "cnn" preset
 * of tools/train/model_file.c, line by line). */
static tyto_tensor *conv_layers(tyto_nn *nn, tyto_tensor *x) {
  tyto_nn_conv c;
  memset(&c, 0, sizeof c);
  c.filters = FILTERS;
  c.kernel[0] = c.kernel[1] = 5;
  c.padding = TYTO_NN_SAME;
  tyto_tensor *h =
      tyto_nn_activate(tyto_nn_conv2d(nn, "conv", x, &c), TYTO_ACT_RELU, 0);
  tyto_nn_pool pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel[0] = pl.kernel[1] = 2;
  return tyto_nn_dropout(nn, tyto_nn_max_pool2d(nn, h, &pl), 0.1);
}

/* fully connected 1024 + ReLU, linear 10: the logits. */
static tyto_tensor *dense_layers(tyto_nn *nn, tyto_tensor *h) {
  tyto_init init = {TYTO_INIT_DEFAULT, 0, 0, 0};
  h = tyto_nn_fully_connected(nn, "fc", h, 1024, TYTO_ACT_RELU, init);
  return tyto_nn_linear(nn, "out", h, CLASSES, 1, init);
}

/* Builds what c computes into s, with its pins: the forward pass, the
 * gradients of every parameter (and, for the dense half, of its input),
 * Adam. */
static int build(step *s, const conf *c, int64_t batch) {
  memset(s, 0, sizeof *s);
  if (!(s->g = tyto_graph_new()))
    return fail("graph");
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = 1;
  if (tyto_nn_new(s->g, &no, &s->nn) != TYTO_OK)
    return fail("nn");
  int64_t xs[4] = {batch, 1, SIDE, SIDE}, ls[2] = {batch, CLASSES};
  int64_t hs[4] = {batch, FILTERS, HALF, HALF};
  tyto_tensor *wrt = NULL; /* an input whose gradient is an output */
  if (c->what == WHOLE) {
    tyto_graph_set_device_scope(s->g, c->conv_dev);
    s->in0 = tyto_nn_input(s->nn, 4, xs, "x");
    tyto_graph_set_device_scope(s->g, c->dense_dev);
    s->in1 = tyto_nn_input(s->nn, 2, ls, "labels");
    tyto_graph_set_device_scope(s->g, c->conv_dev);
    tyto_tensor *h = conv_layers(s->nn, s->in0);
    tyto_graph_set_device_scope(s->g, c->dense_dev);
    s->out[0] = tyto_loss_softmax_cross_entropy(dense_layers(s->nn, h), s->in1);
    tyto_graph_set_device_scope(s->g, -1);
  } else if (c->what == CONV_HALF) {
    /* sum(h * g) has the gradient g at h: the backward pass the dense
     * half's gradient drives in the split. */
    s->in0 = tyto_nn_input(s->nn, 4, xs, "x");
    s->in1 = tyto_nn_input(s->nn, 4, hs, "grad");
    tyto_tensor *h = conv_layers(s->nn, s->in0);
    s->out[0] = tyto_sum(tyto_mul(h, s->in1), 0, NULL, 0);
  } else {
    s->in0 = wrt = tyto_nn_input(s->nn, 4, hs, "h");
    s->in1 = tyto_nn_input(s->nn, 2, ls, "labels");
    s->out[0] =
        tyto_loss_softmax_cross_entropy(dense_layers(s->nn, s->in0), s->in1);
  }
  size_t np = tyto_nn_parameter_count(s->nn), nx = np + (wrt != NULL);
  tyto_tensor **wrt_all = calloc(nx, sizeof *wrt_all);
  tyto_tensor **grads = calloc(nx, sizeof *grads);
  if (!wrt_all || !grads) {
    free(wrt_all);
    free(grads);
    return fail("gradients");
  }
  memcpy(wrt_all, tyto_nn_parameters(s->nn), np * sizeof *wrt_all);
  if (wrt)
    wrt_all[np] = wrt;
  tyto_grads(s->out[0], nx, wrt_all, grads);
  s->n_out = 1;
  if (wrt)
    s->out[s->n_out++] = grads[np];
  tyto_optim_options oo;
  tyto_optim_options_init(&oo, TYTO_OPTIM_ADAM);
  tyto_status st = tyto_graph_status(s->g) == TYTO_OK
                       ? tyto_optim_build(&oo, np, wrt_all, grads, &s->opt)
                       : TYTO_ERR_INVALID_ARGUMENT;
  free(wrt_all);
  free(grads);
  if (tyto_graph_status(s->g) != TYTO_OK) {
    fprintf(stderr, "placement: graph: %s\n", tyto_graph_error_message(s->g));
    return -1;
  }
  return st == TYTO_OK ? 0 : fail("optimiser");
}

/* Compiles s as c wants it over devices a and b (p's devices 0 and 1). */
static int compile(step *s, tyto_context *ctx, const conf *c,
                   const size_t *devs) {
  size_t nn_u = tyto_nn_update_count(s->nn);
  size_t op_u = tyto_optim_update_count(s->opt);
  tyto_tensor **up = malloc((nn_u + op_u) * sizeof *up);
  tyto_tensor **uv = malloc((nn_u + op_u) * sizeof *uv);
  if (!up || !uv) {
    free(up);
    free(uv);
    return fail("compile");
  }
  for (size_t i = 0; i < nn_u; i++) {
    up[i] = tyto_nn_update_params(s->nn)[i];
    uv[i] = tyto_nn_update_values(s->nn)[i];
  }
  for (size_t i = 0; i < op_u; i++) {
    up[nn_u + i] = tyto_optim_update_params(s->opt)[i];
    uv[nn_u + i] = tyto_optim_update_values(s->opt)[i];
  }
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = nn_u + op_u;
  po.update_params = up;
  po.update_values = uv;
  if (c->dev >= 0) {
    po.device = devs[c->dev];
  } else {
    po.n_devices = 2;
    po.devices = devs;
    po.placement = c->policy;
  }
  tyto_status st =
      tyto_program_compile(ctx, s->g, s->n_out, s->out, &po, &s->p);
  free(up);
  free(uv);
  if (st != TYTO_OK)
    return fail("compile");
  return tyto_nn_initialize(s->nn, s->p) == TYTO_OK ? 0 : fail("initialise");
}

static void step_free(step *s) {
  tyto_program_free(s->p);
  tyto_optim_free(s->opt);
  tyto_nn_free(s->nn);
  tyto_graph_free(s->g);
}

/* Writes every parameter of `from` into the same-named parameter of `to`. */
static int copy_parameters(const step *from, step *to) {
  for (size_t i = 0; i < tyto_graph_size(to->g); i++) {
    tyto_tensor *t = tyto_graph_tensor(to->g, i);
    if (tyto_tensor_kind(t) != TYTO_KIND_PARAMETER ||
        !tyto_program_uses(to->p, t))
      continue;
    tyto_tensor *q = NULL;
    for (size_t j = 0; j < tyto_graph_size(from->g) && !q; j++) {
      tyto_tensor *u = tyto_graph_tensor(from->g, j);
      if (tyto_tensor_kind(u) == TYTO_KIND_PARAMETER &&
          strcmp(tyto_tensor_name(u), tyto_tensor_name(t)) == 0)
        q = u;
    }
    if (!q || tyto_tensor_numel(q) != tyto_tensor_numel(t)) {
      fprintf(stderr, "placement: no parameter '%s' to copy\n",
              tyto_tensor_name(t));
      return -1;
    }
    size_t bytes = (size_t)tyto_tensor_numel(t) * sizeof(float);
    float *v = malloc(bytes ? bytes : 1);
    int ok = v &&
             tyto_program_read_parameter(from->p, q, v, bytes) == TYTO_OK &&
             tyto_program_write_parameter(to->p, t, v, bytes) == TYTO_OK;
    free(v);
    if (!ok)
      return fail("copying parameters");
  }
  return 0;
}

/* The inputs: a bright rectangle per class on a dark background, with
 * noise; its one-hot label; activations and gradients for the halves. */
typedef struct batch_data {
  int64_t n;
  float *x, *y, *h, *g;
} batch_data;

static int make_batch(batch_data *d, int64_t n) {
  size_t nx = (size_t)(n * SIDE * SIDE),
         nh = (size_t)(n * FILTERS * HALF * HALF);
  d->n = n;
  d->x = malloc(nx * sizeof *d->x);
  d->y = calloc((size_t)(n * CLASSES), sizeof *d->y);
  d->h = malloc(nh * sizeof *d->h);
  d->g = malloc(nh * sizeof *d->g);
  if (!d->x || !d->y || !d->h || !d->g)
    return -1;
  uint32_t seed = 12345;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i % CLASSES, r0 = 2 + 2 * c, c0 = 20 - 2 * c;
    d->y[i * CLASSES + c] = 1;
    for (int64_t r = 0; r < SIDE; r++)
      for (int64_t k = 0; k < SIDE; k++) {
        seed = seed * 1103515245u + 12345u;
        float noise = (float)((seed >> 9) % 1000) / 4000.0f;
        int in = r >= r0 && r < r0 + 8 && k >= c0 && k < c0 + 6;
        d->x[(i * SIDE + r) * SIDE + k] = in ? 0.75f + noise : 0.0f;
      }
  }
  for (size_t i = 0; i < nh; i++) {
    seed = seed * 1103515245u + 12345u;
    float u = (float)((seed >> 9) % 1000) / 1000.0f;
    d->h[i] = u < 0.5f ? 0.0f : u; /* ReLU'd, pooled, dropped out */
    d->g[i] = 1e-4f * (u - 0.5f);
  }
  return 0;
}

static void batch_free(batch_data *d) {
  free(d->x);
  free(d->y);
  free(d->h);
  free(d->g);
}

static int set_inputs(step *s, const conf *c, const batch_data *d) {
  size_t n = (size_t)d->n, nh = n * FILTERS * HALF * HALF;
  const float *v0 = c->what == DENSE_HALF ? d->h : d->x;
  const float *v1 = c->what == CONV_HALF ? d->g : d->y;
  size_t n0 = c->what == DENSE_HALF ? nh : n * SIDE * SIDE;
  size_t n1 = c->what == CONV_HALF ? nh : n * CLASSES;
  if (tyto_program_set_input(s->p, s->in0, v0, n0 * sizeof *v0) != TYTO_OK ||
      tyto_program_set_input(s->p, s->in1, v1, n1 * sizeof *v1) != TYTO_OK)
    return fail("inputs");
  return 0;
}

static int run_steps(step *s, int n, float *loss) {
  for (int i = 0; i < n; i++)
    if (tyto_program_run(s->p) != TYTO_OK)
      return fail("run");
  if (loss && tyto_program_read_output(s->p, 0, loss, sizeof *loss) != TYTO_OK)
    return fail("reading the loss");
  return 0;
}

static const char *dev_id(tyto_context *ctx, size_t i) {
  return tyto_device_get_info(tyto_context_device(ctx, i))->id;
}

/* The copies of s: count, bytes, their time at the link bandwidth; and
 * the devices that compute something. */
static int copies(tyto_context *ctx, const step *s, result *r) {
  r->n_copies = tyto_program_copy_count(s->p);
  for (size_t i = 0; i < r->n_copies; i++) {
    tyto_program_copy c = {.struct_size = sizeof c};
    double bps;
    if (tyto_program_copy_get(s->p, i, &c) != TYTO_OK ||
        tyto_link_profile_get(ctx, c.from, c.to, 0, &bps) != TYTO_OK)
      return fail("copies");
    r->copy_bytes += c.bytes;
    r->copy_bw_seconds += (double)c.bytes / bps;
  }
  for (size_t i = 0; i < tyto_program_device_count(s->p); i++) {
    tyto_program_device_stats ds = {.struct_size = sizeof ds};
    if (tyto_program_device_stats_get(s->p, i, &ds) != TYTO_OK)
      return fail("device stats");
    if (ds.nodes == 0)
      continue;
    size_t n = strlen(r->used);
    snprintf(r->used + n, sizeof r->used - n, "%s%s", n ? "+" : "", ds.id);
  }
  return 0;
}

/* TYTO_PROFILE=1: a separate instance of c, run `steps` times; freeing it
 * prints its profile to stderr, captured here, and its "(copy between
 * devices)" rows are summed (microseconds per run). */
static int profile_copies(tyto_context *ctx, const conf *c, const size_t *devs,
                          const step *init, const batch_data *d, int steps,
                          result *r) {
  step s;
  setenv("TYTO_PROFILE", "1", 1);
  int rc = build(&s, c, d->n);
  if (rc == 0)
    rc = compile(&s, ctx, c, devs);
  unsetenv("TYTO_PROFILE");
  if (rc == 0)
    rc = copy_parameters(init, &s);
  if (rc == 0)
    rc = set_inputs(&s, c, d);
  if (rc == 0)
    rc = run_steps(&s, steps, NULL);
  char path[] = "/tmp/tyto-bench-placement-XXXXXX";
  int fd = mkstemp(path);
  int saved = fd >= 0 ? dup(2) : -1;
  fflush(stderr);
  if (saved >= 0)
    dup2(fd, 2);
  tyto_program_free(s.p);
  s.p = NULL;
  fflush(stderr);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
  step_free(&s);
  if (fd < 0)
    return rc;
  close(fd);
  FILE *f = fopen(path, "r");
  unlink(path);
  if (!f)
    return rc;
  char line[512];
  double us_sum = 0;
  while (fgets(line, sizeof line, f)) {
    double us;
    if (strstr(line, "(copy between devices)") &&
        sscanf(line, " %lf", &us) == 1) {
      us_sum += us;
      r->copy_prof_rows++;
    }
  }
  fclose(f);
  if (rc == 0)
    r->copy_prof_seconds = 1e-6 * us_sum;
  return rc;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
  double s[MAX_REPS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, by_value);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static int usage(void) {
  fprintf(stderr, "usage: placement [--steps N] [--batch N] [--reps R] "
                  "[--quick]\n"
                  "  the CNN's training step on each of the first two "
                  "selected devices, split by\n"
                  "  layers over both, and auto-placed (defaults: 20 steps, "
                  "batch 64, 5 repetitions)\n");
  return 2;
}

int main(int argc, char **argv) {
  int steps = 20, reps = 5, warm = 3;
  int64_t batch = 64;
  for (int i = 1; i < argc; i++) {
    int more = i + 1 < argc;
    if (strcmp(argv[i], "--quick") == 0) {
      steps = 5;
      reps = 3;
      warm = 2;
    } else if (strcmp(argv[i], "--steps") == 0 && more &&
               (steps = atoi(argv[i + 1])) > 0) {
      i++;
    } else if (strcmp(argv[i], "--batch") == 0 && more &&
               (batch = atoll(argv[i + 1])) > 0) {
      i++;
    } else if (strcmp(argv[i], "--reps") == 0 && more &&
               (reps = atoi(argv[i + 1])) > 0 && reps <= MAX_REPS) {
      i++;
    } else {
      return usage();
    }
  }
  /* Timings come from unprofiled programs; the profiled instance sets the
   * variable itself. */
  if (getenv("TYTO_PROFILE")) {
    fprintf(stderr, "placement: TYTO_PROFILE unset for the timed programs\n");
    unsetenv("TYTO_PROFILE");
  }
  setenv("TYTO_DEVICES", "cpu:0,opencl:0", 0);
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "placement: %s\n", tyto_errmsg());
    return 1;
  }
  if (tyto_context_device_count(ctx) < 2) {
    fprintf(stderr,
            "placement: %zu device selected (%s); select two, as "
            "TYTO_DEVICES=cpu:0,opencl:0\n",
            tyto_context_device_count(ctx), tyto_context_selection(ctx));
    tyto_context_free(ctx);
    return 1;
  }
  const size_t devs[2] = {0, 1};
  const char *ida = dev_id(ctx, 0), *idb = dev_id(ctx, 1);
  double bw_ab, bw_ba;
  if (tyto_link_profile_get(ctx, 0, 1, 0, &bw_ab) != TYTO_OK ||
      tyto_link_profile_get(ctx, 1, 0, 0, &bw_ba) != TYTO_OK) {
    fail("link profile");
    tyto_context_free(ctx);
    return 1;
  }

  batch_data d;
  memset(&d, 0, sizeof d);
  step s[N_CONF];
  result r[N_CONF];
  memset(s, 0, sizeof s);
  memset(r, 0, sizeof r);
  int rc = make_batch(&d, batch);
  if (rc != 0)
    fprintf(stderr, "placement: out of memory\n");
  snprintf(r[C_A].label, sizeof r[C_A].label, "%s alone", ida);
  snprintf(r[C_B].label, sizeof r[C_B].label, "%s alone", idb);
  snprintf(r[C_SPLIT].label, sizeof r[C_SPLIT].label, "split (pinned)");
  snprintf(r[C_AUTO].label, sizeof r[C_AUTO].label, "auto");
  for (int k = 0; k < N_CONF && rc == 0; k++) {
    const conf *c = &confs[k];
    double t0 = now();
    r[k].copy_prof_seconds = -1;
    rc = build(&s[k], c, batch);
    if (rc == 0)
      rc = compile(&s[k], ctx, c, devs);
    /* The halves' parameters are a subset of the whole's. */
    if (rc == 0 && k > 0)
      rc = copy_parameters(&s[0], &s[k]);
    if (rc == 0)
      rc = set_inputs(&s[k], c, &d);
    if (rc == 0)
      rc = copies(ctx, &s[k], &r[k]);
    if (rc == 0 && r[k].n_copies > 0)
      rc = profile_copies(ctx, c, devs, &s[0], &d, warm + steps, &r[k]);
    fprintf(stderr, "placement: %s built and compiled in %.2f s\n", c->key,
            now() - t0);
  }
  /* Step 1 (from the same parameters on the same batch), then the rest of
   * the warm-up. */
  for (int k = 0; k < N_CONF && rc == 0; k++)
    if ((rc = run_steps(&s[k], 1, &r[k].first_loss)) == 0 && warm > 1)
      rc = run_steps(&s[k], warm - 1, NULL);
  for (int i = 0; i < reps && rc == 0; i++)
    for (int k = 0; k < N_CONF && rc == 0; k++) {
      double t0 = now();
      rc = run_steps(&s[k], steps, NULL);
      r[k].rep[i] = (now() - t0) / steps;
    }
  if (rc != 0) {
    for (int k = 0; k < N_CONF; k++)
      step_free(&s[k]);
    batch_free(&d);
    tyto_context_free(ctx);
    return 1;
  }
  for (int k = 0; k < N_CONF; k++)
    r[k].step_seconds = median(r[k].rep, reps);
  int best = r[C_A].step_seconds <= r[C_B].step_seconds ? C_A : C_B;
  double tb = r[best].step_seconds;
  double t_split = r[C_SPLIT].step_seconds, t_auto = r[C_AUTO].step_seconds;
  double halves = r[H_CONV_B].step_seconds + r[H_DENSE_A].step_seconds;
  double copy_bw = r[C_SPLIT].copy_bw_seconds;
  double split_bound = GOAL_SPLIT * (halves + copy_bw);
  int auto_ok = t_auto <= GOAL_AUTO * tb;
  int split_ok = t_split <= split_bound;

  printf("The seed CNN's training step (conv 5x5x32 + ReLU, max pool 2x2, "
         "dropout 0.1, fc 1024 + ReLU,\nlinear 10, softmax cross-entropy, "
         "Adam), batch %lld: median of %d repetitions of %d steps\nafter "
         "%d warm-up steps. A = %s, B = %s. Links (tyto_link_profile_get): "
         "A -> B %.2f GB/s,\nB -> A %.2f GB/s. Copy time: bytes at the "
         "link bandwidth, and measured with TYTO_PROFILE=1\nin a separate "
         "instance (each copy synchronised on its own, download and "
         "upload).\n\n",
         (long long)batch, reps, steps, warm, ida, idb, bw_ab / 1e9,
         bw_ba / 1e9);
  printf("%-18s %-18s %9s %8s %7s %10s %9s %9s %11s\n", "configuration",
         "computes on", "step ms", "vs best", "copies", "copy KiB", "copy ms",
         "copy ms", "step-1 loss");
  printf("%-18s %-18s %9s %8s %7s %10s %9s %9s %11s\n", "", "", "", "", "",
         "per step", "link bw", "profiled", "vs A");
  for (int k = 0; k < N_WHOLE; k++) {
    char prof[32] = "-";
    if (r[k].copy_prof_seconds >= 0)
      snprintf(prof, sizeof prof, "%.3f%s", 1e3 * r[k].copy_prof_seconds,
               r[k].copy_prof_rows < r[k].n_copies ? "+" : "");
    double dl = fabs((double)r[k].first_loss - r[C_A].first_loss) /
                fabs((double)r[C_A].first_loss);
    printf("%-18s %-18s %9.2f %+7.1f%% %7zu %10.1f %9.3f %9s %11.2g\n",
           r[k].label, r[k].used, 1e3 * r[k].step_seconds,
           100 * (r[k].step_seconds / tb - 1), r[k].n_copies,
           (double)r[k].copy_bytes / 1024, 1e3 * r[k].copy_bw_seconds, prof,
           dl);
  }
  for (int k = 0; k < N_WHOLE; k++)
    if (r[k].copy_prof_seconds >= 0 && r[k].copy_prof_rows < r[k].n_copies)
      printf("(+: %s: the profile listed %zu of its %zu copies among its "
             "heaviest kernels)\n",
             r[k].label, r[k].copy_prof_rows, r[k].n_copies);
  printf("\n%-44s %9s %9s\n", "the split's halves alone, ms per step", ida,
         idb);
  printf("%-44s %9.2f %9.2f\n", "conv, pool, dropout (+ gradients, Adam)",
         1e3 * r[H_CONV_A].step_seconds, 1e3 * r[H_CONV_B].step_seconds);
  printf("%-44s %9.2f %9.2f\n", "fc, linear, loss (+ gradients, Adam)",
         1e3 * r[H_DENSE_A].step_seconds, 1e3 * r[H_DENSE_B].step_seconds);

  printf("\nbest single device: %s, %.2f ms per step\n", dev_id(ctx, best),
         1e3 * tb);
  printf("split against it: %+.2f ms (%+.1f%%); its halves on their devices "
         "(conv on %s, dense on %s)\n  take %.2f ms, its copies %.3f ms at "
         "the link bandwidth: splitting itself costs %+.2f ms\n",
         1e3 * (t_split - tb), 100 * (t_split / tb - 1), idb, ida, 1e3 * halves,
         1e3 * copy_bw, 1e3 * (t_split - halves));
  printf("goal: auto at most 5%% slower than the best single device:\n"
         "      %.2f ms against 1.05 x %.2f = %.2f ms: %s\n",
         1e3 * t_auto, 1e3 * tb, 1e3 * GOAL_AUTO * tb,
         auto_ok ? "met" : "NOT met");
  printf("goal: the split costs no more than its copies at the link "
         "bandwidth plus 10%%:\n      %.2f ms against 1.10 x (halves %.2f + "
         "copies %.3f) = %.2f ms: %s\n",
         1e3 * t_split, 1e3 * halves, 1e3 * copy_bw, 1e3 * split_bound,
         split_ok ? "met" : "NOT met");

  printf("\nsplit (pinned):\n");
  tyto_program_report_placement(s[C_SPLIT].p, stdout);
  printf("\nauto:\n");
  tyto_program_report_placement(s[C_AUTO].p, stdout);

  char json[4096];
  size_t jn = (size_t)snprintf(
      json, sizeof json,
      "BENCH {\"bench\":\"placement\",\"model\":\"cnn\",\"batch\":%lld,"
      "\"steps\":%d,\"reps\":%d,\"devices\":[\"%s\",\"%s\"],"
      "\"link_bytes_per_s\":[%.6g,%.6g],\"best\":\"%s\"",
      (long long)batch, steps, reps, ida, idb, bw_ab, bw_ba, confs[best].key);
  for (int k = 0; k < N_WHOLE && jn < sizeof json; k++)
    jn += (size_t)snprintf(
        json + jn, sizeof json - jn,
        ",\"%s\":{\"computes_on\":\"%s\",\"step_s\":%.6g,\"copies\":%zu,"
        "\"copy_bytes\":%llu,\"copy_bw_s\":%.6g,\"copy_profiled_s\":%.6g,"
        "\"first_loss\":%.9g}",
        confs[k].key, r[k].used, r[k].step_seconds, r[k].n_copies,
        (unsigned long long)r[k].copy_bytes, r[k].copy_bw_seconds,
        r[k].copy_prof_seconds, (double)r[k].first_loss);
  for (int k = N_WHOLE; k < N_CONF && jn < sizeof json; k++)
    jn += (size_t)snprintf(json + jn, sizeof json - jn, ",\"%s_s\":%.6g",
                           confs[k].key, r[k].step_seconds);
  if (jn < sizeof json)
    snprintf(json + jn, sizeof json - jn,
             ",\"split_vs_best\":%.4g,\"split_vs_halves\":%.4g,"
             "\"auto_vs_best\":%.4g,\"goal_auto_met\":%s,"
             "\"goal_split_met\":%s}",
             t_split / tb - 1, t_split / (halves + copy_bw) - 1,
             t_auto / tb - 1, auto_ok ? "true" : "false",
             split_ok ? "true" : "false");
  printf("%s\n", json);

  for (int k = 0; k < N_CONF; k++)
    step_free(&s[k]);
  batch_free(&d);
  tyto_context_free(ctx);
  return 0;
}
