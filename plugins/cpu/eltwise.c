/*
 * Elementwise unary, binary and ternary ops (NEG .. FMA) on the CPU.
 *
 * Each op has one contiguous inner loop per dtype, compiled three times
 * (SSE2, AVX2+FMA, AVX-512) from eltwise_kern.h; the widest the CPU runs is
 * chosen once. Everything else is layout handling, done here once per op:
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
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eltwise_ops.h"
#include "ops.h"

/* The inner loops, at -O3: the build's -O2 uses GCC's "very cheap"
 * vectoriser cost model, which leaves loops with a remainder scalar. Without
 * trapping math floor/ceil/round and the selects vectorise. (GCC ignores
 * -fno-math-errno here, so SQRT/RSQRT stay scalar sqrt instructions.) */
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
#define ELT_BLOCK 256

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

/* The operand slot of the output in elt_op's stride arrays. */
#define ELT_OUT 3

typedef struct elt_op {
  cpu_op base;
  uint32_t op, n_in;
  size_t esize;
  elt_kern kern;
  double attr[1];
  int has_attr;
  int slow; /* libm-bound */
  /* The collapsed iteration space: rank >= 1, row-major, innermost last. */
  uint32_t rank;
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t strides[4][TYTO_PLUGIN_MAX_RANK]; /* inputs 0..2, output */
  int64_t numel, inner, rows;
  /* Tasks: rows_per_task rows each, or (when a row is longer than a chunk)
   * segs_per_row pieces of seg elements of one row. */
  int64_t rows_per_task, segs_per_row, seg, tasks;
} elt_op;

static int arity(uint32_t op) {
  if (op >= TYTO_PLUGIN_OP_NEG && op <= TYTO_PLUGIN_OP_ROUND)
    return 1;
  if (op >= TYTO_PLUGIN_OP_ADD && op <= TYTO_PLUGIN_OP_GE)
    return 2;
  if (op == TYTO_PLUGIN_OP_WHERE || op == TYTO_PLUGIN_OP_FMA)
    return 3;
  return 0;
}

/* Ops whose loops call libm rather than vectorise. */
static int is_slow(uint32_t op) {
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

/* Writes "[2,3,4]" into buf. */
static const char *shape_str(const tyto_plugin_layout *l, char *buf,
                             size_t size) {
  size_t used = 0;
  used += (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < l->rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "",
                             (long long)l->shape[i]);
  if (used < size)
    snprintf(buf + used, size - used, "]");
  return buf;
}

/* ------------------------------------------------------------------------ */
/* Running                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct elt_run_ctx {
  const elt_op *op;
  unsigned char *base[4]; /* inputs then output, offsets applied */
} elt_run_ctx;

/* Computes `n` elements of one row starting at element offsets off[]
 * (inputs and output) in blocks, staging non-unit-stride operands. */
static void run_segment(const elt_op *op, unsigned char *const *base,
                        const int64_t *off, int64_t n) {
  _Alignas(64) unsigned char buf[4][ELT_BLOCK * sizeof(double)];
  const uint32_t r = op->rank - 1;
  const size_t e = op->esize;
  const double *p = op->has_attr ? op->attr : NULL;
  int64_t st[4];
  for (uint32_t j = 0; j < 4; j++)
    st[j] = op->strides[j][r];
  /* Broadcast operands are splatted once per segment. */
  for (uint32_t j = 0; j < op->n_in; j++) {
    if (st[j] != 0)
      continue;
    int64_t m = n < ELT_BLOCK ? n : ELT_BLOCK;
    if (e == 4) {
      float v = ((const float *)base[j])[off[j]];
      for (int64_t i = 0; i < m; i++)
        ((float *)buf[j])[i] = v;
    } else {
      double v = ((const double *)base[j])[off[j]];
      for (int64_t i = 0; i < m; i++)
        ((double *)buf[j])[i] = v;
    }
  }
  for (int64_t done = 0; done < n; done += ELT_BLOCK) {
    int64_t m = n - done < ELT_BLOCK ? n - done : ELT_BLOCK;
    const void *src[3] = {NULL, NULL, NULL};
    for (uint32_t j = 0; j < op->n_in; j++) {
      int64_t s = st[j], at = off[j] + done * s;
      if (s == 1) {
        src[j] = base[j] + at * (int64_t)e;
      } else if (s == 0) {
        src[j] = buf[j];
      } else if (e == 4) {
        const float *in = (const float *)base[j] + at;
        float *t = (float *)buf[j];
        for (int64_t i = 0; i < m; i++)
          t[i] = in[i * s];
        src[j] = t;
      } else {
        const double *in = (const double *)base[j] + at;
        double *t = (double *)buf[j];
        for (int64_t i = 0; i < m; i++)
          t[i] = in[i * s];
        src[j] = t;
      }
    }
    int64_t so = st[ELT_OUT], at = off[ELT_OUT] + done * so;
    if (so == 1) {
      op->kern((size_t)m, base[ELT_OUT] + at * (int64_t)e, src[0], src[1],
               src[2], p);
    } else {
      op->kern((size_t)m, buf[ELT_OUT], src[0], src[1], src[2], p);
      if (e == 4) {
        const float *t = (const float *)buf[ELT_OUT];
        float *o = (float *)base[ELT_OUT] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = t[i];
      } else {
        const double *t = (const double *)buf[ELT_OUT];
        double *o = (double *)base[ELT_OUT] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = t[i];
      }
    }
  }
}

/* Rows [row0, row0 + nrows), elements [col0, col0 + ncols) of each. */
static void run_rows(const elt_op *op, unsigned char *const *base, int64_t row0,
                     int64_t nrows, int64_t col0, int64_t ncols) {
  const uint32_t outer = op->rank - 1;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t rem = row0;
  for (uint32_t a = outer; a-- > 0;) {
    idx[a] = rem % op->shape[a];
    rem /= op->shape[a];
  }
  for (int64_t r = 0; r < nrows; r++) {
    int64_t off[4] = {0, 0, 0, 0};
    for (uint32_t j = 0; j < 4; j++) {
      if (j < op->n_in || j == ELT_OUT) {
        off[j] = col0 * op->strides[j][outer];
        for (uint32_t a = 0; a < outer; a++)
          off[j] += idx[a] * op->strides[j][a];
      }
    }
    run_segment(op, base, off, ncols);
    for (uint32_t a = outer; a-- > 0;) {
      if (++idx[a] < op->shape[a])
        break;
      idx[a] = 0;
    }
  }
}

static void run_task(void *ctx, size_t i) {
  const elt_run_ctx *c = ctx;
  const elt_op *op = c->op;
  int64_t t = (int64_t)i;
  if (op->segs_per_row > 1) {
    int64_t row = t / op->segs_per_row, col = t % op->segs_per_row * op->seg;
    int64_t n = op->inner - col < op->seg ? op->inner - col : op->seg;
    run_rows(op, c->base, row, 1, col, n);
  } else {
    int64_t row = t * op->rows_per_task;
    int64_t n =
        op->rows - row < op->rows_per_task ? op->rows - row : op->rows_per_task;
    run_rows(op, c->base, row, n, 0, op->inner);
  }
}

static tyto_plugin_error *elt_run(const cpu_op *base, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  const elt_op *op = (const elt_op *)base;
  if (op->numel == 0)
    return NULL;
  elt_run_ctx c;
  memset(&c, 0, sizeof c);
  c.op = op;
  for (uint32_t j = 0; j < op->n_in; j++)
    c.base[j] = args[j] + d->in[j].l.offset * (int64_t)op->esize;
  c.base[ELT_OUT] = args[op->n_in] + d->out[0].l.offset * (int64_t)op->esize;
  int64_t par_min = op->slow ? ELT_PAR_MIN_SLOW : ELT_PAR_MIN_FAST;
  if (op->tasks <= 1 || op->numel < par_min || cpu_pool_size(pool) <= 1) {
    run_rows(op, c.base, 0, op->rows, 0, op->inner);
    return NULL;
  }
  cpu_pool_for(pool, (size_t)op->tasks, run_task, &c);
  return NULL;
}

static void elt_destroy(cpu_op *op) {
  free(op);
}

/* ------------------------------------------------------------------------ */
/* Preparing                                                                 */
/* ------------------------------------------------------------------------ */

/* Drops size-1 axes and merges axis a into a + 1 wherever every operand's
 * stride on a is its stride on a + 1 times that axis' extent. */
static void collapse(elt_op *op, const cpu_desc *desc) {
  const tyto_plugin_layout *out = &desc->out[0].l;
  const tyto_plugin_layout *ls[4] = {NULL, NULL, NULL, out};
  for (uint32_t j = 0; j < op->n_in; j++)
    ls[j] = &desc->in[j].l;
  uint32_t r = 0;
  for (uint32_t a = 0; a < out->rank; a++) {
    if (out->shape[a] == 1)
      continue;
    int merge = r > 0;
    for (uint32_t j = 0; j < 4 && merge; j++) {
      int64_t step;
      if (ls[j] &&
          (__builtin_mul_overflow(ls[j]->strides[a], out->shape[a], &step) ||
           op->strides[j][r - 1] != step))
        merge = 0;
    }
    if (merge) {
      op->shape[r - 1] *= out->shape[a];
      for (uint32_t j = 0; j < 4; j++)
        if (ls[j])
          op->strides[j][r - 1] = ls[j]->strides[a];
    } else {
      op->shape[r] = out->shape[a];
      for (uint32_t j = 0; j < 4; j++)
        op->strides[j][r] = ls[j] ? ls[j]->strides[a] : 0;
      r++;
    }
  }
  if (r == 0) { /* one element (rank 0 or all extents 1) */
    op->shape[0] = 1;
    for (uint32_t j = 0; j < 4; j++)
      op->strides[j][0] = 1;
    r = 1;
  }
  op->rank = r;
}

static void plan_tasks(elt_op *op) {
  op->inner = op->shape[op->rank - 1];
  op->rows = op->inner ? op->numel / op->inner : 0;
  int64_t chunk =
      op->slow ? ELT_CHUNK_ELEMS_SLOW : (int64_t)(ELT_CHUNK_BYTES / op->esize);
  if (op->inner >= 2 * chunk) {
    op->seg = chunk;
    op->segs_per_row = (op->inner + chunk - 1) / chunk;
    op->rows_per_task = 1;
    op->tasks = op->rows * op->segs_per_row;
  } else {
    op->seg = op->inner;
    op->segs_per_row = 1;
    op->rows_per_task = chunk / (op->inner ? op->inner : 1);
    if (op->rows_per_task < 1)
      op->rows_per_task = 1;
    op->tasks = (op->rows + op->rows_per_task - 1) / op->rows_per_task;
  }
}

tyto_plugin_error *cpu_eltwise_prepare(const tyto_plugin_host *h,
                                       const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  int n_in = arity(d->op);
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
  const tyto_plugin_layout *o = &desc->out[0].l;
  char s1[160], s2[160];
  for (uint32_t j = 0; j < desc->n_in; j++) {
    const tyto_plugin_layout *l = &desc->in[j].l;
    if (l->dtype != o->dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: input %u is %s but the output is %s (all "
                          "operands must have one dtype)",
                          name, j, cpu_dtype_name(l->dtype),
                          cpu_dtype_name(o->dtype));
    if (l->rank != o->rank ||
        memcmp(l->shape, o->shape, o->rank * sizeof o->shape[0]) != 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: input %u has shape %s but the output has "
                          "shape %s (inputs must arrive broadcast to the "
                          "output's shape)",
                          name, j, shape_str(l, s1, sizeof s1),
                          shape_str(o, s2, sizeof s2));
  }
  int needs_attr =
      d->op == TYTO_PLUGIN_OP_LEAKY_RELU || d->op == TYTO_PLUGIN_OP_ELU;
  if (needs_attr && d->n_fattrs < 1)
    return h->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: expected the %s as real attribute 0, got %u "
        "real attributes",
        name, d->op == TYTO_PLUGIN_OP_ELU ? "alpha" : "negative slope",
        d->n_fattrs);
  if (!desc->out[0].empty)
    for (uint32_t a = 0; a < o->rank; a++)
      if (o->strides[a] == 0 && o->shape[a] > 1)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "%s: the output has stride 0 on axis %u of "
                            "extent %lld; each output element must have its "
                            "own place",
                            name, a, (long long)o->shape[a]);

  pthread_once(&elt_once, elt_pick_isa);
  elt_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "%s: out of memory preparing the kernel", name);
  op->base.run = elt_run;
  op->base.destroy = elt_destroy;
  op->op = d->op;
  op->n_in = (uint32_t)n_in;
  op->esize = cpu_dtype_size(o->dtype);
  op->kern = elt_table[o->dtype == TYTO_PLUGIN_DTYPE_F64][d->op];
  op->has_attr = needs_attr;
  op->attr[0] = needs_attr ? d->fattrs[0] : 0;
  op->slow = is_slow(d->op);
  op->numel = desc->out[0].empty ? 0 : cpu_numel(o);
  if (op->numel > 0) {
    collapse(op, desc);
    plan_tasks(op);
  }
  *out = &op->base;
  return NULL;
}
