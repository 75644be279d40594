/*
 * The CUDA plugin through libtyto on a real GPU: graphs, running out of
 * device memory, and a kernel fault.
 *
 *   test_cuda_faults [PLUGIN_DIRS]
 *
 * PLUGIN_DIRS (':'-separated) defaults to this build tree's plugins; the
 * GPU check (tests/cuda/gpu-check.sh) passes the installed ones. Without a
 * CUDA device, and under valgrind, it exits 77 (skipped).
 *
 * 1. Graphs: y = relu(x * w + 1) with w <- w + 0.5 x, on cuda:0 and on
 *    cpu:0, run 6 times with new inputs: both give the same values (exact:
 *    small binary fractions), and the cuda:0 program replays a recorded
 *    graph from its second run on (graph_replays = 5, no graph_note).
 * 2. Out of memory: a 1 PiB buffer and a program with a 1 TiB input on
 *    cuda:0 fail with TYTO_ERR_OUT_OF_MEMORY and messages that name cuda:0;
 *    the device then still works.
 * 3. A kernel fault (TYTO_CUDA_FAULT_AT makes a chosen launch store to an
 *    unmapped address): the run fails with an error that names cuda:0,
 *    the ops queued and says the device is lost; a second run says the
 *    device is lost since that fault; cpu:0 in the same context keeps
 *    computing the right values; freeing everything does not hang or
 *    crash. Last, because CUDA keeps a faulted device broken for the rest
 *    of the process.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/tyto.h>

#define N 4096

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

typedef struct prog {
  tyto_graph *g;
  tyto_tensor *x, *w, *y;
  tyto_program *p;
} prog;

static tyto_status build(tyto_context *ctx, size_t device, int64_t n, prog *s) {
  s->g = tyto_graph_new();
  s->p = NULL;
  int64_t shp[1] = {n};
  s->x = tyto_input(s->g, TYTO_F32, 1, shp, "x");
  s->w = tyto_parameter(s->g, TYTO_F32, 1, shp, "w");
  s->y = tyto_relu(
      tyto_add(tyto_mul(s->x, s->w), tyto_scalar(s->g, TYTO_F32, 1.0)));
  tyto_tensor *upd =
      tyto_add(s->w, tyto_mul(s->x, tyto_scalar(s->g, TYTO_F32, 0.5)));
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.device = device;
  po.passes_off = TYTO_PASS_FUSE; /* several launches per run */
  po.n_updates = 1;
  po.update_params = &s->w;
  po.update_values = &upd;
  return tyto_program_compile(ctx, s->g, 1, &s->y, &po, &s->p);
}

static void destroy(prog *s) {
  tyto_program_free(s->p);
  tyto_graph_free(s->g);
}

/* Runs s `runs` times, checking y and w; returns the first failing run's
 * status (TYTO_OK when all ran). */
static tyto_status run_checked(prog *s, int runs, const char *where) {
  static float x[N], w[N], y[N], got[N];
  for (int i = 0; i < N; i++)
    w[i] = (float)(i % 9 - 4) * 0.25f;
  tyto_status st = tyto_program_write_parameter(s->p, s->w, w, sizeof w);
  if (st != TYTO_OK)
    return st;
  for (int r = 0; r < runs; r++) {
    for (int i = 0; i < N; i++)
      x[i] = (float)((r * 7 + i * 3) % 11 - 5) * 0.5f;
    if ((st = tyto_program_set_input(s->p, s->x, x, sizeof x)) != TYTO_OK ||
        (st = tyto_program_run(s->p)) != TYTO_OK ||
        (st = tyto_program_read_output(s->p, 0, y, sizeof y)) != TYTO_OK ||
        (st = tyto_program_read_parameter(s->p, s->w, got, sizeof got)) !=
            TYTO_OK)
      return st;
    int bad = 0;
    for (int i = 0; i < N; i++) {
      float want = fmaxf(x[i] * w[i] + 1.0f, 0.0f);
      w[i] += x[i] * 0.5f;
      bad += y[i] != want || got[i] != w[i];
    }
    CHECK(bad == 0, "%s, run %d: %d wrong values", where, r, bad);
  }
  return TYTO_OK;
}

static tyto_context *open_ctx(const char *dirs) {
  tyto_context_options o;
  tyto_context_options_init(&o);
  o.plugin_path = dirs;
  o.config_path = "";
  o.flags = TYTO_CONTEXT_IGNORE_ENV | TYTO_CONTEXT_NO_INSTALLED_PLUGINS;
  o.devices = "cuda:0,cpu:0";
  o.log_level = TYTO_LOG_ERROR;
  tyto_context *ctx = NULL;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    printf("no cuda:0 here (%s): skipped\n", tyto_errmsg());
    return NULL;
  }
  return ctx;
}

int main(int argc, char **argv) {
  /* Valgrind cannot run CUDA, and loading the plugin's libraries under it
   * takes minutes for a probe that finds no GPU. */
  if (getenv("TYTO_TEST_UNDER_VALGRIND") != NULL) {
    printf("under valgrind: skipped (this test needs a GPU)\n");
    return 77;
  }
  const char *dirs = argc > 1 ? argv[1] : TEST_PLUGIN_DIRS;
  unsetenv("TYTO_CUDA_FAULT_AT");
  unsetenv("TYTO_GRAPHS");
  tyto_context *ctx = open_ctx(dirs);
  if (!ctx)
    return 77;

  /* 1. Graphs. */
  prog gpu, cpu;
  tyto_status st = build(ctx, 0, N, &gpu);
  CHECK(st == TYTO_OK, "compile on cuda:0: %s", tyto_errmsg());
  st = build(ctx, 1, N, &cpu);
  CHECK(st == TYTO_OK, "compile on cpu:0: %s", tyto_errmsg());
  if (failures)
    return 1;
  st = run_checked(&gpu, 6, "cuda:0");
  CHECK(st == TYTO_OK, "cuda:0 runs: %s", tyto_errmsg());
  st = run_checked(&cpu, 6, "cpu:0");
  CHECK(st == TYTO_OK, "cpu:0 runs: %s", tyto_errmsg());
  tyto_program_device_stats ds;
  memset(&ds, 0, sizeof ds);
  ds.struct_size = sizeof ds;
  CHECK(tyto_program_device_stats_get(gpu.p, 0, &ds) == TYTO_OK, "%s",
        tyto_errmsg());
  printf("graphs: %llu replays on cuda:0 (%s)\n",
         (unsigned long long)ds.graph_replays,
         ds.graph_note ? ds.graph_note : "recorded");
  CHECK(ds.graph_replays == 5 && ds.graph_note == NULL,
        "expected 5 replays and no note, got %llu (%s)",
        (unsigned long long)ds.graph_replays,
        ds.graph_note ? ds.graph_note : "no note");
  destroy(&gpu);

  /* 2. Out of device memory. */
  tyto_device *cuda = tyto_context_device(ctx, 0);
  tyto_buffer *huge = NULL;
  st = tyto_buffer_new(cuda, (size_t)1 << 50, &huge);
  printf("1 PiB buffer: %s\n", tyto_errmsg());
  CHECK(st == TYTO_ERR_OUT_OF_MEMORY && strstr(tyto_errmsg(), "cuda:0"),
        "status %d: %s", (int)st, tyto_errmsg());
  tyto_buffer_free(huge);
  prog big;
  st = build(ctx, 0, (int64_t)1 << 38, &big);
  printf("1 TiB program: %s\n", tyto_errmsg());
  CHECK(st == TYTO_ERR_OUT_OF_MEMORY && strstr(tyto_errmsg(), "cuda:0"),
        "status %d: %s", (int)st, tyto_errmsg());
  destroy(&big);
  st = build(ctx, 0, N, &gpu);
  CHECK(st == TYTO_OK && run_checked(&gpu, 2, "cuda:0 after OOM") == TYTO_OK,
        "cuda:0 after running out of memory: %s", tyto_errmsg());
  destroy(&gpu);
  tyto_program_free(cpu.p);
  tyto_graph_free(cpu.g);
  tyto_context_free(ctx);

  /* 3. A fault: the plugin reads TYTO_CUDA_FAULT_AT when it loads. The
   * program launches mul, add, relu, then the update's mul and add: the
   * third launch faults. */
  setenv("TYTO_CUDA_FAULT_AT", "3", 1);
  ctx = open_ctx(dirs);
  unsetenv("TYTO_CUDA_FAULT_AT");
  CHECK(ctx != NULL, "context with TYTO_CUDA_FAULT_AT");
  if (!ctx)
    return 1;
  CHECK(build(ctx, 0, N, &gpu) == TYTO_OK, "%s", tyto_errmsg());
  CHECK(build(ctx, 1, N, &cpu) == TYTO_OK, "%s", tyto_errmsg());
  st = run_checked(&gpu, 1, "cuda:0 faulting");
  printf("fault: %s\n", tyto_errmsg());
  CHECK(st == TYTO_ERR_DEVICE && strstr(tyto_errmsg(), "cuda:0") &&
            strstr(tyto_errmsg(), "launches of") &&
            strstr(tyto_errmsg(), "is lost"),
        "status %d: %s", (int)st, tyto_errmsg());
  st = run_checked(&gpu, 1, "cuda:0 after the fault");
  printf("after the fault: %s\n", tyto_errmsg());
  CHECK(st != TYTO_OK && strstr(tyto_errmsg(), "cuda:0 is lost since an "
                                               "earlier fault"),
        "status %d: %s", (int)st, tyto_errmsg());
  st = run_checked(&cpu, 3, "cpu:0 after the fault");
  CHECK(st == TYTO_OK, "cpu:0 after cuda:0 faulted: %s", tyto_errmsg());
  destroy(&gpu);
  destroy(&cpu);
  tyto_context_free(ctx);
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
