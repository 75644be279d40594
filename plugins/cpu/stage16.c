/*
 * Staging 16-bit tensors: see stage16.h.
 */
#include "config.h"

#include <string.h>

#include "../common/half.h"
#include "stage16.h"

/* Below this many elements a move runs on the calling thread. */
#define STAGE_PAR_MIN ((int64_t)1 << 15)

enum { MV_BITS, MV_BF16_F32, MV_F16_F32, MV_F32_BF16, MV_F32_F16 };

void cpu_stage_init(cpu_stage *s, const tyto_plugin_layout *l, uint32_t dtype) {
  memset(s, 0, sizeof *s);
  s->src = *l;
  s->dense = *l;
  s->dense.dtype = dtype;
  s->dense.offset = 0;
  int64_t n = 1;
  int empty = 0;
  for (uint32_t i = l->rank; i-- > 0;) {
    empty |= l->shape[i] == 0;
    if (l->shape[i] > 1 && l->strides[i] == 0) {
      s->dense.strides[i] = 0;
    } else {
      s->dense.strides[i] = n;
      n *= l->shape[i];
    }
  }
  s->elems = empty ? 0 : n;
}

uint64_t cpu_stage_bytes(const cpu_stage *s) {
  return (uint64_t)s->elems * cpu_dtype_size(s->dense.dtype);
}

void cpu_stage_reach(const cpu_stage *s, cpu_reach *r) {
  memset(r, 0, sizeof *r);
  r->l = s->dense;
  r->empty = s->elems == 0;
  r->lo_bytes = 0;
  r->end_bytes = (int64_t)cpu_stage_bytes(s);
}

/* One row of n elements: from s (step ss elements of its type) to d (step
 * ds). The unit-step loops are the common case and vectorise. */
static void move_row(int kind, int64_t n, const unsigned char *s, int64_t ss,
                     unsigned char *d, int64_t ds) {
  const uint16_t *s16 = (const uint16_t *)(const void *)s;
  const float *s32 = (const float *)(const void *)s;
  uint16_t *d16 = (uint16_t *)(void *)d;
  float *d32 = (float *)(void *)d;
  int unit = ss == 1 && ds == 1;
  switch (kind) {
  case MV_BITS:
    if (unit)
      memcpy(d16, s16, (size_t)n * 2);
    else
      for (int64_t i = 0; i < n; i++)
        d16[i * ds] = s16[i * ss];
    break;
  case MV_BF16_F32:
    if (unit)
      for (int64_t i = 0; i < n; i++)
        d32[i] = tpc_bf16_to_f32(s16[i]);
    else
      for (int64_t i = 0; i < n; i++)
        d32[i * ds] = tpc_bf16_to_f32(s16[i * ss]);
    break;
  case MV_F16_F32:
    if (unit)
      for (int64_t i = 0; i < n; i++)
        d32[i] = tpc_f16_to_f32(s16[i]);
    else
      for (int64_t i = 0; i < n; i++)
        d32[i * ds] = tpc_f16_to_f32(s16[i * ss]);
    break;
  case MV_F32_BF16:
    if (unit)
      for (int64_t i = 0; i < n; i++)
        d16[i] = tpc_f32_to_bf16(s32[i]);
    else
      for (int64_t i = 0; i < n; i++)
        d16[i * ds] = tpc_f32_to_bf16(s32[i * ss]);
    break;
  default: /* MV_F32_F16 */
    if (unit)
      for (int64_t i = 0; i < n; i++)
        d16[i] = tpc_f32_to_f16(s32[i]);
    else
      for (int64_t i = 0; i < n; i++)
        d16[i * ds] = tpc_f32_to_f16(s32[i * ss]);
    break;
  }
}

/* A move over the stage's elements: the axes the source steps through
 * (extent 1 where it broadcasts), the last one as rows' inner loop. */
typedef struct stage_move {
  int kind;
  uint32_t rank;
  int64_t ext[TYTO_PLUGIN_MAX_RANK];
  int64_t fs[TYTO_PLUGIN_MAX_RANK], ts[TYTO_PLUGIN_MAX_RANK]; /* elements */
  const unsigned char *from;
  unsigned char *to;
  size_t fe, te; /* element sizes */
  int64_t rows, inner, tasks;
} stage_move;

static void move_rows(const stage_move *m, int64_t lo, int64_t hi) {
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t rest = lo, fo = 0, to = 0;
  uint32_t outer = m->rank ? m->rank - 1 : 0;
  for (uint32_t ax = outer; ax-- > 0;) {
    idx[ax] = rest % m->ext[ax];
    rest /= m->ext[ax];
    fo += idx[ax] * m->fs[ax];
    to += idx[ax] * m->ts[ax];
  }
  int64_t fi = m->rank ? m->fs[m->rank - 1] : 1,
          ti = m->rank ? m->ts[m->rank - 1] : 1;
  for (int64_t r = lo; r < hi; r++) {
    move_row(m->kind, m->inner, m->from + fo * (int64_t)m->fe, fi,
             m->to + to * (int64_t)m->te, ti);
    /* Next row: odometer over the outer axes. */
    for (uint32_t ax = outer; ax-- > 0;) {
      fo += m->fs[ax];
      to += m->ts[ax];
      if (++idx[ax] < m->ext[ax])
        break;
      fo -= idx[ax] * m->fs[ax];
      to -= idx[ax] * m->ts[ax];
      idx[ax] = 0;
    }
  }
}

static void move_task(void *ctx, size_t i) {
  const stage_move *m = ctx;
  move_rows(m, m->rows * (int64_t)i / m->tasks,
            m->rows * ((int64_t)i + 1) / m->tasks);
}

static int move_kind(uint32_t from, uint32_t to) {
  if (from == to)
    return MV_BITS;
  if (to == TYTO_PLUGIN_DTYPE_F32)
    return from == TYTO_PLUGIN_DTYPE_BF16 ? MV_BF16_F32 : MV_F16_F32;
  return to == TYTO_PLUGIN_DTYPE_BF16 ? MV_F32_BF16 : MV_F32_F16;
}

/* in: bound -> copy; else copy -> bound. */
static void stage_run(const cpu_stage *s, int in, const unsigned char *from,
                      unsigned char *to, cpu_pool *pool) {
  if (s->elems == 0)
    return;
  const tyto_plugin_layout *fl = in ? &s->src : &s->dense,
                           *tl = in ? &s->dense : &s->src;
  stage_move m;
  memset(&m, 0, sizeof m);
  m.kind = move_kind(fl->dtype, tl->dtype);
  m.rank = s->src.rank;
  m.fe = cpu_dtype_size(fl->dtype);
  m.te = cpu_dtype_size(tl->dtype);
  m.from = from + fl->offset * (int64_t)m.fe;
  m.to = to + tl->offset * (int64_t)m.te;
  m.rows = 1;
  for (uint32_t ax = 0; ax < m.rank; ax++) {
    /* A broadcast axis is one element of the copy. */
    m.ext[ax] = s->dense.strides[ax] == 0 ? 1 : s->src.shape[ax];
    m.fs[ax] = fl->strides[ax];
    m.ts[ax] = tl->strides[ax];
    if (ax + 1 < m.rank)
      m.rows *= m.ext[ax];
  }
  m.inner = m.rank ? m.ext[m.rank - 1] : 1;
  unsigned threads = pool ? cpu_pool_size(pool) : 1;
  m.tasks = 1;
  if (threads > 1 && s->elems >= STAGE_PAR_MIN && m.rows > 1)
    m.tasks = m.rows < 4 * (int64_t)threads ? m.rows : 4 * (int64_t)threads;
  if (m.tasks > 1)
    cpu_pool_for(pool, (size_t)m.tasks, move_task, &m);
  else
    move_rows(&m, 0, m.rows);
}

void cpu_stage_in(const cpu_stage *s, const unsigned char *bound, void *copy,
                  cpu_pool *pool) {
  stage_run(s, 1, bound, copy, pool);
}

void cpu_stage_out(const cpu_stage *s, const void *copy, unsigned char *bound,
                   cpu_pool *pool) {
  stage_run(s, 0, copy, bound, pool);
}

void cpu_stage_zero(const tyto_plugin_layout *l, unsigned char *bound) {
  cpu_stage s;
  cpu_stage_init(&s, l, l->dtype);
  if (s.elems == 0)
    return;
  /* A move whose source is one zero, at stride 0 on every axis. */
  static const uint16_t zero = 0;
  stage_move m;
  memset(&m, 0, sizeof m);
  m.kind = MV_BITS;
  m.rank = l->rank;
  m.fe = m.te = 2;
  m.from = (const unsigned char *)&zero;
  m.to = bound + l->offset * 2;
  m.rows = 1;
  for (uint32_t ax = 0; ax < m.rank; ax++) {
    m.ext[ax] = s.dense.strides[ax] == 0 ? 1 : l->shape[ax];
    m.ts[ax] = l->strides[ax];
    if (ax + 1 < m.rank)
      m.rows *= m.ext[ax];
  }
  m.inner = m.rank ? m.ext[m.rank - 1] : 1;
  move_rows(&m, 0, m.rows);
}
