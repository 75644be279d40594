/*
 * Small helpers of tyto-train (run.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int curve_add(curve *c, double x, double y) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    double *nx = realloc(c->x, cap * sizeof *nx);
    if (!nx)
      return -1;
    c->x = nx;
    double *ny = realloc(c->y, cap * sizeof *ny);
    if (!ny)
      return -1;
    c->y = ny;
    c->cap = cap;
  }
  c->x[c->n] = x;
  c->y[c->n++] = y;
  return 0;
}

void curve_free(curve *c) {
  free(c->x);
  free(c->y);
}

double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int fail_status(const char *what) {
  fprintf(stderr, PROG ": %s: %s\n", what, tyto_errmsg());
  return -1;
}
