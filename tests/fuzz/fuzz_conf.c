/* Fuzz target: the tyto.conf parser (conf.c over inih). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "runtime/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  FILE *f = fmemopen((void *)data, size, "r");
  if (!f)
    return 0;
  conf cfg;
  conf_init(&cfg);
  conf_parse_stream(&cfg, f, "fuzz.conf");
  /* Every lookup of what was parsed must be safe too. */
  for (size_t i = 0; i < cfg.n_entries; i++)
    (void)conf_lookup(&cfg, cfg.entries[i].section, cfg.entries[i].key);
  fclose(f);
  conf_free(&cfg);
  return 0;
}
