/*
 * Special-value cases and their checks (see specials.h). The cases are
 * built by cf_special_cases() into the catalogue, after each op's own.
 */
#include "specials.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalogue_int.h"
#include "compare.h"
#include "model.h"

#define OP(x) TYTO_PLUGIN_OP_##x

/* ----------------------------------------------------------- the values -- */

/* f16 and bf16 (ABI 1.5) under float.h's names for f32 and f64, and the
 * values that make their roundings ties: half a unit in the last place of
 * 1 (1 + that rounds to 1, the even neighbour), 1 plus one unit (odd: plus
 * half a unit rounds up), and half a step of the largest binade (the
 * largest finite value plus that is the tie that overflows). */
#define HF_TRUE_MIN 0x1p-24
#define HF_MIN 0x1p-14
#define HF_MAX 65504.0
#define HF_HALF 0x1p-11
#define HF_ODD (1 + 0x1p-10)
#define HF_OVER 16.0
#define BF_TRUE_MIN 0x1p-133
#define BF_MIN 0x1p-126
#define BF_MAX 0x1.fep127
#define BF_HALF 0x1p-8
#define BF_ODD (1 + 0x1p-7)
#define BF_OVER 0x1p119

/* One input's values: both zeros, both infinities, NaN, the smallest and
 * a larger subnormal, the smallest normal and the largest finite values,
 * and the edges of the ops' domains (1 for log, acosh and atanh, 0.5 and 2
 * for asin, acosh; halves for round; 100 and 1000, where exp, sinh and
 * cosh overflow). */
#define UNARY(T)                                                               \
  NAN, INFINITY, -INFINITY, 0.0, -0.0, T##_TRUE_MIN, -T##_TRUE_MIN,            \
      T##_MIN / 2, -T##_MIN / 2, T##_MIN, -T##_MIN, T##_MAX, -T##_MAX, 1, -1,  \
      0.5, -0.5, 2, -2, 2.5, -2.5, 0.75, 100, -100, 1000, -1000
/* The 16-bit formats add 1 + one unit (odd), and 12 and 300, whose exp,
 * sinh, cosh and square overflow f16 (not f32). */
#define UNARY16(T) UNARY(T), T##_ODD, -T##_ODD, 12, -12, 300, -300
/* Binary ops take every pair of these (odd and even whole numbers for
 * pow's sign rules); the 16-bit formats add the ties' makers: 1 + half a
 * unit, 1 + one unit + half a unit, 3 * (1 + one unit) are ties, and so is
 * the largest + half a step, which overflows. */
#define BINARY(T)                                                              \
  NAN, INFINITY, -INFINITY, 0.0, -0.0, T##_TRUE_MIN, -T##_TRUE_MIN, T##_MAX,   \
      -T##_MAX, 1, -1, 0.5, -2, 3, -3, 2.5
#define BINARY16(T) BINARY(T), T##_HALF, T##_ODD, T##_OVER
/* Ternary ops every triple of these. */
#define TERNARY(T)                                                             \
  NAN, INFINITY, -INFINITY, 0.0, -0.0, T##_TRUE_MIN, 1, -1, 0.5, T##_MAX,      \
      -2.5, 2
#define TERNARY16(T) TERNARY(T), T##_HALF, T##_ODD

static const double un32[] = {UNARY(FLT)}, un64[] = {UNARY(DBL)};
static const double un16[] = {UNARY16(HF)}, unbf[] = {UNARY16(BF)};
static const double bi32[] = {BINARY(FLT)}, bi64[] = {BINARY(DBL)};
static const double bi16[] = {BINARY16(HF)}, bibf[] = {BINARY16(BF)};
static const double te32[] = {TERNARY(FLT)}, te64[] = {TERNARY(DBL)};
static const double te16[] = {TERNARY16(HF)}, tebf[] = {TERNARY16(BF)};

#define N_OF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* One of four arrays by dtype: f32, f64, f16, bf16. */
#define BY_DTYPE(dt, a32, a64, a16, abf)                                       \
  ((dt) == TYTO_PLUGIN_DTYPE_F64    ? (a64)                                    \
   : (dt) == TYTO_PLUGIN_DTYPE_F16  ? (a16)                                    \
   : (dt) == TYTO_PLUGIN_DTYPE_BF16 ? (abf)                                    \
                                    : (a32))

const double *cf_special_list(uint32_t dtype, int arity, uint32_t *n) {
  const int h = cf_dtype_16(dtype);
  switch (arity) {
  case 1:
    *n = h ? N_OF(un16) : N_OF(un32);
    return BY_DTYPE(dtype, un32, un64, un16, unbf);
  case 2:
    *n = h ? N_OF(bi16) : N_OF(bi32);
    return BY_DTYPE(dtype, bi32, bi64, bi16, bibf);
  default:
    *n = h ? N_OF(te16) : N_OF(te32);
    return BY_DTYPE(dtype, te32, te64, te16, tebf);
  }
}

/* Rows of 6 for the reductions and softmax: a NaN in the middle and
 * first, each infinity, both, all -inf, all -0, subnormals, NaN with
 * infinities, ties, two NaNs, an ordinary row, two +inf, mixed zeros. */
#define ROWS(T)                                                                \
  1, NAN, 2, 3, -1, 0.5, NAN, 1, 2, 3, 4, 5, 1, 2, INFINITY, 3, 4, 5, 1,       \
      -INFINITY, 2, 3, 4, 5, INFINITY, 1, -INFINITY, 2, 3, 4, -INFINITY,       \
      -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -0.0, -0.0, -0.0, \
      -0.0, -0.0, -0.0, T##_TRUE_MIN, T##_TRUE_MIN, T##_MIN / 2, T##_TRUE_MIN, \
      -T##_TRUE_MIN, T##_MIN / 2, NAN, INFINITY, -INFINITY, 1, 2, 3, 2, 5, 5,  \
      1, 5, 0, 1, 2, 3, NAN, NAN, -INFINITY, 0.5, -0.5, 1.5, -1.5, 2.5, 0,     \
      INFINITY, INFINITY, 1, 2, 3, 4, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0
static const double rows32[] = {ROWS(FLT)}, rows64[] = {ROWS(DBL)};
static const double rows16[] = {ROWS(HF)}, rowsbf[] = {ROWS(BF)};
#define N_ROWS 14

/* A 4x5 matrix's specials (row-major positions) and B's infinity. */
static const int64_t mm_at[] = {1, 7, 10, 13, 16, 17, 19}, mm_bat[] = {14};
#define MM_V(T) NAN, INFINITY, -INFINITY, -INFINITY, -0.0, T##_TRUE_MIN, 0.0
static const double mm_v32[] = {MM_V(FLT)}, mm_v64[] = {MM_V(DBL)};
static const double mm_v16[] = {MM_V(HF)}, mm_vbf[] = {MM_V(BF)};
static const double inf1[] = {INFINITY};

/* x [1,2,5,5] of conv2d (and conv2d_backward_filter), dy [1,3,5,5] of
 * conv2d_backward_data. */
static const int64_t cx_at[] = {6, 43, 20, 29, 13};
#define CX_V(T) NAN, INFINITY, -INFINITY, -0.0, T##_TRUE_MIN
static const double cx_v32[] = {CX_V(FLT)}, cx_v64[] = {CX_V(DBL)};
static const double cx_v16[] = {CX_V(HF)}, cx_vbf[] = {CX_V(BF)};
static const int64_t cdy_at[] = {6, 68, 45};
static const double cdy_v[] = {NAN, INFINITY, -INFINITY};

/* x [1,2,6,6] of the poolings: a NaN, +inf and -inf in plane 0, a
 * subnormal; in plane 1 a window all -inf (with padding) and one whose
 * largest element is -0. */
static const int64_t px_at[] = {0,  15, 35, 10, 36, 37, 42, 43, 57,
                                58, 59, 63, 64, 65, 69, 70, 71};
#define PX_V(T)                                                                \
  NAN, INFINITY, -INFINITY, T##_TRUE_MIN, -INFINITY, -INFINITY, -INFINITY,     \
      -INFINITY, -1, -1, -1, -1, -0.0, -1, -1, -1, -1
static const double px_v32[] = {PX_V(FLT)}, px_v64[] = {PX_V(DBL)};
static const double px_v16[] = {PX_V(HF)}, px_vbf[] = {PX_V(BF)};
static const int64_t pdy_at[] = {4, 9, 13};
static const double pdy_v[] = {NAN, INFINITY, NAN};

/* Matrices [2,3,3]: diagonal, the second with a NaN on its diagonal. */
static const double diag_m[] = {1.5, 0, 0, 0, -2,  0, 0, 0, 1.25,
                                1.5, 0, 0, 0, NAN, 0, 0, 0, 1.25};
static const double diag_spd[] = {1.5, 0, 0, 0, 2,   0, 0, 0, 1.25,
                                  1.5, 0, 0, 0, NAN, 0, 0, 0, 1.25};

static const double idx_gather[] = {4, -0.0, 2, 0};
static const double idx_scatter[] = {1, -0.0, 1, 4};
static const double idx_one_hot[] = {2, -0.0, 0, 1};
static const double steps[] = {NAN, INFINITY};

/* ------------------------------------------------------------ the cases -- */

static cf_case *special(cf_builder *b, const char *name, cf_expect_kind e) {
  cf_case *c = cf_add(b, name);
  if (c) {
    c->special = 1;
    c->expect = e;
  }
  return c;
}

/* Input i of c takes `list` as position pos of a dims-wide grid. */
static void grid(cf_case *c, uint32_t i, const double *list, uint32_t n,
                 uint32_t pos, uint32_t dims) {
  c->in[i].list = list;
  c->in[i].n_list = n;
  c->in[i].grid_pos = pos;
  c->in[i].grid_dims = dims;
}

/* Input i of c holds v[k] at storage element at[k]. */
static void sprinkle(cf_case *c, uint32_t i, const int64_t *at, const double *v,
                     uint32_t n) {
  c->in[i].at = at;
  c->in[i].v = v;
  c->in[i].n_at = n;
}

void cf_special_grid(cf_builder *b, cf_case *c, uint32_t n_in, uint32_t n_out) {
  uint32_t n;
  const double *list = cf_special_list(b->dtype, (int)n_in, &n);
  int64_t shape[3] = {n, n, n};
  c->special = 1;
  c->expect = CF_EXPECT_VALUES;
  for (uint32_t i = 0; i < n_in; i++) {
    cf_in_set(b, c, i, n_in, shape, NULL, 0);
    grid(c, i, list, n, i, n_in);
  }
  for (uint32_t o = 0; o < n_out; o++)
    cf_out_set(b, c, o, n_in, shape, NULL, 0);
}

static void eltwise_special(cf_builder *b, uint32_t n_in) {
  const uint32_t op = b->e->op;
  cf_case *c = special(b,
                       n_in == 1   ? "special values"
                       : n_in == 2 ? "special values (every pair)"
                                   : "special values (every triple)",
                       CF_EXPECT_VALUES);
  if (c == NULL)
    return;
  cf_special_grid(b, c, n_in, 1);
  /* WHERE may flush a subnormal condition (it then picks b). */
  c->exact = op == OP(COPY);
  if (op == OP(LEAKY_RELU) || op == OP(ELU)) {
    c->n_fattrs = 1;
    c->fattrs[0] = op == OP(ELU) ? 0.7 : 0.1;
  }
}

static void fill_special(cf_builder *b) {
  const uint32_t dt = b->dtype;
  const double sub = cf_fmt_true_min(dt);
  const int h = cf_dtype_16(dt);
  const double half = h ? BY_DTYPE(dt, 0, 0, HF_HALF, BF_HALF) : 0;
  const double odd = h ? BY_DTYPE(dt, 0, 0, HF_ODD, BF_ODD) : 0;
  const double over = h ? BY_DTYPE(dt, 0, 0, HF_OVER, BF_OVER) : 0;
  const struct {
    const char *name;
    double v;
  } fs[] = {
      {"special value NaN", NAN},
      {"special value -0", -0.0},
      {"special value -inf", -INFINITY},
      {"special value 1e300 (inf in f32)", 1e300},
      {"special value: a subnormal", sub},
      /* 16-bit: ties of the format, the overflow threshold */
      {"a tie: 1 + half a unit (1)", 1 + half},
      {"a tie: 1 + 1.5 units (1 + 2 units)", odd + half},
      {"the largest + half a step (inf)", cf_fmt_max(dt) + over},
      {"the largest + 1/4 step (the largest)", cf_fmt_max(dt) + over / 2}};
  static const int64_t s1[1] = {7};
  for (size_t k = 0; k < (h ? 9u : 5u); k++) {
    cf_case *c = special(b, fs[k].name, CF_EXPECT_VALUES);
    if (c == NULL)
      return;
    cf_out_set(b, c, 0, 1, s1, NULL, 0);
    c->n_fattrs = 1;
    c->fattrs[0] = fs[k].v;
    c->exact = 1;
  }
}

static void reduce_special(cf_builder *b) {
  const uint32_t op = b->e->op;
  const int soft = op == OP(SOFTMAX) || op == OP(LOG_SOFTMAX);
  const int arg = op == OP(ARGMAX) || op == OP(ARGMIN);
  const double *rows = BY_DTYPE(b->dtype, rows32, rows64, rows16, rowsbf);
  static const int64_t s[2] = {N_ROWS, 6}, st[2] = {6, N_ROWS}, tr[2] = {1, 6},
                       z[2] = {0, 3};
  for (int t = 0; t < 2; t++) {
    /* Row-major [14,6] over axis 1, and the same rows as the columns of a
     * transposed [6,14] over axis 0. */
    cf_case *c = special(b,
                         t ? "special rows, transposed, axis 0"
                           : "special rows [14,6] axis 1",
                         CF_EXPECT_VALUES);
    if (c == NULL)
      return;
    cf_in_set(b, c, 0, 2, t ? st : s, t ? tr : NULL, 0);
    grid(c, 0, rows, N_ROWS * 6, 0, 1);
    int64_t os[2] = {t ? 1 : N_ROWS, t ? N_ROWS : 1};
    cf_out_set(b, c, 0, 2, soft ? (t ? st : s) : os, NULL, 0);
    c->n_iattrs = 1;
    c->iattrs[0] = t ? 0 : 1;
  }
  if (!soft && !arg) {
    /* The reduction of nothing: each op's identity (mean: NaN). */
    cf_case *c = special(b, "empty axis [0,3] axis 0", CF_EXPECT_VALUES);
    static const int64_t os[2] = {1, 3};
    if (c == NULL)
      return;
    cf_in_set(b, c, 0, 2, z, NULL, 0);
    cf_out_set(b, c, 0, 2, os, NULL, 0);
    c->n_iattrs = 1;
    c->iattrs[0] = 0;
  }
}

static void matmul_special(cf_builder *b) {
  static const int64_t as[2] = {4, 5}, bs[2] = {5, 3}, ys[2] = {4, 3};
  cf_case *c = special(b, "NaN, infinities, 0 x inf", CF_EXPECT_VALUES);
  if (c == NULL)
    return;
  cf_in_set(b, c, 0, 2, as, NULL, 0);
  cf_in_set(b, c, 1, 2, bs, NULL, 0);
  cf_in_values(c, 0, CF_SIGNED, 0.25, 1);
  cf_in_values(c, 1, CF_SIGNED, 0.25, 1);
  sprinkle(c, 0, mm_at, BY_DTYPE(b->dtype, mm_v32, mm_v64, mm_v16, mm_vbf),
           N_OF(mm_at));
  sprinkle(c, 1, mm_bat, inf1, 1);
  cf_out_set(b, c, 0, 2, ys, NULL, 0);
  c->n_iattrs = 2;
}

static void conv_special(cf_builder *b) {
  static const int64_t xs[4] = {1, 2, 5, 5}, ws[4] = {3, 2, 3, 3};
  static const int64_t ys[4] = {1, 3, 5, 5}, bias[1] = {3};
  const uint32_t op = b->e->op;
  const double *xv = BY_DTYPE(b->dtype, cx_v32, cx_v64, cx_v16, cx_vbf);
  cf_case *c = special(b,
                       op == OP(CONV2D_BACKWARD_DATA)
                           ? "NaN and infinities in dy"
                           : "NaN, infinities, -0, subnormal in x",
                       CF_EXPECT_VALUES);
  if (c == NULL)
    return;
  if (op == OP(CONV2D)) {
    cf_in_set(b, c, 0, 4, xs, NULL, 0);
    cf_in_set(b, c, 1, 4, ws, NULL, 0);
    cf_in_set(b, c, 2, 1, bias, NULL, 0);
    cf_out_set(b, c, 0, 4, ys, NULL, 0);
    sprinkle(c, 0, cx_at, xv, N_OF(cx_at));
  } else if (op == OP(CONV2D_BACKWARD_DATA)) {
    cf_in_set(b, c, 0, 4, ys, NULL, 0);
    cf_in_set(b, c, 1, 4, ws, NULL, 0);
    cf_out_set(b, c, 0, 4, xs, NULL, 0);
    sprinkle(c, 0, cdy_at, cdy_v, N_OF(cdy_at));
  } else {
    cf_in_set(b, c, 0, 4, xs, NULL, 0);
    cf_in_set(b, c, 1, 4, ys, NULL, 0);
    cf_out_set(b, c, 0, 4, ws, NULL, 0);
    sprinkle(c, 0, cx_at, xv, N_OF(cx_at));
  }
  /* Finite, never-zero weights: a special meets only real elements. */
  for (uint32_t i = 0; i < c->n_in; i++)
    cf_in_values(c, i, CF_SIGNED, 0.25, 1);
  c->n_iattrs = 7;
  for (int i = 0; i < 7; i++)
    c->iattrs[i] = 1;
}

static void pool_special(cf_builder *b) {
  static const int64_t xs[4] = {1, 2, 6, 6}, ps[4] = {1, 2, 3, 3};
  static const int64_t at[6] = {3, 3, 2, 2, 1, 1};
  const uint32_t op = b->e->op;
  const double *xv = BY_DTYPE(b->dtype, px_v32, px_v64, px_v16, px_vbf);
  cf_case *c = special(b,
                       op == OP(AVG_POOL2D_BACKWARD)
                           ? "NaN and +inf in dy, 3x3 s2 p1"
                           : "NaN, infinities, windows of -inf and -0",
                       CF_EXPECT_VALUES);
  if (c == NULL)
    return;
  switch (op) {
  case OP(MAX_POOL2D):
  case OP(AVG_POOL2D):
    cf_in_set(b, c, 0, 4, xs, NULL, 0);
    cf_out_set(b, c, 0, 4, ps, NULL, 0);
    break;
  case OP(MAX_POOL2D_BACKWARD):
    cf_in_set(b, c, 0, 4, xs, NULL, 0);
    cf_in_set(b, c, 1, 4, ps, NULL, 0);
    cf_out_set(b, c, 0, 4, xs, NULL, 0);
    break;
  case OP(MAX_POOL2D_SELECT):
    cf_in_set(b, c, 0, 4, xs, NULL, 0);
    cf_in_set(b, c, 1, 4, xs, NULL, 0);
    cf_out_set(b, c, 0, 4, ps, NULL, 0);
    break;
  default: /* AVG_POOL2D_BACKWARD */
    cf_in_set(b, c, 0, 4, ps, NULL, 0);
    cf_out_set(b, c, 0, 4, xs, NULL, 0);
    break;
  }
  if (op == OP(AVG_POOL2D_BACKWARD)) {
    sprinkle(c, 0, pdy_at, pdy_v, 2);
  } else {
    sprinkle(c, 0, px_at, xv, N_OF(px_at));
    if (c->n_in > 1)
      cf_in_values(c, 1, CF_SIGNED, 0.25, 2);
    if (op == OP(MAX_POOL2D_BACKWARD)) /* and a NaN in dy */
      sprinkle(c, 1, pdy_at + 2, pdy_v + 2, 1);
  }
  c->n_iattrs = 6;
  for (int i = 0; i < 6; i++)
    c->iattrs[i] = at[i];
}

static void layout_special(cf_builder *b) {
  static const int64_t x2[2] = {3, 4}, d2[2] = {5, 3}, i1[1] = {4},
                       g2[2] = {4, 3};
  static const int64_t pads[2][4] = {{1, 1, 2, 0}, {1, 1, 2, 1}};
  const uint32_t op = b->e->op;
  uint32_t n;
  const double *list = cf_special_list(b->dtype, 1, &n);
  cf_case *c;
  if (op == OP(PAD)) {
    static const char *const names[3] = {
        "specials, constant -0", "specials, constant NaN", "specials, reflect"};
    for (int k = 0; k < 3; k++) {
      if ((c = special(b, names[k], CF_EXPECT_VALUES)) == NULL)
        return;
      const int64_t *p = pads[k == 2];
      int64_t os[2] = {x2[0] + p[0] + p[1], x2[1] + p[2] + p[3]};
      cf_in_set(b, c, 0, 2, x2, NULL, 0);
      grid(c, 0, list, 12, 0, 1);
      cf_out_set(b, c, 0, 2, os, NULL, 0);
      c->n_iattrs = 5;
      c->iattrs[0] = k == 2;
      for (int i = 0; i < 4; i++)
        c->iattrs[1 + i] = p[i];
      c->n_fattrs = 1;
      c->fattrs[0] = k == 0 ? -0.0 : k == 1 ? NAN : 0;
      c->exact = 1;
    }
    return;
  }
  if (op == OP(ONE_HOT)) {
    if ((c = special(b, "index -0", CF_EXPECT_VALUES)) == NULL)
      return;
    cf_in_set(b, c, 0, 1, i1, NULL, 0);
    grid(c, 0, idx_one_hot, 4, 0, 1);
    cf_out_set(b, c, 0, 2, g2, NULL, 0);
    c->exact = 1;
    return;
  }
  const int scatter = op == OP(SCATTER_ADD);
  if ((c = special(b,
                   scatter ? "specials in base and updates, index -0"
                           : "specials in data, index -0",
                   CF_EXPECT_VALUES)) == NULL)
    return;
  cf_in_set(b, c, 0, 2, d2, NULL, 0);
  grid(c, 0, list, 15, 0, 1);
  cf_in_set(b, c, 1, 1, i1, NULL, 0);
  grid(c, 1, scatter ? idx_scatter : idx_gather, 4, 0, 1);
  if (scatter) {
    /* Updates: the binary list from its start, so that +inf and -inf
     * meet in base row 1 (indices 1 twice). */
    const double *bl = cf_special_list(b->dtype, 2, &n);
    cf_in_set(b, c, 2, 2, g2, NULL, 0);
    grid(c, 2, bl + 1, 12, 0, 1);
    cf_out_set(b, c, 0, 2, d2, NULL, 0);
  } else {
    cf_out_set(b, c, 0, 2, g2, NULL, 0);
    c->exact = 1;
  }
  c->n_iattrs = 1;
  c->iattrs[0] = 0;
}

static void random_special(cf_builder *b) {
  static const int64_t s1[1] = {16};
  const uint32_t op = b->e->op;
  const struct {
    const char *name;
    double f0, f1;
  } bad_u[] = {{"refuses low NaN", NAN, 1}, {"refuses high +inf", 0, INFINITY}},
    bad_n[] = {{"refuses stddev NaN", 0, NAN}, {"refuses stddev -1", 0, -1}},
    bad_b[] = {{"refuses p NaN", NAN, 0}, {"refuses p 1.5", 1.5, 0}},
    *bad = op == OP(RANDOM_UNIFORM)  ? bad_u
           : op == OP(RANDOM_NORMAL) ? bad_n
                                     : bad_b;
  const uint32_t nf = op == OP(RANDOM_BERNOULLI) ? 1 : 2;
  cf_case *c;
  for (int k = 0; k < 4; k++) {
    const int step = k >= 2;
    char name[64];
    if (step)
      snprintf(name, sizeof name, "fails a step of %s",
               k == 2 ? "NaN" : "+inf");
    if ((c = special(b, step ? name : bad[k].name,
                     step ? CF_EXPECT_RUN_ERROR : CF_EXPECT_REFUSED)) == NULL)
      return;
    cf_out_set(b, c, 0, 1, s1, NULL, 0);
    c->n_iattrs = 2;
    c->iattrs[0] = 42;
    c->n_fattrs = nf;
    c->fattrs[0] = step ? (op == OP(RANDOM_BERNOULLI) ? 0.5 : 0) : bad[k].f0;
    c->fattrs[1] = step ? 1 : bad[k].f1;
    if (step) {
      cf_in_set(b, c, 0, 0, NULL, NULL, 0);
      grid(c, 0, steps + (k - 2), 1, 0, 1);
    }
  }
}

/* A batch of diagonal matrices, the second holding a NaN; in f16 and bf16,
 * where linear algebra is not defined, the same descriptor must be
 * refused as unsupported. */
static void linalg_special(cf_builder *b) {
  static const int64_t as[3] = {2, 3, 3}, bs[3] = {2, 3, 2}, ds[1] = {2};
  const uint32_t op = b->e->op;
  const int h = cf_dtype_16(b->dtype);
  cf_case *c = special(b,
                       h ? "refuses it (not defined in 16-bit)"
                         : "diagonal batch, NaN in matrix 1",
                       h ? CF_EXPECT_UNSUPPORTED : CF_EXPECT_NAN_OR_ERROR);
  if (c == NULL)
    return;
  cf_in_set(b, c, 0, 3, as, NULL, 0);
  grid(c, 0, op == OP(CHOLESKY) ? diag_spd : diag_m, 18, 0, 1);
  switch (op) {
  case OP(DET):
  case OP(LOGDET): cf_out_set(b, c, 0, 1, ds, NULL, 0); break;
  case OP(SOLVE):
  case OP(TRIANGULAR_SOLVE):
    cf_in_set(b, c, 1, 3, bs, NULL, 0);
    cf_in_values(c, 1, CF_SIGNED, 0.5, 2);
    cf_out_set(b, c, 0, 3, bs, NULL, 0);
    if (op == OP(TRIANGULAR_SOLVE)) {
      c->n_iattrs = 3;
      c->iattrs[0] = 1;
    }
    break;
  case OP(QR):
    cf_out_set(b, c, 0, 3, as, NULL, 0);
    cf_out_set(b, c, 1, 3, as, NULL, 0);
    c->post = CF_POST_QR_SIGNS;
    break;
  default: cf_out_set(b, c, 0, 3, as, NULL, 0); break;
  }
}

void cf_special_cases(cf_builder *b) {
  const uint32_t op = b->e->op;
  if (op == OP(COPY) || (op >= OP(NEG) && op <= OP(ROUND)))
    eltwise_special(b, 1);
  else if (op >= OP(ADD) && op <= OP(GE))
    eltwise_special(b, 2);
  else if (op == OP(WHERE) || op == OP(FMA))
    eltwise_special(b, 3);
  else if (op == OP(FILL))
    fill_special(b);
  else if ((op >= OP(SUM) && op <= OP(NORM_L2)) || op == OP(SOFTMAX) ||
           op == OP(LOG_SOFTMAX))
    reduce_special(b);
  else if (op == OP(MATMUL))
    matmul_special(b);
  else if (op == OP(CONV2D) || op == OP(CONV2D_BACKWARD_DATA) ||
           op == OP(CONV2D_BACKWARD_FILTER))
    conv_special(b);
  else if (op == OP(MAX_POOL2D) || op == OP(AVG_POOL2D) ||
           (op >= OP(MAX_POOL2D_BACKWARD) && op <= OP(AVG_POOL2D_BACKWARD)))
    pool_special(b);
  else if (op >= OP(PAD) && op <= OP(ONE_HOT))
    layout_special(b);
  else if (op >= OP(RANDOM_UNIFORM) && op <= OP(RANDOM_BERNOULLI))
    random_special(b);
  else if (op >= OP(INV) && op <= OP(TRIANGULAR_SOLVE))
    linalg_special(b);
  /* FUSED: catalogue.c's fused_cases, which has the programs. */
}
