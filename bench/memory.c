/*
 * bench/memory: what the memory planner saves on whole training steps
 * (tools/models.h: the MLP, Owl's seed CNN and the lazy_lstm LSTM, each
 * with gradients and Adam). For each model, compiled with every pass and
 * then with none, it prints the device memory of the program's tensors:
 * naive (every tensor its own buffer), planned (pinned buffers plus the
 * arena), the live-set lower bound of the order the planner kept, and the
 * ratios; then a line starting with "BENCH ". The planner keeps the best of
 * the orders it tries; the API does not force one, so only the kept order
 * is shown.
 *
 *   TYTO_PLUGIN_PATH=build/plugins/cpu/.libs TYTO_DEVICES=cpu \
 *     build/bench/memory
 *
 * Not a test: nothing here fails on a number.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include <tyto/tyto.h>

#include "models.h"

/* Owl's computation-graph chapter: its CNN training step, 3685 MB without
 * reuse, 895 MB with it. */
#define OWL_NAIVE_MB 3685.0
#define OWL_PLANNED_MB 895.0
/* The goals for the CNN training step. */
#define GOAL_OVER_LOWER 1.05
#define GOAL_SAVING 4.0

static double mb(uint64_t bytes) {
  return (double)bytes / 1e6;
}

static double ratio(uint64_t a, uint64_t b) {
  return b ? (double)a / (double)b : 0.0;
}

/* Compiles model m with the passes in passes_off turned off into *st. */
static int measure(tyto_context *ctx, model_graph *m, unsigned passes_off,
                   tyto_program_stats *st, char *order, size_t n) {
  tyto_program_options opts;
  tyto_program_options_init(&opts);
  opts.passes_off = passes_off;
  model_options(m, &opts);
  tyto_program *p = NULL;
  tyto_status s =
      tyto_program_compile(ctx, m->g, m->n_outputs, m->outputs, &opts, &p);
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  if (s == TYTO_OK)
    s = tyto_program_stats_get(p, st);
  if (s != TYTO_OK) {
    fprintf(stderr, "memory: model %s: %s\n", m->name, tyto_errmsg());
    tyto_program_free(p);
    return -1;
  }
  snprintf(order, n, "%s", st->order_name ? st->order_name : "-");
  st->passes = NULL; /* owned by p */
  st->order_name = NULL;
  tyto_program_free(p);
  return 0;
}

int main(void) {
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "memory: %s\n", tyto_errmsg());
    return 1;
  }
  const char *device = tyto_device_get_info(tyto_context_device(ctx, 0))->id;
  printf("Training steps (forward, gradients, Adam) on %s; MB = 10^6 bytes\n\n",
         device);
  printf("%-5s %5s %-6s %7s %10s %10s %10s %10s %10s %-7s %8s %8s\n", "model",
         "batch", "passes", "nodes", "naive MB", "planned", "lower bnd",
         "arena", "pinned", "order", "pl/lb", "nv/pl");
  char json[4096];
  int jn = snprintf(json, sizeof json,
                    "BENCH {\"bench\":\"memory\",\"device\":\"%s\"", device);
  int rc = 0;
  double cnn_over = 0, cnn_saving = 0;
  for (size_t k = 0; model_names[k] && rc == 0; k++) {
    model_graph m;
    char err[1024];
    if (model_build(model_names[k], 0, &m, err, sizeof err) != 0) {
      fprintf(stderr, "memory: %s\n", err);
      rc = 1;
      break;
    }
    jn += snprintf(json + jn, sizeof json - (size_t)jn, ",\"%s\":{\"batch\":%d",
                   m.name, m.batch);
    static const struct {
      const char *label;
      unsigned off;
    } configs[] = {{"all", 0}, {"none", TYTO_PASS_ALL}};
    for (size_t c = 0; c < 2; c++) {
      tyto_program_stats st;
      char order[16];
      if (measure(ctx, &m, configs[c].off, &st, order, sizeof order) != 0) {
        rc = 1;
        break;
      }
      double over = ratio(st.planned_bytes, st.lower_bound_bytes);
      double saving = ratio(st.naive_bytes, st.planned_bytes);
      printf("%-5s %5d %-6s %7zu %10.3f %10.3f %10.3f %10.3f %10.3f %-7s "
             "%8.3f %7.2fx\n",
             m.name, m.batch, configs[c].label, st.nodes_after,
             mb(st.naive_bytes), mb(st.planned_bytes), mb(st.lower_bound_bytes),
             mb(st.arena_bytes), mb(st.pinned_bytes), order, over, saving);
      jn += snprintf(
          json + jn, sizeof json - (size_t)jn,
          ",\"passes_%s\":{\"nodes\":%zu,\"naive_bytes\":%llu,"
          "\"planned_bytes\":%llu,\"lower_bound_bytes\":%llu,"
          "\"arena_bytes\":%llu,\"pinned_bytes\":%llu,\"order\":\"%s\","
          "\"planned_over_lower_bound\":%.4f,\"naive_over_planned\":%.4f}",
          configs[c].label, st.nodes_after, (unsigned long long)st.naive_bytes,
          (unsigned long long)st.planned_bytes,
          (unsigned long long)st.lower_bound_bytes,
          (unsigned long long)st.arena_bytes,
          (unsigned long long)st.pinned_bytes, order, over, saving);
      if (c == 0 && strcmp(m.name, "cnn") == 0) {
        cnn_over = over;
        cnn_saving = saving;
      }
    }
    jn += snprintf(json + jn, sizeof json - (size_t)jn, "}");
    model_free(&m);
  }
  if (rc == 0) {
    printf("\nOwl's CNN training step: %.0f MB naive, %.0f MB planned, "
           "%.1fx\n",
           OWL_NAIVE_MB, OWL_PLANNED_MB, OWL_NAIVE_MB / OWL_PLANNED_MB);
    printf("goal, CNN with every pass: planned <= %.2fx lower bound: %s "
           "(%.3f); naive >= %.0fx planned: %s (%.2fx)\n",
           GOAL_OVER_LOWER,
           cnn_over > 0 && cnn_over <= GOAL_OVER_LOWER ? "met" : "NOT met",
           cnn_over, GOAL_SAVING, cnn_saving >= GOAL_SAVING ? "met" : "NOT met",
           cnn_saving);
    printf("%s,\"owl_cnn\":{\"naive_mb\":%.0f,\"planned_mb\":%.0f}}\n", json,
           OWL_NAIVE_MB, OWL_PLANNED_MB);
  }
  tyto_context_free(ctx);
  return rc;
}
