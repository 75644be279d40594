/*
 * The dtypes a device runs (ocl_dtype_check) and the OpenCL C that reads
 * and writes them (ocl_prelude_16, which every program gets after
 * ocl_prelude).
 *
 * f32 and f64 are OpenCL's float and double. bf16 runs on every device:
 * it is stored as ushort and converted with integer operations, a port of
 * plugins/common/half.h, so that results agree with the host's converter
 * bit for bit whatever the device's rounding and denormal modes. f16 is
 * stored as half and read and written with vload_half and
 * vstore_half_rte (core OpenCL 1.2 functions: no half arithmetic is
 * used, only f32), NaN aside: vstore_half_rte may drop a NaN's payload
 * and vload_half quiets it, so a NaN goes through the integer path, as
 * half.h has it. The plugin runs f16 only where the device has
 * cl_khr_fp16, or where the testing option fp16_without_extension asks
 * for it (every device has the two functions, so PoCL, which lacks the
 * extension, checks the f16 kernels in the test suite).
 *
 * i32 and i64 (ABI 1.6) are int and long, stored and computed as they
 * are (T and TS both the integer type; programs built for them define
 * TYTO_INT and TU, the unsigned type of the same width, through which
 * int.c wraps). Only the ops sdk/docs/ops.md lists for them run on them
 * (int.c, ocl_int_route).
 *
 * Both 16-bit formats compute in f32 (sdk/docs/ops.md, "Dtypes"):
 * kernels read them into float (TLD), compute, and round once when they
 * store (TST).
 */
#include "ops.h"

#include "errors.h"

/* Two parts: ISO C caps a string literal at 4095 characters. */
static const char part_16[] =
    "/* 16-bit formats, integer only (plugins/common/half.h). */\n"
    "inline ushort tyto_bits_bf16(uint u) {\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u)\n"
    "    return (ushort)((u >> 16) | 0x40u);\n"
    "  u += 0x7fffu + ((u >> 16) & 1u);\n"
    "  return (ushort)(u >> 16);\n"
    "}\n"
    "inline ushort tyto_f32_bf16(float f) {\n"
    "  return tyto_bits_bf16(as_uint(f));\n"
    "}\n"
    "inline float tyto_bf16_f32(ushort b) { return as_float((uint)b << 16); }\n"
    "inline ushort tyto_bits_f16(uint u) {\n"
    "  uint ax = u & 0x7fffffffu, e = ax >> 23;\n"
    "  ushort sign = (ushort)((u >> 16) & 0x8000u);\n"
    "  if (ax > 0x7f800000u)\n"
    "    return (ushort)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));\n"
    "  if (ax >= 0x477ff000u)\n"
    "    return (ushort)(sign | 0x7c00u);\n"
    "  if (e < 113u) {\n"
    "    if (e < 102u)\n"
    "      return sign;\n"
    "    uint m = (ax & 0x7fffffu) | 0x800000u, s = 126u - e;\n"
    "    uint r = m >> s, rem = m & ((1u << s) - 1u), hf = 1u << (s - 1u);\n"
    "    r += (rem > hf || (rem == hf && (r & 1u))) ? 1u : 0u;\n"
    "    return (ushort)(sign | r);\n"
    "  }\n"
    "  uint r = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;\n"
    "  r += (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ? 1u : 0u;\n"
    "  return (ushort)(sign | r);\n"
    "}\n"
    "inline ushort tyto_f32_f16(float f) {\n"
    "  return tyto_bits_f16(as_uint(f));\n"
    "}\n"
    "inline float tyto_f16_f32(ushort h) {\n"
    "  uint sign = (uint)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;\n"
    "  uint m = h & 0x3ffu;\n"
    "  if (e == 0x1fu)\n"
    "    return as_float(sign | 0x7f800000u | (m << 13));\n"
    "  if (e == 0u) {\n"
    "    if (m == 0u)\n"
    "      return as_float(sign);\n"
    "    uint s = clz(m) - 21u; /* brings m's top bit to bit 10 */\n"
    "    m <<= s;\n"
    "    return as_float(sign | ((113u - s) << 23) | ((m & 0x3ffu) << 13));\n"
    "  }\n"
    "  return as_float(sign | ((e + 112u) << 23) | (m << 13));\n"
    "}\n"
    "inline float tyto_round_bf16(float f) {\n"
    "  return tyto_bf16_f32(tyto_f32_bf16(f));\n"
    "}\n"
    "inline float tyto_round_f16(float f) {\n"
    "  return tyto_f16_f32(tyto_f32_f16(f));\n"
    "}\n";
static const char part_storage[] =
    "#if defined(TYTO_FP64)\n"
    "/* d rounded to an f32 (bits) by round-to-odd. */\n"
    "inline uint tyto_f64_f32odd(double d) {\n"
    "  ulong u = as_ulong(d), au = u & 0x7fffffffffffffffUL;\n"
    "  uint sign = (uint)(u >> 32) & 0x80000000u;\n"
    "  if (au >= 0x7ff0000000000000UL)\n"
    "    return sign | 0x7f800000u |\n"
    "           (au > 0x7ff0000000000000UL\n"
    "                ? 0x400000u | ((uint)(au >> 29) & 0x7fffffu) : 0u);\n"
    "  int e = (int)(au >> 52) - 1023;\n"
    "  if (e > 127)\n"
    "    return sign | 0x7f7fffffu;\n"
    "  if (e < -150)\n"
    "    return sign | (au != 0UL ? 1u : 0u);\n"
    "  ulong m = (au & 0xfffffffffffffUL) | (e > -1023 ? 1UL << 52 : 0UL);\n"
    "  int s = e >= -126 ? 29 : 29 + (-126 - e);\n"
    "  uint r = e >= -126 ? ((uint)(e + 127) << 23) |\n"
    "                           (uint)((m >> 29) & 0x7fffffu)\n"
    "                     : (uint)(m >> s);\n"
    "  r |= (m & ((1UL << s) - 1UL)) != 0UL ? 1u : 0u;\n"
    "  return sign | r;\n"
    "}\n"
    "#endif\n"
    "/* f16 through half pointers (no cl_khr_fp16 needed). */\n"
    "inline float tyto_ld_f16(__global const half *p, long i) {\n"
    "  float f = vload_half((size_t)i, p);\n"
    "  return isnan(f) ? tyto_f16_f32(((__global const ushort *)p)[i]) : f;\n"
    "}\n"
    "inline void tyto_st_f16(__global half *p, long i, float v) {\n"
    "  if (isnan(v))\n"
    "    ((__global ushort *)p)[i] = tyto_f32_f16(v);\n"
    "  else\n"
    "    vstore_half_rte(v, (size_t)i, p);\n"
    "}\n"
    "#if defined(TYTO_BF16)\n"
    "#define TS ushort\n"
    "#define TLD(p, i) tyto_bf16_f32((p)[i])\n"
    "#define TST(p, i, v) ((p)[i] = tyto_f32_bf16(v))\n"
    "#elif defined(TYTO_F16)\n"
    "#define TS half\n"
    "#define TLD(p, i) tyto_ld_f16((p), (i))\n"
    "#define TST(p, i, v) tyto_st_f16((p), (i), (v))\n"
    "#else\n"
    "#define TS T\n"
    "#define TLD(p, i) ((p)[i])\n"
    "#define TST(p, i, v) ((p)[i] = (v))\n"
    "#endif\n";

const char *const ocl_prelude_16[2] = {part_16, part_storage};

tyto_plugin_error *ocl_dtype_check(tyto_plugin_device *dev, const char *op,
                                   uint32_t dtype) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const ocl_devinfo *i = dev->info;
  unsigned ordinal = (unsigned)(i - dev->state->devs);
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F32:
  case TYTO_PLUGIN_DTYPE_BF16: return NULL;
  case TYTO_PLUGIN_DTYPE_F64:
    if (i->dtypes & TYTO_PLUGIN_DTYPE_BIT(dtype))
      return NULL;
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype f64 is not supported by opencl:%u \"%s\" "
                     "(it lacks cl_khr_fp64); use f32 or another device",
                     op, ordinal, i->name);
  case TYTO_PLUGIN_DTYPE_F16:
    if (i->dtypes & TYTO_PLUGIN_DTYPE_BIT(dtype))
      return NULL;
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype f16 is not supported by opencl:%u \"%s\": "
                     "f16 needs cl_khr_fp16, which this device lacks; use "
                     "bf16 or f32 (tyto_cast), or a device with cl_khr_fp16",
                     op, ordinal, i->name);
  case TYTO_PLUGIN_DTYPE_I32:
  case TYTO_PLUGIN_DTYPE_I64:
    if (i->dtypes & TYTO_PLUGIN_DTYPE_BIT(dtype))
      return NULL;
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype %s is not supported by opencl:%u \"%s\": "
                     "it is an embedded-profile device without 64-bit "
                     "integers (cles_khr_int64); use i32 or another device",
                     op, ocl_dtype_name(dtype), ordinal, i->name);
  default:
    return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype %s is not supported by the opencl plugin "
                     "(f32, f64, bf16, f16, i32 and i64 only)",
                     op, ocl_dtype_name(dtype));
  }
}
