/*
 * Error values handed across the plugin ABI, and the per-thread message that
 * every failing public call leaves behind (read with tyto_errmsg()).
 */
#include "config.h"

#include "error.h"
#include "strlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returned when building an error itself runs out of memory, so that
 * error_new never returns NULL. Never freed. */
static struct tyto_plugin_error oom_error = {
    TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
    (char *)"out of memory while reporting an error"};

/* A fixed buffer per thread: no allocation on the failure path and nothing
 * left to free at thread exit. Long messages are cut with "...". */
#define ERRMSG_CAP 8192
static _Thread_local char errmsg[ERRMSG_CAP];

tyto_plugin_error *rt_error_new(tyto_plugin_code code, const char *fmt, ...) {
  tyto_plugin_error *err = malloc(sizeof *err);
  if (!err)
    return &oom_error;
  va_list ap;
  va_start(ap, fmt);
  err->message = rt_vasprintf(fmt, ap);
  va_end(ap);
  if (!err->message) {
    free(err);
    return &oom_error;
  }
  err->code = code;
  return err;
}

void rt_error_free(tyto_plugin_error *err) {
  if (!err || err == &oom_error)
    return;
  free(err->message);
  free(err);
}

const char *rt_error_message(const tyto_plugin_error *err) {
  return err ? err->message : "";
}

tyto_plugin_code rt_error_code(const tyto_plugin_error *err) {
  return err ? err->code : TYTO_PLUGIN_OK;
}

tyto_status rt_status_of(const tyto_plugin_error *err) {
  if (!err)
    return TYTO_OK;
  switch (err->code) {
  case TYTO_PLUGIN_OK: /* an error value always means failure */
    return TYTO_ERR_PLUGIN;
  case TYTO_PLUGIN_ERR_INVALID_ARGUMENT: return TYTO_ERR_INVALID_ARGUMENT;
  case TYTO_PLUGIN_ERR_OUT_OF_MEMORY: return TYTO_ERR_OUT_OF_MEMORY;
  case TYTO_PLUGIN_ERR_UNSUPPORTED: return TYTO_ERR_UNSUPPORTED;
  case TYTO_PLUGIN_ERR_NOT_FOUND: return TYTO_ERR_NOT_FOUND;
  case TYTO_PLUGIN_ERR_UNAVAILABLE: return TYTO_ERR_UNAVAILABLE;
  case TYTO_PLUGIN_ERR_DEVICE: return TYTO_ERR_DEVICE;
  case TYTO_PLUGIN_ERR_INTERNAL: return TYTO_ERR_INTERNAL;
  }
  /* A code from a newer ABI minor. */
  return TYTO_ERR_PLUGIN;
}

tyto_status rt_failv(tyto_status status, const char *fmt, va_list ap) {
  int n = vsnprintf(errmsg, ERRMSG_CAP, fmt, ap);
  if (n >= ERRMSG_CAP)
    memcpy(errmsg + ERRMSG_CAP - 4, "...", 4);
  return status;
}

tyto_status rt_fail(tyto_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_failv(status, fmt, ap);
  va_end(ap);
  return status;
}

tyto_status rt_replace_fail(const char *what, const char *path, const char *why,
                            int rc) {
  if (rc == -2 && !*path)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s", what, why);
  if (rc == -2)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: '%s' %s; give the path of a file", what, path, why);
  return rt_fail(TYTO_ERR_IO, "%s: cannot create a file beside '%s': %s", what,
                 path, why);
}

tyto_status rt_fail_plugin(tyto_plugin_error *err, const char *fmt, ...) {
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  tyto_status st = rt_status_of(err);
  rt_fail(st, "%s: %s", prefix, rt_error_message(err));
  rt_error_free(err);
  return st;
}

void rt_clear_error(void) {
  errmsg[0] = '\0';
}

const char *tyto_errmsg(void) {
  return errmsg;
}

const char *tyto_status_name(tyto_status status) {
  switch (status) {
  case TYTO_OK: return "TYTO_OK";
  case TYTO_ERR_INVALID_ARGUMENT: return "TYTO_ERR_INVALID_ARGUMENT";
  case TYTO_ERR_OUT_OF_MEMORY: return "TYTO_ERR_OUT_OF_MEMORY";
  case TYTO_ERR_UNSUPPORTED: return "TYTO_ERR_UNSUPPORTED";
  case TYTO_ERR_NOT_FOUND: return "TYTO_ERR_NOT_FOUND";
  case TYTO_ERR_UNAVAILABLE: return "TYTO_ERR_UNAVAILABLE";
  case TYTO_ERR_DEVICE: return "TYTO_ERR_DEVICE";
  case TYTO_ERR_INTERNAL: return "TYTO_ERR_INTERNAL";
  case TYTO_ERR_CONFIG: return "TYTO_ERR_CONFIG";
  case TYTO_ERR_IO: return "TYTO_ERR_IO";
  case TYTO_ERR_PLUGIN: return "TYTO_ERR_PLUGIN";
  }
  return "TYTO_ERR_UNKNOWN";
}
