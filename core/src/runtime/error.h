/* Error values of the plugin ABI and the thread's last error message. */
#ifndef TYTO_RUNTIME_ERROR_H
#define TYTO_RUNTIME_ERROR_H

#include <stdarg.h>

#include <tyto/plugin.h>
#include <tyto/status.h>

/* The host's definition of the ABI's opaque error. */
struct tyto_plugin_error {
  tyto_plugin_code code;
  char *message;
};

/* host->error_new: never returns NULL. */
tyto_plugin_error *rt_error_new(tyto_plugin_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rt_error_free(tyto_plugin_error *err);
const char *rt_error_message(const tyto_plugin_error *err);
tyto_plugin_code rt_error_code(const tyto_plugin_error *err);
tyto_status rt_status_of(const tyto_plugin_error *err);

/* Sets the calling thread's message and returns `status`. */
tyto_status rt_fail(tyto_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
tyto_status rt_failv(tyto_status status, const char *fmt, va_list ap);

/* Fails with a plugin error's status and "prefix: message", then frees it. */
tyto_status rt_fail_plugin(tyto_plugin_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The failure `rc` of rt_replace_open() (file.h) on `path`, with the
 * `why` it gave: -2, "what: 'path' is a FIFO, not a regular file; give
 * the path of a file" (invalid argument); -1, "what: cannot create a
 * file beside 'path': why" (I/O). */
tyto_status rt_replace_fail(const char *what, const char *path, const char *why,
                            int rc);

/* Clears the calling thread's message. */
void rt_clear_error(void);

#endif
