/*
 * The reductions' folds (see reduce.c): a run of elements into a partial
 * state, states merged and finished, results stored; and softmax rows.
 * F16 and BF16 runs are read into f32 blocks and folded by the f32 code;
 * results, computed in double, are rounded once to the dtype.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"

rstate red_state_init(uint32_t op) {
  rstate st = {0, 0, -1, 0};
  switch (op) {
  case TYTO_PLUGIN_OP_MAX_REDUCE:
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_LOG_SUM_EXP: st.m = -INFINITY; break;
  case TYTO_PLUGIN_OP_MIN_REDUCE:
  case TYTO_PLUGIN_OP_ARGMIN: st.m = INFINITY; break;
  case TYTO_PLUGIN_OP_PROD: st.m = 1; break;
  default: break;
  }
  return st;
}

void red_state_merge(uint32_t op, rstate *a, const rstate *b) {
  a->nan |= b->nan;
  switch (op) {
  case TYTO_PLUGIN_OP_SUM:
  case TYTO_PLUGIN_OP_MEAN:
  case TYTO_PLUGIN_OP_NORM_L1: a->s += b->s; break;
  case TYTO_PLUGIN_OP_PROD: a->m *= b->m; break;
  case TYTO_PLUGIN_OP_MAX_REDUCE: a->m = b->m > a->m ? b->m : a->m; break;
  case TYTO_PLUGIN_OP_MIN_REDUCE: a->m = b->m < a->m ? b->m : a->m; break;
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_ARGMIN:
    /* A NaN wins as the extreme (as NumPy's argmax): it is kept in m
     * (ARG* never set the nan flag), and once a holds one it stays. */
    if (b->idx < 0 || (a->idx >= 0 && a->m != a->m))
      break;
    if (a->idx < 0 || b->m != b->m ||
        (op == TYTO_PLUGIN_OP_ARGMAX ? b->m > a->m : b->m < a->m)) {
      a->m = b->m;
      a->idx = b->idx;
    }
    break;
  case TYTO_PLUGIN_OP_LOG_SUM_EXP:
    if (b->m == -INFINITY)
      break;
    if (a->m == -INFINITY || (b->m == INFINITY && a->m != INFINITY)) {
      a->m = b->m;
      a->s = b->s;
    } else if (a->m != INFINITY) {
      double m = a->m > b->m ? a->m : b->m;
      a->s = a->s * exp(a->m - m) + b->s * exp(b->m - m);
      a->m = m;
    }
    break;
  case TYTO_PLUGIN_OP_NORM_L2: {
    /* m is the scale, s the sum of (x / m)^2; infinities keep s = 1. */
    rstate hi = a->m >= b->m ? *a : *b, lo = a->m >= b->m ? *b : *a;
    if (hi.m == 0)
      break;
    double r = lo.m == hi.m ? 1 : lo.m / hi.m;
    a->s = hi.m == INFINITY ? 1 : hi.s + lo.s * r * r;
    a->m = hi.m;
    break;
  }
  default: break;
  }
}

double red_state_final(uint32_t op, const rstate *st, int64_t count) {
  if (st->nan)
    return NAN;
  switch (op) {
  case TYTO_PLUGIN_OP_SUM:
  case TYTO_PLUGIN_OP_NORM_L1: return st->s;
  case TYTO_PLUGIN_OP_MEAN: return st->s / (double)count; /* 0/0: NaN */
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_ARGMIN: return (double)st->idx;
  case TYTO_PLUGIN_OP_LOG_SUM_EXP:
    return isinf(st->m) ? st->m : st->m + log(st->s);
  case TYTO_PLUGIN_OP_NORM_L2: return st->m * sqrt(st->s);
  default: return st->m; /* PROD, MAX, MIN */
  }
}

/* Values beyond f32's range become infinities, as IEEE rounding makes them
 * (a plain conversion would be undefined behaviour in C). */
static float red_to_f32(double v) {
  return v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
}

/* OUT = the sum, in double, of EXPR over the run, where EXPR reads the
 * element as `xv` (a T): eight interleaved partial sums when the run is
 * contiguous (vector code at -O2), one otherwise. */
#define LANE_SUM(T, OUT, EXPR)                                                 \
  do {                                                                         \
    double acc_[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail_ = 0;                      \
    int64_t i_ = 0;                                                            \
    if (s == 1)                                                                \
      for (; i_ + 8 <= n; i_ += 8)                                             \
        for (int l_ = 0; l_ < 8; l_++) {                                       \
          T xv = x[i_ + l_];                                                   \
          acc_[l_] += (EXPR);                                                  \
        }                                                                      \
    for (; i_ < n; i_++) {                                                     \
      T xv = x[i_ * s];                                                        \
      tail_ += (EXPR);                                                         \
    }                                                                          \
    OUT = ((acc_[0] + acc_[4]) + (acc_[1] + acc_[5])) +                        \
          ((acc_[2] + acc_[6]) + (acc_[3] + acc_[7])) + tail_;                 \
  } while (0)

/* One run of n elements x[0], x[s], ... whose first has reduced index r0,
 * folded into *st. Instantiated for float and double. */
#define DEFINE_RUN(NAME, T, IS_F32, EXPFN)                                     \
  static void NAME(uint32_t op, const T *x, int64_t n, int64_t s, int64_t r0,  \
                   rstate *st) {                                               \
    rstate b = red_state_init(op);                                             \
    switch (op) {                                                              \
    case TYTO_PLUGIN_OP_SUM:                                                   \
    case TYTO_PLUGIN_OP_MEAN:                                                  \
      LANE_SUM(T, b.s, (double)xv);                                            \
      b.nan = b.s != b.s;                                                      \
      break;                                                                   \
    case TYTO_PLUGIN_OP_NORM_L1:                                               \
      LANE_SUM(T, b.s, fabs((double)xv));                                      \
      b.nan = b.s != b.s;                                                      \
      break;                                                                   \
    case TYTO_PLUGIN_OP_PROD: {                                                \
      double p = 1;                                                            \
      for (int64_t i = 0; i < n; i++)                                          \
        p *= (double)x[i * s];                                                 \
      b.m = p;                                                                 \
      break;                                                                   \
    }                                                                          \
    case TYTO_PLUGIN_OP_MAX_REDUCE:                                            \
    case TYTO_PLUGIN_OP_MIN_REDUCE: {                                          \
      /* NaN is tracked apart so the compare stays a vector max/min. */        \
      int want_max = op == TYTO_PLUGIN_OP_MAX_REDUCE, seen_nan = 0;            \
      T m = want_max ? (T)-INFINITY : (T)INFINITY;                             \
      int64_t i = 0;                                                           \
      if (s == 1) {                                                            \
        /* Eight lanes, as for sums, so the loop becomes vector code. */       \
        T lm[8];                                                               \
        T ln[8];                                                               \
        for (int k = 0; k < 8; k++)                                            \
          lm[k] = m, ln[k] = 0;                                                \
        if (want_max)                                                          \
          for (; i + 8 <= n; i += 8)                                           \
            for (int k = 0; k < 8; k++) {                                      \
              T v = x[i + k];                                                  \
              lm[k] = v > lm[k] ? v : lm[k];                                   \
              ln[k] = v != v ? (T)1 : ln[k];                                   \
            }                                                                  \
        else                                                                   \
          for (; i + 8 <= n; i += 8)                                           \
            for (int k = 0; k < 8; k++) {                                      \
              T v = x[i + k];                                                  \
              lm[k] = v < lm[k] ? v : lm[k];                                   \
              ln[k] = v != v ? (T)1 : ln[k];                                   \
            }                                                                  \
        for (int k = 0; k < 8; k++) {                                          \
          m = want_max ? (lm[k] > m ? lm[k] : m) : (lm[k] < m ? lm[k] : m);    \
          seen_nan |= ln[k] != 0;                                              \
        }                                                                      \
      }                                                                        \
      if (want_max)                                                            \
        for (; i < n; i++) {                                                   \
          T v = x[i * s];                                                      \
          m = v > m ? v : m;                                                   \
          seen_nan |= v != v;                                                  \
        }                                                                      \
      else                                                                     \
        for (; i < n; i++) {                                                   \
          T v = x[i * s];                                                      \
          m = v < m ? v : m;                                                   \
          seen_nan |= v != v;                                                  \
        }                                                                      \
      b.m = m;                                                                 \
      b.nan = seen_nan;                                                        \
      break;                                                                   \
    }                                                                          \
    case TYTO_PLUGIN_OP_ARGMAX:                                                \
    case TYTO_PLUGIN_OP_ARGMIN: {                                              \
      int want_max = op == TYTO_PLUGIN_OP_ARGMAX;                              \
      for (int64_t i = 0; i < n; i++) {                                        \
        T v = x[i * s];                                                        \
        if (v != v) {                                                          \
          b.m = NAN;                                                           \
          b.idx = r0 + i;                                                      \
          break;                                                               \
        }                                                                      \
        if (b.idx < 0 || (want_max ? v > b.m : v < b.m)) {                     \
          b.m = v;                                                             \
          b.idx = r0 + i;                                                      \
        }                                                                      \
      }                                                                        \
      break;                                                                   \
    }                                                                          \
    case TYTO_PLUGIN_OP_LOG_SUM_EXP: {                                         \
      T m = (T)-INFINITY;                                                      \
      int seen_nan = 0;                                                        \
      int64_t i = 0;                                                           \
      if (s == 1) {                                                            \
        T lm[8], ln[8];                                                        \
        for (int k = 0; k < 8; k++)                                            \
          lm[k] = m, ln[k] = 0;                                                \
        for (; i + 8 <= n; i += 8)                                             \
          for (int k = 0; k < 8; k++) {                                        \
            T v = x[i + k];                                                    \
            lm[k] = v > lm[k] ? v : lm[k];                                     \
            ln[k] = v != v ? (T)1 : ln[k];                                     \
          }                                                                    \
        for (int k = 0; k < 8; k++) {                                          \
          m = lm[k] > m ? lm[k] : m;                                           \
          seen_nan |= ln[k] != 0;                                              \
        }                                                                      \
      }                                                                        \
      for (; i < n; i++) {                                                     \
        T v = x[i * s];                                                        \
        m = v > m ? v : m;                                                     \
        seen_nan |= v != v;                                                    \
      }                                                                        \
      b.nan = seen_nan;                                                        \
      b.m = m;                                                                 \
      if (seen_nan || isinf(m)) {                                              \
        b.s = 1;                                                               \
        break;                                                                 \
      }                                                                        \
      double sum;                                                              \
      LANE_SUM(T, sum, (double)EXPFN(xv - m));                                 \
      b.s = sum;                                                               \
      break;                                                                   \
    }                                                                          \
    case TYTO_PLUGIN_OP_NORM_L2: {                                             \
      if (IS_F32) {                                                            \
        /* f32 squares fit a double: one pass, no scaling. */                  \
        double ssq;                                                            \
        LANE_SUM(T, ssq, (double)xv *(double)xv);                              \
        b.nan = ssq != ssq;                                                    \
        b.m = ssq == 0 ? 0 : ssq == INFINITY ? INFINITY : 1;                   \
        b.s = ssq == 0 ? 0 : ssq == INFINITY ? 1 : ssq;                        \
        break;                                                                 \
      }                                                                        \
      /* Scale by the largest magnitude (LAPACK's dnrm2 idea, two passes). */  \
      double amax = 0;                                                         \
      int64_t i = 0;                                                           \
      if (s == 1) {                                                            \
        double lm[8] = {0, 0, 0, 0, 0, 0, 0, 0};                               \
        for (; i + 8 <= n; i += 8)                                             \
          for (int k = 0; k < 8; k++) {                                        \
            double v = fabs((double)x[i + k]);                                 \
            lm[k] = v > lm[k] ? v : lm[k];                                     \
          }                                                                    \
        for (int k = 0; k < 8; k++)                                            \
          amax = lm[k] > amax ? lm[k] : amax;                                  \
      }                                                                        \
      for (; i < n; i++) {                                                     \
        double v = fabs((double)x[i * s]);                                     \
        amax = v > amax ? v : amax;                                            \
      }                                                                        \
      if (amax == 0 || amax == INFINITY) {                                     \
        /* NaNs hide from the comparisons: look for them here. */              \
        for (int64_t k = 0; k < n; k++)                                        \
          b.nan |= x[k * s] != x[k * s];                                       \
        b.m = amax;                                                            \
        b.s = amax == 0 ? 0 : 1;                                               \
        break;                                                                 \
      }                                                                        \
      double inv = 1 / amax, ssq;                                              \
      LANE_SUM(T, ssq, ((double)xv * inv) * ((double)xv * inv));               \
      b.nan = ssq != ssq;                                                      \
      b.m = amax;                                                              \
      b.s = ssq;                                                               \
      break;                                                                   \
    }                                                                          \
    default: break;                                                            \
    }                                                                          \
    red_state_merge(op, st, &b);                                               \
  }

DEFINE_RUN(run_f32, float, 1, expf)
DEFINE_RUN(run_f64, double, 0, exp)

/* F16 and BF16: a run read into f32 blocks, each folded as an f32 run
 * (the blocks' states merge in order, as a chunked reduction's do). */
#define RED_HALF_BLOCK 256
static void run_half(const red_plan *p, uint32_t op, const uint16_t *x,
                     int64_t n, int64_t s, int64_t r0, rstate *st) {
  float t[RED_HALF_BLOCK];
  uint16_t g[RED_HALF_BLOCK];
  for (int64_t i = 0; i < n; i += RED_HALF_BLOCK) {
    int64_t m = n - i < RED_HALF_BLOCK ? n - i : RED_HALF_BLOCK;
    const uint16_t *src = x + i * s;
    if (s != 1) {
      cpu_gather(2, (size_t)m, g, src, s);
      src = g;
    }
    p->widen((size_t)m, t, src);
    run_f32(op, t, m, 1, r0 + i, st);
  }
}

/* One run of n elements from element `off` of x, stepping s. */
static void run(const red_plan *p, const unsigned char *x, int64_t off,
                int64_t n, int64_t s, int64_t r0, rstate *st) {
  if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
    run_f32(p->op, (const float *)x + off, n, s, r0, st);
  else if (p->dtype == TYTO_PLUGIN_DTYPE_F64)
    run_f64(p->op, (const double *)x + off, n, s, r0, st);
  else
    run_half(p, p->op, (const uint16_t *)x + off, n, s, r0, st);
}

void red_segment(const red_plan *p, const unsigned char *x, int64_t r0,
                 int64_t r1, rstate *st) {
  if (r0 >= r1)
    return;
  if (p->nr == 1) { /* one reduced axis: a single run */
    run(p, x, r0 * p->rst[0], r1 - r0, p->rst[0], r0, st);
    return;
  }
  int nr = p->nr;
  int64_t idx[TYTO_PLUGIN_MAX_RANK];
  int64_t rem = r0;
  for (int a = nr - 1; a >= 0; a--) {
    idx[a] = rem % p->rext[a];
    rem /= p->rext[a];
  }
  int64_t inner = p->rext[nr - 1], s = p->rst[nr - 1];
  for (int64_t r = r0; r < r1;) {
    int64_t off = 0;
    for (int a = 0; a < nr; a++)
      off += idx[a] * p->rst[a];
    int64_t n = inner - idx[nr - 1];
    if (n > r1 - r)
      n = r1 - r;
    run(p, x, off, n, s, r, st);
    r += n;
    idx[nr - 1] = 0;
    for (int a = nr - 2; a >= 0; a--) {
      if (++idx[a] < p->rext[a])
        break;
      idx[a] = 0;
    }
  }
}

void red_kept_offsets(const red_plan *p, int64_t o, int64_t *in, int64_t *out) {
  int64_t i = 0, j = 0;
  for (int a = p->nk - 1; a >= 0; a--) {
    int64_t q = o % p->kext[a];
    o /= p->kext[a];
    i += q * p->kin[a];
    j += q * p->kout[a];
  }
  *in = i;
  *out = j;
}

void red_store(const red_plan *p, unsigned char *y, int64_t off, double v) {
  if (p->odtype == TYTO_PLUGIN_DTYPE_I32) /* an ARG* index, a whole number */
    ((int32_t *)(void *)y)[off] =
        (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, v);
  else if (p->odtype == TYTO_PLUGIN_DTYPE_I64)
    ((int64_t *)(void *)y)[off] =
        (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, v);
  else if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
    ((float *)y)[off] = red_to_f32(v);
  else if (p->dtype == TYTO_PLUGIN_DTYPE_F64)
    ((double *)y)[off] = v;
  else /* the double the f32 code computed, rounded once */
    p->from_f64(1, (uint16_t *)y + off, &v);
}

static double to_f64(double v) {
  return v;
}

/* Softmax of one row: the maximum, then exp(x - max) written out while
 * summing, then a scaling pass; log-softmax writes x - max - log(sum).
 * With a NaN, or an infinite maximum, some exp(x - max) is NaN and so is
 * the row, as the reference formula gives. The output may be the input
 * itself (same layout): each element is read before it is written. */
#define DEFINE_SOFTMAX(NAME, T, RUN, EXPFN, CONV)                              \
  static void NAME(uint32_t op, const T *x, T *y, int64_t n, int64_t s,        \
                   int64_t so) {                                               \
    rstate st = red_state_init(TYTO_PLUGIN_OP_MAX_REDUCE);                     \
    RUN(TYTO_PLUGIN_OP_MAX_REDUCE, x, n, s, 0, &st);                           \
    T m = (T)st.m;                                                             \
    double sum = 0;                                                            \
    if (op == TYTO_PLUGIN_OP_SOFTMAX) {                                        \
      for (int64_t i = 0; i < n; i++) {                                        \
        T e = EXPFN(x[i * s] - m);                                             \
        y[i * so] = e;                                                         \
        sum += (double)e;                                                      \
      }                                                                        \
      double inv = 1 / sum;                                                    \
      for (int64_t i = 0; i < n; i++)                                          \
        y[i * so] = (T)((double)y[i * so] * inv);                              \
    } else {                                                                   \
      for (int64_t i = 0; i < n; i++)                                          \
        sum += (double)EXPFN(x[i * s] - m);                                    \
      double lse = (double)m + log(sum);                                       \
      for (int64_t i = 0; i < n; i++)                                          \
        y[i * so] = CONV((double)x[i * s] - lse);                              \
    }                                                                          \
  }

DEFINE_SOFTMAX(softmax_f32, float, run_f32, expf, red_to_f32)
DEFINE_SOFTMAX(softmax_f64, double, run_f64, exp, to_f64)

/* F16 and BF16: the f32 softmax's computation on the row read in f32
 * blocks, each result rounded once from the double it is computed in.
 * The output cannot hold the exponentials unrounded, so a third pass
 * computes them again (the same expf, so the same values). Each block is
 * read before it is written: the output may be the input. */
static void softmax_half(const red_plan *p, const uint16_t *x, uint16_t *y,
                         int64_t n, int64_t s, int64_t so) {
  float t[RED_HALF_BLOCK];
  double v[RED_HALF_BLOCK];
  uint16_t g[RED_HALF_BLOCK];
  rstate st = red_state_init(TYTO_PLUGIN_OP_MAX_REDUCE);
  run_half(p, TYTO_PLUGIN_OP_MAX_REDUCE, x, n, s, 0, &st);
  float m = (float)st.m;
  double sum = 0, scale = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < n; i += RED_HALF_BLOCK) {
      int64_t k = n - i < RED_HALF_BLOCK ? n - i : RED_HALF_BLOCK;
      cpu_gather(2, (size_t)k, g, x + i * s, s);
      p->widen((size_t)k, t, g);
      if (pass == 0) {
        for (int64_t q = 0; q < k; q++)
          sum += (double)expf(t[q] - m);
        continue;
      }
      if (p->op == TYTO_PLUGIN_OP_SOFTMAX)
        for (int64_t q = 0; q < k; q++)
          v[q] = (double)expf(t[q] - m) * scale;
      else
        for (int64_t q = 0; q < k; q++)
          v[q] = (double)t[q] - scale;
      p->from_f64((size_t)k, g, v);
      cpu_scatter(2, (size_t)k, y + i * so, so, g);
    }
    scale = p->op == TYTO_PLUGIN_OP_SOFTMAX ? 1 / sum : (double)m + log(sum);
  }
}

void red_softmax_row(const red_plan *p, const unsigned char *x,
                     unsigned char *y) {
  if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
    softmax_f32(p->op, (const float *)x, (float *)y, p->rext[0], p->rst[0],
                p->rout);
  else if (p->dtype == TYTO_PLUGIN_DTYPE_F64)
    softmax_f64(p->op, (const double *)x, (double *)y, p->rext[0], p->rst[0],
                p->rout);
  else
    softmax_half(p, (const uint16_t *)x, (uint16_t *)y, p->rext[0], p->rst[0],
                 p->rout);
}

size_t red_elem_size(const red_plan *p) {
  return cpu_dtype_size(p->dtype);
}
