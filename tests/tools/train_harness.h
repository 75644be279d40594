/*
 * What the tyto-train tests share (test_tyto_train.c, test_tyto_train_dp.c):
 * running the tool on this tree's plugins, small synthetic IDX datasets in
 * a temporary directory, reading its JSON report.
 */
#ifndef TYTO_TESTS_TOOLS_TRAIN_HARNESS_H
#define TYTO_TESTS_TOOLS_TRAIN_HARNESS_H
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs tyto-train with `args` on this tree's CPU plugin; returns its exit
 * status (-1 when killed by a signal) and, when out is not NULL, stdout
 * (stderr too when merge). */
static char tmp[64];

/* stderr of the last run without merge, for failure messages. */
static char errlog[128];

/* The device selection the runs use, the plugin directories (the build
 * tree's, plus the partial test plugin's for data-parallel runs) and more
 * environment ("NAME=value ..." or ""). */
static const char *devices = "cpu";
static const char *plugin_dirs = TEST_PLUGIN_DIRS;
static const char *extra_env = "";

static int train(const char *args, int merge, char **out) {
  char cmd[8192];
  snprintf(errlog, sizeof errlog, "%s/stderr.txt", tmp);
  snprintf(cmd, sizeof cmd,
           "env -u TYTO_CONFIG -u TYTO_LOG_LEVEL TYTO_DEVICES=%s "
           "TYTO_PLUGIN_PATH='%s' %s '%s/tyto-train' --no-progress %s 2>%s",
           devices, plugin_dirs, extra_env, TEST_TOOLS_DIR, args,
           merge ? "&1" : errlog);
  return test_popen(cmd, out);
}

/* Runs tyto-train and fails with its stderr unless it exits 0. */
static void train_ok(const char *args, char **out) {
  int rc = train(args, 0, out);
  if (rc != 0) {
    char msg[4096] = "";
    FILE *f = fopen(errlog, "r");
    if (f) {
      size_t n = fread(msg, 1, sizeof msg - 1, f);
      msg[n] = '\0';
      fclose(f);
    }
    ck_abort_msg("tyto-train %s exited %d:\n%s", args, rc, msg);
  }
}

/* Expects exit status 2 and `needle` in the output. */
static void expect_bad(const char *args, const char *needle) {
  char *out;
  int rc = train(args, 1, &out);
  ck_assert_msg(rc == 2, "exit status %d, expected 2, for %s:\n%s", rc, args,
                out);
  ck_assert_msg_contains(out, needle);
  ck_assert_msg(strstr(out, "Segmentation") == NULL, "%s", out);
  free(out);
}

static void path_in_tmp(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", tmp, name);
}

static void be32(FILE *f, uint32_t v) {
  unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 8), (unsigned char)v};
  ck_assert_int_eq(fwrite(b, 1, 4, f), 4);
}

/* Writes <dir>/<split>-images-idx3-ubyte ([n,28,28] bytes) and the labels
 * (n, classes 0..9): each image is bright in the rows of its class, so a
 * network can learn them. magic and extra_labels let cases damage them. */
static void write_split(const char *dir, const char *split, int n,
                        uint32_t magic, int extra_labels, int truncate) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, split);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  be32(f, magic);
  be32(f, (uint32_t)n);
  be32(f, 28);
  be32(f, 28);
  uint32_t seed = 12345;
  for (int i = 0; i < n - (truncate ? 1 : 0); i++)
    for (int p = 0; p < 784; p++) {
      seed = seed * 1103515245u + 12345u;
      int row = p / 28, cls = i % 10;
      int v = (int)((seed >> 16) % 64) + (row / 3 == cls ? 160 : 0);
      fputc(v > 255 ? 255 : v, f);
    }
  fclose(f);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split);
  f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  be32(f, 0x00000801);
  be32(f, (uint32_t)(n + extra_labels));
  for (int i = 0; i < n + extra_labels; i++)
    fputc(i % 10, f);
  fclose(f);
}

static void make_dataset(const char *name, uint32_t magic, int extra_labels,
                         int truncate) {
  char dir[256];
  path_in_tmp(dir, sizeof dir, name);
  ck_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
  write_split(dir, "train", 320, magic, extra_labels, truncate);
  write_split(dir, "t10k", 100, 0x00000803, 0, 0);
}

static void setup(void) {
  snprintf(tmp, sizeof tmp, "/tmp/tyto-train-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  make_dataset("good", 0x00000803, 0, 0);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)size + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  buf[size] = '\0';
  *n = (size_t)size;
  return buf;
}

static json_t *json_of(const char *out) {
  json_error_t e;
  json_t *root = json_loads(out, 0, &e);
  ck_assert_msg(root != NULL, "not JSON (%s):\n%s", e.text, out);
  return root;
}

/* Runs tyto-train (which must exit 0) and parses its --json summary. */
static json_t *train_json(const char *args) {
  char *out;
  train_ok(args, &out);
  json_t *root = json_of(out);
  free(out);
  return root;
}

static double real(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_number(v), "no number '%s'", key);
  return json_number_value(v);
}

static const char *small_net =
    "# a small net with dropout: resumed runs must redraw the same masks\n"
    "input shape=1x28x28\n"
    "conv2d name=c filters=4 kernel=3 stride=2 padding=same activation=relu\n"
    "dropout rate=0.25\n"
    "fully_connected name=h units=16 activation=tanh\n"
    "linear name=out units=10\n";

static void write_text(const char *name, const char *text, char *path,
                       size_t n) {
  path_in_tmp(path, n, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

#endif
