/*
 * Elementwise unary, binary and ternary ops (NEG .. FMA) and CAST on the
 * CPU.
 *
 * Each op has one contiguous inner loop per dtype, compiled three times
 * (SSE2, AVX2+FMA, AVX-512) from eltwise_kern.h; the widest the CPU runs is
 * chosen once. Everything else is layout handling, done here once per op
 * (and shared with fused.c through ops.h: cpu_elt_space):
 *
 *  - at prepare, size-1 axes are dropped and adjacent axes merged wherever
 *    every operand steps through them as one, so a contiguous (or
 *    scalar-broadcast) op becomes one long row;
 *  - at run, the rows are cut into tasks of about ELT_CHUNK_BYTES of output
 *    and spread over the worker pool (inline below a size threshold);
 *  - within a row, operands with unit stride are passed to the loop as they
 *    are; a broadcast (stride 0) operand is splatted, and any other stride
 *    is gathered, into a small block buffer; a strided output is computed
 *    into a block buffer and scattered.
 *
 * F16 and BF16 (storage formats) take the same f32 loops: each operand
 * block is read into an f32 block (converted from memory, or gathered and
 * then converted), the f32 loop runs, and its block is rounded to the
 * dtype on the way out (convert.h). CAST is the same walk with only the
 * conversion in the middle.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "eltwise_ops.h"
#include "ops.h"

/* The inner loops, at -O3: the build's -O2 uses GCC's "very cheap"
 * vectoriser cost model, which leaves loops with a remainder scalar. Without
 * trapping math floor/ceil/round and the selects vectorise. (GCC ignores
 * -fno-math-errno in a pragma; the plugin is built with it on the command
 * line, so SQRT/RSQRT vectorise too.) */
#pragma GCC push_options
#pragma GCC optimize("O3", "-fno-trapping-math")

#define ELT_SUF sse2
#include "eltwise_kern.h"
#undef ELT_SUF

#if defined(__x86_64__) && defined(__GNUC__)
#define ELT_X86 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ELT_SUF avx2
#include "eltwise_kern.h"
#undef ELT_SUF
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx2,fma",                       \
                   "prefer-vector-width=512")
#define ELT_SUF avx512
#include "eltwise_kern.h"
#undef ELT_SUF
#pragma GCC pop_options
#endif

#pragma GCC pop_options

/* Output bytes per task: a few L1-sized blocks, enough to amortise the
 * pool's hand-out; libm-bound ops use smaller tasks for balance. */
#define ELT_CHUNK_BYTES (32 << 10)
#define ELT_CHUNK_ELEMS_SLOW 1024
/* Below these element counts an op runs on the calling thread alone:
 * waking the pool costs more than it saves. */
#define ELT_PAR_MIN_FAST 65536
#define ELT_PAR_MIN_SLOW 4096
/* Elements per gather/scatter block within a row. */
#define ELT_BLOCK CPU_ELT_BLOCK

/* The widest variant this CPU runs, chosen once (elt_once). */
static const elt_kern (*elt_table)[ELT_NOPS] = tab_sse2_all;
static pthread_once_t elt_once = PTHREAD_ONCE_INIT;

static void elt_pick_isa(void) {
#ifdef ELT_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    elt_table = tab_avx512_all;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    elt_table = tab_avx2_all;
  }
#endif
}

typedef struct elt_op {
  cpu_op base;
  uint32_t op, n_in;
  elt_kern kern;            /* the f32 loop for F16 and BF16 */
  cpu_cvt_fn widen, narrow; /* F16 and BF16: to and from f32 */
  double attr[1];
  int has_attr;
  cpu_elt_space sp; /* inputs, then the output at n_in */
} elt_op;

int cpu_eltwise_arity(uint32_t op) {
  if (op >= TYTO_PLUGIN_OP_NEG && op <= TYTO_PLUGIN_OP_ROUND)
    return 1;
  if (op >= TYTO_PLUGIN_OP_ADD && op <= TYTO_PLUGIN_OP_GE)
    return 2;
  if (op == TYTO_PLUGIN_OP_WHERE || op == TYTO_PLUGIN_OP_FMA)
    return 3;
  return 0;
}

int cpu_eltwise_slow(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_NEG:
  case TYTO_PLUGIN_OP_ABS:
  case TYTO_PLUGIN_OP_SIGN:
  case TYTO_PLUGIN_OP_SQRT:
  case TYTO_PLUGIN_OP_RSQRT:
  case TYTO_PLUGIN_OP_SQUARE:
  case TYTO_PLUGIN_OP_RECIPROCAL:
  case TYTO_PLUGIN_OP_RELU:
  case TYTO_PLUGIN_OP_LEAKY_RELU:
  case TYTO_PLUGIN_OP_FLOOR:
  case TYTO_PLUGIN_OP_CEIL:
  case TYTO_PLUGIN_OP_ADD:
  case TYTO_PLUGIN_OP_SUB:
  case TYTO_PLUGIN_OP_MUL:
  case TYTO_PLUGIN_OP_DIV:
  case TYTO_PLUGIN_OP_MAX:
  case TYTO_PLUGIN_OP_MIN:
  case TYTO_PLUGIN_OP_EQ:
  case TYTO_PLUGIN_OP_NE:
  case TYTO_PLUGIN_OP_LT:
  case TYTO_PLUGIN_OP_LE:
  case TYTO_PLUGIN_OP_GT:
  case TYTO_PLUGIN_OP_GE:
  case TYTO_PLUGIN_OP_WHERE:
  case TYTO_PLUGIN_OP_FMA: return 0;
  default: return 1;
  }
}

cpu_elt_kern cpu_eltwise_kern(uint32_t op, uint32_t dtype) {
  if (!cpu_eltwise_arity(op) ||
      (dtype != TYTO_PLUGIN_DTYPE_F32 && dtype != TYTO_PLUGIN_DTYPE_F64))
    return NULL;
  pthread_once(&elt_once, elt_pick_isa);
  return elt_table[dtype == TYTO_PLUGIN_DTYPE_F64][op];
}

/* ------------------------------------------------------------------------ */
/* The iteration space                                                       */
/* ------------------------------------------------------------------------ */

typedef struct space_run {
  const cpu_elt_space *sp;
  unsigned char *base[CPU_ELT_MAX_OPERANDS]; /* offsets applied */
  cpu_elt_segment_fn fn;
  const void *ctx;
  atomic_int failed; /* a task found no scratch */
} space_run;

/* Rows [row0, row0 + nrows), elements [col0, col0 + ncols) of each. */
static void run_rows(space_run *c, int64_t row0, int64_t nrows, int64_t col0,
                     int64_t ncols) {
  const cpu_elt_space *sp = c->sp;
  _Alignas(64) unsigned char stack[CPU_ELT_STACK_SCRATCH];
  unsigned char *scratch = stack;
  if (sp->scratch_bytes > sizeof stack) {
    scratch = aligned_alloc(64, (sp->scratch_bytes + 63) & ~(size_t)63);
    if (!scratch) {
      atomic_store(&c->failed, 1);
      return;
    }
  }
  const uint32_t outer = sp->rank - 1;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t rem = row0;
  for (uint32_t a = outer; a-- > 0;) {
    idx[a] = rem % sp->shape[a];
    rem /= sp->shape[a];
  }
  for (int64_t r = 0; r < nrows; r++) {
    int64_t off[CPU_ELT_MAX_OPERANDS];
    for (uint32_t j = 0; j < sp->n; j++) {
      off[j] = col0 * sp->strides[j][outer];
      for (uint32_t a = 0; a < outer; a++)
        off[j] += idx[a] * sp->strides[j][a];
    }
    c->fn(c->ctx, c->base, off, ncols, scratch);
    for (uint32_t a = outer; a-- > 0;) {
      if (++idx[a] < sp->shape[a])
        break;
      idx[a] = 0;
    }
  }
  if (scratch != stack)
    free(scratch);
}

static void run_task(void *ctx, size_t i) {
  space_run *c = ctx;
  const cpu_elt_space *sp = c->sp;
  int64_t t = (int64_t)i;
  if (sp->segs_per_row > 1) {
    int64_t row = t / sp->segs_per_row, col = t % sp->segs_per_row * sp->seg;
    int64_t n = sp->inner - col < sp->seg ? sp->inner - col : sp->seg;
    run_rows(c, row, 1, col, n);
  } else {
    int64_t row = t * sp->rows_per_task;
    int64_t n =
        sp->rows - row < sp->rows_per_task ? sp->rows - row : sp->rows_per_task;
    run_rows(c, row, n, 0, sp->inner);
  }
}

int cpu_elt_space_run(const cpu_elt_space *sp, unsigned char *const *args,
                      cpu_pool *pool, cpu_elt_segment_fn fn, const void *ctx) {
  if (sp->numel == 0)
    return 0;
  space_run c;
  memset(&c, 0, sizeof c);
  c.sp = sp;
  c.fn = fn;
  c.ctx = ctx;
  atomic_init(&c.failed, 0);
  for (uint32_t j = 0; j < sp->n; j++)
    c.base[j] = args[j] + sp->offset[j] * (int64_t)sp->esz[j];
  if (sp->tasks <= 1 || sp->numel < sp->par_min || cpu_pool_size(pool) <= 1)
    run_rows(&c, 0, sp->rows, 0, sp->inner);
  else
    cpu_pool_for(pool, (size_t)sp->tasks, run_task, &c);
  return atomic_load(&c.failed) ? -1 : 0;
}

/* Drops size-1 axes and merges axis a into a + 1 wherever every operand's
 * stride on a is its stride on a + 1 times that axis' extent. */
static void collapse(cpu_elt_space *sp, const tyto_plugin_layout *const *ls) {
  const tyto_plugin_layout *out = ls[sp->n - 1];
  uint32_t r = 0;
  for (uint32_t a = 0; a < out->rank; a++) {
    if (out->shape[a] == 1)
      continue;
    int merge = r > 0;
    for (uint32_t j = 0; j < sp->n && merge; j++) {
      int64_t step;
      if (__builtin_mul_overflow(ls[j]->strides[a], out->shape[a], &step) ||
          sp->strides[j][r - 1] != step)
        merge = 0;
    }
    if (merge) {
      sp->shape[r - 1] *= out->shape[a];
      for (uint32_t j = 0; j < sp->n; j++)
        sp->strides[j][r - 1] = ls[j]->strides[a];
    } else {
      sp->shape[r] = out->shape[a];
      for (uint32_t j = 0; j < sp->n; j++)
        sp->strides[j][r] = ls[j]->strides[a];
      r++;
    }
  }
  if (r == 0) { /* one element (rank 0 or all extents 1) */
    sp->shape[0] = 1;
    for (uint32_t j = 0; j < sp->n; j++)
      sp->strides[j][0] = 1;
    r = 1;
  }
  sp->rank = r;
}

static void plan_tasks(cpu_elt_space *sp, int slow) {
  sp->inner = sp->shape[sp->rank - 1];
  sp->rows = sp->inner ? sp->numel / sp->inner : 0;
  int64_t chunk =
      slow ? ELT_CHUNK_ELEMS_SLOW : (int64_t)(ELT_CHUNK_BYTES / sp->esize);
  if (sp->inner >= 2 * chunk) {
    sp->seg = chunk;
    sp->segs_per_row = (sp->inner + chunk - 1) / chunk;
    sp->rows_per_task = 1;
    sp->tasks = sp->rows * sp->segs_per_row;
  } else {
    sp->seg = sp->inner;
    sp->segs_per_row = 1;
    sp->rows_per_task = chunk / (sp->inner ? sp->inner : 1);
    if (sp->rows_per_task < 1)
      sp->rows_per_task = 1;
    sp->tasks = (sp->rows + sp->rows_per_task - 1) / sp->rows_per_task;
  }
}

void cpu_elt_space_init(cpu_elt_space *sp, const cpu_desc *desc, int slow) {
  memset(sp, 0, sizeof *sp);
  const tyto_plugin_layout *ls[CPU_ELT_MAX_OPERANDS];
  for (uint32_t j = 0; j < desc->n_in; j++)
    ls[sp->n++] = &desc->in[j].l;
  for (uint32_t j = 0; j < desc->n_out; j++)
    ls[sp->n++] = &desc->out[j].l;
  for (uint32_t j = 0; j < sp->n; j++) {
    sp->offset[j] = ls[j]->offset;
    sp->esz[j] = cpu_dtype_size(ls[j]->dtype);
  }
  sp->esize = cpu_dtype_size(desc->out[0].l.dtype);
  sp->par_min = slow ? ELT_PAR_MIN_SLOW : ELT_PAR_MIN_FAST;
  sp->numel = desc->out[0].empty ? 0 : cpu_numel(&desc->out[0].l);
  if (sp->numel > 0) {
    collapse(sp, ls);
    plan_tasks(sp, slow);
  }
}

tyto_plugin_error *cpu_eltwise_check_operands(const tyto_plugin_host *h,
                                              const cpu_desc *desc,
                                              const char *name, int one_dtype) {
  const tyto_plugin_layout *o = &desc->out[0].l;
  char s1[160], s2[160];
  for (uint32_t j = 0; j < desc->n_in + desc->n_out; j++) {
    int is_in = j < desc->n_in;
    uint32_t k = is_in ? j : j - desc->n_in;
    if (!is_in && k == 0)
      continue;
    const tyto_plugin_layout *l = is_in ? &desc->in[k].l : &desc->out[k].l;
    const char *which = is_in ? "input" : "output";
    const char *ref = desc->n_out > 1 ? "output 0" : "the output";
    if (one_dtype && l->dtype != o->dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: %s %u is %s but %s is %s (all operands must "
                          "have one dtype)",
                          name, which, k, cpu_dtype_name(l->dtype), ref,
                          cpu_dtype_name(o->dtype));
    if (l->rank != o->rank ||
        memcmp(l->shape, o->shape, o->rank * sizeof o->shape[0]) != 0)
      return h->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: %s %u has shape %s but %s has shape %s (%s)", name, which, k,
          cpu_shape_str(l, s1, sizeof s1), ref, cpu_shape_str(o, s2, sizeof s2),
          is_in ? "inputs must arrive broadcast to the output's shape"
                : "all outputs must have one shape");
  }
  for (uint32_t k = 0; k < desc->n_out; k++) {
    const tyto_plugin_layout *l = &desc->out[k].l;
    if (desc->out[k].empty)
      continue;
    for (uint32_t a = 0; a < l->rank; a++)
      if (l->strides[a] == 0 && l->shape[a] > 1) {
        char which[32] = "the output";
        if (desc->n_out > 1)
          snprintf(which, sizeof which, "output %u", k);
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "%s: %s has stride 0 on axis %u of extent %lld; "
                            "each output element must have its own place",
                            name, which, a, (long long)l->shape[a]);
      }
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Running one op                                                            */
/* ------------------------------------------------------------------------ */

/* Computes `n` elements of one row in blocks, staging non-unit-stride
 * operands in scratch (one block per operand). Elements are moved as bits
 * of their size (f32 and i32, f64 and i64 alike). */
static void run_segment(const void *ctx, unsigned char *const *base,
                        const int64_t *off, int64_t n, unsigned char *scratch) {
  const elt_op *op = ctx;
  const uint32_t r = op->sp.rank - 1, no = op->n_in;
  const size_t e = op->sp.esize;
  const double *p = op->has_attr ? op->attr : NULL;
  unsigned char *buf[4];
  int64_t st[4];
  for (uint32_t j = 0; j <= no; j++) {
    buf[j] = scratch + j * ELT_BLOCK * e;
    st[j] = op->sp.strides[j][r];
  }
  /* Broadcast operands are splatted once per segment. */
  for (uint32_t j = 0; j < no; j++) {
    if (st[j] != 0)
      continue;
    int64_t m = n < ELT_BLOCK ? n : ELT_BLOCK;
    if (e == 4) {
      uint32_t v = ((const uint32_t *)base[j])[off[j]];
      for (int64_t i = 0; i < m; i++)
        ((uint32_t *)buf[j])[i] = v;
    } else {
      uint64_t v = ((const uint64_t *)base[j])[off[j]];
      for (int64_t i = 0; i < m; i++)
        ((uint64_t *)buf[j])[i] = v;
    }
  }
  for (int64_t done = 0; done < n; done += ELT_BLOCK) {
    int64_t m = n - done < ELT_BLOCK ? n - done : ELT_BLOCK;
    const void *src[3] = {NULL, NULL, NULL};
    for (uint32_t j = 0; j < no; j++) {
      int64_t s = st[j], at = off[j] + done * s;
      if (s == 1) {
        src[j] = base[j] + at * (int64_t)e;
      } else if (s == 0) {
        src[j] = buf[j];
      } else if (e == 4) {
        const uint32_t *in = (const uint32_t *)base[j] + at;
        uint32_t *t = (uint32_t *)buf[j];
        for (int64_t i = 0; i < m; i++)
          t[i] = in[i * s];
        src[j] = t;
      } else {
        const uint64_t *in = (const uint64_t *)base[j] + at;
        uint64_t *t = (uint64_t *)buf[j];
        for (int64_t i = 0; i < m; i++)
          t[i] = in[i * s];
        src[j] = t;
      }
    }
    int64_t so = st[no], at = off[no] + done * so;
    if (so == 1) {
      op->kern((size_t)m, base[no] + at * (int64_t)e, src[0], src[1], src[2],
               p);
    } else {
      op->kern((size_t)m, buf[no], src[0], src[1], src[2], p);
      if (e == 4) {
        const uint32_t *t = (const uint32_t *)buf[no];
        uint32_t *o = (uint32_t *)base[no] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = t[i];
      } else {
        const uint64_t *t = (const uint64_t *)buf[no];
        uint64_t *o = (uint64_t *)base[no] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = t[i];
      }
    }
  }
}

/* run_segment for F16 and BF16: every input is converted into an f32
 * block (broadcast ones once per segment, strided ones gathered first),
 * the f32 loop writes an f32 block, and that is rounded to the dtype as it
 * is stored (scattered when strided). Scratch: an f32 block per operand,
 * then a 16-bit block for gathers and scatters. */
static void run_segment_half(const void *ctx, unsigned char *const *base,
                             const int64_t *off, int64_t n,
                             unsigned char *scratch) {
  const elt_op *op = ctx;
  const uint32_t r = op->sp.rank - 1, no = op->n_in;
  const double *p = op->has_attr ? op->attr : NULL;
  float *blk[4];
  uint16_t *raw = (uint16_t *)(void *)(scratch + (no + 1) * ELT_BLOCK * 4);
  int64_t st[4];
  for (uint32_t j = 0; j <= no; j++) {
    blk[j] = (float *)(void *)(scratch + j * ELT_BLOCK * 4);
    st[j] = op->sp.strides[j][r];
  }
  for (uint32_t j = 0; j < no; j++) {
    if (st[j] != 0)
      continue;
    float v;
    op->widen(1, &v, (const uint16_t *)(const void *)base[j] + off[j]);
    int64_t m = n < ELT_BLOCK ? n : ELT_BLOCK;
    for (int64_t i = 0; i < m; i++)
      blk[j][i] = v;
  }
  for (int64_t done = 0; done < n; done += ELT_BLOCK) {
    int64_t m = n - done < ELT_BLOCK ? n - done : ELT_BLOCK;
    for (uint32_t j = 0; j < no; j++) {
      const uint16_t *in =
          (const uint16_t *)(const void *)base[j] + off[j] + done * st[j];
      if (st[j] == 1) {
        op->widen((size_t)m, blk[j], in);
      } else if (st[j] != 0) {
        cpu_gather(2, (size_t)m, raw, in, st[j]);
        op->widen((size_t)m, blk[j], raw);
      }
    }
    op->kern((size_t)m, blk[no], blk[0], no > 1 ? blk[1] : NULL,
             no > 2 ? blk[2] : NULL, p);
    uint16_t *o = (uint16_t *)(void *)base[no] + off[no] + done * st[no];
    if (st[no] == 1) {
      op->narrow((size_t)m, o, blk[no]);
    } else {
      op->narrow((size_t)m, raw, blk[no]);
      cpu_scatter(2, (size_t)m, o, st[no], raw);
    }
  }
}

static tyto_plugin_error *elt_run(const cpu_op *base, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  const elt_op *op = (const elt_op *)base;
  (void)d;
  /* The scratch fits the stack: cpu_elt_space_run cannot fail here. */
  cpu_elt_space_run(&op->sp, args, pool,
                    op->widen ? run_segment_half : run_segment, op);
  return NULL;
}

static void elt_destroy(cpu_op *op) {
  free(op);
}

/* ------------------------------------------------------------------------ */
/* CAST                                                                      */
/* ------------------------------------------------------------------------ */

/* One row of a cast, in blocks: a strided source is gathered first, a
 * strided destination converted into a block and scattered. */
static void cast_segment(const void *ctx, unsigned char *const *base,
                         const int64_t *off, int64_t n,
                         unsigned char *scratch) {
  const cpu_cast *c = ctx;
  const uint32_t r = c->sp.rank - 1;
  const size_t ei = c->sp.esz[0], eo = c->sp.esz[1];
  const int64_t si = c->sp.strides[0][r], so = c->sp.strides[1][r];
  unsigned char *tin = scratch, *tout = scratch + ELT_BLOCK * 8;
  for (int64_t done = 0; done < n; done += ELT_BLOCK) {
    int64_t m = n - done < ELT_BLOCK ? n - done : ELT_BLOCK;
    const unsigned char *src = base[0] + (off[0] + done * si) * (int64_t)ei;
    unsigned char *dst = base[1] + (off[1] + done * so) * (int64_t)eo;
    if (si != 1) {
      cpu_gather(ei, (size_t)m, tin, src, si);
      src = tin;
    }
    if (so == 1) {
      c->cvt((size_t)m, dst, src);
    } else {
      c->cvt((size_t)m, tout, src);
      cpu_scatter(eo, (size_t)m, dst, so, tout);
    }
  }
}

void cpu_cast_plan(cpu_cast *c, const tyto_plugin_layout *in,
                   const tyto_plugin_layout *out) {
  cpu_desc d;
  memset(&d, 0, sizeof d);
  d.n_in = d.n_out = 1;
  d.in[0].l = *in;
  d.out[0].l = *out;
  for (uint32_t a = 0; a < out->rank; a++)
    d.out[0].empty |= out->shape[a] == 0;
  cpu_elt_space_init(&c->sp, &d, 0);
  c->sp.scratch_bytes = 2 * ELT_BLOCK * 8;
  c->cvt = cpu_cvt(out->dtype, in->dtype);
}

void cpu_cast_run(const cpu_cast *c, unsigned char *src, unsigned char *dst,
                  cpu_pool *pool) {
  unsigned char *args[2] = {src, dst};
  /* The scratch fits the stack: this cannot fail. */
  cpu_elt_space_run(&c->sp, args, pool, cast_segment, c);
}

typedef struct cast_op {
  cpu_op base;
  cpu_cast cast;
} cast_op;

static tyto_plugin_error *cast_run(const cpu_op *base, const cpu_desc *d,
                                   unsigned char *const *args, cpu_pool *pool) {
  (void)d;
  cpu_cast_run(&((const cast_op *)base)->cast, args[0], args[1], pool);
  return NULL;
}

static tyto_plugin_error *cast_check(const tyto_plugin_host *h,
                                     const cpu_desc *desc) {
  if (desc->n_in != 1 || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "cast: expected 1 input and 1 output, got %u and %u",
                        desc->n_in, desc->n_out);
  /* Any two dtypes the plugin runs (kernels.c measured them): F32, F64,
   * F16, BF16. */
  return cpu_eltwise_check_operands(h, desc, "cast", 0);
}

/* ------------------------------------------------------------------------ */
/* Preparing                                                                 */
/* ------------------------------------------------------------------------ */

tyto_plugin_error *cpu_eltwise_check(const tyto_plugin_host *h,
                                     const cpu_desc *desc) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  if (d->op == TYTO_PLUGIN_OP_CAST)
    return cast_check(h, desc);
  int n_in = cpu_eltwise_arity(d->op);
  if (!n_in)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u is not an elementwise op known to the cpu "
                        "device",
                        d->op);
  if (desc->n_in != (uint32_t)n_in || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %d input%s and 1 output, got %u and %u",
                        name, n_in, n_in > 1 ? "s" : "", desc->n_in,
                        desc->n_out);
  int needs_attr =
      d->op == TYTO_PLUGIN_OP_LEAKY_RELU || d->op == TYTO_PLUGIN_OP_ELU;
  tyto_plugin_error *e = cpu_eltwise_check_operands(h, desc, name, 1);
  if (e)
    return e;
  if (needs_attr && d->n_fattrs < 1)
    return h->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: expected the %s as real attribute 0, got %u "
        "real attributes",
        name, d->op == TYTO_PLUGIN_OP_ELU ? "alpha" : "negative slope",
        d->n_fattrs);
  return NULL;
}

static void cast_destroy(cpu_op *op) {
  free(op);
}

tyto_plugin_error *cpu_eltwise_prepare(const tyto_plugin_host *h,
                                       const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  tyto_plugin_error *e = cpu_eltwise_check(h, desc);
  if (e)
    return e;
  if (d->op == TYTO_PLUGIN_OP_CAST) {
    cast_op *c = calloc(1, sizeof *c);
    if (!c)
      return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                          "cast: out of memory preparing the kernel");
    c->base.run = cast_run;
    c->base.destroy = cast_destroy;
    cpu_cast_plan(&c->cast, &desc->in[0].l, &desc->out[0].l);
    *out = &c->base;
    return NULL;
  }
  int n_in = cpu_eltwise_arity(d->op);
  int needs_attr =
      d->op == TYTO_PLUGIN_OP_LEAKY_RELU || d->op == TYTO_PLUGIN_OP_ELU;
  elt_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "%s: out of memory preparing the kernel", name);
  const uint32_t dt = desc->out[0].l.dtype;
  op->base.run = elt_run;
  op->base.destroy = elt_destroy;
  op->op = d->op;
  op->n_in = (uint32_t)n_in;
  op->kern = tpc_dtype_int(dt) ? cpu_eltwise_int_kern(d->op, dt)
                               : cpu_eltwise_kern(d->op, cpu_dtype_compute(dt));
  op->has_attr = needs_attr;
  op->attr[0] = needs_attr ? d->fattrs[0] : 0;
  cpu_elt_space_init(&op->sp, desc, cpu_eltwise_slow(d->op));
  op->sp.scratch_bytes = (op->n_in + 1) * ELT_BLOCK * op->sp.esize;
  if (cpu_dtype_half(dt)) {
    op->widen = cpu_cvt_arith(dt);
    op->narrow = cpu_cvt(dt, TYTO_PLUGIN_DTYPE_F32);
    op->sp.scratch_bytes = (op->n_in + 1) * ELT_BLOCK * 4 + ELT_BLOCK * 2;
  }
  *out = &op->base;
  return NULL;
}
