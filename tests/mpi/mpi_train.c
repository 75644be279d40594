/*
 * Data-parallel training over the ranks of a run, for tests/mpi/
 * test_mpi.sh: a small MLP or CNN (the seed models' layers: dense layers
 * and dropout; convolution, max pooling, dropout, two dense layers),
 * softmax cross-entropy, Adam, on one synthetic batch that every rank
 * makes alike, for STEPS steps. Started alone it is one rank; under
 * mpirun, each rank trains its share of the same global batch.
 *
 *   mpi_train MODEL DEVICES OUT [options]
 *
 * MODEL: mlp, cnn, or bn (the CNN with batch norm after the
 * convolution). DEVICES: the devices each rank trains on
 * ("cpu:0,opencl:0"); with '/', one list per rank in rank order
 * ("cpu:0/opencl:0"). OUT: rank 0 writes there every step's loss and the
 * trained parameters, one number a line (as %.17g: the bits). Options:
 *   --steps N         steps (30)
 *   --compare REF L W compare with REF (another run's OUT): every loss
 *                     within relative L, every parameter within W x lr x
 *                     steps; exit 1 naming the worst otherwise; L = W = 0
 *                     asks for the same bits
 *   --local-only      each rank trains alone (tyto_dp_options.local_only)
 *   --no-overlap      tyto_dp_options.no_overlap
 *   --bucket BYTES    tyto_dp_options.bucket_bytes
 *   --exact           tyto_dp_options.exact_exchange
 *   --sync-bn         tyto_nn_options.sync_batch_norm (batch norm over
 *                     the global batch)
 *   --sync-bn-on R    rank R alone synchronises its batch norm (a
 *                     mismatch)
 *   --wider-on R      rank R builds a wider hidden layer (a mismatch)
 *   --fault R:S:KIND  rank R, before step S (1-based), stops itself
 *                     (KIND stop: SIGSTOP, a hang), dies (kill: SIGKILL)
 *                     or fails the step (input: a NULL input)
 * Exit: 0 done (and equal), 1 a difference, 2 usage, 3 a tyto error
 * (printed as "rank R: message").
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/tyto.h>

#include "../../tools/train/model_file.h"

enum { BATCH = 16, CLASSES = 10, SIDE = 12, SEED = 3 };
#define LR 1e-3

static const char mlp_text[] = "input shape=144\n"
                               "fully_connected name=fc1 units=%d "
                               "activation=relu\n"
                               "dropout rate=0.1\n"
                               "linear name=out units=10\n"
                               "softmax\n";
static const char cnn_text[] = "input shape=1x12x12\n"
                               "conv2d name=conv filters=4 kernel=5 stride=1 "
                               "padding=same activation=relu\n"
                               "max_pool2d kernel=2\n"
                               "dropout rate=0.1\n"
                               "fully_connected name=fc units=%d "
                               "activation=relu\n"
                               "linear name=out units=10\n"
                               "softmax\n";
/* No bias before batch norm, which cancels it: its gradient would be
 * rounding alone, which Adam turns into steps of up to lr either way. */
static const char bn_text[] = "input shape=1x12x12\n"
                              "conv2d name=conv filters=4 kernel=5 stride=1 "
                              "padding=same bias=false\n"
                              "batch_norm name=bn\n"
                              "relu\n"
                              "max_pool2d kernel=2\n"
                              "fully_connected name=fc units=%d "
                              "activation=relu\n"
                              "linear name=out units=10\n"
                              "softmax\n";
static int sync_bn; /* --sync-bn */

static mf_model *model;

typedef struct builder {
  int keep;
  tyto_nn *nn;
} builder;

static tyto_status build(void *user, tyto_graph *g, int64_t b,
                         tyto_dp_model *m) {
  builder *bd = user;
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = SEED;
  no.sync_batch_norm = sync_bn;
  tyto_nn *nn = NULL;
  tyto_status st = tyto_nn_new(g, &no, &nn);
  if (st != TYTO_OK)
    return st;
  int rank = 1 + mf_input_rank(model);
  int64_t xs[TYTO_MAX_RANK];
  xs[0] = b;
  memcpy(xs + 1, mf_input_shape(model), (size_t)(rank - 1) * sizeof *xs);
  tyto_tensor *x = tyto_nn_input(nn, rank, xs, "x");
  tyto_tensor *labels = tyto_nn_input(nn, 2, (int64_t[]){b, CLASSES}, "labels");
  char err[512];
  tyto_tensor *logits = mf_build(model, nn, x, err, sizeof err);
  if (!logits) {
    fprintf(stderr, "mpi_train: model: %s\n", err);
    tyto_nn_free(nn);
    return TYTO_ERR_INVALID_ARGUMENT;
  }
  m->loss = tyto_loss_softmax_cross_entropy(logits, labels);
  m->weight = tyto_sum(labels, 0, NULL, 0);
  m->n_inputs = 2;
  m->inputs[0] = x;
  m->inputs[1] = labels;
  tyto_dp_model_from_nn(m, nn, !(bd && bd->keep));
  if (bd && bd->keep)
    bd->nn = nn;
  return TYTO_OK;
}

/* Prints the failure and leaves the run: after a lost rank,
 * tyto_dist_finalize must return (saying why it left MPI as it was), not
 * wait for the lost rank forever (the hang case checks it). */
static int fail(const char *what) {
  fprintf(stderr, "rank %d: %s: %s\n", tyto_dist_rank(), what, tyto_errmsg());
  if (tyto_dist_finalize() != TYTO_OK)
    fprintf(stderr, "%s\n", tyto_errmsg());
  return 3;
}

/* The list of devices for this rank: the rank-th '/'-separated part. */
static const char *devices_of(const char *spec, int rank, char *buf, size_t n) {
  const char *p = spec;
  for (int r = 0; r < rank && strchr(p, '/'); r++)
    p = strchr(p, '/') + 1;
  size_t len = strcspn(p, "/");
  snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), p);
  return buf;
}

static int compare(const char *ref, const double *got, size_t n, int steps,
                   double ltol, double wtol) {
  FILE *f = fopen(ref, "r");
  if (!f) {
    perror(ref);
    return 2;
  }
  double worst_l = 0, worst_w = 0;
  size_t at_l = 0, at_w = 0, i = 0;
  double v;
  int bad = 0;
  for (; i < n && fscanf(f, "%lf", &v) == 1; i++) {
    double d;
    if (i < (size_t)steps) {
      d = fabs(got[i] - v) / fmax(fabs(v), 0.1);
      if (d > worst_l || (d != d)) {
        worst_l = d;
        at_l = i;
      }
      bad |= !(d <= ltol) || (ltol == 0 && got[i] != v);
    } else {
      d = fabs(got[i] - v) / (LR * steps);
      if (d > worst_w || (d != d)) {
        worst_w = d;
        at_w = i - (size_t)steps;
      }
      bad |= !(d <= wtol) || (wtol == 0 && got[i] != v);
    }
  }
  fclose(f);
  if (i != n) {
    fprintf(stderr, "mpi_train: %s holds %zu numbers, this run %zu\n", ref, i,
            n);
    return 1;
  }
  printf("worst loss deviation %.3g (step %zu), worst parameter %.3g lr x "
         "steps (number %zu)\n",
         worst_l, at_l + 1, worst_w, at_w);
  if (bad)
    fprintf(stderr,
            "mpi_train: differs from %s beyond loss %g, parameters %g lr x "
            "steps\n",
            ref, ltol, wtol);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: mpi_train mlp|cnn DEVICES OUT [options]\n");
    return 2;
  }
  if (tyto_dist_init(&argc, &argv) != TYTO_OK) {
    fprintf(stderr, "mpi_train: %s\n", tyto_errmsg());
    return 3;
  }
  int me = tyto_dist_rank(), steps = 30, wider = -1, f_rank = -1, f_step = 0;
  char f_kind[16] = "";
  const char *ref = NULL;
  double ltol = 0, wtol = 0;
  tyto_dp_options o;
  tyto_dp_options_init(&o);
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compare") && i + 3 < argc) {
      ref = argv[++i];
      ltol = atof(argv[++i]);
      wtol = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--local-only"))
      o.local_only = 1;
    else if (!strcmp(argv[i], "--no-overlap"))
      o.no_overlap = 1;
    else if (!strcmp(argv[i], "--sync-bn"))
      sync_bn = 1;
    else if (!strcmp(argv[i], "--sync-bn-on") && i + 1 < argc)
      sync_bn = atoi(argv[++i]) == me;
    else if (!strcmp(argv[i], "--exact"))
      o.exact_exchange = 1;
    else if (!strcmp(argv[i], "--bucket") && i + 1 < argc)
      o.bucket_bytes = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--wider-on") && i + 1 < argc)
      wider = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fault") && i + 1 < argc) {
      if (sscanf(argv[++i], "%d:%d:%15s", &f_rank, &f_step, f_kind) != 3) {
        fprintf(stderr, "mpi_train: --fault R:S:stop|kill\n");
        return 2;
      }
    } else {
      fprintf(stderr, "mpi_train: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const char *form = !strcmp(argv[1], "cnn")  ? cnn_text
                     : !strcmp(argv[1], "bn") ? bn_text
                                              : mlp_text;
  char text[1024], err[512], devs[256];
  snprintf(text, sizeof text, form, me == wider ? 48 : 32);
  if (mf_parse(text, argv[1], &model, err, sizeof err) < 0) {
    fprintf(stderr, "mpi_train: %s\n", err);
    return 2;
  }
  tyto_context_options co;
  tyto_context_options_init(&co);
  co.devices = devices_of(argv[2], me, devs, sizeof devs);
  /* This build tree's plugins only, and no configuration file. */
  co.plugin_path = TEST_PLUGIN_DIRS;
  co.config_path = "";
  co.flags = TYTO_CONTEXT_IGNORE_ENV | TYTO_CONTEXT_NO_INSTALLED_PLUGINS;
  co.log_level = TYTO_LOG_ERROR;
  tyto_context *ctx = NULL;
  if (tyto_context_new(&co, &ctx) != TYTO_OK)
    return fail("context");
  o.batch = BATCH;
  o.granularity = 4;
  o.optim.lr = LR;
  tyto_dp *dp = NULL;
  if (tyto_dp_new(ctx, &o, build, NULL, &dp) != TYTO_OK)
    return fail("tyto_dp_new");
  /* The network's own initial values, by name, on every rank alike. */
  tyto_graph *g = tyto_graph_new();
  builder b = {1, NULL};
  tyto_dp_model m;
  memset(&m, 0, sizeof m);
  if (build(&b, g, 1, &m) != TYTO_OK)
    return fail("model");
  size_t total = 0;
  for (size_t k = 0; k < m.n_params; k++) {
    tyto_tensor *t = m.params[k];
    size_t bytes = (size_t)tyto_tensor_numel(t) * sizeof(float);
    float *v = malloc(bytes);
    if (!v || tyto_nn_initial_value(b.nn, t, v, bytes) != TYTO_OK ||
        tyto_dp_write(dp, tyto_tensor_name(t), v, bytes) != TYTO_OK)
      return fail("initial values");
    free(v);
    total += bytes / sizeof(float);
  }
  static float x[BATCH * SIDE * SIDE], lab[BATCH * CLASSES];
  unsigned seed = 1;
  for (int i = 0; i < BATCH * SIDE * SIDE; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 9) % 256) / 255.0f;
  }
  for (int e = 0; e < BATCH; e++)
    lab[e * CLASSES + e % CLASSES] = 1;
  size_t n_out = (size_t)steps + total;
  double *out = malloc(n_out * sizeof *out);
  if (!out)
    return fail("memory");
  double bytes = 0;
  for (int s = 0; s < steps; s++) {
    const void *in[2] = {x, lab};
    if (me == f_rank && s + 1 == f_step) {
      fprintf(stderr, "rank %d: fault before step %d: %s\n", me, s + 1, f_kind);
      if (!strcmp(f_kind, "input"))
        in[1] = NULL;
      else
        raise(!strcmp(f_kind, "kill") ? SIGKILL : SIGSTOP);
    }
    if (tyto_dp_step(dp, in, &out[s]) != TYTO_OK)
      return fail("step");
    bytes += tyto_dp_network_bytes(dp);
  }
  size_t at = (size_t)steps;
  for (size_t k = 0; k < m.n_params; k++) {
    tyto_tensor *t = m.params[k];
    size_t n = (size_t)tyto_tensor_numel(t);
    float *v = malloc(n * sizeof *v);
    if (!v || tyto_dp_read(dp, tyto_tensor_name(t), v, n * sizeof *v))
      return fail("reading the parameters");
    for (size_t i = 0; i < n; i++)
      out[at++] = (double)v[i];
    free(v);
  }
  /* Every rank must hold the same parameters, bit for bit. */
  if (tyto_dist_agree("the trained parameters", out + steps,
                      total * sizeof *out) != TYTO_OK)
    return fail("after training");
  printf("rank %d of %d: examples %lld..%lld of %d on %s, loss %.6g -> "
         "%.6g, %.0f bytes sent per step\n",
         me, tyto_dist_size(), (long long)tyto_dp_rank_start(dp),
         (long long)(tyto_dp_rank_start(dp) + tyto_dp_rank_batch(dp) - 1),
         BATCH, devs, out[0], out[steps - 1], steps ? bytes / steps : 0);
  int rc = 0;
  if (me == 0) {
    FILE *f = fopen(argv[3], "w");
    if (!f) {
      perror(argv[3]);
      return 2;
    }
    for (size_t i = 0; i < n_out; i++)
      fprintf(f, "%.17g\n", out[i]);
    if (fclose(f) != 0) {
      perror(argv[3]);
      return 2;
    }
    if (ref)
      rc = compare(ref, out, n_out, steps, ltol, wtol);
  }
  free(out);
  tyto_nn_free(b.nn);
  tyto_graph_free(g);
  tyto_dp_free(dp);
  tyto_context_free(ctx);
  mf_free(model);
  if (tyto_dist_finalize() != TYTO_OK) {
    fprintf(stderr, "mpi_train: %s\n", tyto_errmsg());
    return 3;
  }
  return rc;
}
