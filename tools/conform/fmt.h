/*
 * The floating formats of the plugin ABI as the conformance kit sees them:
 * f32, f64, f16 (IEEE 754 binary16) and bf16 (bfloat16), described by
 * their precision and exponent range; a reference converter that rounds a
 * double to any of them (to nearest, ties to even, once; overflow to an
 * infinity; subnormals exact) and encodes and decodes their bit patterns;
 * and the tolerance classes of sdk/docs/ops.md, derived for the 16-bit
 * formats from their unit roundoff.
 *
 * The converter is written from the formats' definitions with frexp,
 * ldexp and integer rounding, independently of the plugins' own
 * conversions (plugins/common/half.h), so that it can judge them.
 */
#ifndef TYTO_CONFORM_FMT_H
#define TYTO_CONFORM_FMT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

/* A binary floating format: p significand bits (the implicit one
 * included), normal exponents emin .. emax (the value of a normal number
 * is 1.f * 2^e), `bits` bits in memory (sign, exponent, p - 1 fraction). */
typedef struct cf_fmt {
  uint32_t dtype;
  const char *name; /* "bf16" */
  int p, emin, emax, bits;
} cf_fmt;

/* The format of an ABI dtype, or NULL for a dtype that is not floating. */
const cf_fmt *cf_fmt_of(uint32_t dtype);

/* Whether dtype is one of the four floating dtypes. */
int cf_fmt_known(uint32_t dtype);

/* Whether dtype is one of the integer dtypes (I32, I64: ABI 1.6). */
int cf_fmt_int(uint32_t dtype);

/* Bits of one element of a floating or integer dtype. */
int cf_fmt_bits(uint32_t dtype);

/* The dtype's name ("f16", "i32"), or "-" for an unknown one. */
const char *cf_fmt_name(uint32_t dtype);

/* The dtype named `name` ("f32", "f64", "f16", "bf16", "i32", "i64"), or
 * UINT32_MAX. */
uint32_t cf_fmt_parse(const char *name);

/* The reference converter of CAST to and from the integer dtypes
 * (sdk/docs/ops.md, CAST), written from the definitions, not the
 * plugins' code:
 * - cf_fmt_to_int: a double to I32 or I64, truncated toward zero,
 *   saturated at the dtype's limits, NaN giving 0;
 * - cf_fmt_wrap: the two's-complement value of the low 32 (I32) or 64
 *   (I64) bits of `bits` (wrapping arithmetic, I64 to I32);
 * - cf_fmt_from_int: n to a floating dtype rounded once to nearest, ties
 *   to even (exact for every int64, beyond 2^53 included), an infinity
 *   beyond the dtype's range (f16); to I32 or I64 its low bits. */
int64_t cf_fmt_to_int(uint32_t dtype, double v);
int64_t cf_fmt_wrap(uint32_t dtype, uint64_t bits);
double cf_fmt_from_int(uint32_t dtype, int64_t n);

/* v rounded to dtype once: to nearest, ties to even; a finite value whose
 * rounding exceeds the largest finite one becomes an infinity of its sign;
 * NaN, infinities and signed zeros kept. Exact for every double v. For
 * I32 and I64: v converted as CAST converts (cf_fmt_to_int), as a double
 * (rounded for an i64 beyond 2^53). */
double cf_fmt_round(uint32_t dtype, double v);

/* The largest finite value, the smallest normal, the smallest subnormal
 * and the unit roundoff u = 2^-p of dtype. */
double cf_fmt_max(uint32_t dtype);
double cf_fmt_min_normal(uint32_t dtype);
double cf_fmt_true_min(uint32_t dtype);
double cf_fmt_unit_roundoff(uint32_t dtype);

/* The bit pattern of v in dtype (v is rounded to it first; a NaN becomes
 * the quiet NaN of v's sign) and the value of a bit pattern (every NaN
 * pattern reads as a NaN). */
uint64_t cf_fmt_encode(uint32_t dtype, double v);
double cf_fmt_decode(uint32_t dtype, uint64_t bits);

/* Element i of an array of dtype at p: written (v rounded to dtype) or
 * read as a double (exact, but an i64 beyond 2^53: rounded to nearest);
 * and as raw bit patterns. */
void cf_fmt_store(uint32_t dtype, void *p, int64_t i, double v);
double cf_fmt_load(uint32_t dtype, const void *p, int64_t i);
void cf_fmt_store_bits(uint32_t dtype, void *p, int64_t i, uint64_t bits);
uint64_t cf_fmt_load_bits(uint32_t dtype, const void *p, int64_t i);

/* Whether two values of a dtype are the same for the ABI: both NaN (the
 * payload is not specified), or equal with zeros of the same sign. */
int cf_fmt_same(double a, double b);

/* The accuracy classes of sdk/docs/ops.md. */
typedef enum cf_class {
  CF_CLASS_EXACT = 0, /* correctly rounded arithmetic, selections */
  CF_CLASS_TRANS = 1, /* functions of the C library */
  CF_CLASS_ACCUM = 2  /* sums, products of matrices, factorisations */
} cf_class;

/* The tolerance of class cls in dtype: got passes against want when
 * |got - want| <= atol + rtol |want|. For f32 and f64 the table of ops.md;
 * for f16 and bf16, derived from the unit roundoff u and f32's class
 * (r, a; 0 for the exact class): rtol = (2u + (1 + u) r) / (1 - u),
 * atol = (1 + u) a + 2s, s the format's step below its smallest normal
 * (fmt.c has the derivation). */
void cf_fmt_tolerance(uint32_t dtype, cf_class cls, double *rtol, double *atol);

#endif
