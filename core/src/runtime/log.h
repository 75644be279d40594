/* Leveled logging for the host and, through the host table, for plugins. */
#ifndef TYTO_RUNTIME_LOG_H
#define TYTO_RUNTIME_LOG_H

#include <stdarg.h>

#include <tyto/context.h>

typedef struct rt_logger {
  tyto_log_level level;
  tyto_log_fn fn; /* NULL: stderr */
  void *user;
} rt_logger;

void rt_log(const rt_logger *lg, tyto_log_level level, const char *origin,
            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void rt_logv(const rt_logger *lg, tyto_log_level level, const char *origin,
             const char *fmt, va_list ap);

/* Parses "error", "warn"/"warning", "info", "debug" (any case); -1 if none. */
int rt_log_level_parse(const char *s);
const char *rt_log_level_name(tyto_log_level level);

#endif
