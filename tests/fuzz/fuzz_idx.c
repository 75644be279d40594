/* Fuzz target: the IDX reader (core/src/data/idx.c), through a file so
 * that zlib's path is the one users take (gzip inputs are decompressed). */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tyto/data.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  if (!path[0])
    snprintf(path, sizeof path, "/tmp/tyto-fuzz-idx-%ld", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (!f)
    return 0;
  size_t wrote = fwrite(data, 1, size, f);
  fclose(f);
  if (wrote != size)
    return 0;
  tyto_idx *x = NULL;
  if (tyto_idx_load(path, &x) == TYTO_OK) {
    /* A loaded file is consistent: every item reads back. */
    int rank = tyto_idx_rank(x);
    if (rank < 1 || rank > TYTO_IDX_MAX_RANK)
      abort();
    size_t numel = 1;
    for (int i = 0; i < rank; i++)
      numel *= (size_t)tyto_idx_shape(x)[i];
    double *v = malloc(numel ? numel * sizeof *v : 1);
    if (v && tyto_idx_read(x, 0, tyto_idx_count(x), TYTO_F64, 1, v,
                           numel * sizeof *v) != TYTO_OK)
      abort();
    free(v);
    tyto_idx_free(x);
  } else if (x) {
    abort(); /* a failed load leaves nothing behind */
  }
  unlink(path);
  return 0;
}
