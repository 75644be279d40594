/*
 * The elementwise inner loops, one per op and dtype, over contiguous
 * operands. eltwise.c includes this file once per instruction set with
 * ELT_SUF naming the variant and a `#pragma GCC target` in force, so each
 * loop is compiled (and auto-vectorised) for SSE2, AVX2+FMA and AVX-512.
 * No include guard on purpose.
 *
 * Every loop has the signature of elt_kern: n elements of out from a (b, c);
 * p holds the op's real attributes. Operands may alias exactly (in-place
 * ops), so there is no restrict; GCC versions the loops for that.
 */
#ifndef ELT_SUF
#error "define ELT_SUF before including eltwise_kern.h"
#endif

#define ELT_CAT_(a, b, c) k_##a##_##b##_##c
#define ELT_CAT(a, b, c) ELT_CAT_(a, b, c)
#define ELT_NAME(op, t) ELT_CAT(ELT_SUF, op, t)
#define ELT_TAB_(s) tab_##s##_all
#define ELT_TAB(s) ELT_TAB_(s)

/* e^x in f32 without libm, so that the loops calling it vectorise:
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-7
 * polynomial for e^r (about 1 ulp), then 2^n applied as two halves so that
 * results down to the subnormal range and up to FLT_MAX scale exactly. */
static inline float ELT_CAT(ELT_SUF, expf, v)(float x) {
  const float hi = 88.72283935546875f, lo = -103.972084045410f;
  /* NaN is replaced by 0 here (the result is x again at the end): converting
   * NaN to an integer below would be undefined behaviour. */
  float xc = x > hi ? hi : (x < lo ? lo : (x == x ? x : 0.0f));
  /* n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest even). */
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  y = y * s1 * s2;
  y = x > hi ? INFINITY : (x < lo ? 0.0f : y);
  return x != x ? x : y;
}

#define ELT_EXPF(x) ELT_CAT(ELT_SUF, expf, v)(x)

/* tanh in f32 without libm, so that the loop vectorises: tanh is odd, so
 * it is computed for |x| and given x's sign (tanh(-0) = -0). Below 0.625,
 * Cephes' odd polynomial x + x^3 P(x^2) (relative error 1.3e-7 there);
 * above, 1 - 2 / (e^2|x| + 1) with the e^x above, which reaches 1 exactly
 * from |x| = 9.1 and stays 1 where e^2|x| overflows. Both are computed and
 * one selected, without branches. Within 1.33 ulp of tanh over every
 * float (an exhaustive run; cpu/test_eltwise sweeps it to 2 ulp). */
static inline float ELT_CAT(ELT_SUF, tanhf, v)(float x) {
  float a = fabsf(x), z = a * a;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = a + a * z * p;
  float big = 1.0f - 2.0f / (ELT_EXPF(2.0f * a) + 1.0f);
  float r = copysignf(a < 0.625f ? small : big, x);
  return x != x ? x : r;
}

#define ELT_TANHF(x) ELT_CAT(ELT_SUF, tanhf, v)(x)

/* erf in f32 without libm (glibc's erff ran at 0.4 GB/s, element by
 * element), for GELU: erf is odd, computed for |x| and given x's sign.
 * Below 0.9, x P(x^2), P fitted here for relative error 3e-10 (its
 * constant term split in two, so that the product rounds once); above,
 * 1 - erfc(x) with Numerical Recipes' erfc, t e^(Q(t) - x^2) with
 * t = 1 / (1 + x/2), relative error 1.2e-7, on the e^x above: 0 where
 * e^-x^2 underflows, so erf is 1. Both computed, one selected. Within 2
 * ulp of erf over the floats (an exhaustive run found 1.96, 1.80 with
 * FMA; cpu/test_eltwise sweeps it). */
static inline float ELT_CAT(ELT_SUF, erff, v)(float x) {
  float a = fabsf(x), u = a * a;
  float p = 8.513421198586002e-05f;
  p = p * u - 8.175722905434668e-04f;
  p = p * u + 5.203867796808481e-03f;
  p = p * u - 2.6860512793064117e-02f;
  p = p * u + 1.1283715069293976e-01f;
  p = p * u - 3.7612634897232056e-01f;
  float small = a * 1.128379225730896f + a * (p * u - 5.863538e-8f);
  float t = 1.0f / (1.0f + 0.5f * a);
  float q = 0.17087277f;
  q = q * t - 0.82215223f;
  q = q * t + 1.48851587f;
  q = q * t - 1.13520398f;
  q = q * t + 0.27886807f;
  q = q * t - 0.18628806f;
  q = q * t + 0.09678418f;
  q = q * t + 0.37409196f;
  q = q * t + 1.00002368f;
  q = q * t - 1.26551223f;
  float big = 1.0f - t * ELT_EXPF(q - u);
  float r = copysignf(a < 0.9f ? small : big, x);
  return x != x ? x : r;
}

#define ELT_ERFF(x) ELT_CAT(ELT_SUF, erff, v)(x)

#define ELT_U(op, e32, e64)                                                    \
  static void ELT_NAME(op, f32)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    float *o = o_;                                                             \
    const float *a = a_;                                                       \
    const float pa = p ? (float)p[0] : 0.0f;                                   \
    (void)b_;                                                                  \
    (void)c_;                                                                  \
    (void)pa;                                                                  \
    for (size_t i = 0; i < n; i++) {                                           \
      const float x = a[i];                                                    \
      o[i] = (e32);                                                            \
    }                                                                          \
  }                                                                            \
  static void ELT_NAME(op, f64)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    double *o = o_;                                                            \
    const double *a = a_;                                                      \
    const double pa = p ? p[0] : 0.0;                                          \
    (void)b_;                                                                  \
    (void)c_;                                                                  \
    (void)pa;                                                                  \
    for (size_t i = 0; i < n; i++) {                                           \
      const double x = a[i];                                                   \
      o[i] = (e64);                                                            \
    }                                                                          \
  }

#define ELT_B(op, e32, e64)                                                    \
  static void ELT_NAME(op, f32)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    float *o = o_;                                                             \
    const float *a = a_, *b = b_;                                              \
    (void)c_;                                                                  \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const float x = a[i], y = b[i];                                          \
      o[i] = (e32);                                                            \
    }                                                                          \
  }                                                                            \
  static void ELT_NAME(op, f64)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    double *o = o_;                                                            \
    const double *a = a_, *b = b_;                                             \
    (void)c_;                                                                  \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const double x = a[i], y = b[i];                                         \
      o[i] = (e64);                                                            \
    }                                                                          \
  }

#define ELT_T(op, e32, e64)                                                    \
  static void ELT_NAME(op, f32)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    float *o = o_;                                                             \
    const float *a = a_, *b = b_, *c = c_;                                     \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const float x = a[i], y = b[i], z = c[i];                                \
      o[i] = (e32);                                                            \
    }                                                                          \
  }                                                                            \
  static void ELT_NAME(op, f64)(size_t n, void *o_, const void *a_,            \
                                const void *b_, const void *c_,                \
                                const double *p) {                             \
    double *o = o_;                                                            \
    const double *a = a_, *b = b_, *c = c_;                                    \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const double x = a[i], y = b[i], z = c[i];                               \
      o[i] = (e64);                                                            \
    }                                                                          \
  }

ELT_OPS(ELT_U, ELT_B, ELT_T)

/* The variant's table, indexed [dtype][op code]. */
static const elt_kern ELT_TAB(ELT_SUF)[2][ELT_NOPS] = {
#define ELT_E32(op, e32, e64) [TYTO_PLUGIN_OP_##op] = ELT_NAME(op, f32),
#define ELT_E64(op, e32, e64) [TYTO_PLUGIN_OP_##op] = ELT_NAME(op, f64),
    {ELT_OPS(ELT_E32, ELT_E32, ELT_E32)},
    {ELT_OPS(ELT_E64, ELT_E64, ELT_E64)},
#undef ELT_E32
#undef ELT_E64
};

#undef ELT_EXPF
#undef ELT_TANHF
#undef ELT_ERFF
#undef ELT_U
#undef ELT_B
#undef ELT_T
#undef ELT_NAME
#undef ELT_TAB
#undef ELT_TAB_
#undef ELT_CAT
#undef ELT_CAT_
