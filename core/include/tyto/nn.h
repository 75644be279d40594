/*
 * Neural-network layers, after Owl's neuron catalogue, and the losses.
 *
 * A tyto_nn is a network under construction in one graph: the parameters
 * its layers created (each with the initialiser it will start from), the
 * layers' own state (batch normalisation's running statistics, dropout's
 * random step) and the updates of that state a training step makes, and a
 * mode, TRAIN or EVAL. Layers are functions tensor -> tensor that add ops
 * to the graph; errors are the graph's sticky errors (tyto_graph_status()),
 * with the layer's name in the message ("conv2d 'conv1': x must have rank
 * 4 (NCHW), got [64,784]").
 *
 * Parameters are named "<layer>.<what>" ("fc1.weight", "fc1.bias",
 * "bn1.running_mean"). Building a layer under a name that already exists
 * reuses that layer's parameters (a different shape is an error), so the
 * same network built twice -- in TRAIN mode for the training step and in
 * EVAL mode for evaluation -- shares its weights in one graph:
 *
 *   tyto_nn *nn; tyto_nn_new(g, NULL, &nn);
 *   tyto_tensor *logits = build(nn, x_train);          (TRAIN)
 *   tyto_nn_set_mode(nn, TYTO_NN_EVAL);
 *   tyto_tensor *eval_logits = build(nn, x_test);       (same weights)
 *
 * Layouts: dense [N, F]; 1-d signals [N, C, L]; images [N, C, H, W];
 * sequences [N, T, F]. The first axis is always the batch.
 *
 * Weights of linear layers are [in, out] (y = x W + b); convolution
 * weights [O, C/groups, KH, KW] (OIHW; 1-d: [O, C/groups, 1, K]);
 * transposed convolution weights [C, O/groups, KH, KW] as PyTorch's.
 */
#ifndef TYTO_NN_H
#define TYTO_NN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_program tyto_program;
typedef struct tyto_nn tyto_nn;

typedef enum tyto_nn_mode {
  TYTO_NN_TRAIN = 0, /* dropout drops, batch norm uses batch statistics */
  TYTO_NN_EVAL = 1   /* dropout is the identity, batch norm running stats */
} tyto_nn_mode;

/* ---------------------------------------------------------------------- */
/* Initialisers                                                            */

/* fan_in and fan_out: a linear weight [in, out] has fan_in = in, fan_out =
 * out; a convolution weight [O, I, KH, KW] fan_in = I*KH*KW, fan_out =
 * O*KH*KW (PyTorch's and Keras's convention). `gain` multiplies the
 * standard deviation (0 means 1). */
typedef enum tyto_init_kind {
  TYTO_INIT_DEFAULT = 0, /* the layer's default (see each layer) */
  TYTO_INIT_ZEROS,
  TYTO_INIT_ONES,
  TYTO_INIT_CONSTANT,       /* a */
  TYTO_INIT_UNIFORM,        /* U(a, b) */
  TYTO_INIT_NORMAL,         /* N(mean a, stddev b) */
  TYTO_INIT_GLOROT_UNIFORM, /* U(-l, l), l = gain sqrt(6 / (in + out)) */
  TYTO_INIT_GLOROT_NORMAL,  /* N(0, gain sqrt(2 / (in + out))) */
  TYTO_INIT_HE_UNIFORM,     /* U(-l, l), l = gain sqrt(6 / in) */
  TYTO_INIT_HE_NORMAL,      /* N(0, gain sqrt(2 / in)) */
  TYTO_INIT_LECUN_UNIFORM,  /* U(-l, l), l = gain sqrt(3 / in) */
  TYTO_INIT_LECUN_NORMAL    /* N(0, gain sqrt(1 / in)) */
} tyto_init_kind;

typedef struct tyto_init {
  tyto_init_kind kind;
  double a, b; /* CONSTANT: a; UNIFORM: [a, b); NORMAL: mean a, stddev b */
  double gain; /* Glorot/He/LeCun: scale (0: 1) */
} tyto_init;

/* Name of an initialiser ("glorot_uniform"), and back (-1: unknown). */
TYTO_API const char *tyto_init_name(tyto_init_kind kind);
TYTO_API int tyto_init_from_name(const char *name);

/* ---------------------------------------------------------------------- */
/* Networks                                                                */

typedef struct tyto_nn_options {
  /* sizeof(tyto_nn_options) as the caller compiled it; set by
   * tyto_nn_options_init(). Fields past it are taken as defaults. */
  size_t struct_size;
  /* Of every parameter and input: TYTO_F32 (the default) or TYTO_F64;
   * tyto_nn_new() refuses the 2-byte formats. */
  tyto_dtype dtype;
  uint64_t seed;     /* initial values and dropout masks (default 0) */
  tyto_nn_mode mode; /* default TYTO_NN_TRAIN */
  /* Non-zero: TRAIN-mode batch norms normalise with the statistics of the
   * whole global batch of a data-parallel step, their channel sums and
   * counts summed over the replicas (tyto_replica_sum in
   * <tyto/parallel.h>); on one device the same as without. Default 0:
   * each replica its own shard's. */
  int sync_batch_norm;
} tyto_nn_options;

TYTO_API void tyto_nn_options_init(tyto_nn_options *opts);

/* A network building into g (which must outlive it); opts NULL for the
 * defaults. On success *out owns it: free with tyto_nn_free() (the graph
 * keeps its tensors). TYTO_ERR_INVALID_ARGUMENT, TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_nn_new(tyto_graph *g, const tyto_nn_options *opts,
                                 tyto_nn **out);
TYTO_API void tyto_nn_free(tyto_nn *nn); /* NULL ok */

TYTO_API tyto_graph *tyto_nn_graph(const tyto_nn *nn);
TYTO_API tyto_dtype tyto_nn_dtype(const tyto_nn *nn);
TYTO_API void tyto_nn_set_mode(tyto_nn *nn, tyto_nn_mode mode);
TYTO_API tyto_nn_mode tyto_nn_get_mode(const tyto_nn *nn);

/* The trained parameters, in creation order. */
TYTO_API size_t tyto_nn_parameter_count(const tyto_nn *nn);
TYTO_API tyto_tensor *tyto_nn_parameter(const tyto_nn *nn, size_t i);
/* The n trained parameters as an array (valid until the next layer). */
TYTO_API tyto_tensor *const *tyto_nn_parameters(const tyto_nn *nn);
/* Parameters that are weights (rank >= 2: the ones regularisation
 * penalises by convention), in creation order. */
TYTO_API size_t tyto_nn_weight_count(const tyto_nn *nn);
TYTO_API tyto_tensor *tyto_nn_weight(const tyto_nn *nn, size_t i);

/* Layer state that is not trained but persists (running statistics,
 * dropout's step counter): parameters of the graph, checkpointed with the
 * rest. */
TYTO_API size_t tyto_nn_state_count(const tyto_nn *nn);
TYTO_API tyto_tensor *tyto_nn_state(const tyto_nn *nn, size_t i);

/* The state updates the TRAIN-mode layers built so far make at each step:
 * pass them to tyto_program_options (update_params / update_values) along
 * with the optimiser's. A layer built again in TRAIN mode replaces its
 * earlier updates (a program updates a parameter once). Valid until the
 * next layer. */
TYTO_API size_t tyto_nn_update_count(const tyto_nn *nn);
TYTO_API tyto_tensor *const *tyto_nn_update_params(const tyto_nn *nn);
TYTO_API tyto_tensor *const *tyto_nn_update_values(const tyto_nn *nn);

/* The initial value of parameter or state tensor t of nn (its initialiser
 * drawn from the network's seed and t's name, so the values do not depend
 * on the order layers were built in: a splitmix64 stream started from the
 * seed and the FNV-1a hash of the name, normals by Box-Muller, drawn in
 * double and rounded to the dtype) into dst, numel values of the nn's
 * dtype. TYTO_ERR_INVALID_ARGUMENT when t is not nn's or bytes is not its
 * size. */
TYTO_API tyto_status tyto_nn_initial_value(const tyto_nn *nn,
                                           const tyto_tensor *t, void *dst,
                                           size_t bytes);
/* Writes the initial value of every parameter and state tensor of nn that
 * program p uses (the others are skipped). Errors as
 * tyto_program_write_parameter(). */
TYTO_API tyto_status tyto_nn_initialize(const tyto_nn *nn, tyto_program *p);

/* ---------------------------------------------------------------------- */
/* Layers                                                                  */

/* An input of the nn's dtype (tyto_input with the nn's dtype). */
TYTO_API tyto_tensor *tyto_nn_input(tyto_nn *nn, int rank, const int64_t *shape,
                                    const char *name);

typedef enum tyto_nn_activation {
  TYTO_ACT_NONE = 0,
  TYTO_ACT_RELU,
  TYTO_ACT_LEAKY_RELU, /* param: negative slope (0: 0.01) */
  TYTO_ACT_ELU,        /* param: alpha (0: 1) */
  TYTO_ACT_TANH,
  TYTO_ACT_SIGMOID,
  TYTO_ACT_SOFTMAX, /* over the last axis */
  TYTO_ACT_GELU     /* exact: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 */
} tyto_nn_activation;

TYTO_API const char *tyto_nn_activation_name(tyto_nn_activation act);
TYTO_API int tyto_nn_activation_from_name(const char *name); /* -1: none */
TYTO_API tyto_tensor *tyto_nn_activate(tyto_tensor *x, tyto_nn_activation act,
                                       double param);

/* Dense layers. linear: x [..., in] -> x W + b, [..., units]; W [in,
 * units] ("<name>.weight", default Glorot uniform), b [units]
 * ("<name>.bias", default zeros; none when bias is 0).
 * fully_connected: flattens x to [N, in] first, then linear, then act. */
TYTO_API tyto_tensor *tyto_nn_linear(tyto_nn *nn, const char *name,
                                     tyto_tensor *x, int64_t units, int bias,
                                     tyto_init weight_init);
TYTO_API tyto_tensor *tyto_nn_fully_connected(tyto_nn *nn, const char *name,
                                              tyto_tensor *x, int64_t units,
                                              tyto_nn_activation act,
                                              tyto_init weight_init);

typedef enum tyto_nn_padding {
  TYTO_NN_VALID = 0, /* no padding */
  /* out = ceil(in / stride); the padding is split evenly, any odd extra
   * element after (TensorFlow's rule, as Owl) */
  TYTO_NN_SAME = 1,
  TYTO_NN_EXPLICIT = 2 /* the `pad` field, on both sides */
} tyto_nn_padding;

/* Convolution layers; index 0 is the height (2-d) or the length (1-d). A
 * zero field takes its default: stride 1, dilation 1, groups 1. Weight
 * "<name>.weight" (default Glorot uniform), bias "<name>.bias" (zeros)
 * unless no_bias. */
typedef struct tyto_nn_conv {
  int64_t filters;     /* output channels */
  int64_t kernel[2];   /* 1-d: kernel[0] */
  int64_t stride[2];   /* 0: 1 */
  int64_t dilation[2]; /* 0: 1 */
  int64_t groups;      /* 0: 1 */
  tyto_nn_padding padding;
  int64_t pad[2];        /* TYTO_NN_EXPLICIT only */
  int64_t output_pad[2]; /* transposed only: extra rows/cols at the end */
  int no_bias;           /* non-zero: no bias */
  tyto_init weight_init; /* default Glorot uniform */
} tyto_nn_conv;

/* x [N, C, H, W] -> [N, filters, OH, OW]. */
TYTO_API tyto_tensor *tyto_nn_conv2d(tyto_nn *nn, const char *name,
                                     tyto_tensor *x, const tyto_nn_conv *c);
/* x [N, C, L] -> [N, filters, OL] (kernel[0], stride[0], ...). */
TYTO_API tyto_tensor *tyto_nn_conv1d(tyto_nn *nn, const char *name,
                                     tyto_tensor *x, const tyto_nn_conv *c);
/* The adjoint of conv2d (a "deconvolution"): x [N, C, H, W] -> [N,
 * filters, OH, OW] with OH = (H - 1) stride - 2 pad + dilation (KH - 1) +
 * output_pad + 1 and 0 <= output_pad < stride (VALID: pad 0; SAME: OH = H
 * stride, the adjoint of the SAME convolution, output_pad 0). */
TYTO_API tyto_tensor *tyto_nn_conv2d_transpose(tyto_nn *nn, const char *name,
                                               tyto_tensor *x,
                                               const tyto_nn_conv *c);

/* Pooling windows: kernel (index 0 height / length), stride (0: the
 * kernel), padding VALID, SAME or EXPLICIT (pad, at most half the
 * kernel). Max pooling ignores padding; average pooling divides by the
 * elements inside the input. */
typedef struct tyto_nn_pool {
  int64_t kernel[2];
  int64_t stride[2];
  tyto_nn_padding padding;
  int64_t pad[2];
} tyto_nn_pool;

TYTO_API tyto_tensor *tyto_nn_max_pool2d(tyto_nn *nn, tyto_tensor *x,
                                         const tyto_nn_pool *p);
TYTO_API tyto_tensor *tyto_nn_avg_pool2d(tyto_nn *nn, tyto_tensor *x,
                                         const tyto_nn_pool *p);
TYTO_API tyto_tensor *tyto_nn_max_pool1d(tyto_nn *nn, tyto_tensor *x,
                                         const tyto_nn_pool *p);
TYTO_API tyto_tensor *tyto_nn_avg_pool1d(tyto_nn *nn, tyto_tensor *x,
                                         const tyto_nn_pool *p);
/* [N, C, ...] -> [N, C]: the max / mean over every axis past the second. */
TYTO_API tyto_tensor *tyto_nn_global_max_pool(tyto_nn *nn, tyto_tensor *x);
TYTO_API tyto_tensor *tyto_nn_global_avg_pool(tyto_nn *nn, tyto_tensor *x);

/* Inverted dropout: in TRAIN mode each element is kept with probability
 * 1 - rate and scaled by 1 / (1 - rate); a fresh mask at every run (the
 * network's step counter, state "nn.step", advances once per run), each
 * layer its own stream from the network's seed. EVAL and rate 0: x
 * itself. rate in [0, 1). */
TYTO_API tyto_tensor *tyto_nn_dropout(tyto_nn *nn, tyto_tensor *x, double rate);

/* Batch normalisation over axis 1 (features of [N, F], channels of [N, C,
 * ...]): y = gamma (x - mean) / sqrt(var + eps) + beta. TRAIN: the batch's
 * mean and biased variance, and running statistics updated as r' = (1 -
 * momentum) r + momentum s with the unbiased batch variance (PyTorch's
 * rule; TRAIN needs more than one value per channel); EVAL: the running
 * statistics. With tyto_nn_options.sync_batch_norm, TRAIN's statistics
 * are the global batch's over the replicas of a data-parallel step (two
 * exchanges forward, two backward), and it is the global batch that must
 * hold more than one value per channel: a replica's shard may hold one or
 * none, which is not checked here (a global count of one makes the
 * running variance infinite or NaN). Parameters "<name>.gamma" (ones),
 * "<name>.beta" (zeros); state "<name>.running_mean" (zeros),
 * "<name>.running_var" (ones). momentum 0: 0.1; eps 0: 1e-5. */
TYTO_API tyto_tensor *tyto_nn_batch_norm(tyto_nn *nn, const char *name,
                                         tyto_tensor *x, double momentum,
                                         double eps);

/* ids (any shape; i32 or i64, or whole numbers in the nn's dtype, in
 * [0, vocab)) -> ids.shape + [dim]; table "<name>.weight" [vocab, dim]
 * (default N(0, 1)). */
TYTO_API tyto_tensor *tyto_nn_embedding(tyto_nn *nn, const char *name,
                                        tyto_tensor *ids, int64_t vocab,
                                        int64_t dim, tyto_init init);

/* [N, ...] -> [N, product of the rest]. */
TYTO_API tyto_tensor *tyto_nn_flatten(tyto_tensor *x);
/* [N, ...] -> [N, shape...]: shape excludes the batch axis; one entry may
 * be -1 (inferred). */
TYTO_API tyto_tensor *tyto_nn_reshape(tyto_tensor *x, int rank,
                                      const int64_t *shape);
/* Along axis (negative counts from the end). */
TYTO_API tyto_tensor *tyto_nn_concat(size_t n, tyto_tensor *const *xs,
                                     int axis);
/* The sum of n tensors of one shape. */
TYTO_API tyto_tensor *tyto_nn_add(size_t n, tyto_tensor *const *xs);

/* A user function on tensors as a layer: fn(x, user) must build its result
 * with ops on x's graph (it may return x's graph's error tensor). */
typedef tyto_tensor *(*tyto_nn_lambda_fn)(tyto_tensor *x, void *user);
TYTO_API tyto_tensor *tyto_nn_lambda(tyto_nn *nn, tyto_tensor *x,
                                     tyto_nn_lambda_fn fn, void *user);

/* Recurrent layers over x [N, T, F], unrolled over the T steps from zero
 * states; returns [N, T, units] (return_sequences) or the last hidden
 * state [N, units]. Weights "<name>.wx" [F, G*units], "<name>.wh" [units,
 * G*units] (Glorot uniform), "<name>.b" [G*units] (zeros; the LSTM's
 * forget-gate quarter ones), with G = 1 (RNN), 4 (LSTM: gates i, f, g, o)
 * or 3 (GRU: gates r, z, n).
 *   RNN:  h = tanh(x Wx + h Wh + b)
 *   LSTM: c = f c + i g, h = o tanh(c) (Gers et al. 2000)
 *   GRU:  n = tanh(x Wxn + bn + r (h Whn)), h = (1 - z) n + z h
 *         (Cho et al. 2014, PyTorch's arrangement with one bias) */
TYTO_API tyto_tensor *tyto_nn_rnn(tyto_nn *nn, const char *name, tyto_tensor *x,
                                  int64_t units, int return_sequences);
TYTO_API tyto_tensor *tyto_nn_lstm(tyto_nn *nn, const char *name,
                                   tyto_tensor *x, int64_t units,
                                   int return_sequences);
TYTO_API tyto_tensor *tyto_nn_gru(tyto_nn *nn, const char *name, tyto_tensor *x,
                                  int64_t units, int return_sequences);

/* ---------------------------------------------------------------------- */
/* Losses and metrics                                                      */

/* Each returns a rank-0 tensor. labels have the shape of logits / pred. */

/* Softmax cross-entropy against label rows (one-hot or probabilities):
 * -sum(labels * log_softmax(logits, -1)) / sum(labels), the mean over the
 * labelled rows (an all-zero row, such as the padding of a partial batch,
 * counts for nothing; all-zero labels give 0, with a zero gradient: a
 * data-parallel shard of padding only). log_softmax subtracts each
 * row's max first, so it holds for any finite logits; its gradient is softmax -
 * labels (scaled), which the fusion pass compiles to one kernel. */
TYTO_API tyto_tensor *tyto_loss_softmax_cross_entropy(tyto_tensor *logits,
                                                      tyto_tensor *labels);
/* mean((pred - target)^2) and mean(|pred - target|) over every element. */
TYTO_API tyto_tensor *tyto_loss_mse(tyto_tensor *pred, tyto_tensor *target);
TYTO_API tyto_tensor *tyto_loss_l1(tyto_tensor *pred, tyto_tensor *target);
/* Multi-class hinge (Crammer-Singer form of PyTorch's MultiMarginLoss,
 * margin 1) with one-hot labels [N, C]: the mean over rows of
 * sum_{j != y} max(0, 1 - x_y + x_j) / C. */
TYTO_API tyto_tensor *tyto_loss_hinge(tyto_tensor *logits, tyto_tensor *labels);
/* Penalties on n tensors: l1 * sum |w| + l2 * sum w^2 (elastic net; either
 * coefficient may be 0). */
TYTO_API tyto_tensor *tyto_loss_regularization(size_t n, tyto_tensor *const *ws,
                                               double l1, double l2);
/* Rows whose highest logit is their label's: sum over rows of the label
 * value at argmax(logits) (rank 0; padding rows count 0). */
TYTO_API tyto_tensor *tyto_nn_count_correct(tyto_tensor *logits,
                                            tyto_tensor *labels);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_NN_H */
