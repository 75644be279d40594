/*
 * Error values of the OpenCL plugin: OpenCL status codes turned into names
 * and into tyto_plugin_error values built through the host's error_new().
 */
#ifndef TYTO_OPENCL_ERRORS_H
#define TYTO_OPENCL_ERRORS_H

#include "ocl.h"

/* "CL_OUT_OF_RESOURCES" for -5; "unknown OpenCL error" for codes no
 * header names. Static storage. */
const char *ocl_code_name(cl_int err);

/* The tyto code a failed OpenCL call maps to: allocation failures are
 * OUT_OF_MEMORY, a missing device or compiler UNAVAILABLE, an invalid
 * argument we passed INTERNAL, anything else DEVICE. */
tyto_plugin_code ocl_code_for(cl_int err);

/* An error with a printf-style message. Never returns NULL (error_new never
 * does). The message is cut at 1 KiB: use ocl_error_long for build logs. */
tyto_plugin_error *ocl_error(const tyto_plugin_host *host,
                             tyto_plugin_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* An error for OpenCL call `call` failing with `err`, coded by
 * ocl_code_for(), reading "<call> failed with NAME (err): <what>". */
tyto_plugin_error *ocl_error_cl(const tyto_plugin_host *host, const char *call,
                                cl_int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Copy of `s` with malloc(), or NULL when out of memory. Caller frees.
 * (strdup is POSIX, not C11.) */
char *ocl_strdup(const char *s);

#endif /* TYTO_OPENCL_ERRORS_H */
