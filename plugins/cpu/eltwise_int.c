/*
 * The elementwise loops on I32 and I64 (ABI 1.6): NEG, ABS, SIGN, ADD,
 * SUB, MUL, MAX, MIN, the comparisons (1 or 0 in the operands' dtype) and
 * WHERE, over contiguous operands like eltwise_kern.h's float loops; the
 * strided walk, broadcasting and blocking are eltwise.c's.
 *
 * Arithmetic wraps modulo 2^32 or 2^64 (ABS and NEG of INT_MIN give
 * INT_MIN), computed in the unsigned type so that it is defined C; the
 * result converts back to the signed type modulo 2^N, as GCC defines it.
 * Plain loops: GCC vectorises them.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define INT_U(op, t, ut, expr)                                                 \
  static void k_##op##_##t(size_t n, void *o_, const void *a_, const void *b_, \
                           const void *c_, const double *p) {                  \
    t##_t *o = o_;                                                             \
    const t##_t *a = a_;                                                       \
    (void)b_;                                                                  \
    (void)c_;                                                                  \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const t##_t x = a[i];                                                    \
      const ut ux = (ut)x;                                                     \
      (void)ux;                                                                \
      o[i] = (t##_t)(expr);                                                    \
    }                                                                          \
  }
#define INT_B(op, t, ut, expr)                                                 \
  static void k_##op##_##t(size_t n, void *o_, const void *a_, const void *b_, \
                           const void *c_, const double *p) {                  \
    t##_t *o = o_;                                                             \
    const t##_t *a = a_, *b = b_;                                              \
    (void)c_;                                                                  \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const t##_t x = a[i], y = b[i];                                          \
      const ut ux = (ut)x, uy = (ut)y;                                         \
      (void)ux;                                                                \
      (void)uy;                                                                \
      o[i] = (t##_t)(expr);                                                    \
    }                                                                          \
  }
#define INT_T(op, t, ut, expr)                                                 \
  static void k_##op##_##t(size_t n, void *o_, const void *a_, const void *b_, \
                           const void *c_, const double *p) {                  \
    t##_t *o = o_;                                                             \
    const t##_t *a = a_, *b = b_, *c = c_;                                     \
    (void)p;                                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      const t##_t x = a[i], y = b[i], z = c[i];                                \
      o[i] = (expr);                                                           \
    }                                                                          \
  }

/* clang-format off */
#define INT_OPS(U, B, T, t, ut)                                                \
  U(NEG, t, ut, (ut)0 - ux)                                                    \
  U(ABS, t, ut, x < 0 ? (ut)0 - ux : ux)                                       \
  U(SIGN, t, ut, (x > 0) - (x < 0))                                            \
  B(ADD, t, ut, ux + uy)                                                       \
  B(SUB, t, ut, ux - uy)                                                       \
  B(MUL, t, ut, ux * uy)                                                       \
  B(MAX, t, ut, x > y ? x : y)                                                 \
  B(MIN, t, ut, x < y ? x : y)                                                 \
  B(EQ, t, ut, x == y)                                                         \
  B(NE, t, ut, x != y)                                                         \
  B(LT, t, ut, x < y)                                                          \
  B(LE, t, ut, x <= y)                                                         \
  B(GT, t, ut, x > y)                                                          \
  B(GE, t, ut, x >= y)                                                         \
  T(WHERE, t, ut, x != 0 ? y : z)
/* clang-format on */

INT_OPS(INT_U, INT_B, INT_T, int32, uint32_t)
INT_OPS(INT_U, INT_B, INT_T, int64, uint64_t)

#define INT_E32(op, t, ut, e) [TYTO_PLUGIN_OP_##op] = k_##op##_int32,
#define INT_E64(op, t, ut, e) [TYTO_PLUGIN_OP_##op] = k_##op##_int64,
static const cpu_elt_kern tab32[TYTO_PLUGIN_OP_FMA + 1] = {
    INT_OPS(INT_E32, INT_E32, INT_E32, int32, uint32_t)};
static const cpu_elt_kern tab64[TYTO_PLUGIN_OP_FMA + 1] = {
    INT_OPS(INT_E64, INT_E64, INT_E64, int64, uint64_t)};

cpu_elt_kern cpu_eltwise_int_kern(uint32_t op, uint32_t dtype) {
  if (op > TYTO_PLUGIN_OP_FMA || !tpc_dtype_int(dtype))
    return NULL;
  return dtype == TYTO_PLUGIN_DTYPE_I32 ? tab32[op] : tab64[op];
}
