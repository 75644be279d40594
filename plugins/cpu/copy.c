/*
 * COPY and FILL: a strided copy between any two layouts of one shape
 * (transpose, permute, slice with steps, flip, broadcast, tile and repeat
 * all reduce to it), and a fill of any layout with one value. Elements are
 * moved as bits of their size (2, 4 or 8 bytes), so every dtype moves
 * exactly.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct copy_op {
  cpu_op base;
  uint32_t op;
  _Alignas(
      8) unsigned char value[8]; /* FILL: the value in the output's dtype */
} copy_op;

/* n elements of e bytes from src (step is) to dst (step os). */
static void move(size_t e, int64_t n, unsigned char *dst, int64_t os,
                 const unsigned char *src, int64_t is) {
  /* memcpy of one element: a plain load and store, whatever the
   * alignment the caller's offsets leave (an f64 at a 4-byte offset is no
   * undefined behaviour this way). */
#define MOVE(T)                                                                \
  do {                                                                         \
    for (int64_t i = 0; i < n; i++)                                            \
      memcpy(dst + i * os * (int64_t)sizeof(T),                                \
             src + i * is * (int64_t)sizeof(T), sizeof(T));                    \
  } while (0)
  if (e == 2)
    MOVE(uint16_t);
  else if (e == 4)
    MOVE(uint32_t);
  else
    MOVE(uint64_t);
#undef MOVE
}

/* Walks the index space in row-major order, the last axis innermost. */
/* A copy split into blocks of rows (a row: the innermost axis) for the
 * pool. Rows of both sides with unit stride are memcpy'd. */
typedef struct copy_job {
  const tyto_plugin_layout *in, *out;
  size_t e;
  unsigned char *src, *dst;
  int64_t rows, inner, rows_per_block;
} copy_job;

/* Target bytes per block: big enough to amortise the hand-off, small
 * enough to spread work over the cores. */
#define COPY_BLOCK_BYTES ((int64_t)64 << 10)

static void copy_block(void *ctx, size_t block) {
  const copy_job *j = ctx;
  const tyto_plugin_layout *in = j->in, *out = j->out;
  uint32_t r = out->rank;
  int64_t first = (int64_t)block * j->rows_per_block;
  int64_t last = first + j->rows_per_block;
  if (last > j->rows)
    last = j->rows;
  /* The multi-index of the first row of the block. */
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, rem = first;
  for (int64_t a = (int64_t)r - 2; a >= 0; a--) {
    idx[a] = rem % out->shape[a];
    rem /= out->shape[a];
  }
  int64_t is = r ? in->strides[r - 1] : 0, os = r ? out->strides[r - 1] : 0;
  size_t e = j->e;
  for (int64_t row = first; row < last; row++) {
    int64_t ioff = in->offset, ooff = out->offset;
    for (uint32_t a = 0; a + 1 < r; a++) {
      ioff += idx[a] * in->strides[a];
      ooff += idx[a] * out->strides[a];
    }
    if (is == 1 && os == 1)
      memcpy(j->dst + ooff * (int64_t)e, j->src + ioff * (int64_t)e,
             (size_t)j->inner * e);
    else
      move(e, j->inner, j->dst + ooff * (int64_t)e, os,
           j->src + ioff * (int64_t)e, is);
    for (int64_t a = (int64_t)r - 2; a >= 0; a--) {
      if (++idx[a] < out->shape[a])
        break;
      idx[a] = 0;
    }
  }
}

static void strided_copy(const tyto_plugin_layout *in,
                         const tyto_plugin_layout *out, size_t e,
                         unsigned char *src, unsigned char *dst,
                         cpu_pool *pool) {
  int64_t n = cpu_numel(out);
  if (n == 0)
    return;
  copy_job j = {in, out, e, src, dst, 0, 0, 0};
  /* Both sides packed row-major: one row of n elements. */
  if (cpu_contiguous(in) && cpu_contiguous(out)) {
    tyto_plugin_layout flat_in = *in, flat_out = *out;
    flat_in.rank = flat_out.rank = 1;
    flat_in.shape[0] = flat_out.shape[0] = n;
    flat_in.strides[0] = flat_out.strides[0] = 1;
    /* Split the single row into blocks through a [blocks, block] view. */
    int64_t block = COPY_BLOCK_BYTES / (int64_t)e * 4;
    if (n > block) {
      int64_t rows = n / block;
      flat_in.rank = flat_out.rank = 2;
      flat_in.shape[0] = flat_out.shape[0] = rows;
      flat_in.shape[1] = flat_out.shape[1] = block;
      flat_in.strides[0] = flat_out.strides[0] = block;
      flat_in.strides[1] = flat_out.strides[1] = 1;
      int64_t tail = n - rows * block;
      j.in = &flat_in;
      j.out = &flat_out;
      j.rows = rows;
      j.inner = block;
      j.rows_per_block = 1;
      cpu_pool_for(pool, (size_t)rows, copy_block, &j);
      if (tail)
        memcpy(dst + (out->offset + rows * block) * (int64_t)e,
               src + (in->offset + rows * block) * (int64_t)e,
               (size_t)tail * e);
      return;
    }
    j.in = &flat_in;
    j.out = &flat_out;
    j.rows = 1;
    j.inner = n;
    j.rows_per_block = 1;
    copy_block(&j, 0);
    return;
  }
  uint32_t r = out->rank;
  j.inner = r ? out->shape[r - 1] : 1;
  j.rows = n / j.inner;
  int64_t row_bytes = j.inner * (int64_t)e;
  j.rows_per_block =
      row_bytes >= COPY_BLOCK_BYTES ? 1 : COPY_BLOCK_BYTES / row_bytes;
  int64_t blocks = (j.rows + j.rows_per_block - 1) / j.rows_per_block;
  if (blocks == 1)
    copy_block(&j, 0);
  else
    cpu_pool_for(pool, (size_t)blocks, copy_block, &j);
}

static tyto_plugin_error *copy_run(const cpu_op *base, const cpu_desc *d,
                                   unsigned char *const *args, cpu_pool *pool) {
  const copy_op *op = (const copy_op *)base;
  const tyto_plugin_layout *out = &d->out[0].l;
  size_t e = cpu_dtype_size(out->dtype);
  if (op->op == TYTO_PLUGIN_OP_COPY) {
    strided_copy(&d->in[0].l, out, e, args[0], args[1], pool);
    return NULL;
  }
  /* A fill is a copy from one element broadcast everywhere. */
  tyto_plugin_layout one = *out;
  memset(one.strides, 0, sizeof one.strides);
  one.offset = 0;
  strided_copy(&one, out, e, (unsigned char *)op->value, args[0], pool);
  return NULL;
}

static void copy_destroy(cpu_op *op) {
  free(op);
}

tyto_plugin_error *cpu_copy_check(const tyto_plugin_host *h,
                                  const cpu_desc *desc) {
  const tyto_plugin_op_desc *d = desc->d;
  uint32_t want_in = d->op == TYTO_PLUGIN_OP_COPY ? 1 : 0;
  if (desc->n_in != want_in || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %u input and 1 output, got %u and %u",
                        cpu_op_name(d->op), want_in, desc->n_in, desc->n_out);
  if (d->op == TYTO_PLUGIN_OP_FILL && d->n_fattrs < 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fill: expected the value as real attribute 0, got %u "
                        "real attributes",
                        d->n_fattrs);
  if (want_in) {
    const tyto_plugin_layout *in = &desc->in[0].l, *o = &desc->out[0].l;
    if (in->dtype != o->dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "copy: input is %s but output is %s",
                          cpu_dtype_name(in->dtype), cpu_dtype_name(o->dtype));
    if (in->rank != o->rank ||
        memcmp(in->shape, o->shape, in->rank * sizeof(int64_t)) != 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "copy: input and output shapes differ");
  }
  return NULL;
}

tyto_plugin_error *cpu_copy_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  tyto_plugin_error *e = cpu_copy_check(h, desc);
  if (e)
    return e;
  copy_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->base.run = copy_run;
  op->base.destroy = copy_destroy;
  op->op = d->op;
  /* The value rounded once to the dtype (1e300 in f32 is +inf; subnormals
   * kept whatever the thread's FTZ). */
  if (d->op == TYTO_PLUGIN_OP_FILL)
    cpu_cvt(desc->out[0].l.dtype, TYTO_PLUGIN_DTYPE_F64)(1, op->value,
                                                         &d->fattrs[0]);
  *out = &op->base;
  return NULL;
}
