/*
 * The software conversion loops, over contiguous arrays. convert.c
 * includes this file once per instruction set with CV_SUF naming the
 * variant and a `#pragma GCC target` in force, so GCC vectorises each loop
 * for SSE2, AVX2 and AVX-512. No include guard on purpose.
 *
 * The element functions (cv_*, convert.c) are branch-free forms of
 * half.h's, so that the loops vectorise; tests/cpu/test_half.c checks them
 * through CAST over every 16-bit pattern and a sweep of f32 and f64 values.
 */
#ifndef CV_SUF
#error "define CV_SUF before including convert_kern.h"
#endif

#define CV_CAT_(a, b) cv_##a##_##b
#define CV_CAT(a, b) CV_CAT_(a, b)
#define CV_NAME(name) CV_CAT(CV_SUF, name)

static void CV_NAME(bf16_f32)(size_t n, void *d, const void *s) {
  float *o = d;
  const uint16_t *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = tpc_bf16_to_f32(x[i]);
}

/* As bf16_f32, with subnormals made zeros of their sign (for threads that
 * read subnormals as zero: cv_bf16_f32_arith). */
static void CV_NAME(bf16_f32_daz)(size_t n, void *d, const void *s) {
  uint32_t *o = d;
  const uint16_t *x = s;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)x[i] << 16;
    o[i] = v & ((v & 0x7f800000u) != 0 ? 0xffffffffu : 0x80000000u);
  }
}

static void CV_NAME(f32_bf16)(size_t n, void *d, const void *s) {
  uint16_t *o = d;
  const float *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = tpc_f32_to_bf16(x[i]);
}

static void CV_NAME(f16_f32)(size_t n, void *d, const void *s) {
  float *o = d;
  const uint16_t *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = cv_f16_to_f32(x[i]);
}

static void CV_NAME(f32_f16)(size_t n, void *d, const void *s) {
  uint16_t *o = d;
  const float *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = cv_f32_to_f16(x[i]);
}

static void CV_NAME(f32_f64)(size_t n, void *d, const void *s) {
  double *o = d;
  const float *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = cv_f32_to_f64(x[i]);
}

static void CV_NAME(f64_f32)(size_t n, void *d, const void *s) {
  float *o = d;
  const double *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = cv_f64_to_f32(x[i]);
}

/* x rounded to bf16 and widened again, without leaving f32. */
static void CV_NAME(round_bf16)(size_t n, float *d, const float *s) {
  for (size_t i = 0; i < n; i++)
    d[i] = tpc_bf16_to_f32(tpc_f32_to_bf16(s[i]));
}

#undef CV_NAME
#undef CV_CAT
#undef CV_CAT_
