/*
 * The CUDA plugin's 16-bit conversions (plugins/cuda/half_src.h), the very
 * text its kernels compile, expanded here as C and compared bit for bit
 * with plugins/common/half.h, the CPU plugin's and the core's reference:
 * every f16 and bf16 pattern read into f32; f32 patterns rounded to both
 * formats (every exponent with the fraction bits around each rounding
 * boundary, the f16 subnormal range whole, and 2^24 random patterns); f64
 * patterns rounded through round-to-odd f32 (the boundaries of each
 * exponent from f32's subnormals to beyond its range, and 2^22 random
 * patterns). NaN results are compared as patterns too: the kernels keep
 * the payload's top bits and set the quiet bit as half.h does. Also checks
 * that the stringified text the plugin compiles names each function, and
 * that half_ref.h, the GPU tests' independent reference, agrees with
 * half.h on the same patterns (NaN payloads aside). Needs no GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/common/half.h"
#include "../../plugins/cuda/half_src.h"
#include "half_ref.h"

static unsigned tyto_f2u(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float tyto_u2f(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static unsigned long long tyto_d2u(double d) {
  unsigned long long u;
  memcpy(&u, &d, sizeof u);
  return u;
}

/* The kernels' functions, as host C. */
TCU_HALF_BF16(static inline)
TCU_HALF_F16(static inline)
TCU_HALF_F64(static inline)

#define STR_(...) #__VA_ARGS__
#define STR(...) STR_(__VA_ARGS__)

static long checks, failures;

#define SAME(got, want, what, x)                                               \
  do {                                                                         \
    checks++;                                                                  \
    if ((got) != (want) && failures++ < 20)                                    \
      fprintf(stderr, "FAIL %s of 0x%llx: 0x%llx, half.h gives 0x%llx\n",      \
              what, (unsigned long long)(x), (unsigned long long)(got),        \
              (unsigned long long)(want));                                     \
  } while (0)

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The GPU tests' reference (half_ref.h) agrees with half.h, NaN
 * payloads aside (the reference gives a canonical NaN). */
static uint32_t ref_or_nan(uint32_t ref, uint32_t want, int nan) {
  return nan ? want : ref;
}

/* with_ref: half_ref.h too (slower: it rounds with libm). */
static void from_f32(uint32_t u, int with_ref) {
  float f = tyto_u2f(u);
  int nan = f != f;
  SAME(tyto_f_f16(f), tpc_f32_to_f16(f), "f32 -> f16", u);
  SAME(tyto_f_bf16(f), tpc_f32_to_bf16(f), "f32 -> bf16", u);
  if (!with_ref)
    return;
  SAME(ref_or_nan(ref_bits(f, &REF_F16), tpc_f32_to_f16(f), nan),
       tpc_f32_to_f16(f), "f32 -> f16 (half_ref.h)", u);
  SAME(ref_or_nan(ref_bits(f, &REF_BF16), tpc_f32_to_bf16(f), nan),
       tpc_f32_to_bf16(f), "f32 -> bf16 (half_ref.h)", u);
}

static void from_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  int nan = d != d;
  SAME(tyto_f2u(tyto_d_f32odd(d)), tpc_f32_bits(tpc_f64_to_f32_odd(d)),
       "f64 -> f32 (odd)", u);
  SAME(tyto_d_f16(d), tpc_f64_to_f16(d), "f64 -> f16", u);
  SAME(tyto_d_bf16(d), tpc_f64_to_bf16(d), "f64 -> bf16", u);
  SAME(ref_or_nan(ref_bits(d, &REF_F16), tpc_f64_to_f16(d), nan),
       tpc_f64_to_f16(d), "f64 -> f16 (half_ref.h)", u);
  SAME(ref_or_nan(ref_bits(d, &REF_BF16), tpc_f64_to_bf16(d), nan),
       tpc_f64_to_bf16(d), "f64 -> bf16 (half_ref.h)", u);
  SAME(ref_or_nan(ref_bits(d, &REF_F32), tpc_f32_bits((float)d), nan),
       tpc_f32_bits((float)d), "f64 -> f32 (half_ref.h)", u);
}

int main(void) {
  /* Under valgrind (make check-valgrind) a 64th of the patterns: the
   * same code paths, in seconds rather than hours. */
  const int step = getenv("TYTO_TEST_UNDER_VALGRIND") != NULL ? 64 : 1;
  /* Every 16-bit pattern, read. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    SAME(tyto_f2u(tyto_f16_f((unsigned short)h)),
         tpc_f32_bits(tpc_f16_to_f32((uint16_t)h)), "f16 -> f32", h);
    SAME(tyto_f2u(tyto_bf16_f((unsigned short)h)),
         tpc_f32_bits(tpc_bf16_to_f32((uint16_t)h)), "bf16 -> f32", h);
    /* half_ref.h's decoding and encoding, NaNs aside. */
    float hf = tpc_f16_to_f32((uint16_t)h), bf = tpc_bf16_to_f32((uint16_t)h);
    if (hf == hf) {
      SAME(tpc_f32_bits((float)ref_decode(h, &REF_F16)), tpc_f32_bits(hf),
           "f16 decoded (half_ref.h)", h);
      SAME(ref_encode(hf, &REF_F16), h, "f16 encoded (half_ref.h)", h);
    }
    if (bf == bf) {
      SAME(tpc_f32_bits((float)ref_decode(h, &REF_BF16)), tpc_f32_bits(bf),
           "bf16 decoded (half_ref.h)", h);
      SAME(ref_encode(bf, &REF_BF16), h, "bf16 encoded (half_ref.h)", h);
    }
  }
  /* f32: every sign and exponent, the fraction around the f16 and bf16
   * rounding points (13 and 16 dropped bits: halfway, either side, ties
   * with an odd and an even last kept bit, the largest fractions). */
  static const uint32_t lows[] = {0,      1,      0x0fff, 0x1000, 0x1001,
                                  0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000,
                                  0x8001, 0xffff, 0x18000};
  for (uint32_t se = 0; se < 0x200; se++)
    for (uint32_t hi = 0; hi < 0x80; hi++)
      for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++)
        from_f32((se << 23) | (hi << 16) | lows[k], 1);
  /* The f16 subnormal and underflow range whole, both signs. */
  for (uint32_t u = 0x32000000u; u <= 0x38800000u; u += (uint32_t)step) {
    from_f32(u, (u & 0xff) == 0x80);
    from_f32(u | 0x80000000u, 0);
  }
  for (int i = 0; i < (1 << 24) / step; i++)
    from_f32((uint32_t)next(), (i & 3) == 0);
  /* f64: each exponent from below f32's subnormals to beyond its range,
   * with the fraction around the 29 (and more, for subnormals) bits odd
   * rounding drops. */
  static const uint64_t dlows[] = {0,          1,          0x0fffffff,
                                   0x10000000, 0x10000001, 0x1fffffff,
                                   0x20000000, 0x3fffffff, 0xffffffffffull};
  for (uint64_t e = 0; e < 0x800; e += (e > 0x300 && e < 0x4f0) ? 1 : 31)
    for (uint64_t hi = 0; hi < 64; hi++)
      for (size_t k = 0; k < sizeof dlows / sizeof dlows[0]; k++)
        for (uint64_t sign = 0; sign < 2; sign++)
          from_f64(sign << 63 | e << 52 | hi << 46 | dlows[k]);
  from_f64(0x7ff0000000000000ull);
  from_f64(0x7ff8000000000001ull);
  from_f64(0xfff4000000000000ull);
  for (int i = 0; i < (1 << 22) / step; i++)
    from_f64(next());

  /* The text the plugin compiles names these functions. */
  static const char bf[] = STR(TCU_HALF_BF16(TYTO_DEV));
  static const char f16[] = STR(TCU_HALF_F16(TYTO_DEV));
  static const char f64[] = STR(TCU_HALF_F64(TYTO_DEV));
  checks++;
  if (strstr(bf, "TYTO_DEV float tyto_bf16_f(") == NULL ||
      strstr(bf, "TYTO_DEV unsigned short tyto_f_bf16(") == NULL ||
      strstr(f16, "TYTO_DEV unsigned short tyto_f_f16(") == NULL ||
      strstr(f64, "TYTO_DEV unsigned short tyto_d_f16(") == NULL) {
    failures++;
    fprintf(stderr, "FAIL the stringified source lacks a function:\n%s\n", bf);
  }
  printf("%ld checks, %ld failed\n", checks, failures);
  return failures ? 1 : 0;
}
