/*
 * The reductions family's internals, shared by its files: reduce.c (the
 * plan, the checks and how the work is cut), reduce_fold.c (folding runs
 * of elements into states, and softmax rows) and reduce_col.c (the column
 * mode). See reduce.c for the design.
 */
#ifndef TYTO_PLUGIN_CPU_REDUCE_H
#define TYTO_PLUGIN_CPU_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

typedef struct red_plan {
  cpu_op base;
  uint32_t op, dtype;
  uint32_t odtype;     /* the output's: dtype, or I32/I64 for ARG* (ABI 1.6) */
  cpu_cvt_fn widen;    /* F16, BF16: the input to f32 */
  cpu_cvt_fn from_f64; /* F16, BF16: a result (a double) rounded once */
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

typedef struct red_job {
  const red_plan *p;
  const unsigned char *x; /* input, offset applied */
  unsigned char *y;       /* output, offset applied */
  int64_t per_task; /* outputs per task (block mode); panel width (column) */
  int64_t chunks;   /* chunks per output (chunk mode); panels per task */
  rstate *partial;  /* nout * chunks states (chunk mode) */
} red_job;

/* reduce_fold.c */
rstate red_state_init(uint32_t op);
/* Merges b, which covers later elements than a, into a. */
void red_state_merge(uint32_t op, rstate *a, const rstate *b);
double red_state_final(uint32_t op, const rstate *st, int64_t count);
/* Folds reduced elements [r0, r1) of the output element whose input
 * position is x (bytes, offsets applied) into *st, run by run. */
void red_segment(const red_plan *p, const unsigned char *x, int64_t r0,
                 int64_t r1, rstate *st);
/* Element offsets (input, output) of output element o. */
void red_kept_offsets(const red_plan *p, int64_t o, int64_t *in, int64_t *out);
/* Writes result v, rounded to the output's dtype, at element off of y. */
void red_store(const red_plan *p, unsigned char *y, int64_t off, double v);
/* Softmax (or log-softmax) of the row at x into the row at y. */
void red_softmax_row(const red_plan *p, const unsigned char *x,
                     unsigned char *y);
size_t red_elem_size(const red_plan *p);

/* reduce_int.c: SUM, MAX_REDUCE, MIN_REDUCE of I32 and I64, for a
 * descriptor reduce.c has checked. */
tyto_plugin_error *red_int_prepare(const tyto_plugin_host *h,
                                   const cpu_desc *desc, cpu_op **out);

/* reduce_col.c */
/* Whether the op has a column mode. */
int red_col_op(uint32_t op);
/* Panels of column mode (see reduce_col.c): units of width `width`. */
int64_t red_col_panels(const red_plan *p, int64_t width);
/* Pool tasks: one panel; panels [t * chunks, (t + 1) * chunks). */
void red_col_task(void *ctx, size_t t);
void red_col_tasks(void *ctx, size_t t);
/* The widest panel. */
#define COL_PANEL 1024

#endif
