/* Activations, dense layers, embeddings and dropout. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "nn_internal.h"

static const char *const act_names[] = {
    "none", "relu", "leaky_relu", "elu", "tanh", "sigmoid", "softmax", "gelu"};

#define N_ACT_NAMES (sizeof act_names / sizeof act_names[0])

const char *tyto_nn_activation_name(tyto_nn_activation act) {
  if ((int)act >= 0 && (size_t)act < N_ACT_NAMES)
    return act_names[act];
  return "?";
}

int tyto_nn_activation_from_name(const char *name) {
  if (!name)
    return -1;
  for (size_t i = 0; i < N_ACT_NAMES; i++)
    if (!strcmp(name, act_names[i]))
      return (int)i;
  if (!strcmp(name, "linear")) /* Keras's name for none */
    return TYTO_ACT_NONE;
  return -1;
}

tyto_tensor *tyto_nn_activate(tyto_tensor *x, tyto_nn_activation act,
                              double param) {
  if (!x || x->kind == TYTO_KIND_ERROR)
    return x;
  switch (act) {
  case TYTO_ACT_NONE: return x;
  case TYTO_ACT_RELU: return tyto_relu(x);
  case TYTO_ACT_LEAKY_RELU: return tyto_leaky_relu(x, param ? param : 0.01);
  case TYTO_ACT_ELU: return tyto_elu(x, param ? param : 1.0);
  case TYTO_ACT_TANH: return tyto_tanh(x);
  case TYTO_ACT_SIGMOID: return tyto_sigmoid(x);
  case TYTO_ACT_SOFTMAX: return tyto_softmax(x, -1);
  case TYTO_ACT_GELU: {
    /* x Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2 (Hendrycks and
     * Gimpel 2016, the exact form). */
    tyto_tensor *phi = tyto_add_scalar(
        tyto_erf(tyto_mul_scalar(x, 0.70710678118654752440)), 1.0);
    return tyto_mul(tyto_mul_scalar(x, 0.5), phi);
  }
  }
  return graph_fail(x->graph, "activate: unknown activation %d", (int)act);
}

/* x [..., in] W [in, units] + b as one matrix product over the rows. */
static tyto_tensor *linear_apply(tyto_tensor *x, tyto_tensor *w,
                                 tyto_tensor *b) {
  int r = x->rank;
  int64_t in = w->shape[0], units = w->shape[1];
  tyto_tensor *y;
  if (r == 2) {
    y = tyto_matmul(x, w, 0, 0);
  } else {
    int64_t rows = 1, shape[TYTO_MAX_RANK];
    for (int i = 0; i < r - 1; i++) {
      rows *= x->shape[i];
      shape[i] = x->shape[i];
    }
    shape[r - 1] = units;
    y = tyto_matmul(tyto_reshape(x, 2, (const int64_t[]){rows, in}), w, 0, 0);
    y = tyto_reshape(y, r, shape);
  }
  return b ? tyto_add(y, b) : y;
}

static tyto_tensor *linear(tyto_nn *nn, const char *kind, const char *name,
                           tyto_tensor *x, int64_t units, int bias,
                           tyto_init weight_init) {
  if (units <= 0)
    return nn_fail(nn, kind, name, "units %lld must be positive",
                   (long long)units);
  if (nn_init_check(nn, kind, name, &weight_init) < 0)
    return &nn->g->error;
  int64_t in = x->shape[x->rank - 1];
  tyto_tensor *w =
      nn_param(nn, kind, name, "weight", 2, (const int64_t[]){in, units},
               weight_init, nn_init_of(TYTO_INIT_GLOROT_UNIFORM), 0);
  if (w->kind == TYTO_KIND_ERROR)
    return w;
  tyto_tensor *b = NULL;
  if (bias) {
    b = nn_param(nn, kind, name, "bias", 1, &units,
                 nn_init_of(TYTO_INIT_DEFAULT), nn_init_of(TYTO_INIT_ZEROS), 0);
    if (b->kind == TYTO_KIND_ERROR)
      return b;
  }
  return linear_apply(x, w, b);
}

tyto_tensor *tyto_nn_linear(tyto_nn *nn, const char *name, tyto_tensor *x,
                            int64_t units, int bias, tyto_init weight_init) {
  tyto_tensor *err;
  if (nn_check(nn, "linear", name, 1, x, 1, TYTO_MAX_RANK, &err) < 0)
    return err;
  return linear(nn, "linear", name, x, units, bias, weight_init);
}

tyto_tensor *tyto_nn_fully_connected(tyto_nn *nn, const char *name,
                                     tyto_tensor *x, int64_t units,
                                     tyto_nn_activation act,
                                     tyto_init weight_init) {
  tyto_tensor *err;
  const char *kind = "fully_connected";
  if (nn_check(nn, kind, name, 1, x, 1, TYTO_MAX_RANK, &err) < 0)
    return err;
  if ((int)act < 0 || (size_t)act >= N_ACT_NAMES)
    return nn_fail(nn, kind, name, "unknown activation %d", (int)act);
  tyto_tensor *y =
      linear(nn, kind, name, tyto_nn_flatten(x), units, 1, weight_init);
  return tyto_nn_activate(y, act, 0);
}

tyto_tensor *tyto_nn_embedding(tyto_nn *nn, const char *name, tyto_tensor *ids,
                               int64_t vocab, int64_t dim, tyto_init init) {
  tyto_tensor *err;
  const char *kind = "embedding";
  if (nn_check(nn, kind, name, NN_NAMED | NN_IDS, ids, 0, TYTO_MAX_RANK - 1,
               &err) < 0)
    return err;
  if (vocab <= 0 || dim <= 0)
    return nn_fail(nn, kind, name, "vocab %lld and dim %lld must be positive",
                   (long long)vocab, (long long)dim);
  if (nn_init_check(nn, kind, name, &init) < 0)
    return &nn->g->error;
  tyto_init def = {TYTO_INIT_NORMAL, 0.0, 1.0, 0};
  tyto_tensor *table = nn_param(nn, kind, name, "weight", 2,
                                (const int64_t[]){vocab, dim}, init, def, 0);
  if (table->kind == TYTO_KIND_ERROR)
    return table;
  return tyto_gather(table, ids, 0);
}

tyto_tensor *tyto_nn_dropout(tyto_nn *nn, tyto_tensor *x, double rate) {
  tyto_tensor *err;
  if (nn_check(nn, "dropout", NULL, 0, x, 0, TYTO_MAX_RANK, &err) < 0)
    return err;
  if (!(rate >= 0 && rate < 1))
    return nn_fail(nn, "dropout", NULL, "rate %g outside [0, 1)", rate);
  if (nn->mode == TYTO_NN_EVAL || rate == 0)
    return x;
  tyto_tensor *step = nn_step(nn);
  if (step->kind == TYTO_KIND_ERROR)
    return step;
  /* Each dropout its own stream: the network's seed and the layer's
   * number, so a rebuilt network draws the same masks. */
  uint64_t seed =
      nn_mix64(nn->seed ^ nn_mix64(0x64726f706f757400ull + nn->n_dropouts));
  nn->n_dropouts++;
  tyto_tensor *keep = tyto_random_stepped(
      TYTO_OP_RANDOM_BERNOULLI, step, x->rank, x->shape, 1.0 - rate, 0, seed);
  /* Inverted dropout (Srivastava et al. 2014, scaled at training time). */
  return tyto_mul_scalar(tyto_mul(x, keep), 1.0 / (1.0 - rate));
}
