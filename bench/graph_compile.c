/*
 * bench/graph_compile: how long it takes to turn the LSTM training step of
 * tools/models.h (Owl's lazy_lstm: embedding 40, LSTM 128 unrolled over
 * 100 steps, linear 512, linear 60, cross-entropy, gradients, Adam) into a
 * program: build the forward graph, differentiate it, add the update, run
 * the passes, plan the memory and prepare the kernels. Prints each phase
 * (best of N runs), the graph before and after the passes, and Owl's
 * published numbers for the same network beside them; then a line
 * starting with "BENCH ".
 *
 *   TYTO_PLUGIN_PATH=build/plugins/cpu/.libs TYTO_DEVICES=cpu \
 *     build/bench/graph_compile [--runs N]
 *
 * Not a test: nothing here fails on timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/tyto.h>

#include "models.h"

/* Owl's computation-graph chapter, lazy_lstm: graph size and the time to
 * compile (build and differentiate) and to optimise it. */
#define OWL_NODES 15105
#define OWL_COMPILE_MS 230.0
#define OWL_OPTIMISE_MS 210.0
/* The goal for the whole compile. */
#define GOAL_MS 40.0

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double min(double a, double b) {
  return a < b ? a : b;
}

/* Best (smallest) time of each phase over the runs, each phase on its own. */
typedef struct phases {
  double build, ad, update, passes, plan, prepare, alloc, compile, whole;
} phases;

int main(int argc, char **argv) {
  int runs = 10;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc &&
        (runs = atoi(argv[i + 1])) > 0) {
      i++;
      continue;
    }
    fprintf(stderr, "usage: graph_compile [--runs N]\n");
    return 2;
  }

  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "graph_compile: %s\n", tyto_errmsg());
    return 1;
  }
  const char *device = tyto_device_get_info(tyto_context_device(ctx, 0))->id;
  phases best = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
  model_graph m = {0};
  tyto_program_stats st;
  memset(&st, 0, sizeof st);
  size_t built = 0, built_edges = 0, n_params = 0;
  for (int r = 0; r < runs; r++) {
    char err[1024];
    if (model_build("lstm", 0, &m, err, sizeof err) != 0) {
      fprintf(stderr, "graph_compile: %s\n", err);
      tyto_context_free(ctx);
      return 1;
    }
    tyto_program *p = NULL;
    tyto_program_options opts;
    tyto_program_options_init(&opts);
    model_options(&m, &opts);
    double t0 = now();
    tyto_status s =
        tyto_program_compile(ctx, m.g, m.n_outputs, m.outputs, &opts, &p);
    double compile = now() - t0;
    st.struct_size = sizeof st;
    if (s == TYTO_OK)
      s = tyto_program_stats_get(p, &st);
    if (s != TYTO_OK) {
      fprintf(stderr, "graph_compile: %s\n", tyto_errmsg());
      tyto_program_free(p);
      model_free(&m);
      tyto_context_free(ctx);
      return 1;
    }
    best.build = min(best.build, m.forward_seconds);
    best.ad = min(best.ad, m.ad_seconds);
    best.update = min(best.update, m.update_seconds);
    best.passes = min(best.passes, st.passes_seconds);
    best.plan = min(best.plan, st.plan_seconds);
    best.prepare = min(best.prepare, st.prepare_seconds);
    best.alloc = min(best.alloc, st.alloc_seconds);
    best.compile = min(best.compile, compile);
    best.whole = min(best.whole, m.forward_seconds + m.ad_seconds +
                                     m.update_seconds + compile);
    built = m.forward_nodes + m.ad_nodes + m.update_nodes;
    built_edges = m.forward_edges + m.ad_edges + m.update_edges;
    n_params = m.n_params;
    /* st's pass list belongs to p: keep only the numbers past this point. */
    st.passes = NULL;
    st.order_name = NULL;
    tyto_program_free(p);
    if (r + 1 < runs)
      model_free(&m);
  }

  printf("LSTM training step: batch %d, 100 steps, %zu trained parameters, "
         "Adam; device %s; best of %d\n\n",
         m.batch, n_params, device, runs);
  printf("%-34s %12s %12s\n", "", "tyto", "Owl");
  printf("%-34s %12zu %12d\n", "nodes built (forward+AD+update)", built,
         OWL_NODES);
  printf("%-34s %12zu\n", "edges built", built_edges);
  printf("%-34s %12zu %12s\n", "nodes the outputs need", st.nodes_before, "");
  printf("%-34s %12zu\n", "edges the outputs need", st.edges_before);
  printf("%-34s %12zu\n", "nodes after the passes", st.nodes_after);
  printf("%-34s %12zu\n", "edges after the passes", st.edges_after);
  printf("%-34s %12zu\n", "fused nodes", st.fused_nodes);
  printf("%-34s %12zu\n", "kernels per run", st.kernels);
  printf("%-34s %9.3f ms\n", "build forward", best.build * 1e3);
  printf("%-34s %9.3f ms\n", "gradients (AD)", best.ad * 1e3);
  printf("%-34s %9.3f ms\n", "Adam update", best.update * 1e3);
  printf("%-34s %9.3f ms %9.0f ms\n", "build + AD + update (Owl: compile)",
         (best.build + best.ad + best.update) * 1e3, OWL_COMPILE_MS);
  printf("%-34s %9.3f ms %9.0f ms\n", "passes (Owl: optimise)",
         best.passes * 1e3, OWL_OPTIMISE_MS);
  printf("%-34s %9.3f ms\n", "memory plan", best.plan * 1e3);
  printf("%-34s %9.3f ms\n", "prepare kernels", best.prepare * 1e3);
  printf("%-34s %9.3f ms\n", "allocate memory", best.alloc * 1e3);
  printf("%-34s %9.3f ms\n", "tyto_program_compile, all of it",
         best.compile * 1e3);
  printf("%-34s %9.3f ms %9.0f ms\n", "whole compile", best.whole * 1e3,
         OWL_COMPILE_MS + OWL_OPTIMISE_MS);
  double owl = OWL_COMPILE_MS + OWL_OPTIMISE_MS, ms = best.whole * 1e3;
  printf("\ngoal: whole compile under %.0f ms: %s (%.1fx %s than Owl's %.0f "
         "ms)\n",
         GOAL_MS, ms < GOAL_MS ? "met" : "NOT met",
         ms < owl ? owl / ms : ms / owl, ms < owl ? "faster" : "slower", owl);
  printf("BENCH {\"bench\":\"graph_compile\",\"model\":\"lstm\","
         "\"device\":\"%s\",\"runs\":%d,\"nodes_built\":%zu,"
         "\"edges_built\":%zu,\"nodes_before\":%zu,\"edges_before\":%zu,"
         "\"nodes_after\":%zu,\"edges_after\":%zu,\"fused_nodes\":%zu,"
         "\"kernels\":%zu,\"seconds\":{\"build\":%.6g,\"ad\":%.6g,"
         "\"update\":%.6g,\"passes\":%.6g,\"plan\":%.6g,\"prepare\":%.6g,"
         "\"alloc\":%.6g,"
         "\"compile\":%.6g,\"whole\":%.6g},\"owl\":{\"nodes\":%d,"
         "\"compile_seconds\":%.3f,\"optimise_seconds\":%.3f},"
         "\"goal_seconds\":%.3f}\n",
         device, runs, built, built_edges, st.nodes_before, st.edges_before,
         st.nodes_after, st.edges_after, st.fused_nodes, st.kernels, best.build,
         best.ad, best.update, best.passes, best.plan, best.prepare, best.alloc,
         best.compile, best.whole, OWL_NODES, OWL_COMPILE_MS / 1e3,
         OWL_OPTIMISE_MS / 1e3, GOAL_MS / 1e3);
  model_free(&m);
  tyto_context_free(ctx);
  return 0;
}
