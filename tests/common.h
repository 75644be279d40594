/* Shared set-up for the test suites. */
#ifndef TYTO_TESTS_COMMON_H
#define TYTO_TESTS_COMMON_H

#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tyto/tyto.h>

/* This build tree's plugin directories as the suites use them. Under
 * valgrind the CUDA plugin is left out: loading it maps cuBLAS, cuDNN and
 * cuSOLVER (over a gigabyte of code whose symbols valgrind reads in every
 * process) for a probe that finds no GPU; cuda/test_cuda_plugin covers that
 * probe under valgrind on its own. Static storage. */
static inline const char *test_plugin_dirs(void) {
  static char own[2048];
  const char *base = TEST_PLUGIN_DIRS;
  if (getenv("TYTO_TEST_UNDER_VALGRIND") == NULL)
    return base;
  size_t n = 0;
  for (const char *p = base; *p != '\0';) {
    const char *end = strchr(p, ':');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    const char *tail = "/plugins/cuda";
    int cuda = len >= strlen(tail) &&
               memcmp(p + len - strlen(tail), tail, strlen(tail)) == 0;
    if (!cuda && n + len + 2 < sizeof own) {
      if (n > 0)
        own[n++] = ':';
      memcpy(own + n, p, len);
      n += len;
    }
    p += len + (end != NULL);
  }
  own[n] = '\0';
  return own;
}

/* Options that see only this build tree's plugins (plus, when `extra`, the
 * test-only plugins), no config file and no environment: every test starts
 * from the same, known world. */
static inline void test_options(tyto_context_options *o, int extra) {
  static char dirs[4096];
  tyto_context_options_init(o);
  const char *base = test_plugin_dirs();
  snprintf(dirs, sizeof dirs, "%s%s%s", base, extra ? ":" : "",
           extra ? TEST_EXTRA_PLUGIN_DIR : "");
  o->plugin_path = dirs;
  o->config_path = "";
  o->flags = TYTO_CONTEXT_IGNORE_ENV | TYTO_CONTEXT_NO_INSTALLED_PLUGINS;
  o->log_level = TYTO_LOG_ERROR;
}

/* The build tree's plugin directories (as test_options sets them) and
 * then dir, joined with ':' (static storage; one at a time). */
static inline const char *test_plugin_dirs_and(const char *dir) {
  static char dirs[8192];
  const char *base = test_plugin_dirs();
  size_t n = strlen(base), m = strlen(dir);
  ck_assert_uint_lt(n + m + 2, sizeof dirs);
  memcpy(dirs, base, n);
  dirs[n] = ':';
  memcpy(dirs + n + 1, dir, m + 1);
  return dirs;
}

/* Writes `text` to a fresh temporary file and returns its path (static
 * storage; one at a time). */
static inline const char *test_write_file(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/tyto-test-XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return path;
}

#define ck_assert_msg_contains(haystack, needle)                               \
  ck_assert_msg(strstr((haystack), (needle)) != NULL,                          \
                "expected to find\n  \"%s\"\nin\n  \"%s\"", (needle),          \
                (haystack))

/* Runs `cmd` with the shell; returns its exit status (-1 when a signal
 * ended it) and, when out is not NULL, what it wrote to stdout (malloc'd,
 * NUL-terminated: free it). */
static inline int test_popen(const char *cmd, char **out) {
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  for (size_t r; (r = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
    n += r;
    if (n + 1 == cap) {
      buf = realloc(buf, cap *= 2);
      ck_assert_ptr_nonnull(buf);
    }
  }
  buf[n] = '\0';
  int status = pclose(p);
  if (out)
    *out = buf;
  else
    free(buf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether a context of `devices` opens, asked in a child process so that
 * the device runtimes it loads (PoCL starts threads, which a fork does not
 * carry over) are never loaded in the process the suite forks its tests
 * from: 0 when it opens, 77 when it does not (tyto's message in why), 1
 * when the probe itself failed. */
static inline int test_probe_devices(const char *devices, char *why,
                                     size_t size) {
  int fd[2];
  why[0] = '\0';
  if (pipe(fd) != 0) {
    snprintf(why, size, "pipe failed");
    return 1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, size, "fork failed");
    close(fd[0]);
    close(fd[1]);
    return 1;
  }
  if (pid == 0) {
    close(fd[0]);
    tyto_context_options o;
    test_options(&o, 0);
    o.devices = devices;
    tyto_context *ctx = NULL;
    int rc = 0;
    if (tyto_context_new(&o, &ctx) != TYTO_OK) {
      const char *m = tyto_errmsg();
      ssize_t w = write(fd[1], m, strlen(m));
      (void)w;
      rc = 77;
    }
    tyto_context_free(ctx);
    close(fd[1]);
    _exit(rc);
  }
  close(fd[1]);
  size_t n = 0;
  for (ssize_t r; n + 1 < size && (r = read(fd[0], why + n, size - 1 - n)) > 0;)
    n += (size_t)r;
  why[n] = '\0';
  close(fd[0]);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
    snprintf(why, size, "the probe for %s crashed", devices);
    return 1;
  }
  return WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 77 ? 77 : 1;
}

/* Runs one suite and returns the exit status automake expects. */
/* A test's own directory under /tmp ("/tmp/tyto-NAME-XXXXXX" into dir,
 * 64 bytes), made afresh by each test's fixture and removed with what
 * it holds (plain files and empty subdirectories). */
static inline void test_dir_make(char *dir, const char *name) {
  snprintf(dir, 64, "/tmp/tyto-%.20s-XXXXXX", name);
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static inline void test_dir_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      char p[512];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && unlink(p) != 0)
        rmdir(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* dir/name, in one of two static buffers (so that two fit one call). */
static inline const char *test_dir_path(const char *dir, const char *name) {
  static char p[2][512];
  static int k;
  k ^= 1;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* Entries of dir whose names do not start with '.'. */
static inline size_t test_dir_count(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static inline int test_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
