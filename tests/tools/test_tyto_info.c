/* tyto-info: its JSON schema, its text, and its exit statuses. */
#include "common.h"

#include <jansson.h>
#include <tyto/plugin.h>
#include <sys/wait.h>

/* Runs tyto-info with `args` (shell words) and the test plugin path;
 * returns its exit status and stdout (free it). */
static int run_info_in(const char *dirs, const char *env, const char *args,
                       char **out) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "env -u TYTO_CONFIG -u TYTO_DEVICES -u TYTO_LOG_LEVEL "
           "TYTO_PLUGIN_PATH='%s' %s '%s/tyto-info' %s 2>&1",
           dirs, env, TEST_TOOLS_DIR, args);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t r; (r = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
    n += r;
    if (n + 1 == cap)
      buf = realloc(buf, cap *= 2);
  }
  buf[n] = '\0';
  int status = pclose(p);
  *out = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_info(const char *env, const char *args, char **out) {
  return run_info_in(TEST_PLUGIN_DIRS ":" TEST_EXTRA_PLUGIN_DIR, env, args,
                     out);
}

static json_t *object_named(json_t *array, const char *key, const char *value) {
  size_t i;
  json_t *o;
  json_array_foreach(array, i, o) {
    json_t *v = json_object_get(o, key);
    if (json_is_string(v) && strcmp(json_string_value(v), value) == 0)
      return o;
  }
  ck_abort_msg("no object with %s = %s", key, value);
  return NULL;
}

START_TEST(json_report) {
  char *out;
  ck_assert_int_eq(run_info("", "--json", &out), 0);
  json_error_t jerr;
  json_t *root = json_loads(out, 0, &jerr);
  ck_assert_msg(root != NULL, "not JSON (%s):\n%s", jerr.text, out);
  ck_assert_int_eq(json_integer_value(json_object_get(root, "abi_major")), 1);

  json_t *plugins = json_object_get(root, "plugins");
  ck_assert(json_is_array(plugins));
  json_t *cpu = object_named(plugins, "name", "cpu");
  ck_assert_str_eq(json_string_value(json_object_get(cpu, "status")), "loaded");
  ck_assert(json_is_null(json_object_get(cpu, "reason")));
  ck_assert_int_eq(json_integer_value(json_object_get(cpu, "abi_major")), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(cpu, "abi_minor")),
                   TYTO_PLUGIN_ABI_MINOR);
  ck_assert(json_is_string(json_object_get(cpu, "path")));
  json_t *bad = object_named(plugins, "name", "badabi");
  ck_assert_str_eq(json_string_value(json_object_get(bad, "status")),
                   "refused");
  ck_assert_int_eq(json_integer_value(json_object_get(bad, "abi_major")), 2);
  ck_assert_msg_contains(json_string_value(json_object_get(bad, "reason")),
                         "built for plugin ABI 2.3");

  json_t *devices = json_object_get(root, "devices");
  json_t *d = object_named(devices, "id", "cpu:0");
  ck_assert_str_eq(json_string_value(json_object_get(d, "plugin")), "cpu");
  ck_assert(json_is_true(json_object_get(d, "selected")));
  ck_assert_int_eq(json_integer_value(json_object_get(d, "priority")), 0);
  ck_assert_int_gt(json_integer_value(json_object_get(d, "memory_bytes")), 0);
  ck_assert(json_is_string(json_object_get(d, "name")));

  json_t *topo = json_object_get(root, "topology");
  ck_assert_int_ge(json_integer_value(json_object_get(topo, "cores")), 1);
  json_t *sel = json_object_get(root, "selection");
  ck_assert_str_eq(
      json_string_value(json_array_get(json_object_get(sel, "devices"), 0)),
      "cpu:0");
  ck_assert(json_is_null(json_object_get(sel, "error")));
  json_decref(root);
  free(out);
}
END_TEST

START_TEST(unsatisfiable_selection_exits_1) {
  char *out;
  ck_assert_int_eq(run_info("TYTO_DEVICES=cpu:3", "--json", &out), 1);
  json_t *root = json_loads(out, 0, NULL);
  ck_assert_ptr_nonnull(root);
  json_t *err = json_object_get(json_object_get(root, "selection"), "error");
  ck_assert_str_eq(json_string_value(err),
                   "device selection 'cpu:3' (from TYTO_DEVICES) cannot be "
                   "satisfied:\ndevice cpu:3: no such device: plugin cpu has 1 "
                   "device");
  json_decref(root);
  free(out);
}
END_TEST

START_TEST(text_report_and_usage_errors) {
  char *out;
  ck_assert_int_eq(
      run_info("", "--topology " TEST_DATA_DIR "/dual-socket-gpus.xml", &out),
      0);
  ck_assert_msg_contains(out, "Topology\n  CPU: Test CPU 9000\n");
  ck_assert_msg_contains(
      out, "2 packages, 4 cores, 8 hardware threads, 2 NUMA nodes");
  ck_assert_msg_contains(
      out, "PCI 0000:17:00.0 [10de:2330] NVIDIA Corporation "
           "GH100 [H100 SXM5 80GB], NUMA node 0; seen as fakegpu:0\n");
  /* claimfail:0, 11 characters, sets the column's width */
  ck_assert_msg_contains(out, "\n  badabi      refused  ABI 2.3");
  ck_assert_msg_contains(
      out, "refused by fakegpu: Aqua Vanjaram [Instinct "
           "MI300X] (0000:b2:00.0)\n              not an NVIDIA card");
  ck_assert_msg_contains(out, "\nSelection (default): cpu:0");
  /* How runs over several processes go with this build. */
#ifdef TYTO_HAVE_MPI
  ck_assert_msg_contains(out, "\nProcesses: MPI; start tyto-train with mpirun");
#else
  ck_assert_msg_contains(out, "\nProcesses: one per run (built without MPI)");
#endif
  /* a device line holds only the parts the device has: no flags, no
   * trailing comma; one compute unit is singular */
  ck_assert_msg_contains(out, "\n  fakegpu:0   selected #");
  ck_assert_msg_contains(out, "  GH100 [H100 SXM5 80GB]\n              test, "
                              "1.0 GiB, 1 compute unit, dtypes f32\n         "
                              "     PCI 0000:17:00.0, NUMA node 0\n");
  free(out);

  /* names longer than the column widen it for every row */
  ck_assert_int_eq(
      run_info_in(TEST_PLUGIN_DIRS ":" TEST_WIDE_PLUGIN_DIR, "",
                  "--topology " TEST_DATA_DIR "/dual-socket-gpus.xml", &out),
      0);
  ck_assert_msg_contains(out, "\n  cpu              loaded   ABI");
  ck_assert_msg_contains(out, "\n  vendor_fakegpu   loaded   ABI");
  ck_assert_msg_contains(out, "\n  vendor_fakegpu:0 selected #");
  ck_assert_msg_contains(out, "  GH100 [H100 SXM5 80GB]\n                   "
                              "test, 1.0 GiB");
  ck_assert_msg_contains(out, "\n  cpu:0            selected #0");
  free(out);

  ck_assert_int_eq(run_info("", "--frobnicate", &out), 2);
  ck_assert_msg_contains(out, "usage: tyto-info");
  free(out);
  ck_assert_int_eq(run_info("TYTO_CONFIG=/nonexistent.conf", "", &out), 2);
  ck_assert_str_eq(out, "tyto-info: TYTO_CONFIG names /nonexistent.conf, which "
                        "does not exist; fix the path or unset TYTO_CONFIG\n");
  free(out);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tyto-info");
  TCase *tc = tcase_create("tyto-info");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, json_report);
  tcase_add_test(tc, unsatisfiable_selection_exits_1);
  tcase_add_test(tc, text_report_and_usage_errors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
