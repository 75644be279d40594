/*
 * perf mode: times a few heavy kernels (matmul, conv2d, an elementwise op
 * and a fused chain on large tensors) on a device: warm-up launches, then
 * the best of N launch+synchronise rounds.
 */
#ifndef TYTO_CONFORM_PERF_H
#define TYTO_CONFORM_PERF_H

#include "catalogue.h"
#include "device.h"

typedef struct cf_bench {
  cf_case c;
  double work;      /* floating-point operations or bytes moved per launch */
  const char *unit; /* "GFLOP/s" or "GB/s" */
} cf_bench;

/* The benchmarks for dtype; *out is malloc'ed (free()). -1: out of memory. */
int cf_perf_benches(uint32_t dtype, cf_bench **out, size_t *n);

/* Times b on d: best seconds per launch over `reps` rounds after `warmup`.
 * Returns a cf_status; err holds the message when not CF_RAN. */
cf_status cf_perf_time(cf_device *d, cf_bench *b, int warmup, int reps,
                       double *best, char *err, size_t size);

#endif
