/* The dtype table (see dtype.h) and the 2-byte formats' conversions. */
#include "dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tyto/plugin.h>

_Static_assert(TYTO_F32 == (int)TYTO_PLUGIN_DTYPE_F32,
               "tyto_dtype follows the plugin ABI");
_Static_assert(TYTO_F64 == (int)TYTO_PLUGIN_DTYPE_F64,
               "tyto_dtype follows the plugin ABI");
_Static_assert(TYTO_F16 == (int)TYTO_PLUGIN_DTYPE_F16,
               "tyto_dtype follows the plugin ABI");
_Static_assert(TYTO_BF16 == (int)TYTO_PLUGIN_DTYPE_BF16,
               "tyto_dtype follows the plugin ABI");
_Static_assert(TYTO_I32 == (int)TYTO_PLUGIN_DTYPE_I32,
               "tyto_dtype follows the plugin ABI");
_Static_assert(TYTO_I64 == (int)TYTO_PLUGIN_DTYPE_I64,
               "tyto_dtype follows the plugin ABI");

/* A binary floating-point format of 1 sign bit, `ebits` exponent bits and
 * `mbits` stored fraction bits, in the low bits of a uint16_t. */
typedef struct small_format {
  int ebits, mbits;
} small_format;

static const small_format F16 = {5, 10}, BF16 = {8, 7};

/* Rounds v to the format, ties to even, straight from the double (never
 * through float, which would round twice). */
static uint16_t small_from_double(small_format f, double v) {
  const int bias = (1 << (f.ebits - 1)) - 1, emax_biased = (1 << f.ebits) - 1;
  const uint32_t sign = signbit(v) ? 1u << (f.ebits + f.mbits) : 0;
  const uint32_t inf = (uint32_t)emax_biased << f.mbits;
  if (isnan(v))
    return (uint16_t)(sign | inf | 1u << (f.mbits - 1));
  double a = fabs(v);
  if (isinf(a))
    return (uint16_t)(sign | inf);
  if (a == 0)
    return (uint16_t)sign;
  int e;
  frexp(a, &e); /* a = m * 2^e, 0.5 <= m < 1: a's exponent is e - 1 */
  int ex = e - 1 < 1 - bias ? 1 - bias : e - 1; /* subnormals: emin */
  if (ex > bias)
    return (uint16_t)(sign | inf);
  /* The significand in units of the last place: exact, a power-of-two
   * scaling of a double that stays far from the double's own limits. */
  double m = ldexp(a, f.mbits - ex), r = floor(m), rest = m - r;
  if (rest > 0.5 || (rest == 0.5 && fmod(r, 2.0) != 0))
    r += 1;
  uint32_t q = (uint32_t)r, hidden = 1u << f.mbits;
  if (q == hidden << 1) { /* rounded up to the next binade */
    q = hidden;
    ex++;
  }
  uint32_t biased = q >= hidden ? (uint32_t)(ex + bias) : 0;
  if (biased >= (uint32_t)emax_biased)
    return (uint16_t)(sign | inf);
  return (uint16_t)(sign | biased << f.mbits | (q & (hidden - 1)));
}

static double small_to_double(small_format f, uint16_t h) {
  const int bias = (1 << (f.ebits - 1)) - 1, emax_biased = (1 << f.ebits) - 1;
  const uint32_t frac = h & ((1u << f.mbits) - 1);
  const int biased = (h >> f.mbits) & emax_biased;
  const int neg = (h >> (f.ebits + f.mbits)) & 1;
  double v;
  if (biased == emax_biased)
    v = frac ? NAN : INFINITY;
  else if (biased == 0)
    v = ldexp((double)frac, 1 - bias - f.mbits);
  else
    v = ldexp((double)(frac | 1u << f.mbits), biased - bias - f.mbits);
  return neg ? -v : v;
}

uint16_t dtype_f16_from_double(double v) {
  return small_from_double(F16, v);
}
double dtype_f16_to_double(uint16_t h) {
  return small_to_double(F16, h);
}
uint16_t dtype_bf16_from_double(double v) {
  return small_from_double(BF16, v);
}
double dtype_bf16_to_double(uint16_t b) {
  return small_to_double(BF16, b);
}

static double load_f32(const void *p, size_t i) {
  return (double)((const float *)p)[i];
}
static double load_f64(const void *p, size_t i) {
  return ((const double *)p)[i];
}
static double load_f16(const void *p, size_t i) {
  return dtype_f16_to_double(((const uint16_t *)p)[i]);
}
static double load_bf16(const void *p, size_t i) {
  return dtype_bf16_to_double(((const uint16_t *)p)[i]);
}
static void store_f32(void *p, size_t i, double v) {
  ((float *)p)[i] = (float)v;
}
static void store_f64(void *p, size_t i, double v) {
  ((double *)p)[i] = v;
}
static void store_f16(void *p, size_t i, double v) {
  ((uint16_t *)p)[i] = dtype_f16_from_double(v);
}
static void store_bf16(void *p, size_t i, double v) {
  ((uint16_t *)p)[i] = dtype_bf16_from_double(v);
}

static double load_i32(const void *p, size_t i) {
  return (double)((const int32_t *)p)[i];
}
static double load_i64(const void *p, size_t i) {
  return (double)((const int64_t *)p)[i];
}
/* v toward zero, saturated to [lo, hi] (both powers of two, or one less,
 * so the comparisons in double are exact), NaN giving 0. */
static double to_integer(double v, double lo, double hi) {
  if (isnan(v))
    return 0;
  if (v <= lo)
    return lo;
  return v >= hi ? hi : trunc(v);
}
static void store_i32(void *p, size_t i, double v) {
  ((int32_t *)p)[i] = (int32_t)to_integer(v, INT32_MIN, INT32_MAX);
}
static void store_i64(void *p, size_t i, double v) {
  /* INT64_MAX is not a double: 2^63 is the first value out of range. */
  if (v >= 0x1p63)
    ((int64_t *)p)[i] = INT64_MAX;
  else
    ((int64_t *)p)[i] = (int64_t)to_integer(v, (double)INT64_MIN, 0x1p63);
}

/* Indexed by tyto_dtype. */
static const dtype_info table[] = {
    {TYTO_F32, "f32", "F32", 4, 0, TYTO_PLUGIN_DTYPE_F32, TYTO_F32, load_f32,
     store_f32, 24, -125, 128},
    {TYTO_F64, "f64", "F64", 8, 0, TYTO_PLUGIN_DTYPE_F64, TYTO_F64, load_f64,
     store_f64, 53, -1021, 1024},
    {TYTO_F16, "f16", "F16", 2, 0, TYTO_PLUGIN_DTYPE_F16, TYTO_F32, load_f16,
     store_f16, 11, -13, 16},
    {TYTO_BF16, "bf16", "BF16", 2, 0, TYTO_PLUGIN_DTYPE_BF16, TYTO_F32,
     load_bf16, store_bf16, 8, -125, 128},
    {TYTO_I32, "i32", "I32", 4, 1, TYTO_PLUGIN_DTYPE_I32, TYTO_I32, load_i32,
     store_i32, 31, 0, 0},
    {TYTO_I64, "i64", "I64", 8, 1, TYTO_PLUGIN_DTYPE_I64, TYTO_I64, load_i64,
     store_i64, 63, 0, 0},
};

const dtype_info *dtype_info_of(tyto_dtype d) {
  if ((unsigned)d >= sizeof table / sizeof *table)
    return NULL;
  return &table[d];
}

const dtype_info *dtype_info_of_abi(uint32_t abi) {
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (table[i].abi == abi)
      return &table[i];
  return NULL;
}

int dtype_host_arith(tyto_dtype d) {
  const dtype_info *i = dtype_info_of(d);
  return i && !i->integer && i->arith == d;
}

int dtype_is_int(tyto_dtype d) {
  const dtype_info *i = dtype_info_of(d);
  return i && i->integer;
}

int dtype_takes_value(tyto_dtype d, double v) {
  const dtype_info *i = dtype_info_of(d);
  if (!i || !i->integer)
    return 1;
  double lim = i->digits < 53 ? ldexp(1.0, i->digits) : 0x1p53;
  return v == trunc(v) && v >= -lim &&
         (v < lim || (i->digits >= 53 && v == lim));
}

double dtype_index_top(tyto_dtype d) {
  const dtype_info *i = dtype_info_of(d);
  return i ? ldexp(1.0, i->digits) - (i->integer ? 1 : 0) : 0;
}

tyto_dtype dtype_index_for(tyto_dtype d, int64_t n) {
  if (!dtype_is_int(d) && (double)(n - 1) <= dtype_index_top(d))
    return d;
  return TYTO_I64;
}

int tyto_dtype_is_integer(tyto_dtype dtype) {
  return dtype_is_int(dtype);
}

int dtype_holds(tyto_dtype w, tyto_dtype d) {
  const dtype_info *a = dtype_info_of(w), *b = dtype_info_of(d);
  if (!a || !b)
    return 0;
  /* An integer holds no fraction; a float holds the integers of at most
   * its digits (sign apart). */
  if (a->integer || b->integer)
    return b->integer && a->digits >= b->digits;
  /* As many digits, as high a top binade, and a least subnormal (its
   * quantum, 2^(min_exp - digits)) no coarser: then every finite value of
   * d, a multiple of d's quantum with at most d's digits, is one of w. */
  return a->digits >= b->digits && a->max_exp >= b->max_exp &&
         a->min_exp - a->digits <= b->min_exp - b->digits;
}

int dtype_count(void) {
  return (int)(sizeof table / sizeof *table);
}

const char *tyto_dtype_name(tyto_dtype dtype) {
  const dtype_info *i = dtype_info_of(dtype);
  return i ? i->name : "?";
}

size_t tyto_dtype_size(tyto_dtype dtype) {
  const dtype_info *i = dtype_info_of(dtype);
  return i ? i->size : 0;
}
