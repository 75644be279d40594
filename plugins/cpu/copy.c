/*
 * COPY and FILL: a strided copy between any two layouts of one shape
 * (transpose, permute, slice with steps, flip, broadcast, tile and repeat
 * all reduce to it), and a fill of any layout with one value.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct copy_op {
  cpu_op base;
  uint32_t op;
  double value;
} copy_op;

/* Walks the index space in row-major order, the last axis innermost. */
static void strided_copy(const tyto_plugin_layout *in,
                         const tyto_plugin_layout *out, size_t e,
                         unsigned char *src, unsigned char *dst) {
  int64_t n = cpu_numel(out);
  if (n == 0)
    return;
  uint32_t r = out->rank;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t inner = r ? out->shape[r - 1] : 1;
  int64_t is = r ? in->strides[r - 1] : 0, os = r ? out->strides[r - 1] : 0;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t ioff = in->offset, ooff = out->offset;
    for (uint32_t a = 0; a + 1 < r; a++) {
      ioff += idx[a] * in->strides[a];
      ooff += idx[a] * out->strides[a];
    }
    if (e == 4) {
      float *s = (float *)src + ioff, *d = (float *)dst + ooff;
      for (int64_t i = 0; i < inner; i++)
        d[i * os] = s[i * is];
    } else {
      double *s = (double *)src + ioff, *d = (double *)dst + ooff;
      for (int64_t i = 0; i < inner; i++)
        d[i * os] = s[i * is];
    }
    for (int64_t a = (int64_t)r - 2; a >= 0; a--) {
      if (++idx[a] < out->shape[a])
        break;
      idx[a] = 0;
    }
  }
}

static tyto_plugin_error *copy_run(const cpu_op *base, const cpu_desc *d,
                                   unsigned char *const *args, cpu_pool *pool) {
  (void)pool;
  const copy_op *op = (const copy_op *)base;
  const tyto_plugin_layout *out = &d->out[0].l;
  size_t e = cpu_dtype_size(out->dtype);
  if (op->op == TYTO_PLUGIN_OP_COPY) {
    strided_copy(&d->in[0].l, out, e, args[0], args[1]);
    return NULL;
  }
  /* A fill is a copy from one element broadcast everywhere. Values beyond
   * f32's range become infinities, as IEEE rounding would make them (a
   * plain conversion would be undefined behaviour in C). */
  double v = op->value;
  float f = v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
  tyto_plugin_layout one = *out;
  memset(one.strides, 0, sizeof one.strides);
  one.offset = 0;
  strided_copy(&one, out, e, e == 4 ? (unsigned char *)&f : (unsigned char *)&v,
               args[0]);
  return NULL;
}

static void copy_destroy(cpu_op *op) {
  free(op);
}

tyto_plugin_error *cpu_copy_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out) {
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
  copy_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->base.run = copy_run;
  op->base.destroy = copy_destroy;
  op->op = d->op;
  op->value = d->op == TYTO_PLUGIN_OP_FILL ? d->fattrs[0] : 0;
  *out = &op->base;
  return NULL;
}
