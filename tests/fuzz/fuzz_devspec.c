/* Fuzz target: device selection lists (TYTO_DEVICES). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/devspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  devspec spec;
  char err[512];
  if (devspec_parse(text, &spec, err, sizeof err) == 0) {
    for (size_t i = 0; i < spec.n; i++)
      if (!spec.items[i].plugin || !spec.items[i].plugin[0])
        abort(); /* a parsed entry always names a plugin */
    devspec_free(&spec);
  }
  free(text);
  return 0;
}
