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
#undef ELT_U
#undef ELT_B
#undef ELT_T
#undef ELT_NAME
#undef ELT_TAB
#undef ELT_TAB_
#undef ELT_CAT
#undef ELT_CAT_
