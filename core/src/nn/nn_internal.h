/*
 * The network's internals, shared by the layer files: the registry of
 * parameters and state (with the initialiser each starts from), the state
 * updates, and the checks and messages every layer uses.
 */
#ifndef TYTO_NN_INTERNAL_H
#define TYTO_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/nn.h>
#include <tyto/ops.h>

#include "../runtime/nameidx.h"
#include "../graph/node.h"
#include "../graph/shape.h"

/* An initialiser only the layers use: the LSTM bias, zeros but for ones in
 * its second quarter (the forget gate; Gers et al. 2000). */
#define NN_INIT_LSTM_BIAS ((tyto_init_kind)100)

/* A parameter or state tensor of the network and how it starts. */
typedef struct nn_entry {
  tyto_tensor *t;
  tyto_init init; /* resolved: never TYTO_INIT_DEFAULT */
  int64_t fan_in, fan_out;
  int state; /* 1: layer state, not trained */
} nn_entry;

/* A growing array of tensors. */
typedef struct nn_list {
  tyto_tensor **v;
  size_t n, cap;
} nn_list;

struct tyto_nn {
  tyto_graph *g;
  tyto_dtype dtype;
  uint64_t seed;
  tyto_nn_mode mode;
  int sync_batch_norm; /* tyto_nn_options.sync_batch_norm */
  nn_entry *entries;   /* parameters and state, in creation order */
  size_t n_entries, cap_entries;
  nameidx by_name;     /* entries by tensor name: layers are built in time
                        * linear in their number */
  nameidx upd_by_name; /* upd_params by parameter name */
  nn_list params, weights, states;
  nn_list upd_params, upd_values;
  tyto_tensor *step;   /* "nn.step", once a TRAIN-mode dropout exists */
  uint64_t n_dropouts; /* TRAIN-mode dropouts built: each one's seed */
};

/* Fails nn's graph with "<kind> '<name>': <message>" (or "<kind>: ..."
 * when name is NULL) and returns the error tensor. */
tyto_tensor *nn_fail(tyto_nn *nn, const char *kind, const char *name,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* nn_check's flags: the layer needs a name; x may be integer indices
 * (an embedding's ids) rather than values of nn's dtype. */
enum { NN_NAMED = 1, NN_IDS = 2 };

/* Checks a layer's network, name (with NN_NAMED in flags) and input x: x
 * of nn's graph and dtype (or, with NN_IDS, i32 or i64) with a rank in
 * [min_rank, max_rank]. 0 when fine; otherwise -1 with *err the tensor to
 * return (NULL without a graph). */
int nn_check(tyto_nn *nn, const char *kind, const char *name, int flags,
             tyto_tensor *x, int min_rank, int max_rank, tyto_tensor **err);

/* The parameter (state 0) or state tensor (state 1) "<layer>.<what>" of
 * the given shape: an existing one of that name is reused (a different
 * shape fails), otherwise one is created to start from init (DEFAULT
 * takes def, with init's gain when set). Returns the error tensor on
 * failure. */
tyto_tensor *nn_param(tyto_nn *nn, const char *kind, const char *layer,
                      const char *what, int rank, const int64_t *shape,
                      tyto_init init, tyto_init def, int state);

/* An initialiser of one kind with no parameters. */
static inline tyto_init nn_init_of(tyto_init_kind kind) {
  tyto_init i = {kind, 0, 0, 0};
  return i;
}

/* nn_check for an exact rank, naming the layout in the message ("x must
 * have rank 4 (NCHW), got [64,784]"). */
int nn_check_layout(tyto_nn *nn, const char *kind, const char *name,
                    int need_name, tyto_tensor *x, int rank, const char *layout,
                    tyto_tensor **err);

/* Checks a caller's initialiser: 0, or -1 after nn_fail(). */
int nn_init_check(tyto_nn *nn, const char *kind, const char *name,
                  const tyto_init *init);

/* Registers the update param <- value (a later update of the same
 * parameter replaces the earlier one). 0, or -1 on out of memory. */
int nn_add_update(tyto_nn *nn, tyto_tensor *param, tyto_tensor *value);

/* The step counter "nn.step" with its update, created on first use; the
 * error tensor on failure. */
tyto_tensor *nn_step(tyto_nn *nn);

/* The n initial values of entry e into out (init.c). */
void nn_init_fill(const nn_entry *e, uint64_t seed, double *out, int64_t n);

/* x's shape as "[2,3]" into buf (SHAPE_STR bytes). */
static inline char *nn_shape(char *buf, const tyto_tensor *x) {
  return tensor_shape_str(buf, x);
}

/* 64-bit mixing (splitmix64's finaliser). */
static inline uint64_t nn_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Per-axis SAME padding (TensorFlow's rule): out = ceil(in / stride),
 * total = max((out - 1) stride + dilation (k - 1) + 1 - in, 0), split
 * evenly with any odd element after. */
static inline void nn_same_pad(int64_t in, int64_t k, int64_t stride,
                               int64_t dilation, int64_t *before,
                               int64_t *after) {
  int64_t out = (in + stride - 1) / stride;
  int64_t total = (out - 1) * stride + dilation * (k - 1) + 1 - in;
  if (total < 0)
    total = 0;
  *before = total / 2;
  *after = total - *before;
}

#endif
