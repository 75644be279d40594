/*
 * The host model of sdk/docs/ops.md (see model.h): elementwise ops, fused
 * programs, copy and fill, reductions, softmax, matmul, the layout ops and
 * the linear algebra of diagonal matrices. model_nn.c has conv and pool.
 */
#include "model.h"

#include "fmt.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP(x) TYTO_PLUGIN_OP_##x

double cf_round(uint32_t dtype, double v) {
  return cf_fmt_round(dtype, v);
}

double cf_model_round(const cf_case *c, uint32_t dtype, double v) {
  if (c->model_via_f32 && cf_fmt_of(dtype) && cf_fmt_of(dtype)->bits == 16)
    v = cf_fmt_round(TYTO_PLUGIN_DTYPE_F32, v);
  return cf_fmt_round(dtype, v);
}

double cf_flush(uint32_t dtype, double v) {
  const double tiny = dtype == TYTO_PLUGIN_DTYPE_F64 ? DBL_MIN : FLT_MIN;
  return v != 0 && fabs(v) < tiny ? copysign(0.0, v) : v;
}

int64_t cf_layout_at(const tyto_plugin_layout *l, const int64_t *idx) {
  int64_t off = l->offset;
  for (uint32_t a = 0; a < l->rank; a++)
    off += idx[a] * l->strides[a];
  return off;
}

int cf_index_next(uint32_t rank, const int64_t *shape, int64_t *idx) {
  for (uint32_t a = rank; a-- > 0;) {
    if (++idx[a] < shape[a])
      return 1;
    idx[a] = 0;
  }
  return 0;
}

int64_t cf_shape_count(uint32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (uint32_t a = 0; a < rank; a++)
    n *= shape[a];
  return n;
}

/* ----------------------------------------------------------- elementwise -- */

/* The exact value of an elementwise op, in double. */
static double eltwise_value(uint32_t op, double x, double y, double z,
                            double attr) {
  double v;
  switch (op) {
  case OP(CAST): v = x; break;
  case OP(NEG): v = -x; break;
  case OP(ABS): v = fabs(x); break;
  case OP(SIGN): v = isnan(x) ? x : x == 0 ? x : copysign(1.0, x); break;
  case OP(EXP): v = exp(x); break;
  case OP(LOG): v = log(x); break;
  case OP(LOG1P): v = log1p(x); break;
  case OP(EXPM1): v = expm1(x); break;
  case OP(SQRT): v = sqrt(x); break;
  case OP(RSQRT): v = 1.0 / sqrt(x); break;
  case OP(SQUARE): v = x * x; break;
  case OP(RECIPROCAL): v = 1.0 / x; break;
  case OP(SIN): v = sin(x); break;
  case OP(COS): v = cos(x); break;
  case OP(TAN): v = tan(x); break;
  case OP(ASIN): v = asin(x); break;
  case OP(ACOS): v = acos(x); break;
  case OP(ATAN): v = atan(x); break;
  case OP(SINH): v = sinh(x); break;
  case OP(COSH): v = cosh(x); break;
  case OP(TANH): v = tanh(x); break;
  case OP(ASINH): v = asinh(x); break;
  case OP(ACOSH): v = acosh(x); break;
  case OP(ATANH): v = atanh(x); break;
  case OP(SIGMOID): v = 1.0 / (1.0 + exp(-x)); break;
  /* Not below zero passes through: NaN stays NaN, -0 stays -0. */
  case OP(RELU): v = x < 0 ? 0.0 : x; break;
  case OP(LEAKY_RELU): v = x < 0 ? attr * x : x; break;
  case OP(ELU): v = x < 0 ? attr * expm1(x) : x; break;
  /* log(1 + e^x) without overflow; NaN stays NaN */
  case OP(SOFTPLUS): v = (x > 0 ? x : 0.0) + log1p(exp(-fabs(x))); break;
  case OP(ERF): v = erf(x); break;
  case OP(FLOOR): v = floor(x); break;
  case OP(CEIL): v = ceil(x); break;
  case OP(ROUND): v = round(x); break;
  case OP(ADD): v = x + y; break;
  case OP(SUB): v = x - y; break;
  case OP(MUL): v = x * y; break;
  case OP(DIV): v = x / y; break;
  case OP(POW): v = pow(x, y); break;
  case OP(MAX): v = isnan(x) || isnan(y) ? NAN : x > y ? x : y; break;
  case OP(MIN): v = isnan(x) || isnan(y) ? NAN : x < y ? x : y; break;
  case OP(ATAN2): v = atan2(x, y); break;
  case OP(EQ): v = x == y; break;
  case OP(NE): v = x != y; break;
  case OP(LT): v = x < y; break;
  case OP(LE): v = x <= y; break;
  case OP(GT): v = x > y; break;
  case OP(GE): v = x >= y; break;
  case OP(WHERE): v = x != 0 ? y : z; break;
  default: /* FMA: one rounding, to the dtype */ v = fma(x, y, z); break;
  }
  return v;
}

double cf_model_eltwise(uint32_t op, uint32_t dtype, double x, double y,
                        double z, double attr) {
  return cf_round(dtype, eltwise_value(op, x, y, z, attr));
}

/* An elementwise op on integers of dtype (I32, I64), from exact operands:
 * NEG, ABS, ADD, SUB and MUL wrap modulo 2^32 or 2^64 (computed in
 * uint64_t, where C defines the wrap; ABS(INT_MIN) and NEG(INT_MIN) are
 * INT_MIN), the others are exact in double (comparisons 1 or 0). */
static double int_value(uint32_t op, uint32_t dtype, double x, double y,
                        double z) {
  const uint64_t a = (uint64_t)cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64, x);
  const uint64_t b = (uint64_t)cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64, y);
  uint64_t r;
  switch (op) {
  case OP(NEG): r = 0 - a; break;
  case OP(ABS): r = x < 0 ? 0 - a : a; break;
  case OP(ADD): r = a + b; break;
  case OP(SUB): r = a - b; break;
  case OP(MUL): r = a * b; break;
  default: return cf_round(dtype, eltwise_value(op, x, y, z, 0));
  }
  return 0.0 + (double)cf_fmt_wrap(dtype, r);
}

/* CAST of x from dtype s to dtype d: between integers the low bits (I64
 * to I32) or the value (I32 to I64), from a floating dtype truncated and
 * saturated, to a floating one rounded once (cf_fmt_round; x, an integer
 * read from its dtype, is exact in double where the kit draws it). */
static double cast_value(uint32_t s, uint32_t d, double x) {
  if (cf_fmt_int(s) && cf_fmt_int(d))
    return cf_fmt_from_int(d, cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64, x));
  return cf_round(d, x);
}

static int arity(uint32_t op) {
  if (op == OP(COPY) || (op >= OP(NEG) && op <= OP(CAST)))
    return 1;
  if (op >= OP(ADD) && op <= OP(GE))
    return 2;
  if (op == OP(WHERE) || op == OP(FMA))
    return 3;
  return -1;
}

/* The value of instruction program `c` at one element position, from the
 * inputs' values there; writes each output's value to y[]. Each value is
 * rounded to its dtype (an input's, CAST's and CONST's own, else its
 * operands'). */
static void fused_eval(const cf_case *c, const double *x, double *y) {
  double v[CF_MAX_INSTRS];
  uint32_t dt[CF_MAX_INSTRS];
  for (uint32_t i = 0; i < c->n_instrs; i++) {
    const tyto_plugin_fused_instr *in = &c->instrs[i];
    const uint32_t *a = in->arg;
    switch (in->op) {
    case TYTO_PLUGIN_FUSED_INPUT:
      v[i] = x[a[0]];
      dt[i] = c->in[a[0]].l.dtype;
      break;
    case TYTO_PLUGIN_FUSED_CONST:
      dt[i] = in->dtype;
      v[i] = cf_model_round(c, dt[i], in->attr);
      break;
    case TYTO_PLUGIN_FUSED_OUTPUT: y[a[1]] = v[a[0]]; break;
    case OP(CAST):
      dt[i] = in->dtype;
      v[i] = cf_round(dt[i], v[a[0]]);
      break;
    default:
      dt[i] = dt[a[0]];
      v[i] = cf_model_round(
          c, dt[i],
          eltwise_value(in->op, v[a[0]], arity(in->op) > 1 ? v[a[1]] : 0,
                        arity(in->op) > 2 ? v[a[2]] : 0, in->attr));
    }
  }
}

/* Elementwise ops, COPY, FILL and FUSED: every output position from the
 * inputs at the same position. */
static void eltwise(const cf_case *c, double *const *in, double **out,
                    unsigned char **free_sign) {
  const tyto_plugin_layout *o = &c->out[0].l;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(o->rank, o->shape) == 0)
    return;
  do {
    double x[CF_MAX_IN] = {0}, y[CF_MAX_OUT] = {0};
    for (uint32_t i = 0; i < c->n_in; i++)
      x[i] = in[i][cf_layout_at(&c->in[i].l, idx)];
    if (c->op == OP(FUSED))
      fused_eval(c, x, y);
    else if (c->op == OP(COPY))
      y[0] = x[0];
    else if (c->op == OP(CAST))
      y[0] = cast_value(c->in[0].l.dtype, c->out[0].l.dtype, x[0]);
    else if (c->op == OP(FILL))
      y[0] = cf_model_round(c, c->dtype, c->fattrs[0]);
    else if (cf_fmt_int(c->dtype))
      y[0] = int_value(c->op, c->dtype, x[0], x[1], x[2]);
    else
      y[0] = cf_model_round(c, c->dtype,
                            eltwise_value(c->op, x[0], x[1], x[2],
                                          c->n_fattrs ? c->fattrs[0] : 0));
    for (uint32_t k = 0; k < c->n_out; k++) {
      const int64_t at = cf_layout_at(&c->out[k].l, idx);
      out[k][at] = y[k];
      /* Which of two zeros MAX and MIN return is open. */
      free_sign[k][at] =
          (c->op == OP(MAX) || c->op == OP(MIN)) && x[0] == 0 && x[1] == 0;
    }
  } while (cf_index_next(o->rank, o->shape, idx));
}

/* ------------------------------------------------------------ reductions -- */

/* One reduction over v[n] (in order along the reduced axes). */
static double reduce(uint32_t op, const double *v, int64_t n) {
  double s = 0, m;
  int64_t at = -1;
  int nan = 0;
  for (int64_t i = 0; i < n; i++)
    nan |= isnan(v[i]);
  switch (op) {
  case OP(SUM):
  case OP(MEAN):
    for (int64_t i = 0; i < n; i++)
      s += v[i];
    return op == OP(MEAN) ? s / (double)n : s;
  case OP(PROD):
    s = 1;
    for (int64_t i = 0; i < n; i++)
      s *= v[i];
    return s;
  case OP(MAX_REDUCE):
  case OP(MIN_REDUCE):
    if (nan)
      return NAN;
    m = op == OP(MAX_REDUCE) ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; i++)
      m = op == OP(MAX_REDUCE) ? (v[i] > m ? v[i] : m) : (v[i] < m ? v[i] : m);
    return m;
  case OP(ARGMAX):
  case OP(ARGMIN):
    /* The first NaN, else the first extreme. */
    for (int64_t i = 0; i < n; i++) {
      if (isnan(v[i]))
        return (double)i;
      if (at < 0 || (op == OP(ARGMAX) ? v[i] > v[at] : v[i] < v[at]))
        at = i;
    }
    return (double)(at < 0 ? 0 : at);
  case OP(LOG_SUM_EXP):
    if (nan)
      return NAN;
    m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
      m = v[i] > m ? v[i] : m;
    if (isinf(m))
      return m;
    for (int64_t i = 0; i < n; i++)
      s += exp(v[i] - m);
    return m + log(s);
  case OP(NORM_L1):
    for (int64_t i = 0; i < n; i++)
      s += fabs(v[i]);
    return s;
  default: /* NORM_L2 */
    for (int64_t i = 0; i < n; i++)
      s += v[i] * v[i];
    return sqrt(s);
  }
}

/* SUM .. NORM_L2 (iattrs: the reduced axes), SOFTMAX and LOG_SOFTMAX
 * (iattrs[0]: the axis). */
static int reductions(const cf_case *c, double *const *in, double **out,
                      unsigned char **free_sign) {
  const tyto_plugin_layout *x = &c->in[0].l, *y = &c->out[0].l;
  const int soft = c->op == OP(SOFTMAX) || c->op == OP(LOG_SOFTMAX);
  int red[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t rshape[TYTO_PLUGIN_MAX_RANK], kshape[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t k = 0; k < c->n_iattrs; k++)
    red[c->iattrs[k]] = 1;
  for (uint32_t a = 0; a < x->rank; a++) {
    rshape[a] = red[a] ? x->shape[a] : 1;
    kshape[a] = red[a] ? 1 : x->shape[a];
  }
  const int64_t n = cf_shape_count(x->rank, rshape);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  int64_t *pos = malloc((size_t)(n ? n : 1) * sizeof *pos);
  if (!v || !pos) {
    free(v);
    free(pos);
    return -1;
  }
  int64_t k[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(x->rank, kshape) > 0)
    do {
      int64_t r[TYTO_PLUGIN_MAX_RANK] = {0}, idx[TYTO_PLUGIN_MAX_RANK];
      int64_t i = 0;
      if (n > 0)
        do {
          for (uint32_t a = 0; a < x->rank; a++)
            idx[a] = red[a] ? r[a] : k[a];
          v[i] = in[0][cf_layout_at(x, idx)];
          pos[i++] = cf_layout_at(y, idx);
        } while (cf_index_next(x->rank, rshape, r));
      if (!soft && cf_fmt_int(y->dtype) && c->op == OP(SUM)) {
        uint64_t s = 0; /* wraps, as the integer SUM does */
        for (int64_t j = 0; j < n; j++)
          s += (uint64_t)cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64, v[j]);
        out[0][cf_layout_at(y, k)] = 0.0 + (double)cf_fmt_wrap(y->dtype, s);
        continue;
      }
      if (!soft) {
        const int64_t at = cf_layout_at(y, k);
        out[0][at] = cf_model_round(c, y->dtype, reduce(c->op, v, n));
        free_sign[0][at] = 1;
        continue;
      }
      /* Softmax over the row: NaN throughout when it holds a NaN or +inf
       * or when its maximum is -inf. */
      double m = -INFINITY, s = 0;
      int nan = 0;
      for (int64_t j = 0; j < n; j++) {
        nan |= isnan(v[j]);
        m = v[j] > m ? v[j] : m;
      }
      nan |= isinf(m);
      for (int64_t j = 0; j < n && !nan; j++)
        s += exp(v[j] - m);
      for (int64_t j = 0; j < n; j++) {
        double r2 = nan                    ? NAN
                    : c->op == OP(SOFTMAX) ? exp(v[j] - m) / s
                                           : v[j] - m - log(s);
        out[0][pos[j]] = cf_model_round(c, c->dtype, r2);
        free_sign[0][pos[j]] = 1;
      }
    } while (cf_index_next(x->rank, kshape, k));
  free(v);
  free(pos);
  return 0;
}

/* ---------------------------------------------------------------- matmul -- */

static void matmul(const cf_case *c, double *const *in, double **out,
                   unsigned char **free_sign) {
  const tyto_plugin_layout *a = &c->in[0].l, *b = &c->in[1].l,
                           *y = &c->out[0].l;
  const uint32_t r = y->rank, lead = r - 2;
  const int ta = c->iattrs[0] != 0, tb = c->iattrs[1] != 0;
  const int64_t kk = ta ? a->shape[lead] : a->shape[lead + 1];
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(r, y->shape) == 0)
    return;
  do {
    int64_t ia[TYTO_PLUGIN_MAX_RANK], ib[TYTO_PLUGIN_MAX_RANK];
    double s = 0;
    memcpy(ia, idx, sizeof ia);
    memcpy(ib, idx, sizeof ib);
    for (int64_t k = 0; k < kk; k++) {
      ia[lead] = ta ? k : idx[lead];
      ia[lead + 1] = ta ? idx[lead] : k;
      ib[lead] = tb ? idx[lead + 1] : k;
      ib[lead + 1] = tb ? k : idx[lead + 1];
      s += in[0][cf_layout_at(a, ia)] * in[1][cf_layout_at(b, ib)];
    }
    const int64_t at = cf_layout_at(y, idx);
    out[0][at] = cf_model_round(c, c->dtype, s);
    free_sign[0][at] = 1;
  } while (cf_index_next(r, y->shape, idx));
}

/* ------------------------------------------------------------ layout ops -- */

static void pad(const cf_case *c, double *const *in, double **out,
                unsigned char **free_sign) {
  const tyto_plugin_layout *x = &c->in[0].l, *y = &c->out[0].l;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  (void)free_sign;
  if (cf_shape_count(y->rank, y->shape) == 0)
    return;
  do {
    int64_t src[TYTO_PLUGIN_MAX_RANK];
    int inside = 1;
    for (uint32_t a = 0; a < y->rank; a++) {
      int64_t s = idx[a] - c->iattrs[1 + 2 * a], n = x->shape[a];
      if (c->iattrs[0] == 1) { /* reflect, the edge not repeated */
        while (s < 0 || s >= n)
          s = s < 0 ? -s : 2 * (n - 1) - s;
      }
      inside &= s >= 0 && s < n;
      src[a] = s;
    }
    out[0][cf_layout_at(y, idx)] =
        inside ? in[0][cf_layout_at(x, src)]
               : cf_model_round(c, c->dtype, c->fattrs[0]);
  } while (cf_index_next(y->rank, y->shape, idx));
}

/* GATHER (data, indices) and SCATTER_ADD (base, indices, updates) along
 * iattrs[0]: element g of the gathered shape reads data at the index of
 * indices there. */
static void gather_scatter(const cf_case *c, double *const *in, double **out,
                           unsigned char **free_sign) {
  const tyto_plugin_layout *d = &c->in[0].l, *ix = &c->in[1].l;
  const int scatter = c->op == OP(SCATTER_ADD);
  const tyto_plugin_layout *g = scatter ? &c->in[2].l : &c->out[0].l;
  const tyto_plugin_layout *y = &c->out[0].l;
  const uint32_t axis = (uint32_t)c->iattrs[0];
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (scatter && cf_shape_count(y->rank, y->shape) > 0)
    do { /* out = base, then the updates added */
      const int64_t at = cf_layout_at(y, idx);
      out[0][at] = in[0][cf_layout_at(d, idx)];
      free_sign[0][at] = 1;
    } while (cf_index_next(y->rank, y->shape, idx));
  memset(idx, 0, sizeof idx);
  if (cf_shape_count(g->rank, g->shape) == 0)
    return;
  do {
    int64_t di[TYTO_PLUGIN_MAX_RANK], ii[TYTO_PLUGIN_MAX_RANK];
    for (uint32_t a = 0; a < axis; a++)
      di[a] = idx[a];
    for (uint32_t a = 0; a < ix->rank; a++)
      ii[a] = idx[axis + a];
    di[axis] = (int64_t)in[1][cf_layout_at(ix, ii)];
    for (uint32_t a = axis + 1; a < d->rank; a++)
      di[a] = idx[a - 1 + ix->rank];
    if (scatter && cf_fmt_int(y->dtype)) { /* wrapping */
      const int64_t at = cf_layout_at(y, di);
      const uint64_t s =
          (uint64_t)cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64, out[0][at]) +
          (uint64_t)cf_fmt_to_int(TYTO_PLUGIN_DTYPE_I64,
                                  in[2][cf_layout_at(g, idx)]);
      out[0][at] = 0.0 + (double)cf_fmt_wrap(y->dtype, s);
    } else if (scatter) /* summed exactly (in double), rounded once below */
      out[0][cf_layout_at(y, di)] += in[2][cf_layout_at(g, idx)];
    else
      out[0][cf_layout_at(y, idx)] = in[0][cf_layout_at(d, di)];
  } while (cf_index_next(g->rank, g->shape, idx));
  memset(idx, 0, sizeof idx);
  if (scatter && cf_shape_count(y->rank, y->shape) > 0)
    do {
      const int64_t at = cf_layout_at(y, idx);
      out[0][at] = cf_model_round(c, y->dtype, out[0][at]);
    } while (cf_index_next(y->rank, y->shape, idx));
}

static void one_hot(const cf_case *c, double *const *in, double **out) {
  const tyto_plugin_layout *ix = &c->in[0].l, *y = &c->out[0].l;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(y->rank, y->shape) == 0)
    return;
  do {
    /* An index not a whole number in [0, depth) matches no position (and
     * is never converted: 1e30 would not fit an int64_t). */
    const double v = in[0][cf_layout_at(ix, idx)];
    out[0][cf_layout_at(y, idx)] = v == (double)idx[y->rank - 1] ? 1 : 0;
  } while (cf_index_next(y->rank, y->shape, idx));
}

/* ---------------------------------------------------------- linear algebra */

/* The ops on diagonal matrices (the special cases' matrices are): every
 * result from the diagonal d of each matrix. */
static void linalg_diag(const cf_case *c, double *const *in, double **out,
                        unsigned char **free_sign) {
  const tyto_plugin_layout *a = &c->in[0].l;
  const uint32_t lead = a->rank - 2;
  const int64_t n = a->shape[lead];
  int64_t bi[TYTO_PLUGIN_MAX_RANK] = {0};
  do {
    int64_t ia[TYTO_PLUGIN_MAX_RANK];
    double d[16];
    memcpy(ia, bi, sizeof ia);
    for (int64_t i = 0; i < n && i < 16; i++) {
      ia[lead] = ia[lead + 1] = i;
      d[i] = in[0][cf_layout_at(a, ia)];
    }
    for (uint32_t o = 0; o < c->n_out; o++) {
      const tyto_plugin_layout *y = &c->out[o].l;
      int64_t iy[TYTO_PLUGIN_MAX_RANK];
      memcpy(iy, bi, sizeof iy);
      if (c->op == OP(DET) || c->op == OP(LOGDET)) {
        double p = c->op == OP(DET) ? 1 : 0;
        for (int64_t i = 0; i < n; i++)
          p = c->op == OP(DET) ? p * d[i] : p + log(fabs(d[i]));
        const int64_t at = cf_layout_at(y, iy);
        out[o][at] = cf_model_round(c, c->dtype, p);
        free_sign[o][at] = 1;
        continue;
      }
      const int64_t rows = y->shape[lead], cols = y->shape[lead + 1];
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
          double v = 0;
          iy[lead] = i;
          iy[lead + 1] = j;
          switch (c->op) {
          case OP(INV): v = i == j ? 1 / d[i] : 0; break;
          case OP(CHOLESKY): v = i == j ? sqrt(d[i]) : 0; break;
          case OP(QR): /* Q = diag(sign d), R = diag(|d|): R's diagonal
                        * non-negative, as the comparison normalises it */
            v = i != j ? 0 : o == 0 ? (d[i] < 0 ? -1 : 1) : fabs(d[i]);
            if (isnan(d[i]) && i == j)
              v = NAN;
            break;
          default: { /* SOLVE, TRIANGULAR_SOLVE (non-unit): X = B / d */
            int64_t ib[TYTO_PLUGIN_MAX_RANK];
            memcpy(ib, iy, sizeof ib);
            v = in[1][cf_layout_at(&c->in[1].l, ib)] / d[i];
            if (c->op == OP(TRIANGULAR_SOLVE) && c->iattrs[2])
              v = in[1][cf_layout_at(&c->in[1].l, ib)];
          }
          }
          const int64_t at = cf_layout_at(y, iy);
          out[o][at] = cf_model_round(c, c->dtype, v);
          free_sign[o][at] = 1;
        }
    }
  } while (cf_index_next(lead, a->shape, bi));
}

/* ----------------------------------------------------------------- entry -- */

void cf_expect_free(cf_expect *x) {
  for (int o = 0; o < CF_MAX_OUT; o++) {
    free(x->want[o]);
    free(x->free_sign[o]);
    x->want[o] = NULL;
    x->free_sign[o] = NULL;
  }
}

static int model_run(const cf_case *c, double *const *in, int ftz,
                     cf_expect *x);

int cf_model_run(const cf_case *c, double *const *in, int ftz, int via_f32,
                 cf_expect *x) {
  /* A copy whose rounding knows the path (cf_model_round). */
  cf_case *m = malloc(sizeof *m);
  int rc;
  if (m == NULL) {
    memset(x, 0, sizeof *x);
    return -1;
  }
  *m = *c;
  m->model_via_f32 = via_f32;
  rc = model_run(m, in, ftz, x);
  free(m);
  return rc;
}

static int model_run(const cf_case *c, double *const *in, int ftz,
                     cf_expect *x) {
  double *fin[CF_MAX_IN] = {NULL};
  int rc = 0;
  memset(x, 0, sizeof *x);
  for (uint32_t o = 0; o < c->n_out; o++) {
    const int64_t n = c->out[o].storage ? c->out[o].storage : 1;
    x->want[o] = malloc((size_t)n * sizeof(double));
    x->free_sign[o] = calloc((size_t)n, 1);
    if (!x->want[o] || !x->free_sign[o])
      rc = -1;
    for (int64_t i = 0; rc == 0 && i < c->out[o].storage; i++)
      x->want[o][i] = cf_round(c->out[o].l.dtype, -777.0);
  }
  for (uint32_t i = 0; i < c->n_in && rc == 0; i++) {
    const int64_t n = c->in[i].storage ? c->in[i].storage : 1;
    fin[i] = malloc((size_t)n * sizeof(double));
    if (!fin[i]) {
      rc = -1;
      break;
    }
    for (int64_t j = 0; j < c->in[i].storage; j++)
      fin[i][j] = ftz ? cf_flush(c->in[i].l.dtype, in[i][j]) : in[i][j];
  }
  if (rc == 0) {
    if (c->op == OP(FILL) || c->op == OP(FUSED) || arity(c->op) > 0)
      eltwise(c, fin, x->want, x->free_sign);
    else if (c->op >= OP(SUM) && c->op <= OP(NORM_L2))
      rc = reductions(c, fin, x->want, x->free_sign);
    else if (c->op == OP(SOFTMAX) || c->op == OP(LOG_SOFTMAX))
      rc = reductions(c, fin, x->want, x->free_sign);
    else if (c->op == OP(MATMUL))
      matmul(c, fin, x->want, x->free_sign);
    else if (c->op == OP(PAD))
      pad(c, fin, x->want, x->free_sign);
    else if (c->op == OP(GATHER) || c->op == OP(SCATTER_ADD))
      gather_scatter(c, fin, x->want, x->free_sign);
    else if (c->op == OP(ONE_HOT))
      one_hot(c, fin, x->want);
    else if (c->op >= OP(INV) && c->op <= OP(TRIANGULAR_SOLVE))
      linalg_diag(c, fin, x->want, x->free_sign);
    else
      rc = cf_model_nn(c, fin, x->want, x->free_sign);
  }
  for (uint32_t o = 0; o < c->n_out && rc == 0 && ftz; o++)
    for (int64_t i = 0; i < c->out[o].storage; i++)
      x->want[o][i] = cf_flush(c->out[o].l.dtype, x->want[o][i]);
  for (uint32_t i = 0; i < CF_MAX_IN; i++)
    free(fin[i]);
  if (rc != 0)
    cf_expect_free(x);
  return rc;
}
