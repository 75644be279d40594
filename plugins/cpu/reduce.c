/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX on the CPU, in f32
 * and f64, over any strided layouts.
 *
 * Prepare turns a descriptor into a plan: the kept axes (one output element
 * per index, with their input and output strides) and the reduced axes
 * (extent-1 axes dropped, ordered by stride, adjacent ones merged), so that
 * each output element is a walk over "runs" of the innermost reduced axis.
 * A run of stride 1 is a plain loop with eight independent accumulators,
 * which GCC turns into vector code without reassociating anything itself.
 *
 * Every reduction keeps a small state (rstate) that two pieces of one
 * reduction can merge, in order. That lets the pool split the work either
 * over blocks of output elements or, for a few outputs with long
 * reductions (a full reduction), over fixed chunks of each output's
 * elements, whose states are merged in index order at the end (ties of
 * ARGMAX/ARGMIN still go to the first index; the partial states live in
 * the kernel's workspace).
 *
 * Reductions over outer axes of a tensor whose kept inner axis is
 * contiguous (a sum over the batch axis of [N, C]) use a column mode
 * instead: one pass over the reduced rows updates a panel of neighbouring
 * outputs, the panel loop being the vector loop.
 *
 * Accuracy: every sum (SUM, MEAN, NORM_L1, NORM_L2, LOG_SUM_EXP, softmax
 * denominators) accumulates in double, for f32 and f64 inputs alike: eight
 * interleaved partial sums per contiguous run, one partial per chunk, and
 * in column mode one running double per output. A 1e7-element f32 sum is
 * thus within one f32 rounding of the exact sum (the test checks 1e6 at
 * 2^-23). LOG_SUM_EXP and softmax subtract the maximum; NORM_L2 of f64
 * scales by the largest magnitude (the idea of LAPACK's dnrm2), while f32
 * squares cannot overflow a double and need no scaling.
 *
 * Results never depend on the pool's size: the chunking is fixed by the
 * shapes, and each output folds its elements in a fixed order.
 *
 * NaN: MAX/MIN and every sum propagate it; ARGMAX/ARGMIN return the index
 * of the first NaN (as NumPy). Indices are whole numbers in the output's
 * dtype, exact up to 2^24 in f32 and 2^53 in f64.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* Work below this many elements is not worth handing to the pool. */
#define RED_GRAIN 16384
/* Chunked reductions: only below this many outputs, and at most this many
 * partial states in all. */
#define RED_CHUNK_OUTS 64
#define RED_MAX_CHUNKS 256

typedef struct red_plan {
  cpu_op base;
  uint32_t op, dtype;
  int softmax;
  /* Kept axes (extent > 1), row-major order of the output. */
  int nk;
  int64_t kext[TYTO_PLUGIN_MAX_RANK], kin[TYTO_PLUGIN_MAX_RANK],
      kout[TYTO_PLUGIN_MAX_RANK];
  /* Reduced axes, innermost last; at least one (extent 1, stride 0 when
   * nothing is reduced). Softmax: one, with its output stride in rout. */
  int nr;
  int64_t rext[TYTO_PLUGIN_MAX_RANK], rst[TYTO_PLUGIN_MAX_RANK];
  int64_t rout;
  int64_t nout, count; /* output elements; elements reduced into each */
  int64_t chunks;      /* pieces each output's reduction is cut into */
  /* Column mode (see col_task): the kept axis of input stride 1, or -1. */
  int col;
} red_plan;

/* A partial reduction. m: maximum / minimum / product / L2 scale / LSE
 * maximum; s: sum / L2 scaled sum of squares / LSE sum of exp(x - m);
 * idx: ARG* index (-1 while empty); nan: a NaN was seen. */
typedef struct rstate {
  double m, s;
  int64_t idx;
  int nan;
} rstate;

static rstate state_init(uint32_t op) {
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

/* Merges b, which covers later elements than a, into a. */
static void state_merge(uint32_t op, rstate *a, const rstate *b) {
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

static double state_final(uint32_t op, const rstate *st, int64_t count) {
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
static float to_f32(double v) {
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
    rstate b = state_init(op);                                                 \
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
    state_merge(op, st, &b);                                                   \
  }

DEFINE_RUN(run_f32, float, 1, expf)
DEFINE_RUN(run_f64, double, 0, exp)

/* Folds reduced elements [r0, r1) of the output element whose input
 * position is x (bytes, offsets applied) into *st, run by run. */
static void reduce_segment(const red_plan *p, const unsigned char *x,
                           int64_t r0, int64_t r1, rstate *st) {
  if (r0 >= r1)
    return;
  if (p->nr == 1) { /* one reduced axis: a single run */
    if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
      run_f32(p->op, (const float *)x + r0 * p->rst[0], r1 - r0, p->rst[0], r0,
              st);
    else
      run_f64(p->op, (const double *)x + r0 * p->rst[0], r1 - r0, p->rst[0], r0,
              st);
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
    if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
      run_f32(p->op, (const float *)x + off, n, s, r, st);
    else
      run_f64(p->op, (const double *)x + off, n, s, r, st);
    r += n;
    idx[nr - 1] = 0;
    for (int a = nr - 2; a >= 0; a--) {
      if (++idx[a] < p->rext[a])
        break;
      idx[a] = 0;
    }
  }
}

/* Element offsets (input, output) of output element o. */
static void kept_offsets(const red_plan *p, int64_t o, int64_t *in,
                         int64_t *out) {
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

static void store(const red_plan *p, unsigned char *y, int64_t off, double v) {
  if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
    ((float *)y)[off] = to_f32(v);
  else
    ((double *)y)[off] = v;
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
    rstate st = state_init(TYTO_PLUGIN_OP_MAX_REDUCE);                         \
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

DEFINE_SOFTMAX(softmax_f32, float, run_f32, expf, to_f32)
DEFINE_SOFTMAX(softmax_f64, double, run_f64, exp, to_f64)

static void softmax_row(const red_plan *p, const unsigned char *x,
                        unsigned char *y) {
  if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
    softmax_f32(p->op, (const float *)x, (float *)y, p->rext[0], p->rst[0],
                p->rout);
  else
    softmax_f64(p->op, (const double *)x, (double *)y, p->rext[0], p->rst[0],
                p->rout);
}

typedef struct red_job {
  const red_plan *p;
  const unsigned char *x; /* input, offset applied */
  unsigned char *y;       /* output, offset applied */
  int64_t per_task; /* outputs per task (block mode); panel width (column) */
  int64_t chunks;   /* chunks per output (chunk mode); panels per task */
  rstate *partial;  /* nout * chunks states (chunk mode) */
} red_job;

static size_t elem_size(const red_plan *p) {
  return p->dtype == TYTO_PLUGIN_DTYPE_F32 ? 4 : 8;
}

/* A block of consecutive output elements, each reduced whole. */
static void block_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  size_t e = elem_size(p);
  int64_t o0 = (int64_t)t * j->per_task, o1 = o0 + j->per_task;
  if (o1 > p->nout)
    o1 = p->nout;
  int64_t idx[TYTO_PLUGIN_MAX_RANK], in, out;
  kept_offsets(p, o0, &in, &out);
  int64_t rem = o0;
  for (int a = p->nk - 1; a >= 0; a--) {
    idx[a] = rem % p->kext[a];
    rem /= p->kext[a];
  }
  for (int64_t o = o0; o < o1; o++) {
    if (p->softmax) {
      softmax_row(p, j->x + in * (int64_t)e, j->y + out * (int64_t)e);
    } else {
      rstate st = state_init(p->op);
      reduce_segment(p, j->x + in * (int64_t)e, 0, p->count, &st);
      store(p, j->y, out, state_final(p->op, &st, p->count));
    }
    /* Step the kept index (and both offsets) like an odometer. */
    for (int a = p->nk - 1; a >= 0; a--) {
      in += p->kin[a];
      out += p->kout[a];
      if (++idx[a] < p->kext[a])
        break;
      in -= p->kext[a] * p->kin[a];
      out -= p->kext[a] * p->kout[a];
      idx[a] = 0;
    }
  }
}

/* Column mode: when the reduced axes are outer to a kept axis of input
 * stride 1 (a sum over the batch axis of [N, C]), one pass over the
 * reduced elements updates a panel of up to COL_PANEL neighbouring
 * outputs, reading each input row contiguously; the loop over the panel
 * is the vector loop. Each output still folds its elements in order. */
#define COL_PANEL 1024

static int col_op(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_SUM:
  case TYTO_PLUGIN_OP_MEAN:
  case TYTO_PLUGIN_OP_NORM_L1:
  case TYTO_PLUGIN_OP_PROD:
  case TYTO_PLUGIN_OP_MAX_REDUCE:
  case TYTO_PLUGIN_OP_MIN_REDUCE: return 1;
  default: return 0;
  }
}

/* Folds one row x[0 .. nb) into the panel: acc for sums and products,
 * mm (and the NaN flags fl) for maxima and minima. */
/* BODY(k) for k in [0, nb), in blocks of eight that GCC's -O2 (its
 * "very cheap" vectoriser) turns into vector code, then the tail. */
#define COL_LOOP(BODY)                                                         \
  do {                                                                         \
    int64_t k0 = 0;                                                            \
    for (; k0 + 8 <= nb; k0 += 8)                                              \
      for (int l = 0; l < 8; l++) {                                            \
        int64_t k = k0 + l;                                                    \
        BODY                                                                   \
      }                                                                        \
    for (int64_t k = k0; k < nb; k++) {                                        \
      BODY                                                                     \
    }                                                                          \
  } while (0)

#define DEFINE_COL_ROW(NAME, T)                                                \
  static void NAME(uint32_t op, const T *restrict x, int64_t nb,               \
                   double *restrict acc, T *restrict mm, T *restrict fl) {     \
    switch (op) {                                                              \
    case TYTO_PLUGIN_OP_SUM:                                                   \
    case TYTO_PLUGIN_OP_MEAN: COL_LOOP(acc[k] += (double)x[k];); break;        \
    case TYTO_PLUGIN_OP_NORM_L1: COL_LOOP(acc[k] += fabs((double)x[k]););      \
        break;                                                                 \
    case TYTO_PLUGIN_OP_PROD: COL_LOOP(acc[k] *= (double)x[k];); break;        \
    case TYTO_PLUGIN_OP_MAX_REDUCE:                                            \
      COL_LOOP(T v = x[k]; mm[k] = v > mm[k] ? v : mm[k];                      \
               fl[k] = v != v ? (T)1 : fl[k];);                                \
      break;                                                                   \
    default: /* MIN_REDUCE */                                                  \
      COL_LOOP(T v = x[k]; mm[k] = v < mm[k] ? v : mm[k];                      \
               fl[k] = v != v ? (T)1 : fl[k];);                                \
      break;                                                                   \
    }                                                                          \
  }

DEFINE_COL_ROW(col_row_f32, float)
DEFINE_COL_ROW(col_row_f64, double)

/* Input and output offsets of panel group q: the kept axes but the
 * column one, row-major. */
static void col_offsets(const red_plan *p, int64_t q, int64_t *in,
                        int64_t *out) {
  int64_t i = 0, j = 0;
  for (int a = p->nk - 1; a >= 0; a--) {
    if (a == p->col)
      continue;
    int64_t r = q % p->kext[a];
    q /= p->kext[a];
    i += r * p->kin[a];
    j += r * p->kout[a];
  }
  *in = i;
  *out = j;
}

static int64_t col_panels(const red_plan *p, int64_t width) {
  return (p->kext[p->col] + width - 1) / width;
}

static void col_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t w = j->per_task; /* the panel width */
  int64_t panels = col_panels(p, w);
  int64_t q = (int64_t)t / panels, c0 = (int64_t)t % panels * w;
  int64_t nb = p->kext[p->col] - c0 < w ? p->kext[p->col] - c0 : w;
  int64_t in, out;
  col_offsets(p, q, &in, &out);
  in += c0; /* the column axis has input stride 1 */
  out += c0 * p->kout[p->col];
  double acc[COL_PANEL];
  union {
    float f[COL_PANEL];
    double d[COL_PANEL];
  } mm, fl;
  int is_max = p->op == TYTO_PLUGIN_OP_MAX_REDUCE;
  int f32 = p->dtype == TYTO_PLUGIN_DTYPE_F32;
  for (int64_t k = 0; k < nb; k++) {
    acc[k] = p->op == TYTO_PLUGIN_OP_PROD ? 1 : 0;
    if (f32) {
      mm.f[k] = is_max ? -INFINITY : INFINITY;
      fl.f[k] = 0;
    } else {
      mm.d[k] = is_max ? -INFINITY : INFINITY;
      fl.d[k] = 0;
    }
  }
  /* Walk the reduced elements in order with an odometer. */
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, off = 0;
  for (int64_t r = 0; r < p->count; r++) {
    if (p->dtype == TYTO_PLUGIN_DTYPE_F32)
      col_row_f32(p->op, (const float *)j->x + in + off, nb, acc, mm.f, fl.f);
    else
      col_row_f64(p->op, (const double *)j->x + in + off, nb, acc, mm.d, fl.d);
    for (int a = p->nr - 1; a >= 0; a--) {
      off += p->rst[a];
      if (++idx[a] < p->rext[a])
        break;
      off -= p->rext[a] * p->rst[a];
      idx[a] = 0;
    }
  }
  for (int64_t k = 0; k < nb; k++) {
    double v;
    if (p->op == TYTO_PLUGIN_OP_MAX_REDUCE ||
        p->op == TYTO_PLUGIN_OP_MIN_REDUCE)
      v = (f32 ? fl.f[k] != 0 : fl.d[k] != 0) ? NAN
          : f32                               ? (double)mm.f[k]
                                              : mm.d[k];
    else if (p->op == TYTO_PLUGIN_OP_MEAN)
      v = acc[k] / (double)p->count;
    else
      v = acc[k];
    store(p, j->y, out + k * p->kout[p->col], v);
  }
}

/* Panels [t * chunks, (t + 1) * chunks) of column mode. */
static void col_tasks(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t units = p->nout / p->kext[p->col] * col_panels(p, j->per_task);
  int64_t u1 = ((int64_t)t + 1) * j->chunks;
  for (int64_t u = (int64_t)t * j->chunks; u < u1 && u < units; u++)
    col_task(ctx, (size_t)u);
}

/* One chunk of one output element's reduced elements. */
static void chunk_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t o = (int64_t)t / j->chunks, c = (int64_t)t % j->chunks;
  /* Chunk c covers [c*q + min(c, rem), ...): sizes differ by at most 1. */
  int64_t q = p->count / j->chunks, rem = p->count % j->chunks;
  int64_t r0 = c * q + (c < rem ? c : rem), r1 = r0 + q + (c < rem);
  int64_t in, out;
  kept_offsets(p, o, &in, &out);
  rstate st = state_init(p->op);
  reduce_segment(p, j->x + in * (int64_t)elem_size(p), r0, r1, &st);
  j->partial[t] = st;
}

static tyto_plugin_error *red_run(const cpu_op *base, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  const red_plan *p = (const red_plan *)base;
  if (p->nout == 0)
    return NULL;
  size_t e = elem_size(p);
  red_job j = {p,
               args[0] + d->in[0].l.offset * (int64_t)e,
               args[1] + d->out[0].l.offset * (int64_t)e,
               p->nout,
               1,
               NULL};
  /* How a reduction is cut never depends on the pool's size, so results
   * are the same bits on every machine: long reductions of few outputs go
   * in fixed chunks, merged in order; otherwise each output is reduced
   * whole and only the blocks of outputs depend on the threads. */
  if (p->col >= 0) {
    /* Wide panels read long contiguous rows (fewer TLB misses, better
     * prefetching); narrower ones when the pool needs more tasks. The
     * width changes no result: each output still folds in order. */
    int64_t groups = p->nout / p->kext[p->col], ext = p->kext[p->col];
    int64_t want = 2 * (int64_t)cpu_pool_size(pool);
    int64_t w = groups >= want ? COL_PANEL : ext * groups / want;
    w = w < 64 ? 64 : w > COL_PANEL ? COL_PANEL : (w + 7) / 8 * 8;
    j.per_task = w;
    int64_t units = groups * col_panels(p, w);
    if (cpu_pool_size(pool) <= 1 || p->nout * p->count < 2 * RED_GRAIN) {
      for (int64_t t = 0; t < units; t++)
        col_task(&j, (size_t)t);
    } else {
      /* Many small panels (short reductions) go several to a task. */
      j.chunks = (units + 4 * want - 1) / (4 * want);
      cpu_pool_for(pool, (size_t)((units + j.chunks - 1) / j.chunks), col_tasks,
                   &j);
    }
    return NULL;
  }
  int64_t chunks = p->chunks;
  if (chunks < 2) {
    unsigned threads = cpu_pool_size(pool);
    int64_t work = p->nout * (p->count > 1 ? p->count : 1);
    int64_t tasks = work / RED_GRAIN; /* tasks worth making */
    if (tasks > 4 * (int64_t)threads)
      tasks = 4 * (int64_t)threads;
    if (tasks > p->nout)
      tasks = p->nout;
    if (threads <= 1 || tasks <= 1) {
      block_task(&j, 0);
      return NULL;
    }
    j.per_task = (p->nout + tasks - 1) / tasks;
    cpu_pool_for(pool, (size_t)((p->nout + j.per_task - 1) / j.per_task),
                 block_task, &j);
    return NULL;
  }
  j.chunks = chunks;
  size_t n = (size_t)(p->nout * j.chunks);
  /* The partial states live in the workspace (a kernel may run on several
   * streams at once, so it keeps no scratch of its own). */
  uintptr_t ws = (uintptr_t)args[2];
  ws = (ws + _Alignof(rstate) - 1) & ~(uintptr_t)(_Alignof(rstate) - 1);
  j.partial = (rstate *)ws;
  cpu_pool_for(pool, n, chunk_task, &j);
  for (int64_t o = 0; o < p->nout; o++) {
    rstate st = j.partial[o * j.chunks];
    for (int64_t c = 1; c < j.chunks; c++)
      state_merge(p->op, &st, &j.partial[o * j.chunks + c]);
    int64_t in, out;
    kept_offsets(p, o, &in, &out);
    store(p, j.y, out, state_final(p->op, &st, p->count));
  }
  return NULL;
}

static void red_destroy(cpu_op *op) {
  free(op);
}

/* "[2,3,4]" into buf. */
static const char *fmt_shape(char *buf, size_t size, const int64_t *shape,
                             uint32_t rank) {
  size_t n = (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < rank && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                          (long long)shape[i]);
  if (n < size)
    snprintf(buf + n, size - n, "]");
  return buf;
}

static int is_arg(uint32_t op) {
  return op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
}

/* Checks the axes of a reduction (or the one axis of a softmax). */
static tyto_plugin_error *check_axes(const tyto_plugin_host *h,
                                     const cpu_desc *desc, int softmax,
                                     unsigned char *reduced) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  uint32_t rank = desc->in[0].l.rank;
  if (softmax && d->n_iattrs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected the axis as the only integer attribute, "
                        "got %u integer attributes",
                        name, d->n_iattrs);
  if (is_arg(d->op) && d->n_iattrs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected exactly one axis as integer attribute, "
                        "got %u axes",
                        name, d->n_iattrs);
  memset(reduced, 0, TYTO_PLUGIN_MAX_RANK);
  for (uint32_t i = 0; i < d->n_iattrs; i++) {
    int64_t a = d->iattrs[i];
    if (a < 0 || a >= (int64_t)rank)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axis %lld is out of range for an input of rank "
                          "%u (axes are 0 to rank - 1)",
                          name, (long long)a, rank);
    if (i > 0 && a == d->iattrs[i - 1])
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axis %lld is repeated; each axis may be reduced "
                          "once",
                          name, (long long)a);
    if (i > 0 && a < d->iattrs[i - 1])
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axes must be ascending, but axis %lld follows "
                          "axis %lld",
                          name, (long long)a, (long long)d->iattrs[i - 1]);
    reduced[a] = 1;
  }
  return NULL;
}

/* Orders the reduced axes innermost-smallest-stride and merges neighbours
 * that step as one axis. ARG* keep their single axis. */
static void plan_reduced(red_plan *p, const tyto_plugin_layout *in,
                         const unsigned char *reduced) {
  int n = 0, empty = 0;
  int64_t count = 1;
  for (uint32_t a = 0; a < in->rank; a++) {
    if (!reduced[a])
      continue;
    count *= in->shape[a];
    empty |= in->shape[a] == 0;
    if (in->shape[a] == 1)
      continue;
    p->rext[n] = in->shape[a];
    p->rst[n] = in->strides[a];
    n++;
  }
  p->count = count;
  if (empty || n == 0) {
    p->nr = 1;
    p->rext[0] = empty ? 0 : 1;
    p->rst[0] = 0;
    return;
  }
  /* Insertion sort by |stride|, largest first (stable). */
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && llabs(p->rst[k - 1]) < llabs(p->rst[k]); k--) {
      int64_t te = p->rext[k], ts = p->rst[k];
      p->rext[k] = p->rext[k - 1];
      p->rst[k] = p->rst[k - 1];
      p->rext[k - 1] = te;
      p->rst[k - 1] = ts;
    }
  int m = 0;
  for (int i = 1; i < n; i++) {
    if (p->rst[m] == p->rst[i] * p->rext[i]) {
      p->rext[m] *= p->rext[i];
      p->rst[m] = p->rst[i];
    } else {
      m++;
      p->rext[m] = p->rext[i];
      p->rst[m] = p->rst[i];
    }
  }
  p->nr = m + 1;
}

/* The family's check. Sets reduced[a] for each axis the attributes name (a
 * softmax's one axis too) and clears the others. */
static tyto_plugin_error *red_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc,
                                    unsigned char *reduced) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  int softmax =
      d->op == TYTO_PLUGIN_OP_SOFTMAX || d->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  if (desc->n_in != 1 || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected 1 input and 1 output, got %u and %u",
                        name, desc->n_in, desc->n_out);
  const tyto_plugin_layout *in = &desc->in[0].l, *o = &desc->out[0].l;
  if (in->dtype != o->dtype)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: input is %s but output is %s", name,
                        cpu_dtype_name(in->dtype), cpu_dtype_name(o->dtype));
  tyto_plugin_error *e = check_axes(h, desc, softmax, reduced);
  if (e)
    return e;
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t a = 0; a < in->rank; a++)
    want[a] = reduced[a] && !softmax ? 1 : in->shape[a];
  if (o->rank != in->rank ||
      memcmp(o->shape, want, in->rank * sizeof(int64_t)) != 0) {
    char got[160], exp_[160];
    return h->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: output shape %s should be %s (%s)", name,
        fmt_shape(got, sizeof got, o->shape, o->rank),
        fmt_shape(exp_, sizeof exp_, want, in->rank),
        softmax ? "the input's shape"
                : "the input's, with each reduced axis kept at extent 1");
  }
  if (is_arg(d->op) && in->shape[d->iattrs[0]] == 0)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: axis %lld has extent 0, and an empty axis has no "
                        "index of its extreme",
                        name, (long long)d->iattrs[0]);
  return NULL;
}

tyto_plugin_error *cpu_reduce_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK];
  return red_check(h, desc, reduced);
}

tyto_plugin_error *cpu_reduce_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  int softmax =
      d->op == TYTO_PLUGIN_OP_SOFTMAX || d->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK];
  tyto_plugin_error *e = red_check(h, desc, reduced);
  if (e)
    return e;
  const tyto_plugin_layout *in = &desc->in[0].l, *o = &desc->out[0].l;
  red_plan *p = calloc(1, sizeof *p);
  if (!p)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  p->base.run = red_run;
  p->base.destroy = red_destroy;
  p->op = d->op;
  p->dtype = in->dtype;
  p->softmax = softmax;
  p->nout = 1;
  for (uint32_t a = 0; a < in->rank; a++) {
    if (reduced[a])
      continue;
    p->nout *= in->shape[a];
    if (in->shape[a] == 1)
      continue;
    p->kext[p->nk] = in->shape[a];
    p->kin[p->nk] = in->strides[a];
    p->kout[p->nk] = o->strides[a];
    p->nk++;
  }
  if (softmax) {
    int64_t a = d->iattrs[0];
    p->nr = 1;
    p->rext[0] = p->count = in->shape[a];
    p->rst[0] = in->strides[a];
    p->rout = o->strides[a];
    if (p->count == 0)
      p->nout = 0; /* nothing to write */
  } else {
    plan_reduced(p, in, reduced);
  }
  /* Column mode when the innermost reduced axis strides past a kept axis
   * of stride 1 and there are enough outputs to fill panels; the row mode
   * reads contiguous runs anyway when the reduced stride is 1. */
  p->col = -1;
  if (!softmax && col_op(p->op) && p->count >= 2 && p->nk > 0 &&
      llabs(p->rst[p->nr - 1]) > 1)
    for (int a = p->nk - 1; a >= 0; a--)
      if (p->kin[a] == 1 && p->kext[a] >= 8) {
        p->col = a;
        break;
      }
  /* Chunked (see red_run) only for few outputs with long reductions; the
   * cut depends on the shapes alone. */
  p->chunks = 1;
  if (p->col < 0 && !softmax && p->nout > 0 && p->nout < RED_CHUNK_OUTS) {
    int64_t c = p->count / RED_GRAIN, cap = RED_MAX_CHUNKS / p->nout;
    p->chunks = c < cap ? c : cap;
    if (p->chunks < 2)
      p->chunks = 1;
    else
      p->base.workspace_bytes = /* room to align the states too */
          (uint64_t)(p->nout * p->chunks) * sizeof(rstate) + _Alignof(rstate);
  }
  *out = &p->base;
  return NULL;
}
