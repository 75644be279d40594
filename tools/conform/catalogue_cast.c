/*
 * Catalogue cases of CAST (see catalogue_int.h): from the row's dtype S to
 * each of the four floating dtypes D (S itself included), over the
 * elementwise layouts, S's special values, the rounding boundaries of D
 * (ties of both parities, a source ulp either side, and for f64 sources
 * the double-rounding traps a conversion through f32 falls into), its
 * overflow threshold and subnormals, every bit pattern of a 16-bit S and
 * random patterns of a wider one. Every case is checked bit for bit
 * against the kit's reference converter (fmt.h), not the reference plugin;
 * a case runs where the device lists both dtypes.
 */
#include "catalogue_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DT(x) TYTO_PLUGIN_DTYPE_##x
#define MAX_VALS 256

static const uint32_t dtypes[4] = {DT(F32), DT(F64), DT(F16), DT(BF16)};

/* The values of each (S, D) pair's "rounding boundaries" case: built on
 * each catalogue build (the cases point at them). */
static double bound_vals[4][4][MAX_VALS];

static int index_of(uint32_t dt) {
  for (int i = 0; i < 4; i++)
    if (dtypes[i] == dt)
      return i;
  return 0;
}

/* Whether every value of s is one of d. */
static int holds(uint32_t d, uint32_t s) {
  const cf_fmt *fd = cf_fmt_of(d), *fs = cf_fmt_of(s);
  return fd->p >= fs->p && fd->emax >= fs->emax &&
         fd->emin - fd->p <= fs->emin - fs->p;
}

typedef struct vals {
  double *v;
  uint32_t n;
  uint32_t s; /* the source dtype: only values it holds are kept */
} vals;

static void put(vals *x, double v) {
  if (x->n + 2 <= MAX_VALS && cf_fmt_round(x->s, v) == v) {
    x->v[x->n++] = v;
    x->v[x->n++] = -v;
  }
}

/* Around m * 2^q + 2^(q-1), the midpoint after the grid number m 2^q of
 * d's binade (or subnormal range) whose step is 2^q: the tie itself, one
 * step of s either side (which must round away from the tie), and the
 * values a tiny distance either side that an f32 rounding would move onto
 * the tie (the double rounding of a conversion through f32). */
static void around_tie(vals *x, double m, int q) {
  const double tie = ldexp(2 * m + 1, q - 1);
  const cf_fmt *fs = cf_fmt_of(x->s);
  int e;
  (void)frexp(tie, &e);
  const double ulp_s =
      ldexp(1.0, (e - 1 < fs->emin ? fs->emin : e - 1) - (fs->p - 1));
  put(x, tie);
  put(x, tie + ulp_s);
  put(x, tie - ulp_s);
  put(x, tie + ldexp(1.0, e - 1 - 30));
  put(x, tie - ldexp(1.0, e - 1 - 30));
}

/* The boundaries of d, as values of s. */
static uint32_t boundaries(uint32_t s, uint32_t d, double *out) {
  const cf_fmt *f = cf_fmt_of(d);
  const double mx = cf_fmt_max(d), tiny = cf_fmt_true_min(d);
  vals x = {out, 0, s};
  const int binades[] = {0, 3, -1, f->emin, f->emax};
  for (size_t k = 0; k < sizeof binades / sizeof binades[0]; k++) {
    const int q = binades[k] - (f->p - 1);
    const double m = ldexp(1.0, f->p - 1); /* 1.000..0 of the binade */
    around_tie(&x, m, q);                  /* even: rounds down on a tie */
    around_tie(&x, m + 1, q);              /* odd: rounds up */
    around_tie(&x, 2 * m - 1, q); /* the binade's last: up to the next */
  }
  /* Overflow: the largest finite value, its half step beyond (a tie of an
   * odd last bit: the infinity), just below it (the largest), the double
   * rounding trap below it, and far beyond. */
  const double half = ldexp(1.0, f->emax - f->p);
  put(&x, mx);
  around_tie(&x, ldexp(1.0, f->p) - 1, f->emax - (f->p - 1));
  put(&x, mx + 3 * half);
  put(&x, 4 * mx);
  /* Subnormals: the smallest, its half (a tie: zero), 1.5 of it (a tie:
   * 2), the largest subnormal and the smallest normal, their midpoint. */
  put(&x, tiny);
  around_tie(&x, 0, f->emin - (f->p - 1));
  around_tie(&x, 1, f->emin - (f->p - 1));
  around_tie(&x, ldexp(1.0, f->p - 1) - 1, f->emin - (f->p - 1));
  put(&x, tiny / 4);
  put(&x, cf_fmt_min_normal(d));
  return x.n;
}

/* Tags the cases from `first` on "to D: ..." and makes them bit-for-bit
 * model cases. */
static void finish_pair(cf_builder *b, size_t first, uint32_t d) {
  for (size_t k = first; k < b->n; k++) {
    cf_case *c = &b->cases[k];
    char name[64];
    c->out[0].l.dtype = d;
    c->special = 1;
    c->expect = CF_EXPECT_VALUES;
    c->bitwise = 1;
    /* Into its own dtype CAST is COPY, which keeps subnormals. */
    c->exact = d == c->in[0].l.dtype;
    snprintf(name, sizeof name, "to %s: %.50s", cf_fmt_name(d), c->name);
    memcpy(c->name, name, sizeof name);
  }
}

static void finish_none(cf_builder *b, cf_case *c) {
  (void)b, (void)c;
}

void cf_cast_cases(cf_builder *b) {
  const uint32_t s = b->dtype;
  const cf_fmt *fs = cf_fmt_of(s);
  static const int64_t sq[2] = {256, 256};
  cf_case *c;
  for (int k = 0; k < 4; k++) {
    const uint32_t d = dtypes[k];
    const cf_fmt *fd = cf_fmt_of(d);
    const size_t first = b->n;
    uint32_t n;
    cf_eltwise_cases(b, 1, 1, finish_none);
    /* The source's special values. */
    if ((c = cf_add(b, "special values")) != NULL)
      cf_special_grid(b, c, 1, 1);
    /* Where d rounds: only where it cannot hold every value of s. */
    double *bv = bound_vals[index_of(s)][k];
    if (!holds(d, s) && (n = boundaries(s, d, bv)) > 0 &&
        (c = cf_add(b, "ties, overflow, subnormals")) != NULL) {
      const int64_t shape[1] = {n};
      cf_in_set(b, c, 0, 1, shape, NULL, 0);
      cf_out_set(b, c, 0, 1, shape, NULL, 0);
      c->in[0].list = bv;
      c->in[0].n_list = n;
      c->in[0].grid_dims = 1;
    }
    /* Every pattern of a 16-bit source, random ones of a wider one. */
    if ((c = cf_add(b, fs->bits == 16 ? "every bit pattern"
                                      : "random bit patterns")) != NULL) {
      cf_in_set(b, c, 0, 2, sq, NULL, 0);
      cf_out_set(b, c, 0, 2, sq, NULL, 0);
      cf_in_values(c, 0, CF_BITS_ALL, 0, 0);
    }
    /* And a wider source's patterns around d's range, subnormals to
     * overflow. */
    if (fs->bits > 16 && !holds(d, s) &&
        (c = cf_add(b, "random patterns near its range")) != NULL) {
      cf_in_set(b, c, 0, 2, sq, NULL, 0);
      cf_out_set(b, c, 0, 2, sq, NULL, 0);
      cf_in_values(c, 0, CF_BITS_EXP, fd->emin - fd->p - 2, fd->emax + 2);
    }
    finish_pair(b, first, d);
  }
}
