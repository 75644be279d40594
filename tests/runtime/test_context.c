/* Context set-up: config file search, precedence, search path, topology. */
#include "common.h"

#include <sched.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tyto-ctx-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void write_at(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Environment-aware options: no IGNORE_ENV, but only build-tree plugins. */
static void env_options(tyto_context_options *o) {
  test_options(o, 0);
  o->flags = TYTO_CONTEXT_NO_INSTALLED_PLUGINS;
  o->config_path = NULL;
}

static void clear_env(void) {
  unsetenv("TYTO_CONFIG");
  unsetenv("TYTO_DEVICES");
  unsetenv("TYTO_PLUGIN_PATH");
  unsetenv("TYTO_LOG_LEVEL");
}

START_TEST(config_search_order) {
  make_tmpdir();
  char cwd_conf[128], xdg[128], xdg_conf[160], explicit_conf[128], old[512];
  snprintf(cwd_conf, sizeof cwd_conf, "%s/tyto.conf", tmpdir);
  snprintf(xdg, sizeof xdg, "%s/xdg", tmpdir);
  snprintf(xdg_conf, sizeof xdg_conf, "%s/tyto/tyto.conf", xdg);
  snprintf(explicit_conf, sizeof explicit_conf, "%s/explicit.conf", tmpdir);
  ck_assert_int_eq(mkdir(xdg, 0700), 0);
  char sub[160];
  snprintf(sub, sizeof sub, "%s/tyto", xdg);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  write_at(cwd_conf, "log_level = info\n");
  write_at(xdg_conf, "log_level = error\n");
  write_at(explicit_conf, "log_level = debug\n");
  ck_assert_ptr_nonnull(getcwd(old, sizeof old));
  ck_assert_int_eq(chdir(tmpdir), 0);
  clear_env();
  setenv("XDG_CONFIG_HOME", xdg, 1);

  tyto_context_options o;
  env_options(&o);
  tyto_context *ctx;

  setenv("TYTO_CONFIG", explicit_conf, 1);
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_config_path(ctx), explicit_conf);
  tyto_context_free(ctx);

  unsetenv("TYTO_CONFIG");
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_config_path(ctx), "tyto.conf");
  tyto_context_free(ctx);

  unlink(cwd_conf);
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_config_path(ctx), xdg_conf);
  tyto_context_free(ctx);

  /* options.config_path "" reads nothing, whatever exists. */
  o.config_path = "";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_ptr_null(tyto_context_config_path(ctx));
  tyto_context_free(ctx);
  o.config_path = NULL;

  setenv("TYTO_CONFIG", "/nonexistent/tyto.conf", 1);
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  ck_assert_ptr_null(ctx);
  ck_assert_str_eq(tyto_errmsg(), "TYTO_CONFIG names /nonexistent/tyto.conf, "
                                  "which does not exist; fix the path or "
                                  "unset TYTO_CONFIG");
  unlink(xdg_conf);
  unlink(explicit_conf);
  rmdir(sub);
  rmdir(xdg);
  ck_assert_int_eq(chdir(old), 0);
  rmdir(tmpdir);
  unsetenv("XDG_CONFIG_HOME");
  clear_env();
}
END_TEST

START_TEST(config_errors_fail_the_context) {
  const char *path = test_write_file("devices = cpu\nbogus = 1\n[cpu\n");
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = path;
  tyto_context *ctx = (tyto_context *)1;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  ck_assert_ptr_null(ctx);
  char expected[512];
  snprintf(expected, sizeof expected,
           "%s:2: unknown key 'bogus' (expected devices, plugin_path or "
           "log_level)\n%s:3: section header is missing ']': '[cpu'",
           path, path);
  ck_assert_str_eq(tyto_errmsg(), expected);
  unlink(path);
}
END_TEST

START_TEST(plugin_section_keys_are_checked) {
  const char *path = test_write_file("[template]\nmemory_mib = 4\n"
                                     "memory_gib = 1\n[cpu]\ntreads = 2\n");
  tyto_context_options o;
  test_options(&o, 1);
  o.config_path = path;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  char expected[512];
  snprintf(expected, sizeof expected,
           "%s:3: unknown key 'memory_gib' in [template] (template accepts: "
           "memory_mib)\n%s:5: unknown key 'treads' in [cpu] (cpu accepts: "
           "threads)",
           path, path);
  ck_assert_str_eq(tyto_errmsg(), expected);
  unlink(path);
}
END_TEST

static char logged[4096];
static void capture(void *user, tyto_log_level level, const char *origin,
                    const char *msg) {
  (void)user;
  size_t n = strlen(logged);
  snprintf(logged + n, sizeof logged - n, "%d %s: %s\n", (int)level, origin,
           msg);
}

START_TEST(unknown_section_is_a_warning) {
  const char *path = test_write_file("[cdua]\nallow_tf32 = yes\n");
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = path;
  o.log_level = TYTO_LOG_WARN;
  o.log_fn = capture;
  logged[0] = '\0';
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  char expected[512];
  snprintf(expected, sizeof expected,
           "1 tyto: %s:1: section [cdua] names no loaded plugin; its keys "
           "are ignored\n",
           path);
  ck_assert_str_eq(logged, expected);
  tyto_context_free(ctx);
  unlink(path);
}
END_TEST

START_TEST(plugin_option_reaches_the_plugin) {
  /* memory_mib = 0 is refused by the template plugin's probe, which sees
   * the value only through the host's option() lookup. */
  const char *path = test_write_file("[template]\nmemory_mib = 0\n");
  tyto_context_options o;
  test_options(&o, 1);
  o.config_path = path;
  o.devices = "template";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  ck_assert_str_eq(tyto_errmsg(),
                   "device selection 'template' (from options) cannot be "
                   "satisfied:\ndevice template:*: no usable device: plugin "
                   "template: probe failed: option memory_mib: expected a "
                   "positive whole number of MiB, found '0'");
  unlink(path);
}
END_TEST

START_TEST(only_absent_optional_devices) {
  /* Every entry optional and none present: the message names the devices
   * that are here instead of claiming there are none. */
  tyto_context_options o;
  test_options(&o, 1);
  o.devices = "nosuchplugin?";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(),
                         "cannot be satisfied:\nit names no device that is "
                         "present (its optional entries, marked '?', were "
                         "skipped); the devices here are ");
  ck_assert_msg(strstr(tyto_errmsg(), "no usable device") == NULL, "%s",
                tyto_errmsg());
}
END_TEST

START_TEST(search_path_order) {
  const char *path = test_write_file("plugin_path = /d:/a\n");
  clear_env();
  setenv("TYTO_PLUGIN_PATH", "/c::/a", 1);
  tyto_context_options o;
  env_options(&o);
  o.config_path = path;
  o.plugin_path = "/a:/b";
  o.devices = "cpu?";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  /* No cpu plugin in those directories: the context fails, but says where
   * it looked, in order. */
  ck_assert_msg_contains(tyto_errmsg(), "(searched /a:/b:/c:/d)");
  o.plugin_path = TEST_PLUGIN_DIRS;
  o.flags = 0; /* the installed directory comes last */
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  size_t n = tyto_context_plugin_dir_count(ctx);
  ck_assert_uint_ge(n, 4);
  ck_assert_str_eq(tyto_context_plugin_dir(ctx, n - 4), "/c");
  ck_assert_str_eq(tyto_context_plugin_dir(ctx, n - 3), "/a");
  ck_assert_str_eq(tyto_context_plugin_dir(ctx, n - 2), "/d");
  const char *installed = tyto_context_plugin_dir(ctx, n - 1);
  ck_assert_msg(strstr(installed, "/tyto/plugins") != NULL, "%s", installed);
  ck_assert_ptr_null(tyto_context_plugin_dir(ctx, n));
  tyto_context_free(ctx);
  clear_env();
  unlink(path);
}
END_TEST

START_TEST(devices_precedence) {
  const char *path = test_write_file("devices = nosuch:0\n");
  clear_env();
  tyto_context_options o;
  env_options(&o);
  o.config_path = path;
  tyto_context *ctx;
  /* The config's selection applies... */
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(), "(from config file)");
  /* ...TYTO_DEVICES overrides it... */
  setenv("TYTO_DEVICES", "cpu:0", 1);
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_selection_source(ctx), "TYTO_DEVICES");
  ck_assert_str_eq(tyto_context_selection(ctx), "cpu:0");
  tyto_context_free(ctx);
  /* ...a bad TYTO_DEVICES is an error naming it... */
  setenv("TYTO_DEVICES", "cpu:first", 1);
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  ck_assert_str_eq(tyto_errmsg(),
                   "TYTO_DEVICES='cpu:first': device entry 1 ('cpu:first'): "
                   "expected a device number or '*' after ':'");
  /* ...and the options override both. */
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_selection_source(ctx), "options");
  tyto_context_free(ctx);
  clear_env();
  unlink(path);
}
END_TEST

START_TEST(log_level_from_env) {
  clear_env();
  setenv("TYTO_LOG_LEVEL", "chatty", 1);
  tyto_context_options o;
  env_options(&o);
  o.config_path = "";
  o.log_level = -1;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  ck_assert_str_eq(tyto_errmsg(), "TYTO_LOG_LEVEL: expected error, warn, "
                                  "info or debug, found 'chatty'");
  clear_env();
}
END_TEST

START_TEST(default_selection_is_the_cpu) {
  tyto_context_options o;
  test_options(&o, 0);
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_selection_source(ctx), "default");
  ck_assert_uint_ge(tyto_context_device_count(ctx), 1);
  const tyto_device_info *d0 =
      tyto_device_get_info(tyto_context_device(ctx, 0));
  ck_assert_str_eq(d0->id, "cpu:0");
  ck_assert_int_eq(d0->priority, 0);
  ck_assert_int_eq(d0->selected, 1);
  ck_assert_ptr_eq(tyto_context_find_device(ctx, "cpu:0"),
                   tyto_context_device(ctx, 0));
  ck_assert_ptr_null(tyto_context_find_device(ctx, "cpu:1"));
  ck_assert_ptr_null(tyto_context_selection_error(ctx));
  tyto_context_free(ctx);
}
END_TEST

START_TEST(topology_matches_this_machine) {
  tyto_context_options o;
  test_options(&o, 0);
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  const tyto_topology *t = tyto_context_topology(ctx);
  /* hwloc restricts the topology to this process's CPUs: compare with the
   * kernel's affinity mask, an independent count. */
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  ck_assert_uint_eq(t->pus, (unsigned)CPU_COUNT(&set));
  ck_assert_uint_ge(t->cores, 1);
  ck_assert_uint_le(t->cores, t->pus);
  ck_assert_uint_ge(t->packages, 1);
  ck_assert_uint_ge(t->numa_nodes, 1);
  ck_assert_uint_gt(t->memory_bytes, 0);
  /* The CPU device reports the same cores. */
  const tyto_device_info *cpu =
      tyto_device_get_info(tyto_context_device(ctx, 0));
  ck_assert_uint_eq(cpu->compute_units, t->cores);
  ck_assert_uint_eq(cpu->alignment, 64);
  /* ... and the same memory as the topology: one rule for both. */
  ck_assert_uint_eq(cpu->memory_bytes, t->memory_bytes);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(topology_from_xml) {
  tyto_context_options o;
  test_options(&o, 0);
  o.topology_xml = TEST_DATA_DIR "/dual-socket-gpus.xml";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  const tyto_topology *t = tyto_context_topology(ctx);
  ck_assert_uint_eq(t->packages, 2);
  ck_assert_uint_eq(t->cores, 4);
  ck_assert_uint_eq(t->pus, 8);
  ck_assert_uint_eq(t->numa_nodes, 2);
  ck_assert_str_eq(t->cpu_model, "Test CPU 9000");
  ck_assert_str_eq(t->cpuset, "0-7");
  /* The network card is not a compute device. */
  ck_assert_uint_eq(t->n_pci, 3);
  ck_assert_str_eq(t->pci[0].bus_id, "0000:17:00.0");
  ck_assert_uint_eq(t->pci[0].vendor_id, 0x10de);
  ck_assert_uint_eq(t->pci[0].device_id, 0x2330);
  ck_assert_uint_eq(t->pci[0].class_id, 0x0302);
  ck_assert_int_eq(t->pci[0].numa_node, 0);
  ck_assert_str_eq(t->pci[0].cpuset, "0-3");
  ck_assert_str_eq(t->pci[0].name, "GH100 [H100 SXM5 80GB]");
  ck_assert_str_eq(t->pci[1].bus_id, "0000:b1:00.0");
  ck_assert_int_eq(t->pci[1].numa_node, 1);
  ck_assert_str_eq(t->pci[1].cpuset, "4-7");
  ck_assert_str_eq(t->pci[2].bus_id, "0000:b2:00.0");
  ck_assert_uint_eq(t->pci[2].vendor_id, 0x1002);
  tyto_context_free(ctx);

  o.topology_xml = "/nonexistent.xml";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_IO);
  ck_assert_str_eq(tyto_errmsg(), "hwloc: cannot use topology file "
                                  "'/nonexistent.xml': No such file or "
                                  "directory");
  o.topology_xml = "/etc/hostname";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_IO);
  ck_assert_str_eq(tyto_errmsg(), "hwloc: cannot use topology file "
                                  "'/etc/hostname' (is it hwloc XML, as "
                                  "written by 'lstopo --of xml'?)");
  /* a FIFO is refused, not read (hwloc would wait for a writer) */
  make_tmpdir();
  char fifo[96];
  snprintf(fifo, sizeof fifo, "%s/topo.xml", tmpdir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  o.topology_xml = fifo;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_IO);
  ck_assert_msg_contains(tyto_errmsg(), "topo.xml': is a FIFO, not a regular "
                                        "file");
  unlink(fifo);
  rmdir(tmpdir);
}
END_TEST

START_TEST(relative_plugin_path_follows_the_config_file) {
  make_tmpdir();
  char conf[128];
  snprintf(conf, sizeof conf, "%s/tyto.conf", tmpdir);
  write_at(conf, "plugin_path = vendor/plugins:/abs\n");
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = conf;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  char want[160];
  snprintf(want, sizeof want, "%s/vendor/plugins", tmpdir);
  size_t n = tyto_context_plugin_dir_count(ctx);
  ck_assert_str_eq(tyto_context_plugin_dir(ctx, n - 2), want);
  ck_assert_str_eq(tyto_context_plugin_dir(ctx, n - 1), "/abs");
  tyto_context_free(ctx);
  unlink(conf);
  rmdir(tmpdir);
}
END_TEST

START_TEST(older_options_struct_is_accepted) {
  /* A program built when the options ended at plugin_path. */
  tyto_context_options o;
  test_options(&o, 0);
  o.struct_size = offsetof(tyto_context_options, topology_xml);
  o.topology_xml = "/nonexistent.xml"; /* past struct_size: ignored */
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  tyto_context_free(ctx);
  o.struct_size = 0;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "tyto_context_options.struct_size is 0; initialise the "
                   "options with tyto_context_options_init()");
}
END_TEST

START_TEST(config_that_is_a_directory) {
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = "/tmp";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  ck_assert_str_eq(tyto_errmsg(), "/tmp: cannot read the config file: is a "
                                  "directory, not a regular file");
}
END_TEST

/* TYTO_CONFIG naming a FIFO fails at once instead of waiting for a writer. */
START_TEST(config_that_is_a_fifo) {
  make_tmpdir();
  char fifo[96];
  snprintf(fifo, sizeof fifo, "%s/tyto.conf", tmpdir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  clear_env();
  setenv("TYTO_CONFIG", fifo, 1);
  tyto_context_options o;
  env_options(&o);
  o.plugin_path = TEST_PLUGIN_DIRS;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_CONFIG);
  char want[200];
  snprintf(want, sizeof want,
           "%s: cannot read the config file: is a FIFO, not a regular file",
           fifo);
  ck_assert_str_eq(tyto_errmsg(), want);
  clear_env();
  unlink(fifo);
  rmdir(tmpdir);
}
END_TEST

/* A plugin directory that is not there is reported whichever source named
 * it: the config file (with its line), TYTO_PLUGIN_PATH or the options. */
START_TEST(missing_plugin_dirs_are_reported) {
  const char *path =
      test_write_file("log_level = warn\nplugin_path = /no/such/cfgdir\n");
  clear_env();
  setenv("TYTO_PLUGIN_PATH", "/no/such/envdir:/etc/hostname", 1);
  tyto_context_options o;
  env_options(&o);
  o.config_path = path;
  o.plugin_path = TEST_PLUGIN_DIRS ":/no/such/optdir";
  o.log_level = TYTO_LOG_WARN;
  o.log_fn = capture;
  logged[0] = '\0';
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  char want[1024];
  snprintf(want, sizeof want,
           "1 tyto: tyto_context_options.plugin_path: plugin directory "
           "/no/such/optdir cannot be searched: No such file or directory\n"
           "1 tyto: TYTO_PLUGIN_PATH: plugin directory /no/such/envdir cannot "
           "be searched: No such file or directory\n"
           "1 tyto: TYTO_PLUGIN_PATH: plugin directory /etc/hostname cannot "
           "be searched: not a directory\n"
           "1 tyto: %s:2: plugin_path: plugin directory /no/such/cfgdir "
           "cannot be searched: No such file or directory\n",
           path);
  ck_assert_str_eq(logged, want);
  tyto_context_free(ctx);
  clear_env();
  unlink(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("context");
  TCase *tc = tcase_create("context");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, config_search_order);
  tcase_add_test(tc, config_errors_fail_the_context);
  tcase_add_test(tc, plugin_section_keys_are_checked);
  tcase_add_test(tc, unknown_section_is_a_warning);
  tcase_add_test(tc, plugin_option_reaches_the_plugin);
  tcase_add_test(tc, only_absent_optional_devices);
  tcase_add_test(tc, search_path_order);
  tcase_add_test(tc, devices_precedence);
  tcase_add_test(tc, log_level_from_env);
  tcase_add_test(tc, default_selection_is_the_cpu);
  tcase_add_test(tc, topology_matches_this_machine);
  tcase_add_test(tc, topology_from_xml);
  tcase_add_test(tc, relative_plugin_path_follows_the_config_file);
  tcase_add_test(tc, older_options_struct_is_accepted);
  tcase_add_test(tc, config_that_is_a_directory);
  tcase_add_test(tc, config_that_is_a_fifo);
  tcase_add_test(tc, missing_plugin_dirs_are_reported);
  suite_add_tcase(s, tc);
  return test_run(s);
}
