/*
 * COPY (any dtype: it moves bits) and FILL (f32, f64, f16, bf16: the value
 * rounded once from the double; i32, i64: converted as CAST converts it;
 * STD, tcu_dtype_defs).
 *
 * A kernel is specialised on what changes its code (op, element size,
 * rank, index width) and takes shape and strides as a by-value argument,
 * so one compiled module serves every tensor of the same rank and type.
 * At prepare, dimensions of extent 1 are dropped and dimensions contiguous
 * in every tensor merged, so a transposed copy of a [64,3,32,32] tensor
 * runs as rank 2-3; each thread of a grid-stride loop turns its linear
 * output index into coordinates (row-major, last dimension fastest) and
 * them into element offsets; strides may be zero or negative. 32-bit
 * index arithmetic, several times cheaper on the GPU, is used whenever no
 * index the kernel forms can exceed int32.
 */
#include "ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cf_args {
  int64_t n;
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t in_stride[TYTO_PLUGIN_MAX_RANK];
  int64_t out_stride[TYTO_PLUGIN_MAX_RANK];
  double value;
} cf_args;

typedef struct cf_kernel {
  cudaKernel_t fn;
  cf_args args;
  unsigned grid;
} cf_kernel;

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_COPY || op == TYTO_PLUGIN_OP_FILL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const int copy = d->op == TYTO_PLUGIN_OP_COPY;
  const char *op = tcu_op_name(d->op);
  char s1[160], s2[160];
  if (d->n_in != (copy ? 1u : 0u) || d->n_out != 1)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: takes %u input and 1 output, got %u and %u", op,
                           copy ? 1u : 0u, (unsigned)d->n_in,
                           (unsigned)d->n_out);
  const tyto_plugin_layout *out = &d->out[0].l;
  if (copy) {
    const tyto_plugin_layout *in = &d->in[0].l;
    if (in->rank != out->rank ||
        memcmp(in->shape, out->shape, in->rank * sizeof in->shape[0]) != 0)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "copy: input shape %s differs from output shape "
                             "%s (broadcast with stride 0, not by shape)",
                             tcu_shape_str(in, s1, sizeof s1),
                             tcu_shape_str(out, s2, sizeof s2));
  } else if (d->d->n_fattrs < 1) {
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "fill: needs its value in fattrs[0], got no real "
                           "attributes");
  }
  /* Two threads writing one element would race: an output stride of 0 is
   * only harmless on an extent of 1. */
  for (uint32_t k = 0; k < out->rank && d->out[0].n > 0; k++)
    if (out->strides[k] == 0 && out->shape[k] > 1)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: output stride of dimension %u is 0 with "
                             "extent %lld; outputs must not overlap",
                             op, (unsigned)k, (long long)out->shape[k]);
  return NULL;
}

static const char *bits_type(size_t elem) {
  switch (elem) {
  case 1: return "unsigned char";
  case 2: return "unsigned short";
  case 4: return "unsigned int";
  default: return "unsigned long long";
  }
}

/* Source of kernel tyto_copy / tyto_fill over `rank` dimensions (dimension
 * 0 slowest). NULL when out of memory. */
static char *source(int copy, size_t elem, uint32_t rank, int idx32) {
  char head[512], body[4096];
  size_t at = 0;
  snprintf(head, sizeof head,
           "typedef %s E;\n"
           "typedef %s I;\n"
           "struct cf_args { i64 n; i64 shape[8]; i64 in_stride[8];\n"
           "                 i64 out_stride[8]; double value; };\n"
           "extern \"C\" __global__ void __launch_bounds__(%d)\n"
           "%s",
           copy ? bits_type(elem) : "S", idx32 ? "int" : "i64", TCU_BLOCK,
           copy ? "tyto_copy(const E *in, E *out, const cf_args a) {\n"
                : "tyto_fill(E *out, const cf_args a) {\n");
  at += (size_t)snprintf(body + at, sizeof body - at,
                         "  TYTO_FOR(i, a.n) {\n    I dst = 0, src = 0;\n"
                         "    I rem = (I)i;\n");
  for (uint32_t k = rank; k-- > 1;)
    at += (size_t)snprintf(body + at, sizeof body - at,
                           "    { I c = rem %% (I)a.shape[%u];\n"
                           "      rem /= (I)a.shape[%u];\n"
                           "      dst += c * (I)a.out_stride[%u];\n"
                           "      src += c * (I)a.in_stride[%u]; }\n",
                           k, k, k, k);
  /* What is left of the index is dimension 0's coordinate. */
  if (rank > 0)
    at += (size_t)snprintf(body + at, sizeof body - at,
                           "    dst += rem * (I)a.out_stride[0];\n"
                           "    src += rem * (I)a.in_stride[0];\n");
  snprintf(body + at, sizeof body - at,
           "    (void)src;\n    out[dst] = %s;\n  }\n}\n",
           copy ? "in[src]" : "STD(a.value)");
  const char *parts[] = {head, body};
  return tcu_source_join(parts, 2);
}

/* The largest |index| the kernel forms for a layout: sum |(extent-1)*stride|
 * (checked against overflow by kernels.c's reach computation). */
static int64_t reach(const int64_t *shape, const int64_t *stride, uint32_t r) {
  int64_t s = 0;
  for (uint32_t k = 0; k < r; k++) {
    int64_t d = (shape[k] - 1) * stride[k];
    s += d < 0 ? -d : d;
  }
  return s;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  const int copy = d->op == TYTO_PLUGIN_OP_COPY;
  cf_kernel *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  k->impl = c;
  const tyto_plugin_layout *out = &d->out[0].l;
  const tyto_plugin_layout *in = copy ? &d->in[0].l : out;
  c->args.n = d->out[0].n;
  c->args.value = copy ? 0.0 : d->d->fattrs[0];
  if (c->args.n == 0)
    return NULL;
  /* Drop extent-1 dimensions; merge an outer dimension into the next
   * inner one where, in both tensors, outer stride == inner stride * inner
   * extent. */
  uint32_t r = 0;
  for (uint32_t a = 0; a < out->rank; a++) {
    int64_t m1, m2;
    if (out->shape[a] == 1)
      continue;
    if (r > 0 && !__builtin_mul_overflow(in->strides[a], out->shape[a], &m1) &&
        m1 == c->args.in_stride[r - 1] &&
        !__builtin_mul_overflow(out->strides[a], out->shape[a], &m2) &&
        m2 == c->args.out_stride[r - 1]) {
      c->args.shape[r - 1] *= out->shape[a];
      c->args.in_stride[r - 1] = copy ? in->strides[a] : 0;
      c->args.out_stride[r - 1] = out->strides[a];
      continue;
    }
    c->args.shape[r] = out->shape[a];
    c->args.in_stride[r] = copy ? in->strides[a] : 0;
    c->args.out_stride[r] = out->strides[a];
    r++;
  }
  int idx32 = c->args.n <= INT32_MAX &&
              reach(c->args.shape, c->args.out_stride, r) <= INT32_MAX &&
              reach(c->args.shape, c->args.in_stride, r) <= INT32_MAX;
  char *src = source(copy, d->elem, r, idx32);
  if (src == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  tyto_plugin_error *e =
      tcu_function(dev, copy ? TYTO_PLUGIN_DTYPE_F32 : d->dtype, src,
                   copy ? "tyto_copy" : "tyto_fill", &c->fn);
  free(src);
  c->grid = tcu_blocks(dev, c->args.n);
  return e;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  (void)ws;
  const cf_kernel *c = k->impl;
  cf_args args = c->args;
  void *src = k->desc.op == TYTO_PLUGIN_OP_COPY ? in[0].ptr : NULL;
  void *dst = out[0].ptr;
  void *copy_params[] = {&src, &dst, &args};
  void *fill_params[] = {&dst, &args};
  return tcu_run(dev, s, c->fn, (dim3){c->grid, 1, 1}, (dim3){TCU_BLOCK, 1, 1},
                 0, src != NULL ? copy_params : fill_params,
                 k->desc.op == TYTO_PLUGIN_OP_COPY ? "copy" : "fill");
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

const tcu_family tcu_family_copyfill = {"copyfill", owns,   check,
                                        prepare,    launch, release};
