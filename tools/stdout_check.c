#include "stdout_check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int stdout_flushed(const char *prog) {
  int err = errno;
  if (fflush(stdout) != 0)
    err = errno;
  else if (!ferror(stdout))
    return 0;
  fprintf(stderr, "%s: cannot write to stdout: %s\n", prog,
          err ? strerror(err) : "a write failed");
  return -1;
}
