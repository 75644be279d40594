/*
 * The reductions' column mode (see reduce.c): reductions over outer axes
 * of a tensor whose kept inner axis is contiguous. F16 and BF16 rows are
 * read into an f32 row and folded by the f32 code.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "reduce.h"

/* Column mode: when the reduced axes are outer to a kept axis of input
 * stride 1 (a sum over the batch axis of [N, C]), one pass over the
 * reduced elements updates a panel of up to COL_PANEL neighbouring
 * outputs, reading each input row contiguously; the loop over the panel
 * is the vector loop. Each output still folds its elements in order. */
int red_col_op(uint32_t op) {
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

int64_t red_col_panels(const red_plan *p, int64_t width) {
  return (p->kext[p->col] + width - 1) / width;
}

void red_col_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t w = j->per_task; /* the panel width */
  int64_t panels = red_col_panels(p, w);
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
  /* F16 and BF16 fold as f32, each row read into `row` first. */
  int f32 = p->dtype != TYTO_PLUGIN_DTYPE_F64;
  float row[COL_PANEL];
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
    if (p->dtype == TYTO_PLUGIN_DTYPE_F32) {
      col_row_f32(p->op, (const float *)j->x + in + off, nb, acc, mm.f, fl.f);
    } else if (p->dtype == TYTO_PLUGIN_DTYPE_F64) {
      col_row_f64(p->op, (const double *)j->x + in + off, nb, acc, mm.d, fl.d);
    } else {
      p->widen((size_t)nb, row, (const uint16_t *)j->x + in + off);
      col_row_f32(p->op, row, nb, acc, mm.f, fl.f);
    }
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
    red_store(p, j->y, out + k * p->kout[p->col], v);
  }
}

/* Panels [t * chunks, (t + 1) * chunks) of column mode. */
void red_col_tasks(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t units = p->nout / p->kext[p->col] * red_col_panels(p, j->per_task);
  int64_t u1 = ((int64_t)t + 1) * j->chunks;
  for (int64_t u = (int64_t)t * j->chunks; u < u1 && u < units; u++)
    red_col_task(ctx, (size_t)u);
}
