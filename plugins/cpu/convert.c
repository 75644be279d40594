/*
 * Conversions between F32, F64, F16 and BF16 (see convert.h).
 *
 * Four directions are hot, because every op on 16-bit data crosses them
 * at its edges: f16 <-> f32 and bf16 <-> f32. For each, the fastest path
 * this CPU has is chosen once:
 *
 *  - f32 -> bf16: VCVTNEPS2BF16 (AVX512-BF16). It reads a subnormal input
 *    as zero, where half.h rounds it to a bf16 subnormal: lanes holding
 *    one are redone in integer code, so the bits are half.h's.
 *  - f32 <-> f16: VCVTPS2PH and VCVTPH2PS (F16C). VCVTPH2PS quiets a
 *    signalling NaN, where half.h keeps its payload as it is: NaN lanes are
 *    rebuilt from the f16 bits.
 *  - otherwise, and for bf16 -> f32 (a shift), loops of branch-free forms
 *    of half.h's functions, which GCC vectorises (SSE2, AVX2, AVX-512).
 *
 * A hardware path is taken only after it gave half.h's bits on a set of
 * hard cases (ties, subnormals of both formats, NaN payloads, overflow
 * edges, every f16) with FTZ and DAZ off and on. The other directions
 * (f64 <-> 16-bit, f16 <-> bf16) go through these or through half.h's
 * f64 functions, which round once.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CV_X86 1
#include <immintrin.h>
#endif

/* The loops at -O3 (see eltwise.c). half.h and the element functions are
 * compiled inside the pragma too: GCC vectorises a loop only over inline
 * functions built with the loop's options. */
#pragma GCC push_options
#pragma GCC optimize("O3", "-fno-trapping-math")

#include "../common/half.h"

/* ---- branch-free element conversions ------------------------------------ */

/* half.h's tpc_f16_to_f32 without its normalising loop: a subnormal m *
 * 2^-24 is computed in f32, exactly (m is an integer below 2^10 and the
 * product a normal f32, so neither the rounding mode nor FTZ/DAZ can
 * change it). */
static inline float cv_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t norm = sign | ((e + 112u) << 23) | (m << 13);
  uint32_t spec = sign | 0x7f800000u | (m << 13);
  uint32_t sub = sign | tpc_f32_bits((float)m * 0x1p-24f);
  return tpc_bits_f32(e == 0x1fu ? spec : e == 0 ? sub : norm);
}

/* half.h's tpc_f32_to_f16 with both roundings computed and one selected:
 * the normal one (drop 13 bits) and the subnormal one (drop s = 126 - e
 * bits of the significand, s clamped to [14, 25] so the shifts stay
 * defined; below 2^-25 the result is 0 either way). */
static inline uint16_t cv_f32_to_f16(float f) {
  uint32_t u = tpc_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u, ax = u & 0x7fffffffu, e = ax >> 23;
  uint32_t rn = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  /* (the comparisons' 0 or 1 ANDed with rn: its last bit; "& 1" added
   * would keep GCC from vectorising) */
  rn += (uint32_t)(rem > 0x1000u) | ((uint32_t)(rem == 0x1000u) & rn);
  uint32_t s = e >= 113u ? 14u : 126u - e > 25u ? 25u : 126u - e;
  uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  uint32_t r = mant >> s, rs = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
  r += (uint32_t)(rs > half) | ((uint32_t)(rs == half) & r);
  uint32_t v = ax > 0x7f800000u    ? 0x7e00u | ((ax >> 13) & 0x3ffu)
               : ax >= 0x477ff000u ? 0x7c00u
               : e < 113u          ? r
                                   : rn;
  return (uint16_t)(sign | v);
}

/* f32 -> f64, exact for subnormals under DAZ too: m * 2^-149 in double. */
static inline double cv_f32_to_f64(float f) {
  uint32_t u = tpc_f32_bits(f);
  double den = (double)(int32_t)(u & 0x7fffffu) * 0x1p-149;
  den = (u >> 31) ? -den : den;
  return (u & 0x7f800000u) == 0 ? den : (double)f;
}

/* f64 -> f32 to nearest, ties to even, under FTZ too: below FLT_MIN the
 * result is |d| * 2^149 rounded to an integer (2^52 added and taken away),
 * which is the subnormal's bits (2^23: FLT_MIN itself); from FLT_MAX plus
 * half an ulp up, an infinity (C leaves the conversion undefined there).
 * The magnitude is computed, then d's sign put on it. */
static inline float cv_f64_to_f32(double d) {
  double a = fabs(d);
  /* Every lane computes every branch: keep each conversion in range. */
  double small = a < 0x1p-126 ? a : 0.0;
  double t = (small * 0x1p149 + 0x1p52) - 0x1p52;
  float sub = tpc_bits_f32((uint32_t)(int32_t)t);
  int big = a >= 0x1.ffffffp127;
  float near = (float)(big ? 0.0 : a);
  float m = a < 0x1p-126 ? sub : big ? INFINITY : near;
  return copysignf(m, (float)(big ? copysign(1.0, d) : d));
}

/* ---- the software loops, per instruction set ---------------------------- */

#define CV_SUF sse2
#include "convert_kern.h"
#undef CV_SUF

#ifdef CV_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define CV_SUF avx2
#include "convert_kern.h"
#undef CV_SUF
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma",                       \
                   "prefer-vector-width=512")
#define CV_SUF avx512
#include "convert_kern.h"
#undef CV_SUF
#pragma GCC pop_options
#endif

#pragma GCC pop_options

/* ---- the hardware paths ------------------------------------------------- */

#ifdef CV_X86
__attribute__((target("avx2,f16c"))) static void hw_f16_f32(size_t n, void *d,
                                                            const void *s) {
  float *o = d;
  const uint16_t *x = s;
  const __m256i m7fff = _mm256_set1_epi32(0x7fff),
                inf = _mm256_set1_epi32(0x7c00);
  const __m256i sgn = _mm256_set1_epi32(0x8000),
                frac = _mm256_set1_epi32(0x3ff);
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(x + i));
    __m256 f = _mm256_cvtph_ps(h);
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, m7fff), inf);
    __m256i kept = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, sgn), 16), exp),
        _mm256_slli_epi32(_mm256_and_si256(w, frac), 13));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(kept),
                         _mm256_castsi256_ps(nan));
    _mm256_storeu_ps(o + i, f);
  }
  for (; i < n; i++)
    o[i] = tpc_f16_to_f32(x[i]);
}

__attribute__((target("avx2,f16c"))) static void hw_f32_f16(size_t n, void *d,
                                                            const void *s) {
  uint16_t *o = d;
  const float *x = s;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        (__m128i *)(void *)(o + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++)
    o[i] = tpc_f32_to_f16(x[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
hw_f32_bf16(size_t n, void *d, const void *s) {
  uint16_t *o = d;
  const float *x = s;
  const __m512i exp = _mm512_set1_epi32(0x7f800000),
                frac = _mm512_set1_epi32(0x7fffff),
                bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    __m256bh b = _mm512_cvtneps_pbh(v);
    __m256i r;
    memcpy(&r, &b, sizeof r);
    __m512i u = _mm512_castps_si512(v);
    __mmask16 sub =
        _mm512_testn_epi32_mask(u, exp) & _mm512_test_epi32_mask(u, frac);
    if (sub) { /* half.h's rounding, for the subnormal lanes */
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
      __m512i w = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, bias), lsb), 16);
      r = _mm256_mask_blend_epi16(sub, r, _mm512_cvtepi32_epi16(w));
    }
    _mm256_storeu_si256((__m256i *)(void *)(o + i), r);
  }
  for (; i < n; i++)
    o[i] = tpc_f32_to_bf16(x[i]);
}
#endif

/* ---- choosing ------------------------------------------------------------ */

typedef void (*cv_round_fn)(size_t n, float *d, const float *s);

static struct {
  cpu_cvt_fn bf16_f32, f32_bf16, f16_f32, f32_f16, f32_f64, f64_f32;
  cv_round_fn round_bf16;
  cpu_cvt_fn bf16_f32_daz;
  char describe[160];
} cv = {cv_sse2_bf16_f32,   cv_sse2_f32_bf16,     cv_sse2_f16_f32,
        cv_sse2_f32_f16,    cv_sse2_f32_f64,      cv_sse2_f64_f32,
        cv_sse2_round_bf16, cv_sse2_bf16_f32_daz, ""};
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;

#ifdef CV_X86
/* f32 bit patterns where conversions go wrong if they do: ties and their
 * neighbours, subnormals of f32 and f16, NaN payloads, the overflow edges
 * of f16 and bf16; then a fixed pseudo-random sweep. */
#define CV_PROBES 4096
static void probe_values(float *v) {
  static const uint32_t hard[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
      0x00018000u, 0x00008000u, 0x00017fffu, 0x00800000u, 0x7f800000u,
      0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fa00001u,
      0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x3f808000u, 0x3f818000u,
      0x3f80ffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x38800000u,
      0x387fe000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x32ffffffu,
      0x33c00000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0xb3800001u};
  size_t k = sizeof hard / sizeof hard[0];
  for (size_t i = 0; i < k; i++)
    v[i] = tpc_bits_f32(hard[i]);
  uint32_t x = 2463534242u;
  for (size_t i = k; i < CV_PROBES; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    uint32_t u = x;
    switch (i % 4) {
    case 0: u &= 0x807fffffu; break; /* f32 subnormal */
    case 1:                          /* f16's range, often a tie */
      u = (u & 0x80000000u) | ((96u + u % 48u) << 23) | (u & 0x7fe000u) |
          (i % 8 == 1 ? 0x1000u : 0u);
      break;
    case 2: u = (u & 0xffff0000u) | ((i % 8 == 2) ? 0x8000u : 0u); break;
    default: break;
    }
    v[i] = tpc_bits_f32(u);
  }
}

/* Whether hw gives half.h's bits on the probes (narrowing) or on every
 * f16 (widening), with the current MXCSR and with FTZ and DAZ. */
static int hw_agrees(cpu_cvt_fn hw, int widen, int bf16) {
  static float in[CV_PROBES], w[65536];
  static uint16_t h[65536], got[CV_PROBES];
  probe_values(in);
  for (uint32_t i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  unsigned csr = _mm_getcsr();
  int ok = 1;
  for (int pass = 0; pass < 2 && ok; pass++) {
    _mm_setcsr(pass ? csr | 0x8040u : csr & ~0x8040u);
    if (widen) {
      hw(65536, w, h);
      for (uint32_t i = 0; i < 65536 && ok; i++)
        ok = tpc_f32_bits(w[i]) == tpc_f32_bits(tpc_f16_to_f32(h[i]));
    } else {
      hw(CV_PROBES, got, in);
      for (uint32_t i = 0; i < CV_PROBES && ok; i++)
        ok = got[i] == (bf16 ? tpc_f32_to_bf16(in[i]) : tpc_f32_to_f16(in[i]));
    }
  }
  _mm_setcsr(csr);
  return ok;
}
#endif

/* TYTO_CPU_NO_HW16 on: software conversions only, for tests and
 * comparisons (docs/configuration.md). */
static int no_hw_env(void) {
  return tpc_env_on("TYTO_CPU_NO_HW16");
}

static void cv_pick(void) {
  const int hw = !no_hw_env();
  const char *f16 = hw ? "converted in software"
                       : "converted in software (TYTO_CPU_NO_HW16)",
             *bf16 = f16;
  (void)hw;
#ifdef CV_X86
  __builtin_cpu_init();
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int avx512 = __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && avx2;
  if (avx512) {
    cv.bf16_f32 = cv_avx512_bf16_f32;
    cv.f32_bf16 = cv_avx512_f32_bf16;
    cv.f16_f32 = cv_avx512_f16_f32;
    cv.f32_f16 = cv_avx512_f32_f16;
    cv.f32_f64 = cv_avx512_f32_f64;
    cv.f64_f32 = cv_avx512_f64_f32;
    cv.round_bf16 = cv_avx512_round_bf16;
    cv.bf16_f32_daz = cv_avx512_bf16_f32_daz;
  } else if (avx2) {
    cv.bf16_f32 = cv_avx2_bf16_f32;
    cv.f32_bf16 = cv_avx2_f32_bf16;
    cv.f16_f32 = cv_avx2_f16_f32;
    cv.f32_f16 = cv_avx2_f32_f16;
    cv.f32_f64 = cv_avx2_f32_f64;
    cv.f64_f32 = cv_avx2_f64_f32;
    cv.round_bf16 = cv_avx2_round_bf16;
    cv.bf16_f32_daz = cv_avx2_bf16_f32_daz;
  }
  if (hw && avx2 && __builtin_cpu_supports("f16c") &&
      hw_agrees(hw_f16_f32, 1, 0) && hw_agrees(hw_f32_f16, 0, 0)) {
    cv.f16_f32 = hw_f16_f32;
    cv.f32_f16 = hw_f32_f16;
    f16 = "F16C conversions";
  }
  if (hw && avx512 && __builtin_cpu_supports("avx512bf16") &&
      hw_agrees(hw_f32_bf16, 0, 1)) {
    cv.f32_bf16 = hw_f32_bf16;
    bf16 = "AVX512-BF16 conversions";
  }
#endif
  snprintf(cv.describe, sizeof cv.describe, "f16: %s; bf16: %s", f16, bf16);
}

const char *cpu_cvt_describe(void) {
  pthread_once(&cv_once, cv_pick);
  return cv.describe;
}

/* ---- composite conversions ---------------------------------------------- */

#define CV_CHUNK 256

static void cv_copy2(size_t n, void *d, const void *s) {
  memcpy(d, s, n * 2);
}
static void cv_copy4(size_t n, void *d, const void *s) {
  memcpy(d, s, n * 4);
}
static void cv_copy8(size_t n, void *d, const void *s) {
  memcpy(d, s, n * 8);
}
static void cv_bf16_f32(size_t n, void *d, const void *s) {
  cv.bf16_f32(n, d, s);
}
static void cv_f32_bf16(size_t n, void *d, const void *s) {
  cv.f32_bf16(n, d, s);
}
static void cv_f16_f32(size_t n, void *d, const void *s) {
  cv.f16_f32(n, d, s);
}
static void cv_f32_f16(size_t n, void *d, const void *s) {
  cv.f32_f16(n, d, s);
}
static void cv_f32_f64(size_t n, void *d, const void *s) {
  cv.f32_f64(n, d, s);
}
static void cv_f64_f32(size_t n, void *d, const void *s) {
  cv.f64_f32(n, d, s);
}

/* 16-bit -> f32 -> `second`, in chunks: f16 <-> bf16 (the f32 holds the
 * source exactly, so this rounds once) and 16-bit -> f64. */
static void cv_through_f32(size_t n, void *d, const void *s, cpu_cvt_fn first,
                           cpu_cvt_fn second, size_t dsize) {
  float t[CV_CHUNK];
  for (size_t i = 0; i < n; i += CV_CHUNK) {
    size_t m = n - i < CV_CHUNK ? n - i : CV_CHUNK;
    first(m, t, (const uint16_t *)s + i);
    second(m, (unsigned char *)d + i * dsize, t);
  }
}
static void cv_f16_bf16(size_t n, void *d, const void *s) {
  cv_through_f32(n, d, s, cv.f16_f32, cv.f32_bf16, 2);
}
static void cv_bf16_f16(size_t n, void *d, const void *s) {
  cv_through_f32(n, d, s, cv.bf16_f32, cv.f32_f16, 2);
}
static void cv_f16_f64(size_t n, void *d, const void *s) {
  cv_through_f32(n, d, s, cv.f16_f32, cv.f32_f64, 8);
}
static void cv_bf16_f64(size_t n, void *d, const void *s) {
  cv_through_f32(n, d, s, cv.bf16_f32, cv.f32_f64, 8);
}
/* f64 -> 16-bit rounds once (half.h's round-to-odd step). */
static void cv_f64_f16(size_t n, void *d, const void *s) {
  uint16_t *o = d;
  const double *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = tpc_f64_to_f16(x[i]);
}
static void cv_f64_bf16(size_t n, void *d, const void *s) {
  uint16_t *o = d;
  const double *x = s;
  for (size_t i = 0; i < n; i++)
    o[i] = tpc_f64_to_bf16(x[i]);
}

/* bf16 into f32 for arithmetic: as cv_bf16_f32, then, when the calling
 * thread reads subnormals as zero (DAZ, as the plugin's workers do), the
 * subnormals made zeros of their sign here, so that an op that compares
 * and then moves a value (relu, max, min, where) sees and moves the same
 * zero that its arithmetic does: the flushed result sdk/docs/ops.md
 * allows, instead of a mix. */
static int thread_daz(void) {
#if defined(__x86_64__) || defined(__i386__)
  return (_mm_getcsr() & 0x0040) != 0;
#else
  return 0;
#endif
}

static void cv_bf16_f32_arith(size_t n, void *d, const void *s) {
  /* In one vectorised pass (a second, scalar pass over the result took 8%
   * of a bf16 training step of the seed CNN). */
  if (thread_daz())
    cv.bf16_f32_daz(n, d, s);
  else
    cv_bf16_f32(n, d, s);
}

cpu_cvt_fn cpu_cvt_arith(uint32_t from) {
  if (from == TYTO_PLUGIN_DTYPE_BF16) {
    pthread_once(&cv_once, cv_pick);
    return cv_bf16_f32_arith;
  }
  return cpu_cvt(TYTO_PLUGIN_DTYPE_F32, from);
}

cpu_cvt_fn cpu_cvt(uint32_t to, uint32_t from) {
  enum { F32 = TYTO_PLUGIN_DTYPE_F32, F64 = TYTO_PLUGIN_DTYPE_F64 };
  enum { F16 = TYTO_PLUGIN_DTYPE_F16, BF16 = TYTO_PLUGIN_DTYPE_BF16 };
  static const cpu_cvt_fn table[4][4] = {
      /* to F32 from F32, F64, F16, BF16 */
      [F32] = {cv_copy4, cv_f64_f32, cv_f16_f32, cv_bf16_f32},
      [F64] = {cv_f32_f64, cv_copy8, cv_f16_f64, cv_bf16_f64},
      [F16] = {cv_f32_f16, cv_f64_f16, cv_copy2, cv_bf16_f16},
      [BF16] = {cv_f32_bf16, cv_f64_bf16, cv_f16_bf16, cv_copy2},
  };
  if (tpc_dtype_int(to) || tpc_dtype_int(from))
    return cpu_cvt_int(to, from);
  if (to > BF16 || from > BF16)
    return NULL;
  pthread_once(&cv_once, cv_pick);
  return table[to][from];
}

void cpu_cvt_round(uint32_t dtype, size_t n, float *dst, const float *src) {
  pthread_once(&cv_once, cv_pick);
  if (dtype == TYTO_PLUGIN_DTYPE_BF16) {
    cv.round_bf16(n, dst, src);
  } else if (dtype == TYTO_PLUGIN_DTYPE_F16) {
    uint16_t t[CV_CHUNK];
    for (size_t i = 0; i < n; i += CV_CHUNK) {
      size_t m = n - i < CV_CHUNK ? n - i : CV_CHUNK;
      cv.f32_f16(m, t, src + i);
      cv.f16_f32(m, dst + i, t);
    }
  } else if (dst != src) {
    memcpy(dst, src, n * sizeof *dst);
  }
}

/* ---- strided moves --------------------------------------------------------
 */

#define CV_MOVE(T, DST_AT, SRC_AT)                                             \
  do {                                                                         \
    T *o_ = dst;                                                               \
    const T *x_ = src;                                                         \
    for (size_t i = 0; i < n; i++)                                             \
      o_[DST_AT] = x_[SRC_AT];                                                 \
  } while (0)

void cpu_gather(size_t size, size_t n, void *dst, const void *src,
                int64_t stride) {
  if (size == 2)
    CV_MOVE(uint16_t, i, (int64_t)i * stride);
  else if (size == 4)
    CV_MOVE(uint32_t, i, (int64_t)i * stride);
  else
    CV_MOVE(uint64_t, i, (int64_t)i * stride);
}

void cpu_scatter(size_t size, size_t n, void *dst, int64_t stride,
                 const void *src) {
  if (size == 2)
    CV_MOVE(uint16_t, (int64_t)i * stride, i);
  else if (size == 4)
    CV_MOVE(uint32_t, (int64_t)i * stride, i);
  else
    CV_MOVE(uint64_t, (int64_t)i * stride, i);
}
