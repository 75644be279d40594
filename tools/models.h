/*
 * The training-step graphs of three models, shared by tyto-graph and the
 * benches (bench/graph_compile, bench/memory). Internal to tools/ and
 * bench/: not part of libtyto.
 *
 * Each model is built in a fresh graph: the forward pass and its loss, the
 * gradients of every trained parameter in one reverse sweep (tyto_grads),
 * and Adam's update written with ordinary ops, so that compiling the loss
 * with the updates (model_options()) compiles one whole training step.
 *
 *   "mlp"   784-128-10, ReLU, softmax cross-entropy; batch 64
 *   "cnn"   the seed CNN of Owl's computation-graph chapter: conv 5x5x32
 *           same, ReLU, max pool 2x2, dropout 0.1, fully connected 1024
 *           ReLU, linear 10, softmax cross-entropy; batch 64
 *   "lstm"  after Owl's lazy_lstm: 100 token ids, embedding 40, LSTM 128
 *           unrolled over the 100 steps (one op per gate term, as Owl's
 *           graph has them), linear 512 ReLU on the last hidden state,
 *           linear to 60 classes, softmax cross-entropy; batch 32
 */
#ifndef TYTO_TOOLS_MODELS_H
#define TYTO_TOOLS_MODELS_H

#include <stddef.h>

#include <tyto/tyto.h>

enum { MODEL_MAX_INPUTS = 4, MODEL_MAX_PARAMS = 32 };

/* One training step. Everything points into g. */
typedef struct model_graph {
  const char *name; /* "mlp", "cnn", "lstm" (static) */
  int batch;
  tyto_graph *g;
  /* Fed at each run: the data, then "labels" (one-hot, [batch, classes]). */
  size_t n_inputs;
  tyto_tensor *inputs[MODEL_MAX_INPUTS];
  /* The trained parameters, their gradients and Adam's moments, named
   * "<p>.m" and "<p>.v"; step is the rank-0 parameter "step" holding t
   * (1 for the first update) for the bias correction. */
  size_t n_params;
  tyto_tensor *params[MODEL_MAX_PARAMS];
  tyto_tensor *grads[MODEL_MAX_PARAMS];
  tyto_tensor *m[MODEL_MAX_PARAMS], *v[MODEL_MAX_PARAMS];
  tyto_tensor *step;
  tyto_tensor *loss; /* rank 0 */
  /* What one step computes: the loss; and what it writes back, as
   * parameter updates (tyto_program_options): p', m', v' of each
   * parameter in turn, then step + 1. */
  size_t n_outputs;
  tyto_tensor *outputs[1];
  size_t n_updates;
  tyto_tensor *update_params[1 + 3 * MODEL_MAX_PARAMS];
  tyto_tensor *update_values[1 + 3 * MODEL_MAX_PARAMS];
  /* Tensors and edges each phase added, and its time in seconds. */
  size_t forward_nodes, ad_nodes, update_nodes;
  size_t forward_edges, ad_edges, update_edges;
  double forward_seconds, ad_seconds, update_seconds;
} model_graph;

/* The models, NULL-terminated, in the order above. */
extern const char *const model_names[];

/* The batch a model is built with when none is asked for (batch <= 0). */
int model_default_batch(const char *name);

/* Builds model `name` with `batch` rows (<= 0: its default) into *out.
 * Returns 0, or -1 with a message in err (n bytes) for an unknown name
 * ("unknown model 'x': expected mlp, cnn or lstm") or a graph that failed
 * (its message); *out then holds nothing to free. On success free it with
 * model_free(). */
int model_build(const char *name, int batch, model_graph *out, char *err,
                size_t n);

/* Sets the updates of m into opts (filled with tyto_program_options_init()
 * first). */
void model_options(const model_graph *m, tyto_program_options *opts);

/* Frees the model's graph (NULL or a zeroed model: nothing). */
void model_free(model_graph *m);

#endif /* TYTO_TOOLS_MODELS_H */
