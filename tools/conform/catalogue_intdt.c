/*
 * Catalogue cases of the integer dtypes I32 and I64 (ABI 1.6; see
 * sdk/docs/ops.md, Conventions, "Integer dtypes"): for the run of integer
 * dtype D, every op the contract lists for integers over the kit's
 * layouts, the ops that take D beside a floating dtype (CAST from and to
 * each dtype, ARGMAX and ARGMIN of a floating input into D, GATHER and
 * SCATTER_ADD with D indices and data f32 or D, ONE_HOT with D indices into
 * every dtype), the special values (the limits, where NEG, ABS, ADD, SUB,
 * MUL and SUM wrap; NaN, infinities, zeros and out-of-range values for a
 * CAST to D; ties for ARGMAX; indices outside ONE_HOT's depth), and a few
 * ops the contract does not define for integers, which a device must
 * refuse.
 *
 * Every case is checked against the host model (model.h), whose integer
 * arithmetic is exact: values are whole numbers drawn where a double holds
 * every operand and result (I64: magnitudes up to 2^52, products of
 * factors up to 2^26; its wrapping cases use multiples of 2^11, whose sums
 * and products modulo 2^64 a double holds exactly). Integer results are
 * compared bit for bit.
 */
#include "catalogue_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DT(x) TYTO_PLUGIN_DTYPE_##x
#define OP(x) TYTO_PLUGIN_OP_##x
#define P2(e) ((double)(UINT64_C(1) << (e)))

static const uint32_t floats[4] = {DT(F32), DT(F64), DT(F16), DT(BF16)};

/* i32's special values: its limits and their neighbours, the factors
 * whose products cross 2^31, small values. */
static const double sp32[] = {
    0,          1,           -1,        2,     -2,         7,
    -7,         46341,       -46341,    65536, 2147483647, -2147483648.0,
    2147483646, -2147483647, 1073741824};
/* i64's: multiples of 2^11 up to the limits (their wrapped sums and
 * products are exact in double), and small values (products below 2^52). */
static const double sp64_lim[] = {
    0,       2048,       -2048,         P2(32),  -P2(32),        P2(62),
    -P2(62), 3 * P2(61), P2(63) - 2048, -P2(63), -P2(63) + 2048, P2(31)};
static const double sp64_small[] = {0, 1,  -1,    2,      -2,         3,
                                    7, -7, 65535, -65536, P2(26) - 1, -P2(26)};

/* A CAST to D from a floating dtype (each value stored rounded to it). */
static const double to_int_sp[] = {NAN,
                                   INFINITY,
                                   -INFINITY,
                                   0.0,
                                   -0.0,
                                   0.5,
                                   -0.5,
                                   0.99999,
                                   -0.99999,
                                   1.5,
                                   -1.5,
                                   2.5,
                                   -2.5,
                                   1e-40,
                                   -1e-310,
                                   65504,
                                   -65504,
                                   2147483520.0,
                                   2147483647.0,
                                   2147483647.5,
                                   2147483648.0,
                                   -2147483648.0,
                                   -2147483648.5,
                                   -2147483649.0,
                                   4294967299.0,
                                   1e10,
                                   -1e10,
                                   9007199254740994.0,
                                   9.2e18,
                                   9223372036854774784.0, /* 2^63 - 1024 */
                                   9223372036854775808.0, /* 2^63 */
                                   -9223372036854775808.0,
                                   -9223372036854777856.0, /* -2^63 - 2048 */
                                   1e19,
                                   -1e19,
                                   1e30,
                                   -3e38};
/* A CAST from I32 to each dtype: ties of f32 (beyond 2^24), bf16 (beyond
 * 256) and f16 (beyond 2048) of both parities, f16's overflow, and just
 * above a bf16 tie by less than f32 holds (2^30 + 2^22 + 1: a conversion
 * that truncates to f32 first lands on the tie and rounds down). */
static const double from32_sp[] = {0,
                                   1,
                                   -1,
                                   16777217,
                                   16777219,
                                   -16777217,
                                   16777215,
                                   257,
                                   259,
                                   -257,
                                   2049,
                                   2051,
                                   65504,
                                   65519,
                                   65520,
                                   -65536,
                                   2147483647,
                                   -2147483648.0,
                                   2147483584, /* 2^31 - 64 */
                                   2147483456, /* 2^31 - 192 */
                                   P2(30) + P2(22) + 1,
                                   -P2(30) - P2(22) - 1};
/* From I64 (values a double holds): f32's ties near 2^60, f64's range. */
static const double from64_sp[] = {
    0, 1, -1, P2(53), -P2(53), P2(53) - 1, 16777217, 257, 65520,
    P2(60) + P2(36), P2(60) + 3 * P2(36), P2(60) + P2(36) + P2(8),
    -P2(60) - P2(36), -P2(63), P2(63) - 2048, 2147483647, P2(32) + 5, -P2(32),
    P2(52) + 7, P2(40) + 3,
    /* above a bf16 tie by less than f32
     * holds, as in from32_sp */
    P2(60) + P2(52) + P2(8), -P2(60) - P2(52) - P2(8)};
/* ARGMAX and ARGMIN: rows of 5 (ties, zeros of both signs, NaN first or
 * later, infinities). */
static const double arg_rows[] = {
    1,         3,         3,        2,        0,    /* ties */
    -0.0,      0.0,       -0.0,     0.0,      -0.0, /* zeros tie */
    NAN,       1,         NAN,      5,        -1,   /* first NaN */
    1,         2,         NAN,      5,        NAN,  /* a later NaN */
    -INFINITY, -INFINITY, INFINITY, INFINITY, 1,    /* infinities */
    5,         5,         5,        5,        5,    /* all equal */
    -1,        -3,        -3,       -2,       -1,   /* negative ties */
    0.25,      -7,        65504,    -65504,   1e-3 /* one extreme each */};

/* An op entry built on the fly: the op's name from the catalogue. */
static void entry(cf_builder *b, cf_op_entry *e, uint32_t op, enum cf_tol tol,
                  cf_values v, double lo, double hi) {
  memset(e, 0, sizeof *e);
  e->op = op;
  e->name = cf_op_name(op);
  e->tol = tol;
  e->values = v;
  e->lo = lo;
  e->hi = hi;
  b->e = e;
}

/* The widest draw of D whose sums a double holds. */
static double wide(uint32_t d) {
  return d == DT(I32) ? 2147483648.0 : P2(52);
}

/* Makes the cases from `first` on the run of D checked against the model:
 * integer outputs bit for bit, floating ones (CAST, GATHER, ONE_HOT: bit
 * for bit, but SCATTER_ADD: f32's accumulation class) as ops.md says.
 * `tag` (not NULL) prefixes the names. */
static void finish(cf_builder *b, size_t first, uint32_t d, const char *tag) {
  for (size_t k = first; k < b->n; k++) {
    cf_case *c = &b->cases[k];
    const uint32_t od = c->n_out ? c->out[0].l.dtype : d;
    c->dtype = d;
    c->special = 1;
    if (c->expect != CF_EXPECT_UNSUPPORTED)
      c->expect = CF_EXPECT_VALUES;
    c->bitwise = cf_fmt_int(od) || c->op != OP(SCATTER_ADD);
    c->exact = cf_fmt_int(od) || c->op == OP(GATHER) || c->op == OP(ONE_HOT);
    cf_fmt_tolerance(od, c->cls, &c->rtol, &c->atol);
    if (tag) {
      char name[64];
      snprintf(name, sizeof name, "%s: %.50s", tag, c->name);
      memcpy(c->name, name, sizeof name);
    }
  }
}

/* A special-value case of n_in inputs of dtype `in_dt` (n_in = 1: a [n]
 * list; 2, 3: every combination, [n]^n_in) and one output of `out_dt`. */
static cf_case *grid(cf_builder *b, const char *name, uint32_t n_in,
                     uint32_t in_dt, uint32_t out_dt, const double *list,
                     uint32_t n) {
  int64_t shape[3] = {n, n, n};
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return NULL;
  for (uint32_t i = 0; i < n_in; i++) {
    cf_in_set(b, c, i, n_in, shape, NULL, 0);
    c->in[i].l.dtype = in_dt;
    c->in[i].list = list;
    c->in[i].n_list = n;
    c->in[i].grid_pos = i;
    c->in[i].grid_dims = n_in;
  }
  cf_out_set(b, c, 0, n_in, shape, NULL, 0);
  c->out[0].l.dtype = out_dt;
  return c;
}

/* The special values of D: for I64 the limits and the small values. */
static void specials(cf_builder *b, uint32_t d, uint32_t n_in) {
  if (d == DT(I32)) {
    grid(b, "limits, wrapping", n_in, d, d, sp32, sizeof sp32 / sizeof *sp32);
    return;
  }
  grid(b, "limits (multiples of 2^11), wrapping", n_in, d, d, sp64_lim,
       sizeof sp64_lim / sizeof *sp64_lim);
  grid(b, "small values", n_in, d, d, sp64_small,
       sizeof sp64_small / sizeof *sp64_small);
}

/* -------------------------------------------------- elementwise, moves -- */

static void none(cf_builder *b, cf_case *c) {
  (void)b, (void)c;
}

static void where_cond(cf_builder *b, cf_case *c) {
  (void)b;
  cf_in_values(c, 0, CF_WHOLE, -2, 2); /* non-zero but 1 is true too */
}

static void eltwise(cf_builder *b, uint32_t d) {
  static const struct {
    uint32_t op;
    uint32_t n_in;
    int range; /* 0 wide, 1 products (factors whose product a double
                  holds), 2 small (comparisons meet equal operands) */
  } ops[] = {
      {OP(COPY), 1, 0}, {OP(NEG), 1, 0}, {OP(ABS), 1, 0}, {OP(SIGN), 1, 2},
      {OP(ADD), 2, 0},  {OP(SUB), 2, 0}, {OP(MUL), 2, 1}, {OP(MAX), 2, 0},
      {OP(MIN), 2, 0},  {OP(EQ), 2, 2},  {OP(NE), 2, 2},  {OP(LT), 2, 2},
      {OP(LE), 2, 2},   {OP(GT), 2, 2},  {OP(GE), 2, 2},  {OP(WHERE), 3, 0}};
  static cf_op_entry e; /* b->e points at it */
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    /* i32's products are exact in the model's 64-bit arithmetic. */
    const double r = ops[k].range == 2                   ? 3
                     : ops[k].range == 1 && d == DT(I64) ? P2(26)
                                                         : wide(d);
    const size_t first = b->n;
    if (ops[k].op == OP(SIGN))
      entry(b, &e, ops[k].op, T_BASE, CF_WHOLE, -wide(d), wide(d) - 1);
    else
      entry(b, &e, ops[k].op, T_BASE, CF_WHOLE, -r, r - 1);
    if (b->only && strcmp(b->only, e.name) != 0)
      continue;
    cf_eltwise_cases(b, ops[k].n_in, 1,
                     ops[k].op == OP(WHERE) ? where_cond : none);
    if (ops[k].op == OP(COPY)) {
      static const int64_t s2[2] = {4, 33}, st[2] = {1, 4}, so[2] = {70, 2};
      cf_case *c;
      if ((c = cf_add(b, "transposed output")) != NULL) {
        cf_in_set(b, c, 0, 2, s2, NULL, 0);
        cf_out_set(b, c, 0, 2, s2, st, 0);
      }
      if ((c = cf_add(b, "stepped+offset output")) != NULL) {
        cf_in_set(b, c, 0, 2, s2, NULL, 0);
        cf_out_set(b, c, 0, 2, s2, so, 3);
      }
    }
    if (ops[k].op != OP(WHERE))
      specials(b, d, ops[k].n_in);
    finish(b, first, d, NULL);
  }
}

static void fill(cf_builder *b, uint32_t d) {
  static const int64_t s2[2] = {4, 33}, z[2] = {0, 5}, st[2] = {70, 2};
  static const int64_t sl[2] = {300, 517}, s1[1] = {3};
  /* Whole numbers, converted as CAST converts a double: beyond the
   * dtype's range they saturate, -0 is 0. */
  static const double vals[] = {2147483647.0, -2147483648.0,         1e10,
                                -0.0,         9223372036854775808.0, -1e19};
  static cf_op_entry e; /* b->e points at it */
  cf_case *c;
  const size_t first = b->n;
  entry(b, &e, OP(FILL), T_BASE, CF_WHOLE, 0, 0);
  if (b->only && strcmp(b->only, e.name) != 0)
    return;
  if ((c = cf_add(b, "contiguous [4,33]")) != NULL)
    cf_out_set(b, c, 0, 2, s2, NULL, 0);
  if ((c = cf_add(b, "rank-0")) != NULL)
    cf_out_set(b, c, 0, 0, NULL, NULL, 0);
  if ((c = cf_add(b, "size-0 [0,5]")) != NULL)
    cf_out_set(b, c, 0, 2, z, NULL, 0);
  if ((c = cf_add(b, "stepped+offset output")) != NULL)
    cf_out_set(b, c, 0, 2, s2, st, 7);
  if ((c = cf_add(b, "large [300,517]")) != NULL)
    cf_out_set(b, c, 0, 2, sl, NULL, 0);
  for (size_t k = first; k < b->n; k++) {
    b->cases[k].n_fattrs = 1;
    b->cases[k].fattrs[0] = -7;
  }
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
    char name[64];
    snprintf(name, sizeof name, "value %.17g", vals[k]);
    if ((c = cf_add(b, name)) != NULL) {
      cf_out_set(b, c, 0, 1, s1, NULL, 0);
      c->n_fattrs = 1;
      c->fattrs[0] = vals[k];
    }
  }
  finish(b, first, d, NULL);
}

static void pad(cf_builder *b, uint32_t d) {
  static cf_op_entry e; /* b->e points at it */
  const size_t first = b->n;
  entry(b, &e, OP(PAD), T_BASE, CF_WHOLE, -wide(d), wide(d) - 1);
  if (b->only && strcmp(b->only, e.name) != 0)
    return;
  cf_layout_cases(b);
  for (size_t k = first; k < b->n; k++)
    if (b->cases[k].n_fattrs)
      b->cases[k].fattrs[0] = k % 2 ? -5 : 1e30; /* 1e30 saturates */
  finish(b, first, d, NULL);
}

/* ------------------------------------------------------------------ cast -- */

/* CAST from s to t over the elementwise layouts (values in [-r, r]) and a
 * special-value list. */
static void cast_pair(cf_builder *b, uint32_t d, uint32_t s, uint32_t t,
                      cf_values v, double r, const double *list, uint32_t n) {
  char tag[16];
  const size_t first = b->n;
  const uint32_t row = b->dtype;
  static cf_op_entry e; /* b->e points at it */
  entry(b, &e, OP(CAST), T_BASE, v, -r, r);
  b->dtype = s;
  cf_eltwise_cases(b, 1, 1, none);
  grid(b, "special values", 1, s, t, list, n);
  b->dtype = row;
  for (size_t k = first; k < b->n; k++)
    b->cases[k].out[0].l.dtype = t;
  snprintf(tag, sizeof tag, "%s to %s", cf_fmt_name(s), cf_fmt_name(t));
  finish(b, first, d, tag);
}

static void cast(cf_builder *b, uint32_t d) {
  const uint32_t other = d == DT(I32) ? DT(I64) : DT(I32);
  const double *from = d == DT(I32) ? from32_sp : from64_sp;
  const uint32_t n_from = d == DT(I32) ? sizeof from32_sp / sizeof *from32_sp
                                       : sizeof from64_sp / sizeof *from64_sp;
  if (b->only && strcmp(b->only, "cast") != 0)
    return;
  for (int k = 0; k < 4; k++) {
    /* Uniform draws (fractions to truncate), a few beyond D's range. */
    const double r = floats[k] == DT(F16) ? 65504 : d == DT(I32) ? 3e9 : 1.2e19;
    cast_pair(b, d, floats[k], d, CF_UNIFORM, r, to_int_sp,
              sizeof to_int_sp / sizeof *to_int_sp);
  }
  for (int k = 0; k < 4; k++)
    cast_pair(b, d, d, floats[k], CF_WHOLE, wide(d), from, n_from);
  cast_pair(b, d, d, d, CF_WHOLE, wide(d), from, n_from);
  cast_pair(b, d, d, other, CF_WHOLE, wide(d), from, n_from);
}

/* ------------------------------------------------------------ reductions -- */

/* The float runs' reduction layouts, and for ARGMAX a stepped input. */
static void reduce_layouts(cf_builder *b, int arg) {
  static const int64_t ax0[1] = {0}, s2[2] = {64, 128}, st[2] = {2, 256};
  cf_reduce_layouts(b, arg, 0);
  if (arg)
    cf_reduce_case(b, "stepped [64,128] axis 0", 2, s2, st, ax0, 1);
}

static void reductions(cf_builder *b, uint32_t d) {
  static const uint32_t ops[3] = {OP(SUM), OP(MAX_REDUCE), OP(MIN_REDUCE)};
  static const int64_t ax1[1] = {1};
  static cf_op_entry e; /* b->e points at it */
  for (int k = 0; k < 3; k++) {
    const size_t first = b->n;
    /* i64 sums of up to 2^13 terms stay below 2^53. */
    const double r = d == DT(I64) && ops[k] == OP(SUM) ? P2(40) : wide(d);
    entry(b, &e, ops[k], T_BASE, CF_WHOLE, -r, r - 1);
    if (b->only && strcmp(b->only, e.name) != 0)
      continue;
    reduce_layouts(b, 0);
    /* Rows of the special values: SUM wraps. */
    const double *l = d == DT(I32) ? sp32 : sp64_lim;
    const uint32_t n = d == DT(I32) ? sizeof sp32 / sizeof *sp32
                                    : sizeof sp64_lim / sizeof *sp64_lim;
    const int64_t shape[2] = {n, n}, os[2] = {n, 1};
    cf_case *c = cf_add(b, "rows of the limits (SUM wraps)");
    if (c != NULL) {
      cf_in_set(b, c, 0, 2, shape, NULL, 0);
      c->in[0].list = l; /* element j: l[j % n] */
      c->in[0].n_list = n;
      c->in[0].grid_dims = 1;
      cf_out_set(b, c, 0, 2, os, NULL, 0);
      c->n_iattrs = 1;
      c->iattrs[0] = ax1[0];
    }
    finish(b, first, d, NULL);
  }
}

/* ARGMAX and ARGMIN of each floating dtype into D, and of D itself (not
 * defined: refused). */
static void args(cf_builder *b, uint32_t d) {
  static const uint32_t ops[2] = {OP(ARGMAX), OP(ARGMIN)};
  static const int64_t rows[2] = {8, 5}, ax1[1] = {1};
  const uint32_t row = b->dtype;
  static cf_op_entry e; /* b->e points at it */
  for (int k = 0; k < 2; k++) {
    entry(b, &e, ops[k], T_BASE, CF_UNIFORM, -2, 2);
    if (b->only && strcmp(b->only, e.name) != 0)
      continue;
    for (int f = 0; f < 4; f++) {
      char tag[16];
      const size_t first = b->n;
      b->dtype = floats[f];
      reduce_layouts(b, 1);
      /* Whole numbers in [-3, 3]: ties. */
      for (size_t j = first; j < b->n; j++)
        if (j % 2)
          cf_in_values(&b->cases[j], 0, CF_WHOLE, -3, 3);
      cf_case *c = cf_add(b, "ties, zeros, NaN, infinities");
      if (c != NULL) {
        cf_in_set(b, c, 0, 2, rows, NULL, 0);
        c->in[0].list = arg_rows;
        c->in[0].n_list = sizeof arg_rows / sizeof *arg_rows;
        c->in[0].grid_dims = 1;
        const int64_t os[2] = {8, 1};
        cf_out_set(b, c, 0, 2, os, NULL, 0);
        c->n_iattrs = 1;
        c->iattrs[0] = ax1[0];
      }
      b->dtype = row;
      for (size_t j = first; j < b->n; j++)
        b->cases[j].out[0].l.dtype = d;
      snprintf(tag, sizeof tag, "%s to %s", cf_fmt_name(floats[f]),
               cf_fmt_name(d));
      finish(b, first, d, tag);
    }
    /* An integer input is outside the contract. */
    const size_t first = b->n;
    cf_reduce_case(b, "integer input (not defined)", 2, rows, NULL, ax1, 1);
    if (b->n > first)
      b->cases[first].expect = CF_EXPECT_UNSUPPORTED;
    finish(b, first, d, NULL);
  }
}

/* --------------------------------------------------- gather and friends -- */

/* GATHER and SCATTER_ADD with D indices over catalogue_nn.c's layouts,
 * data f32 and D; ONE_HOT with D indices into each of the six dtypes. */
static void layout_ops(cf_builder *b, uint32_t d) {
  static const uint32_t ops[2] = {OP(GATHER), OP(SCATTER_ADD)};
  const uint32_t row = b->dtype;
  const uint32_t outs[6] = {DT(F32),  DT(F64), DT(F16),
                            DT(BF16), DT(I32), DT(I64)};
  static cf_op_entry e; /* b->e points at it */
  for (int k = 0; k < 2; k++) {
    for (int f = 0; f < 2; f++) {
      char tag[32];
      const uint32_t data = f ? d : DT(F32);
      const size_t first = b->n;
      /* i64 sums of a few repeated indices stay below 2^53. */
      const double r = d == DT(I64) ? P2(46) : wide(d) / 2;
      if (f)
        entry(b, &e, ops[k], T_BASE, CF_WHOLE, -r, r - 1);
      else
        entry(b, &e, ops[k], ops[k] == OP(GATHER) ? T_BASE : T_ACCUM,
              CF_UNIFORM, -2, 2);
      if (b->only && strcmp(b->only, e.name) != 0)
        break;
      b->dtype = data;
      cf_layout_cases(b);
      b->dtype = row;
      for (size_t j = first; j < b->n; j++)
        b->cases[j].in[1].l.dtype = d;
      snprintf(tag, sizeof tag, "%s data, %s indices", cf_fmt_name(data),
               cf_fmt_name(d));
      finish(b, first, d, tag);
    }
  }
  entry(b, &e, OP(ONE_HOT), T_BASE, CF_WHOLE, 0, 0);
  if (b->only && strcmp(b->only, e.name) != 0)
    return;
  for (int k = 0; k < 6; k++) {
    /* Indices outside [0, 5): rows of zeros. */
    static const double oob[] = {0,  1,  4,          5,           6,
                                 -1, -5, 2147483647, -2147483648, 3};
    static const double oob64[] = {P2(32), P2(32) + 2, -P2(63), P2(62) + 4096};
    char tag[16];
    const size_t first = b->n;
    b->dtype = outs[k];
    cf_layout_cases(b);
    const uint32_t n = d == DT(I64) ? 14 : 10;
    static double both[14];
    memcpy(both, oob, sizeof oob);
    memcpy(both + 10, oob64, sizeof oob64);
    const double *l = d == DT(I64) ? both : oob;
    const int64_t s1[1] = {n}, os[2] = {n, 5};
    cf_case *c = cf_add(b, "indices outside [0, depth 5)");
    if (c != NULL) {
      cf_in_set(b, c, 0, 1, s1, NULL, 0);
      c->in[0].list = l;
      c->in[0].n_list = n;
      c->in[0].grid_dims = 1;
      cf_out_set(b, c, 0, 2, os, NULL, 0);
    }
    b->dtype = row;
    for (size_t j = first; j < b->n; j++)
      b->cases[j].in[0].l.dtype = d;
    snprintf(tag, sizeof tag, "to %s", cf_fmt_name(outs[k]));
    finish(b, first, d, tag);
  }
}

/* ------------------------------------------------------------ not defined */

/* A few ops ops.md does not define for integers: a device that lists D
 * must refuse them (UNSUPPORTED), not compute something. */
static void refused(cf_builder *b, uint32_t d) {
  static const int64_t s2[2] = {4, 33}, a[2] = {5, 7}, bm[2] = {7, 3};
  static const int64_t y[2] = {5, 3}, ax1[1] = {1}, r[2] = {4, 1};
  static const uint32_t ops[] = {OP(EXP),  OP(SQRT), OP(DIV),   OP(FMA),
                                 OP(MEAN), OP(PROD), OP(MATMUL)};
  static cf_op_entry e; /* b->e points at it */
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    const size_t first = b->n;
    entry(b, &e, ops[k], T_BASE, CF_WHOLE, 1, 9);
    if (b->only && strcmp(b->only, e.name) != 0)
      continue;
    cf_case *c = cf_add(b, "integers (not defined)");
    if (c == NULL)
      return;
    if (ops[k] == OP(MATMUL)) {
      cf_in_set(b, c, 0, 2, a, NULL, 0);
      cf_in_set(b, c, 1, 2, bm, NULL, 0);
      cf_out_set(b, c, 0, 2, y, NULL, 0);
      c->n_iattrs = 2;
    } else if (ops[k] == OP(MEAN) || ops[k] == OP(PROD)) {
      cf_in_set(b, c, 0, 2, s2, NULL, 0);
      cf_out_set(b, c, 0, 2, r, NULL, 0);
      c->n_iattrs = 1;
      c->iattrs[0] = ax1[0];
    } else {
      const uint32_t n_in = ops[k] == OP(FMA) ? 3 : ops[k] == OP(DIV) ? 2 : 1;
      for (uint32_t i = 0; i < n_in; i++)
        cf_in_set(b, c, i, 2, s2, NULL, 0);
      cf_out_set(b, c, 0, 2, s2, NULL, 0);
    }
    c->expect = CF_EXPECT_UNSUPPORTED;
    finish(b, first, d, NULL);
  }
}

void cf_intdt_cases(cf_builder *b) {
  const uint32_t d = b->dtype;
  eltwise(b, d);
  if (!b->oom)
    fill(b, d);
  if (!b->oom)
    cast(b, d);
  if (!b->oom)
    reductions(b, d);
  if (!b->oom)
    args(b, d);
  if (!b->oom)
    pad(b, d);
  if (!b->oom)
    layout_ops(b, d);
  if (!b->oom)
    refused(b, d);
}
