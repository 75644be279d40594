/*
 * What the 16-bit kernel tests (test_matmul16.c, test_conv16.c) share:
 * the paths a bf16 or f16 op can take on the CPU plugin, inputs exact in
 * the dtype, and the error bound of a sum computed as sdk/docs/ops.md asks
 * of 16-bit dtypes.
 *
 * The bound. The inputs are exact 16-bit values, so each product is exact
 * in f32 (and in the f64 reference, which is exact to 2^-53 relative,
 * nothing beside what follows). A sum of n terms accumulated in f32, in
 * any order, is off by at most gamma_n * S, S = sum |term|, gamma_n =
 * n u32 / (1 - n u32) with u32 = 2^-24 (Higham, "Accuracy and Stability
 * of Numerical Algorithms", 2nd ed., eq. 3.5); (n + 1) u32 S covers it for
 * every n here. Rounding that f32 value s once to the dtype moves it by at
 * most u |s| <= u (|want| + gamma_n S), u = 2^-8 for bf16 and 2^-11 for
 * f16 (their unit roundoffs). So
 *
 *   |got - want| <= (n + 1) 2^-24 S (1 + u) + u |want| + n 2^-126,
 *
 * the last term for products that the threads' FTZ flushes to zero (never
 * met with these inputs, where products stay far above 2^-126). A NaN or
 * infinite reference must come back as NaN, or as the same infinity.
 */
#ifndef TYTO_TESTS_CPU_GEMM16_REF_H
#define TYTO_TESTS_CPU_GEMM16_REF_H

#include "cpu/harness.h"

#include <math.h>

/* The paths: bf16 on oneDNN (where the build has it), bf16 through f32
 * (TYTO_CPU_NO_DNNL=1 at prepare), f16 (through f32 on CPUs without
 * AVX512-FP16). */
enum { PATH_BF16, PATH_BF16_F32, PATH_F16, N_PATHS };

static inline uint32_t path_dtype(int path) {
  return path == PATH_F16 ? F16 : BF16;
}

static inline void path_enter(int path) {
  if (path == PATH_BF16_F32)
    setenv("TYTO_CPU_NO_DNNL", "1", 1);
  else
    unsetenv("TYTO_CPU_NO_DNNL");
}

static inline void path_leave(void) {
  unsetenv("TYTO_CPU_NO_DNNL");
}

/* The unit roundoff of a 16-bit dtype. */
static inline double unit_roundoff(uint32_t dtype) {
  return dtype == F16 ? ldexp(1, -11) : ldexp(1, -8);
}

/* v rounded to the dtype and read back: exact in it. */
static inline double round16(uint32_t dtype, double v) {
  return dtype == F16 ? tpc_f16_to_f32(tpc_f64_to_f16(v))
                      : tpc_bf16_to_f32(tpc_f64_to_bf16(v));
}

/* Fills t's storage with values in [-2, 2) exact in its dtype, every bit
 * of the fraction in use. */
static inline void fill16(h_tensor *t, unsigned seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t->storage; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) * ldexp(1, -53); /* [0, 1) */
    t->values[i] = round16(t->layout.dtype, 4 * u - 2);
  }
}

/* The bound above for a sum of n terms whose absolute values sum to s. */
static inline double sum_bound(uint32_t dtype, int64_t n, double s,
                               double want) {
  double u = unit_roundoff(dtype);
  return (double)(n + 1) * ldexp(1, -24) * s * (1 + u) + u * fabs(want) +
         (double)n * ldexp(1, -126);
}

/* Whether got is want within the bound: NaN for NaN, an infinity for the
 * same one, and for a finite value beyond the dtype's range the infinity
 * it rounds to (the tests keep such values far from the edge). */
static inline int within(uint32_t dtype, double got, double want,
                         double bound) {
  if (isfinite(want) && isinf(round16(dtype, want)))
    want = round16(dtype, want);
  if (isnan(want))
    return isnan(got);
  if (isinf(want))
    return got == want;
  return isfinite(got) && fabs(got - want) <= bound;
}

#endif
