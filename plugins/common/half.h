/*
 * The 16-bit storage formats (ABI 1.5): IEEE 754 binary16 (f16) and
 * bfloat16 (bf16), converted to and from f32 and f64 bit for bit as
 * sdk/docs/ops.md's CAST asks: to nearest with ties to even, NaN kept NaN
 * (quiet, sign kept), infinities and signed zeros kept, overflow to an
 * infinity, f16 subnormals produced and read exactly.
 *
 * Integer arithmetic only, so the results do not depend on the floating
 * point environment (the CPU plugin's threads run with FTZ and DAZ), and
 * written so that GCC vectorises loops of them. Header-only: every plugin
 * and its tests include it; the core has its own copy of the table
 * (core/src/graph/dtype.c), checked against this one by the tests.
 */
#ifndef TYTO_PLUGINS_COMMON_HALF_H
#define TYTO_PLUGINS_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tpc_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float tpc_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- bfloat16 ------------------------------------------------------------ */

/* Exact: a bf16 is the top half of an f32. */
static inline float tpc_bf16_to_f32(uint16_t b) {
  return tpc_bits_f32((uint32_t)b << 16);
}

static inline uint16_t tpc_f32_to_bf16(float f) {
  uint32_t u = tpc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, payload's top kept */
    return (uint16_t)((u >> 16) | 0x0040u);
  /* Ties to even; a carry out of the fraction bumps the exponent, and out
   * of the largest finite value reaches the infinity, as it should. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- binary16 ------------------------------------------------------------ */

static inline float tpc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) /* infinity or NaN (m != 0 stays non-zero) */
    return tpc_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0)
      return tpc_bits_f32(sign);
    /* Subnormal m * 2^-24: normalise (an f32 holds it as a normal). */
    uint32_t s = 0;
    while (!(m & 0x400u)) {
      m <<= 1;
      s++;
    }
    return tpc_bits_f32(sign | ((113u - s) << 23) | ((m & 0x3ffu) << 13));
  }
  return tpc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t tpc_f32_to_f16(float f) {
  uint32_t u = tpc_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t ax = u & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, payload's top kept */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) /* 65520 and up round to the infinity */
    return (uint16_t)(sign | 0x7c00u);
  uint32_t e = ax >> 23;
  if (e < 113) { /* below 2^-14: an f16 subnormal, or zero */
    if (e < 102) /* below 2^-25: rounds to zero */
      return sign;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u, s = 126 - e;
    uint32_t r = mant >> s, rem = mant & ((1u << s) - 1), half = 1u << (s - 1);
    r += rem > half || (rem == half && (r & 1u));
    return (uint16_t)(sign | r);
  }
  uint32_t r = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  r += rem > 0x1000u || (rem == 0x1000u && (r & 1u));
  return (uint16_t)(sign | r);
}

/* ---- from and to f64 ----------------------------------------------------- */

/* d rounded to an f32 by round-to-odd (truncate, then set the last bit if
 * anything was dropped): rounding that once more to a format with at
 * least two fewer fraction bits (f16, bf16) is the correct single rounding
 * of d, where the f32 nearest to d would round twice. Integer only. */
static inline float tpc_f64_to_f32_odd(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint32_t sign = (uint32_t)(u >> 32) & 0x80000000u;
  uint64_t au = u & 0x7fffffffffffffffu;
  if (au >= 0x7ff0000000000000u) /* inf or NaN (fraction's top kept, quiet) */
    return tpc_bits_f32(sign | 0x7f800000u |
                        (au > 0x7ff0000000000000u
                             ? 0x400000u | ((uint32_t)(au >> 29) & 0x7fffffu)
                             : 0u));
  int e = (int)(au >> 52) - 1023;
  if (e > 127) /* beyond every f32: odd rounding keeps FLT_MAX, which any
                  narrower format rounds to its infinity */
    return tpc_bits_f32(sign | 0x7f7fffffu);
  if (e < -150) /* far below f32's subnormals: a sticky bit is all */
    return tpc_bits_f32(sign | (au ? 1u : 0u));
  uint64_t mant = (au & 0xfffffffffffffu) | (e > -1023 ? 1ull << 52 : 0);
  uint32_t r;
  if (e >= -126) { /* an f32 normal: drop 29 bits */
    r = ((uint32_t)(e + 127) << 23) | (uint32_t)((mant >> 29) & 0x7fffffu);
    r |= (mant & ((1ull << 29) - 1)) != 0;
  } else { /* an f32 subnormal: drop 29 + (-126 - e) bits */
    int s = 29 + (-126 - e);
    r = (uint32_t)(mant >> s);
    r |= (mant & ((1ull << s) - 1)) != 0;
  }
  return tpc_bits_f32(sign | r);
}

static inline uint16_t tpc_f64_to_bf16(double d) {
  return tpc_f32_to_bf16(tpc_f64_to_f32_odd(d));
}

static inline uint16_t tpc_f64_to_f16(double d) {
  return tpc_f32_to_f16(tpc_f64_to_f32_odd(d));
}

#endif
