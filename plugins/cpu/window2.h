/*
 * Pooling over 2x2 windows of stride 2 without padding (the pooling of
 * most CNNs), one output row at a time on unit-stride rows: r0 and r1 are
 * the two input rows of output row y (n outputs, 2n inputs each). They do
 * the general loops' operations in the same order (the same bits, NaN
 * and signed zeros included), without their per-element index arithmetic
 * and branches: on real data the general max mispredicts about every
 * other element. x86-64 runs f32 four windows at a time with SSE2.
 */
#ifndef TYTO_CPU_WINDOW2_H
#define TYTO_CPU_WINDOW2_H

#include <stdint.h>

/* y[i]: the maximum of the window (a NaN in it: the last NaN). */
void win2_max_f32(const float *r0, const float *r1, float *y, int64_t n);
void win2_max_f64(const double *r0, const double *r1, double *y, int64_t n);
/* y[i]: ((0 + a) + b + c + d) / 4, a, b the top row's, c, d the bottom's. */
void win2_avg_f32(const float *r0, const float *r1, float *y, int64_t n);
void win2_avg_f64(const double *r0, const double *r1, double *y, int64_t n);
/* The max's gradient: dy[i] at the window's first maximum, row-major (its
 * first NaN, if any), 0 at its other three places, into rows t0, t1. */
void win2_max_back_f32(const float *r0, const float *r1, const float *dy,
                       float *t0, float *t1, int64_t n);
void win2_max_back_f64(const double *r0, const double *r1, const double *dy,
                       double *t0, double *t1, int64_t n);

#endif
