/*
 * Floating formats, the reference converter and the tolerance classes of
 * tyto-conform (see fmt.h).
 */
#include "fmt.h"

#include <math.h>
#include <string.h>

#define DT(x) TYTO_PLUGIN_DTYPE_##x

static const cf_fmt fmts[] = {
    {DT(F32), "f32", 24, -126, 127, 32},
    {DT(F64), "f64", 53, -1022, 1023, 64},
    {DT(F16), "f16", 11, -14, 15, 16},
    {DT(BF16), "bf16", 8, -126, 127, 16},
};

const cf_fmt *cf_fmt_of(uint32_t dtype) {
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
    if (fmts[i].dtype == dtype)
      return &fmts[i];
  return NULL;
}

int cf_fmt_known(uint32_t dtype) {
  return cf_fmt_of(dtype) != NULL;
}

int cf_fmt_int(uint32_t dtype) {
  return dtype == DT(I32) || dtype == DT(I64);
}

int cf_fmt_bits(uint32_t dtype) {
  const cf_fmt *f = cf_fmt_of(dtype);
  return f ? f->bits : dtype == DT(I32) ? 32 : 64;
}

const char *cf_fmt_name(uint32_t dtype) {
  const cf_fmt *f = cf_fmt_of(dtype);
  if (f == NULL && cf_fmt_int(dtype))
    return dtype == DT(I32) ? "i32" : "i64";
  return f ? f->name : "-";
}

uint32_t cf_fmt_parse(const char *name) {
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
    if (strcmp(fmts[i].name, name) == 0)
      return fmts[i].dtype;
  if (strcmp(name, "i32") == 0)
    return DT(I32);
  if (strcmp(name, "i64") == 0)
    return DT(I64);
  return UINT32_MAX;
}

/* ------------------------------------------------------------- integers -- */

int64_t cf_fmt_to_int(uint32_t dtype, double v) {
  /* The limits as doubles: -2^31 and 2^31 (-2^63, 2^63) are exact; the
   * comparisons decide saturation before any conversion C leaves
   * undefined. Truncation toward zero is trunc(), exact for a double. */
  const double lim = dtype == DT(I32) ? 0x1p31 : 0x1p63;
  if (isnan(v))
    return 0;
  if (v >= lim)
    return dtype == DT(I32) ? INT32_MAX : INT64_MAX;
  if (v < -lim)
    return dtype == DT(I32) ? INT32_MIN : INT64_MIN;
  return (int64_t)trunc(v);
}

int64_t cf_fmt_wrap(uint32_t dtype, uint64_t bits) {
  if (dtype == DT(I32)) {
    /* The low 32 bits as two's complement, without relying on C's
     * implementation-defined conversion to a narrower signed type. */
    const uint64_t lo = bits & 0xffffffffu;
    return lo >= 0x80000000u ? (int64_t)lo - (int64_t)0x100000000 : (int64_t)lo;
  }
  return bits >= UINT64_C(0x8000000000000000)
             ? -(int64_t)(~bits) - 1 /* two's complement, no overflow */
             : (int64_t)bits;
}

double cf_fmt_from_int(uint32_t dtype, int64_t n) {
  const cf_fmt *f = cf_fmt_of(dtype);
  if (f == NULL) /* to an integer dtype: the low bits (I64 to I32) */
    return (double)cf_fmt_wrap(dtype, (uint64_t)n);
  /* |n| as an unsigned integer (INT64_MIN's 2^63 included), then rounded
   * to f->p significant bits in integer arithmetic, to nearest, ties to
   * the even last bit: one rounding, whatever the magnitude. */
  uint64_t u = n < 0 ? ~(uint64_t)n + 1 : (uint64_t)n;
  int len = 0, shift;
  while (len < 64 && (u >> len) != 0)
    len++;
  shift = len > f->p ? len - f->p : 0;
  if (shift > 0) {
    const uint64_t rem = u & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    u >>= shift;
    if (rem > half || (rem == half && (u & 1u)))
      u++;
  }
  double r = ldexp((double)u, shift);
  if (r > cf_fmt_max(dtype))
    r = INFINITY;
  return n < 0 ? -r : r;
}

double cf_fmt_max(uint32_t dtype) {
  const cf_fmt *f = cf_fmt_of(dtype);
  /* (2 - 2^(1-p)) 2^emax, computed exactly */
  return ldexp(2.0 - ldexp(1.0, 1 - f->p), f->emax);
}

double cf_fmt_min_normal(uint32_t dtype) {
  return ldexp(1.0, cf_fmt_of(dtype)->emin);
}

double cf_fmt_true_min(uint32_t dtype) {
  const cf_fmt *f = cf_fmt_of(dtype);
  return ldexp(1.0, f->emin - (f->p - 1));
}

double cf_fmt_unit_roundoff(uint32_t dtype) {
  return ldexp(1.0, -cf_fmt_of(dtype)->p);
}

/* Rounds |v| (finite, non-zero) to the grid of format f: the numbers of
 * the binade of v (or, below the smallest normal, of the subnormal range)
 * are the integers times 2^q, q = e - (p - 1) with e the binade's
 * exponent. |v| / 2^q is then below 2^p <= 2^53 and a power-of-two scaling
 * away from |v|, so it is exact in double; its integer part and the
 * fraction dropped decide the rounding exactly. */
static double round_to(const cf_fmt *f, double v) {
  int e;
  (void)frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
  e -= 1;
  if (e < f->emin)
    e = f->emin; /* subnormal range: the step stays 2^(emin - p + 1) */
  const int q = e - (f->p - 1);
  const double s = ldexp(fabs(v), -q);
  uint64_t n = (uint64_t)s;
  const double dropped = s - (double)n;
  if (dropped > 0.5 || (dropped == 0.5 && (n & 1u)))
    n++; /* to nearest, ties to the even integer (the even last bit) */
  const double r = ldexp((double)n, q);
  return copysign(r > cf_fmt_max(f->dtype) ? INFINITY : r, v);
}

double cf_fmt_round(uint32_t dtype, double v) {
  const cf_fmt *f = cf_fmt_of(dtype);
  if (cf_fmt_int(dtype)) /* as CAST converts; 0.0 + makes -0 +0 */
    return 0.0 + (double)cf_fmt_to_int(dtype, v);
  if (f == NULL || f->dtype == DT(F64) || !isfinite(v) || v == 0)
    return v;
  return round_to(f, v);
}

uint64_t cf_fmt_encode(uint32_t dtype, double v) {
  const cf_fmt *f = cf_fmt_of(dtype);
  const int fb = f->p - 1, eb = f->bits - f->p;
  const uint64_t sign = (uint64_t)(signbit(v) != 0) << (f->bits - 1);
  const uint64_t exp_all = ((uint64_t)1 << eb) - 1;
  if (f->dtype == DT(F64)) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
  }
  if (isnan(v)) /* the quiet NaN: exponent all ones, fraction's top bit */
    return sign | (exp_all << fb) | ((uint64_t)1 << (fb - 1));
  v = cf_fmt_round(dtype, v);
  if (isinf(v))
    return sign | (exp_all << fb);
  if (v == 0)
    return sign;
  int e;
  const double m = frexp(fabs(v), &e); /* |v| = 2m 2^(e-1), 2m in [1, 2) */
  e -= 1;
  if (e < f->emin) /* subnormal: |v| / 2^(emin - p + 1), biased exponent 0 */
    return sign | (uint64_t)ldexp(fabs(v), -(f->emin - fb));
  const uint64_t frac = (uint64_t)ldexp(2 * m - 1, fb);
  return sign | ((uint64_t)(e + f->emax) << fb) | frac;
}

double cf_fmt_decode(uint32_t dtype, uint64_t bits) {
  const cf_fmt *f = cf_fmt_of(dtype);
  const int fb = f->p - 1, eb = f->bits - f->p;
  if (f->dtype == DT(F64)) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
  }
  const int neg = (int)((bits >> (f->bits - 1)) & 1u);
  const uint64_t e = (bits >> fb) & (((uint64_t)1 << eb) - 1);
  const uint64_t frac = bits & (((uint64_t)1 << fb) - 1);
  double v;
  if (e == ((uint64_t)1 << eb) - 1)
    v = frac ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)frac, f->emin - fb);
  else
    v = ldexp((double)(frac | ((uint64_t)1 << fb)), (int)e - f->emax - fb);
  return neg ? -v : v;
}

void cf_fmt_store_bits(uint32_t dtype, void *p, int64_t i, uint64_t bits) {
  unsigned char *b = p;
  switch (cf_fmt_bits(dtype)) {
  case 16: {
    const uint16_t h = (uint16_t)bits;
    memcpy(b + 2 * i, &h, 2);
    break;
  }
  case 32: {
    const uint32_t w = (uint32_t)bits;
    memcpy(b + 4 * i, &w, 4);
    break;
  }
  default: memcpy(b + 8 * i, &bits, 8); break;
  }
}

uint64_t cf_fmt_load_bits(uint32_t dtype, const void *p, int64_t i) {
  const unsigned char *b = p;
  switch (cf_fmt_bits(dtype)) {
  case 16: {
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    return h;
  }
  case 32: {
    uint32_t w;
    memcpy(&w, b + 4 * i, 4);
    return w;
  }
  default: {
    uint64_t u;
    memcpy(&u, b + 8 * i, 8);
    return u;
  }
  }
}

void cf_fmt_store(uint32_t dtype, void *p, int64_t i, double v) {
  if (cf_fmt_int(dtype)) {
    cf_fmt_store_bits(dtype, p, i, (uint64_t)cf_fmt_to_int(dtype, v));
  } else if (dtype == DT(F32)) { /* the machine's own conversion, for speed */
    const float f = (float)cf_fmt_round(dtype, v); /* exact, in range */
    memcpy((unsigned char *)p + 4 * i, &f, 4);
  } else {
    cf_fmt_store_bits(dtype, p, i, cf_fmt_encode(dtype, v));
  }
}

double cf_fmt_load(uint32_t dtype, const void *p, int64_t i) {
  if (dtype == DT(F32)) {
    float f;
    memcpy(&f, (const unsigned char *)p + 4 * i, 4);
    return f;
  }
  if (cf_fmt_int(dtype)) /* exact but for an i64 beyond 2^53: rounded */
    return 0.0 + (double)cf_fmt_wrap(dtype, cf_fmt_load_bits(dtype, p, i));
  return cf_fmt_decode(dtype, cf_fmt_load_bits(dtype, p, i));
}

int cf_fmt_same(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* ------------------------------------------------------------ tolerance -- */

/* The table of sdk/docs/ops.md for f32 and f64: rtol, atol per class. */
static const double tol32[3][2] = {{1e-5, 1e-6}, {1e-4, 1e-5}, {1e-4, 1e-4}};
static const double tol64[3][2] = {
    {1e-12, 1e-14}, {1e-10, 1e-12}, {1e-10, 1e-10}};

/* f16 and bf16 are storage formats: an op reads its operands exactly into
 * f32, computes as for f32 and rounds the f32 result f to the 16-bit
 * format once: got = R(f). The kit's want is the exact value x rounded
 * once, R(x), and f32's class bounds |f - x| <= r|x| + a (r = a = 0 for
 * correctly rounded arithmetic, whose f32 result is x rounded to f32).
 * R moves a value by at most u|y| (u = 2^-p, the unit roundoff: 2^-11
 * f16, 2^-8 bf16) plus s/2 below the smallest normal, s the step there.
 * So |got - want| <= |f - x| + u|f| + u|x| + s
 *                 <= (2u + (1 + u) r)|x| + (1 + u) a + s,
 * and with |x| <= (|want| + s/2) / (1 - u):
 *   rtol = (2u + (1 + u) r) / (1 - u),   atol = (1 + u) a + 2s.
 * (Where |f - x| is below one step of the grid, got and want are equal or
 * neighbours: one unit in the last place, which rtol covers.) s is f16's
 * subnormal step, 2^-24 (its subnormals are f32 normals, computed and kept
 * exactly); for bf16, whose subnormals are f32's and may be flushed by a
 * device as f32's are, the smallest normal 2^-126. */
void cf_fmt_tolerance(uint32_t dtype, cf_class cls, double *rtol,
                      double *atol) {
  const int k = cls == CF_CLASS_TRANS ? 1 : cls == CF_CLASS_ACCUM ? 2 : 0;
  if (cf_fmt_int(dtype)) { /* integers are exact: equal or wrong */
    *rtol = 0;
    *atol = 0;
    return;
  }
  if (dtype == DT(F64)) {
    *rtol = tol64[k][0];
    *atol = tol64[k][1];
    return;
  }
  if (dtype != DT(F16) && dtype != DT(BF16)) {
    *rtol = tol32[k][0];
    *atol = tol32[k][1];
    return;
  }
  const double r = cls == CF_CLASS_EXACT ? 0 : tol32[k][0];
  const double a = cls == CF_CLASS_EXACT ? 0 : tol32[k][1];
  const double u = cf_fmt_unit_roundoff(dtype);
  const double step =
      dtype == DT(F16) ? cf_fmt_true_min(dtype) : cf_fmt_min_normal(dtype);
  *rtol = (2 * u + (1 + u) * r) / (1 - u);
  *atol = (1 + u) * a + 2 * step;
}
