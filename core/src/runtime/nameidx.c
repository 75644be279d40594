#include "config.h"

#include "nameidx.h"

#include <stdlib.h>
#include <string.h>

/* Growing the bucket array may fail without losing items: uthash then keeps
 * the table it has. Failing to create the first table drops the item, which
 * nameidx_put sees through `oom`, set by uthash on this thread. */
static _Thread_local int oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (oom = 1)
#include <uthash.h>

typedef struct nameidx_item {
  size_t value;
  UT_hash_handle hh;
  char name[];
} item;

int nameidx_put(nameidx *ix, const char *name, size_t value) {
  if (nameidx_get(ix, name, &(size_t){0}))
    return 1;
  size_t len = strlen(name);
  item *it = malloc(sizeof *it + len + 1);
  if (!it)
    return -1;
  memcpy(it->name, name, len + 1);
  it->value = value;
  oom = 0;
  HASH_ADD_KEYPTR(hh, ix->head, it->name, (unsigned)len, it);
  if (oom) {
    free(it);
    return -1;
  }
  return 0;
}

int nameidx_get(const nameidx *ix, const char *name, size_t *value) {
  item *it = NULL;
  HASH_FIND_STR(ix->head, name, it);
  if (!it)
    return 0;
  *value = it->value;
  return 1;
}

void nameidx_free(nameidx *ix) {
  item *it, *tmp;
  HASH_ITER(hh, ix->head, it, tmp) {
    HASH_DEL(ix->head, it);
    free(it);
  }
  ix->head = NULL;
}
