/*
 * Runs a fuzz target over every file of its corpus, so that `make check`
 * (built with gcc, no libFuzzer) replays every input found so far. The
 * libFuzzer build of the same target is described in tests/fuzz/README.md.
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(void) {
  DIR *d = opendir(CORPUS_DIR);
  if (!d) {
    fprintf(stderr, "cannot open corpus %s\n", CORPUS_DIR);
    return 1;
  }
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f)
      continue;
    /* The whole file, however large: inputs found with a large -max_len
     * (tests/fuzz/fuzz.sh) must replay as they were found. */
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
      len += got;
      if (len == cap) {
        uint8_t *nb = realloc(buf, cap *= 2);
        if (!nb)
          free(buf);
        buf = nb;
      }
    }
    fclose(f);
    if (!buf) {
      fprintf(stderr, "out of memory reading %s\n", path);
      closedir(d);
      return 1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    n++;
  }
  closedir(d);
  printf("%d inputs replayed from %s\n", n, CORPUS_DIR);
  return n > 0 ? 0 : 1;
}
