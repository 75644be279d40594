/*
 * Pooling over 2x2 windows of stride 2 (window2.h).
 */
#include "config.h"

#include <math.h>

#include "window2.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The max's step: v replaces the running maximum m when it is larger or
 * NaN, so that a NaN maximum then stays. */
#define SEL(m, v) ((v) > (m) || (v) != (v) ? (v) : (m))

/* Which of a, b (top row), c, d (bottom row) is the window's first
 * maximum, NaN first: each later element wins only over a non-NaN best it
 * beats, or as a NaN. */
#define FIRST_MAX(T, a, b, c, d, k)                                            \
  do {                                                                         \
    int ib_ = !((a) != (a)) && ((b) > (a) || (b) != (b));                      \
    T m_ = ib_ ? (b) : (a);                                                    \
    int ic_ = !(m_ != m_) && ((c) > m_ || (c) != (c));                         \
    m_ = ic_ ? (c) : m_;                                                       \
    int id_ = !(m_ != m_) && ((d) > m_ || (d) != (d));                         \
    (k) = id_ ? 3 : ic_ ? 2 : ib_ ? 1 : 0;                                     \
  } while (0)

#define SCALAR(T, SUFFIX)                                                      \
  static void max_tail_##SUFFIX(const T *r0, const T *r1, T *y, int64_t i,     \
                                int64_t n) {                                   \
    for (; i < n; i++) {                                                       \
      T m = -(T)INFINITY;                                                      \
      m = SEL(m, r0[2 * i]);                                                   \
      m = SEL(m, r0[2 * i + 1]);                                               \
      m = SEL(m, r1[2 * i]);                                                   \
      y[i] = SEL(m, r1[2 * i + 1]);                                            \
    }                                                                          \
  }                                                                            \
  static void avg_tail_##SUFFIX(const T *r0, const T *r1, T *y, int64_t i,     \
                                int64_t n) {                                   \
    for (; i < n; i++)                                                         \
      y[i] =                                                                   \
          ((((T)0 + r0[2 * i]) + r0[2 * i + 1]) + r1[2 * i] + r1[2 * i + 1]) / \
          (T)4;                                                                \
  }                                                                            \
  static void back_tail_##SUFFIX(const T *r0, const T *r1, const T *dy, T *t0, \
                                 T *t1, int64_t i, int64_t n) {                \
    for (; i < n; i++) {                                                       \
      T a = r0[2 * i], b = r0[2 * i + 1], c = r1[2 * i], d = r1[2 * i + 1],    \
        g = dy[i];                                                             \
      int k;                                                                   \
      FIRST_MAX(T, a, b, c, d, k);                                             \
      t0[2 * i] = k == 0 ? g : (T)0;                                           \
      t0[2 * i + 1] = k == 1 ? g : (T)0;                                       \
      t1[2 * i] = k == 2 ? g : (T)0;                                           \
      t1[2 * i + 1] = k == 3 ? g : (T)0;                                       \
    }                                                                          \
  }

SCALAR(float, f32)
SCALAR(double, f64)

void win2_max_f64(const double *r0, const double *r1, double *y, int64_t n) {
  max_tail_f64(r0, r1, y, 0, n);
}

void win2_avg_f64(const double *r0, const double *r1, double *y, int64_t n) {
  avg_tail_f64(r0, r1, y, 0, n);
}

void win2_max_back_f64(const double *r0, const double *r1, const double *dy,
                       double *t0, double *t1, int64_t n) {
  back_tail_f64(r0, r1, dy, t0, t1, 0, n);
}

#if defined(__SSE2__)
/* Lanes where v replaces m (SEL), as a mask. */
static inline __m128 sel_mask(__m128 m, __m128 v) {
  return _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
}

static inline __m128 blend(__m128 k, __m128 v, __m128 m) {
  return _mm_or_ps(_mm_and_ps(k, v), _mm_andnot_ps(k, m));
}

/* Four windows: a, b the even and odd elements of eight of row 0, c, d
 * of row 1. */
#define LOAD4(r0, r1, i, a, b, c, d)                                           \
  __m128 x0_ = _mm_loadu_ps((r0) + 2 * (i)),                                   \
         x1_ = _mm_loadu_ps((r0) + 2 * (i) + 4),                               \
         z0_ = _mm_loadu_ps((r1) + 2 * (i)),                                   \
         z1_ = _mm_loadu_ps((r1) + 2 * (i) + 4);                               \
  __m128 a = _mm_shuffle_ps(x0_, x1_, _MM_SHUFFLE(2, 0, 2, 0)),                \
         b = _mm_shuffle_ps(x0_, x1_, _MM_SHUFFLE(3, 1, 3, 1)),                \
         c = _mm_shuffle_ps(z0_, z1_, _MM_SHUFFLE(2, 0, 2, 0)),                \
         d = _mm_shuffle_ps(z0_, z1_, _MM_SHUFFLE(3, 1, 3, 1))
#endif

void win2_max_f32(const float *r0, const float *r1, float *y, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) {
    LOAD4(r0, r1, i, a, b, c, d);
    /* SEL(-inf, a) is a, bit for bit (-inf has one encoding). */
    __m128 m = a;
    m = blend(sel_mask(m, b), b, m);
    m = blend(sel_mask(m, c), c, m);
    m = blend(sel_mask(m, d), d, m);
    _mm_storeu_ps(y + i, m);
  }
#endif
  max_tail_f32(r0, r1, y, i, n);
}

void win2_avg_f32(const float *r0, const float *r1, float *y, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps(), q = _mm_set1_ps(4.0f);
  for (; i + 4 <= n; i += 4) {
    LOAD4(r0, r1, i, a, b, c, d);
    __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(zero, a), b), c), d);
    _mm_storeu_ps(y + i, _mm_div_ps(s, q));
  }
#endif
  avg_tail_f32(r0, r1, y, i, n);
}

void win2_max_back_f32(const float *r0, const float *r1, const float *dy,
                       float *t0, float *t1, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) {
    LOAD4(r0, r1, i, a, b, c, d);
    __m128 g = _mm_loadu_ps(dy + i);
    /* FIRST_MAX on four windows: a later element wins where the best so
     * far is not NaN (ordered with itself) and SEL takes it. */
    __m128 kb = _mm_and_ps(_mm_cmpord_ps(a, a), sel_mask(a, b));
    __m128 m = blend(kb, b, a);
    __m128 kc = _mm_and_ps(_mm_cmpord_ps(m, m), sel_mask(m, c));
    m = blend(kc, c, m);
    __m128 kd = _mm_and_ps(_mm_cmpord_ps(m, m), sel_mask(m, d));
    /* The winner's lane: d where kd; else c where kc; else b where kb;
     * else a. */
    __m128 wd = kd, wc = _mm_andnot_ps(kd, kc),
           wb = _mm_andnot_ps(_mm_or_ps(kd, kc), kb),
           wa = _mm_andnot_ps(_mm_or_ps(_mm_or_ps(kd, kc), kb),
                              _mm_castsi128_ps(_mm_set1_epi32(-1)));
    __m128 ga = _mm_and_ps(wa, g), gb = _mm_and_ps(wb, g),
           gc = _mm_and_ps(wc, g), gd = _mm_and_ps(wd, g);
    _mm_storeu_ps(t0 + 2 * i, _mm_unpacklo_ps(ga, gb));
    _mm_storeu_ps(t0 + 2 * i + 4, _mm_unpackhi_ps(ga, gb));
    _mm_storeu_ps(t1 + 2 * i, _mm_unpacklo_ps(gc, gd));
    _mm_storeu_ps(t1 + 2 * i + 4, _mm_unpackhi_ps(gc, gd));
  }
#endif
  back_tail_f32(r0, r1, dy, t0, t1, i, n);
}
