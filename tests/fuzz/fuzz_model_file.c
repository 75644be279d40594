/* Fuzz target: tyto-train's model files (tools/train/model_file.c), parsed
 * and then built into a graph, as tyto-train does before anything runs:
 * every layer's shape arithmetic sees what the parser let through. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/tyto.h>

#include "train/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char err[1024];
  mf_model *m = NULL;
  if (mf_parse(text, "fuzz.model", &m, err, sizeof err) == 0) {
    (void)mf_canonical(m);
    double l1, l2;
    mf_regularization(m, &l1, &l2);
    tyto_graph *g = tyto_graph_new();
    tyto_nn_options no;
    tyto_nn_options_init(&no);
    tyto_nn *nn = NULL;
    if (g && tyto_nn_new(g, &no, &nn) == TYTO_OK) {
      int rank = 1 + mf_input_rank(m);
      int64_t shape[TYTO_MAX_RANK];
      shape[0] = 2;
      memcpy(shape + 1, mf_input_shape(m), (size_t)(rank - 1) * sizeof *shape);
      tyto_tensor *x = tyto_nn_input(nn, rank, shape, "x");
      if (x)
        (void)mf_build(m, nn, x, err, sizeof err);
      tyto_nn_free(nn);
    }
    tyto_graph_free(g);
    mf_free(m);
  }
  free(text);
  return 0;
}
