/*
 * bench/compile_scaling: how compile time grows with depth (issue 14,
 * section 2). Builds the training step of a deep MLP through the public API
 * -- n linear layers of width 16 with ReLU, softmax cross-entropy, the
 * gradients of every parameter (tyto_grads), Adam's update
 * (tyto_optim_build) -- at n, 4n and 16n layers, compiles it with the
 * updates, and prints each phase's time (best of R runs), then the ratios
 * t(4n)/t(n) and t(16n)/t(n): near 4 and 16 where a phase is linear in
 * depth, near 16 and 256 where it is quadratic. Then a line starting with
 * "BENCH ".
 *
 *   TYTO_PLUGIN_PATH=build/plugins/cpu/.libs TYTO_DEVICES=cpu \
 *     build/bench/compile_scaling [--layers N] [--runs R]
 *
 * N is 500 and R 3 by default; each size is built and compiled R times
 * and each phase keeps its best time.
 *
 * Not a test: nothing here fails on timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/tyto.h>

enum { WIDTH = 16, BATCH = 8, CLASSES = 10, N_SIZES = 3 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The phases timed, in the order printed. */
enum {
  PH_BUILD,   /* forward graph and loss */
  PH_AD,      /* tyto_grads */
  PH_OPTIM,   /* tyto_optim_build */
  PH_PASSES,  /* tyto_program_compile: the passes */
  PH_PREPARE, /* lowering and preparing kernels */
  PH_PLAN,    /* memory plan (and its verification in debug builds) */
  PH_ALLOC,   /* device memory */
  PH_REST,    /* the rest of tyto_program_compile */
  PH_COMPILE, /* tyto_program_compile, all of it */
  PH_WHOLE,   /* build to compiled program */
  PH_COUNT
};

static const char *const phase_name[PH_COUNT] = {
    "build forward",        "gradients (AD)",
    "Adam update",          "passes",
    "lower + prepare",      "memory plan",
    "allocate memory",      "rest of compile",
    "tyto_program_compile", "whole (build..compiled)"};
static const char *const phase_key[PH_COUNT] = {
    "build", "ad",    "optim", "passes",  "prepare",
    "plan",  "alloc", "rest",  "compile", "whole"};

typedef struct result {
  int layers;
  size_t nodes_built, nodes_after, kernels;
  uint64_t planned_bytes, lower_bound_bytes;
  double t[PH_COUNT]; /* best of the runs */
} result;

static int fail(const char *what) {
  fprintf(stderr, "compile_scaling: %s: %s\n", what, tyto_errmsg());
  return -1;
}

/* One build and compile of an MLP of `layers` layers; phases into t. */
static int run_once(tyto_context *ctx, int layers, result *res, double *t) {
  int rc = -1;
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  tyto_optim *opt = NULL;
  tyto_program *p = NULL;
  tyto_tensor **grads = NULL;
  if (!g)
    return fail("graph");
  double t0 = now();
  if (tyto_nn_new(g, NULL, &nn) != TYTO_OK) {
    fail("nn");
    goto done;
  }
  tyto_tensor *x = tyto_nn_input(nn, 2, (const int64_t[]){BATCH, WIDTH}, "x");
  tyto_tensor *labels =
      tyto_nn_input(nn, 2, (const int64_t[]){BATCH, CLASSES}, "labels");
  tyto_tensor *h = x;
  tyto_init init = {TYTO_INIT_DEFAULT, 0, 0, 0};
  char name[32];
  for (int i = 0; i < layers; i++) {
    snprintf(name, sizeof name, "l%d", i);
    h = tyto_nn_activate(tyto_nn_linear(nn, name, h, WIDTH, 1, init),
                         TYTO_ACT_RELU, 0);
  }
  tyto_tensor *logits = tyto_nn_linear(nn, "out", h, CLASSES, 1, init);
  tyto_tensor *loss = tyto_loss_softmax_cross_entropy(logits, labels);
  double t1 = now();
  size_t np = tyto_nn_parameter_count(nn);
  tyto_tensor *const *params = tyto_nn_parameters(nn);
  if (!(grads = calloc(np, sizeof *grads))) {
    fprintf(stderr, "compile_scaling: out of memory\n");
    goto done;
  }
  tyto_grads(loss, np, params, grads);
  if (tyto_graph_status(g) != TYTO_OK) {
    fprintf(stderr, "compile_scaling: graph: %s\n",
            tyto_graph_error_message(g));
    goto done;
  }
  double t2 = now();
  tyto_optim_options oo;
  tyto_optim_options_init(&oo, TYTO_OPTIM_ADAM);
  if (tyto_optim_build(&oo, np, params, grads, &opt) != TYTO_OK) {
    fail("optimiser");
    goto done;
  }
  double t3 = now();
  size_t nu = tyto_optim_update_count(opt);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = nu;
  po.update_params = tyto_optim_update_params(opt);
  po.update_values = tyto_optim_update_values(opt);
  if (tyto_program_compile(ctx, g, 1, &loss, &po, &p) != TYTO_OK) {
    fail("compile");
    goto done;
  }
  double t4 = now();
  tyto_program_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (tyto_program_stats_get(p, &st) != TYTO_OK) {
    fail("stats");
    goto done;
  }
  t[PH_BUILD] = t1 - t0;
  t[PH_AD] = t2 - t1;
  t[PH_OPTIM] = t3 - t2;
  t[PH_PASSES] = st.passes_seconds;
  t[PH_PREPARE] = st.prepare_seconds;
  t[PH_PLAN] = st.plan_seconds;
  t[PH_ALLOC] = st.alloc_seconds;
  t[PH_COMPILE] = t4 - t3;
  t[PH_REST] = t[PH_COMPILE] - st.passes_seconds - st.prepare_seconds -
               st.plan_seconds - st.alloc_seconds;
  t[PH_WHOLE] = t4 - t0;
  res->nodes_built = tyto_graph_size(g);
  res->nodes_after = st.nodes_after;
  res->kernels = st.kernels;
  res->planned_bytes = st.planned_bytes;
  res->lower_bound_bytes = st.lower_bound_bytes;
  rc = 0;
done:
  free(grads);
  tyto_program_free(p);
  tyto_optim_free(opt);
  tyto_nn_free(nn);
  tyto_graph_free(g);
  return rc;
}

int main(int argc, char **argv) {
  int n = 500, runs = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc &&
        (n = atoi(argv[i + 1])) > 0) {
      i++;
      continue;
    }
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc &&
        (runs = atoi(argv[i + 1])) > 0) {
      i++;
      continue;
    }
    fprintf(stderr, "usage: compile_scaling [--layers N] [--runs R]\n"
                    "  builds and compiles MLPs of N, 4N and 16N layers "
                    "(default N 500, R 3)\n");
    return 2;
  }
  tyto_context *ctx = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, "compile_scaling: %s\n", tyto_errmsg());
    return 1;
  }
  const char *device = tyto_device_get_info(tyto_context_device(ctx, 0))->id;
  result res[N_SIZES];
  for (int s = 0; s < N_SIZES; s++) {
    res[s].layers = n << (2 * s);
    for (int k = 0; k < PH_COUNT; k++)
      res[s].t[k] = 1e300;
    for (int r = 0; r < runs; r++) {
      double t[PH_COUNT];
      if (run_once(ctx, res[s].layers, &res[s], t) != 0) {
        tyto_context_free(ctx);
        return 1;
      }
      for (int k = 0; k < PH_COUNT; k++)
        if (t[k] < res[s].t[k])
          res[s].t[k] = t[k];
    }
    fprintf(stderr, "compile_scaling: %d layers: %.3f s\n", res[s].layers,
            res[s].t[PH_WHOLE]);
  }

  printf("Deep MLP training step: width %d, batch %d, ReLU, softmax "
         "cross-entropy, Adam; device %s; best of %d\n\n",
         WIDTH, BATCH, device, runs);
  printf("%-26s", "layers");
  for (int s = 0; s < N_SIZES; s++)
    printf(" %12d", res[s].layers);
  printf(" %9s %9s\n", "4n/n", "16n/n");
  printf("%-26s", "nodes built");
  for (int s = 0; s < N_SIZES; s++)
    printf(" %12zu", res[s].nodes_built);
  printf("\n%-26s", "nodes compiled");
  for (int s = 0; s < N_SIZES; s++)
    printf(" %12zu", res[s].nodes_after);
  printf("\n%-26s", "kernels per run");
  for (int s = 0; s < N_SIZES; s++)
    printf(" %12zu", res[s].kernels);
  printf("\n%-26s", "planned / lower bound");
  for (int s = 0; s < N_SIZES; s++)
    printf(" %12.4f",
           res[s].lower_bound_bytes
               ? (double)res[s].planned_bytes / (double)res[s].lower_bound_bytes
               : 0.0);
  printf("\n\n%-26s %12s %12s %12s\n", "seconds", "", "", "");
  for (int k = 0; k < PH_COUNT; k++) {
    printf("%-26s", phase_name[k]);
    for (int s = 0; s < N_SIZES; s++)
      printf(" %12.4f", res[s].t[k]);
    double t0 = res[0].t[k];
    if (t0 > 1e-4)
      printf(" %9.2f %9.2f\n", res[1].t[k] / t0, res[2].t[k] / t0);
    else
      printf(" %9s %9s\n", "-", "-");
  }
  printf("\nlinear in depth: ratios near 4 and 16; quadratic: 16 and 256\n");

  char json[4096];
  size_t jn = (size_t)snprintf(json, sizeof json,
                               "BENCH {\"bench\":\"compile_scaling\","
                               "\"device\":\"%s\",\"width\":%d,\"batch\":%d,"
                               "\"runs\":%d,\"sizes\":[",
                               device, WIDTH, BATCH, runs);
  for (int s = 0; s < N_SIZES && jn < sizeof json; s++) {
    jn += (size_t)snprintf(json + jn, sizeof json - jn,
                           "%s{\"layers\":%d,\"nodes_built\":%zu,"
                           "\"nodes_after\":%zu,\"planned_bytes\":%llu,"
                           "\"lower_bound_bytes\":%llu,\"seconds\":{",
                           s ? "," : "", res[s].layers, res[s].nodes_built,
                           res[s].nodes_after,
                           (unsigned long long)res[s].planned_bytes,
                           (unsigned long long)res[s].lower_bound_bytes);
    for (int k = 0; k < PH_COUNT && jn < sizeof json; k++)
      jn += (size_t)snprintf(json + jn, sizeof json - jn, "%s\"%s\":%.6g",
                             k ? "," : "", phase_key[k], res[s].t[k]);
    if (jn < sizeof json)
      jn += (size_t)snprintf(json + jn, sizeof json - jn, "}}");
  }
  if (jn < sizeof json)
    jn += (size_t)snprintf(json + jn, sizeof json - jn,
                           "],\"ratio_4n\":%.4g,\"ratio_16n\":%.4g}",
                           res[1].t[PH_WHOLE] / res[0].t[PH_WHOLE],
                           res[2].t[PH_WHOLE] / res[0].t[PH_WHOLE]);
  printf("%s\n", json);
  tyto_context_free(ctx);
  return 0;
}
