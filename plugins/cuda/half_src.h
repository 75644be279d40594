/*
 * The 16-bit conversions of plugins/common/half.h for the CUDA plugin's
 * kernels, bit for bit: to nearest with ties to even, NaN kept NaN (quiet,
 * sign kept), infinities and signed zeros kept, f16 subnormals produced and
 * read exactly, f64 narrowed through round-to-odd f32 (one rounding).
 * Integer arithmetic only, so nothing depends on the GPU's floating-point
 * modes or on headers NVRTC may lack (cuda_fp16.h is not on every GPU
 * machine's NVRTC path), and every architecture the plugin drives runs it.
 *
 * Each group is one macro body, written once and used twice: stringified,
 * it is part of the CUDA C++ every program starts with (kernels.c), with
 * F = TYTO_DEV, which the program defines as __device__ __forceinline__
 * (the host headers define those two words away); expanded with F =
 * "static inline" it is C, which tests/cuda/test_cuda_half_src.c compiles
 * and checks against half.h over every 16-bit pattern and millions of f32
 * and f64 ones. The bodies call the bit casts tyto_f2u (float -> unsigned),
 * tyto_u2f and tyto_d2u (double -> unsigned long long), which each side
 * defines. No macro is used inside them: the host expands what it knows
 * before stringifying. Each body stays under ISO C's 4095 characters of a
 * string literal.
 */
#ifndef TYTO_PLUGINS_CUDA_HALF_SRC_H
#define TYTO_PLUGINS_CUDA_HALF_SRC_H

/* bfloat16: the top half of an f32. */
#define TCU_HALF_BF16(F)                                                       \
  F float tyto_bf16_f(unsigned short b) {                                      \
    return tyto_u2f((unsigned)b << 16);                                        \
  }                                                                            \
  F unsigned short tyto_f_bf16(float f) {                                      \
    unsigned u = tyto_f2u(f);                                                  \
    if ((u & 0x7fffffffu) > 0x7f800000u)                                       \
      return (unsigned short)((u >> 16) | 0x0040u);                            \
    u += 0x7fffu + ((u >> 16) & 1u);                                           \
    return (unsigned short)(u >> 16);                                          \
  }

/* IEEE 754 binary16. */
#define TCU_HALF_F16(F)                                                        \
  F float tyto_f16_f(unsigned short h) {                                       \
    unsigned sign = (unsigned)(h & 0x8000u) << 16;                             \
    unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;                            \
    if (e == 0x1fu)                                                            \
      return tyto_u2f(sign | 0x7f800000u | (m << 13));                         \
    if (e == 0) {                                                              \
      unsigned s = 0;                                                          \
      if (m == 0)                                                              \
        return tyto_u2f(sign);                                                 \
      while (!(m & 0x400u)) {                                                  \
        m <<= 1;                                                               \
        s++;                                                                   \
      }                                                                        \
      return tyto_u2f(sign | ((113u - s) << 23) | ((m & 0x3ffu) << 13));       \
    }                                                                          \
    return tyto_u2f(sign | ((e + 112u) << 23) | (m << 13));                    \
  }                                                                            \
  F unsigned short tyto_f_f16(float f) {                                       \
    unsigned u = tyto_f2u(f);                                                  \
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);               \
    unsigned ax = u & 0x7fffffffu, e, r, rem;                                  \
    if (ax > 0x7f800000u)                                                      \
      return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));         \
    if (ax >= 0x477ff000u)                                                     \
      return (unsigned short)(sign | 0x7c00u);                                 \
    e = ax >> 23;                                                              \
    if (e < 113u) {                                                            \
      unsigned mant = (ax & 0x7fffffu) | 0x800000u, s = 126u - e, half;        \
      if (e < 102u)                                                            \
        return sign;                                                           \
      r = mant >> s;                                                           \
      rem = mant & ((1u << s) - 1u);                                           \
      half = 1u << (s - 1u);                                                   \
      r += rem > half || (rem == half && (r & 1u));                            \
      return (unsigned short)(sign | r);                                       \
    }                                                                          \
    r = (ax >> 13) - (112u << 10);                                             \
    rem = ax & 0x1fffu;                                                        \
    r += rem > 0x1000u || (rem == 0x1000u && (r & 1u));                        \
    return (unsigned short)(sign | r);                                         \
  }

/* From f64: round-to-odd to f32, then the 16-bit rounding (half.h's
 * tpc_f64_to_f32_odd: one correct rounding of the double). */
#define TCU_HALF_F64(F)                                                        \
  F float tyto_d_f32odd(double d) {                                            \
    unsigned long long u = tyto_d2u(d);                                        \
    unsigned sign = (unsigned)(u >> 32) & 0x80000000u;                         \
    unsigned long long au = u & 0x7fffffffffffffffull, mant;                   \
    unsigned r;                                                                \
    int e;                                                                     \
    if (au >= 0x7ff0000000000000ull)                                           \
      return tyto_u2f(sign | 0x7f800000u |                                     \
                      (au > 0x7ff0000000000000ull                              \
                           ? 0x400000u | ((unsigned)(au >> 29) & 0x7fffffu)    \
                           : 0u));                                             \
    e = (int)(au >> 52) - 1023;                                                \
    if (e > 127)                                                               \
      return tyto_u2f(sign | 0x7f7fffffu);                                     \
    if (e < -150)                                                              \
      return tyto_u2f(sign | (au ? 1u : 0u));                                  \
    mant = (au & 0xfffffffffffffull) | (e > -1023 ? 1ull << 52 : 0ull);        \
    if (e >= -126) {                                                           \
      r = ((unsigned)(e + 127) << 23) | (unsigned)((mant >> 29) & 0x7fffffu);  \
      r |= (mant & ((1ull << 29) - 1ull)) != 0ull;                             \
    } else {                                                                   \
      int s = 29 + (-126 - e);                                                 \
      r = (unsigned)(mant >> s);                                               \
      r |= (mant & ((1ull << s) - 1ull)) != 0ull;                              \
    }                                                                          \
    return tyto_u2f(sign | r);                                                 \
  }                                                                            \
  F unsigned short tyto_d_bf16(double d) {                                     \
    return tyto_f_bf16(tyto_d_f32odd(d));                                      \
  }                                                                            \
  F unsigned short tyto_d_f16(double d) {                                      \
    return tyto_f_f16(tyto_d_f32odd(d));                                       \
  }

#endif /* TYTO_PLUGINS_CUDA_HALF_SRC_H */
