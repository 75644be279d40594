/*
 * A reference for the 16-bit formats written for the tests, independent of
 * plugins/common/half.h (which the plugins use): a value is rounded to a
 * binary format of p significand bits by scaling it to an integer
 * significand and rounding that with rint() (to nearest, ties to even, in
 * the default rounding mode), in double arithmetic, which is exact here;
 * encoding and decoding build the bits from the value's exponent and
 * significand. tests/cuda/test_cuda_half_src checks it against half.h on
 * the host, so that a GPU test comparing with it compares with something
 * known to be right.
 */
#ifndef TYTO_TESTS_CUDA_HALF_REF_H
#define TYTO_TESTS_CUDA_HALF_REF_H

#include <math.h>
#include <stdint.h>

/* A binary format: significand bits p (the implicit one included), the
 * exponents of its normal numbers emin .. emax, its width in bits. */
typedef struct ref_fmt {
  int p, emin, emax, bits;
} ref_fmt;

static const ref_fmt REF_F16 = {11, -14, 15, 16};
static const ref_fmt REF_BF16 = {8, -126, 127, 16};
static const ref_fmt REF_F32 = {24, -126, 127, 32};

/* x rounded to f: to nearest, ties to even; beyond the largest finite
 * value (after rounding) an infinity; NaN, infinities and the sign of a
 * zero kept. */
static inline double ref_round(double x, const ref_fmt *f) {
  if (isnan(x) || isinf(x) || x == 0)
    return x;
  int e;
  (void)frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int E = e - 1 < f->emin ? f->emin : e - 1;
  int q = E - (f->p - 1); /* the exponent of one unit in the last place */
  double v = ldexp(rint(ldexp(x, -q)), q);
  if (fabs(v) >= ldexp(1, f->emax + 1))
    return copysign(INFINITY, x);
  return copysign(v, x); /* rint(-0.25) is -0 already; keeps it so */
}

/* The bits of v, which f holds exactly (NaN: the quiet NaN of sign 0). */
static inline uint32_t ref_encode(double v, const ref_fmt *f) {
  const int ebits = f->bits - f->p;
  const uint32_t sign = signbit(v) ? UINT32_C(1) << (f->bits - 1) : 0;
  const uint32_t emask = (UINT32_C(1) << ebits) - 1;
  const uint32_t frac = UINT32_C(1) << (f->p - 2);
  if (isnan(v))
    return (emask << (f->p - 1)) | frac;
  if (isinf(v))
    return sign | (emask << (f->p - 1));
  if (v == 0)
    return sign;
  int e;
  (void)frexp(v, &e);
  if (e - 1 < f->emin) /* subnormal: a multiple of 2^(emin - p + 1) */
    return sign | (uint32_t)ldexp(fabs(v), -(f->emin - f->p + 1));
  uint32_t m = (uint32_t)ldexp(fabs(v), -(e - 1 - (f->p - 1)));
  return sign | ((uint32_t)(e - 1 + f->emax) << (f->p - 1)) |
         (m - (UINT32_C(1) << (f->p - 1)));
}

/* The value of bits b of format f. */
static inline double ref_decode(uint32_t b, const ref_fmt *f) {
  const int ebits = f->bits - f->p;
  const uint32_t emask = (UINT32_C(1) << ebits) - 1;
  const uint32_t e = (b >> (f->p - 1)) & emask;
  const uint32_t m = b & ((UINT32_C(1) << (f->p - 1)) - 1);
  const double s = (b >> (f->bits - 1)) & 1 ? -1.0 : 1.0;
  if (e == emask)
    return m ? NAN : s * INFINITY;
  if (e == 0)
    return s * ldexp(m, f->emin - f->p + 1);
  return s * ldexp((double)(m | (UINT32_C(1) << (f->p - 1))),
                   (int)e - f->emax - (f->p - 1));
}

/* x rounded to f, as bits. */
static inline uint32_t ref_bits(double x, const ref_fmt *f) {
  return ref_encode(ref_round(x, f), f);
}

#endif /* TYTO_TESTS_CUDA_HALF_REF_H */
