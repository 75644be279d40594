/*
 * tyto-train's model files (docs/model-format.md): a small text format with
 * one layer per line, "type key=value ...", parsed in full before anything
 * is built so that every mistake is reported as file:line:column, and then
 * built into a tyto_nn. The presets (cnn, mlp, mlp-big) are model files
 * too. Internal to tools/.
 */
#ifndef TYTO_TOOLS_MODEL_FILE_H
#define TYTO_TOOLS_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/tyto.h>

typedef struct mf_model mf_model;

typedef enum mf_loss {
  MF_LOSS_CROSS_ENTROPY = 0, /* softmax cross-entropy (the default) */
  MF_LOSS_MSE,
  MF_LOSS_L1,
  MF_LOSS_HINGE
} mf_loss;

/* The text of preset `name` ("cnn", "mlp", "mlp-big"), or NULL. */
const char *mf_preset(const char *name);
/* "cnn, mlp, mlp-big" */
const char *mf_preset_list(void);

/* Parses `text` (NUL-terminated), naming it `file` in messages. Returns 0
 * and *out (free with mf_free), or -1 with "file:line:col: message" in
 * err. */
int mf_parse(const char *text, const char *file, mf_model **out, char *err,
             size_t n);
/* Reads and parses the file at path (messages as mf_parse, or "path:
 * <reason>" when it cannot be read). */
int mf_load(const char *path, mf_model **out, char *err, size_t n);
void mf_free(mf_model *m); /* NULL ok */

/* The canonical text of the model (what checkpoints store and compare):
 * the parsed lines with comments and spacing normalised. Owned by m. */
const char *mf_canonical(const mf_model *m);
/* The input item's shape (without the batch axis). */
int mf_input_rank(const mf_model *m);
const int64_t *mf_input_shape(const mf_model *m);
mf_loss mf_loss_kind(const mf_model *m);
void mf_regularization(const mf_model *m, double *l1, double *l2);

/* Builds the layers on x ([batch, input shape...]) in nn's current mode
 * and returns the network's output (the logits: a final softmax layer is
 * left out when the loss is cross-entropy, which applies its own). Returns
 * NULL with "file:line:1: <the graph's message>" in err when a layer fails
 * (a shape that does not fit, say). */
tyto_tensor *mf_build(const mf_model *m, tyto_nn *nn, tyto_tensor *x, char *err,
                      size_t n);

#endif /* TYTO_TOOLS_MODEL_FILE_H */
