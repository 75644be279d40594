/*
 * Logging. Lines go to the user's sink, or to stderr as
 * "tyto: warning: message" / "tyto[cuda]: info: message".
 */
#include "config.h"

#include "log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const level_names[] = {"error", "warning", "info", "debug"};

const char *rt_log_level_name(tyto_log_level level) {
  return (unsigned)level < 4 ? level_names[level] : "debug";
}

int rt_log_level_parse(const char *s) {
  if (!s)
    return -1;
  if (strcasecmp(s, "error") == 0)
    return TYTO_LOG_ERROR;
  if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0)
    return TYTO_LOG_WARN;
  if (strcasecmp(s, "info") == 0)
    return TYTO_LOG_INFO;
  if (strcasecmp(s, "debug") == 0)
    return TYTO_LOG_DEBUG;
  return -1;
}

void rt_logv(const rt_logger *lg, tyto_log_level level, const char *origin,
             const char *fmt, va_list ap) {
  if (!lg || level > lg->level)
    return;
  char line[2048];
  vsnprintf(line, sizeof line, fmt, ap);
  if (lg->fn) {
    lg->fn(lg->user, level, origin ? origin : "tyto", line);
    return;
  }
  /* One fprintf per line: stdio's stream lock keeps lines whole. */
  if (!origin || strcmp(origin, "tyto") == 0)
    fprintf(stderr, "tyto: %s: %s\n", rt_log_level_name(level), line);
  else
    fprintf(stderr, "tyto[%s]: %s: %s\n", origin, rt_log_level_name(level),
            line);
}

void rt_log(const rt_logger *lg, tyto_log_level level, const char *origin,
            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_logv(lg, level, origin, fmt, ap);
  va_end(ap);
}
