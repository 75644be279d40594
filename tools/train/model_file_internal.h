/*
 * The parsed form of a model file, shared by the parser (model_file.c) and
 * the builder (model_build.c). Internal to tools/train/.
 */
#ifndef TYTO_TOOLS_MODEL_FILE_INTERNAL_H
#define TYTO_TOOLS_MODEL_FILE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model_file.h"

enum {
  MF_MAX_KEYS = 16,
  MF_MAX_FROM = 16,
  MF_NAME = 64,
  MF_VALUE = 160,
  MF_MAX_LINE = 4096
};

typedef enum key_type {
  T_COUNT,  /* integer >= 1 */
  T_INDEX,  /* integer >= 0 */
  T_AXIS,   /* any integer */
  T_PAIR,   /* N or NxM, each >= 1 */
  T_PAIR0,  /* N or NxM, each >= 0 */
  T_DIMS,   /* AxBxC..., each >= 1 (input shapes) */
  T_SDIMS,  /* AxBxC..., each >= 1 or one -1 (reshape) */
  T_RATE,   /* real in [0, 1) */
  T_REAL,   /* finite real */
  T_NONNEG, /* finite real >= 0 */
  T_BOOL,   /* true / false */
  T_PAD,    /* valid / same / N / NxM */
  T_ACT,    /* activation name */
  T_INIT,   /* initialiser name */
  T_LOSS,   /* loss name */
  T_NAME,   /* a layer name */
  T_FROM    /* names, comma-separated */
} key_type;

typedef struct key_spec {
  const char *key;
  key_type type;
} key_spec;

typedef enum layer_kind {
  L_INPUT,
  L_LINEAR,
  L_FC,
  L_CONV1D,
  L_CONV2D,
  L_CONV2D_T,
  L_MAX_POOL1D,
  L_MAX_POOL2D,
  L_AVG_POOL1D,
  L_AVG_POOL2D,
  L_GLOBAL_MAX,
  L_GLOBAL_AVG,
  L_DROPOUT,
  L_BATCH_NORM,
  L_EMBEDDING,
  L_FLATTEN,
  L_RESHAPE,
  L_CONCAT,
  L_ADD,
  L_ACT, /* relu, tanh, ...: the type is the activation */
  L_RNN,
  L_LSTM,
  L_GRU,
  L_LOSS,
  L_REGULARIZE
} layer_kind;

typedef struct layer_spec {
  const char *type;
  layer_kind kind;
  const char *required; /* space-separated keys that must be given */
  key_spec keys[MF_MAX_KEYS];
} layer_spec;

typedef struct mf_value {
  const key_spec *spec;
  int col;
  char text[MF_VALUE];
  /* Decoded: */
  int64_t i[TYTO_MAX_RANK];
  int n_i;
  double r;
  int word; /* enum value (activation, init, loss, padding: -1 same, -2
             * valid), or the boolean */
} mf_value;

typedef struct mf_layer {
  const layer_spec *spec;
  int line;
  char name[MF_NAME];
  int n_values;
  mf_value *values; /* n_values of them, malloc'd: a layer costs what it
                     * holds, not MF_MAX_KEYS values (a million one-word
                     * lines must not need gigabytes) */
  int n_from;
  int from[MF_MAX_FROM]; /* layer indices */
} mf_layer;

/* Layer names for lookups (uthash), so that parsing stays linear in the
 * number of layers a file holds. */
struct mf_name;
enum { MF_MAX_TYPES = 64 };

struct mf_model {
  size_t n_layers, cap;
  mf_layer *layers;
  struct mf_name *names;             /* name -> index into layers */
  unsigned type_count[MF_MAX_TYPES]; /* layers of each type so far */
  char *file;
  char *canonical;
  int input; /* index of the input layer */
  mf_loss loss;
  double l1, l2;
};

/* Writes "file:line:col: message" into err (n bytes); returns -1. */
int mf_fail(char *err, size_t n, const char *file, int line, int col,
            const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Layer l's value of key, or NULL when not given. */
const mf_value *mf_get(const mf_layer *l, const char *key);

#endif /* TYTO_TOOLS_MODEL_FILE_INTERNAL_H */
