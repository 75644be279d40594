/*
 * A reference converter for the tests: doubles to and from the bits of a
 * binary floating-point format (f16, bf16, f32), written from the formats'
 * definitions with frexp/ldexp and exact double arithmetic. It shares no
 * code and no bit tricks with plugins/common/half.h, which the plugin
 * uses: that is what lets the tests check the plugin's conversions.
 *
 * Rounding is to nearest with ties to even, on the exact value of the
 * double: a double's value scaled by a power of two is exact, and so are
 * floor() and the remainder, so there is one rounding and no other.
 */
#ifndef TYTO_TESTS_CPU_HALF_REF_H
#define TYTO_TESTS_CPU_HALF_REF_H

#include <math.h>
#include <stdint.h>

/* A format: total bits, significand bits (the implicit one included),
 * smallest and largest normal exponents. */
typedef struct ref_fmt {
  int bits, p, emin, emax;
} ref_fmt;

static const ref_fmt REF_F16 = {16, 11, -14, 15};
static const ref_fmt REF_BF16 = {16, 8, -126, 127};
static const ref_fmt REF_F32 = {32, 24, -126, 127};

/* x rounded to nearest (ties to even) in f, as f's bits. NaN gives f's
 * quiet NaN of x's sign. */
static inline uint32_t ref_encode(double x, ref_fmt f) {
  const int ebits = f.bits - f.p;
  const uint32_t sign = signbit(x) ? UINT32_C(1) << (f.bits - 1) : 0;
  const uint32_t inf = ((UINT32_C(1) << ebits) - 1) << (f.p - 1);
  if (isnan(x))
    return sign | inf | (UINT32_C(1) << (f.p - 2));
  double a = fabs(x);
  if (isinf(a))
    return sign | inf;
  if (a == 0)
    return sign;
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int lo = e - 1 < f.emin ? f.emin : e - 1;
  int q = lo - (f.p - 1); /* the spacing of f's values around a: 2^q */
  double n = ldexp(a, -q), whole = floor(n), rem = n - whole;
  if (rem > 0.5 || (rem == 0.5 && fmod(whole, 2.0) == 1.0))
    whole += 1;
  double v = ldexp(whole, q);
  if (v >= ldexp(1.0, f.emax + 1))
    return sign | inf; /* beyond the largest finite value */
  if (v < ldexp(1.0, f.emin))
    return sign | (uint32_t)whole; /* a subnormal: whole * 2^q */
  frexp(v, &e);
  uint32_t frac = (uint32_t)(ldexp(v, f.p - e) - ldexp(1.0, f.p - 1));
  uint32_t bias = (UINT32_C(1) << (ebits - 1)) - 1;
  return sign | ((uint32_t)(e - 1 + (int)bias) << (f.p - 1)) | frac;
}

/* The value of f's bits b. */
static inline double ref_decode(uint32_t b, ref_fmt f) {
  const int ebits = f.bits - f.p;
  const uint32_t top = (UINT32_C(1) << ebits) - 1;
  const int bias = (1 << (ebits - 1)) - 1;
  double s = (b >> (f.bits - 1)) & 1 ? -1.0 : 1.0;
  uint32_t e = (b >> (f.p - 1)) & top, m = b & ((UINT32_C(1) << (f.p - 1)) - 1);
  if (e == top)
    return m ? copysign(NAN, s) : s * INFINITY;
  if (e == 0)
    return s * ldexp((double)m, 1 - bias - (f.p - 1));
  return s * ldexp((double)((UINT32_C(1) << (f.p - 1)) + m),
                   (int)e - bias - (f.p - 1));
}

/* x rounded to f, as a double. */
static inline double ref_round(double x, ref_fmt f) {
  return ref_decode(ref_encode(x, f), f);
}

#endif
