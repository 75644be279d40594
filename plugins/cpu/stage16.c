/*
 * Staging 16-bit tensors: see stage16.h.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

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

/* ------------------------------------------------------------------------ */
/* Conversions                                                               */
/* ------------------------------------------------------------------------ */

/* The conversions of ../common/half.h written without branches, so that
 * their loops vectorise (those of half.h run at 1.5 (f16 -> f32) and 4.5
 * ns (f32 -> f16) an element here, as long as a small GEMM), and compiled
 * at -O3 without trapping math (the build's -O2 leaves them scalar; see
 * eltwise.c) for SSE2, AVX2 and AVX-512, the widest picked at run time.
 * Bit for bit half.h's results: checked on all 2^16 f16 and all 2^32 f32
 * inputs when written; tests/cpu/test_matmul16.c passes every 16-bit
 * value through them. Integer arithmetic, but for one product of normal
 * floats into a normal float, which FTZ and DAZ leave alone. */
#pragma GCC push_options
#pragma GCC optimize("O3", "-fno-trapping-math")

static inline __attribute__((always_inline)) uint32_t
f16_to_f32_bits(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t normal = ((e + 112u) << 23) | (m << 13);
  uint32_t special = 0x7f800000u | (m << 13); /* infinity, NaN */
  /* A subnormal (or zero) is m 2^-24: m and the product are exact normal
   * floats. */
  float sub = (float)(int32_t)m * 0x1p-24f;
  uint32_t sub_bits;
  memcpy(&sub_bits, &sub, 4);
  return sign | (e == 0 ? sub_bits : e == 31 ? special : normal);
}

static inline __attribute__((always_inline)) uint32_t
f32_bits_to_f16(uint32_t u) {
  uint32_t ax = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
  uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu); /* quiet, top kept */
  /* Normal: ties to even by adding just under half an ulp plus the kept
   * last bit; a carry bumps the exponent, as it should. */
  uint32_t normal = ((ax + 0xfffu + ((ax >> 13) & 1u)) >> 13) - (112u << 10);
  /* Below 2^-14 an f16 subnormal: the 24-bit significand shifted right
   * by 126 - e, rounded the same way (a shift past 24 bits gives 0). */
  int32_t sh = 126 - (int32_t)(ax >> 23);
  sh = sh < 1 ? 1 : sh > 25 ? 25 : sh;
  uint32_t sft = (uint32_t)sh, mant = (ax & 0x7fffffu) | 0x800000u;
  uint32_t sub =
      (mant + ((1u << (sft - 1u)) - 1u) + ((mant >> sft) & 1u)) >> sft;
  return sign | (ax > 0x7f800000u    ? nan
                 : ax >= 0x477ff000u ? 0x7c00u /* 65520 and up: infinity */
                 : ax < 0x38800000u  ? sub
                                     : normal);
}

static inline __attribute__((always_inline)) uint32_t
f32_bits_to_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, payload's top kept */
    return (u >> 16) | 0x0040u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* Unit-step loops: n elements from s to d. */
#define STAGE_LOOPS(SUF)                                                       \
  static void bf16_f32_##SUF(int64_t n, const void *s, void *d) {              \
    const uint16_t *a = s;                                                     \
    uint32_t *b = d;                                                           \
    for (int64_t i = 0; i < n; i++)                                            \
      b[i] = (uint32_t)a[i] << 16;                                             \
  }                                                                            \
  static void f16_f32_##SUF(int64_t n, const void *s, void *d) {               \
    const uint16_t *a = s;                                                     \
    uint32_t *b = d;                                                           \
    for (int64_t i = 0; i < n; i++)                                            \
      b[i] = f16_to_f32_bits(a[i]);                                            \
  }                                                                            \
  static void f32_bf16_##SUF(int64_t n, const void *s, void *d) {              \
    const uint32_t *a = s;                                                     \
    uint16_t *b = d;                                                           \
    for (int64_t i = 0; i < n; i++)                                            \
      b[i] = (uint16_t)f32_bits_to_bf16(a[i]);                                 \
  }                                                                            \
  static void f32_f16_##SUF(int64_t n, const void *s, void *d) {               \
    const uint32_t *a = s;                                                     \
    uint16_t *b = d;                                                           \
    for (int64_t i = 0; i < n; i++)                                            \
      b[i] = (uint16_t)f32_bits_to_f16(a[i]);                                  \
  }                                                                            \
  static const stage_loop loops_##SUF[5] = {                                   \
      NULL, bf16_f32_##SUF, f16_f32_##SUF, f32_bf16_##SUF, f32_f16_##SUF};

typedef void (*stage_loop)(int64_t n, const void *s, void *d);

STAGE_LOOPS(sse2)
#if defined(__x86_64__) && defined(__GNUC__)
#define STAGE_X86 1
#pragma GCC push_options
#pragma GCC target("avx2")
STAGE_LOOPS(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2", "prefer-vector-width=512")
STAGE_LOOPS(avx512)
#pragma GCC pop_options
#endif

/* One row of n elements: from s (step ss elements of its type) to d (step
 * ds); unit steps through the widest loops. */
static void move_row(const stage_loop *loops, int kind, int64_t n,
                     const unsigned char *s, int64_t ss, unsigned char *d,
                     int64_t ds) {
  const uint16_t *s16 = (const uint16_t *)(const void *)s;
  const uint32_t *s32 = (const uint32_t *)(const void *)s;
  uint16_t *d16 = (uint16_t *)(void *)d;
  uint32_t *d32 = (uint32_t *)(void *)d;
  if (ss == 1 && ds == 1) {
    if (kind == MV_BITS)
      memcpy(d16, s16, (size_t)n * 2);
    else
      loops[kind](n, s, d);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    switch (kind) {
    case MV_BITS: d16[i * ds] = s16[i * ss]; break;
    case MV_BF16_F32: d32[i * ds] = (uint32_t)s16[i * ss] << 16; break;
    case MV_F16_F32: d32[i * ds] = f16_to_f32_bits(s16[i * ss]); break;
    case MV_F32_BF16:
      d16[i * ds] = (uint16_t)f32_bits_to_bf16(s32[i * ss]);
      break;
    default: d16[i * ds] = (uint16_t)f32_bits_to_f16(s32[i * ss]); break;
    }
}

#pragma GCC pop_options

/* The widest loops this CPU runs, chosen once. */
static const stage_loop *stage_loops = loops_sse2;
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;

static void stage_pick_isa(void) {
#ifdef STAGE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    stage_loops = loops_avx512;
  else if (__builtin_cpu_supports("avx2"))
    stage_loops = loops_avx2;
#endif
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
    move_row(stage_loops, m->kind, m->inner, m->from + fo * (int64_t)m->fe, fi,
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
  pthread_once(&stage_once, stage_pick_isa);
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
