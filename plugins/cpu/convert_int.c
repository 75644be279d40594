/*
 * CAST to and from the integer dtypes (ABI 1.6), I32 and I64, as
 * sdk/docs/ops.md's CAST says: a float truncated toward zero and
 * saturated at the integer's limits, NaN giving 0 (compared against the
 * limits first: C leaves the out-of-range conversion undefined); an
 * integer rounded once to nearest, ties to even; I64 to I32 keeps the low
 * 32 bits, I32 to I64 sign-extends.
 *
 * Rounding once: C's conversion of an integer to float or double rounds
 * once in the default rounding mode, which the plugin's threads keep (FTZ
 * and DAZ change nothing for integers). To f16 and bf16, an I32 goes
 * through double, which holds it exactly; an I64 of more than 53
 * significant bits is first rounded to odd at 53 bits (kept bits, plus a
 * sticky last bit), so that the final rounding (half.h's, itself through
 * round-to-odd) is the single rounding of the integer.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../common/half.h"
#include "convert.h"

/* Every element read as a double: exact for the four float dtypes. */
static inline double rd_f32(const void *p, size_t i) {
  return ((const float *)p)[i];
}
static inline double rd_f64(const void *p, size_t i) {
  return ((const double *)p)[i];
}
static inline double rd_f16(const void *p, size_t i) {
  return tpc_f16_to_f32(((const uint16_t *)p)[i]);
}
static inline double rd_bf16(const void *p, size_t i) {
  return tpc_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* v as a double rounded to odd at 53 bits: exact below 2^53, and for
 * larger magnitudes the kept bits with the dropped ones OR'ed into the
 * last, so that rounding it once more to 24 bits or fewer is the correct
 * single rounding of v. */
static double i64_to_f64_odd(int64_t v) {
  uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  if (m >> 53 == 0)
    return (double)v;
  int sh = 64 - __builtin_clzll(m) - 53;
  uint64_t kept = m >> sh;
  kept |= (m & ((UINT64_C(1) << sh) - 1)) != 0;
  double d = ldexp((double)kept, sh);
  return v < 0 ? -d : d;
}

/* One function per pair: FROM reads element i as `x` (a double or an
 * integer), TO stores expression e. */
#define CV(name, ot, expr, rd)                                                 \
  static void name(size_t n, void *dst, const void *src) {                     \
    ot *o = dst;                                                               \
    for (size_t i = 0; i < n; i++) {                                           \
      const double x = rd(src, i);                                             \
      o[i] = (expr);                                                           \
    }                                                                          \
  }
CV(cv_f32_i32, int32_t, (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, x),
   rd_f32)
CV(cv_f64_i32, int32_t, (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, x),
   rd_f64)
CV(cv_f16_i32, int32_t, (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, x),
   rd_f16)
CV(cv_bf16_i32, int32_t, (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, x),
   rd_bf16)
CV(cv_f32_i64, int64_t, (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, x),
   rd_f32)
CV(cv_f64_i64, int64_t, (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, x),
   rd_f64)
CV(cv_f16_i64, int64_t, (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, x),
   rd_f16)
CV(cv_bf16_i64, int64_t, (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, x),
   rd_bf16)
#undef CV

#define CVI(name, it, ot, expr)                                                \
  static void name(size_t n, void *dst, const void *src) {                     \
    ot *o = dst;                                                               \
    const it *a = src;                                                         \
    for (size_t i = 0; i < n; i++) {                                           \
      const it x = a[i];                                                       \
      o[i] = (expr);                                                           \
    }                                                                          \
  }
CVI(cv_i32_f32, int32_t, float, (float)x)
CVI(cv_i32_f64, int32_t, double, (double)x)
CVI(cv_i32_f16, int32_t, uint16_t, tpc_f64_to_f16((double)x))
CVI(cv_i32_bf16, int32_t, uint16_t, tpc_f64_to_bf16((double)x))
CVI(cv_i64_f32, int64_t, float, (float)x)
CVI(cv_i64_f64, int64_t, double, (double)x)
CVI(cv_i64_f16, int64_t, uint16_t, tpc_f64_to_f16(i64_to_f64_odd(x)))
CVI(cv_i64_bf16, int64_t, uint16_t, tpc_f64_to_bf16(i64_to_f64_odd(x)))
CVI(cv_i32_i32, int32_t, int32_t, x)
CVI(cv_i64_i64, int64_t, int64_t, x)
CVI(cv_i32_i64, int32_t, int64_t, (int64_t)x)
/* The low 32 bits, as two's complement (GCC converts modulo 2^32). */
CVI(cv_i64_i32, int64_t, int32_t, (int32_t)(uint32_t)(uint64_t)x)
#undef CVI

cpu_cvt_fn cpu_cvt_int(uint32_t to, uint32_t from) {
  enum { F32 = TYTO_PLUGIN_DTYPE_F32, F64 = TYTO_PLUGIN_DTYPE_F64 };
  enum { F16 = TYTO_PLUGIN_DTYPE_F16, BF16 = TYTO_PLUGIN_DTYPE_BF16 };
  enum { I32 = TYTO_PLUGIN_DTYPE_I32, I64 = TYTO_PLUGIN_DTYPE_I64 };
  static const cpu_cvt_fn table[6][6] = {
      /* [to][from] */
      [I32] = {cv_f32_i32, cv_f64_i32, cv_f16_i32, cv_bf16_i32, cv_i32_i32,
               cv_i64_i32},
      [I64] = {cv_f32_i64, cv_f64_i64, cv_f16_i64, cv_bf16_i64, cv_i32_i64,
               cv_i64_i64},
      [F32] = {[I32] = cv_i32_f32, [I64] = cv_i64_f32},
      [F64] = {[I32] = cv_i32_f64, [I64] = cv_i64_f64},
      [F16] = {[I32] = cv_i32_f16, [I64] = cv_i64_f16},
      [BF16] = {[I32] = cv_i32_bf16, [I64] = cv_i64_bf16},
  };
  if (to > I64 || from > I64)
    return NULL;
  return table[to][from];
}
