/*
 * The training-step graphs of tools/models.h: forward pass, loss, reverse
 * sweep, Adam update. Built with the public API only, as user code would.
 */
#define _POSIX_C_SOURCE 200809L

#include "models.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *const model_names[] = {"mlp", "cnn", "lstm", NULL};

/* Adam's constants (Kingma and Ba 2015, Algorithm 1), as Owl's defaults. */
#define ADAM_LR 0.001
#define ADAM_B1 0.9
#define ADAM_B2 0.999
#define ADAM_EPS 1e-8

enum {
  MNIST_PIXELS = 784,
  MNIST_CLASSES = 10,
  LSTM_STEPS = 100, /* Owl's lazy_lstm: a window of 100 characters */
  LSTM_VOCAB = 60,  /* its character set, about 60 symbols */
  LSTM_EMBED = 40,
  LSTM_UNITS = 128,
  LSTM_HIDDEN = 512
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t edges(const tyto_graph *g, size_t from, size_t to) {
  size_t e = 0;
  for (size_t i = from; i < to; i++)
    e += tyto_tensor_input_count(tyto_graph_tensor(g, i));
  return e;
}

static tyto_tensor *input(model_graph *m, int rank, const int64_t *shape,
                          const char *name) {
  return m->inputs[m->n_inputs++] =
             tyto_input(m->g, TYTO_F32, rank, shape, name);
}

static tyto_tensor *param(model_graph *m, int rank, const int64_t *shape,
                          const char *name) {
  return m->params[m->n_params++] =
             tyto_parameter(m->g, TYTO_F32, rank, shape, name);
}

/* x [batch, in] -> x·W + b, W [in, out] and b [out] named "<name>.w",
 * "<name>.b". */
static tyto_tensor *linear(model_graph *m, tyto_tensor *x, int64_t in,
                           int64_t out, const char *name) {
  char w[64], b[64];
  snprintf(w, sizeof w, "%s.w", name);
  snprintf(b, sizeof b, "%s.b", name);
  tyto_tensor *wt = param(m, 2, (int64_t[]){in, out}, w);
  tyto_tensor *bt = param(m, 1, (int64_t[]){out}, b);
  return tyto_add(tyto_matmul(x, wt, 0, 0), bt);
}

/* Softmax cross-entropy against one-hot labels, the batch mean:
 * -sum(log_softmax(logits) * labels) / batch. */
static tyto_tensor *xent(model_graph *m, tyto_tensor *logits, int64_t classes) {
  tyto_tensor *labels = input(m, 2, (int64_t[]){m->batch, classes}, "labels");
  tyto_tensor *lp = tyto_log_softmax(logits, -1);
  return tyto_neg(tyto_div_scalar(tyto_sum(tyto_mul(lp, labels), 0, NULL, 0),
                                  (double)m->batch));
}

static void build_mlp(model_graph *m) {
  tyto_tensor *x = input(m, 2, (int64_t[]){m->batch, MNIST_PIXELS}, "x");
  tyto_tensor *h = tyto_relu(linear(m, x, MNIST_PIXELS, 128, "fc1"));
  m->loss = xent(m, linear(m, h, 128, MNIST_CLASSES, "fc2"), MNIST_CLASSES);
}

static void build_cnn(model_graph *m) {
  tyto_tensor *x = input(m, 4, (int64_t[]){m->batch, 1, 28, 28}, "x");
  tyto_tensor *w = param(m, 4, (int64_t[]){32, 1, 5, 5}, "conv.w");
  tyto_tensor *b = param(m, 1, (int64_t[]){32}, "conv.b");
  tyto_conv2d_params same = {{1, 1}, {2, 2}, {1, 1}, 1};
  tyto_tensor *h = tyto_relu(tyto_conv2d(x, w, b, &same));
  h = tyto_max_pool2d(h, 2, 2, 2, 2, 0, 0);
  /* Dropout 0.1: keep with probability 0.9, scale the kept by 1/0.9. */
  tyto_tensor *keep =
      tyto_random_bernoulli(m->g, TYTO_F32, 4, tyto_tensor_shape(h), 0.9, 1);
  h = tyto_mul(h, tyto_div_scalar(keep, 0.9));
  h = tyto_reshape(h, 2, (int64_t[]){m->batch, 32 * 14 * 14});
  h = tyto_relu(linear(m, h, 32 * 14 * 14, 1024, "fc"));
  m->loss = xent(m, linear(m, h, 1024, MNIST_CLASSES, "out"), MNIST_CLASSES);
}

/* One LSTM gate as Owl's Neuron.LSTM writes it: x·Wx + h·Wh + b, then its
 * activation; parameters "lstm.wx<gate>", "lstm.wh<gate>", "lstm.b<gate>". */
typedef struct gate {
  tyto_tensor *wx, *wh, *b;
} gate;

static gate gate_params(model_graph *m, char which) {
  char wx[32], wh[32], b[32];
  snprintf(wx, sizeof wx, "lstm.wx%c", which);
  snprintf(wh, sizeof wh, "lstm.wh%c", which);
  snprintf(b, sizeof b, "lstm.b%c", which);
  gate gt = {param(m, 2, (int64_t[]){LSTM_EMBED, LSTM_UNITS}, wx),
             param(m, 2, (int64_t[]){LSTM_UNITS, LSTM_UNITS}, wh),
             param(m, 1, (int64_t[]){LSTM_UNITS}, b)};
  return gt;
}

static tyto_tensor *gate_pre(const gate *gt, tyto_tensor *x, tyto_tensor *h) {
  return tyto_add(
      tyto_add(tyto_matmul(x, gt->wx, 0, 0), tyto_matmul(h, gt->wh, 0, 0)),
      gt->b);
}

static void build_lstm(model_graph *m) {
  const int64_t B = m->batch;
  tyto_tensor *tokens = input(m, 2, (int64_t[]){B, LSTM_STEPS}, "tokens");
  tyto_tensor *emb =
      param(m, 2, (int64_t[]){LSTM_VOCAB, LSTM_EMBED}, "embedding.w");
  /* [B, steps, embed]: each token id picks its row. */
  tyto_tensor *xs = tyto_gather(emb, tokens, 0);
  gate gi = gate_params(m, 'i'), gf = gate_params(m, 'f'),
       gc = gate_params(m, 'c'), go = gate_params(m, 'o');
  tyto_tensor *h =
      tyto_full(m->g, TYTO_F32, 2, (int64_t[]){B, LSTM_UNITS}, 0.0);
  tyto_tensor *c = h;
  for (int64_t t = 0; t < LSTM_STEPS; t++) {
    tyto_tensor *x = tyto_reshape(tyto_slice_axis(xs, 1, t, t + 1, 1), 2,
                                  (int64_t[]){B, LSTM_EMBED});
    /* Hochreiter and Schmidhuber 1997, with the forget gate of Gers et
     * al. 2000: c = f*c + i*g, h = o*tanh(c). */
    tyto_tensor *i = tyto_sigmoid(gate_pre(&gi, x, h));
    tyto_tensor *f = tyto_sigmoid(gate_pre(&gf, x, h));
    tyto_tensor *g = tyto_tanh(gate_pre(&gc, x, h));
    tyto_tensor *o = tyto_sigmoid(gate_pre(&go, x, h));
    c = tyto_add(tyto_mul(f, c), tyto_mul(i, g));
    h = tyto_mul(o, tyto_tanh(c));
  }
  tyto_tensor *y = tyto_relu(linear(m, h, LSTM_UNITS, LSTM_HIDDEN, "fc"));
  m->loss = xent(m, linear(m, y, LSTM_HIDDEN, LSTM_VOCAB, "out"), LSTM_VOCAB);
}

/* Adam (Kingma and Ba 2015, Algorithm 1) for parameter k:
 *   m' = b1*m + (1-b1)*g,   v' = b2*v + (1-b2)*g*g,
 *   p' = p - lr * (m'/(1-b1^t)) / (sqrt(v'/(1-b2^t)) + eps),
 * with the bias corrections c1 = 1-b1^t, c2 = 1-b2^t computed in the
 * program from the step parameter. */
static void adam(model_graph *m, size_t k, tyto_tensor *c1, tyto_tensor *c2) {
  tyto_tensor *p = m->params[k], *g = m->grads[k];
  char name[96];
  const char *pn = tyto_tensor_name(p);
  snprintf(name, sizeof name, "%s.m", pn);
  m->m[k] = tyto_parameter(m->g, TYTO_F32, tyto_tensor_rank(p),
                           tyto_tensor_shape(p), name);
  snprintf(name, sizeof name, "%s.v", pn);
  m->v[k] = tyto_parameter(m->g, TYTO_F32, tyto_tensor_rank(p),
                           tyto_tensor_shape(p), name);
  tyto_tensor *m1 = tyto_add(tyto_mul_scalar(m->m[k], ADAM_B1),
                             tyto_mul_scalar(g, 1.0 - ADAM_B1));
  tyto_tensor *v1 = tyto_add(tyto_mul_scalar(m->v[k], ADAM_B2),
                             tyto_mul_scalar(tyto_mul(g, g), 1.0 - ADAM_B2));
  tyto_tensor *mhat = tyto_div(m1, c1);
  tyto_tensor *vhat = tyto_div(v1, c2);
  tyto_tensor *upd = tyto_div(mhat, tyto_add_scalar(tyto_sqrt(vhat), ADAM_EPS));
  tyto_tensor *p1 = tyto_sub(p, tyto_mul_scalar(upd, ADAM_LR));
  tyto_tensor *const from[3] = {p, m->m[k], m->v[k]}, *to[3] = {p1, m1, v1};
  for (int i = 0; i < 3; i++) {
    m->update_params[m->n_updates] = from[i];
    m->update_values[m->n_updates++] = to[i];
  }
}

static void update(model_graph *m) {
  m->step = tyto_parameter(m->g, TYTO_F32, 0, NULL, "step");
  tyto_tensor *one = tyto_scalar(m->g, TYTO_F32, 1.0);
  tyto_tensor *c1 =
      tyto_sub(one, tyto_pow(tyto_scalar(m->g, TYTO_F32, ADAM_B1), m->step));
  tyto_tensor *c2 =
      tyto_sub(one, tyto_pow(tyto_scalar(m->g, TYTO_F32, ADAM_B2), m->step));
  m->outputs[m->n_outputs++] = m->loss;
  for (size_t k = 0; k < m->n_params; k++)
    adam(m, k, c1, c2);
  m->update_params[m->n_updates] = m->step;
  m->update_values[m->n_updates++] = tyto_add(m->step, one);
}

void model_options(const model_graph *m, tyto_program_options *opts) {
  opts->n_updates = m->n_updates;
  opts->update_params = m->update_params;
  opts->update_values = m->update_values;
}

int model_default_batch(const char *name) {
  return name && strcmp(name, "lstm") == 0 ? 32 : 64;
}

int model_build(const char *name, int batch, model_graph *out, char *err,
                size_t n) {
  static const struct {
    const char *name;
    void (*build)(model_graph *);
  } builders[] = {{"mlp", build_mlp}, {"cnn", build_cnn}, {"lstm", build_lstm}};
  memset(out, 0, sizeof *out);
  size_t b = 0, nb = sizeof builders / sizeof builders[0];
  while (b < nb && !(name && strcmp(name, builders[b].name) == 0))
    b++;
  if (b == nb) {
    snprintf(err, n, "unknown model '%s': expected mlp, cnn or lstm",
             name ? name : "(null)");
    return -1;
  }
  out->name = builders[b].name;
  out->batch = batch > 0 ? batch : model_default_batch(out->name);
  out->g = tyto_graph_new();
  if (!out->g) {
    snprintf(err, n, "model %s: out of memory", out->name);
    return -1;
  }

  double t0 = now();
  builders[b].build(out);
  double t1 = now();
  size_t n0 = tyto_graph_size(out->g);
  tyto_grads(out->loss, out->n_params, out->params, out->grads);
  double t2 = now();
  size_t n1 = tyto_graph_size(out->g);
  update(out);
  double t3 = now();
  size_t n2 = tyto_graph_size(out->g);

  if (tyto_graph_status(out->g) != TYTO_OK) {
    snprintf(err, n, "model %s: %s", out->name,
             tyto_graph_error_message(out->g));
    model_free(out);
    return -1;
  }
  out->forward_nodes = n0;
  out->ad_nodes = n1 - n0;
  out->update_nodes = n2 - n1;
  out->forward_edges = edges(out->g, 0, n0);
  out->ad_edges = edges(out->g, n0, n1);
  out->update_edges = edges(out->g, n1, n2);
  out->forward_seconds = t1 - t0;
  out->ad_seconds = t2 - t1;
  out->update_seconds = t3 - t2;
  return 0;
}

void model_free(model_graph *m) {
  if (m) {
    tyto_graph_free(m->g);
    memset(m, 0, sizeof *m);
  }
}
