/*
 * tyto-graph: what compiling a whole training step does. Builds the
 * training step of one model (tools/models.h: forward, loss, gradients,
 * Adam), compiles it on the first selected device and prints the graph
 * before and after the passes, each pass run, the memory plan, the kernels
 * per run and the time of each compile phase. `--json` prints the same as
 * one object; `--dot FILE` writes the compiled graph, coloured by memory
 * block.
 *
 * Exit status: 0 done, 1 a runtime failure (no device, compile failed),
 * 2 a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/tyto.h>

#include "models.h"

#define PROG "tyto-graph"

static const struct {
  const char *name;
  unsigned bit;
} pass_names[] = {{"dce", TYTO_PASS_DCE},
                  {"cse", TYTO_PASS_CSE},
                  {"fold", TYTO_PASS_FOLD},
                  {"algebra", TYTO_PASS_ALGEBRA},
                  {"fuse", TYTO_PASS_FUSE}};
#define N_PASS_NAMES (sizeof pass_names / sizeof pass_names[0])

enum { MAX_BATCH = 65536 };

typedef struct report {
  model_graph m;
  const char *device;
  unsigned passes_off;
  int memory_plan;
  double compile_seconds; /* tyto_program_compile() as a whole */
  tyto_program_stats st;
} report;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mb(uint64_t bytes) {
  return (double)bytes / 1e6;
}

/* a / b, or -1 when b is 0 (a planner that reported nothing). */
static double ratio(uint64_t a, uint64_t b) {
  return b ? (double)a / (double)b : -1.0;
}

static const char *or_dash(const char *s) {
  return s && s[0] ? s : "-";
}

/* ---------------------------------------------------------------------- */
/* Text                                                                    */

static void print_ratio(const char *label, double r, const char *suffix) {
  if (r < 0)
    printf("  %-22s -\n", label);
  else
    printf("  %-22s %.3f%s\n", label, r, suffix);
}

static void print_text(const report *r) {
  const model_graph *m = &r->m;
  const tyto_program_stats *st = &r->st;
  size_t built = m->forward_nodes + m->ad_nodes + m->update_nodes;
  printf("model %s, batch %d, device %s\n", m->name, m->batch, r->device);
  printf("built %zu tensors, %zu edges: forward %zu, gradients %zu, "
         "Adam %zu; %zu outputs, %zu parameter updates (%zu in place)\n",
         built, m->forward_edges + m->ad_edges + m->update_edges,
         m->forward_nodes, m->ad_nodes, m->update_nodes, m->n_outputs,
         m->n_updates, st->updates_in_place);
  printf("\nGraph        nodes    edges\n");
  printf("  needed  %9zu %8zu\n", st->nodes_before, st->edges_before);
  printf("  compiled%9zu %8zu   (%zu fused nodes, %zu kernels per run)\n",
         st->nodes_after, st->edges_after, st->fused_nodes, st->kernels);

  printf("\nPasses");
  if (r->passes_off == TYTO_PASS_ALL)
    printf(" (none selected)");
  printf("\n  %5s %-8s %17s %19s %8s %9s\n", "round", "pass",
         "nodes before->after", "edges before->after", "changes", "ms");
  if (st->n_passes == 0)
    printf("  (no pass ran)\n");
  for (size_t i = 0; i < st->n_passes; i++) {
    const tyto_pass_stats *p = &st->passes[i];
    printf("  %5d %-8s %8zu->%-8zu %9zu->%-9zu %8ld %9.3f\n", p->round,
           or_dash(p->name), p->nodes_before, p->nodes_after, p->edges_before,
           p->edges_after, p->changed, p->seconds * 1e3);
  }

  printf("\nMemory%s (MB = 10^6 bytes)\n",
         r->memory_plan ? "" : ", planner off: every tensor its own buffer");
  printf("  %-22s %10.3f MB\n", "naive", mb(st->naive_bytes));
  printf("  %-22s %10.3f MB\n", "naive after passes",
         mb(st->compiled_naive_bytes));
  printf("  %-22s %10.3f MB\n", "planned", mb(st->planned_bytes));
  printf("  %-22s %10.3f MB\n", "lower bound", mb(st->lower_bound_bytes));
  printf("  %-22s %10.3f MB\n", "arena", mb(st->arena_bytes));
  printf("  %-22s %10.3f MB\n", "pinned", mb(st->pinned_bytes));
  printf("  %-22s %s\n", "order kept", or_dash(st->order_name));
  print_ratio("planned / lower bound",
              ratio(st->planned_bytes, st->lower_bound_bytes), "");
  print_ratio("naive / planned", ratio(st->naive_bytes, st->planned_bytes),
              "x");

  printf("\nTimes (ms)\n");
  printf("  %-22s %9.3f\n", "build forward", m->forward_seconds * 1e3);
  printf("  %-22s %9.3f\n", "gradients (AD)", m->ad_seconds * 1e3);
  printf("  %-22s %9.3f\n", "Adam update", m->update_seconds * 1e3);
  printf("  %-22s %9.3f\n", "passes", st->passes_seconds * 1e3);
  printf("  %-22s %9.3f\n", "memory plan", st->plan_seconds * 1e3);
  printf("  %-22s %9.3f\n", "prepare kernels", st->prepare_seconds * 1e3);
  printf("  %-22s %9.3f\n", "allocate memory", st->alloc_seconds * 1e3);
  printf("  %-22s %9.3f\n", "compile (all of it)", r->compile_seconds * 1e3);
}

/* ---------------------------------------------------------------------- */
/* JSON                                                                    */

static json_t *str_or_null(const char *s) {
  json_t *j = s ? json_string(s) : NULL;
  return j ? j : json_null();
}

static json_t *ratio_or_null(double r) {
  return r < 0 ? json_null() : json_real(r);
}

static json_t *json_report(const report *r) {
  const model_graph *m = &r->m;
  const tyto_program_stats *st = &r->st;
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(m->name));
  json_object_set_new(root, "batch", json_integer(m->batch));
  json_object_set_new(root, "device", str_or_null(r->device));
  json_t *on = json_array();
  for (size_t i = 0; i < N_PASS_NAMES; i++)
    if (!(r->passes_off & pass_names[i].bit))
      json_array_append_new(on, json_string(pass_names[i].name));
  json_object_set_new(root, "passes_enabled", on);
  json_object_set_new(root, "memory_plan", json_boolean(r->memory_plan));

  json_t *built = json_object();
  json_object_set_new(built, "forward_nodes",
                      json_integer((json_int_t)m->forward_nodes));
  json_object_set_new(built, "ad_nodes", json_integer((json_int_t)m->ad_nodes));
  json_object_set_new(built, "update_nodes",
                      json_integer((json_int_t)m->update_nodes));
  json_object_set_new(built, "nodes",
                      json_integer((json_int_t)(m->forward_nodes + m->ad_nodes +
                                                m->update_nodes)));
  json_object_set_new(built, "edges",
                      json_integer((json_int_t)(m->forward_edges + m->ad_edges +
                                                m->update_edges)));
  json_object_set_new(built, "parameters",
                      json_integer((json_int_t)m->n_params));
  json_object_set_new(built, "outputs", json_integer((json_int_t)m->n_outputs));
  json_object_set_new(built, "updates", json_integer((json_int_t)m->n_updates));
  json_object_set_new(root, "built", built);

  json_object_set_new(root, "nodes_before",
                      json_integer((json_int_t)st->nodes_before));
  json_object_set_new(root, "edges_before",
                      json_integer((json_int_t)st->edges_before));
  json_object_set_new(root, "nodes_after",
                      json_integer((json_int_t)st->nodes_after));
  json_object_set_new(root, "edges_after",
                      json_integer((json_int_t)st->edges_after));
  json_object_set_new(root, "fused_nodes",
                      json_integer((json_int_t)st->fused_nodes));
  json_object_set_new(root, "kernels", json_integer((json_int_t)st->kernels));

  json_t *passes = json_array();
  for (size_t i = 0; i < st->n_passes; i++) {
    const tyto_pass_stats *p = &st->passes[i];
    json_t *o = json_object();
    json_object_set_new(o, "round", json_integer(p->round));
    json_object_set_new(o, "pass", str_or_null(p->name));
    json_object_set_new(o, "nodes_before",
                        json_integer((json_int_t)p->nodes_before));
    json_object_set_new(o, "nodes_after",
                        json_integer((json_int_t)p->nodes_after));
    json_object_set_new(o, "edges_before",
                        json_integer((json_int_t)p->edges_before));
    json_object_set_new(o, "edges_after",
                        json_integer((json_int_t)p->edges_after));
    json_object_set_new(o, "changed", json_integer(p->changed));
    json_object_set_new(o, "seconds", json_real(p->seconds));
    json_array_append_new(passes, o);
  }
  json_object_set_new(root, "passes", passes);

  json_t *mem = json_object();
  json_object_set_new(mem, "naive_bytes",
                      json_integer((json_int_t)st->naive_bytes));
  json_object_set_new(mem, "planned_bytes",
                      json_integer((json_int_t)st->planned_bytes));
  json_object_set_new(mem, "compiled_naive_bytes",
                      json_integer((json_int_t)st->compiled_naive_bytes));
  json_object_set_new(mem, "updates_in_place",
                      json_integer((json_int_t)st->updates_in_place));
  json_object_set_new(mem, "lower_bound_bytes",
                      json_integer((json_int_t)st->lower_bound_bytes));
  json_object_set_new(mem, "arena_bytes",
                      json_integer((json_int_t)st->arena_bytes));
  json_object_set_new(mem, "pinned_bytes",
                      json_integer((json_int_t)st->pinned_bytes));
  json_object_set_new(mem, "order", str_or_null(st->order_name));
  json_object_set_new(
      mem, "planned_over_lower_bound",
      ratio_or_null(ratio(st->planned_bytes, st->lower_bound_bytes)));
  json_object_set_new(mem, "naive_over_planned",
                      ratio_or_null(ratio(st->naive_bytes, st->planned_bytes)));
  json_object_set_new(root, "memory", mem);

  json_t *sec = json_object();
  json_object_set_new(sec, "build", json_real(m->forward_seconds));
  json_object_set_new(sec, "ad", json_real(m->ad_seconds));
  json_object_set_new(sec, "update", json_real(m->update_seconds));
  json_object_set_new(sec, "passes", json_real(st->passes_seconds));
  json_object_set_new(sec, "plan", json_real(st->plan_seconds));
  json_object_set_new(sec, "prepare", json_real(st->prepare_seconds));
  json_object_set_new(sec, "alloc", json_real(st->alloc_seconds));
  json_object_set_new(sec, "compile", json_real(r->compile_seconds));
  json_object_set_new(root, "seconds", sec);
  return root;
}

/* ---------------------------------------------------------------------- */
/* Arguments                                                               */

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: tyto-graph --model mlp|cnn|lstm [--batch N]\n"
      "                  [--passes LIST|none|all] [--no-memory-plan]\n"
      "                  [--dot FILE] [--json]\n"
      "\n"
      "Builds one model's training step (forward, loss, gradients, Adam),\n"
      "compiles it on the first selected device (TYTO_DEVICES) and shows\n"
      "what the graph passes and the memory planner did.\n"
      "\n"
      "  --model NAME      mlp (784-128-10), cnn (Owl's seed CNN) or lstm\n"
      "                    (Owl's lazy_lstm, 100 steps)\n"
      "  --batch N         rows per batch, 1 to %d (default: 64; lstm 32)\n"
      "  --passes LIST     the passes to run, comma-separated from dce, cse,\n"
      "                    fold, algebra, fuse; or none, or all (default)\n"
      "  --no-memory-plan  give every tensor its own buffer\n"
      "  --dot FILE        write the compiled graph as Graphviz dot\n"
      "  --json            one JSON object instead of text\n"
      "  --version         print the version and exit\n"
      "\n"
      "Exit status: 0 done, 1 runtime failure, 2 usage error.\n",
      MAX_BATCH);
}

/* Prints "tyto-graph: <what> '<found>'" and a pointer to --help. */
static int usage_error(const char *what, const char *found) {
  fprintf(stderr, PROG ": %s '%s'\n(see " PROG " --help)\n", what, found);
  return 2;
}

static int known_model(const char *name) {
  for (size_t i = 0; model_names[i]; i++)
    if (strcmp(name, model_names[i]) == 0)
      return 1;
  return 0;
}

/* A whole decimal number in [1, MAX_BATCH]; -1 otherwise. */
static int parse_batch(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > MAX_BATCH)
    return -1;
  return (int)v;
}

/* "none", "all" or "dce,cse,...": the TYTO_PASS_* bits to turn off, or -1
 * with the offending word in bad (n bytes). */
static long parse_passes(const char *s, char *bad, size_t n) {
  if (strcmp(s, "all") == 0)
    return 0;
  if (strcmp(s, "none") == 0)
    return TYTO_PASS_ALL;
  unsigned on = 0;
  const char *p = s;
  for (;;) {
    size_t len = strcspn(p, ",");
    size_t i = 0;
    while (i < N_PASS_NAMES && !(strlen(pass_names[i].name) == len &&
                                 strncmp(p, pass_names[i].name, len) == 0))
      i++;
    if (i == N_PASS_NAMES) {
      snprintf(bad, n, "%.*s", (int)(len < 64 ? len : 64), p);
      return -1;
    }
    on |= pass_names[i].bit;
    if (!p[len])
      break;
    p += len + 1;
  }
  return (long)(TYTO_PASS_ALL & ~on);
}

int main(int argc, char **argv) {
  /* A closed pipe or the file-size limit is a write error we report, not
   * a signal that kills the tool (SIGPIPE, SIGXFSZ). */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  static const struct option longopts[] = {
      {"model", required_argument, NULL, 'm'},
      {"batch", required_argument, NULL, 'b'},
      {"passes", required_argument, NULL, 'p'},
      {"no-memory-plan", no_argument, NULL, 'n'},
      {"dot", required_argument, NULL, 'd'},
      {"json", no_argument, NULL, 'j'},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *model = NULL, *dot = NULL;
  int batch = 0, json = 0;
  report r;
  memset(&r, 0, sizeof r);
  r.memory_plan = 1;
  opterr = 0;
  for (int c;
       (c = getopt_long(argc, argv, ":m:b:p:nd:jVh", longopts, NULL)) != -1;) {
    char bad[80];
    long off;
    switch (c) {
    case 'm':
      if (!known_model(optarg))
        return usage_error("--model: expected mlp, cnn or lstm, found", optarg);
      model = optarg;
      break;
    case 'b':
      if ((batch = parse_batch(optarg)) < 0) {
        fprintf(stderr,
                PROG ": --batch: expected a whole number from 1 to %d, "
                     "found '%s'\n",
                MAX_BATCH, optarg);
        return 2;
      }
      break;
    case 'p':
      if ((off = parse_passes(optarg, bad, sizeof bad)) < 0) {
        fprintf(stderr,
                PROG ": --passes: unknown pass '%s' in '%s': expected a "
                     "comma-separated list of dce, cse, fold, algebra, fuse, "
                     "or none, or all\n",
                bad, optarg);
        return 2;
      }
      r.passes_off = (unsigned)off;
      break;
    case 'n': r.memory_plan = 0; break;
    case 'd': dot = optarg; break;
    case 'j': json = 1; break;
    case 'V': printf(PROG " %s\n", tyto_version()); return 0;
    case 'h': usage(stdout); return 0;
    case ':': return usage_error("expected a value after", argv[optind - 1]);
    default: return usage_error("unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return usage_error("unexpected argument", argv[optind]);
  if (!model) {
    fprintf(stderr, PROG ": --model is required: expected mlp, cnn or lstm\n"
                         "(see " PROG " --help)\n");
    return 2;
  }

  char err[1024];
  if (model_build(model, batch, &r.m, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return 1;
  }

  int rc = 1;
  tyto_context *ctx = NULL;
  tyto_program *p = NULL;
  if (tyto_context_new(NULL, &ctx) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  if (tyto_context_device_count(ctx) == 0) {
    fprintf(stderr, PROG ": no device selected; set TYTO_DEVICES (e.g. "
                         "TYTO_DEVICES=cpu) or run tyto-info to see why\n");
    goto done;
  }
  r.device = tyto_device_get_info(tyto_context_device(ctx, 0))->id;
  tyto_program_options opts;
  tyto_program_options_init(&opts);
  opts.passes_off = r.passes_off;
  opts.no_memory_plan = !r.memory_plan;
  model_options(&r.m, &opts);
  double t0 = now();
  tyto_status st =
      tyto_program_compile(ctx, r.m.g, r.m.n_outputs, r.m.outputs, &opts, &p);
  r.compile_seconds = now() - t0;
  if (st != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  r.st.struct_size = sizeof r.st;
  if (tyto_program_stats_get(p, &r.st) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  if (dot && tyto_program_export_dot(p, dot) != TYTO_OK) {
    fprintf(stderr, PROG ": --dot: %s\n", tyto_errmsg());
    goto done;
  }
  if (json) {
    json_t *root = json_report(&r);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text)
      printf("%s\n", text);
    free(text);
    json_decref(root);
  } else {
    print_text(&r);
  }
  rc = fflush(stdout) == 0 ? 0 : 1;
done:
  tyto_program_free(p);
  tyto_context_free(ctx);
  model_free(&r.m);
  return rc;
}
