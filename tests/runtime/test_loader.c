/*
 * Plugin loading: the test-only plugins each fail in one way, the loader
 * reports exactly that (the messages users see), and the others still load.
 */
#include "common.h"

#include <tyto/plugin.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const tyto_found_plugin *find(const tyto_context *ctx,
                                     const char *name) {
  for (size_t i = 0; i < tyto_context_found_plugin_count(ctx); i++) {
    const tyto_found_plugin *p = tyto_context_found_plugin(ctx, i);
    if (strcmp(p->name, name) == 0)
      return p;
  }
  ck_abort_msg("plugin %s was not found at all", name);
  return NULL;
}

static tyto_context *inspect(const char *devices) {
  tyto_context_options o;
  test_options(&o, 1);
  o.devices = devices;
  tyto_context *ctx = NULL;
  ck_assert_int_eq(tyto_context_inspect(&o, &ctx), TYTO_OK);
  return ctx;
}

/* TYTO_PLUGIN_ABI_MINOR as a string literal, for the loader's messages. */
#define STR_(x) #x
#define STR(x) STR_(x)
#define ABI_MINOR_STR STR(TYTO_PLUGIN_ABI_MINOR)

START_TEST(other_abi_major_is_refused) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *p = find(ctx, "badabi");
  ck_assert_int_eq(p->status, TYTO_FOUND_REFUSED);
  ck_assert_uint_eq(p->abi_major, 2);
  ck_assert_uint_eq(p->abi_minor, 3);
  ck_assert_str_eq(p->reason,
                   "built for plugin ABI 2.3, but this tyto (" PACKAGE_VERSION
                   ") speaks plugin ABI 1." ABI_MINOR_STR
                   "; rebuild the plugin against "
                   "tyto-plugin 1.x");
  ck_assert_str_eq(p->path, TEST_EXTRA_PLUGIN_DIR "/tyto_plugin_badabi.la");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(failing_init_is_reported) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *p = find(ctx, "initfail");
  ck_assert_int_eq(p->status, TYTO_FOUND_FAILED);
  ck_assert_str_eq(p->reason, "init failed: the frobnicator is not plugged in");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(missing_entry_point_is_refused) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *p = find(ctx, "noentry");
  ck_assert_int_eq(p->status, TYTO_FOUND_REFUSED);
  ck_assert_str_eq(p->reason,
                   "entry point tyto_plugin_noentry_LTX_init not found (a "
                   "plugin in tyto_plugin_noentry.so must export it; see "
                   "sdk/docs/plugin-abi.md)");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(plugin_claiming_nothing) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *p = find(ctx, "nothing");
  ck_assert_int_eq(p->status, TYTO_FOUND_LOADED);
  ck_assert_uint_eq(p->n_devices, 0);
  ck_assert_ptr_null(p->reason);
  ck_assert_str_eq(p->vendor, "tyto tests");
  /* Its refusal of the CPU is listed, with its reason. */
  int seen = 0;
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    if (strcmp(d->plugin, "nothing") != 0)
      continue;
    seen++;
    ck_assert_int_eq(d->claimed, 0);
    ck_assert_ptr_null(d->id);
    ck_assert_str_eq(d->reason, "this test plugin claims nothing, on purpose");
  }
  ck_assert_int_eq(seen, 1);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(the_others_still_load) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *cpu = find(ctx, "cpu");
  ck_assert_int_eq(cpu->status, TYTO_FOUND_LOADED);
  ck_assert_uint_eq(cpu->n_devices, 1);
  ck_assert_uint_eq(cpu->abi_major, 1);
  ck_assert_ptr_null(tyto_context_selection_error(ctx));
  ck_assert_str_eq(tyto_device_get_info(tyto_context_device(ctx, 0))->id,
                   "cpu:0");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(unloadable_file_reports_path_and_dlerror) {
  char dir[] = "/tmp/tyto-garbage-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/tyto_plugin_garbage.so", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 16; i++)
    fputs("this is not an ELF file, whatever its name says\n", f);
  fclose(f);
  tyto_context_options o;
  test_options(&o, 0);
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:%s", dir, TEST_PLUGIN_DIRS);
  o.plugin_path = dirs;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  const tyto_found_plugin *p = find(ctx, "garbage");
  ck_assert_int_eq(p->status, TYTO_FOUND_FAILED);
  ck_assert_str_eq(p->path, path);
  /* dlerror() names the file and the problem. */
  char expected[256];
  snprintf(expected, sizeof expected, "cannot be loaded: %s: ", path);
  ck_assert_msg_contains(p->reason, expected);
  ck_assert_msg_contains(p->reason, "ELF");
  tyto_context_free(ctx);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* A FIFO (or a libtool archive that is one) named like a plugin is
 * refused without being opened: the dynamic linker would wait on it. */
START_TEST(fifo_named_like_a_plugin_is_refused) {
  char dir[] = "/tmp/tyto-fifo-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char so[128], la[128];
  snprintf(so, sizeof so, "%s/tyto_plugin_pipe.so", dir);
  snprintf(la, sizeof la, "%s/tyto_plugin_pipela.la", dir);
  ck_assert_int_eq(mkfifo(so, 0600), 0);
  ck_assert_int_eq(mkfifo(la, 0600), 0);
  tyto_context_options o;
  test_options(&o, 0);
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:%s", dir, TEST_PLUGIN_DIRS);
  o.plugin_path = dirs;
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  const char *names[] = {"pipe", "pipela"};
  for (int i = 0; i < 2; i++) {
    const tyto_found_plugin *p = find(ctx, names[i]);
    ck_assert_int_eq(p->status, TYTO_FOUND_FAILED);
    ck_assert_str_eq(p->reason,
                     "cannot be loaded: is a FIFO, not a regular file");
  }
  ck_assert_ptr_nonnull(tyto_context_find_device(ctx, "cpu:0"));
  tyto_context_free(ctx);
  unlink(so);
  unlink(la);
  rmdir(dir);
}
END_TEST

START_TEST(first_on_the_path_wins) {
  /* A second copy of the cpu plugin later on the path is shadowed. */
  char dir[] = "/tmp/tyto-shadow-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char link[128], target[4096];
  snprintf(link, sizeof link, "%s/tyto_plugin_cpu.la", dir);
  const char *dirs = TEST_PLUGIN_DIRS;
  size_t first = strcspn(dirs, ":");
  snprintf(target, sizeof target, "%.*s/tyto_plugin_cpu.la", (int)first, dirs);
  tyto_context_options o;
  test_options(&o, 0);
  char path[8192];
  snprintf(path, sizeof path, "%s:%s", TEST_PLUGIN_DIRS, dir);
  o.plugin_path = path;
  /* A libtool archive resolves its .so relative to its own directory, so
   * copy the tree's layout with a symlink to the .libs folder. */
  char libs_link[160], libs_target[4096];
  snprintf(libs_link, sizeof libs_link, "%s/.libs", dir);
  snprintf(libs_target, sizeof libs_target, "%.*s/.libs", (int)first, dirs);
  ck_assert_int_eq(symlink(target, link), 0);
  ck_assert_int_eq(symlink(libs_target, libs_link), 0);
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  size_t n_cpu = 0;
  for (size_t i = 0; i < tyto_context_found_plugin_count(ctx); i++) {
    const tyto_found_plugin *p = tyto_context_found_plugin(ctx, i);
    if (strcmp(p->name, "cpu") != 0)
      continue;
    if (n_cpu++ == 0) {
      ck_assert_int_eq(p->status, TYTO_FOUND_LOADED);
      continue;
    }
    ck_assert_int_eq(p->status, TYTO_FOUND_SHADOWED);
    char expected[4200];
    snprintf(expected, sizeof expected,
             "shadowed by %s, found earlier on the search path", target);
    ck_assert_str_eq(p->reason, expected);
  }
  ck_assert_uint_eq(n_cpu, 2);
  tyto_context_free(ctx);
  unlink(link);
  unlink(libs_link);
  rmdir(dir);
}
END_TEST

/* Strict selection: the message users see for each kind of failure. */
static void selection_fails(const char *devices, const char *expected) {
  tyto_context_options o;
  test_options(&o, 1);
  o.devices = devices;
  tyto_context *ctx = (tyto_context *)1;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  ck_assert_ptr_null(ctx);
  ck_assert_str_eq(tyto_errmsg(), expected);
}

START_TEST(selection_errors_name_device_and_reason) {
  char dirs[4096], msg[8192];
  snprintf(dirs, sizeof dirs, "%s:%s", test_plugin_dirs(),
           TEST_EXTRA_PLUGIN_DIR);

  snprintf(msg, sizeof msg,
           "device selection 'cpu,nosuch:0' (from options) cannot be "
           "satisfied:\ndevice nosuch:0: plugin not available: no plugin "
           "named 'nosuch' was found (searched %s); install it or add its "
           "directory to TYTO_PLUGIN_PATH",
           dirs);
  selection_fails("cpu,nosuch:0", msg);

  selection_fails("cpu:1", "device selection 'cpu:1' (from options) cannot "
                           "be satisfied:\ndevice cpu:1: no such device: "
                           "plugin cpu has 1 device");

  selection_fails("badabi:0",
                  "device selection 'badabi:0' (from options) cannot be "
                  "satisfied:\ndevice badabi:0: plugin not available: plugin "
                  "badabi (" TEST_EXTRA_PLUGIN_DIR "/tyto_plugin_badabi.la) "
                  "built for plugin ABI 2.3, but this tyto (" PACKAGE_VERSION
                  ") speaks plugin ABI 1." ABI_MINOR_STR
                  "; rebuild the plugin against "
                  "tyto-plugin 1.x");

  selection_fails(
      "initfail",
      "device selection 'initfail' (from options) "
      "cannot be satisfied:\ndevice initfail:*: "
      "plugin not available: plugin initfail (" TEST_EXTRA_PLUGIN_DIR
      "/tyto_plugin_initfail.la) init failed: the "
      "frobnicator is not plugged in");
}
END_TEST

START_TEST(optional_entries_are_skipped_not_fatal) {
  tyto_context_options o;
  test_options(&o, 1);
  o.devices = "nosuch:0?,nothing?,cpu";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  ck_assert_str_eq(tyto_context_selection(ctx), "cpu:0");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(one_card_many_plugins_and_open_failures) {
  /* On a made-up machine with two NVIDIA cards, the fake GPU plugin claims
   * both, refuses the AMD card, and cannot open its second device. */
  tyto_context_options o;
  test_options(&o, 1);
  o.topology_xml = TEST_DATA_DIR "/dual-socket-gpus.xml";
  o.devices = "fakegpu:1";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_ERR_NOT_FOUND);
  ck_assert_str_eq(tyto_errmsg(),
                   "device selection 'fakegpu:1' (from options) cannot be "
                   "satisfied:\ndevice fakegpu:1: cannot be opened: device 1 "
                   "is busy (test)");

  o.devices = NULL; /* default: everything usable, the CPU first */
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  /* Other plugins of this build (OpenCL on PoCL) may add devices too. */
  ck_assert_str_eq(tyto_device_get_info(tyto_context_device(ctx, 0))->id,
                   "cpu:0");
  ck_assert_ptr_nonnull(tyto_context_find_device(ctx, "fakegpu:0"));
  ck_assert_ptr_null(tyto_context_find_device(ctx, "fakegpu:1"));
  int claimed = 0, refused = 0;
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    if (strcmp(d->plugin, "fakegpu") != 0)
      continue;
    if (d->claimed) {
      ck_assert_int_eq(d->pci_index, claimed);
      ck_assert_str_eq(d->pci_bus_id,
                       claimed ? "0000:b1:00.0" : "0000:17:00.0");
      ck_assert_int_eq(d->numa_node, claimed);
      ck_assert_str_eq(d->name, "GH100 [H100 SXM5 80GB]");
      ck_assert_int_eq(d->selected, claimed == 0);
      claimed++;
    } else {
      ck_assert_str_eq(d->pci_bus_id, "0000:b2:00.0");
      ck_assert_str_eq(d->reason, "not an NVIDIA card");
      ck_assert_str_eq(d->name, "Aqua Vanjaram [Instinct MI300X]");
      refused++;
    }
  }
  ck_assert_int_eq(claimed, 2);
  ck_assert_int_eq(refused, 1);

  /* Memory on the fake device round-trips through the host table. */
  tyto_device *gpu = tyto_context_find_device(ctx, "fakegpu:0");
  ck_assert_ptr_nonnull(gpu);
  tyto_buffer *b;
  ck_assert_int_eq(tyto_buffer_new(gpu, 16, &b), TYTO_OK);
  ck_assert_int_eq(tyto_buffer_write(b, 0, "0123456789abcdef", 16), TYTO_OK);
  char back[17] = {0};
  ck_assert_int_eq(tyto_buffer_read(b, 4, back, 8), TYTO_OK);
  ck_assert_str_eq(back, "456789ab");
  tyto_buffer_free(b);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(sdk_template_plugin_works) {
  const char *path = test_write_file("[template]\nmemory_mib = 3\n");
  tyto_context_options o;
  test_options(&o, 1);
  o.config_path = path;
  o.devices = "template:0";
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  tyto_device *dev = tyto_context_device(ctx, 0);
  const tyto_device_info *info = tyto_device_get_info(dev);
  ck_assert_str_eq(info->id, "template:0");
  ck_assert_str_eq(info->vendor, "Example Corp.");
  ck_assert_uint_eq(info->memory_bytes, 3u << 20);
  tyto_buffer *b;
  ck_assert_int_eq(tyto_buffer_new(dev, 100, &b), TYTO_OK);
  ck_assert_int_eq(tyto_buffer_write(b, 10, "tyto", 5), TYTO_OK);
  char back[5];
  ck_assert_int_eq(tyto_buffer_read(b, 10, back, 5), TYTO_OK);
  ck_assert_str_eq(back, "tyto");
  ck_assert_int_eq(tyto_buffer_read(b, 98, back, 5), TYTO_ERR_INVALID_ARGUMENT);
  tyto_buffer_free(b);
  tyto_context_free(ctx);
  unlink(path);
}
END_TEST

START_TEST(hostile_plugins_are_contained) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *bad = find(ctx, "badopts");
  ck_assert_int_eq(bad->status, TYTO_FOUND_REFUSED);
  ck_assert_str_eq(bad->reason,
                   "option 1 has an invalid key (expected [a-z0-9_]+)");
  /* Devices claimed before a probe fails are not usable. */
  const tyto_found_plugin *cf = find(ctx, "claimfail");
  ck_assert_int_eq(cf->status, TYTO_FOUND_LOADED);
  ck_assert_uint_eq(cf->n_devices, 0);
  ck_assert_str_eq(cf->reason,
                   "probe failed: the device vanished during the probe");
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    if (strcmp(d->plugin, "claimfail") == 0) {
      ck_assert_int_eq(d->selected, 0);
      ck_assert_str_eq(d->reason,
                       "probe failed: the device vanished during the probe");
    }
  }
  ck_assert_ptr_null(tyto_context_find_device(ctx, "claimfail:0"));
  tyto_context_free(ctx);
}
END_TEST

/* Runs tyto-conform on test plugin NAME's shared object; returns its exit
 * status and its output (stdout and stderr) in out[size]. */
static int conform(const char *name, char *out, size_t size) {
  char cmd[8192], cpu[4096];
  const char *dirs = TEST_PLUGIN_DIRS;
  snprintf(cpu, sizeof cpu, "%.*s/.libs/tyto_plugin_cpu.so",
           (int)strcspn(dirs, ":"), dirs);
  snprintf(cmd, sizeof cmd,
           "'%s/tyto-conform' '%s/.libs/tyto_plugin_%s.so' --reference '%s' "
           "2>&1",
           TEST_TOOLS_DIR, TEST_EXTRA_PLUGIN_DIR, name, cpu);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* libtyto refuses the plugin with `reason`, and tyto-conform refuses it too
 * (exit 2) with the same message: both run core/src/runtime/abicheck.c. */
static void refused_alike(const char *name, tyto_found_status status,
                          const char *reason) {
  tyto_context *ctx = inspect(NULL);
  const tyto_found_plugin *p = find(ctx, name);
  ck_assert_int_eq(p->status, status);
  ck_assert_str_eq(p->reason, reason);
  tyto_context_free(ctx);
  char out[8192];
  ck_assert_int_eq(conform(name, out, sizeof out), 2);
  ck_assert_msg(strstr(out, reason) != NULL,
                "tyto-conform on %s: expected the loader's message \"%s\", "
                "found:\n%s",
                name, reason, out);
}

START_TEST(loader_and_kit_refuse_alike) {
  refused_alike("nullfn", TYTO_FOUND_REFUSED,
                "required function device_fns.copy_d2d is missing (NULL)");
  refused_alike("shorttable", TYTO_FOUND_REFUSED,
                "required function device_fns.copy_d2d is missing (NULL)");
  refused_alike("misname", TYTO_FOUND_REFUSED,
                "calls itself 'othername' but its file is named for "
                "'misname'; rename the file tyto_plugin_othername.so");
  refused_alike("badopts", TYTO_FOUND_REFUSED,
                "option 1 has an invalid key (expected [a-z0-9_]+)");
  refused_alike("badabi", TYTO_FOUND_REFUSED,
                "built for plugin ABI 2.3, but this tyto (" PACKAGE_VERSION
                ") speaks plugin ABI 1." ABI_MINOR_STR
                "; rebuild the plugin against "
                "tyto-plugin 1.x");
  refused_alike("noentry", TYTO_FOUND_REFUSED,
                "entry point tyto_plugin_noentry_LTX_init not found (a "
                "plugin in tyto_plugin_noentry.so must export it; see "
                "sdk/docs/plugin-abi.md)");
  refused_alike("initfail", TYTO_FOUND_FAILED,
                "init failed: the frobnicator is not plugged in");
}
END_TEST

START_TEST(buffers_outliving_their_context) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  tyto_context *ctx;
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
  tyto_buffer *b;
  ck_assert_int_eq(tyto_buffer_new(tyto_context_device(ctx, 0), 64, &b),
                   TYTO_OK);
  ck_assert_int_eq(tyto_buffer_copy(b, 0, b, 16, 32),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "tyto_buffer_copy: source [16, +32) and "
                                  "destination [0, +32) overlap in one buffer");
  ck_assert_int_eq(tyto_buffer_copy(b, 0, b, 32, 32), TYTO_OK);
  tyto_context_free(ctx); /* warns and releases the buffer's memory */
  ck_assert_int_eq(tyto_buffer_write(b, 0, "x", 1), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "tyto_buffer_write: the buffer's context was freed");
  tyto_buffer_free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loader");
  TCase *tc = tcase_create("loader");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, other_abi_major_is_refused);
  tcase_add_test(tc, failing_init_is_reported);
  tcase_add_test(tc, missing_entry_point_is_refused);
  tcase_add_test(tc, plugin_claiming_nothing);
  tcase_add_test(tc, the_others_still_load);
  tcase_add_test(tc, unloadable_file_reports_path_and_dlerror);
  tcase_add_test(tc, fifo_named_like_a_plugin_is_refused);
  tcase_add_test(tc, first_on_the_path_wins);
  tcase_add_test(tc, selection_errors_name_device_and_reason);
  tcase_add_test(tc, optional_entries_are_skipped_not_fatal);
  tcase_add_test(tc, one_card_many_plugins_and_open_failures);
  tcase_add_test(tc, sdk_template_plugin_works);
  tcase_add_test(tc, hostile_plugins_are_contained);
  tcase_add_test(tc, loader_and_kit_refuse_alike);
  tcase_add_test(tc, buffers_outliving_their_context);
  suite_add_tcase(s, tc);
  return test_run(s);
}
