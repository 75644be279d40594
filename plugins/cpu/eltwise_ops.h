/*
 * The elementwise ops as expressions, f32 then f64: x, y, z are the
 * operands' elements, pa the op's first real attribute (LEAKY_RELU's
 * slope, ELU's alpha). eltwise_kern.h turns each line into loops.
 *
 *   U(op, f32 expr, f64 expr)  unary      B(...) binary      T(...) ternary
 *
 * NaN conventions: SIGN, RELU, LEAKY_RELU, ELU, MAX and MIN propagate NaN
 * (as NumPy's maximum and PyTorch do); comparisons with NaN are false
 * (1 only for NE). SIGN keeps the sign of a zero; ROUND is C's round().
 * FMA is fused (one rounding), as C's fma(). EXP, SIGMOID, TANH and ERF
 * in f32 use eltwise_kern.h's own e^x (within ~2 ulp), tanh (1.33 ulp)
 * and erf (2 ulp) so that they vectorise; the other transcendentals call
 * libm, element by element.
 */
#ifndef TYTO_PLUGIN_CPU_ELTWISE_OPS_H
#define TYTO_PLUGIN_CPU_ELTWISE_OPS_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tyto/plugin.h>

/* One contiguous loop: n elements of out from a, b, c (unused ones NULL);
 * p: the op's real attributes, or NULL. */
typedef void (*elt_kern)(size_t n, void *out, const void *a, const void *b,
                         const void *c, const double *p);

#define ELT_NOPS (TYTO_PLUGIN_OP_FMA + 1)

/* The worker threads run with DAZ set (plugins/cpu/pool.c), which breaks
 * glibc's log and atan2 half-way on subnormal arguments (log(1.4e-45f)
 * gave -103.97, atan2 of two subnormals NaN): those two take a subnormal
 * as the zero of its sign, as DAZ means, so the result is what ops.md
 * allows for a flushed input (-inf, the atan2 of zeros). */
#define ELT_DAZF(x) (fabsf(x) < FLT_MIN ? copysignf(0.0f, (x)) : (x))
#define ELT_DAZ(x) (fabs(x) < DBL_MIN ? copysign(0.0, (x)) : (x))

/* clang-format off */
#define ELT_OPS(U, B, T)                                                       \
  U(NEG, -x, -x)                                                               \
  U(ABS, fabsf(x), fabs(x))                                                    \
  /* SIGN avoids the "unordered signalling" compare GCC otherwise emits */    \
  /* (and valgrind emulates wrongly for NaN).                           */    \
  U(SIGN, x != x ? x : copysignf(x == 0.0f ? 0.0f : 1.0f, x),                  \
          x != x ? x : copysign(x == 0.0 ? 0.0 : 1.0, x))                      \
  U(EXP, ELT_EXPF(x), exp(x))                                                  \
  U(LOG, logf(ELT_DAZF(x)), log(ELT_DAZ(x)))                                  \
  U(LOG1P, log1pf(x), log1p(x))                                                \
  U(EXPM1, expm1f(x), expm1(x))                                                \
  U(SQRT, sqrtf(x), sqrt(x))                                                   \
  U(RSQRT, 1.0f / sqrtf(x), 1.0 / sqrt(x))                                     \
  U(SQUARE, x * x, x * x)                                                      \
  U(RECIPROCAL, 1.0f / x, 1.0 / x)                                             \
  U(SIN, sinf(x), sin(x))                                                      \
  U(COS, cosf(x), cos(x))                                                      \
  U(TAN, tanf(x), tan(x))                                                      \
  U(ASIN, asinf(x), asin(x))                                                   \
  U(ACOS, acosf(x), acos(x))                                                   \
  U(ATAN, atanf(x), atan(x))                                                   \
  U(SINH, sinhf(x), sinh(x))                                                   \
  U(COSH, coshf(x), cosh(x))                                                   \
  U(TANH, ELT_TANHF(x), tanh(x))                                              \
  U(ASINH, asinhf(x), asinh(x))                                                \
  U(ACOSH, acoshf(x), acosh(x))                                                \
  U(ATANH, atanhf(x), atanh(x))                                                \
  U(SIGMOID, 1.0f / (1.0f + ELT_EXPF(-x)), 1.0 / (1.0 + exp(-x)))              \
  U(RELU, x < 0.0f ? 0.0f : x, x < 0.0 ? 0.0 : x)                              \
  U(LEAKY_RELU, x < 0.0f ? pa * x : x, x < 0.0 ? pa * x : x)                   \
  U(ELU, x < 0.0f ? pa * expm1f(x) : x, x < 0.0 ? pa * expm1(x) : x)           \
  /* log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, no cancellation */ \
  U(SOFTPLUS, (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x))),                 \
              (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))))                      \
  U(ERF, ELT_ERFF(x), erf(x))                                                  \
  U(FLOOR, floorf(x), floor(x))                                                \
  U(CEIL, ceilf(x), ceil(x))                                                   \
  U(ROUND, roundf(x), round(x))                                                \
  B(ADD, x + y, x + y)                                                         \
  B(SUB, x - y, x - y)                                                         \
  B(MUL, x * y, x * y)                                                         \
  B(DIV, x / y, x / y)                                                         \
  B(POW, powf(x, y), pow(x, y))                                                \
  B(MAX, (x > y || x != x) ? x : y, (x > y || x != x) ? x : y)                 \
  B(MIN, (x < y || x != x) ? x : y, (x < y || x != x) ? x : y)                 \
  B(ATAN2, atan2f(ELT_DAZF(x), ELT_DAZF(y)), atan2(ELT_DAZ(x), ELT_DAZ(y)))   \
  B(EQ, x == y ? 1.0f : 0.0f, x == y ? 1.0 : 0.0)                              \
  B(NE, x != y ? 1.0f : 0.0f, x != y ? 1.0 : 0.0)                              \
  B(LT, x < y ? 1.0f : 0.0f, x < y ? 1.0 : 0.0)                                \
  B(LE, x <= y ? 1.0f : 0.0f, x <= y ? 1.0 : 0.0)                              \
  B(GT, x > y ? 1.0f : 0.0f, x > y ? 1.0 : 0.0)                                \
  B(GE, x >= y ? 1.0f : 0.0f, x >= y ? 1.0 : 0.0)                              \
  T(WHERE, x != 0.0f ? y : z, x != 0.0 ? y : z)                                \
  T(FMA, fmaf(x, y, z), fma(x, y, z))
/* clang-format on */

#endif
