/*
 * A set of names with a value each, hashed (uthash), for lookups by name
 * in collections whose size a file controls: checkpoint tensors and
 * metadata, config keys. Keeps loading linear in the number of names.
 */
#ifndef TYTO_RUNTIME_NAMEIDX_H
#define TYTO_RUNTIME_NAMEIDX_H

#include <stddef.h>

struct nameidx_item;

typedef struct nameidx {
  struct nameidx_item *head; /* NULL when empty */
} nameidx;

/* Adds name -> value. 0 when added, 1 when the name was there already
 * (its value is left alone), -1 when out of memory (nothing added). */
int nameidx_put(nameidx *ix, const char *name, size_t value);

/* 1 and *value when the name is there, else 0. */
int nameidx_get(const nameidx *ix, const char *name, size_t *value);

/* Frees every item; the index is empty afterwards. */
void nameidx_free(nameidx *ix);

#endif
