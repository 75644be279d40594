/*
 * A plugin host for tests that drive a device plugin directly through
 * <tyto/plugin.h> (dlopen, no libtyto): the error type and the host's error
 * services, and the counters and macros the checks use. Each test adds its
 * own log() and option() and builds its tyto_plugin_host from them.
 */
#ifndef TYTO_TESTS_PLUGIN_HOST_H
#define TYTO_TESTS_PLUGIN_HOST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

struct tyto_plugin_error {
  int code;
  char msg[2048];
};

static int failures, checks;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

static tyto_plugin_error oom_error = {TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                      "out of memory"};

static tyto_plugin_error *host_error_new(tyto_plugin_code code, const char *fmt,
                                         ...) {
  tyto_plugin_error *e = malloc(sizeof *e);
  va_list ap;
  if (e == NULL)
    return &oom_error;
  e->code = (int)code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return e;
}

static void err_free(tyto_plugin_error *e) {
  if (e != &oom_error)
    free(e);
}

/* Expects success; prints and frees an error. Returns 1 when OK. */
static int ok_(tyto_plugin_error *e, const char *what, int line) {
  checks++;
  if (e == NULL)
    return 1;
  failures++;
  fprintf(stderr, "FAIL line %d: %s: error %d: %s\n", line, what, e->code,
          e->msg);
  err_free(e);
  return 0;
}
#define OK(call) ok_((call), #call, __LINE__)

/* Expects an error of `code` whose message contains `needle` (may be NULL). */
static void expect_err_(tyto_plugin_error *e, int code, const char *needle,
                        const char *what, int line) {
  checks++;
  if (e == NULL) {
    failures++;
    fprintf(stderr, "FAIL line %d: %s: expected error %d, got success\n", line,
            what, code);
    return;
  }
  if (e->code != code || (needle && !strstr(e->msg, needle))) {
    failures++;
    fprintf(stderr,
            "FAIL line %d: %s: expected error %d containing \"%s\", got %d: "
            "%s\n",
            line, what, code, needle ? needle : "", e->code, e->msg);
  } else if (getenv("TYTO_TEST_VERBOSE")) {
    fprintf(stderr, "  ok (expected error %d): %s\n", e->code, e->msg);
  }
  err_free(e);
}
#define EXPECT_ERR(call, code, needle)                                         \
  expect_err_((call), (code), (needle), #call, __LINE__)

#endif /* TYTO_TESTS_PLUGIN_HOST_H */
