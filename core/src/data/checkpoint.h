/*
 * The checkpoint's internals, shared by safetensors.c (the container, the
 * file format) and checkpoint.c (checking a checkpoint against a model,
 * and a program's parameters in and out). Internal to core/src/data/.
 */
#ifndef TYTO_DATA_CHECKPOINT_H
#define TYTO_DATA_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/checkpoint.h>

#include "../runtime/nameidx.h"

typedef struct entry {
  char *name;
  tyto_checkpoint_dtype dtype;
  int rank;
  int64_t shape[TYTO_MAX_RANK];
  size_t bytes;
  void *data;
  uint64_t begin, end; /* data_offsets, while loading */
} entry;

struct tyto_checkpoint {
  entry *e;
  size_t n, cap;
  char **keys, **vals;
  size_t n_meta, cap_meta;
  nameidx by_name, by_key; /* positions in e[] and in keys[] */
  char *source; /* the file it came from, for messages; NULL if built */
};

/* A growing string for messages that list many things. */
typedef struct strbuf {
  char *s;
  size_t len, cap;
  int oom;
} strbuf;

/* Appends a printf-formatted string to b (b->oom set on failure). */
void ck_printf(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends "f32[784,64]". */
void ck_type(strbuf *b, tyto_checkpoint_dtype d, int rank,
             const int64_t *shape);
int ck_dtype_ok(tyto_checkpoint_dtype d);
size_t ck_dtype_size(tyto_checkpoint_dtype d);
/* The file ck came from, or "(in memory)", for messages. */
const char *ck_source(const tyto_checkpoint *ck);
/* The entry named name, or NULL. */
entry *ck_find(const tyto_checkpoint *ck, const char *name);

#endif
