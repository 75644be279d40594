/* tyto-graph: its JSON report, its dot export, and its exit statuses. */
#include "common.h"

#include <jansson.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs tyto-graph with `args` (shell words) on this tree's CPU plugin;
 * returns its exit status and stdout plus stderr (free it). */
static int run_graph(const char *env, const char *args, char **out) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "env -u TYTO_CONFIG -u TYTO_LOG_LEVEL TYTO_DEVICES=cpu "
           "TYTO_PLUGIN_PATH='%s' %s '%s/tyto-graph' %s 2>&1",
           TEST_PLUGIN_DIRS, env, TEST_TOOLS_DIR, args);
  return test_popen(cmd, out);
}

/* Runs it with `args` and parses stdout as one JSON object. */
static json_t *run_json(const char *args) {
  char *out;
  ck_assert_int_eq(run_graph("", args, &out), 0);
  json_error_t jerr;
  json_t *root = json_loads(out, 0, &jerr);
  ck_assert_msg(root != NULL, "not JSON (%s):\n%s", jerr.text, out);
  free(out);
  return root;
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
  free(out);
}
END_TEST

START_TEST(no_device_exits_1) {
  char *out;
  ck_assert_int_eq(run_graph("TYTO_DEVICES=cpu:3", "--model mlp", &out), 1);
  ck_assert_msg_contains(out, "tyto-graph: ");
  ck_assert_msg_contains(out, "cpu:3");
  free(out);
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
  tcase_add_test(tc, usage_errors_exit_2);
  tcase_add_test(tc, no_device_exits_1);
  suite_add_tcase(s, tc);
  return test_run(s);
}
