/* Library version, as a string and as numbers. */
#ifndef TYTO_VERSION_H
#define TYTO_VERSION_H

#include <tyto/status.h>

#define TYTO_VERSION_MAJOR 0
#define TYTO_VERSION_MINOR 1
#define TYTO_VERSION_PATCH 0
#define TYTO_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library actually linked, e.g. "0.1.0". */
TYTO_API const char *tyto_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_VERSION_H */
