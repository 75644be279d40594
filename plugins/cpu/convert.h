/*
 * Conversions between the CPU plugin's four float dtypes (F32, F64, F16,
 * BF16) over contiguous arrays: the edges where 16-bit data enter and
 * leave the f32 loops of every op family, and CAST.
 *
 * Every conversion gives the bits plugins/common/half.h gives, element for
 * element, whatever the path (AVX512-BF16 and F16C instructions where the
 * CPU has them and they pass a self-test against half.h at start-up,
 * vectorised integer code otherwise), and f32 <-> f64 is exact for
 * subnormals too although the plugin's threads run with FTZ and DAZ: a
 * CAST never flushes.
 */
#ifndef TYTO_PLUGIN_CPU_CONVERT_H
#define TYTO_PLUGIN_CPU_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "../common/common.h"

/* n contiguous elements of src converted into dst (no overlap). */
typedef void (*cpu_cvt_fn)(size_t n, void *dst, const void *src);

/* Whether dtype is F16 or BF16. */
static inline int cpu_dtype_half(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

/* The dtype a value of `dtype` is computed in: F64 for F64, F32 for the
 * others (the 16-bit formats are read exactly into f32). */
static inline uint32_t cpu_dtype_compute(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F64 ? TYTO_PLUGIN_DTYPE_F64
                                        : TYTO_PLUGIN_DTYPE_F32;
}

/* The conversion from dtype `from` to dtype `to` (any pair of F32, F64,
 * F16, BF16, I32, I64; the same dtype copies), as sdk/docs/ops.md's CAST
 * says: rounding to nearest with ties to even, to an integer truncating
 * and saturating (NaN to 0); NULL for another dtype. */
cpu_cvt_fn cpu_cvt(uint32_t to, uint32_t from);

/* convert_int.c: cpu_cvt for the pairs with an I32 or I64 (NULL for
 * others). One double converted to an integer: tpc_int_of_f64
 * (common.h). */
cpu_cvt_fn cpu_cvt_int(uint32_t to, uint32_t from);

/* The widening of a 16-bit operand into f32 for an op's arithmetic (not
 * for CAST or a move): cpu_cvt(F32, from), except that bf16 subnormals
 * read as zeros of their sign when the calling thread has DAZ set, as
 * its f32 arithmetic reads them, so that comparisons and the values they
 * select agree. */
cpu_cvt_fn cpu_cvt_arith(uint32_t from);

/* dst[i] = src[i] rounded to the precision of dtype (F16, BF16) and
 * widened back: what storing it in that dtype and reading it again would
 * give. F32 copies. dst may be src. */
void cpu_cvt_round(uint32_t dtype, size_t n, float *dst, const float *src);

/* Gathers n elements of `size` bytes (2, 4 or 8), src[0], src[stride],
 * ..., into contiguous dst; scatters contiguous src into dst[0],
 * dst[stride], .... */
void cpu_gather(size_t size, size_t n, void *dst, const void *src,
                int64_t stride);
void cpu_scatter(size_t size, size_t n, void *dst, int64_t stride,
                 const void *src);

/* One line for tyto-info on how 16-bit data are converted here: "f16:
 * F16C conversions; bf16: AVX512-BF16 conversions", or "... converted in
 * software". Static storage. */
const char *cpu_cvt_describe(void);

#endif
