/*
 * SUM, MAX_REDUCE and MIN_REDUCE over I32 and I64 (ABI 1.6), into the
 * same dtype: the sum wraps modulo 2^32 or 2^64 (added in the unsigned
 * type), so any order gives the same bits. reduce.c checks the
 * descriptor; this file only runs it, in one pass over the input in
 * row-major order on the stream's thread (integer reductions are labels
 * and counts, not the bulk of a program). No elements give 0, the
 * dtype's smallest value (MAX_REDUCE) or its largest (MIN_REDUCE).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "reduce.h"

typedef struct int_red {
  cpu_op base;
  uint32_t op, dtype;
} int_red;

/* The identity of op in the dtype, as a 64-bit pattern. */
static int64_t identity(uint32_t op, uint32_t dtype) {
  int i32 = dtype == TYTO_PLUGIN_DTYPE_I32;
  if (op == TYTO_PLUGIN_OP_MAX_REDUCE)
    return i32 ? INT32_MIN : INT64_MIN;
  if (op == TYTO_PLUGIN_OP_MIN_REDUCE)
    return i32 ? INT32_MAX : INT64_MAX;
  return 0;
}

static int64_t fold(uint32_t op, int64_t a, int64_t x) {
  if (op == TYTO_PLUGIN_OP_MAX_REDUCE)
    return x > a ? x : a;
  if (op == TYTO_PLUGIN_OP_MIN_REDUCE)
    return x < a ? x : a;
  return (int64_t)((uint64_t)a + (uint64_t)x);
}

static tyto_plugin_error *int_red_run(const cpu_op *base, const cpu_desc *d,
                                      unsigned char *const *args,
                                      cpu_pool *pool) {
  const int_red *r = (const int_red *)base;
  const tyto_plugin_layout *in = &d->in[0].l, *o = &d->out[0].l;
  const int i32 = r->dtype == TYTO_PLUGIN_DTYPE_I32;
  (void)pool;
  int64_t nout = cpu_numel(o), n = cpu_numel(in);
  if (nout == 0)
    return NULL;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, oo = o->offset;
  const int64_t id = identity(r->op, r->dtype);
  /* The outputs start at the identity (written in row-major order). */
  for (int64_t k = 0; k < nout; k++) {
    if (i32)
      ((int32_t *)(void *)args[1])[oo] = (int32_t)id;
    else
      ((int64_t *)(void *)args[1])[oo] = id;
    for (uint32_t a = o->rank; a-- > 0;) {
      oo += o->strides[a];
      if (++idx[a] < o->shape[a])
        break;
      oo -= idx[a] * o->strides[a];
      idx[a] = 0;
    }
  }
  /* Then every input element folds into its output: a reduced axis has
   * extent 1 in the output, so its position there never moves. */
  int64_t io = in->offset;
  oo = o->offset;
  memset(idx, 0, sizeof idx);
  for (int64_t k = 0; k < n; k++) {
    if (i32) {
      int32_t *y = (int32_t *)(void *)args[1] + oo;
      *y = (int32_t)fold(r->op, *y, ((const int32_t *)(void *)args[0])[io]);
    } else {
      int64_t *y = (int64_t *)(void *)args[1] + oo;
      *y = fold(r->op, *y, ((const int64_t *)(void *)args[0])[io]);
    }
    for (uint32_t a = in->rank; a-- > 0;) {
      int64_t os = o->shape[a] == 1 ? 0 : o->strides[a];
      io += in->strides[a];
      oo += os;
      if (++idx[a] < in->shape[a])
        break;
      io -= idx[a] * in->strides[a];
      oo -= idx[a] * os;
      idx[a] = 0;
    }
  }
  return NULL;
}

static void int_red_destroy(cpu_op *op) {
  free(op);
}

tyto_plugin_error *red_int_prepare(const tyto_plugin_host *h,
                                   const cpu_desc *desc, cpu_op **out) {
  uint32_t op = desc->d->op;
  if (op != TYTO_PLUGIN_OP_SUM && op != TYTO_PLUGIN_OP_MAX_REDUCE &&
      op != TYTO_PLUGIN_OP_MIN_REDUCE)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: %s input is not supported by the cpu device "
                        "(integers reduce by sum, max_reduce and min_reduce)",
                        cpu_op_name(op), cpu_dtype_name(desc->in[0].l.dtype));
  int_red *r = calloc(1, sizeof *r);
  if (!r)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  r->base.run = int_red_run;
  r->base.destroy = int_red_destroy;
  r->op = op;
  r->dtype = desc->in[0].l.dtype;
  *out = &r->base;
  return NULL;
}
