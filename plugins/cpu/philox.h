/*
 * Philox-4x32-10 and the conversions tyto's RANDOM_* ops use, exactly as
 * sdk/docs/random.md defines them. Header-only, C99, no dependencies: a
 * plugin for another device can copy this file as it is (or translate it
 * line by line to CUDA C or OpenCL C) and reproduce the CPU's uniform and
 * bernoulli streams bit for bit.
 *
 * Philox: J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11. Checked against Random123's
 * known-answer vectors (tests/cpu/test_random.c).
 */
#ifndef TYTO_PHILOX_H
#define TYTO_PHILOX_H

#include <stdint.h>

#define TYTO_PHILOX_M0 UINT32_C(0xD2511F53)
#define TYTO_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define TYTO_PHILOX_W0 UINT32_C(0x9E3779B9) /* golden ratio */
#define TYTO_PHILOX_W1 UINT32_C(0xBB67AE85) /* sqrt(3) - 1 */

/* One Philox-4x32 round (Salmon et al., section 3.3, with the lane order of
 * Random123's philox4x32round). */
static inline void tyto_philox_round(uint32_t c[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)TYTO_PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)TYTO_PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  c[0] = hi1 ^ c[1] ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k[1];
  c[3] = lo0;
}

/* Philox-4x32-10: out = the 4 words of block (ctr, key). The key is bumped
 * by the Weyl constants between rounds (ten rounds, nine bumps). */
static inline void tyto_philox4x32_10(const uint32_t ctr[4],
                                      const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k[0] += TYTO_PHILOX_W0;
      k[1] += TYTO_PHILOX_W1;
    }
    tyto_philox_round(c, k);
  }
  out[0] = c[0];
  out[1] = c[1];
  out[2] = c[2];
  out[3] = c[3];
}

/* The block of tyto's stream number n for a 64-bit seed: key = (low, high
 * 32 bits of seed), counter = (low, high 32 bits of n, 0, 0). Element i of
 * an op's row-major output with offset `off` uses n = off + i/4 (mod 2^64)
 * and word i%4 of the block. */
static inline void tyto_philox_block(uint64_t seed, uint64_t n,
                                     uint32_t out[4]) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), 0, 0};
  tyto_philox4x32_10(ctr, key, out);
}

/* The block of stream n at step s (an op with a step input): counter words
 * 2 and 3 hold the low and high 32 bits of s. Step 0 is the block above. */
static inline void tyto_philox_block_step(uint64_t seed, uint64_t n, uint64_t s,
                                          uint32_t out[4]) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), (uint32_t)s,
                     (uint32_t)(s >> 32)};
  tyto_philox4x32_10(ctr, key, out);
}

/* Uniform on (0, 1) for f32: ((r >> 9) + 0.5) * 2^-23. Exact in binary32
 * (24 significant bits at most), never 0 or 1, symmetric about 1/2. */
static inline float tyto_philox_u01_f32(uint32_t r) {
  return ((float)(r >> 9) + 0.5f) * 0x1p-23f;
}

/* Uniform on (0, 1) for f64 (and for bernoulli in either dtype):
 * (r + 0.5) * 2^-32. Exact in binary64, never 0 or 1. */
static inline double tyto_philox_u01_f64(uint32_t r) {
  return ((double)r + 0.5) * 0x1p-32;
}

#endif
