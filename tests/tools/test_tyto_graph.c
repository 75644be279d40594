/* tyto-graph: its JSON report, its dot export, its placement across
 * devices (the test device plugin tests/plugins/partplug.c, always; the
 * OpenCL device where the machine has one), and its exit statuses, a
 * report that cannot be written among them. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* This tree's plugins and the test device "part" (f32 copies, fills,
 * elementwise ops and fused programs without exp; it refuses the rest). */
#define PLUGIN_DIRS TEST_PLUGIN_DIRS ":" TEST_EXTRA_PLUGIN_DIR "/part"

/* Runs tyto-graph with `args` (shell words) on this tree's CPU plugin;
 * returns its exit status and stdout plus stderr (free it). */
static int run_graph(const char *env, const char *args, char **out) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "env -u TYTO_CONFIG -u TYTO_LOG_LEVEL -u TYTO_PLACEMENT "
           "TYTO_DEVICES=cpu TYTO_PLUGIN_PATH='%s' %s '%s/tyto-graph' %s 2>&1",
           PLUGIN_DIRS, env, TEST_TOOLS_DIR, args);
  return test_popen(cmd, out);
}

/* Runs it as run_graph does with stdout on /dev/full; returns its exit
 * status and stderr (free it). */
static int run_graph_to_full(const char *args, char **err) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "env -u TYTO_CONFIG -u TYTO_LOG_LEVEL -u TYTO_PLACEMENT "
           "TYTO_DEVICES=cpu TYTO_PLUGIN_PATH='%s' '%s/tyto-graph' %s "
           "2>&1 >/dev/full",
           PLUGIN_DIRS, TEST_TOOLS_DIR, args);
  return test_popen(cmd, err);
}

/* Runs it with `env` and `args` and parses stdout as one JSON object
 * (warnings are turned off, since stderr comes with it). */
static json_t *run_json_env(const char *env, const char *args) {
  char *out, envs[4096];
  snprintf(envs, sizeof envs, "TYTO_LOG_LEVEL=error %s", env);
  int rc = run_graph(envs, args, &out);
  ck_assert_msg(rc == 0, "'%s' exited %d:\n%s", args, rc, out);
  json_error_t jerr;
  json_t *root = json_loads(out, 0, &jerr);
  ck_assert_msg(root != NULL, "not JSON (%s):\n%s", jerr.text, out);
  free(out);
  return root;
}

static json_t *run_json(const char *args) {
  return run_json_env("", args);
}

static json_int_t num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_integer(v), "no integer '%s'", key);
  return json_integer_value(v);
}

/* What holds for every report: the built graph adds up, the passes chain
 * (each starts where the last stopped) and shrink nothing they should not,
 * and the memory numbers are ordered lower bound <= planned <= naive with
 * the pinned tensors inside the plan. */
static void check_consistent(json_t *root) {
  json_t *built = json_object_get(root, "built");
  ck_assert_int_eq(num(built, "nodes"), num(built, "forward_nodes") +
                                            num(built, "ad_nodes") +
                                            num(built, "update_nodes"));
  json_int_t before = num(root, "nodes_before"),
             after = num(root, "nodes_after");
  ck_assert_int_gt(before, 0);
  ck_assert_int_le(before, num(built, "nodes"));
  ck_assert_int_le(after, before);
  ck_assert_int_gt(num(root, "kernels"), 0);
  ck_assert_int_le(num(root, "fused_nodes"), after);

  json_t *passes = json_object_get(root, "passes");
  ck_assert(json_is_array(passes));
  size_t i;
  json_t *p, *prev = NULL;
  json_array_foreach(passes, i, p) {
    ck_assert(json_is_string(json_object_get(p, "pass")));
    ck_assert_int_ge(num(p, "round"), 1);
    ck_assert_int_ge(num(p, "changed"), 0);
    if (prev) {
      ck_assert_int_eq(num(p, "nodes_before"), num(prev, "nodes_after"));
      ck_assert_int_eq(num(p, "edges_before"), num(prev, "edges_after"));
      ck_assert_int_ge(num(p, "round"), num(prev, "round"));
    }
    prev = p;
  }
  if (prev) {
    ck_assert_int_eq(num(prev, "nodes_after"), after);
    ck_assert_int_eq(num(prev, "edges_after"), num(root, "edges_after"));
  } else {
    ck_assert_int_eq(after, before);
  }

  json_t *mem = json_object_get(root, "memory");
  json_int_t naive = num(mem, "naive_bytes"),
             planned = num(mem, "planned_bytes"),
             lower = num(mem, "lower_bound_bytes");
  ck_assert_int_gt(lower, 0);
  ck_assert_int_le(lower, planned);
  ck_assert_int_le(planned, naive);
  ck_assert_int_le(num(mem, "pinned_bytes"), planned);
  ck_assert(json_is_string(json_object_get(mem, "order")));

  /* The devices share out the program: their kernels (copies into each
   * included) and their memory add up to the program's. Each copy goes
   * between two of them. */
  json_t *devs = json_object_get(root, "devices");
  ck_assert(json_is_array(devs));
  ck_assert_int_ge(json_array_size(devs), 1);
  json_int_t kernels = 0, dplanned = 0, arena = 0, pinned = 0, dlower = 0;
  json_t *d;
  json_array_foreach(devs, i, d) {
    ck_assert(json_is_string(json_object_get(d, "id")));
    ck_assert_int_ge(num(d, "device"), 0);
    ck_assert_int_le(num(d, "fallbacks"), num(d, "nodes"));
    ck_assert_int_le(num(d, "nodes"), after);
    ck_assert_int_le(num(d, "lower_bound_bytes"), num(d, "planned_bytes"));
    kernels += num(d, "kernels");
    dplanned += num(d, "planned_bytes");
    arena += num(d, "arena_bytes");
    pinned += num(d, "pinned_bytes");
    dlower += num(d, "lower_bound_bytes");
  }
  ck_assert_int_eq(kernels, num(root, "kernels"));
  ck_assert_int_eq(arena, num(mem, "arena_bytes"));
  ck_assert_int_eq(dlower, lower);
  /* Under --no-memory-plan the library's per-device planned and pinned
   * bytes are still the plan's, not the program's every-tensor-its-own
   * figures (a core issue, reported); they are compared with a plan
   * only. */
  if (json_is_true(json_object_get(root, "memory_plan"))) {
    ck_assert_int_eq(dplanned, planned);
    ck_assert_int_eq(pinned, num(mem, "pinned_bytes"));
  }
  json_t *copies = json_object_get(root, "copies");
  ck_assert(json_is_array(copies));
  json_t *c;
  json_array_foreach(copies, i, c) {
    json_int_t from = num(c, "from"), to = num(c, "to");
    ck_assert_int_ne(from, to);
    int seen_from = 0, seen_to = 0;
    size_t j;
    json_array_foreach(devs, j, d) {
      seen_from |= num(d, "device") == from;
      seen_to |= num(d, "device") == to;
    }
    ck_assert_msg(seen_from && seen_to, "copy %zu: %lld -> %lld", i,
                  (long long)from, (long long)to);
    ck_assert_int_gt(num(c, "bytes"), 0);
    json_t *t = json_object_get(c, "tensor");
    ck_assert(json_is_null(t) || json_integer_value(t) >= 0);
    ck_assert(json_is_string(json_object_get(c, "op")));
    ck_assert(json_is_string(json_object_get(c, "route")));
  }
}

START_TEST(mlp_json_report) {
  json_t *root = run_json("--model mlp --json");
  check_consistent(root);
  ck_assert_str_eq(json_string_value(json_object_get(root, "model")), "mlp");
  ck_assert_int_eq(num(root, "batch"), 64);
  ck_assert_str_eq(json_string_value(json_object_get(root, "device")), "cpu:0");
  json_t *built = json_object_get(root, "built");
  /* Four trained parameters (fc1.w, fc1.b, fc2.w, fc2.b): the loss as the
   * output; p, m and v of each and the step counter written back in
   * place. */
  ck_assert_int_eq(num(built, "parameters"), 4);
  ck_assert_int_eq(num(built, "outputs"), 1);
  ck_assert_int_eq(num(built, "updates"), 3 * 4 + 1);
  /* Never reused: inputs x [64,784] and labels [64,10]; the parameters,
   * their m and v and step; the loss. 101770 parameter elements, 4 bytes
   * each, every buffer rounded up to 64 bytes. */
  json_int_t params = 101770 * 4;
  json_int_t io = (64 * 784 + 64 * 10) * 4 + 3 * params + 4 + 4;
  json_t *mem = json_object_get(root, "memory");
  ck_assert_int_ge(num(mem, "pinned_bytes"), io);
  ck_assert_int_le(num(mem, "pinned_bytes"), io + 64 * 16);
  ck_assert_int_eq(num(mem, "updates_in_place"), 3 * 4 + 1);
  ck_assert_int_ge(num(mem, "naive_bytes"), io);

  /* One device: the whole program on it, no copies. */
  ck_assert(json_is_null(json_object_get(root, "placement")));
  ck_assert(json_is_false(json_object_get(root, "strict")));
  json_t *devs = json_object_get(root, "devices");
  ck_assert_int_eq(json_array_size(devs), 1);
  json_t *d = json_array_get(devs, 0);
  ck_assert_str_eq(json_string_value(json_object_get(d, "id")), "cpu:0");
  ck_assert_int_eq(num(d, "device"), 0);
  ck_assert_int_gt(num(d, "nodes"), 0);
  ck_assert_int_eq(num(d, "fallbacks"), 0);
  ck_assert_int_eq(num(d, "kernels"), num(root, "kernels"));
  ck_assert_int_eq(num(d, "planned_bytes"), num(mem, "planned_bytes"));
  ck_assert_int_eq(json_array_size(json_object_get(root, "copies")), 0);
  json_decref(root);
}
END_TEST

START_TEST(cnn_json_and_options) {
  json_t *root = run_json("--model cnn --batch 8 --json");
  check_consistent(root);
  ck_assert_int_eq(num(root, "batch"), 8);
  json_decref(root);

  /* No passes: nothing runs and the graph is compiled as built. */
  root = run_json("--model cnn --batch 8 --passes none --json");
  check_consistent(root);
  ck_assert_int_eq(json_array_size(json_object_get(root, "passes")), 0);
  ck_assert_int_eq(json_array_size(json_object_get(root, "passes_enabled")), 0);
  ck_assert_int_eq(num(root, "nodes_after"), num(root, "nodes_before"));
  ck_assert_int_eq(num(root, "fused_nodes"), 0);
  json_decref(root);

  /* Only the passes named run. */
  root = run_json("--model mlp --passes dce,cse --json");
  check_consistent(root);
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(root, "passes"), i, p) {
    const char *name = json_string_value(json_object_get(p, "pass"));
    ck_assert_msg(strcmp(name, "dce") == 0 || strcmp(name, "cse") == 0,
                  "pass %s ran", name);
  }
  ck_assert_int_eq(num(root, "fused_nodes"), 0);
  json_decref(root);

  /* Without the planner every tensor of the compiled graph has its own
   * memory (the naive figure counts the graph before the passes). */
  root = run_json("--model mlp --no-memory-plan --json");
  check_consistent(root);
  ck_assert(json_is_false(json_object_get(root, "memory_plan")));
  json_t *mem = json_object_get(root, "memory");
  ck_assert_int_eq(num(mem, "planned_bytes"), num(mem, "compiled_naive_bytes"));
  ck_assert_int_eq(num(mem, "arena_bytes"), 0);
  ck_assert_int_le(num(mem, "compiled_naive_bytes"), num(mem, "naive_bytes"));
  json_decref(root);
}
END_TEST

START_TEST(lstm_json_report) {
  json_t *root = run_json("--model lstm --json");
  check_consistent(root);
  ck_assert_int_eq(num(root, "batch"), 32);
  json_t *built = json_object_get(root, "built");
  /* Per step: slice and reshape of the embedded input, four gates of two
   * matmuls, two adds and an activation, then c = f*c + i*g and h =
   * o*tanh(c): 27 tensors. Around them 32: tokens, the embedding and its
   * gather, 12 gate parameters and h0 (16); the two linear layers and the
   * relu (9); labels, log_softmax, mul, sum, its divisor, div, neg (7). */
  ck_assert_int_eq(num(built, "forward_nodes"), 100 * 27 + 32);
  ck_assert_int_eq(num(built, "parameters"), 17);
  json_decref(root);
}
END_TEST

START_TEST(text_report_and_dot) {
  char *out;
  ck_assert_int_eq(run_graph("", "--model mlp", &out), 0);
  ck_assert_msg_contains(out, "model mlp, batch 64, device cpu:0\n");
  ck_assert_msg_contains(out, "\nPasses");
  ck_assert_msg_contains(out, "\nMemory");
  ck_assert_msg_contains(out, "order kept");
  ck_assert_msg_contains(out, "compile (all of it)");
  free(out);

  char dir[] = "/tmp/tyto-graph-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[64], args[128];
  snprintf(path, sizeof path, "%s/mlp.dot", dir);
  snprintf(args, sizeof args, "--model mlp --dot '%s'", path);
  ck_assert_int_eq(run_graph("", args, &out), 0);
  free(out);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "--dot wrote no %s", path);
  char head[16] = "";
  ck_assert_ptr_nonnull(fgets(head, sizeof head, f));
  fclose(f);
  ck_assert_msg(strncmp(head, "digraph", 7) == 0, "dot starts with '%s'", head);
  unlink(path);

  /* A directory that does not exist: a runtime failure, exit 1. */
  snprintf(args, sizeof args, "--model mlp --dot '%s/no/such/dir/x.dot'", dir);
  ck_assert_int_eq(run_graph("", args, &out), 1);
  ck_assert_msg_contains(out, "tyto-graph: --dot: ");
  free(out);
  rmdir(dir);
}
END_TEST

/* The figures of device entry i of a report. */
static json_t *device_at(json_t *root, size_t i) {
  json_t *d = json_array_get(json_object_get(root, "devices"), i);
  ck_assert_msg(d != NULL, "no devices[%zu]", i);
  return d;
}

/* The copy of the tensor named `name`, or NULL. */
static json_t *copy_of(json_t *root, const char *name) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(root, "copies"), i, c) {
    const char *n = json_string_value(json_object_get(c, "name"));
    if (n && strcmp(n, name) == 0)
      return c;
  }
  return NULL;
}

/* Pinned placement with nothing pinned (the built-in models pin no
 * tensor) puts every node on the first device: over cpu and the test
 * device the program is the one-device program, the test device holds
 * nothing and nothing is copied. */
START_TEST(pinned_without_pins_stays_on_the_first_device) {
  json_t *one = run_json("--model mlp --json");
  json_t *root =
      run_json("--model mlp --devices cpu,part --placement pinned --json");
  check_consistent(root);
  ck_assert_str_eq(json_string_value(json_object_get(root, "placement")),
                   "pinned");
  ck_assert_str_eq(json_string_value(json_object_get(root, "device")), "cpu:0");
  ck_assert_int_eq(json_array_size(json_object_get(root, "devices")), 2);
  json_t *cpu = device_at(root, 0), *part = device_at(root, 1),
         *alone = device_at(one, 0);
  ck_assert_str_eq(json_string_value(json_object_get(cpu, "id")), "cpu:0");
  ck_assert_str_eq(json_string_value(json_object_get(part, "id")), "part:0");
  ck_assert_int_eq(num(part, "device"), 1);
  static const char *const keys[] = {
      "nodes",       "kernels",      "fallbacks",        "planned_bytes",
      "arena_bytes", "pinned_bytes", "lower_bound_bytes"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    ck_assert_msg(num(cpu, keys[i]) == num(alone, keys[i]),
                  "cpu:0 %s %lld, alone %lld", keys[i],
                  (long long)num(cpu, keys[i]), (long long)num(alone, keys[i]));
    ck_assert_msg(num(part, keys[i]) == 0, "part:0 %s %lld", keys[i],
                  (long long)num(part, keys[i]));
  }
  ck_assert_int_eq(num(root, "kernels"), num(one, "kernels"));
  ck_assert_int_eq(json_array_size(json_object_get(root, "copies")), 0);
  json_decref(root);
  json_decref(one);

  char *out;
  ck_assert_int_eq(
      run_graph("", "--model mlp --devices cpu,part --placement pinned", &out),
      0);
  ck_assert_msg_contains(
      out, "model mlp, batch 64, devices cpu:0 part:0, placement pinned\n");
  ck_assert_msg_contains(out, "\nplacement: 2 devices, 0 copies between them");
  free(out);

  /* Without --placement the library reads TYTO_PLACEMENT, and the header
   * says so. */
  ck_assert_int_eq(run_graph("TYTO_PLACEMENT=pinned",
                             "--model mlp --devices cpu,part", &out),
                   0);
  ck_assert_msg_contains(out, "devices cpu:0 part:0, placement "
                              "TYTO_PLACEMENT=pinned\n");
  free(out);
  ck_assert_int_eq(run_graph("", "--model mlp --devices cpu,part", &out), 0);
  ck_assert_msg_contains(out, "devices cpu:0 part:0, placement pinned (the "
                              "default)\n");
  ck_assert_msg_contains(out, "\nplacement: 2 devices, 0 copies");
  free(out);
}
END_TEST

/* The test device first: everything wants it, and what it refuses (the
 * matrix products, reductions, log_softmax) falls back to the CPU, with a
 * warning and copies both ways. --strict makes the first refusal an
 * error. */
START_TEST(pinned_on_the_test_device_falls_back_to_the_cpu) {
  json_t *root =
      run_json("--model mlp --devices part,cpu --placement pinned --json");
  check_consistent(root);
  ck_assert_str_eq(json_string_value(json_object_get(root, "device")),
                   "part:0");
  json_t *part = device_at(root, 0), *cpu = device_at(root, 1);
  ck_assert_str_eq(json_string_value(json_object_get(part, "id")), "part:0");
  ck_assert_int_eq(num(part, "device"), 0);
  ck_assert_int_eq(num(cpu, "device"), 1);
  ck_assert_int_eq(num(part, "fallbacks"), 0);
  ck_assert_int_gt(num(part, "nodes"), 0);
  /* Every node on the CPU is one the test device refused. */
  ck_assert_int_gt(num(cpu, "nodes"), 0);
  ck_assert_int_eq(num(cpu, "fallbacks"), num(cpu, "nodes"));
  /* fc1.w [784,128] f32 is read by the first matrix product (CPU) and
   * updated by Adam (the test device): it crosses once per run. */
  json_t *c = copy_of(root, "fc1.w");
  ck_assert_msg(c != NULL, "no copy of fc1.w");
  ck_assert_int_eq(num(c, "bytes"), 784 * 128 * 4);
  ck_assert_str_eq(json_string_value(json_object_get(c, "op")), "parameter");
  size_t i;
  int to_cpu = 0, to_part = 0;
  json_array_foreach(json_object_get(root, "copies"), i, c) {
    to_cpu |= num(c, "to") == 1;
    to_part |= num(c, "to") == 0;
  }
  ck_assert(to_cpu && to_part);
  json_decref(root);

  char *out;
  ck_assert_int_eq(
      run_graph("", "--model mlp --devices part,cpu --placement pinned", &out),
      0);
  ck_assert_msg_contains(out, "devices part:0 cpu:0, placement pinned\n");
  ck_assert_msg_contains(out, "runs on cpu:0: part:0 refuses it");
  ck_assert_msg_contains(out, "\nplacement: 2 devices, ");
  ck_assert_msg_contains(out, "'fc1.w' (parameter) ");
  free(out);

  ck_assert_int_eq(run_graph("",
                             "--model mlp --devices part,cpu --placement "
                             "pinned --strict",
                             &out),
                   1);
  ck_assert_msg_contains(out, "tyto-graph: compile: strict placement: ");
  ck_assert_msg_contains(out, "cannot run on part:0");
  free(out);
}
END_TEST

/* A fresh directory for the device profiles (XDG_CACHE_HOME), so that
 * automatic placement measures here and writes nothing in $HOME. */
static void cache_dir(char *dir, size_t n, char *env, size_t n_env) {
  snprintf(dir, n, "/tmp/tyto-graph-cache-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(env, n_env, "XDG_CACHE_HOME='%s'", dir);
}

/* Removes it and what was cached there (the profiles; PoCL's and the
 * OpenCL plugin's kernel caches when the OpenCL plugin loads). */
static void cache_dir_remove(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir);
  ck_assert_int_eq(test_popen(cmd, NULL), 0);
}

/* Automatic placement over cpu and the test device: a consistent report
 * over the two, whatever the measured profiles decide. */
START_TEST(auto_over_the_test_device) {
  char dir[64], env[128];
  cache_dir(dir, sizeof dir, env, sizeof env);
  json_t *root = run_json_env(
      env, "--model mlp --devices cpu,part:0 --placement auto --json");
  check_consistent(root);
  ck_assert_str_eq(json_string_value(json_object_get(root, "placement")),
                   "auto");
  ck_assert_int_eq(json_array_size(json_object_get(root, "devices")), 2);
  ck_assert_str_eq(json_string_value(json_object_get(device_at(root, 1), "id")),
                   "part:0");
  json_decref(root);
  cache_dir_remove(dir);
}
END_TEST

/* Whether this machine has an OpenCL device tyto-graph can select (PoCL
 * on CI machines); says why not when it has none. Selecting it alone with
 * --placement is the cheapest probe: a usage error (one device) when it
 * is there, a selection that cannot be satisfied when it is not. */
static int have_opencl(void) {
  char *out;
  int rc =
      run_graph("", "--model mlp --devices opencl:0 --placement auto", &out);
  int missing = strstr(out, "cannot be satisfied") != NULL;
  if (missing)
    fprintf(stderr, "skipped: no OpenCL device:\n%s", out);
  else
    ck_assert_msg(rc == 2 && strstr(out, "selects one device (opencl:0)"),
                  "exit %d:\n%s", rc, out);
  free(out);
  return !missing;
}

/* The CPU and the OpenCL device: automatic placement gives a report over
 * both (which nodes go where is the profiles' choice), its text adds the
 * placement report and the dot one cluster per device; pinned placement
 * keeps everything on the CPU. */
START_TEST(cpu_and_opencl) {
  if (!have_opencl())
    return;
  char dir[64], env[128];
  cache_dir(dir, sizeof dir, env, sizeof env);
  json_t *root = run_json_env(
      env, "--model mlp --devices cpu,opencl:0 --placement auto --json");
  check_consistent(root);
  ck_assert_str_eq(json_string_value(json_object_get(root, "placement")),
                   "auto");
  ck_assert_int_eq(json_array_size(json_object_get(root, "devices")), 2);
  ck_assert_str_eq(json_string_value(json_object_get(device_at(root, 0), "id")),
                   "cpu:0");
  ck_assert_str_eq(json_string_value(json_object_get(device_at(root, 1), "id")),
                   "opencl:0");
  ck_assert(json_is_array(json_object_get(root, "copies")));
  size_t n_copies = json_array_size(json_object_get(root, "copies"));
  json_decref(root);

  char path[128], args[256], *out;
  snprintf(path, sizeof path, "%s/mlp.dot", dir);
  snprintf(args, sizeof args,
           "--model mlp --devices cpu,opencl:0 --placement auto --dot '%s'",
           path);
  ck_assert_int_eq(run_graph(env, args, &out), 0);
  ck_assert_msg_contains(
      out, "model mlp, batch 64, devices cpu:0 opencl:0, placement auto\n");
  char line[96];
  snprintf(line, sizeof line, "\nplacement: 2 devices, %zu cop%s between them",
           n_copies, n_copies == 1 ? "y" : "ies");
  ck_assert_msg_contains(out, line);
  free(out);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "--dot wrote no %s", path);
  static char dot[1 << 20];
  size_t n = fread(dot, 1, sizeof dot - 1, f);
  dot[n] = '\0';
  fclose(f);
  unlink(path);
  ck_assert_msg_contains(dot, "subgraph cluster_0 {");
  ck_assert_msg_contains(dot, "label=\"cpu:0\"");
  ck_assert_msg_contains(dot, "label=\"opencl:0\"");

  root = run_json_env(
      env, "--model mlp --devices cpu,opencl:0 --placement pinned --json");
  check_consistent(root);
  ck_assert_int_eq(json_array_size(json_object_get(root, "copies")), 0);
  ck_assert_int_eq(num(device_at(root, 1), "nodes"), 0);
  ck_assert_int_eq(num(device_at(root, 1), "kernels"), 0);
  json_decref(root);
  cache_dir_remove(dir);
}
END_TEST

START_TEST(usage_errors_exit_2) {
  static const struct {
    const char *args, *message;
  } cases[] = {
      {"--model mlp --frobnicate", "tyto-graph: unknown option '--frobnicate'"},
      {"", "tyto-graph: --model is required: expected mlp, cnn or lstm"},
      {"--model resnet",
       "tyto-graph: --model: expected mlp, cnn or lstm, found 'resnet'"},
      {"--model mlp --batch 0",
       "tyto-graph: --batch: expected a whole number from 1 to 65536, "
       "found '0'"},
      {"--model mlp --batch 12x",
       "tyto-graph: --batch: expected a whole number from 1 to 65536, "
       "found '12x'"},
      {"--model mlp --passes dce,magic",
       "tyto-graph: --passes: unknown pass 'magic' in 'dce,magic': expected "
       "a comma-separated list of dce, cse, fold, algebra, fuse, or none, or "
       "all"},
      {"--model mlp --passes ''", "tyto-graph: --passes: unknown pass ''"},
      {"--model mlp --batch", "tyto-graph: expected a value after '--batch'"},
      {"--model mlp extra", "tyto-graph: unexpected argument 'extra'"},
      {"--model mlp --devices cpu,part --placement fast",
       "tyto-graph: --placement: expected pinned or auto, found 'fast'"},
      {"--model mlp --devices cpu,part --placement",
       "tyto-graph: expected a value after '--placement'"},
      {"--model mlp --devices ''",
       "tyto-graph: --devices: expected a device list such as cpu,opencl:0, "
       "found ''"},
      /* Placement decides between devices: on one it is an error, not an
       * option silently dropped. */
      {"--model mlp --placement auto",
       "tyto-graph: --placement applies to programs on more than one device "
       "only; without --devices the program runs on the first selected "
       "device alone"},
      {"--model mlp --strict",
       "tyto-graph: --strict applies to programs on more than one device "
       "only; without --devices"},
      {"--model mlp --devices cpu --placement pinned",
       "tyto-graph: --placement applies to programs on more than one device "
       "only; --devices 'cpu' selects one device (cpu:0)"},
      {"--model mlp --devices cpu --strict",
       "tyto-graph: --strict applies to programs on more than one device "
       "only; --devices 'cpu' selects one device (cpu:0)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out;
    int rc = run_graph("", cases[i].args, &out);
    ck_assert_msg(rc == 2, "'%s' exited %d:\n%s", cases[i].args, rc, out);
    ck_assert_msg_contains(out, cases[i].message);
    free(out);
  }
  char *out;
  ck_assert_int_eq(run_graph("", "--help", &out), 0);
  ck_assert_msg_contains(out, "usage: tyto-graph --model mlp|cnn|lstm");
  ck_assert_msg_contains(out, "[--devices LIST [--placement pinned|auto] "
                              "[--strict]]");
  ck_assert_msg_contains(out, "\n  --devices LIST    ");
  ck_assert_msg_contains(out, "\n  --placement NAME  ");
  ck_assert_msg_contains(out, "\n  --strict          ");
  free(out);
}
END_TEST

START_TEST(no_device_exits_1) {
  char *out;
  ck_assert_int_eq(run_graph("TYTO_DEVICES=cpu:3", "--model mlp", &out), 1);
  ck_assert_msg_contains(out, "tyto-graph: ");
  ck_assert_msg_contains(out, "cpu:3");
  free(out);

  /* --devices replaces TYTO_DEVICES (cpu here): a device it names that is
   * missing fails with the library's message... */
  ck_assert_int_eq(run_graph("", "--model mlp --devices cpu,cpu:3", &out), 1);
  ck_assert_msg_contains(out, "tyto-graph: device selection 'cpu,cpu:3' "
                              "(from --devices) cannot be satisfied:\n");
  ck_assert_msg_contains(out, "cpu:3");
  free(out);
  /* ... and a missing device in TYTO_DEVICES does not matter beside it. */
  ck_assert_int_eq(
      run_graph("TYTO_DEVICES=cpu:3", "--model mlp --devices cpu", &out), 0);
  ck_assert_msg_contains(out, "model mlp, batch 64, device cpu:0\n");
  free(out);
}
END_TEST

/* A report that does not reach stdout is a failure, told, whether it is
 * text, JSON (one large write) or the help. /dev/full fails every write
 * with ENOSPC; where it is missing, there is nothing to check. */
START_TEST(write_errors_exit_1) {
  struct stat st;
  if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode))
    return;
  static const char *const args[] = {"--model mlp", "--model mlp --json",
                                     "--help", "--version"};
  for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
    char *err;
    int rc = run_graph_to_full(args[i], &err);
    ck_assert_msg(rc == 1, "'%s' >/dev/full exited %d:\n%s", args[i], rc, err);
    ck_assert_msg_contains(err, "tyto-graph: cannot write to stdout: No "
                                "space left on device\n");
    free(err);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("tyto-graph");
  TCase *tc = tcase_create("tyto-graph");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, mlp_json_report);
  tcase_add_test(tc, cnn_json_and_options);
  tcase_add_test(tc, lstm_json_report);
  tcase_add_test(tc, text_report_and_dot);
  tcase_add_test(tc, pinned_without_pins_stays_on_the_first_device);
  tcase_add_test(tc, pinned_on_the_test_device_falls_back_to_the_cpu);
  tcase_add_test(tc, auto_over_the_test_device);
  tcase_add_test(tc, cpu_and_opencl);
  tcase_add_test(tc, usage_errors_exit_2);
  tcase_add_test(tc, no_device_exits_1);
  tcase_add_test(tc, write_errors_exit_1);
  suite_add_tcase(s, tc);
  return test_run(s);
}
