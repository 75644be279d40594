/* Fuzz target: the safetensors checkpoint reader (core/src/data/
 * safetensors.c over jansson). */
#include "config.h"

#include <stdint.h>

#include <tyto/checkpoint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tyto_checkpoint *ck;
  if (tyto_checkpoint_parse(data, size, "fuzz.safetensors", &ck) != TYTO_OK)
    return 0;
  /* Every lookup of what was parsed must be safe too, and what was read
   * must check against itself. */
  size_t n = tyto_checkpoint_count(ck);
  for (size_t i = 0; i < n; i++) {
    tyto_checkpoint_dtype dtype;
    int rank;
    const int64_t *shape;
    const void *values;
    size_t bytes;
    const char *name = tyto_checkpoint_name(ck, i);
    if (tyto_checkpoint_find(ck, name, &dtype, &rank, &shape, &values,
                             &bytes) == TYTO_OK &&
        bytes) {
      volatile unsigned char sink = ((const unsigned char *)values)[bytes - 1];
      (void)sink;
      tyto_checkpoint_spec spec = {name, dtype, rank, shape};
      (void)tyto_checkpoint_expect(ck, 1, &spec, TYTO_CHECKPOINT_ALLOW_EXTRA);
    }
  }
  for (size_t i = 0; i < tyto_checkpoint_meta_count(ck); i++)
    (void)tyto_checkpoint_get_meta(ck, tyto_checkpoint_meta_key(ck, i));
  (void)tyto_checkpoint_expect(ck, 0, NULL, 0);
  tyto_checkpoint_free(ck);
  return 0;
}
