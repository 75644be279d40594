/*
 * tyto-graph: what compiling a whole training step does. Builds the
 * training step of one model (tools/models.h: forward, loss, gradients,
 * Adam), compiles it on the first selected device, or across the devices
 * `--devices` selects, and prints the graph before and after the passes,
 * each pass run, the memory plan, the kernels per run, the time of each
 * compile phase and, across several devices, where the nodes went and the
 * copies between devices. `--json` prints the same as one object; `--dot
 * FILE` writes the compiled graph, coloured by memory block, one cluster
 * per device.
 *
 * Exit status: 0 done, 1 a runtime failure (no device, compile failed,
 * the report could not be written to stdout), 2 a usage error.
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
#include "stdout_check.h"

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
  const char *devices;         /* --devices, or NULL */
  tyto_place_policy placement; /* --placement, or TYTO_PLACE_DEFAULT */
  int strict;                  /* --strict */
  double compile_seconds;      /* tyto_program_compile() as a whole */
  tyto_program_stats st;
  const tyto_program *p; /* for its devices and copies */
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

static const char *const placement_names[] = {
    [TYTO_PLACE_PINNED] = "pinned", [TYTO_PLACE_AUTO] = "auto"};

/* The figures of the program's device i, or -1 after printing why not. */
static int device_stats(const tyto_program *p, size_t i,
                        tyto_program_device_stats *d) {
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  if (tyto_program_device_stats_get(p, i, d) == TYTO_OK)
    return 0;
  fprintf(stderr, PROG ": %s\n", tyto_errmsg());
  return -1;
}

/* The program's copy i, or -1 after printing why not. */
static int copy_info(const tyto_program *p, size_t i, tyto_program_copy *c) {
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  if (tyto_program_copy_get(p, i, c) == TYTO_OK)
    return 0;
  fprintf(stderr, PROG ": %s\n", tyto_errmsg());
  return -1;
}

/* ---------------------------------------------------------------------- */
/* Text                                                                    */

static void print_ratio(const char *label, double r, const char *suffix) {
  if (r < 0)
    printf("  %-22s -\n", label);
  else
    printf("  %-22s %.3f%s\n", label, r, suffix);
}

/* "model mlp, batch 64, device cpu:0", or across several devices
 * "..., devices cpu:0 opencl:0, placement auto". */
static int print_header(const report *r) {
  size_t n = tyto_program_device_count(r->p);
  printf("model %s, batch %d, device%s", r->m.name, r->m.batch,
         n > 1 ? "s" : "");
  if (n <= 1) {
    printf(" %s\n", r->device);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    tyto_program_device_stats d;
    if (device_stats(r->p, i, &d) < 0)
      return -1;
    printf(" %s", d.id);
  }
  /* Without --placement the library reads TYTO_PLACEMENT. */
  const char *env = getenv("TYTO_PLACEMENT");
  if (r->placement != TYTO_PLACE_DEFAULT)
    printf(", placement %s", placement_names[r->placement]);
  else if (env && env[0])
    printf(", placement TYTO_PLACEMENT=%.100s", env);
  else
    printf(", placement pinned (the default)");
  printf("%s\n", r->strict ? ", strict" : "");
  return 0;
}

static int print_text(const report *r) {
  const model_graph *m = &r->m;
  const tyto_program_stats *st = &r->st;
  size_t built = m->forward_nodes + m->ad_nodes + m->update_nodes;
  if (print_header(r) < 0)
    return -1;
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

  if (tyto_program_device_count(r->p) > 1) {
    printf("\n");
    if (tyto_program_report_placement(r->p, stdout) != TYTO_OK) {
      fprintf(stderr, PROG ": %s\n", tyto_errmsg());
      return -1;
    }
  }
  return 0;
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

static json_t *json_count(uint64_t n) {
  return json_integer((json_int_t)n);
}

/* The program's devices, in its order (its first is the caller's): one
 * for a one-device program. NULL after printing why not. */
static json_t *json_devices(const tyto_program *p) {
  json_t *a = json_array();
  for (size_t i = 0; i < tyto_program_device_count(p); i++) {
    tyto_program_device_stats d;
    if (device_stats(p, i, &d) < 0) {
      json_decref(a);
      return NULL;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", str_or_null(d.id));
    json_object_set_new(o, "device", json_count(d.device));
    json_object_set_new(o, "nodes", json_count(d.nodes));
    json_object_set_new(o, "kernels", json_count(d.kernels));
    json_object_set_new(o, "fallbacks", json_count(d.fallbacks));
    json_object_set_new(o, "planned_bytes", json_count(d.planned_bytes));
    json_object_set_new(o, "arena_bytes", json_count(d.arena_bytes));
    json_object_set_new(o, "pinned_bytes", json_count(d.pinned_bytes));
    json_object_set_new(o, "lower_bound_bytes",
                        json_count(d.lower_bound_bytes));
    json_array_append_new(a, o);
  }
  return a;
}

/* The copies between devices each run makes (none on one device); "from"
 * and "to" are the "device" of an entry of "devices", "tensor" the index
 * in the built graph (null: a tensor the passes made). NULL after
 * printing why not. */
static json_t *json_copies(const tyto_program *p) {
  json_t *a = json_array();
  for (size_t i = 0; i < tyto_program_copy_count(p); i++) {
    tyto_program_copy c;
    if (copy_info(p, i, &c) < 0) {
      json_decref(a);
      return NULL;
    }
    json_t *o = json_object();
    json_object_set_new(o, "tensor",
                        c.tensor < 0 ? json_null() : json_integer(c.tensor));
    json_object_set_new(o, "name", str_or_null(c.name));
    json_object_set_new(o, "op", str_or_null(c.op));
    json_object_set_new(o, "from", json_count(c.from));
    json_object_set_new(o, "to", json_count(c.to));
    json_object_set_new(o, "bytes", json_count(c.bytes));
    json_object_set_new(o, "route", str_or_null(c.route));
    json_array_append_new(a, o);
  }
  return a;
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
  json_object_set_new(root, "placement",
                      r->placement == TYTO_PLACE_DEFAULT
                          ? json_null()
                          : json_string(placement_names[r->placement]));
  json_object_set_new(root, "strict", json_boolean(r->strict));

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

  json_t *devices = json_devices(r->p), *copies = json_copies(r->p);
  if (!devices || !copies) {
    json_decref(devices);
    json_decref(copies);
    json_decref(root);
    return NULL;
  }
  json_object_set_new(root, "devices", devices);
  json_object_set_new(root, "copies", copies);

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
      "                  [--devices LIST [--placement pinned|auto] "
      "[--strict]]\n"
      "                  [--dot FILE] [--json]\n"
      "\n"
      "Builds one model's training step (forward, loss, gradients, Adam),\n"
      "compiles it on the first selected device (TYTO_DEVICES), or across\n"
      "the devices --devices selects, and shows what the graph passes, the\n"
      "memory planner and the placement did.\n"
      "\n"
      "  --model NAME      mlp (784-128-10), cnn (Owl's seed CNN) or lstm\n"
      "                    (Owl's lazy_lstm, 100 steps)\n"
      "  --batch N         rows per batch, 1 to %d (default: 64; lstm 32)\n"
      "  --passes LIST     the passes to run, comma-separated from dce, cse,\n"
      "                    fold, algebra, fuse; or none, or all (default)\n"
      "  --no-memory-plan  give every tensor its own buffer\n"
      "  --devices LIST    select these devices (as TYTO_DEVICES takes them,\n"
      "                    e.g. cpu,opencl:0) and compile across all of them,\n"
      "                    the first as the caller's own; adds the placement\n"
      "                    report (default: the first selected device only)\n"
      "  --placement NAME  across several devices: pinned (everything on the\n"
      "                    first; the models pin nothing) or auto (where the\n"
      "                    measured profiles say the step is fastest);\n"
      "                    default: TYTO_PLACEMENT, else pinned\n"
      "  --strict          across several devices: a node its device refuses\n"
      "                    is an error, not moved to another device\n"
      "  --dot FILE        write the compiled graph as Graphviz dot (one\n"
      "                    cluster per device)\n"
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

/* "pinned" or "auto": the policy; TYTO_PLACE_DEFAULT otherwise. */
static tyto_place_policy parse_placement(const char *s) {
  if (strcmp(s, "pinned") == 0)
    return TYTO_PLACE_PINNED;
  if (strcmp(s, "auto") == 0)
    return TYTO_PLACE_AUTO;
  return TYTO_PLACE_DEFAULT;
}

/* --placement and --strict decide between devices: given for a program on
 * one device they would change nothing, which is an error rather than an
 * option silently dropped. `why` says how the run came to one device. */
static int check_placement_applies(const report *r, const char *why) {
  const char *flag = r->placement != TYTO_PLACE_DEFAULT ? "--placement"
                     : r->strict                        ? "--strict"
                                                        : NULL;
  if (!flag)
    return 0;
  fprintf(stderr,
          PROG ": %s applies to programs on more than one device only; %s\n"
               "(see " PROG " --help)\n",
          flag, why);
  return -1;
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
      {"devices", required_argument, NULL, 'D'},
      {"placement", required_argument, NULL, 'P'},
      {"strict", no_argument, NULL, 's'},
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
  for (int c; (c = getopt_long(argc, argv, ":m:b:p:nD:P:sd:jVh", longopts,
                               NULL)) != -1;) {
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
    case 'D':
      if (!optarg[0])
        return usage_error("--devices: expected a device list such as "
                           "cpu,opencl:0, found",
                           optarg);
      r.devices = optarg;
      break;
    case 'P':
      if ((r.placement = parse_placement(optarg)) == TYTO_PLACE_DEFAULT)
        return usage_error("--placement: expected pinned or auto, found",
                           optarg);
      break;
    case 's': r.strict = 1; break;
    case 'd': dot = optarg; break;
    case 'j': json = 1; break;
    case 'V':
      printf(PROG " %s\n", tyto_version());
      return stdout_flushed(PROG) ? 1 : 0;
    case 'h': usage(stdout); return stdout_flushed(PROG) ? 1 : 0;
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
  if (!r.devices &&
      check_placement_applies(&r, "without --devices the program runs on "
                                  "the first selected device alone") < 0)
    return 2;

  char err[1024];
  if (model_build(model, batch, &r.m, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return 1;
  }

  int rc = 1;
  tyto_context *ctx = NULL;
  tyto_program *p = NULL;
  size_t *devices = NULL;
  tyto_context_options copts;
  tyto_context_options_init(&copts);
  copts.devices = r.devices; /* NULL: TYTO_DEVICES, the config */
  copts.devices_from = "--devices";
  if (tyto_context_new(&copts, &ctx) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  if (tyto_context_device_count(ctx) == 0) {
    fprintf(stderr, PROG ": no device selected; set TYTO_DEVICES (e.g. "
                         "TYTO_DEVICES=cpu) or run tyto-info to see why\n");
    goto done;
  }
  r.device = tyto_device_get_info(tyto_context_device(ctx, 0))->id;
  size_t n_devices = r.devices ? tyto_context_device_count(ctx) : 1;
  if (n_devices == 1 && r.devices) {
    char why[512];
    snprintf(why, sizeof why, "--devices '%.200s' selects one device (%s)",
             r.devices, r.device);
    if (check_placement_applies(&r, why) < 0) {
      rc = 2;
      goto done;
    }
  }
  /* Every selected device, in the selection's order. */
  if (r.devices && !(devices = calloc(n_devices, sizeof *devices))) {
    fprintf(stderr, PROG ": out of memory\n");
    goto done;
  }
  for (size_t i = 0; devices && i < n_devices; i++)
    devices[i] = i;
  tyto_program_options opts;
  tyto_program_options_init(&opts);
  opts.passes_off = r.passes_off;
  opts.no_memory_plan = !r.memory_plan;
  opts.n_devices = devices ? n_devices : 0; /* 0: device 0 alone */
  opts.devices = devices;
  opts.placement = r.placement;
  opts.strict = r.strict;
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
  r.p = p;
  if (dot && tyto_program_export_dot(p, dot) != TYTO_OK) {
    fprintf(stderr, PROG ": --dot: %s\n", tyto_errmsg());
    goto done;
  }
  if (json) {
    json_t *root = json_report(&r);
    if (!root)
      goto done;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text)
      printf("%s\n", text);
    free(text);
    json_decref(root);
  } else if (print_text(&r) < 0) {
    goto done;
  }
  rc = stdout_flushed(PROG) ? 1 : 0;
done:
  free(devices);
  tyto_program_free(p);
  tyto_context_free(ctx);
  model_free(&r.m);
  return rc;
}
