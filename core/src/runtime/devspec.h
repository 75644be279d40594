/* Device selection lists: "cuda:0,opencl:*,cpu" (TYTO_DEVICES, config). */
#ifndef TYTO_RUNTIME_DEVSPEC_H
#define TYTO_RUNTIME_DEVSPEC_H

#include <stddef.h>
#include <stdint.h>

#define DEVSPEC_ALL (-1)

typedef struct devspec_item {
  char *plugin;  /* [a-z0-9_]+ */
  int32_t index; /* device ordinal, or DEVSPEC_ALL for "plugin:*" / "plugin" */
  int optional;  /* written with a trailing '?': not satisfiable is no error */
} devspec_item;

typedef struct devspec {
  devspec_item *items;
  size_t n;
} devspec;

/* Parses `text`. On error returns -1 and writes a message naming the entry
 * and what was expected into err (nothing is allocated then). */
int devspec_parse(const char *text, devspec *out, char *err, size_t errcap);
void devspec_free(devspec *spec);

#endif
