/*
 * bench/ad_graph: how much graph the reverse transform builds, and how fast.
 * For the models of tools/models.h (the MLP 784-128-10, the seed CNN and
 * the LSTM after Owl's lazy_lstm, the batch each uses by default), it
 * builds the loss, then the gradients of every parameter in one reverse
 * sweep, and prints tensors and edges of each part, the ratio, and the
 * transform's time (best of 20). Prints a table, then a line starting with
 * "BENCH ".
 *
 *   build/bench/ad_graph
 *
 * Not a test: tests/ad/test_ad_api.c bounds the ratio without timing.
 */
#include <stdio.h>

#include <tyto/tyto.h>

#include "models.h"

int main(void) {
  char json[1024], err[256];
  int jn = snprintf(json, sizeof json, "BENCH {\"bench\":\"ad_graph\"");
  printf("%-5s %9s %7s %10s %7s %7s %10s\n", "model", "fwd nodes", "edges",
         "grad nodes", "edges", "ratio", "AD time");
  for (const char *const *name = model_names; *name; name++) {
    model_graph m;
    double best = 1e9;
    for (int rep = 0; rep < 20; rep++) {
      if (model_build(*name, 0, &m, err, sizeof err) != 0) {
        fprintf(stderr, "ad_graph: %s\n", err);
        return 1;
      }
      best = m.ad_seconds < best ? m.ad_seconds : best;
      if (rep < 19)
        model_free(&m);
    }
    double ratio = (double)m.ad_nodes / (double)m.forward_nodes;
    printf("%-5s %9zu %7zu %10zu %7zu %7.2f %8.1f us\n", m.name,
           m.forward_nodes, m.forward_edges, m.ad_nodes, m.ad_edges, ratio,
           best * 1e6);
    jn += snprintf(json + jn, sizeof json - (size_t)jn,
                   ",\"%s\":{\"forward_nodes\":%zu,\"gradient_nodes\":%zu,"
                   "\"ratio\":%.3f,\"ad_seconds\":%.3g}",
                   m.name, m.forward_nodes, m.ad_nodes, ratio, best);
    model_free(&m);
  }
  printf("%s}\n", json);
  return 0;
}
