/*
 * Status codes and error messages shared by every part of the tyto API.
 *
 * Functions that can fail at run time return a tyto_status. On failure they
 * also leave a message for the calling thread, readable with tyto_errmsg()
 * until the next failing tyto call on that thread (like errno/dlerror, but
 * with the full story: what was expected, what was found, what to do).
 */
#ifndef TYTO_STATUS_H
#define TYTO_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TYTO_API __attribute__((visibility("default")))
#else
#define TYTO_API
#endif

typedef enum tyto_status {
  TYTO_OK = 0,
  TYTO_ERR_INVALID_ARGUMENT = 1, /* a caller's argument is wrong */
  TYTO_ERR_OUT_OF_MEMORY = 2,    /* host or device memory exhausted */
  TYTO_ERR_UNSUPPORTED = 3,      /* the device or build lacks a feature */
  TYTO_ERR_NOT_FOUND = 4,        /* a device, plugin, file or key is missing */
  TYTO_ERR_UNAVAILABLE = 5,      /* no driver, device busy or lost */
  TYTO_ERR_DEVICE = 6,           /* a device or its driver failed */
  TYTO_ERR_INTERNAL = 7,         /* a bug in tyto or a plugin */
  TYTO_ERR_CONFIG = 8,           /* the configuration is invalid */
  TYTO_ERR_IO = 9,               /* reading or writing a file failed */
  TYTO_ERR_PLUGIN = 10           /* a plugin could not be loaded or used */
} tyto_status;

/* Short constant name of a status, e.g. "TYTO_ERR_CONFIG". Never NULL. */
TYTO_API const char *tyto_status_name(tyto_status status);

/* The message of the calling thread's most recent failure ("" if none).
 * Owned by tyto; valid until the thread's next tyto call that fails. */
TYTO_API const char *tyto_errmsg(void);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_STATUS_H */
