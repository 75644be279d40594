/*
 * bench/ad_graph: how much graph the reverse transform builds, and how fast.
 * For the models of the training issue (the MLP 784-128-10 and the seed
 * CNN: conv 5x5x32 same, relu, max_pool 2x2, dropout 0.1, fully connected
 * 1024 relu, linear 10, log_softmax cross-entropy), batch 64, it builds the
 * loss, then the gradients of every parameter in one reverse sweep, and
 * prints tensors and edges of each part, the ratio, and the transform's
 * time (best of 20). Prints a table, then a line starting with "BENCH ".
 *
 *   build/bench/ad_graph
 *
 * Not a test: tests/ad/test_ad_api.c bounds the ratio without timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tyto/tyto.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { BATCH = 64, MAX_PARAMS = 8 };

typedef struct model {
  tyto_graph *g;
  tyto_tensor *loss;
  tyto_tensor *params[MAX_PARAMS];
  int n_params;
} model;

static tyto_tensor *param(model *m, int rank, const int64_t *shape,
                          const char *name) {
  return m->params[m->n_params++] =
             tyto_parameter(m->g, TYTO_F32, rank, shape, name);
}

/* Cross-entropy of log-probabilities [B, 10] against one-hot labels. */
static tyto_tensor *xent(model *m, tyto_tensor *logits) {
  tyto_tensor *labels =
      tyto_input(m->g, TYTO_F32, 2, (int64_t[]){BATCH, 10}, "labels");
  tyto_tensor *lp = tyto_log_softmax(logits, -1);
  return tyto_neg(
      tyto_div_scalar(tyto_sum(tyto_mul(lp, labels), 0, NULL, 0), BATCH));
}

static tyto_tensor *dense(model *m, tyto_tensor *x, int64_t in, int64_t out,
                          const char *w, const char *b) {
  tyto_tensor *wt = param(m, 2, (int64_t[]){in, out}, w);
  tyto_tensor *bt = param(m, 1, (int64_t[]){out}, b);
  return tyto_add(tyto_matmul(x, wt, 0, 0), bt);
}

static void mlp(model *m) {
  tyto_tensor *x = tyto_input(m->g, TYTO_F32, 2, (int64_t[]){BATCH, 784}, "x");
  tyto_tensor *h = tyto_relu(dense(m, x, 784, 128, "w1", "b1"));
  m->loss = xent(m, dense(m, h, 128, 10, "w2", "b2"));
}

static void cnn(model *m) {
  tyto_tensor *x =
      tyto_input(m->g, TYTO_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, "x");
  tyto_tensor *w = param(m, 4, (int64_t[]){32, 1, 5, 5}, "conv_w");
  tyto_tensor *b = param(m, 1, (int64_t[]){32}, "conv_b");
  tyto_conv2d_params cp = {{1, 1}, {2, 2}, {1, 1}, 1};
  tyto_tensor *h = tyto_relu(tyto_conv2d(x, w, b, &cp));
  h = tyto_max_pool2d(h, 2, 2, 2, 2, 0, 0);
  tyto_tensor *keep =
      tyto_random_bernoulli(m->g, TYTO_F32, 4, tyto_tensor_shape(h), 0.9, 1);
  h = tyto_mul(h, tyto_div_scalar(keep, 0.9));
  h = tyto_reshape(h, 2, (int64_t[]){BATCH, 32 * 14 * 14});
  h = tyto_relu(dense(m, h, 32 * 14 * 14, 1024, "fc_w", "fc_b"));
  m->loss = xent(m, dense(m, h, 1024, 10, "out_w", "out_b"));
}

static size_t edges(tyto_graph *g, size_t from, size_t to) {
  size_t e = 0;
  for (size_t i = from; i < to; i++)
    e += tyto_tensor_input_count(tyto_graph_tensor(g, i));
  return e;
}

int main(void) {
  struct {
    const char *name;
    void (*build)(model *);
  } models[] = {{"mlp", mlp}, {"cnn", cnn}};
  char json[1024];
  int jn = snprintf(json, sizeof json, "BENCH {\"bench\":\"ad_graph\"");
  printf("%-5s %9s %7s %9s %7s %7s %10s\n", "model", "fwd nodes", "edges",
         "grad nodes", "edges", "ratio", "AD time");
  for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
    double best = 1e9;
    size_t fwd = 0, fwd_e = 0, grad = 0, grad_e = 0;
    for (int rep = 0; rep < 20; rep++) {
      model m = {tyto_graph_new(), NULL, {0}, 0};
      models[k].build(&m);
      fwd = tyto_graph_size(m.g);
      tyto_tensor *out[MAX_PARAMS];
      double t0 = now();
      tyto_grads(m.loss, (size_t)m.n_params, m.params, out);
      double t = now() - t0;
      if (tyto_graph_status(m.g) != TYTO_OK) {
        fprintf(stderr, "ad_graph: %s\n", tyto_graph_error_message(m.g));
        return 1;
      }
      best = t < best ? t : best;
      grad = tyto_graph_size(m.g) - fwd;
      fwd_e = edges(m.g, 0, fwd);
      grad_e = edges(m.g, fwd, fwd + grad);
      tyto_graph_free(m.g);
    }
    double ratio = (double)grad / (double)fwd;
    printf("%-5s %9zu %7zu %10zu %7zu %7.2f %8.1f us\n", models[k].name, fwd,
           fwd_e, grad, grad_e, ratio, best * 1e6);
    jn += snprintf(json + jn, sizeof json - (size_t)jn,
                   ",\"%s\":{\"forward_nodes\":%zu,\"gradient_nodes\":%zu,"
                   "\"ratio\":%.3f,\"ad_seconds\":%.3g}",
                   models[k].name, fwd, grad, ratio, best);
  }
  printf("%s}\n", json);
  return 0;
}
